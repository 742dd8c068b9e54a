//! Recorded constants, re-derived by hand in Python when they were frozen
//! (`sha256(JCS({"metric","occurred_at_us","value"}))`, `"asg_" + sha256(campaign + "\n" +
//! unit)[:32]`, `int(sha256(salt + ":" + unit)[:8]) % total weight`,
//! `"out_" + sha256("\n".join([tenant, campaign, assignment, dedupe_key]))[:32]`).

use traqlyte_experiments::bucketing::{assignment_id, bucket};
use traqlyte_experiments::CampaignId;
use traqlyte_experiments::{
    outcome_fingerprint, outcome_id, untimed_outcome_fingerprint, Arm, AssignmentId, DedupeKey,
};

#[test]
fn outcome_ids_are_frozen() {
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "ten_1",
            "cmp_1",
            "asg_ae91d74e83c8d6f362465e4df0b9a968",
            "prod:checkout:order_1",
            "out_c22b68d0cc2860c7c5f359e429079c15",
        ),
        (
            "ten_2",
            "cmp_1",
            "asg_ae91d74e83c8d6f362465e4df0b9a968",
            "prod:checkout:order_1",
            "out_adf6aeef1e1d7f2bb58929bf43bca371",
        ),
        (
            "ten_1",
            "cmp_2",
            "asg_eac1458637e16b2154370c7b13effb29",
            "ключ ✓",
            "out_1017fa3ecd4bcd9ccfe3d6015202d094",
        ),
    ];
    for (tenant, campaign, assignment, key, expected) in cases {
        let campaign = CampaignId::try_from(*campaign).expect("a fixture campaign id");
        let assignment = AssignmentId::try_from(*assignment).expect("a fixture assignment id");
        let key = DedupeKey::try_from(*key).expect("a fixture dedupe key");
        assert_eq!(
            outcome_id(tenant, &campaign, &assignment, &key).as_str(),
            *expected
        );
    }
}

#[test]
fn outcome_fingerprints_are_frozen() {
    let cases: &[(&str, Option<f64>, i64, &str)] = &[
        (
            "purchase",
            None,
            1_795_953_600_000_000,
            "d04633799d58d8633f779c954450c00ec14febfa9a4777d535a5a6609249f67f",
        ),
        (
            "revenue",
            Some(129.99),
            1_795_953_600_000_000,
            "162b0ec89a438e20f0f3f7e2eb5084e7032fbb9e24702876bdd49118ca8751ee",
        ),
        (
            "revenue",
            Some(0.1),
            0,
            "cc68bec6f6fc18e85af96dc3f3b4ddf448d6be79db6d2d18bc47305fb0f6f175",
        ),
    ];
    for (metric, value, at, expected) in cases {
        assert_eq!(
            outcome_fingerprint(metric, *value, *at),
            *expected,
            "{metric}"
        );
    }
    // A fact without a time of its own (a Segment message without `timestamp`).
    assert_eq!(
        untimed_outcome_fingerprint("revenue", Some(129.99)),
        "b9fb29b2107f6482f93e885f96a3f2d8802024c2aa120937f41514e59eb7786b"
    );
}

#[test]
fn assignment_ids_and_buckets_are_frozen() {
    let arms = vec![
        Arm {
            key: "control".into(),
            weight: 1,
        },
        Arm {
            key: "treatment".into(),
            weight: 1,
        },
    ];
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "cmp_1",
            "salt-a",
            "user-1",
            "asg_ae91d74e83c8d6f362465e4df0b9a968",
            "control",
        ),
        (
            "cmp_1",
            "salt-a",
            "user-2",
            "asg_820160afb7871b641adba29a26e7ca97",
            "treatment",
        ),
        (
            "cmp_2",
            "salt-b",
            "user-1",
            "asg_eac1458637e16b2154370c7b13effb29",
            "treatment",
        ),
    ];
    for (campaign, salt, unit, id, arm) in cases {
        let campaign = CampaignId::try_from(*campaign).expect("a fixture campaign id");
        assert_eq!(assignment_id(&campaign, unit).as_str(), *id);
        let placed = bucket(salt, unit, &arms).map(|a| a.key.as_str());
        assert_eq!(placed, Some(*arm), "{salt} {unit}");
    }
}
