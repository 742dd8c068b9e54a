-- Lineage graph of OpenLineage RunEvents (contract openlineage.run_event). The events
-- themselves are rows of `events`; these tables are derived from newly inserted rows only,
-- in the inserting transaction, so a duplicate event can never add a run or an edge.
-- Rows are sets: inserted with ON CONFLICT DO NOTHING, never updated.
-- Every unique key starts with tenant_id so the schema distributes by tenant.
CREATE TABLE lineage_jobs (
    tenant_id      TEXT NOT NULL,
    namespace      TEXT NOT NULL,
    name           TEXT NOT NULL,
    first_seen_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, namespace, name)
);

CREATE TABLE lineage_datasets (
    tenant_id      TEXT NOT NULL,
    namespace      TEXT NOT NULL,
    name           TEXT NOT NULL,
    first_seen_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, namespace, name)
);

-- One row per run id; the job is the one named by the run's first stored event.
CREATE TABLE lineage_runs (
    tenant_id       TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    job_namespace   TEXT NOT NULL,
    job_name        TEXT NOT NULL,
    first_event_id  TEXT NOT NULL,
    first_seen_us   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE INDEX lineage_runs_by_job ON lineage_runs (tenant_id, job_namespace, job_name, run_id);

-- version is '' when no version facet gave one (a key column cannot be NULL).
CREATE TABLE lineage_run_inputs (
    tenant_id  TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, namespace, name, version)
);
CREATE INDEX lineage_run_inputs_by_dataset ON lineage_run_inputs (tenant_id, namespace, name, run_id);

CREATE TABLE lineage_run_outputs (
    tenant_id  TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, namespace, name, version)
);
CREATE INDEX lineage_run_outputs_by_dataset ON lineage_run_outputs (tenant_id, namespace, name, run_id);
