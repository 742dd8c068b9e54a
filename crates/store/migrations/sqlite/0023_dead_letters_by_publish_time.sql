-- A stream deleted and re-created under the same name restarts its sequences, so a new
-- dead letter at an old position met the old letter's key and was not recorded (its
-- message then terminated on the broker: lost). The key now also holds the time the
-- broker received the message (JetStream's, in nanoseconds, the same on every
-- redelivery), which tells two messages at one position apart. Letters recorded before
-- this migration keep 0. SQLite cannot change a primary key in place: the table is
-- copied.
CREATE TABLE dead_letters_0023 (
    tenant_id        TEXT NOT NULL REFERENCES tenants (tenant_id),
    stream           TEXT NOT NULL,
    stream_sequence  BIGINT NOT NULL,
    published_ns     BIGINT NOT NULL DEFAULT 0,
    subject          TEXT NOT NULL,
    reason           TEXT NOT NULL,
    detail           TEXT NOT NULL,
    raw              BLOB NOT NULL,
    received_at_us   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, stream, stream_sequence, published_ns)
);
INSERT INTO dead_letters_0023
    (tenant_id, stream, stream_sequence, published_ns, subject, reason, detail, raw, received_at_us)
SELECT tenant_id, stream, stream_sequence, 0, subject, reason, detail, raw, received_at_us
  FROM dead_letters;
DROP TABLE dead_letters;
ALTER TABLE dead_letters_0023 RENAME TO dead_letters;
CREATE INDEX dead_letters_by_tenant_time ON dead_letters (tenant_id, received_at_us);
