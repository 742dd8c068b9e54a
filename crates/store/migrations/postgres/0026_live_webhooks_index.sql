-- A deleted webhook is kept (marked `deleted_at_us`), so a tenant's rows grow with every
-- registration ever made. What runs on the ingestion path (queueing a collision's
-- deliveries) and on registration (the count and the same-URL lookup) reads only live
-- ones: this index holds only those, so deleted rows cost those reads nothing.
CREATE INDEX webhooks_live ON webhooks (tenant_id, url) WHERE deleted_at_us IS NULL;
