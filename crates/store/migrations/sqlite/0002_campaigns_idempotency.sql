-- Campaigns (experiments) and their immutable published versions.
CREATE TABLE campaigns (
    tenant_id      TEXT NOT NULL,
    campaign_id    TEXT NOT NULL,
    campaign_key   TEXT NOT NULL,
    name           TEXT NOT NULL,
    arms           TEXT NOT NULL,
    metrics        TEXT NOT NULL,
    salt           TEXT NOT NULL,
    created_at_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, campaign_id),
    UNIQUE (tenant_id, campaign_key)
);

-- Rows are inserted, never updated: a version is immutable once published.
CREATE TABLE campaign_versions (
    tenant_id        TEXT NOT NULL,
    campaign_id      TEXT NOT NULL,
    version          INTEGER NOT NULL,
    arms             TEXT NOT NULL,
    metrics          TEXT NOT NULL,
    salt             TEXT NOT NULL,
    note             TEXT,
    published_at_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, campaign_id, version)
);

-- Transport idempotency (layer 2). The primary key serialises concurrent duplicates
-- across server processes; `owner` is the token of the attempt holding the reservation,
-- so a stale reservation is taken over by compare-and-set and a late owner cannot
-- complete it. `status` is NULL while in flight.
CREATE TABLE idempotency_keys (
    tenant_id        TEXT NOT NULL,
    idem_key         TEXT NOT NULL,
    checksum         TEXT NOT NULL,
    owner            TEXT NOT NULL,
    reserved_at_us   BIGINT NOT NULL,
    status           INTEGER,
    headers          TEXT,
    body             BLOB,
    completed_at_us  BIGINT,
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (reserved_at_us);
