-- Webhook deliveries are signed (docs/operations.md, "Webhooks"): each webhook keeps the
-- secret its receiver verifies signatures with, shown once when it is registered.
-- Webhooks registered before this migration have none; their deliveries stay unsigned
-- until they are registered again.
ALTER TABLE webhooks ADD COLUMN signing_secret TEXT;
