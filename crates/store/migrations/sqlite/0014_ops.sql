-- Operations (issue 13): the duplicate-rate trend per source, collisions per source,
-- and per-tenant webhooks fed by an outbox.

-- Which surface delivered the counted events: `http`, `segment:{source_id}` or
-- `nats:{stream}`. Rows written before this migration were all counted without a
-- source; they are read as `http`, the only surface that tallied per call then besides
-- the consumer and Segment (whose older rows are indistinguishable and stay `http`).
ALTER TABLE event_tallies ADD COLUMN source TEXT NOT NULL DEFAULT 'http';
-- The trend reads a tenant's rows in a time range, any contract.
CREATE INDEX event_tallies_by_time ON event_tallies (tenant_id, at_us);

ALTER TABLE event_collisions ADD COLUMN source TEXT NOT NULL DEFAULT 'http';
-- `GET /ops/collisions` pages a tenant's collisions newest first.
CREATE INDEX event_collisions_by_tenant ON event_collisions (tenant_id, received_at_us, collision_id);

-- A tenant's webhook endpoints. Deleting one marks it; deliveries already queued for it
-- are dropped by the dispatcher.
CREATE TABLE webhooks (
    tenant_id      TEXT NOT NULL,
    webhook_id     TEXT NOT NULL,
    url            TEXT NOT NULL,
    created_at_us  BIGINT NOT NULL,
    deleted_at_us  BIGINT,
    PRIMARY KEY (tenant_id, webhook_id)
);

-- The outbox: one row per (collision, live webhook), written in the transaction that
-- logs the collision, so a collision is never lost between the commit and a call.
-- The dispatcher claims due rows with a lease (`lease_until_us`), so several servers
-- may run it; a delivery whose lease ran out is claimed again (at least once; the
-- receiver dedupes on `delivery_id`).
CREATE TABLE webhook_deliveries (
    tenant_id           TEXT NOT NULL,
    delivery_id         TEXT NOT NULL,
    webhook_id          TEXT NOT NULL,
    collision_id        BIGINT NOT NULL,
    created_at_us       BIGINT NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_us  BIGINT NOT NULL,
    lease_until_us      BIGINT NOT NULL DEFAULT 0,
    lease_owner         TEXT,
    delivered_at_us     BIGINT,
    last_error          TEXT,
    PRIMARY KEY (tenant_id, delivery_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at_us) WHERE delivered_at_us IS NULL;
