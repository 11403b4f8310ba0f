//! What a simulated operator counts of the calls it receives: by
//! operation, by the mode it was in, and what became of them.

use lifeboat_core::Operation;
use serde::{Deserialize, Serialize};

use super::OutageMode;

/// Calls received, by operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationCounts {
    pub search: u64,
    pub price: u64,
    #[serde(default)]
    pub ping: u64,
    #[serde(default)]
    pub book: u64,
}

/// Calls received, by the mode the operator was in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeCounts {
    pub healthy: u64,
    pub hang: u64,
    pub refuse: u64,
    pub server_error: u64,
    pub slow: u64,
    pub garbage: u64,
    pub rate_limited: u64,
    pub brownout: u64,
    #[serde(default)]
    pub oversized: u64,
}

/// What the simulated operator has received since it started (or since
/// [`SimulatedOperator::reset_stats`](super::SimulatedOperator::reset_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Every call that reached the operator, whatever happened to it.
    pub total: u64,
    pub by_operation: OperationCounts,
    pub by_mode: ModeCounts,
    /// Healthy calls answered `400` because a parameter was malformed, or
    /// `422` because the operator refused a booking itself.
    pub rejected: u64,
    /// Healthy calls that drew a background `500`.
    pub background_errors: u64,
    /// The most calls (searches, prices and bookings; pings are not
    /// counted) the operator had in hand at once: each counted from the
    /// moment it arrives until it is answered or its caller gives up.
    #[serde(default)]
    pub peak_in_flight: u64,
    /// Bookings made: seats taken under a new idempotency key.
    #[serde(default)]
    pub bookings: u64,
    /// Booking calls answered with the booking their key had made already
    /// (a retried or redelivered call): nothing booked twice.
    #[serde(default)]
    pub repeated_bookings: u64,
}

impl SimStats {
    /// The calls that asked a customer's question (searches and prices):
    /// every call but the hang check's pings and the bookings.
    pub fn questions(&self) -> u64 {
        self.total
            .saturating_sub(self.by_operation.ping)
            .saturating_sub(self.by_operation.book)
    }

    /// Count one call of `operation`, received while in `mode` (`None`:
    /// healthy).
    pub(crate) fn count(&mut self, operation: Operation, mode: Option<OutageMode>) {
        self.total += 1;
        match operation {
            Operation::Search => self.by_operation.search += 1,
            Operation::Price => self.by_operation.price += 1,
            Operation::Ping => self.by_operation.ping += 1,
            Operation::Book => self.by_operation.book += 1,
        }
        let by_mode = &mut self.by_mode;
        match mode {
            None => by_mode.healthy += 1,
            Some(OutageMode::Hang) => by_mode.hang += 1,
            Some(OutageMode::Refuse) => by_mode.refuse += 1,
            Some(OutageMode::ServerError) => by_mode.server_error += 1,
            Some(OutageMode::Slow) => by_mode.slow += 1,
            Some(OutageMode::Garbage) => by_mode.garbage += 1,
            Some(OutageMode::RateLimited) => by_mode.rate_limited += 1,
            Some(OutageMode::Brownout) => by_mode.brownout += 1,
            Some(OutageMode::Oversized) => by_mode.oversized += 1,
        }
    }
}
