-- Tally rows are appended per ingestion call; a periodic roll-up folds old ones into one
-- row per (tenant, contract, minute). Rolled rows are marked so they are not folded again.
ALTER TABLE event_tallies ADD COLUMN rolled_up INTEGER NOT NULL DEFAULT 0;
