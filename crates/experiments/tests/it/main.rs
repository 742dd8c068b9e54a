//! Frozen fixtures of the experiments domain: bucketing, assignment ids and outcome
//! fingerprints are recorded constants, so no refactor can silently move a unit to
//! another arm or re-key a stored outcome; and the typed report's JSON shape.

mod fixtures;
mod report;
