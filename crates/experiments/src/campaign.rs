//! Campaigns, arms, metrics and the per-arm sums a report is computed from.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// An arm of a campaign and its integer weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arm {
    /// Unique within the campaign.
    pub key: String,
    /// Positive integer weight.
    pub weight: u32,
}

/// The arms of a campaign: never empty, and the first is the control. Serialised as the
/// JSON array of arms; it dereferences to the slice of all arms, control first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Arm>", into = "Vec<Arm>")]
pub struct Arms(Vec<Arm>);

/// Why a list of arms is not a valid [`Arms`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArmsError {
    /// The list is empty: a campaign needs at least its control.
    #[error("a campaign needs at least one arm; the first is the control")]
    Empty,
}

impl Arms {
    /// The control arm (the first one given).
    pub fn control(&self) -> &Arm {
        &self.0[0]
    }

    /// The arms compared with the control, in their order.
    pub fn treatments(&self) -> &[Arm] {
        &self.0[1..]
    }

    /// Whether `key` names the control arm.
    pub fn is_control(&self, key: &str) -> bool {
        self.control().key == key
    }
}

impl TryFrom<Vec<Arm>> for Arms {
    type Error = ArmsError;

    fn try_from(arms: Vec<Arm>) -> Result<Self, ArmsError> {
        if arms.is_empty() {
            return Err(ArmsError::Empty);
        }
        Ok(Arms(arms))
    }
}

impl From<Arms> for Vec<Arm> {
    fn from(arms: Arms) -> Self {
        arms.0
    }
}

impl<'a> IntoIterator for &'a Arms {
    type Item = &'a Arm;
    type IntoIter = std::slice::Iter<'a, Arm>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl std::ops::Deref for Arms {
    type Target = [Arm];

    fn deref(&self) -> &[Arm] {
        &self.0
    }
}

/// How a metric aggregates outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Distinct converting units / units.
    Conversion,
    /// Outcome events per unit.
    Count,
    /// Sum of outcome values per unit.
    Sum,
}

/// A metric of a campaign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricDef {
    /// Unique within the campaign.
    pub name: String,
    /// Aggregation.
    pub kind: MetricKind,
    /// Outcomes count when they occur within this many hours of the unit's assignment.
    pub window_hours: u32,
}

/// A validated campaign to create.
#[derive(Debug, Clone)]
pub struct NewCampaign {
    /// The tenant's own key for it, unique per tenant.
    pub key: String,
    /// A name for people.
    pub name: String,
    /// Arms, control first.
    pub arms: Arms,
    /// Metrics.
    pub metrics: Vec<MetricDef>,
}

/// A stored campaign.
#[derive(Debug, Clone, Serialize)]
pub struct Campaign {
    /// Its id (`cmp_…`).
    pub id: String,
    /// The tenant's own key for it.
    pub key: String,
    /// A name for people.
    pub name: String,
    /// Arms as last published (or as created), control first.
    pub arms: Arms,
    /// Metrics as last published (or as created).
    pub metrics: Vec<MetricDef>,
    /// The bucketing salt.
    pub salt: String,
    /// When it was created, microseconds since the epoch.
    pub created_at_us: i64,
}

/// An immutable published version of a campaign.
#[derive(Debug, Clone, Serialize)]
pub struct CampaignVersion {
    /// The campaign.
    pub campaign_id: String,
    /// 1, 2, … in publish order.
    pub version: i64,
    /// Arms of this version, control first.
    pub arms: Arms,
    /// Metrics of this version.
    pub metrics: Vec<MetricDef>,
    /// The bucketing salt of this version.
    pub salt: String,
    /// The publisher's note.
    pub note: Option<String>,
    /// When it was published, microseconds since the epoch.
    pub published_at_us: i64,
}

/// Aggregates of one metric in one arm and one window (event or arrival time), summed
/// over units by the store. The four value sums are infinite when some unit's value is
/// out of range (only rows stored before outcome values were bounded; the store's
/// `UNIT_VALUE_ABS_MAX`): see [`WindowSums::values_finite`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowSums {
    /// Units with at least one stored event in the window.
    pub units_with_events: f64,
    /// Stored outcome events.
    pub events: f64,
    /// Σ n² over units, for the per-unit count's variance.
    pub events_sq: f64,
    /// Σ of stored values.
    pub value: f64,
    /// Σ v² over units, for the per-unit value's variance.
    pub value_sq: f64,
    /// Duplicate deliveries suppressed.
    pub duplicates: f64,
    /// Σ of the values of suppressed duplicates.
    pub duplicate_value: f64,
    /// Σ (n + dn)², for the naive per-unit count's variance.
    pub naive_events_sq: f64,
    /// Σ (v + dv)², for the naive per-unit value's variance.
    pub naive_value_sq: f64,
}

impl WindowSums {
    /// True when the value sums are usable (finite).
    pub fn values_finite(&self) -> bool {
        [
            self.value,
            self.value_sq,
            self.duplicate_value,
            self.naive_value_sq,
        ]
        .iter()
        .all(|x| x.is_finite())
    }
}

/// Aggregates of one metric in one arm.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricArmSums {
    /// Outcomes within the window measured from assignment on event time.
    pub event_time: WindowSums,
    /// The same on arrival time, for comparison.
    pub arrival_time: WindowSums,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_are_never_empty_and_the_first_is_the_control() {
        assert_eq!(Arms::try_from(Vec::new()), Err(ArmsError::Empty));
        let arms: Arms = serde_json::from_str(
            r#"[{"key": "control", "weight": 1}, {"key": "treatment", "weight": 3}]"#,
        )
        .expect("arms");
        assert_eq!(arms.control().key, "control");
        assert_eq!(arms.treatments().len(), 1);
        assert!(arms.is_control("control") && !arms.is_control("treatment"));
        assert!(serde_json::from_str::<Arms>("[]").is_err());
        assert_eq!(
            serde_json::to_string(&arms).expect("json"),
            r#"[{"key":"control","weight":1},{"key":"treatment","weight":3}]"#
        );
    }
}
