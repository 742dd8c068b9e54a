//! The pure decision of the idempotency layer, given what the store holds for a key.

use traqlyte_store::{KeyRecord, StoredResponse};

/// What to do with a request carrying an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No reservation: insert one.
    Reserve,
    /// Completed with the same request: replay the stored response.
    Replay(StoredResponse),
    /// The key was used for a different request: 409, never a replay.
    Reused,
    /// Reserved recently and not completed: 409 with `Retry-After`.
    InFlight { retry_after_s: u64 },
    /// Reserved longer ago than the cutoff and not completed (its owner died): take it over.
    TakeOver { stale_owner: String },
}

/// Decides from the key's row. A different checksum is `Reused` whatever the row's state.
pub fn decide(
    record: Option<&KeyRecord>,
    checksum: &str,
    now_us: i64,
    stale_after_us: i64,
) -> Decision {
    let Some(record) = record else {
        return Decision::Reserve;
    };
    if record.checksum != checksum {
        return Decision::Reused;
    }
    if let Some(response) = &record.response {
        return Decision::Replay(response.clone());
    }
    let age_us = now_us.saturating_sub(record.reserved_at_us);
    if age_us < stale_after_us {
        let remaining_us = stale_after_us - age_us;
        return Decision::InFlight {
            retry_after_s: (remaining_us as u64).div_ceil(1_000_000),
        };
    }
    Decision::TakeOver {
        stale_owner: record.owner.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(checksum: &str, reserved_at_us: i64, done: bool) -> KeyRecord {
        KeyRecord {
            checksum: checksum.into(),
            owner: "owner-1".into(),
            reserved_at_us,
            response: done.then(|| StoredResponse {
                status: 201,
                headers: vec![],
                body: b"{}".to_vec(),
            }),
        }
    }

    #[test]
    fn each_state_of_a_key_leads_to_its_decision() {
        let cutoff = 30_000_000;
        assert_eq!(decide(None, "a", 0, cutoff), Decision::Reserve);
        assert_eq!(
            decide(Some(&record("b", 0, true)), "a", 0, cutoff),
            Decision::Reused
        );
        assert_eq!(
            decide(Some(&record("b", 0, false)), "a", 0, cutoff),
            Decision::Reused
        );
        assert!(matches!(
            decide(Some(&record("a", 0, true)), "a", 99 * cutoff, cutoff),
            Decision::Replay(_)
        ));
        assert_eq!(
            decide(Some(&record("a", 0, false)), "a", 10_000_000, cutoff),
            Decision::InFlight { retry_after_s: 20 }
        );
        assert_eq!(
            decide(Some(&record("a", 0, false)), "a", 29_999_999, cutoff),
            Decision::InFlight { retry_after_s: 1 }
        );
        assert_eq!(
            decide(Some(&record("a", 0, false)), "a", cutoff, cutoff),
            Decision::TakeOver {
                stale_owner: "owner-1".into()
            }
        );
    }
}
