//! OpenLineage ingestion and lineage graph queries:
//! `POST /api/v1/lineage` (a RunEvent, as the official clients send it),
//! `GET /api/v1/lineage?nodeId=…&depth=N` (a Marquez-compatible graph), and
//! `GET /lineage/ancestors` / `GET /lineage/descendants` (`?node=…&depth=N`, a flat
//! breadth-first list).

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use traqlyte_identity::openlineage::{
    identify_run_event_owned, run_event_contract, OpenLineageError,
};
use traqlyte_store::{Direction, EventOutcome, NewEvent, NodeRef, RunEventRow, TenantId, Walk};
use utoipa::{IntoParams, ToSchema};

use super::events::{admit, begin_ingest, collision_advised};
use crate::auth::{Tenant, WriteTenant};
use crate::body::read_run_event;
use crate::{ApiError, AppState};

/// Depth of a graph query that names none (Marquez's default).
const DEPTH_DEFAULT: u32 = 20;

/// The answer to a stored run event.
#[derive(Serialize, ToSchema)]
pub(crate) struct LineageAck<'a> {
    event_id: &'a str,
    run_id: &'a str,
    /// `inserted` or `duplicate`.
    #[schema(value_type = crate::openapi::StoredStatus)]
    status: &'static str,
}

/// `POST /api/v1/lineage`: `201 {"event_id","status":"inserted"|"duplicate","run_id"}`
/// (a duplicate is acknowledged like the original: the client's retry succeeded);
/// `409 collision`; `400` naming the field for an invalid event.
#[utoipa::path(post, path = "/api/v1/lineage", tag = "lineage", security(("api_key" = [])),
    request_body(content = Object, description = "an OpenLineage RunEvent (docs/lineage.md)"),
    responses((status = 201, body = LineageAck, description = "stored, or a duplicate acknowledged like the original"), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn post_event(
    State(state): State<AppState>,
    writer: WriteTenant,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let WriteTenant { tenant, key } = &writer;
    let answer: Result<Response, ApiError> = async {
        // OpenLineage clients are answered 400 for every invalid event (`docs/lineage.md`).
        // The route's own size and depth limits; facets carry integers beyond ±2^53 as
        // data (Iceberg snapshot ids): taken.
        let value = read_run_event(&state, &headers, body)
            .await
            .map_err(|err| {
            err.with_status_if(StatusCode::UNPROCESSABLE_ENTITY, StatusCode::BAD_REQUEST)
        })?;
        writer.confirm_unchecked(&state, &headers).await?;
        // The payload first, then the event identified in place: one parsed tree at a
        // time (a copy doubled the peak of a large nested event).
        let payload = serde_json::to_string(&value).map_err(ApiError::internal)?;
        // A parsed document refused by the RunEvent's rules or the horizon is counted
        // rejected, as `POST /events/{contract}` counts one its contract refuses.
        let rejected = |err: ApiError| {
            crate::metrics::record_events(
                tenant,
                run_event_contract().name().as_str(),
                &traqlyte_store::IngestSource::http(),
                &[],
                &[],
                1,
            );
            err
        };
        let projected = identify_run_event_owned(value)
            .map_err(bad_event)
            .map_err(rejected)?;
        let event = NewEvent {
            identified: projected.identified,
            payload,
        };
        // 400 like every invalid RunEvent; the field is `eventTime`.
        let event = admit(&state, run_event_contract(), event)
            .map_err(|err| {
                err.with_status_if(StatusCode::UNPROCESSABLE_ENTITY, StatusCode::BAD_REQUEST)
                    .with_field("eventTime")
            })
            .map_err(rejected)?;
        let row = RunEventRow {
            event,
            identity: projected.identity,
        };
        let outcome = match state.group_commit.run_event(tenant, key.as_ref(), &row).await {
            Some(outcome) => outcome?,
            None => insert_one(&state, tenant, &row).await?,
        };
        crate::metrics::record_events(
            tenant,
            run_event_contract().name().as_str(),
            &traqlyte_store::IngestSource::http(),
            std::slice::from_ref(&row.event),
            std::slice::from_ref(&outcome),
            0,
        );
        let event_id = row.event.identified.event_id.as_str();
        if let EventOutcome::Collision { stored_fingerprint } = &outcome {
            return Err(collision_advised(
                &row.event,
                stored_fingerprint,
                "It is listed by GET /contracts/openlineage.run_event/collisions. Run events are not corrected \
                 by supersession (the run's next event carries its state), and the built-in contract takes no new \
                 version: two RUNNING or OTHER events of one run that differ only in observation facets (output \
                 statistics, say) share an identity under its version 1 (docs/lineage.md); a custom facet keeps them apart",
            ));
        }
        tracing::debug!(tenant = %tenant, event_id, run_id = %row.identity.run_id, status = outcome.as_str(), "run event stored");
        let body = LineageAck {
            event_id,
            run_id: &row.identity.run_id,
            status: outcome.as_str(),
        };
        Ok((StatusCode::CREATED, Json(body)).into_response())
    }
    .await;
    writer.settle(&state, answer).await
}

/// One run event in a transaction of its own (group commit off).
async fn insert_one(
    state: &AppState,
    tenant: &TenantId,
    row: &RunEventRow,
) -> Result<EventOutcome, ApiError> {
    let mut tx = begin_ingest(state).await?;
    let outcomes = tx
        .insert_run_events(tenant, std::slice::from_ref(row))
        .await?;
    tx.commit().await?;
    outcomes
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("store returned no outcome"))
}

