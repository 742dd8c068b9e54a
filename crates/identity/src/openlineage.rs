//! OpenLineage RunEvents under the built-in contract `openlineage.run_event` version 1.
//!
//! [`identify_run_event`] checks the fields the OpenLineage spec requires (an error names
//! the field the way the spec spells it, e.g. `run.runId`), projects the event to its
//! semantic identity ([`RunEventIdentity`]: run id, event type, job, the *set* of input and
//! of output datasets with their versions, a digest of the parameter facets), applies the
//! built-in contract (a data file, [`run_event_contract`]) to that projection, and takes the
//! payload fingerprint over the whole event minus its observation metadata: `eventTime`,
//! `producer`, `schemaURL`, and every `_producer` / `_schemaURL` wherever it appears, with
//! `inputs` and `outputs` in canonical order (they are sets).
//!
//! [`run_id_for_slot`] derives the run id of a recurring job from its schedule slot.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};
use thiserror::Error;

use crate::canonical::{self, type_name};
use crate::{sha256_hex, Contract, Fingerprint, Identified, IdentityError};

/// Name of the built-in contract of OpenLineage RunEvents.
pub const RUN_EVENT_CONTRACT: &str = "openlineage.run_event";

/// The contract document, a data file embedded at build time.
pub const RUN_EVENT_CONTRACT_V1_JSON: &str =
    include_str!("../contracts/openlineage.run_event.v1.json");

/// Namespace of the UUIDv5 run ids derived by [`run_id_for_slot`]. A fixed random UUID:
/// changing it would re-key every derived run id.
pub const RUN_ID_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6f1b_3c2e_8d4a_4b7e_9a51_2c8e_0f3d_7a64);

/// Run facets that count as parameters (besides every custom run facet).
pub const RUN_PARAMETER_FACETS: [&str; 3] =
    ["nominalTime", "environmentVariables", "executionParameters"];

/// Job facets that count as parameters (besides every custom job facet).
pub const JOB_PARAMETER_FACETS: [&str; 3] = ["sql", "sourceCode", "sourceCodeLocation"];

/// Standard run facets that describe or observe a run and are not parameters.
pub const RUN_OBSERVATION_FACETS: [&str; 8] = [
    "parent",
    "processing_engine",
    "errorMessage",
    "externalQuery",
    "extractionError",
    "jobDependencies",
    "tags",
    "test",
];

/// Standard job facets that describe a job and are not parameters.
pub const JOB_DESCRIPTION_FACETS: [&str; 5] =
    ["documentation", "jobType", "ownership", "tags", "lineage"];

/// Largest `namespace` of a job or dataset, in UTF-8 bytes after NFC normalisation.
pub const NAMESPACE_BYTES_MAX: usize = 1_024;

/// Largest `name` of a job or dataset, in UTF-8 bytes after NFC normalisation.
pub const NAME_BYTES_MAX: usize = 1_024;

/// Largest `facets.version.datasetVersion` of a dataset, in UTF-8 bytes after NFC
/// normalisation.
pub const DATASET_VERSION_BYTES_MAX: usize = 256;

// Why these limits: the graph tables key rows on these strings (e.g. the primary key
// `(tenant_id, run_id, namespace, name, version)` of `lineage_run_inputs`), and a
// PostgreSQL B-tree entry holds at most 2,704 bytes, so a longer name failed the insert
// (a 500 the client retried forever) while SQLite stored it. Bounding the names keeps the
// widest key (1,024 + 1,024 + 256 + a 36-byte run id + the tenant id + headers, about
// 2,400 bytes even when incompressible) inside the limit on both backends, with no
// schema change; indexing digests instead would have meant rewriting every graph table
// and query. Real namespaces (`postgres://host:5432`, `s3://bucket`) and names (table
// names, file paths) are far shorter.

const EVENT_TYPES: [&str; 6] = ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"];
/// Facet metadata keys left out of the fingerprint wherever they appear.
pub const METADATA_KEYS: [&str; 2] = ["_producer", "_schemaURL"];
const TOP_LEVEL_METADATA: [&str; 3] = ["eventTime", "producer", "schemaURL"];

