-- Corrections by explicit supersession: a new version of a stored event, with the same
-- identity and different content, that names the version it replaces. The original row
-- is never rewritten; the newest supersession is the event's current content. Unique on
-- the content (fingerprint), so a retried correction is harmless.
CREATE TABLE event_supersessions (
    tenant_id         TEXT NOT NULL,
    contract_name     TEXT NOT NULL,
    event_id          TEXT NOT NULL,
    fingerprint       TEXT NOT NULL,
    supersedes        TEXT NOT NULL,
    payload           TEXT NOT NULL,
    reason            TEXT,
    superseded_at_us  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, contract_name, event_id, fingerprint)
);
