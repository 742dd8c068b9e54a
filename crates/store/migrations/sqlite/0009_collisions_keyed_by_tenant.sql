-- PostgreSQL's 0009 re-keys event_collisions by (tenant_id, collision_id) for a
-- distributed engine. An SQLite file is never distributed, and SQLite cannot change a
-- table's primary key in place: nothing to do, the version is kept in step.
SELECT 1;
