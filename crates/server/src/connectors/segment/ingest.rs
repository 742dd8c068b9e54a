//! Storing accepted messages in one transaction: the events under `segment.message`
//! through the shared dedupe path (`StoreTx::insert_events`), then, for each message this
//! transaction newly inserted, the outcomes of the metric bindings it matches (the
//! outcome recording path, `StoreTx::record_outcomes`), then the batch's rejections and
//! counts. Nothing is acknowledged before the commit.

use std::collections::HashMap;

use serde_json::Value;
use traqlyte_experiments::{
    outcome_fingerprint, untimed_outcome_fingerprint, CampaignId, DedupeKey, OutcomeValue, UnitId,
};
use traqlyte_identity::pointer::Pointer;
use traqlyte_identity::segment::{message_contract, MessageType, SegmentMessage};
use traqlyte_store::partitions::ahead_of_clock;
use traqlyte_store::{
    BindingTally, Campaign, EventOutcome, IngestSource, MetricBinding, MetricKind, NewEvent,
    NewOutcome, NewRejection, Source, SourceId, SourceTally, Store, StoreTx, TenantId,
};

use crate::ApiError;

/// What a stored request did.
pub(crate) struct Stored {
    /// One outcome per accepted message, in order.
    pub(crate) outcomes: Vec<EventOutcome>,
}

