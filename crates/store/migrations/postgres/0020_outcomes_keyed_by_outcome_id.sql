-- Outcomes keep one unique index instead of two (PostgreSQL; SQLite keeps its schema).
--
-- An outcome's deterministic id (`traqlyte_experiments::outcome_id`: `out_` and the first
-- 16 bytes of SHA-256 of `tenant ‖ "\n" ‖ campaign ‖ "\n" ‖ assignment ‖ "\n" ‖ dedupe_key`,
-- as hex) is a function of its key, and the campaign is a function of the assignment. So
-- `(tenant_id, outcome_id)` is unique exactly when `(tenant_id, assignment_id,
-- dedupe_key)` is, short of a 128-bit collision of SHA-256 within one tenant. Until now
-- every outcome paid for both unique indexes. The outcome id becomes the primary key, the
-- dedupe constraint `INSERT … ON CONFLICT DO NOTHING` meets, and the key's index goes:
-- measured, PostgreSQL's CPU an outcome fell by a fifth (BENCHMARKS.md, "Outcomes keyed by
-- their id"). Every read of outcomes goes by tenant and outcome id or by tenant and
-- campaign (`outcomes_by_campaign`), none by the key's columns.
--
-- The id's formula, in SQL: the rows stored before migration 0015 and not yet given
-- their id by `Store::migrate` get it here, and the benchmarks' seeding computes it too.
CREATE FUNCTION traqlyte_outcome_id(tenant TEXT, campaign TEXT, assignment TEXT, dedupe_key TEXT)
RETURNS TEXT LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 'out_' || encode(substr(sha256(convert_to(
          tenant || E'\n' || campaign || E'\n' || assignment || E'\n' || dedupe_key, 'UTF8')), 1, 16), 'hex') $$;

UPDATE outcomes SET outcome_id = traqlyte_outcome_id(tenant_id, campaign_id, assignment_id, dedupe_key)
WHERE outcome_id IS NULL;

-- A process older than 0015 writes no outcome id: refused from now on, never a row that
-- the dedupe constraint cannot see.
ALTER TABLE outcomes ALTER COLUMN outcome_id SET NOT NULL;
ALTER TABLE outcomes DROP CONSTRAINT outcomes_pkey;
ALTER TABLE outcomes ADD CONSTRAINT outcomes_pkey PRIMARY KEY USING INDEX outcomes_by_outcome_id;
