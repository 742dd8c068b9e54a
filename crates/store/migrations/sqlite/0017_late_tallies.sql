-- Events a call stored or matched in PostgreSQL's detached partitions, counted apart.
-- SQLite keeps one unpartitioned table (every event meets the one index), so its rows
-- always hold 0; the column keeps `GET /stats` one shape on both backends.
ALTER TABLE event_tallies ADD COLUMN late INTEGER NOT NULL DEFAULT 0;

-- The per-request count rows of Segment sources and metric bindings are folded like
-- `event_tallies` (one row per key and minute), so `GET /sources` and a campaign's
-- bindings read a bounded number of rows however long a source has been sending.
ALTER TABLE source_tallies ADD COLUMN rolled_up INTEGER NOT NULL DEFAULT 0;
ALTER TABLE binding_tallies ADD COLUMN rolled_up INTEGER NOT NULL DEFAULT 0;
