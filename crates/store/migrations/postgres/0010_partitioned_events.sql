-- A bounded dedupe horizon (docs/scaling.md, "Time partitions"): the fact table is
-- partitioned by the day of the event's occurrence time, so only the partitions inside
-- the horizon carry a dedupe index that live writes maintain.
--
-- occurred_day = floor(occurred_at_us / 86 400 000 000), days since 1970-01-01 UTC, a
-- deterministic function of what every duplicate shares with its original (the
-- contract's occurrence time, never the arrival time). Events without an occurrence time
-- get -2147483648 and live in events_untimed, whose index is never bounded.
-- The primary key holds occurred_day because PostgreSQL requires the partition key in
-- every unique key of a partitioned table: duplicates meet when their occurrence day is
-- equal (the one assumption: a producer never restamps the occurrence time of a retry
-- across a day boundary).
ALTER TABLE events RENAME TO events_unpartitioned;
ALTER TABLE events_unpartitioned RENAME CONSTRAINT events_pkey TO events_unpartitioned_pkey;

-- event_id is the SHA-256 itself (32 bytes), not its 64 hex digits: the dedupe key is
-- 137 instead of 187 bytes an event (BENCHMARKS.md). The API still speaks hex.
CREATE TABLE events (
    tenant_id         TEXT NOT NULL,
    contract_name     TEXT NOT NULL,
    event_id          BYTEA NOT NULL,
    contract_version  INTEGER NOT NULL,
    fingerprint       TEXT NOT NULL,
    payload           TEXT NOT NULL,
    occurred_at_us    BIGINT,
    received_at_us    BIGINT NOT NULL,
    occurred_day      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, contract_name, event_id, occurred_day)
) PARTITION BY RANGE (occurred_day);

CREATE TABLE events_untimed PARTITION OF events FOR VALUES FROM (MINVALUE) TO (-2147483647);

-- Day partitions that left the horizon are detached from events and attached here: no
-- live write reaches them, each keeps its own primary key (so a backfill still reconciles
-- by constraint), and reads see them through events_any_age. The parent has no unique
-- key of its own; the default partition holds backfilled days older than any partition.
CREATE TABLE events_detached (LIKE events) PARTITION BY RANGE (occurred_day);
CREATE TABLE events_detached_default PARTITION OF events_detached DEFAULT;
ALTER TABLE events_detached_default
    ADD PRIMARY KEY (tenant_id, contract_name, event_id, occurred_day);

-- Every existing row moves into a day partition of its own day (created here, attached);
-- the first `partitions maintain` detaches the days outside the horizon.
DO $$
DECLARE
    day INTEGER;
BEGIN
    FOR day IN
        SELECT DISTINCT CAST(floor(occurred_at_us / 86400000000.0) AS INTEGER)
          FROM events_unpartitioned WHERE occurred_at_us IS NOT NULL
    LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
                       'events_p' || to_char(DATE '1970-01-01' + day, 'YYYYMMDD'), day, day + 1);
    END LOOP;
END $$;

INSERT INTO events (tenant_id, contract_name, event_id, contract_version, fingerprint, payload,
                    occurred_at_us, received_at_us, occurred_day)
SELECT tenant_id, contract_name, decode(event_id, 'hex'), contract_version, fingerprint, payload,
       occurred_at_us, received_at_us,
       COALESCE(CAST(floor(occurred_at_us / 86400000000.0) AS INTEGER), -2147483648)
  FROM events_unpartitioned;

DROP TABLE events_unpartitioned;

-- What every read of a stored event sees: the live partitions and the detached ones.
CREATE VIEW events_any_age AS
    SELECT * FROM events
    UNION ALL
    SELECT * FROM events_detached;
