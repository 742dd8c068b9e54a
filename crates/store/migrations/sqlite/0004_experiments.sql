-- Sticky assignments: one per (campaign, unit), never updated.
CREATE TABLE assignments (
    tenant_id       TEXT NOT NULL,
    campaign_id     TEXT NOT NULL,
    unit_id         TEXT NOT NULL,
    assignment_id   TEXT NOT NULL,
    arm             TEXT NOT NULL,
    version         INTEGER NOT NULL,
    assigned_at_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, campaign_id, unit_id)
);
CREATE UNIQUE INDEX assignments_by_id ON assignments (tenant_id, assignment_id);
CREATE INDEX assignments_by_arm ON assignments (tenant_id, campaign_id, version, arm);

-- Outcomes: unique on (assignment, caller's dedupe key), written with ON CONFLICT DO
-- NOTHING. The campaign, arm and assignment time are copied from the assignment so the
-- report reads one table.
CREATE TABLE outcomes (
    tenant_id       TEXT NOT NULL,
    assignment_id   TEXT NOT NULL,
    dedupe_key      TEXT NOT NULL,
    campaign_id     TEXT NOT NULL,
    arm             TEXT NOT NULL,
    assigned_at_us  BIGINT NOT NULL,
    metric          TEXT NOT NULL,
    value           REAL,
    occurred_at_us  BIGINT NOT NULL,
    received_at_us  BIGINT NOT NULL,
    fingerprint     TEXT NOT NULL,
    PRIMARY KEY (tenant_id, assignment_id, dedupe_key)
);
CREATE INDEX outcomes_by_campaign ON outcomes (tenant_id, campaign_id);

-- Every suppressed duplicate, with its arrival time, so the report can rebuild what a
-- pipeline without dedupe would have counted. Append-only.
CREATE TABLE outcome_duplicates (
    tenant_id       TEXT NOT NULL,
    campaign_id     TEXT NOT NULL,
    assignment_id   TEXT NOT NULL,
    dedupe_key      TEXT NOT NULL,
    arm             TEXT NOT NULL,
    assigned_at_us  BIGINT NOT NULL,
    metric          TEXT NOT NULL,
    value           REAL,
    occurred_at_us  BIGINT NOT NULL,
    arrived_at_us   BIGINT NOT NULL
);
CREATE INDEX outcome_duplicates_by_campaign ON outcome_duplicates (tenant_id, campaign_id);

-- Same (assignment, dedupe key), different payload: logged, nothing overwritten.
CREATE TABLE outcome_collisions (
    tenant_id         TEXT NOT NULL,
    assignment_id     TEXT NOT NULL,
    dedupe_key        TEXT NOT NULL,
    campaign_id       TEXT NOT NULL,
    incoming_payload  TEXT NOT NULL,
    received_at_us    BIGINT NOT NULL
);
CREATE INDEX outcome_collisions_by_campaign ON outcome_collisions (tenant_id, campaign_id);

-- Per-unit sums of each metric, maintained in the same transaction as every outcome and
-- duplicate, so the report reads one row per (unit, metric) instead of every outcome.
-- `ev_*` count outcomes inside the metric's event-time window, `ar_*` inside its
-- arrival-time window; `n`/`v` stored outcomes and their values, `dn`/`dv` suppressed
-- duplicates. A derived table: it can be rebuilt from outcomes and outcome_duplicates.
CREATE TABLE unit_metrics (
    tenant_id      TEXT NOT NULL,
    campaign_id    TEXT NOT NULL,
    metric         TEXT NOT NULL,
    assignment_id  TEXT NOT NULL,
    arm            TEXT NOT NULL,
    ev_n   BIGINT NOT NULL DEFAULT 0,
    ev_v   REAL NOT NULL DEFAULT 0,
    ev_dn  BIGINT NOT NULL DEFAULT 0,
    ev_dv  REAL NOT NULL DEFAULT 0,
    ar_n   BIGINT NOT NULL DEFAULT 0,
    ar_v   REAL NOT NULL DEFAULT 0,
    ar_dn  BIGINT NOT NULL DEFAULT 0,
    ar_dv  REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, campaign_id, metric, assignment_id)
);
