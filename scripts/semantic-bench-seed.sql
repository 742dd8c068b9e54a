-- Seeds 10 M events of contract page_view v1 (identity wrongly holding /emitted_at) for the
-- semantic-scan benchmark (BENCHMARKS.md): psql -v tenant=TENANT_ID -d DB -f this file,
-- after `traqlyte migrate` and `traqlyte tenant create bench`.
\timing on
INSERT INTO contracts (tenant_id, name, version, definition, created_at_us) VALUES
 (:'tenant', 'page_view', 1, '{"fields":[{"pointer":"/user_id","required":true},{"pointer":"/page","required":true},{"pointer":"/emitted_at"}],"name":"page_view","transport":["/attempt"],"version":1}', 0);
INSERT INTO events (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us, occurred_day)
SELECT :'tenant', 'page_view', sha256(convert_to('e' || g, 'UTF8')), 1, md5(g::text),
  format('{"attempt":1,"emitted_at":"2026-11-29T10:%s:00Z","page":"/p%s","referrer":"search","user_id":"u%s"}', lpad((g % 60)::text, 2, '0'), g % 1000, g),
  NULL, 1796000000000000 + g, -2147483648
FROM generate_series(1, 9000000) g;
INSERT INTO events (tenant_id, contract_name, event_id, contract_version, fingerprint, payload, occurred_at_us, received_at_us, occurred_day)
SELECT :'tenant', 'page_view', sha256(convert_to('r' || g, 'UTF8')), 1, md5(g::text),
  format('{"attempt":2,"emitted_at":"2026-11-29T10:%s:01Z","page":"/p%s","referrer":"search","user_id":"u%s"}', lpad((g % 60)::text, 2, '0'), g % 1000, g),
  NULL, 1796100000000000 + g, -2147483648
FROM generate_series(1, 1000000) g;
VACUUM ANALYZE events_untimed;
SELECT COUNT(*) FROM events;
