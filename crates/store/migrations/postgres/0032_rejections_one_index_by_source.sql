-- The index of a source's rejections by arrival time serves nothing the index in page
-- order (migration 0031) does not: dropped, so each rejection maintains one per-source
-- index.
DROP INDEX source_rejections_by_source;
