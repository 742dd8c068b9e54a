-- Posted (or abandoned) webhook deliveries are deleted a week after their last attempt
-- (`Store::purge_webhook_deliveries`, run by `serve` every hour): the table grew by one
-- row per collision per webhook for ever. The purge finds them by this index; deliveries
-- still due are never touched.
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (delivered_at_us) WHERE delivered_at_us IS NOT NULL;
