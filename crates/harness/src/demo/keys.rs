//! How the simulations' booking calls carry their idempotency key: the
//! product's way, or broken on purpose so a test can see
//! `orders.duplicate_bookings` move (`demo` and `chaos` run on any).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use lifeboat_core::Operation;
use lifeboat_core::OperatorId;
use lifeboat_core::memory::MemoryRequestStore;
use lifeboat_core::ports::{OperatorApi, OutcomeWrite, RequestStore, StoreError, StoredRequest};
use lifeboat_core::request::{CallResult, OperatorCall, Outcome, RequestRecord};

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
    /// Broken further down: each call to the operator a key of its own, as
    /// a gateway that made one up per call would send; a booking record
    /// delivered again (its consumer killed after the call) books a second
    /// seat.
    Call,
}

/// A simulation's booking keys as [`BookingKey`] has them: the operators
/// the consumers reach, the Requests tables the booking worker writes,
/// and each key the operators saw traced back to its order.
pub(crate) struct Keys {
    key: BookingKey,
    /// The keys made per call, under [`BookingKey::Call`].
    per_call: Option<Arc<KeyPerCall>>,
}

impl Keys {
    /// The keys as `key` has them, and the operators as the consumers then
    /// reach `operators`.
    pub fn new(key: BookingKey, operators: Arc<dyn OperatorApi>) -> (Self, Arc<dyn OperatorApi>) {
        if key != BookingKey::Call {
            return (
                Self {
                    key,
                    per_call: None,
                },
                operators,
            );
        }
        let per_call = Arc::new(KeyPerCall::new(operators));
        let reached: Arc<dyn OperatorApi> = per_call.clone();
        let keys = Self {
            key,
            per_call: Some(per_call),
        };
        (keys, reached)
    }

    /// The Requests tables as the booking worker writes them.
    pub fn worker_requests(&self, requests: Arc<dyn RequestStore>) -> Arc<dyn RequestStore> {
        match self.key {
            BookingKey::Attempt => Arc::new(KeyPerAttempt { inner: requests }),
            BookingKey::Order | BookingKey::Call => requests,
        }
    }

    /// The order each key the operators saw was sent for, from the
    /// booking requests in `requests` and the keys made per call.
    pub fn key_orders(&self, requests: &MemoryRequestStore) -> BTreeMap<String, String> {
        let mut keys = super::report::key_orders(requests);
        if let Some(made) = &self.per_call {
            made.trace(&mut keys);
        }
        keys
    }
}

/// The Requests tables as the booking worker reaches them, with its
/// booking requests' key rewritten per [`BookingKey::Attempt`].
struct KeyPerAttempt {
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

/// The operators as the real consumer reaches them, each booking call's key
/// made new per [`BookingKey::Call`]; the keys it made are kept, so each can
/// be traced to the key its request carried.
struct KeyPerCall {
    inner: Arc<dyn OperatorApi>,
    /// Each key sent, with the key its request carried.
    made: Mutex<BTreeMap<String, String>>,
}

impl KeyPerCall {
    pub fn new(inner: Arc<dyn OperatorApi>) -> Self {
        Self {
            inner,
            made: Mutex::new(BTreeMap::new()),
        }
    }

    fn made(&self) -> MutexGuard<'_, BTreeMap<String, String>> {
        // Entries are inserted whole: a poisoned lock still holds good data.
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key_orders` (the order each request's key was sent for) with every
    /// key this made traced to the same order.
    pub fn trace(&self, key_orders: &mut BTreeMap<String, String>) {
        for (sent, carried) in self.made().iter() {
            if let Some(order) = key_orders.get(carried).cloned() {
                key_orders.insert(sent.clone(), order);
            }
        }
    }
}

#[async_trait]
impl OperatorApi for KeyPerCall {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.inner.knows(operator)
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        let Some(carried) = call
            .params
            .get("idempotency_key")
            .filter(|_| call.operation == Operation::Book)
        else {
            return self.inner.call(call).await;
        };
        let mut call = call.clone();
        let sent = {
            let mut made = self.made();
            let sent = format!("{carried}.{}", made.len());
            made.insert(sent.clone(), carried.clone());
            sent
        };
        call.params.insert("idempotency_key".to_owned(), sent);
        self.inner.call(&call).await
    }
}
