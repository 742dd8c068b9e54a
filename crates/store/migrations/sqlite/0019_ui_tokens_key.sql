-- A UI token now names the API key it was exchanged for (by the key's hash), and is
-- honoured only while that key works: revoking a key ends its browser sessions and
-- login links at once, in every process. Tokens minted before this migration name no
-- key; they are deleted (their users log in again), never honoured without one.
DELETE FROM ui_tokens;
ALTER TABLE ui_tokens ADD COLUMN key_hash TEXT NOT NULL DEFAULT '';
