//! The pure decision of the idempotency layer, given what the store holds for a key.

use traqlyte_store::{KeyRecord, OwnerToken, StoredResponse};

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
    InFlight {
        /// Seconds the client should wait before retrying.
        retry_after_s: u64,
    },
    /// Reserved longer ago than the cutoff and not completed (its owner died): take it over.
    TakeOver {
        /// The token of the dead owner, the compare-and-set's expected value.
        stale_owner: OwnerToken,
    },
}

/// Decides from the key's row. A different checksum is `Reused` whatever the row's state.
/// The reservation's age is read on the store's clock (the row carries the time of its
/// read), so servers with different clocks decide alike.
pub fn decide(record: Option<&KeyRecord>, checksum: &str, stale_after_us: i64) -> Decision {
    let Some(record) = record else {
        return Decision::Reserve;
    };
    if record.checksum != checksum {
        return Decision::Reused;
    }
    if let Some(response) = &record.response {
        return Decision::Replay(response.clone());
    }
    let age_us = record.read_at_us.saturating_sub(record.reserved_at_us);
    if age_us < stale_after_us {
        return Decision::InFlight {
            retry_after_s: retry_after_s(age_us, stale_after_us - age_us),
        };
    }
    Decision::TakeOver {
        stale_owner: record.owner.clone(),
    }
}

/// How long an in-flight duplicate should wait: about as long again as the owner has
/// already run (a request a few milliseconds old is likely done within a second), at
/// least 1 s (the header's unit) and never past the moment the reservation may be taken
/// over.
fn retry_after_s(age_us: i64, remaining_us: i64) -> u64 {
    let seconds = |us: i64| (us.max(0) as u64).div_ceil(1_000_000);
    seconds(age_us).clamp(1, seconds(remaining_us).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row read `age_us` after its reservation (on the store's clock).
    fn record(checksum: &str, age_us: i64, done: bool) -> KeyRecord {
        KeyRecord {
            checksum: checksum.into(),
            owner: OwnerToken::generate(),
            reserved_at_us: 1_000_000,
            read_at_us: 1_000_000 + age_us,
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
        assert_eq!(decide(None, "a", cutoff), Decision::Reserve);
        assert_eq!(
            decide(Some(&record("b", 0, true)), "a", cutoff),
            Decision::Reused
        );
        assert_eq!(
            decide(Some(&record("b", 0, false)), "a", cutoff),
            Decision::Reused
        );
        assert!(matches!(
            decide(Some(&record("a", 99 * cutoff, true)), "a", cutoff),
            Decision::Replay(_)
        ));
        assert_eq!(
            decide(Some(&record("a", 10_000_000, false)), "a", cutoff),
            Decision::InFlight { retry_after_s: 10 }
        );
        assert_eq!(
            decide(Some(&record("a", 29_999_999, false)), "a", cutoff),
            Decision::InFlight { retry_after_s: 1 }
        );
        let stale = record("a", cutoff, false);
        assert_eq!(
            decide(Some(&stale), "a", cutoff),
            Decision::TakeOver {
                stale_owner: stale.owner.clone()
            }
        );
    }

    #[test]
    fn retry_after_grows_with_the_reservation_age_up_to_the_takeover() {
        let cutoff = 30_000_000;
        let cases = [
            (2_000, 1),
            (999_999, 1),
            (1_500_000, 2),
            (10_000_000, 10),
            (20_000_000, 10),
            (29_000_000, 1),
        ];
        for (age_us, expected_s) in cases {
            assert_eq!(
                decide(Some(&record("a", age_us, false)), "a", cutoff),
                Decision::InFlight {
                    retry_after_s: expected_s
                },
                "age {age_us} µs"
            );
        }
    }
}
