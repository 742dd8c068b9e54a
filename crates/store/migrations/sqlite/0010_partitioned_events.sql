-- SQLite keeps one unpartitioned events table (docs/scaling.md says up to which size that
-- is fine). The view gives reads the same name on both backends: on PostgreSQL it also
-- covers the partitions detached from the dedupe horizon.
CREATE VIEW events_any_age AS SELECT * FROM events;
