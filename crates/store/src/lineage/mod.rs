//! Lineage: OpenLineage RunEvents stored as rows of `events` under the built-in contract
//! `openlineage.run_event`, and the graph tables derived from them (jobs, datasets, runs,
//! run inputs, run outputs).
//!
//! The graph is written only from the events this transaction newly inserted, in the same
//! transaction, so a duplicate (a retry, 1,000 concurrent copies) can never add a second
//! run or a phantom edge. Graph rows are sets (`ON CONFLICT DO NOTHING`), written in one
//! global order (jobs, datasets, runs, inputs, outputs; each sorted) so concurrent
//! transactions cannot deadlock on them.
//!
//! Graph queries walk breadth-first with a visited set: every node at most once, cycles
//! harmless, bounded by a depth and a node count.

mod postgres;
mod sqlite;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use serde_json::Value;
use traqlyte_identity::canonical;
use traqlyte_identity::openlineage::{run_event_contract, RunEventIdentity};

use crate::{Backend, EventOutcome, NewEvent, Store, StoreError, TenantId};

/// A RunEvent ready to store: the event row and the projection its graph rows come from.
#[derive(Debug, Clone)]
pub struct RunEventRow {
    /// The `events` row (id, fingerprint, payload, event time).
    pub event: NewEvent,
    /// Run, job and datasets of the event.
    pub identity: RunEventIdentity,
}

/// A node of the lineage graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    /// A dataset (`dataset:{namespace}:{name}`).
    Dataset,
    /// A job (`job:{namespace}:{name}`).
    Job,
}

/// A dataset or job by namespace and name (both NFC).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeRef {
    pub kind: NodeKind,
    pub namespace: String,
    pub name: String,
}

impl NodeRef {
    /// Parses `dataset:{namespace}:{name}` or `job:{namespace}:{name}`. The namespace and
    /// name are split at the **last** colon (namespaces such as `postgres://host:5432`
    /// contain colons; names rarely do), and NFC-normalised.
    pub fn parse(id: &str) -> Option<NodeRef> {
        let (kind, rest) = if let Some(rest) = id.strip_prefix("dataset:") {
            (NodeKind::Dataset, rest)
        } else if let Some(rest) = id.strip_prefix("job:") {
            (NodeKind::Job, rest)
        } else {
            return None;
        };
        let (namespace, name) = rest.rsplit_once(':')?;
        if namespace.is_empty() || name.is_empty() {
            return None;
        }
        Some(NodeRef {
            kind,
            namespace: nfc(namespace),
            name: nfc(name),
        })
    }

    /// `dataset:{namespace}:{name}` or `job:{namespace}:{name}`.
    pub fn id(&self) -> String {
        format!("{}:{}:{}", self.kind_str(), self.namespace, self.name)
    }

    /// `dataset` or `job`.
    pub fn kind_str(&self) -> &'static str {
        match self.kind {
            NodeKind::Dataset => "dataset",
            NodeKind::Job => "job",
        }
    }
}

/// Which way to walk: towards what a node was made from, or what was made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Ancestors: dataset ← job that output it ← its inputs …
    Upstream,
    /// Descendants: dataset → job that read it → its outputs …
    Downstream,
}

/// Bounds of one walk.
#[derive(Debug, Clone, Copy)]
pub struct WalkLimits {
    /// Edges to follow from the start node at most.
    pub depth_max: u32,
    /// Nodes to return at most; the walk stops (and says so) beyond it.
    pub nodes_max: usize,
}

/// The result of a walk: nodes in breadth-first order, each once, with their distance.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// Visited nodes (the start node first, at depth 0).
    pub nodes: Vec<(NodeRef, u32)>,
    /// Data-flow edges `(origin, destination)` between visited nodes.
    pub edges: BTreeSet<(NodeRef, NodeRef)>,
    /// True when `nodes_max` cut the walk short.
    pub truncated: bool,
}

/// Graph rows to write for the newly inserted events of one transaction, each set sorted.
#[derive(Debug, Default)]
pub(crate) struct GraphRows {
    pub jobs: BTreeSet<(String, String)>,
    pub datasets: BTreeSet<(String, String)>,
    /// run id → (job namespace, job name, first event id).
    pub runs: BTreeMap<String, (String, String, String)>,
    /// (run id, namespace, name, version or '').
    pub inputs: BTreeSet<(String, String, String, String)>,
    pub outputs: BTreeSet<(String, String, String, String)>,
}

impl GraphRows {
    /// Rows of the events whose outcome is `Inserted`, and nothing from the others.
    pub(crate) fn of_inserted(rows: &[RunEventRow], outcomes: &[EventOutcome]) -> GraphRows {
        debug_assert_eq!(rows.len(), outcomes.len());
        let mut graph = GraphRows::default();
        for (row, _) in rows
            .iter()
            .zip(outcomes)
            .filter(|(_, outcome)| **outcome == EventOutcome::Inserted)
        {
            graph.add(row);
        }
        graph
    }

