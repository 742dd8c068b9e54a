-- A run's job was the one named by its first stored event, so which job a run (and its
-- edges) belonged to depended on arrival order: a broker or a client that reordered
-- START and COMPLETE naming different jobs gave another graph. The run's row now holds
-- the event of the earliest eventTime (then the smallest event id), as a sortable key
-- (`lineage/mod.rs`, `run_rank`); a later-stored event that ranks earlier takes the row
-- over. Rows stored before keep their job (a NULL rank never gives way).
ALTER TABLE lineage_runs ADD COLUMN first_event_rank TEXT;
