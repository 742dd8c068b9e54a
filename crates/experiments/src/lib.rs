//! The pure experiments domain of TraqLyte: no I/O, no async, no SQL.
//!
//! A [`Campaign`] has [`Arms`] (a non-empty list whose first arm is the control, by
//! type: [`Arms::control`]) and [`MetricDef`]s; each publish freezes them in a
//! [`CampaignVersion`]. [`bucketing`] places a unit in an arm and names its assignment;
//! [`outcome_fingerprint`] is the payload rule that tells a retried outcome from a
//! collision; [`report`] turns the store's per-arm sums into the typed [`Report`] that
//! the API serialises, the web page renders and the demo reads — one definition.
//! The values requests are made of ([`CampaignKey`], [`ArmKey`], [`MetricName`],
//! [`UnitId`], [`DedupeKey`], [`Weight`], [`WindowHours`], [`OutcomeValue`], …) are
//! newtypes whose constructors enforce their rules once ([`RuleError`] says why not).
#![deny(missing_docs)]

pub mod bucketing;
mod campaign;
mod outcome;
pub mod report;
mod values;

pub use campaign::{
    Arm, Arms, ArmsError, Campaign, CampaignVersion, MetricArmSums, MetricDef, MetricKind, Metrics,
    MetricsError, NewCampaign, WindowSums,
};
pub use outcome::{outcome_fingerprint, outcome_id, untimed_outcome_fingerprint};
pub use report::Report;
pub use values::{
    ArmKey, AssignmentId, CampaignId, CampaignKey, CampaignName, DedupeKey, MetricName, OccurredAt,
    OutcomeId, OutcomeValue, RuleError, UnitId, VersionNote, Weight, WindowHours, NUL_RULE,
};
