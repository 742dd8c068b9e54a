//! The pure experiments domain of TraqLyte: no I/O, no async, no SQL.
//!
//! A [`Campaign`] has [`Arms`] (a non-empty list whose first arm is the control, by
//! type: [`Arms::control`]) and [`MetricDef`]s; each publish freezes them in a
//! [`CampaignVersion`]. [`bucketing`] places a unit in an arm and names its assignment;
//! [`outcome_fingerprint`] is the payload rule that tells a retried outcome from a
//! collision; [`report`] turns the store's per-arm sums into the typed [`Report`] that
//! the API serialises, the web page renders and the demo reads — one definition.
#![deny(missing_docs)]

pub mod bucketing;
mod campaign;
mod outcome;
pub mod report;

pub use campaign::{
    Arm, Arms, ArmsError, Campaign, CampaignVersion, MetricArmSums, MetricDef, MetricKind,
    NewCampaign, WindowSums,
};
pub use outcome::outcome_fingerprint;
pub use report::Report;
