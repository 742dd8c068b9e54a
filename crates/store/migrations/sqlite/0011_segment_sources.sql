-- Segment-compatible tracking API (docs/segment.md): sources and their write keys, the
-- messages a batch rejected, per-source counts, and metric bindings that turn tracked
-- events into experiment outcomes. Every unique key starts with tenant_id, except the
-- write-key hash, which (like api_keys.key_hash) is how a request finds its tenant.

-- Only a SHA-256 of each write key is stored. Revoking marks the row, never deletes it.
CREATE TABLE sources (
    tenant_id       TEXT NOT NULL,
    source_id       TEXT NOT NULL,
    name            TEXT NOT NULL,
    write_key_hash  TEXT NOT NULL,
    key_prefix      TEXT NOT NULL,
    created_at_us   BIGINT NOT NULL,
    revoked_at_us   BIGINT,
    PRIMARY KEY (tenant_id, source_id)
);
CREATE UNIQUE INDEX sources_by_write_key ON sources (write_key_hash);
CREATE UNIQUE INDEX sources_by_name ON sources (tenant_id, name);

-- A message of an accepted batch that was refused alone, with its reason.
CREATE TABLE source_rejections (
    rejection_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    source_id       TEXT NOT NULL,
    message_index   INTEGER NOT NULL,
    code            TEXT NOT NULL,
    field           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    payload         TEXT NOT NULL,
    received_at_us  BIGINT NOT NULL
);
CREATE INDEX source_rejections_by_source ON source_rejections (tenant_id, source_id, received_at_us);

-- Append-only counts, one row per request: no hot counter row to lock.
CREATE TABLE source_tallies (
    tenant_id   TEXT NOT NULL,
    source_id   TEXT NOT NULL,
    at_us       BIGINT NOT NULL,
    inserted    BIGINT NOT NULL,
    duplicates  BIGINT NOT NULL,
    collisions  BIGINT NOT NULL,
    rejected    BIGINT NOT NULL
);
CREATE INDEX source_tallies_by_source ON source_tallies (tenant_id, source_id);

-- A campaign metric fed by tracked events. Inserted, never updated.
CREATE TABLE metric_bindings (
    tenant_id      TEXT NOT NULL,
    campaign_id    TEXT NOT NULL,
    metric         TEXT NOT NULL,
    event          TEXT NOT NULL,
    value_pointer  TEXT,
    key_pointer    TEXT,
    created_at_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, campaign_id, metric, event)
);
CREATE INDEX metric_bindings_by_event ON metric_bindings (tenant_id, event);

-- What each binding did with the messages it matched, one row per request.
CREATE TABLE binding_tallies (
    tenant_id    TEXT NOT NULL,
    campaign_id  TEXT NOT NULL,
    metric       TEXT NOT NULL,
    event        TEXT NOT NULL,
    at_us        BIGINT NOT NULL,
    outcomes     BIGINT NOT NULL,
    unassigned   BIGINT NOT NULL,
    unusable     BIGINT NOT NULL
);
CREATE INDEX binding_tallies_by_binding ON binding_tallies (tenant_id, campaign_id, metric, event);
