-- Per-unit sums are appended, never updated, by the transactions that store outcomes and
-- corrections: one row per (unit, metric) a transaction touches. Concurrent batches
-- naming the same units therefore never wait on each other's row locks (with
-- `unit_metrics` updated in place they ran one after another). `Store::fold_unit_metrics`
-- moves these rows into `unit_metrics` (still one row per unit and metric): in the
-- background, and for one campaign before its report reads the sums.
CREATE TABLE unit_metric_deltas (
    tenant_id      TEXT NOT NULL,
    campaign_id    TEXT NOT NULL,
    metric         TEXT NOT NULL,
    assignment_id  TEXT NOT NULL,
    arm            TEXT NOT NULL,
    ev_n   BIGINT NOT NULL DEFAULT 0,
    ev_v   DOUBLE PRECISION NOT NULL DEFAULT 0,
    ev_dn  BIGINT NOT NULL DEFAULT 0,
    ev_dv  DOUBLE PRECISION NOT NULL DEFAULT 0,
    ar_n   BIGINT NOT NULL DEFAULT 0,
    ar_v   DOUBLE PRECISION NOT NULL DEFAULT 0,
    ar_dn  BIGINT NOT NULL DEFAULT 0,
    ar_dv  DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX unit_metric_deltas_by_campaign ON unit_metric_deltas (tenant_id, campaign_id);
