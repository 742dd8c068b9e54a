-- Every unique key starts with tenant_id, so the schema distributes by tenant on a
-- distributed PostgreSQL engine (docs/scaling.md). The collision log's key was its
-- identity column alone; it becomes (tenant_id, collision_id), still unique.
ALTER TABLE event_collisions DROP CONSTRAINT event_collisions_pkey;
ALTER TABLE event_collisions ADD PRIMARY KEY (tenant_id, collision_id);
