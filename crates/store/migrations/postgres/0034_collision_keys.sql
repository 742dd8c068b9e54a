-- One log entry per distinct collision: the same colliding delivery again (a client
-- retrying a `409`, a broker's redelivery after a lost ack, a backfill run twice) was
-- logged, warned about and posted to every webhook once per delivery (a review's 500 ids
-- sent 20 times each made 10,000 rows and posts). `StoreTx::log_collision` inserts the
-- collision's key here first, `ON CONFLICT DO NOTHING`, and logs it only when the key is
-- new: concurrent identical deliveries meet on this primary key, whichever process
-- writes them. The collisions already logged keep their rows; their keys are filled in.
CREATE TABLE event_collision_keys (
    tenant_id             TEXT NOT NULL,
    contract_name         TEXT NOT NULL,
    event_id              TEXT NOT NULL,
    stored_fingerprint    TEXT NOT NULL,
    incoming_fingerprint  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, contract_name, event_id, stored_fingerprint, incoming_fingerprint)
);
INSERT INTO event_collision_keys
    (tenant_id, contract_name, event_id, stored_fingerprint, incoming_fingerprint)
SELECT DISTINCT tenant_id, contract_name, event_id, stored_fingerprint, incoming_fingerprint
FROM event_collisions;
