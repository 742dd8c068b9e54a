-- Messages a broker consumer could not store (bad JSON, unknown contract, identity error),
-- kept with their raw bytes so nothing is lost, then terminated on the broker so they
-- never block the stream. Keyed by the broker position: a redelivery of the same message
-- (the consumer died between this commit and its Term) is absorbed, not doubled.
CREATE TABLE dead_letters (
    tenant_id        TEXT NOT NULL REFERENCES tenants (tenant_id),
    stream           TEXT NOT NULL,
    stream_sequence  BIGINT NOT NULL,
    subject          TEXT NOT NULL,
    reason           TEXT NOT NULL,
    detail           TEXT NOT NULL,
    raw              BLOB NOT NULL,
    received_at_us   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, stream, stream_sequence)
);
CREATE INDEX dead_letters_by_tenant_time ON dead_letters (tenant_id, received_at_us);
