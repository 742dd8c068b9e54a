-- A campaign report's collisions per (metric, arm) were counted from `outcome_collisions`
-- at every read, one probe of the stored outcome per logged collision: the log is never
-- pruned, so a client resending changed values made each report slower without bound.
-- The counts are kept here instead, added to in the transaction that logs the collisions
-- (`outcomes_batch.rs`), per the assignment's version and the STORED outcome's metric and
-- arm (a collision's own payload may name another metric). The report reads this table
-- alone.
CREATE TABLE outcome_collision_counts (
    tenant_id    TEXT NOT NULL,
    campaign_id  TEXT NOT NULL,
    version      INTEGER NOT NULL,
    metric       TEXT NOT NULL,
    arm          TEXT NOT NULL,
    collisions   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, campaign_id, version, metric, arm)
);

-- The collisions logged so far, attributed as the report did: the stored outcome by its
-- key, the version by the assignment.
INSERT INTO outcome_collision_counts (tenant_id, campaign_id, version, metric, arm, collisions)
SELECT c.tenant_id, c.campaign_id, a.version, o.metric, o.arm, COUNT(*)
FROM outcome_collisions c
JOIN outcomes o ON o.tenant_id = c.tenant_id AND o.assignment_id = c.assignment_id
  AND o.dedupe_key = c.dedupe_key
JOIN assignments a ON a.tenant_id = c.tenant_id AND a.assignment_id = c.assignment_id
GROUP BY c.tenant_id, c.campaign_id, a.version, o.metric, o.arm;
