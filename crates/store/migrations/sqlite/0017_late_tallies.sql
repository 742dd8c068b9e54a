-- Events a call stored or matched in PostgreSQL's detached partitions, counted apart.
-- SQLite keeps one unpartitioned table (every event meets the one index), so its rows
-- always hold 0; the column keeps `GET /stats` one shape on both backends.
ALTER TABLE event_tallies ADD COLUMN late INTEGER NOT NULL DEFAULT 0;
