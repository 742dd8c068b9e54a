-- The dispatcher's claim (`Store::claim_deliveries`) takes each tenant's oldest due
-- deliveries in turn: it lists the tenants with undelivered rows by skipping through this
-- index, then reads each one's first due rows from it. It used to number every due row of
-- every tenant (a window over all of them, sorted) on each poll: a tenant with 60,000
-- deliveries to a closed port made each poll take 650 ms, and other tenants' alerts late.
CREATE INDEX webhook_deliveries_due_by_tenant
    ON webhook_deliveries (tenant_id, next_attempt_at_us, delivery_id)
    WHERE delivered_at_us IS NULL;
