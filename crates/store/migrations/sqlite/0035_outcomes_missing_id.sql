-- The outcomes still without an id (stored before 0015, or by an old process still
-- running after it), which every start fills (`Store::fill_outcome_ids`, 1,000 a
-- transaction). Its read of the next thousand scanned the table from its start each time
-- (a review: 23 s for 250,000 outcomes, 184 s for a million, `serve` not listening
-- meanwhile), and every start of a filled database scanned it whole to find none. This
-- index holds only the rows without an id: empty once they are filled, and free to keep.
CREATE INDEX outcomes_missing_id ON outcomes (tenant_id) WHERE outcome_id IS NULL;
