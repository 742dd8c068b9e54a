-- A stream deleted and re-created under the same name restarts its sequences, so a new
-- dead letter at an old position met the old letter's key and was not recorded (its
-- message then terminated on the broker: lost). The key now also holds the time the
-- broker received the message (JetStream's, in nanoseconds, the same on every
-- redelivery), which tells two messages at one position apart. Letters recorded before
-- this migration keep 0.
ALTER TABLE dead_letters ADD COLUMN published_ns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_pkey;
ALTER TABLE dead_letters ADD PRIMARY KEY (tenant_id, stream, stream_sequence, published_ns);