/// Why a body is not an acceptable OpenLineage RunEvent. `field` is spelled as in the
/// OpenLineage spec (`run.runId`, `inputs[2].name`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpenLineageError {
    /// A field the spec requires is absent (or `null`).
    #[error("required field {field} is missing")]
    Missing {
        /// The pointer (or name) of the offending field.
        field: String,
    },
    /// A field has the wrong JSON type.
    #[error("field {field} must be {expected}, got {found}")]
    WrongType {
        /// The pointer (or name) of the offending field.
        field: String,
        /// What the rule expects.
        expected: &'static str,
        /// The JSON type that was found.
        found: &'static str,
    },
    /// A field has the right type but a value the spec does not allow.
    #[error("field {field} is invalid: {reason}")]
    Invalid {
        /// The pointer (or name) of the offending field.
        field: String,
        /// Why the value is not acceptable.
        reason: String,
    },
    /// The body is not a JSON object (an array of events, `null`, a string).
    #[error("the body must be a JSON object (one OpenLineage RunEvent), got {found}")]
    BodyNotObject {
        /// The JSON type that was found.
        found: &'static str,
    },
    /// A DatasetEvent or JobEvent: accepted by the spec, not stored by this release.
    #[error("{kind} is not stored by this server: only RunEvents (with run.runId) are accepted; send static dataset or job metadata as part of a RunEvent")]
    UnsupportedKind {
        /// The kind of event that was sent.
        kind: &'static str,
    },
    /// The body breaks a canonical-form rule (NFC key clash, integer out of range).
    #[error(transparent)]
    Canonical(#[from] IdentityError),
}

impl OpenLineageError {
    /// The field the error is about.
    pub fn field(&self) -> String {
        match self {
            OpenLineageError::Missing { field }
            | OpenLineageError::WrongType { field, .. }
            | OpenLineageError::Invalid { field, .. } => field.clone(),
            OpenLineageError::BodyNotObject { .. } => String::new(),
            OpenLineageError::UnsupportedKind { .. } => "run".to_string(),
            OpenLineageError::Canonical(err) => err.field().to_string(),
        }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            OpenLineageError::Missing { .. } => "missing_required_field",
            OpenLineageError::WrongType { .. } | OpenLineageError::BodyNotObject { .. } => {
                "wrong_type"
            }
            OpenLineageError::Invalid { .. } => "invalid_value",
            OpenLineageError::UnsupportedKind { .. } => "unsupported_event_kind",
            OpenLineageError::Canonical(err) => err.code(),
        }
    }
}

/// A dataset as it enters a run's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DatasetRef {
    /// `namespace`, NFC.
    pub namespace: String,
    /// `name`, NFC.
    pub name: String,
    /// `facets.version.datasetVersion`, when the event gives one.
    pub version: Option<String>,
}

/// The semantic identity of a RunEvent: what the graph tables are built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEventIdentity {
    /// `run.runId`, lowercase hyphenated.
    pub run_id: String,
    /// `eventType`.
    pub event_type: String,
    /// `job.namespace`, NFC.
    pub job_namespace: String,
    /// `job.name`, NFC.
    pub job_name: String,
    /// The set of inputs, sorted, each once.
    pub inputs: Vec<DatasetRef>,
    /// The set of outputs, sorted, each once.
    pub outputs: Vec<DatasetRef>,
    /// Lowercase hex SHA-256 of the parameter facets' canonical bytes.
    pub parameters_digest: String,
}

/// An identified RunEvent.
#[derive(Debug, Clone)]
pub struct IdentifiedRunEvent {
    /// Id, fingerprint, identity bytes and event time under the built-in contract.
    pub identified: Identified,
    /// The projection the id was computed from.
    pub identity: RunEventIdentity,
}

/// The built-in contract `openlineage.run_event` version 1, loaded from its data file.
pub fn run_event_contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let value: Value = serde_json::from_str(RUN_EVENT_CONTRACT_V1_JSON)
            .expect("the embedded contract file is JSON (checked by the tests)");
        Contract::from_json(&value).expect("the embedded contract is valid (checked by the tests)")
    })
}

