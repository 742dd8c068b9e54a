-- Jobs and datasets are no longer rows of their own: a job is known once a run of it is
-- stored (`lineage_runs_by_job`), a dataset once a run read or wrote it
-- (`lineage_run_inputs_by_dataset`, `lineage_run_outputs_by_dataset`), which is what every
-- graph read already walks. Their tables held nothing else that was read (`first_seen_us`
-- was never shown), and were the rows concurrent batches shared while new, so each batch
-- that named a dataset another uncommitted batch had just inserted waited for that commit
-- (BENCHMARKS.md, "Lineage without node rows"). Every row they held is derivable from the
-- runs and edges, which stay.
DROP TABLE lineage_jobs;
DROP TABLE lineage_datasets;
