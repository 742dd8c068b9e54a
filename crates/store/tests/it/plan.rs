//! `plan`: which rows a batch offers to the database, and how the rows the database then
//! holds are read back into one outcome per input.

use std::collections::HashMap;

use serde_json::{json, Value};
use traqlyte_identity::{Contract, EventId};
use traqlyte_store::plan::{colliding_stored_ids, resolve, Batch, Held};
use traqlyte_store::{EventOutcome, NewEvent, StoreError};

fn event(order: &str, note: &str) -> NewEvent {
    let contract = Contract::from_json(&json!({
        "name": "order", "version": 1, "fields": [{"pointer": "/order", "required": true}]
    }))
    .expect("contract");
    let value: Value = json!({"order": order, "note": note});
    NewEvent {
        identified: contract.identify(&value).expect("identified"),
        payload: value.to_string(),
    }
}

fn held(event: &NewEvent, inserted_here: bool, superseded_by: &[&NewEvent]) -> Held {
    Held {
        inserted_here,
        fingerprint: event.identified.fingerprint.clone(),
        payload: (!inserted_here).then(|| event.payload.clone()),
        superseded_by: superseded_by
            .iter()
            .map(|e| e.identified.fingerprint.clone())
            .collect(),
    }
}

fn id(event: &NewEvent) -> EventId {
    event.identified.event_id.clone()
}

#[test]
fn a_batch_offers_each_event_id_once_in_id_order() {
    let events = [
        event("b", "x"),
        event("a", "x"),
        event("b", "x"),
        event("a", "y"),
    ];
    let batch = Batch::new(&events);
    let mut expected = vec![0, 1];
    expected.sort_by_key(|index| id(&events[*index]));
    assert_eq!(batch.candidates, expected);
}

#[test]
fn repeats_inside_one_batch_are_a_retry_or_a_collision_against_the_first() {
    let events = [event("a", "x"), event("a", "x"), event("a", "edited")];
    let batch = Batch::new(&events);
    let rows = HashMap::from([(id(&events[0]), held(&events[0], true, &[]))]);
    let resolution = resolve(&batch, &rows).expect("resolved");
    assert!(matches!(
        resolution.outcomes.as_slice(),
        [
            EventOutcome::Inserted,
            EventOutcome::Duplicate,
            EventOutcome::Collision { .. }
        ]
    ));
    assert_eq!((resolution.inserted, resolution.duplicates), (1, 1));
    assert_eq!(resolution.collisions.len(), 1);
    // The stored payload of the collision is the first input's: this batch wrote it.
    assert_eq!(resolution.collisions[0].stored_payload, events[0].payload);
    // Rows this batch inserted need no read-back for the collision log.
    assert!(colliding_stored_ids(&batch, &rows).is_empty());
}

#[test]
fn a_resend_of_a_superseding_correction_is_a_retry_not_a_collision() {
    let original = event("a", "x");
    let correction = event("a", "corrected");
    let other = event("a", "something else");
    let events = [correction.clone(), other.clone()];
    let batch = Batch::new(&events);
    let rows = HashMap::from([(id(&original), held(&original, false, &[&correction]))]);
    let resolution = resolve(&batch, &rows).expect("resolved");
    assert!(matches!(
        resolution.outcomes.as_slice(),
        [EventOutcome::Duplicate, EventOutcome::Collision { .. }]
    ));
    assert_eq!(resolution.collisions[0].stored_payload, original.payload);
    assert_eq!(colliding_stored_ids(&batch, &rows), vec![id(&original)]);
}

#[test]
fn a_row_that_is_neither_inserted_nor_found_is_reported_as_corrupt() {
    let events = [event("a", "x")];
    let batch = Batch::new(&events);
    let err = resolve(&batch, &HashMap::new()).err().expect("corrupt");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
}