/// The built-in contract called `name`, if there is one: this module's
/// `openlineage.run_event` or [`crate::segment`]'s `segment.message`.
pub fn builtin_contract(name: &str) -> Option<&'static Contract> {
    match name {
        RUN_EVENT_CONTRACT => Some(run_event_contract()),
        crate::segment::MESSAGE_CONTRACT => Some(crate::segment::message_contract()),
        _ => None,
    }
}

/// Validates, projects and identifies an OpenLineage RunEvent.
pub fn identify_run_event(event: &Value) -> Result<IdentifiedRunEvent, OpenLineageError> {
    identify_run_event_owned(event.clone())
}

/// [`identify_run_event`] of an event the caller is done with: normalised where it is,
/// without a copy (a RunEvent of deeply nested facets holds dozens of times its bytes as
/// a parsed tree, and a second tree doubled that).
pub fn identify_run_event_owned(event: Value) -> Result<IdentifiedRunEvent, OpenLineageError> {
    let Value::Object(raw) = &event else {
        return Err(OpenLineageError::BodyNotObject {
            found: type_name(&event),
        });
    };
    check_kind(raw)?;
    // Integers beyond ±2^53 are facet data (Iceberg snapshot ids, byte counts): kept as
    // sent, and written exactly in the canonical bytes (`canonical::normalize_wide`).
    let mut content = event;
    canonical::normalize_wide_in_place(&mut content, "")?;
    let event_time = required_str(&content, &["eventTime"])?;
    let event_time = utc_timestamp(&event_time)?;
    required_str(&content, &["producer"])?;
    required_str(&content, &["schemaURL"])?;
    let identity = project(&content)?;
    let projected = projection_document(&identity, &event_time);
    let mut identified = run_event_contract().identify(&projected)?;
    if let Some(run) = content.get_mut("run").and_then(Value::as_object_mut) {
        run.insert("runId".into(), Value::String(identity.run_id.clone()));
    }
    strip_metadata(&mut content);
    sort_dataset_arrays(&mut content);
    identified.fingerprint = Fingerprint::of(&content);
    Ok(IdentifiedRunEvent {
        identified,
        identity,
    })
}

/// The run id of job `namespace`:`name` for a schedule slot (e.g. `2026-11-29`): a UUIDv5
/// under [`RUN_ID_NAMESPACE`] of the RFC 8785 bytes of `[namespace, name, slot]`, each
/// NFC-normalised. Both attempts of one slot share it; different slots never do.
pub fn run_id_for_slot(namespace: &str, name: &str, slot: &str) -> String {
    let parts = json!([namespace, name, slot]);
    let bytes = canonical::normalize(&parts, "")
        .map(|v| canonical::jcs(&v))
        .unwrap_or_default();
    uuid::Uuid::new_v5(&RUN_ID_NAMESPACE, &bytes)
        .hyphenated()
        .to_string()
}

/// Refuses DatasetEvents and JobEvents (no `run`) with a clear error; a body with neither
/// `run`, `dataset` nor `job` is judged as a RunEvent missing its `run`.
fn check_kind(raw: &Map<String, Value>) -> Result<(), OpenLineageError> {
    // `null` counts as absent, as for every field.
    let present = |key: &str| raw.get(key).is_some_and(|value| !value.is_null());
    if present("run") {
        return Ok(());
    }
    if present("dataset") {
        return Err(OpenLineageError::UnsupportedKind {
            kind: "DatasetEvent",
        });
    }
    if present("job") && !present("eventType") {
        return Err(OpenLineageError::UnsupportedKind { kind: "JobEvent" });
    }
    Err(OpenLineageError::Missing {
        field: "run.runId".into(),
    })
}

fn project(content: &Value) -> Result<RunEventIdentity, OpenLineageError> {
    let event_type = required_str(content, &["eventType"])?;
    if !EVENT_TYPES.contains(&event_type.as_str()) {
        return Err(OpenLineageError::Invalid {
            field: "eventType".into(),
            reason: format!("{event_type:?} is not one of {}", EVENT_TYPES.join(", ")),
        });
    }
    let run_id = required_str(content, &["run", "runId"])?;
    let run_id = uuid::Uuid::parse_str(&run_id)
        .map_err(|err| OpenLineageError::Invalid {
            field: "run.runId".into(),
            reason: format!("{run_id:?} is not a UUID: {err}"),
        })?
        .hyphenated()
        .to_string();
    Ok(RunEventIdentity {
        run_id,
        event_type,
        job_namespace: graph_text(
            "job.namespace",
            required_str(content, &["job", "namespace"])?,
            NAMESPACE_BYTES_MAX,
        )?,
        job_name: graph_text(
            "job.name",
            required_str(content, &["job", "name"])?,
            NAME_BYTES_MAX,
        )?,
        inputs: datasets(content, "inputs")?,
        outputs: datasets(content, "outputs")?,
        parameters_digest: parameters_digest(content)?,
    })
}