/// Stores `messages` (and records `rejections`) for `source` in one transaction. The
/// HTTP routes and the NATS consumer (`traqlyte.segment`) both come here.
pub(crate) async fn store(
    store: &Store,
    source: &Source,
    messages: &[SegmentMessage],
    rejections: &[NewRejection],
    now_us: i64,
) -> Result<Stored, ApiError> {
    let tenant = &source.tenant;
    let events = messages
        .iter()
        .map(|m| {
            Ok(NewEvent {
                identified: m.identified.clone(),
                payload: serde_json::to_string(&m.payload).map_err(ApiError::internal)?,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let mut tx = store.begin().await?;
    let ingest_source = IngestSource::segment(&source.source_id);
    tx.set_ingest_source(ingest_source.clone());
    let outcomes = tx
        .insert_events(tenant, message_contract(), &events)
        .await?;
    debug_assert_eq!(outcomes.len(), messages.len());
    let new: Vec<(&SegmentMessage, &NewEvent)> = messages
        .iter()
        .zip(&events)
        .zip(&outcomes)
        .filter(|(_, outcome)| **outcome == EventOutcome::Inserted)
        .map(|(pair, _)| pair)
        .collect();
    // Read after the messages are written, in their transaction: only new messages can
    // become outcomes, and a binding declared meanwhile applies to them exactly when it
    // committed first (`StoreTx::bindings_for_events`).
    let bound = Bound::load(&mut tx, tenant, &new).await?;
    let (facts, tallies) = bound.outcomes(&mut tx, source, &new, now_us).await?;
    let recorded = if facts.is_empty() {
        Vec::new()
    } else {
        tx.record_outcomes(tenant, &facts, now_us).await?
    };
    tx.tally_bindings(tenant, &tallies, now_us).await?;
    tx.record_rejections(tenant, &source.source_id, rejections, now_us)
        .await?;
    tx.tally_source(
        tenant,
        &source.source_id,
        tally(&outcomes, rejections),
        now_us,
    )
    .await?;
    tx.commit().await?;
    crate::metrics::record_batch_size("segment", messages.len() + rejections.len());
    crate::metrics::record_events(
        tenant,
        message_contract().name().as_str(),
        &ingest_source,
        &events,
        &outcomes,
        rejections.len(),
    );
    crate::metrics::record_outcomes(tenant, &recorded);
    Ok(Stored { outcomes })
}

fn tally(outcomes: &[EventOutcome], rejections: &[NewRejection]) -> SourceTally {
    let mut tally = SourceTally {
        rejected: rejections.len() as i64,
        ..SourceTally::default()
    };
    for outcome in outcomes {
        match outcome {
            EventOutcome::Inserted => tally.inserted += 1,
            EventOutcome::Duplicate => tally.duplicates += 1,
            EventOutcome::Collision { .. } => tally.collisions += 1,
        }
    }
    tally
}

/// The bindings of the new track messages of a request, with their campaigns, read in
/// the request's transaction.
struct Bound {
    bindings: Vec<(MetricBinding, Campaign)>,
}

impl Bound {
    async fn load(
        tx: &mut StoreTx,
        tenant: &TenantId,
        new: &[(&SegmentMessage, &NewEvent)],
    ) -> Result<Bound, ApiError> {
        let mut events: Vec<&str> = new
            .iter()
            .filter(|(m, _)| m.kind == MessageType::Track)
            .filter_map(|(m, _)| m.event.as_deref())
            .collect();
        events.sort_unstable();
        events.dedup();
        let found = tx.bindings_for_events(tenant, &events).await?;
        let mut ids: Vec<CampaignId> = found.iter().map(|b| b.campaign_id.clone()).collect();
        ids.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        ids.dedup();
        let campaigns: HashMap<CampaignId, Campaign> = tx
            .campaigns_by_id(tenant, &ids)
            .await?
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
        let bindings = found
            .into_iter()
            .filter_map(|binding| {
                let campaign = campaigns.get(&binding.campaign_id)?.clone();
                Some((binding, campaign))
            })
            .collect();
        Ok(Bound { bindings })
    }

    /// The outcomes of the newly stored messages, and per binding what became of them.
    /// The units' assignments are read in one go (a constant number of statements per
    /// request, whatever the number of bound messages).
    async fn outcomes(
        &self,
        tx: &mut StoreTx,
        source: &Source,
        new: &[(&SegmentMessage, &NewEvent)],
        now_us: i64,
    ) -> Result<(Vec<NewOutcome>, Vec<BindingTally>), ApiError> {
        let bound = |binding: &MetricBinding, message: &SegmentMessage| {
            message.kind == MessageType::Track
                && message.event.as_deref() == Some(binding.event.as_str())
        };
        let mut wanted: Vec<(&CampaignId, UnitId)> = Vec::new();
        for (binding, campaign) in &self.bindings {
            for (message, _) in new.iter().filter(|(m, _)| bound(binding, m)) {
                wanted.extend(units(message).map(|unit| (&campaign.id, unit)));
            }
        }
        let pairs: Vec<(&CampaignId, &UnitId)> = wanted.iter().map(|(c, u)| (*c, u)).collect();
        let assignments = tx.assignments_for_units(&source.tenant, &pairs).await?;
        let mut facts = Vec::new();
        let mut tallies = Vec::new();
        for (binding, campaign) in &self.bindings {
            let mut tally = BindingTally {
                campaign_id: binding.campaign_id.clone(),
                metric: binding.metric.clone(),
                event: binding.event.clone(),
                outcomes: 0,
                unassigned: 0,
                unusable: 0,
            };
            for (message, event) in new.iter().filter(|(m, _)| bound(binding, m)) {
                let fact = Fact::of(binding, campaign, source, message, event)
                    .filter(|fact| fact.happened_by(now_us));
                let Some(fact) = fact else {
                    tally.unusable += 1;
                    continue;
                };
                // The unit by `userId`, else by `anonymousId`.
                let found =
                    units(message).find_map(|unit| assignments.get(&(campaign.id.clone(), unit)));
                match found {
                    Some(assignment) => {
                        facts.push(fact.into_outcome(assignment.clone()));
                        tally.outcomes += 1;
                    }
                    None => tally.unassigned += 1,
                }
            }
            if tally.outcomes + tally.unassigned + tally.unusable > 0 {
                tallies.push(tally);
            }
        }
        Ok((facts, tallies))
    }
}

/// The message's units, `userId` first, then `anonymousId`, each as sent before its NFC
/// form where the two differ (assignments keep a unit's bytes as given); an id no
/// assignment could have been made for (too long, NUL) is none.
fn units(message: &SegmentMessage) -> impl Iterator<Item = UnitId> + '_ {
    let as_sent = |nfc: &Option<String>| {
        nfc.as_ref().and_then(|nfc| {
            message
                .units_as_sent
                .iter()
                .find(|raw| traqlyte_identity::canonical::nfc(raw) == *nfc)
        })
    };
    [&message.user_id, &message.anonymous_id]
        .into_iter()
        .flat_map(move |nfc| [as_sent(nfc), nfc.as_ref()])
        .flatten()
        .filter_map(|unit| UnitId::try_from(unit.as_str()).ok())
}

/// An outcome before its unit is matched.
struct Fact {
    dedupe_key: DedupeKey,
    metric: String,
    value: Option<f64>,
    /// The message's event time, clock-skew-corrected: where the fact falls in a window.
    occurred_at_us: i64,
    /// The client's own `timestamp`, the one time every re-send repeats: the fingerprint's.
    client_at_us: Option<i64>,
    window_us: i64,
    payload: String,
}

impl Fact {
    /// `None` when the message lacks a usable value or business key, or the campaign no
    /// longer has the metric.
    fn of(
        binding: &MetricBinding,
        campaign: &Campaign,
        source: &Source,
        message: &SegmentMessage,
        event: &NewEvent,
    ) -> Option<Fact> {
        let definition = campaign.metrics.iter().find(|m| m.name == binding.metric)?;
        let value = match &binding.value_pointer {
            Some(pointer) => Some(number_at(&message.payload, pointer)?),
            None => None,
        };
        if definition.kind == MetricKind::Sum && value.is_none() {
            return None;
        }
        let key = match &binding.key_pointer {
            Some(pointer) => escape_colons(&key_at(&message.payload, pointer)?).into_owned(),
            // Two parts: never the one part an escaped business key is.
            None => format!("message:{}", event.identified.event_id),
        };
        // Outcomes are unique per (assignment, dedupe key) whatever their metric, so the
        // metric closes the key: one order may feed a conversion and a sum.
        let dedupe_key = format!(
            "{}:{}:{key}:{}",
            source.source_id,
            escape_colons(&binding.event),
            escape_colons(&binding.metric)
        );
        let dedupe_key = bounded_dedupe_key(&source.source_id, dedupe_key)?;
        // The fact falls in a window at the corrected time (a device clock minutes behind
        // would put a conversion before its assignment), but only the client's own
        // timestamp, which every re-send repeats, is in its fingerprint: the corrected one
        // moves with each sentAt and receivedAt, and a re-sent fact is a duplicate outcome,
        // not a collision. Without a client timestamp the fact has no time of its own.
        let occurred_at_us = message.identified.occurred_at_us?;
        Some(Fact {
            dedupe_key,
            metric: binding.metric.clone(),
            value,
            occurred_at_us,
            client_at_us: message.original_timestamp_us,
            window_us: i64::from(definition.window_hours) * 3_600_000_000,
            payload: event.payload.clone(),
        })
    }

    /// Whether the fact's corrected time is no further ahead of `now_us` than the clock
    /// skew `POST /outcome` allows (a day): a client whose `timestamp` is ahead of its own
    /// `sentAt` puts the corrected time in the future, and such a fact counted inside a
    /// long window as if it had happened. It is `unusable`; the message is stored.
    fn happened_by(&self, now_us: i64) -> bool {
        !ahead_of_clock(self.occurred_at_us, now_us)
    }

    fn into_outcome(self, assignment: traqlyte_store::Assignment) -> NewOutcome {
        NewOutcome {
            assignment,
            fingerprint: match self.client_at_us {
                Some(at) => outcome_fingerprint(&self.metric, self.value, at),
                None => untimed_outcome_fingerprint(&self.metric, self.value),
            },
            dedupe_key: self.dedupe_key,
            metric: self.metric,
            value: self.value,
            occurred_at_us: self.occurred_at_us,
            window_us: self.window_us,
            payload: self.payload,
        }
    }
}

/// A binding's dedupe key as stored: `key` itself when it is a valid [`DedupeKey`] (up to
/// 512 characters, no NUL), else `{source}:sha256:{hex of key}`. A long business key is
/// then still one fact, counted once, instead of a message that never becomes an outcome.
/// The digest form has three parts between unescaped colons, a written key four, so the
/// two never meet.
fn bounded_dedupe_key(source: &SourceId, key: String) -> Option<DedupeKey> {
    DedupeKey::try_from(key.as_str())
        .or_else(|_| {
            DedupeKey::try_from(format!(
                "{source}:sha256:{}",
                traqlyte_identity::sha256_hex(key.as_bytes())
            ))
        })
        .ok()
}

/// `text` as one part of a dedupe key whose parts are joined by `:`: each `\` doubled and
/// each `:` escaped as `\:`, so no two (event, business key, metric) share a key (unescaped,
/// event `a:b` with key `c` and event `a` with key `b:c` did). A part without either
/// character is unchanged, so such keys are what they were before escaping.
fn escape_colons(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains([':', '\\']) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == ':' || c == '\\' {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    std::borrow::Cow::Owned(escaped)
}

/// A finite number within the outcome bound at `pointer`.
fn number_at(payload: &Value, pointer: &str) -> Option<f64> {
    let value = Pointer::parse(pointer).ok()?.get(payload)?.as_f64()?;
    // The rule of `POST /outcome`: finite, within the bound, -0 read as 0.
    OutcomeValue::try_from(value).ok().map(OutcomeValue::get)
}

/// A business key at `pointer`: a non-empty string without NUL, or an integer.
fn key_at(payload: &Value, pointer: &str) -> Option<String> {
    match Pointer::parse(pointer).ok()?.get(payload)? {
        Value::String(text) if !text.is_empty() && !text.contains('\0') => Some(text.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

/// Counts `rejected` messages of `source` refused before the store, with nothing stored
/// (a single call's invalid message, a batch whose every message is invalid), as the
/// native routes count a refused event.
pub(crate) fn count_refused(source: &Source, rejected: usize) {
    crate::metrics::record_events(
        &source.tenant,
        message_contract().name().as_str(),
        &IngestSource::segment(&source.source_id),
        &[],
        &[],
        rejected,
    );
}

#[cfg(test)]
mod tests {
    use super::escape_colons;

    #[test]
    fn escaped_parts_never_join_into_another_tuples_key() {
        let key = |event: &str, business: &str, metric: &str| {
            format!(
                "src:{}:{}:{}",
                escape_colons(event),
                escape_colons(business),
                escape_colons(metric)
            )
        };
        assert_ne!(key("a:b", "c", "m"), key("a", "b:c", "m"));
        assert_ne!(key("a\\", "b", "m"), key("a", "\\:b", "m"));
        assert_ne!(key("a", "b:m", "n"), key("a", "b", "m:n"));
        // Parts without `:` or `\` are as they were.
        assert_eq!(
            key("Order Completed", "o-77", "revenue"),
            "src:Order Completed:o-77:revenue"
        );
        assert_eq!(escape_colons("a:b\\c"), "a\\:b\\\\c");
    }
}