    fn add(&mut self, row: &RunEventRow) {
        let id = &row.identity;
        let job = (id.job_namespace.clone(), id.job_name.clone());
        self.jobs.insert(job.clone());
        let event_id = row.event.identified.event_id.to_string();
        self.runs
            .entry(id.run_id.clone())
            .or_insert((job.0, job.1, event_id));
        for (datasets, edges) in [
            (&id.inputs, &mut self.inputs),
            (&id.outputs, &mut self.outputs),
        ] {
            for d in datasets {
                self.datasets.insert((d.namespace.clone(), d.name.clone()));
                let version = d.version.clone().unwrap_or_default();
                edges.insert((
                    id.run_id.clone(),
                    d.namespace.clone(),
                    d.name.clone(),
                    version,
                ));
            }
        }
    }
}

pub(crate) const INSERT_JOB: &str =
    "INSERT INTO lineage_jobs (tenant_id, namespace, name, first_seen_us)
     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";

pub(crate) const INSERT_DATASET: &str =
    "INSERT INTO lineage_datasets (tenant_id, namespace, name, first_seen_us)
     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";

pub(crate) const INSERT_RUN: &str = "INSERT INTO lineage_runs
     (tenant_id, run_id, job_namespace, job_name, first_event_id, first_seen_us)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING";

pub(crate) const INSERT_RUN_INPUT: &str =
    "INSERT INTO lineage_run_inputs (tenant_id, run_id, namespace, name, version)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

pub(crate) const INSERT_RUN_OUTPUT: &str =
    "INSERT INTO lineage_run_outputs (tenant_id, run_id, namespace, name, version)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

/// Upstream neighbours of a dataset: the jobs of the runs that output it.
pub(crate) const DATASET_UPSTREAM: &str = "SELECT DISTINCT r.job_namespace, r.job_name
     FROM lineage_run_outputs e JOIN lineage_runs r ON r.tenant_id = e.tenant_id AND r.run_id = e.run_id
     WHERE e.tenant_id = $1 AND e.namespace = $2 AND e.name = $3 ORDER BY 1, 2 LIMIT $4";

/// Downstream neighbours of a dataset: the jobs of the runs that read it.
pub(crate) const DATASET_DOWNSTREAM: &str = "SELECT DISTINCT r.job_namespace, r.job_name
     FROM lineage_run_inputs e JOIN lineage_runs r ON r.tenant_id = e.tenant_id AND r.run_id = e.run_id
     WHERE e.tenant_id = $1 AND e.namespace = $2 AND e.name = $3 ORDER BY 1, 2 LIMIT $4";

/// Upstream neighbours of a job: the inputs of its runs.
pub(crate) const JOB_UPSTREAM: &str = "SELECT DISTINCT e.namespace, e.name
     FROM lineage_runs r JOIN lineage_run_inputs e ON e.tenant_id = r.tenant_id AND e.run_id = r.run_id
     WHERE r.tenant_id = $1 AND r.job_namespace = $2 AND r.job_name = $3 ORDER BY 1, 2 LIMIT $4";

/// Downstream neighbours of a job: the outputs of its runs.
pub(crate) const JOB_DOWNSTREAM: &str = "SELECT DISTINCT e.namespace, e.name
     FROM lineage_runs r JOIN lineage_run_outputs e ON e.tenant_id = r.tenant_id AND e.run_id = r.run_id
     WHERE r.tenant_id = $1 AND r.job_namespace = $2 AND r.job_name = $3 ORDER BY 1, 2 LIMIT $4";

pub(crate) const DATASET_EXISTS: &str =
    "SELECT COUNT(*) FROM lineage_datasets WHERE tenant_id = $1 AND namespace = $2 AND name = $3";

pub(crate) const JOB_EXISTS: &str =
    "SELECT COUNT(*) FROM lineage_jobs WHERE tenant_id = $1 AND namespace = $2 AND name = $3";

pub(crate) const COUNT_RUNS: &str = "SELECT COUNT(*) FROM lineage_runs WHERE tenant_id = $1";

pub(crate) const COUNT_EDGES: &str = "SELECT
     (SELECT COUNT(*) FROM lineage_run_inputs WHERE tenant_id = $1)
   + (SELECT COUNT(*) FROM lineage_run_outputs WHERE tenant_id = $1)";

pub(crate) const COUNT_DATASETS: &str =
    "SELECT COUNT(*) FROM lineage_datasets WHERE tenant_id = $1";

/// Counts of a tenant's lineage graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GraphCounts {
    pub runs: i64,
    pub datasets: i64,
    /// Run-input plus run-output rows.
    pub edges: i64,
}

fn neighbour_sql(kind: NodeKind, direction: Direction) -> &'static str {
    match (kind, direction) {
        (NodeKind::Dataset, Direction::Upstream) => DATASET_UPSTREAM,
        (NodeKind::Dataset, Direction::Downstream) => DATASET_DOWNSTREAM,
        (NodeKind::Job, Direction::Upstream) => JOB_UPSTREAM,
        (NodeKind::Job, Direction::Downstream) => JOB_DOWNSTREAM,
    }
}