fn projection_document(identity: &RunEventIdentity, event_time: &str) -> Value {
    let sets = |items: &[DatasetRef]| -> Vec<Value> {
        items
            .iter()
            .map(|d| {
                let mut item = json!({"namespace": d.namespace, "name": d.name});
                if let Some(version) = &d.version {
                    item["version"] = json!(version);
                }
                item
            })
            .collect()
    };
    json!({
        "runId": identity.run_id,
        "eventType": identity.event_type,
        "job": {"namespace": identity.job_namespace, "name": identity.job_name},
        "inputs": sets(&identity.inputs),
        "outputs": sets(&identity.outputs),
        "parameters": identity.parameters_digest,
        "eventTime": event_time,
    })
}

/// The value at `path`, which must be a string; `null` counts as missing.
fn required_str(content: &Value, path: &[&str]) -> Result<String, OpenLineageError> {
    let field = path.join(".");
    let mut current = content;
    for (depth, key) in path.iter().enumerate() {
        current = match current {
            Value::Object(map) => match map.get(*key) {
                None | Some(Value::Null) => return Err(OpenLineageError::Missing { field }),
                Some(next) => next,
            },
            other => {
                return Err(OpenLineageError::WrongType {
                    field: path[..depth].join("."),
                    expected: "an object",
                    found: type_name(other),
                })
            }
        };
    }
    match current {
        Value::String(text) => Ok(text.clone()),
        other => Err(OpenLineageError::WrongType {
            field,
            expected: "a string",
            found: type_name(other),
        }),
    }
}

/// `eventTime` as RFC 3339 with an offset. A timestamp without an offset (as the official
/// Python client's own test events carry) is read as UTC.
fn utc_timestamp(text: &str) -> Result<String, OpenLineageError> {
    let time_part = text
        .split_once(['T', 't', ' '])
        .map(|(_, t)| t)
        .unwrap_or("");
    let has_offset = time_part.contains(['Z', 'z', '+', '-']);
    let with_offset = if has_offset {
        text.to_string()
    } else {
        format!("{text}Z")
    };
    crate::parse_rfc3339_micros(&with_offset)
        .map(|_| with_offset)
        .map_err(|reason| OpenLineageError::Invalid {
            field: "eventTime".into(),
            reason: format!("{text:?} is not an ISO 8601 date-time: {reason}"),
        })
}

fn datasets(content: &Value, key: &str) -> Result<Vec<DatasetRef>, OpenLineageError> {
    let items = match content.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(OpenLineageError::WrongType {
                field: key.into(),
                expected: "an array",
                found: type_name(other),
            })
        }
    };
    let mut set = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        set.insert(dataset(item, &format!("{key}[{index}]"))?);
    }
    Ok(set.into_iter().collect())
}

