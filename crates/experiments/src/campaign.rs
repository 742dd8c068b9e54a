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
    /// New arms ([`Arms::new`]) number fewer than [`Arms::COUNT_MIN`] or more than
    /// [`Arms::COUNT_MAX`].
    #[error(
        "arms must have {}-{} entries, got {got}",
        Arms::COUNT_MIN,
        Arms::COUNT_MAX
    )]
    Count {
        /// How many were given.
        got: usize,
    },
    /// The arm at `index` repeats the key of an earlier one.
    #[error("arm key {key:?} appears twice; arm keys are unique")]
    DuplicateKey {
        /// The position of the second arm with this key.
        index: usize,
        /// The repeated key.
        key: String,
    },
}

impl Arms {
    /// Fewest arms of a new campaign or version: the control and one treatment.
    pub const COUNT_MIN: usize = 2;
    /// Most arms of a new campaign or version.
    pub const COUNT_MAX: usize = 20;

    /// The arms of a new campaign or version: [`Arms::COUNT_MIN`] to [`Arms::COUNT_MAX`]
    /// arms with unique keys, the first the control. (`TryFrom<Vec<Arm>>`, which stored
    /// versions are read with, only requires a control.)
    pub fn new(arms: Vec<Arm>) -> Result<Arms, ArmsError> {
        if !(Self::COUNT_MIN..=Self::COUNT_MAX).contains(&arms.len()) {
            return Err(ArmsError::Count { got: arms.len() });
        }
        if let Some(index) = first_repeat(arms.iter().map(|a| a.key.as_str())) {
            let key = arms[index].key.clone();
            return Err(ArmsError::DuplicateKey { index, key });
        }
        Arms::try_from(arms)
    }

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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// The metrics of a new campaign: at most [`Metrics::COUNT_MAX`], names unique. It
/// becomes the `Vec<MetricDef>` of [`NewCampaign`] through [`Metrics::into_vec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics(Vec<MetricDef>);

/// Why a list of metrics is not a valid [`Metrics`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetricsError {
    /// More than [`Metrics::COUNT_MAX`] metrics.
    #[error("metrics must have 0-{} entries, got {got}", Metrics::COUNT_MAX)]
    Count {
        /// How many were given.
        got: usize,
    },
    /// The metric at `index` repeats the name of an earlier one.
    #[error("metric {name:?} appears twice; metric names are unique")]
    DuplicateName {
        /// The position of the second metric with this name.
        index: usize,
        /// The repeated name.
        name: String,
    },
}

impl Metrics {
    /// Most metrics of a campaign.
    pub const COUNT_MAX: usize = 50;

    /// Checks the count and that names are unique.
    pub fn new(metrics: Vec<MetricDef>) -> Result<Metrics, MetricsError> {
        if metrics.len() > Self::COUNT_MAX {
            return Err(MetricsError::Count { got: metrics.len() });
        }
        if let Some(index) = first_repeat(metrics.iter().map(|m| m.name.as_str())) {
            let name = metrics[index].name.clone();
            return Err(MetricsError::DuplicateName { index, name });
        }
        Ok(Metrics(metrics))
    }

    /// The metrics, in their order.
    pub fn into_vec(self) -> Vec<MetricDef> {
        self.0
    }
}

/// The position of the first key equal to an earlier one.
fn first_repeat<'a>(keys: impl Iterator<Item = &'a str>) -> Option<usize> {
    let mut seen = std::collections::HashSet::new();
    keys.enumerate()
        .find_map(|(index, key)| (!seen.insert(key)).then_some(index))
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

    fn arm(key: &str) -> Arm {
        Arm {
            key: key.into(),
            weight: 1,
        }
    }

    #[test]
    fn new_arms_number_two_to_twenty_with_unique_keys() {
        let keys = |n: usize| (0..n).map(|i| arm(&format!("a{i}"))).collect::<Vec<_>>();
        let cases = [
            (keys(2), Ok(2)),
            (keys(20), Ok(20)),
            (keys(1), Err(ArmsError::Count { got: 1 })),
            (keys(21), Err(ArmsError::Count { got: 21 })),
            (Vec::new(), Err(ArmsError::Count { got: 0 })),
            (
                vec![arm("a"), arm("b"), arm("a")],
                Err(ArmsError::DuplicateKey {
                    index: 2,
                    key: "a".into(),
                }),
            ),
        ];
        for (arms, expected) in cases {
            assert_eq!(Arms::new(arms).map(|a| a.len()), expected);
        }
        let control = Arms::new(vec![arm("c"), arm("t")]).expect("arms");
        assert!(control.is_control("c"));
    }

    #[test]
    fn metrics_number_at_most_fifty_with_unique_names() {
        let metric = |name: &str| MetricDef {
            name: name.into(),
            kind: MetricKind::Count,
            window_hours: 1,
        };
        let named = |n: usize| (0..n).map(|i| metric(&format!("m{i}"))).collect::<Vec<_>>();
        assert_eq!(Metrics::new(Vec::new()).map(|m| m.into_vec().len()), Ok(0));
        assert_eq!(Metrics::new(named(50)).map(|m| m.into_vec().len()), Ok(50));
        assert_eq!(
            Metrics::new(named(51)),
            Err(MetricsError::Count { got: 51 })
        );
        assert_eq!(
            Metrics::new(vec![metric("x"), metric("x")]),
            Err(MetricsError::DuplicateName {
                index: 1,
                name: "x".into()
            })
        );
    }
}
