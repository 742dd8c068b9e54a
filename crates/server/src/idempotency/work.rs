//! [`Work`]: how a mutating handler gets its transaction. Under the idempotency layer the
//! handler hands its transaction back uncommitted and the layer commits it together with
//! the stored response; without the layer the handler's `finish` commits it.

use std::sync::{Arc, Mutex};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use traqlyte_store::{Store, StoreTx};

use crate::{ApiError, AppState};

/// Placed in request extensions by the idempotency layer.
#[derive(Clone)]
pub struct WorkSlot(pub Arc<Mutex<Option<StoreTx>>>);

/// A handler's unit of work.
pub struct Work {
    store: Store,
    slot: Option<WorkSlot>,
}

impl Work {
    /// Opens the handler's write transaction. All of the handler's writes go through it.
    pub async fn begin(&self) -> Result<StoreTx, ApiError> {
        Ok(self.store.begin().await?)
    }

    /// Whether the request carries an idempotency key: its writes must then commit in
    /// the layer's transaction, together with the stored response.
    pub fn is_idempotent(&self) -> bool {
        self.slot.is_some()
    }

    /// Ends the handler's writes: commits now, or, under the idempotency layer, hands the
    /// transaction to the layer to commit with the stored response.
    pub async fn finish(&self, tx: StoreTx) -> Result<(), ApiError> {
        match &self.slot {
            Some(WorkSlot(slot)) => {
                let mut guard = slot
                    .lock()
                    .map_err(|_| ApiError::internal("work slot poisoned"))?;
                *guard = Some(tx);
                Ok(())
            }
            None => Ok(tx.commit().await?),
        }
    }
}

impl FromRequestParts<AppState> for Work {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Work {
            store: state.store.clone(),
            slot: parts.extensions.get::<WorkSlot>().cloned(),
        })
    }
}
