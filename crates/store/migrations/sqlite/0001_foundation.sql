-- Foundation: tenants, API keys, identity contracts, deduplicated events.
-- Every unique key starts with tenant_id so the schema distributes by tenant.
CREATE TABLE tenants (
    tenant_id      TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    created_at_us  BIGINT NOT NULL
);

-- Only a SHA-256 of each API key is stored.
CREATE TABLE api_keys (
    key_hash       TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (tenant_id),
    created_at_us  BIGINT NOT NULL
);

-- (tenant, name, version) is immutable: rows are inserted, never updated.
CREATE TABLE contracts (
    tenant_id      TEXT NOT NULL,
    name           TEXT NOT NULL,
    version        INTEGER NOT NULL,
    definition     TEXT NOT NULL,
    created_at_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

-- The fact table. The primary key is the dedupe guarantee; rows are written with
-- INSERT ... ON CONFLICT DO NOTHING and never updated.
CREATE TABLE events (
    tenant_id         TEXT NOT NULL,
    contract_name     TEXT NOT NULL,
    event_id          TEXT NOT NULL,
    contract_version  INTEGER NOT NULL,
    fingerprint       TEXT NOT NULL,
    payload           TEXT NOT NULL,
    occurred_at_us    BIGINT,
    received_at_us    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, contract_name, event_id)
);

-- Two different events under one identity: the incoming one is logged here, the
-- stored one is left untouched.
CREATE TABLE event_collisions (
    collision_id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id             TEXT NOT NULL,
    contract_name         TEXT NOT NULL,
    event_id              TEXT NOT NULL,
    contract_version      INTEGER NOT NULL,
    stored_fingerprint    TEXT NOT NULL,
    incoming_fingerprint  TEXT NOT NULL,
    stored_payload        TEXT NOT NULL,
    incoming_payload      TEXT NOT NULL,
    received_at_us        BIGINT NOT NULL
);
CREATE INDEX event_collisions_by_contract ON event_collisions (tenant_id, contract_name, received_at_us);

-- Append-only counts, one row per ingestion call: no hot counter row to lock.
CREATE TABLE event_tallies (
    tenant_id      TEXT NOT NULL,
    contract_name  TEXT NOT NULL,
    at_us          BIGINT NOT NULL,
    inserted       BIGINT NOT NULL,
    duplicates     BIGINT NOT NULL,
    collisions     BIGINT NOT NULL
);
CREATE INDEX event_tallies_by_contract ON event_tallies (tenant_id, contract_name, at_us);
