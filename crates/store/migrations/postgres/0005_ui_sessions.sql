-- Web UI sessions and single-use login links. Only a SHA-256 of each token is stored
-- (like API keys: the token is random, so a plain hash is enough); a row is found by
-- that hash alone, the way an API key is. Rows expire and are purged, never updated.
CREATE TABLE ui_tokens (
    token_hash     TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (tenant_id),
    kind           TEXT NOT NULL CHECK (kind IN ('login', 'session')),
    created_at_us  BIGINT NOT NULL,
    expires_at_us  BIGINT NOT NULL
);
CREATE INDEX ui_tokens_by_expiry ON ui_tokens (expires_at_us);
