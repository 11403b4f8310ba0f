//! The booking worker: books held orders with their operator once it is
//! back (docs/orders.md, "Booking held orders").
//!
//! * this file: [`BookingWorker`], its errors and what an invocation
//!   reports; an invocation ([`BookingWorker::run`]) works every served
//!   operator at once, each until its open orders are settled or the run's
//!   time is up;
//! * `round`: one operator's round: the answers of the calls out read,
//!   what time does to an order done, new booking calls started within the
//!   operator's limit while its breaker is closed;
//! * `config`: the worker built from its environment once per instance;
//! * `main.rs`: the Lambda function; `tests.rs`: the worker on the
//!   in-memory adapters.
//!
//! A booking call is a `book` request written to the operator's Requests
//! table, like a search's: the real consumer calls the operator within the
//! call limit it keeps for that operator and writes the answer as the
//! request's outcome, which the worker reads back on its next round.

pub mod config;
mod round;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::Diagnostic;
use lifeboat_core::OperatorId;
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::ports::{
    BreakerStore, Clock, EventPublisher, MetricsSink, OrderStore, RequestStore,
};
use lifeboat_core::settings::Settings;
use serde::Serialize;
use serde_json::Value;

/// The name the worker goes by in logs and reports.
pub const NAME: &str = "booking-worker";

/// Why an invocation did nothing.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The worker is started by its schedule only; anything else is
    /// refused, never guessed at.
    #[error("payload is not EventBridge's scheduled event: {0}")]
    NotASchedule(String),
}

impl From<WorkerError> for Diagnostic {
    fn from(e: WorkerError) -> Self {
        Diagnostic {
            error_type: "NotASchedule".into(),
            error_message: e.to_string(),
        }
    }
}

/// How long an invocation works, and how often it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// The longest an invocation works (`BOOKING_RUN_MS`): less than the
    /// function's timeout and the schedule's minute, so one run ends
    /// before the next begins.
    pub run_for: Duration,
    /// The pause between two rounds of an operator with calls out or
    /// orders to start.
    pub poll: Duration,
    /// The pause between two looks at the breaker of an operator that
    /// cannot book: its orders are not read again until it can.
    pub idle: Duration,
    /// The most open orders one round reads for an operator, oldest first.
    pub scan: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            run_for: Duration::from_secs(50),
            poll: Duration::from_millis(500),
            idle: Duration::from_secs(2),
            scan: 200,
        }
    }
}

/// Everything the worker needs, built once per Lambda instance.
pub struct BookingWorker {
    /// The Orders table.
    pub orders: Arc<dyn OrderStore>,
    /// The Requests tables: booking calls go out as requests.
    pub requests: Arc<dyn RequestStore>,
    /// The Breaker table: an operator's orders are booked while its
    /// breaker is closed.
    pub breakers: Arc<dyn BreakerStore>,
    /// Every move of an order goes on the bus.
    pub events: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<dyn MetricsSink>,
    /// The operators served (`OPERATORS`): no other operator's orders are
    /// read.
    pub operators: BTreeSet<OperatorId>,
    /// The gateway's settings (`OPERATOR_SETTINGS`): a booking call's
    /// budget.
    pub settings: Settings,
    /// The held orders' settings (`ORDER_SETTINGS`).
    pub order_settings: OrderSettings,
    pub limits: RunLimits,
}

/// What one invocation did for one operator.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OperatorReport {
    pub operator: String,
    pub rounds: u32,
    /// Booking calls started (requests written).
    pub started: u32,
    /// Moves made, by the state moved to (`booked`, `held`, …).
    pub moved: BTreeMap<&'static str, u32>,
    /// Saves lost to another writer: the order is looked at again next
    /// round.
    pub conflicts: u32,
    /// Store failures, each ending this operator's run (the next
    /// invocation tries again): one operator's trouble is its own.
    pub errors: Vec<String>,
    /// Open orders at the operator's last round.
    pub open: usize,
    /// Events the bus did not take (the moves are in the orders'
    /// histories all the same).
    pub events_not_published: usize,
}

/// What one invocation did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkerReport {
    pub operators: Vec<OperatorReport>,
}

impl WorkerReport {
    /// The report as the invocation's JSON result.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Whether `payload` is EventBridge's scheduled event (the worker's
/// trigger).
pub use lifeboat_core::invocation::is_schedule;

impl BookingWorker {
    /// One invocation: the schedule's tick runs [`Self::run`]; any other
    /// payload is refused.
    pub async fn handle(&self, payload: &Value) -> Result<WorkerReport, WorkerError> {
        if !is_schedule(payload) {
            let what: String = payload.to_string().chars().take(120).collect();
            tracing::warn!(payload = %what, "not a scheduled event: nothing done");
            return Err(WorkerError::NotASchedule(what));
        }
        Ok(self.run().await)
    }

    /// Work every served operator's orders at once, each until they are
    /// settled for now or [`RunLimits::run_for`] is up.
    pub async fn run(&self) -> WorkerReport {
        let deadline = self.clock.now()
            + chrono::Duration::from_std(self.limits.run_for).unwrap_or(chrono::Duration::zero());
        let work = self
            .operators
            .iter()
            .map(|operator| self.work(operator, deadline));
        WorkerReport {
            operators: futures::future::join_all(work).await,
        }
    }
}