fn dataset(item: &Value, at: &str) -> Result<DatasetRef, OpenLineageError> {
    if !item.is_object() {
        return Err(OpenLineageError::WrongType {
            field: at.into(),
            expected: "an object",
            found: type_name(item),
        });
    }
    let field = |key: &str| {
        required_str(item, &[key]).map_err(|err| match err {
            OpenLineageError::Missing { field } => OpenLineageError::Missing {
                field: format!("{at}.{field}"),
            },
            OpenLineageError::WrongType {
                field,
                expected,
                found,
            } => OpenLineageError::WrongType {
                field: format!("{at}.{field}"),
                expected,
                found,
            },
            other => other,
        })
    };
    // The spec's containers of facets are objects (the JSON Schema's `DatasetFacets`,
    // `InputDatasetFacets`, `OutputDatasetFacets`), as `run.facets` and `job.facets` are;
    // what is inside them is content.
    for key in ["facets", "inputFacets", "outputFacets"] {
        match item.get(key) {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(other) => {
                return Err(OpenLineageError::WrongType {
                    field: format!("{at}.{key}"),
                    expected: "an object",
                    found: type_name(other),
                })
            }
        }
    }
    let version = match item.pointer("/facets/version/datasetVersion") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(OpenLineageError::WrongType {
                field: format!("{at}.facets.version.datasetVersion"),
                expected: "a string",
                found: type_name(other),
            })
        }
    };
    let version = version
        .map(|v| {
            let at = format!("{at}.facets.version.datasetVersion");
            graph_text(&at, v, DATASET_VERSION_BYTES_MAX)
        })
        .transpose()?;
    Ok(DatasetRef {
        namespace: graph_text(
            &format!("{at}.namespace"),
            field("namespace")?,
            NAMESPACE_BYTES_MAX,
        )?,
        name: graph_text(&format!("{at}.name"), field("name")?, NAME_BYTES_MAX)?,
        version,
    })
}

/// A string the lineage graph stores as text and keys rows on: no NUL (PostgreSQL's
/// `text` cannot hold it) and at most `bytes_max` UTF-8 bytes (see
/// [`NAMESPACE_BYTES_MAX`] for why).
fn graph_text(field: &str, text: String, bytes_max: usize) -> Result<String, OpenLineageError> {
    let reason = if text.contains('\0') {
        "may not contain the NUL character (U+0000)".to_string()
    } else if text.len() > bytes_max {
        format!(
            "is {} bytes long; at most {bytes_max} bytes are accepted",
            text.len()
        )
    } else {
        return Ok(text);
    };
    Err(OpenLineageError::Invalid {
        field: field.to_string(),
        reason,
    })
}

/// SHA-256 of `{"job": {parameter job facets}, "run": {parameter run facets}}` in canonical
/// form, with `_producer` and `_schemaURL` removed.
fn parameters_digest(content: &Value) -> Result<String, OpenLineageError> {
    let run = parameter_facets(
        content,
        "run",
        &RUN_PARAMETER_FACETS,
        &RUN_OBSERVATION_FACETS,
    )?;
    let job = parameter_facets(
        content,
        "job",
        &JOB_PARAMETER_FACETS,
        &JOB_DESCRIPTION_FACETS,
    )?;
    let mut parameters = json!({"job": job, "run": run});
    strip_facet_metadata(&mut parameters);
    Ok(sha256_hex(&canonical::jcs(&parameters)))
}

fn parameter_facets(
    content: &Value,
    owner: &str,
    counted: &[&str],
    not_counted: &[&str],
) -> Result<Value, OpenLineageError> {
    let facets = match content.get(owner).and_then(|o| o.get("facets")) {
        None | Some(Value::Null) => return Ok(json!({})),
        Some(Value::Object(facets)) => facets,
        Some(other) => {
            return Err(OpenLineageError::WrongType {
                field: format!("{owner}.facets"),
                expected: "an object",
                found: type_name(other),
            })
        }
    };
    let kept: Map<String, Value> = facets
        .iter()
        .filter(|(key, _)| counted.contains(&key.as_str()) || !not_counted.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    Ok(Value::Object(kept))
}

/// Removes top-level `eventTime`, `producer`, `schemaURL` and every `_producer` /
/// `_schemaURL` key at any depth.
fn strip_metadata(content: &mut Value) {
    if let Value::Object(map) = content {
        for key in TOP_LEVEL_METADATA {
            map.remove(key);
        }
    }
    strip_facet_metadata(content);
}

/// Sorts `inputs` and `outputs` by their canonical bytes (a multiset: repeats kept), as
/// the contract does for every set field, so a resend that lists datasets in another
/// order is a retry, not a collision.
fn sort_dataset_arrays(content: &mut Value) {
    for key in ["inputs", "outputs"] {
        if let Some(Value::Array(items)) = content.get_mut(key) {
            items.sort_by_cached_key(canonical::jcs);
        }
    }
}

fn strip_facet_metadata(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in METADATA_KEYS {
                map.remove(key);
            }
            map.values_mut().for_each(strip_facet_metadata);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_facet_metadata),
        _ => {}
    }
}
