//! Deterministic bucketing of a unit into an arm: SHA-256 of the campaign's salt and the
//! unit id, reduced modulo the total weight, mapped through the cumulative weights.

use crate::{Arm, AssignmentId, CampaignId};
use sha2::{Digest, Sha256};

/// The arm `unit_id` falls into under `arms` (in their order; weights positive).
pub fn bucket<'a>(salt: &str, unit_id: &str, arms: &'a [Arm]) -> Option<&'a Arm> {
    let total: u64 = arms.iter().map(|a| u64::from(a.weight)).sum();
    if total == 0 {
        return None;
    }
    let digest = Sha256::new()
        .chain_update(salt.as_bytes())
        .chain_update(b":")
        .chain_update(unit_id.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // 2^64 mod total is below 2^-40 of a bucket for any realistic total: negligible bias.
    let mut point = u64::from_be_bytes(first) % total;
    for arm in arms {
        let weight = u64::from(arm.weight);
        if point < weight {
            return Some(arm);
        }
        point -= weight;
    }
    arms.last()
}

/// The assignment id of a unit in a campaign: deterministic, so a retried assignment
/// request names the same assignment.
pub fn assignment_id(campaign_id: &CampaignId, unit_id: &str) -> AssignmentId {
    let digest = Sha256::new()
        .chain_update(campaign_id.as_str().as_bytes())
        .chain_update(b"\n")
        .chain_update(unit_id.as_bytes())
        .finalize();
    AssignmentId::from_digest(&digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arms(weights: &[u32]) -> Vec<Arm> {
        weights
            .iter()
            .enumerate()
            .map(|(i, w)| Arm {
                key: format!("arm{i}"),
                weight: *w,
            })
            .collect()
    }

    #[test]
    fn bucketing_is_deterministic_and_follows_the_weights() {
        let arms = arms(&[1, 3]);
        let units = 40_000;
        let treated = (0..units)
            .filter(|u| {
                bucket("salt", &format!("user-{u}"), &arms).map(|a| a.key.as_str()) == Some("arm1")
            })
            .count();
        let share = treated as f64 / units as f64;
        assert!((share - 0.75).abs() < 0.01, "share {share}");
        assert_eq!(
            bucket("salt", "user-7", &arms),
            bucket("salt", "user-7", &arms)
        );
    }

    #[test]
    fn a_different_salt_reshuffles_units() {
        let arms = arms(&[1, 1]);
        let moved = (0..1000)
            .filter(|u| bucket("a", &u.to_string(), &arms) != bucket("b", &u.to_string(), &arms))
            .count();
        assert!((400..600).contains(&moved), "{moved}");
    }

    #[test]
    fn assignment_ids_are_stable_and_distinct() {
        let id = |c: &str| CampaignId::try_from(c).map(|c| assignment_id(&c, "u"));
        assert_eq!(id("cmp_1"), id("cmp_1"));
        assert_ne!(id("cmp_1"), id("cmp_2"));
        assert_eq!(id("cmp_1").map(|a| a.as_str().len()), Ok(36));
    }
}