/// `GET /lineage/stats`: `{"runs","datasets","edges"}` of the tenant's graph (edges are
/// run-input plus run-output rows).
#[utoipa::path(get, path = "/lineage/stats", tag = "lineage", security(("api_key" = [])),
    responses((status = 200, body = LineageStats), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn stats(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<LineageStats>, ApiError> {
    let counts = state.store.lineage_counts(&tenant).await?;
    Ok(Json(LineageStats {
        datasets: counts.datasets,
        edges: counts.edges,
        runs: counts.runs,
    }))
}

/// The answer of `GET /lineage/stats` (fields in alphabetical order: see
/// `health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct LineageStats {
    datasets: i64,
    /// Run-input plus run-output rows.
    edges: i64,
    runs: i64,
}

/// Query of `GET /api/v1/lineage`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct GraphQuery {
    /// `dataset:{namespace}:{name}` or `job:{namespace}:{name}`; required.
    #[serde(rename = "nodeId")]
    node_id: Option<String>,
    /// Edges away from the node, 0 to `--lineage-depth-max` (100); 20 when absent.
    #[param(value_type = Option<u32>)]
    depth: Option<String>,
}

/// The answer of `GET /api/v1/lineage`, Marquez's shape.
#[derive(Serialize, ToSchema)]
pub(crate) struct MarquezGraph {
    graph: Vec<MarquezNode>,
    /// Present, and true, only when the walk stopped at `--lineage-nodes-max` (or a level
    /// too large to read): the graph is then partial. Marquez has no such field; clients
    /// that do not know it ignore it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schema(required = false)]
    truncated: bool,
}

/// A node of a Marquez graph (fields in alphabetical order: see `health::Health`).
#[derive(Serialize, ToSchema)]
pub(crate) struct MarquezNode {
    data: MarquezData,
    id: String,
    #[serde(rename = "inEdges")]
    in_edges: Vec<MarquezEdge>,
    #[serde(rename = "outEdges")]
    out_edges: Vec<MarquezEdge>,
    /// `DATASET` or `JOB`.
    #[serde(rename = "type")]
    kind: String,
}

/// A Marquez node's data.
#[derive(Serialize, ToSchema)]
pub(crate) struct MarquezData {
    id: MarquezId,
    name: String,
    namespace: String,
    #[serde(rename = "type")]
    kind: String,
}

/// A Marquez node's name and namespace.
#[derive(Serialize, ToSchema)]
pub(crate) struct MarquezId {
    name: String,
    namespace: String,
}

/// An edge of a Marquez graph.
#[derive(Clone, Serialize, ToSchema)]
pub(crate) struct MarquezEdge {
    destination: String,
    origin: String,
}

/// The answer of `GET /lineage/ancestors` and `/lineage/descendants`.
#[derive(Serialize, ToSchema)]
pub(crate) struct WalkAnswer {
    depth: u32,
    /// `upstream` or `downstream`.
    direction: &'static str,
    node: String,
    /// Breadth-first, each node once, the start left out.
    nodes: Vec<WalkNode>,
    /// Whether `--lineage-nodes-max` cut the walk short.
    truncated: bool,
}

