//! How the demo's booking calls carry their idempotency key: the
//! product's way, or broken on purpose so a test can see
//! `orders.duplicate_bookings` move (the demo runs on either).

use std::sync::Arc;

use async_trait::async_trait;
use lifeboat_core::Operation;
use lifeboat_core::OperatorId;
use lifeboat_core::ports::{OutcomeWrite, RequestStore, StoreError, StoredRequest};
use lifeboat_core::request::{Outcome, RequestRecord};

/// Which key a booking call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BookingKey {
    /// The product's: the order's id, the same on every attempt, so the
    /// operator books an order once however often it is asked.
    #[default]
    Order,
    /// Broken: each attempt's own request id, as a worker that made up a
    /// key per call would send; a retried call books a second seat.
    Attempt,
}

/// The Requests tables as the booking worker reaches them, with its
/// booking requests' key rewritten per [`BookingKey::Attempt`].
pub(crate) struct KeyPerAttempt {
    pub inner: Arc<dyn RequestStore>,
}

#[async_trait]
impl RequestStore for KeyPerAttempt {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        if request.operation != Operation::Book {
            return self.inner.put_request(request).await;
        }
        let mut request = request.clone();
        request
            .params
            .insert("idempotency_key".to_owned(), request.request_id.clone());
        self.inner.put_request(&request).await
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        self.inner.get(operator, request_id).await
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        self.inner
            .write_outcome(operator, request_id, outcome)
            .await
    }
}