impl Store {
    /// Stores RunEvents under the built-in contract in one transaction and, in the same
    /// transaction, adds the graph rows of the newly inserted ones. One outcome per input.
    pub async fn insert_run_events(
        &self,
        tenant: &TenantId,
        rows: &[RunEventRow],
    ) -> Result<Vec<EventOutcome>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let events: Vec<NewEvent> = rows.iter().map(|r| r.event.clone()).collect();
        let batch = crate::plan::Batch::new(&events);
        let contract = run_event_contract();
        let now = crate::now_us();
        let outcomes = match &self.backend {
            Backend::Sqlite(s) => {
                s.insert_run_events(tenant, contract, &batch, rows, now)
                    .await?
            }
            Backend::Postgres(s) => {
                s.insert_run_events(tenant, contract, &batch, rows, now)
                    .await?
            }
        };
        debug_assert_eq!(outcomes.len(), rows.len());
        Ok(outcomes)
    }

    /// True when the tenant's graph holds `node`.
    pub async fn lineage_node_exists(
        &self,
        tenant: &TenantId,
        node: &NodeRef,
    ) -> Result<bool, StoreError> {
        let sql = match node.kind {
            NodeKind::Dataset => DATASET_EXISTS,
            NodeKind::Job => JOB_EXISTS,
        };
        let count = match &self.backend {
            Backend::Sqlite(s) => s.count(sql, tenant, Some(node)).await?,
            Backend::Postgres(s) => s.count(sql, tenant, Some(node)).await?,
        };
        Ok(count > 0)
    }

    /// Runs, datasets and edges of the tenant's graph.
    pub async fn lineage_counts(&self, tenant: &TenantId) -> Result<GraphCounts, StoreError> {
        let mut counts = [0i64; 3];
        for (slot, sql) in counts
            .iter_mut()
            .zip([COUNT_RUNS, COUNT_DATASETS, COUNT_EDGES])
        {
            *slot = match &self.backend {
                Backend::Sqlite(s) => s.count(sql, tenant, None).await?,
                Backend::Postgres(s) => s.count(sql, tenant, None).await?,
            };
        }
        Ok(GraphCounts {
            runs: counts[0],
            datasets: counts[1],
            edges: counts[2],
        })
    }

    /// The direct neighbours of `node` in `direction`, sorted, at most `limit`.
    pub async fn lineage_neighbours(
        &self,
        tenant: &TenantId,
        node: &NodeRef,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<NodeRef>, StoreError> {
        let sql = neighbour_sql(node.kind, direction);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let pairs = match &self.backend {
            Backend::Sqlite(s) => s.neighbours(sql, tenant, node, limit).await?,
            Backend::Postgres(s) => s.neighbours(sql, tenant, node, limit).await?,
        };
        let kind = match node.kind {
            NodeKind::Dataset => NodeKind::Job,
            NodeKind::Job => NodeKind::Dataset,
        };
        Ok(pairs
            .into_iter()
            .map(|(namespace, name)| NodeRef {
                kind,
                namespace,
                name,
            })
            .collect())
    }

    /// Breadth-first walk from `start` following `directions`: every node at most once
    /// (a visited set, so cycles end the walk), at most `depth_max` edges away. With
    /// `edges`, the edges between visited nodes are collected too (nodes at the last depth
    /// are then asked for their neighbours, without being expanded).
    pub async fn lineage_walk(
        &self,
        tenant: &TenantId,
        start: &NodeRef,
        directions: &[Direction],
        limits: WalkLimits,
        edges: bool,
    ) -> Result<Walk, StoreError> {
        let mut walk = Walk::default();
        let mut seen: HashSet<NodeRef> = HashSet::from([start.clone()]);
        let mut queue = VecDeque::from([(start.clone(), 0u32)]);
        walk.nodes.push((start.clone(), 0));
        while let Some((node, depth)) = queue.pop_front() {
            if depth >= limits.depth_max && !edges {
                continue;
            }
            for &direction in directions {
                let next = self
                    .lineage_neighbours(tenant, &node, direction, limits.nodes_max + 1)
                    .await?;
                for neighbour in next {
                    if edges {
                        walk.edges.insert(match direction {
                            Direction::Upstream => (neighbour.clone(), node.clone()),
                            Direction::Downstream => (node.clone(), neighbour.clone()),
                        });
                    }
                    if depth >= limits.depth_max || seen.contains(&neighbour) {
                        continue;
                    }
                    if walk.nodes.len() >= limits.nodes_max {
                        walk.truncated = true;
                        continue;
                    }
                    seen.insert(neighbour.clone());
                    walk.nodes.push((neighbour.clone(), depth + 1));
                    queue.push_back((neighbour, depth + 1));
                }
            }
        }
        walk.edges
            .retain(|(from, to)| seen.contains(from) && seen.contains(to));
        Ok(walk)
    }
}

fn nfc(text: &str) -> String {
    match canonical::normalize(&Value::String(text.to_string()), "") {
        Ok(Value::String(normalized)) => normalized,
        _ => text.to_string(),
    }
}
