-- Events a call stored or matched in the detached partitions (a backfill's, or the live
-- path's with `--late-events reconcile`): counted apart from the live ingestion, because
-- each of them costs a reconciliation against an index outside the live horizon.
ALTER TABLE event_tallies ADD COLUMN late BIGINT NOT NULL DEFAULT 0;
