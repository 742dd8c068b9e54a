//! The pure part of storing a batch: which rows to try to insert, and how to read the
//! result of `INSERT … ON CONFLICT DO NOTHING` back into one outcome per input event.
//!
//! Several inputs of one batch may share an event id. Only the first is offered to the
//! database; the others are judged against whatever row the database ends up holding.

use std::collections::HashMap;

use traqlyte_identity::{EventId, Fingerprint};

use crate::{EventOutcome, NewEvent};

/// A batch prepared for insertion.
pub struct Batch<'a> {
    /// The inputs, in request order.
    pub events: &'a [NewEvent],
    /// Indices (into `events`) of the first occurrence of each event id, sorted by event
    /// id so concurrent transactions take index locks in one order and cannot deadlock.
    pub candidates: Vec<usize>,
}

impl<'a> Batch<'a> {
    /// Picks the candidates of `events`.
    pub fn new(events: &'a [NewEvent]) -> Batch<'a> {
        let mut first: HashMap<&EventId, usize> = HashMap::with_capacity(events.len());
        for (index, event) in events.iter().enumerate() {
            first.entry(&event.identified.event_id).or_insert(index);
        }
        let mut candidates: Vec<usize> = first.into_values().collect();
        candidates.sort_by(|a, b| {
            events[*a]
                .identified
                .event_id
                .cmp(&events[*b].identified.event_id)
        });
        Batch { events, candidates }
    }
}

/// The row the database holds for an event id after the insert statement.
#[derive(Debug, Clone)]
pub struct Held {
    /// True when this batch's insert created the row.
    pub inserted_here: bool,
    /// The stored row's fingerprint.
    pub fingerprint: Fingerprint,
    /// The stored row's payload; `None` when this batch inserted it (the payload is the
    /// candidate's own, no need to copy it).
    pub payload: Option<String>,
    /// Fingerprints of corrections that superseded the stored row: a resend carrying one
    /// of them is a retry, not a collision.
    pub superseded_by: Vec<Fingerprint>,
}

impl Held {
    /// A row this batch's insert created, holding the candidate's fingerprint.
    pub fn inserted(fingerprint: &Fingerprint) -> Held {
        Held {
            inserted_here: true,
            fingerprint: fingerprint.clone(),
            payload: None,
            superseded_by: Vec::new(),
        }
    }

    /// A row stored before this batch.
    pub fn stored(fingerprint: Fingerprint) -> Held {
        Held {
            inserted_here: false,
            fingerprint,
            payload: None,
            superseded_by: Vec::new(),
        }
    }
}

/// A collision to log.
#[derive(Debug, Clone)]
pub struct Collision<'a> {
    /// The input that collides.
    pub event: &'a NewEvent,
    /// Fingerprint of the stored row.
    pub stored_fingerprint: Fingerprint,
    /// Payload of the stored row.
    pub stored_payload: String,
}

/// Outcomes, collisions to log, and counts to tally.
pub struct Resolution<'a> {
    /// Stored outcomes.
    pub outcomes: Vec<EventOutcome>,
    /// Collisions to log.
    pub collisions: Vec<Collision<'a>>,
    /// Rows inserted.
    pub inserted: i64,
    /// Duplicate deliveries suppressed.
    pub duplicates: i64,
}

/// Reads the held rows back into one outcome per input. `held` must contain every
/// candidate's event id (a missing one means the row vanished: reported as corrupt).
pub fn resolve<'a>(
    batch: &Batch<'a>,
    held: &HashMap<EventId, Held>,
) -> Result<Resolution<'a>, crate::StoreError> {
    let mut resolution = Resolution {
        outcomes: Vec::with_capacity(batch.events.len()),
        collisions: Vec::new(),
        inserted: 0,
        duplicates: 0,
    };
    let mut first_index: HashMap<&EventId, usize> = HashMap::new();
    for (index, event) in batch.events.iter().enumerate() {
        let id = &event.identified.event_id;
        let row = held.get(id).ok_or_else(|| {
            crate::StoreError::Corrupt(format!("event {id} neither inserted nor found"))
        })?;
        let first = *first_index.entry(id).or_insert(index);
        let outcome = if row.inserted_here && first == index {
            resolution.inserted += 1;
            EventOutcome::Inserted
        } else if row.fingerprint == event.identified.fingerprint
            || row.superseded_by.contains(&event.identified.fingerprint)
            || event.identified.retry_of.contains(&row.fingerprint)
            || is_earlier_attempt(batch, first, event, row)
        {
            resolution.duplicates += 1;
            EventOutcome::Duplicate
        } else {
            let stored_payload = row
                .payload
                .clone()
                .unwrap_or_else(|| batch.events[first].payload.clone());
            resolution.collisions.push(Collision {
                event,
                stored_fingerprint: row.fingerprint.clone(),
                stored_payload,
            });
            EventOutcome::Collision {
                stored_fingerprint: row.fingerprint.clone(),
            }
        };
        resolution.outcomes.push(outcome);
    }
    Ok(resolution)
}

/// Whether `event` is an earlier attempt of the row held for its id, which a retry
/// changed in flight reached first (`Identified::is_earlier_attempt_of`): the row this
/// batch inserted is judged by its candidate's alternates, a row stored before by its
/// payload (read on the collision path only).
fn is_earlier_attempt(batch: &Batch<'_>, first: usize, event: &NewEvent, row: &Held) -> bool {
    if !event.identified.may_precede_identify {
        return false;
    }
    match &row.payload {
        Some(stored) => event
            .identified
            .is_earlier_attempt_of(stored, &row.fingerprint),
        None => {
            row.inserted_here
                && batch.events[first]
                    .identified
                    .retry_of
                    .contains(&event.identified.fingerprint)
        }
    }
}

/// Ids of stored rows (not inserted by this batch) that some input of the batch collides
/// with: only their payloads need reading, for the collision log.
pub fn colliding_stored_ids(batch: &Batch<'_>, held: &HashMap<EventId, Held>) -> Vec<EventId> {
    let mut ids: Vec<EventId> = Vec::new();
    for event in batch.events {
        let id = &event.identified.event_id;
        let collides = held.get(id).is_some_and(|row| {
            let fingerprint = &event.identified.fingerprint;
            !row.inserted_here
                && &row.fingerprint != fingerprint
                && !row.superseded_by.contains(fingerprint)
                && !event.identified.retry_of.contains(&row.fingerprint)
        });
        if collides && !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    ids
}
