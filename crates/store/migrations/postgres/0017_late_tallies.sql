-- Events a call stored or matched in the detached partitions (a backfill's, or the live
-- path's with `--late-events reconcile`): counted apart from the live ingestion, because
-- each of them costs a reconciliation against an index outside the live horizon.
ALTER TABLE event_tallies ADD COLUMN late BIGINT NOT NULL DEFAULT 0;

-- The per-request count rows of Segment sources and metric bindings are folded like
-- `event_tallies` (one row per key and minute), so `GET /sources` and a campaign's
-- bindings read a bounded number of rows however long a source has been sending.
ALTER TABLE source_tallies ADD COLUMN rolled_up INTEGER NOT NULL DEFAULT 0;
ALTER TABLE binding_tallies ADD COLUMN rolled_up INTEGER NOT NULL DEFAULT 0;