/// A node reached by a walk.
#[derive(Serialize, ToSchema)]
pub(crate) struct WalkNode {
    depth: u32,
    id: String,
    name: String,
    namespace: String,
    /// `dataset` or `job`.
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `GET /api/v1/lineage?nodeId=dataset:{ns}:{name}&depth=N`: the nodes connected to the
/// given one (both directions) up to `depth` edges away, Marquez's shape.
#[utoipa::path(get, path = "/api/v1/lineage", tag = "lineage", security(("api_key" = [])), params(GraphQuery),
    responses((status = 200, body = MarquezGraph), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn graph(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(query): Query<GraphQuery>,
) -> Result<Json<MarquezGraph>, ApiError> {
    let readings = node(query.node_id.as_deref(), "nodeId")?;
    let depth = depth(query.depth.as_deref(), &state)?;
    let walk = walk(&state, &tenant, &readings, depth, true).await?;
    // Each node's edges, gathered in one pass: looked up per node by scanning every edge,
    // a walk of 10,000 nodes and 50,000 edges cost about 10⁹ comparisons.
    let mut edges: HashMap<&NodeRef, (Vec<MarquezEdge>, Vec<MarquezEdge>)> = HashMap::new();
    for (from, to) in &walk.edges {
        let edge = MarquezEdge {
            destination: to.id(),
            origin: from.id(),
        };
        edges.entry(from).or_default().1.push(edge.clone());
        edges.entry(to).or_default().0.push(edge);
    }
    let graph = walk
        .nodes
        .iter()
        .map(|(node, _)| {
            let (in_edges, out_edges) = edges.remove(node).unwrap_or_default();
            marquez_node(node, in_edges, out_edges)
        })
        .collect();
    Ok(Json(MarquezGraph {
        graph,
        truncated: walk.truncated,
    }))
}

/// Query of `GET /lineage/ancestors` and `/lineage/descendants`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WalkQuery {
    /// `dataset:{namespace}:{name}` or `job:{namespace}:{name}`; required.
    node: Option<String>,
    /// Edges away from the node, 0 to `--lineage-depth-max` (100); 20 when absent.
    #[param(value_type = Option<u32>)]
    depth: Option<String>,
}

/// `GET /lineage/ancestors?node=…&depth=N`.
#[utoipa::path(get, path = "/lineage/ancestors", tag = "lineage", security(("api_key" = [])), params(WalkQuery),
    responses((status = 200, body = WalkAnswer), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn ancestors(
    state: State<AppState>,
    tenant: Tenant,
    query: Query<WalkQuery>,
) -> Result<Json<WalkAnswer>, ApiError> {
    flat(state, tenant, query, Direction::Upstream).await
}

/// `GET /lineage/descendants?node=…&depth=N`.
#[utoipa::path(get, path = "/lineage/descendants", tag = "lineage", security(("api_key" = [])), params(WalkQuery),
    responses((status = 200, body = WalkAnswer), (status = "4XX", response = crate::openapi::ErrorEnvelope),
        (status = "5XX", response = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn descendants(
    state: State<AppState>,
    tenant: Tenant,
    query: Query<WalkQuery>,
) -> Result<Json<WalkAnswer>, ApiError> {
    flat(state, tenant, query, Direction::Downstream).await
}

async fn flat(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(query): Query<WalkQuery>,
    direction: Direction,
) -> Result<Json<WalkAnswer>, ApiError> {
    let readings = node(query.node.as_deref(), "node")?;
    let depth = depth(query.depth.as_deref(), &state)?;
    let (start, walk) = walk_one_way(&state, &tenant, &readings, depth, direction).await?;
    let nodes = walk
        .nodes
        .iter()
        .skip(1)
        .map(|(node, depth)| WalkNode {
            depth: *depth,
            id: node.id(),
            name: node.name.clone(),
            namespace: node.namespace.clone(),
            kind: node.kind_str(),
        })
        .collect();
    let direction = match direction {
        Direction::Upstream => "upstream",
        Direction::Downstream => "downstream",
    };
    Ok(Json(WalkAnswer {
        depth,
        direction,
        node: start.id(),
        nodes,
        truncated: walk.truncated,
    }))
}

async fn walk_one_way(
    state: &AppState,
    tenant: &TenantId,
    readings: &[NodeRef],
    depth: u32,
    direction: Direction,
) -> Result<(NodeRef, Walk), ApiError> {
    let start = held_reading(state, tenant, readings, "node").await?;
    // The walk counts its start node, which a flat list leaves out (`skip(1)`): one more,
    // so the list holds `lineage_nodes_max` nodes, as configured.
    let mut limits = limits(state, depth);
    limits.nodes_max = limits.nodes_max.saturating_add(1);
    let walk = state
        .store
        .lineage_walk(tenant, &start, &[direction], limits, false)
        .await?;
    Ok((start, walk))
}

async fn walk(
    state: &AppState,
    tenant: &TenantId,
    readings: &[NodeRef],
    depth: u32,
    edges: bool,
) -> Result<Walk, ApiError> {
    // Only the Marquez-compatible graph walks both ways; it names the node `nodeId`.
    let start = held_reading(state, tenant, readings, "nodeId").await?;
    let both = [Direction::Upstream, Direction::Downstream];
    Ok(state
        .store
        .lineage_walk(tenant, &start, &both, limits(state, depth), edges)
        .await?)
}

fn limits(state: &AppState, depth: u32) -> traqlyte_store::WalkLimits {
    traqlyte_store::WalkLimits {
        depth_max: depth,
        nodes_max: state.config.lineage_nodes_max,
    }
}

/// The first of a node id's readings ([`NodeRef::readings`]) the tenant's graph holds:
/// the last colon's, unless the name holds colons too.
async fn held_reading(
    state: &AppState,
    tenant: &TenantId,
    readings: &[NodeRef],
    field: &str,
) -> Result<NodeRef, ApiError> {
    for reading in readings {
        if state.store.lineage_node_exists(tenant, reading).await? {
            return Ok(reading.clone());
        }
    }
    let Some(node) = readings.first() else {
        return Err(invalid_node(field, ""));
    };
    Err(ApiError::not_found(
        "node_not_found",
        format!(
            "no {} {:?} in the lineage graph",
            node.kind_str(),
            node.id()
        ),
    )
    .with_field(field))
}

fn marquez_node(
    node: &NodeRef,
    in_edges: Vec<MarquezEdge>,
    out_edges: Vec<MarquezEdge>,
) -> MarquezNode {
    let id = node.id();
    let kind = node.kind_str().to_uppercase();
    MarquezNode {
        data: MarquezData {
            id: MarquezId {
                name: node.name.clone(),
                namespace: node.namespace.clone(),
            },
            name: node.name.clone(),
            namespace: node.namespace.clone(),
            kind: kind.clone(),
        },
        id,
        in_edges,
        out_edges,
        kind,
    }
}

/// The readings of the node id in `parameter` ([`NodeRef::readings`]), never empty.
fn node(text: Option<&str>, parameter: &'static str) -> Result<Vec<NodeRef>, ApiError> {
    let text = text.ok_or_else(|| {
        ApiError::new(StatusCode::BAD_REQUEST, "missing_parameter", format!("query parameter {parameter} is required, e.g. {parameter}=dataset:my-namespace:my.table"))
            .with_field(parameter)
    })?;
    let readings = NodeRef::readings(text);
    if readings.is_empty() {
        return Err(invalid_node(parameter, text));
    }
    Ok(readings)
}

fn invalid_node(parameter: &str, text: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_node",
        format!("{parameter} {text:?} must be dataset:{{namespace}}:{{name}} or job:{{namespace}}:{{name}}"),
    )
    .with_field(parameter)
}

fn depth(text: Option<&str>, state: &AppState) -> Result<u32, ApiError> {
    let depth_max = state.config.lineage_depth_max;
    let Some(text) = text else {
        return Ok(DEPTH_DEFAULT.min(depth_max));
    };
    text.parse::<u32>()
        .ok()
        .filter(|depth| *depth <= depth_max)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_depth",
                format!("depth must be an integer from 0 to {depth_max}, got {text:?}"),
            )
            .with_field("depth")
        })
}

fn bad_event(err: OpenLineageError) -> ApiError {
    let field = err.field();
    let api = ApiError::new(StatusCode::BAD_REQUEST, err.code(), err.to_string());
    if field.is_empty() {
        api
    } else {
        api.with_field(field)
    }
}
