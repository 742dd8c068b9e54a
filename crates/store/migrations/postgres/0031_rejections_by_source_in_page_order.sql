-- A source's rejections are listed newest first by id: an index in that order per source,
-- so a page of one source is read from its cursor on, instead of through the tenant's
-- primary key filtering out every other source's rejections (a quiet source's first page
-- behind a million of a noisy one's read them all: 281 ms; `plans::KEYSET_PAGES`).
CREATE INDEX source_rejections_by_source_id ON source_rejections (tenant_id, source_id, rejection_id);
