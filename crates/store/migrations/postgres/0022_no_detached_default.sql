-- Every day that holds rows gets a table of its own (docs/scaling.md, "Time partitions").
--
-- 0010 sent a backfilled event of a day older than every partition to
-- events_detached_default. Nothing then named that day, so a maintenance run with a longer
-- horizon could create an attached partition of it, where a live retry of the backfilled
-- event was stored a second time; and when that day later left the horizon, attaching it
-- to events_detached failed (the default partition held rows of its range), so every
-- maintenance run rolled back from then on. A backfill now creates the day's detached
-- partition first; here each day the default partition holds moves into its own detached
-- partition, and the default partition goes, so a row can no longer land where no day's
-- name guards it.
--
-- A day that already has an attached partition takes the default's rows of that day.
-- Where both hold one key (the defect's second copy), the row received first is the
-- original and stays, as a live duplicate would have left it; the later copy is dropped
-- (counted in a NOTICE) and, when its content differs, logged in event_collisions as
-- the incoming row of a collision (source 'migration'; GET /stats' tallies, written per
-- call, do not count it).
DO $$
DECLARE
    day INTEGER;
    tbl TEXT;
    attached BOOLEAN;
    moved BIGINT;
    dropped BIGINT;
BEGIN
    FOR day IN SELECT DISTINCT occurred_day FROM events_detached_default ORDER BY 1 LOOP
        tbl := 'events_p' || to_char(DATE '1970-01-01' + day, 'YYYYMMDD');
        SELECT EXISTS (
            SELECT 1 FROM pg_inherits i
              JOIN pg_class c ON c.oid = i.inhrelid
              JOIN pg_class p ON p.oid = i.inhparent
             WHERE c.relname = tbl AND p.relname = 'events'
        ) INTO attached;
        IF attached THEN
            -- Collisions: the earlier row is the stored one, the later the incoming one.
            EXECUTE format(
                'INSERT INTO event_collisions (tenant_id, contract_name, event_id,
                     contract_version, stored_fingerprint, incoming_fingerprint,
                     stored_payload, incoming_payload, received_at_us, source)
                 SELECT d.tenant_id, d.contract_name, encode(d.event_id, ''hex''),
                        CASE WHEN d.received_at_us <= a.received_at_us
                             THEN a.contract_version ELSE d.contract_version END,
                        CASE WHEN d.received_at_us <= a.received_at_us
                             THEN d.fingerprint ELSE a.fingerprint END,
                        CASE WHEN d.received_at_us <= a.received_at_us
                             THEN a.fingerprint ELSE d.fingerprint END,
                        CASE WHEN d.received_at_us <= a.received_at_us
                             THEN d.payload ELSE a.payload END,
                        CASE WHEN d.received_at_us <= a.received_at_us
                             THEN a.payload ELSE d.payload END,
                        GREATEST(d.received_at_us, a.received_at_us), ''migration''
                   FROM events_detached_default d
                   JOIN %I a USING (tenant_id, contract_name, event_id, occurred_day)
                  WHERE d.occurred_day = %s AND d.fingerprint <> a.fingerprint',
                tbl, day);
            -- Where the default's row came first, the attached copy goes, so the
            -- original moves in below.
            EXECUTE format(
                'DELETE FROM %I a USING events_detached_default d
                  WHERE d.occurred_day = %s
                    AND (a.tenant_id, a.contract_name, a.event_id, a.occurred_day)
                      = (d.tenant_id, d.contract_name, d.event_id, d.occurred_day)
                    AND d.received_at_us <= a.received_at_us',
                tbl, day);
            GET DIAGNOSTICS dropped = ROW_COUNT;
            EXECUTE format(
                'INSERT INTO %I SELECT * FROM events_detached_default WHERE occurred_day = %s
                 ON CONFLICT DO NOTHING', tbl, day);
            GET DIAGNOSTICS moved = ROW_COUNT;
            SELECT dropped + COUNT(*) - moved INTO dropped
              FROM events_detached_default WHERE occurred_day = day;
            IF dropped > 0 THEN
                RAISE NOTICE '%: % later copies of stored events dropped', tbl, dropped;
            END IF;
            DELETE FROM events_detached_default WHERE occurred_day = day;
        ELSE
            EXECUTE format('CREATE TABLE %I (LIKE events_detached_default INCLUDING ALL)', tbl);
            EXECUTE format(
                'INSERT INTO %I SELECT * FROM events_detached_default WHERE occurred_day = %s',
                tbl, day);
            DELETE FROM events_detached_default WHERE occurred_day = day;
            EXECUTE format(
                'ALTER TABLE events_detached ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                tbl, day, day + 1);
        END IF;
    END LOOP;
END $$;

DROP TABLE events_detached_default;
