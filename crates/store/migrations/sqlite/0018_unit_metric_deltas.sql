-- Per-unit sums appended by the transactions that store corrections, one row per (unit,
-- metric). (On PostgreSQL outcome batches append here too, so that concurrent batches
-- naming the same units never wait on each other's row locks; SQLite's one writer at a
-- time never waits on a row, and its outcome batches keep adding to `unit_metrics` in
-- place.) `Store::fold_unit_metrics` moves these rows into `unit_metrics` (still one row
-- per unit and metric): in the background, and for one campaign before its report reads
-- the sums.
CREATE TABLE unit_metric_deltas (
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
    ar_dv  REAL NOT NULL DEFAULT 0
);
CREATE INDEX unit_metric_deltas_by_campaign ON unit_metric_deltas (tenant_id, campaign_id);
