-- The latest semantic-duplicate scan of each contract version (docs/semantic-scan.md):
-- a derived report kept as JSON, replaced by the next scan of the same version.
CREATE TABLE semantic_scans (
    tenant_id         TEXT NOT NULL,
    contract_name     TEXT NOT NULL,
    contract_version  INTEGER NOT NULL,
    scanned_at_us     BIGINT NOT NULL,
    report            TEXT NOT NULL,
    PRIMARY KEY (tenant_id, contract_name, contract_version, scanned_at_us)
);

-- Corrections of outcomes (docs/experiments.md, "Correcting an outcome"). Every outcome
-- gets its deterministic id (traqlyte_experiments::outcome_id: tenant, campaign,
-- assignment, dedupe key), written with each new row; rows stored before this migration
-- get theirs from Store::migrate right after it (SQLite has no SHA-256 in SQL). The id is
-- derived from the row's key, so filling it changes nothing the row says.
ALTER TABLE outcomes ADD COLUMN outcome_id TEXT;
CREATE UNIQUE INDEX outcomes_by_outcome_id ON outcomes (tenant_id, outcome_id);

-- A correction names the value it replaces; the original outcome row is never rewritten
-- and the newest correction (highest seq) is the current value.
CREATE TABLE outcome_supersessions (
    tenant_id          TEXT NOT NULL,
    outcome_id         TEXT NOT NULL,
    seq                INTEGER NOT NULL,
    campaign_id        TEXT NOT NULL,
    value              DOUBLE PRECISION,
    supersedes_value   DOUBLE PRECISION,
    reason             TEXT NOT NULL,
    superseded_at_us   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, outcome_id, seq)
);
CREATE INDEX outcome_supersessions_by_campaign ON outcome_supersessions (tenant_id, campaign_id);
