-- Key lifecycle: several keys per tenant, listed by a short non-secret prefix, revoked by
-- marking the row (kept for audit) instead of deleting it.
-- Keys created before this migration have no prefix (only their hash was kept); they are
-- listed with a null prefix and revoked with the full key.
ALTER TABLE api_keys ADD COLUMN key_prefix TEXT;
ALTER TABLE api_keys ADD COLUMN revoked_at_us BIGINT;
-- Starts with the tenant like every unique key; NULL prefixes (old keys) never conflict.
CREATE UNIQUE INDEX api_keys_by_prefix ON api_keys (tenant_id, key_prefix);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at_us);
-- Tenants are addressed by name in the CLI and the admin routes. Not a unique index:
-- older databases may hold two tenants of one name, which lookups refuse as ambiguous;
-- new names are kept unique by `Store::create_tenant` (see tenants.rs).
CREATE INDEX tenants_by_name ON tenants (name);
