//! Timeout budgets per operation.
//!
//! The defaults come from the healthy operator's answer-time clusters: answers
//! arrive around 1.3 s and 2.3 s and almost nothing useful arrives later, so a
//! search waits 3 s and a price 2.75 s (the old settings were 7 s and 5 s).
//! A booking, which nobody waits for on the line, waits 8 s.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::operator::Operation;

/// How long one operator call may take, and when a successful call counts as slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    #[serde(with = "crate::budget::millis")]
    pub timeout: Duration,
    /// A call that succeeds after this long is counted as slow by the failure
    /// window. Defaults to 80 % of the timeout.
    #[serde(with = "crate::budget::millis")]
    pub slow_after: Duration,
    /// How much longer than `timeout` the asker (a search, a cart's price)
    /// waits for the gateway's answer: room for the request's way to the
    /// operator (the stream, Lambda's poll, the invocation) before its call
    /// starts. With 0 the customer's wait counts from the request's
    /// creation, and a call that starts late and takes most of its budget
    /// answers after the customer was given the cache's answer; with the
    /// default the wait counts, near enough, from the call (docs/timeouts.md).
    #[serde(default = "default_queue", with = "crate::budget::millis")]
    pub queue: Duration,
}

/// [`Budget::queue`] by default: a second. At the priced marketplace
/// (docs/fleet.md, "The search's wait") it took the healthy searches
/// answerable but not answered live or fresh from 3.3 % to 0.3 %; a
/// customer waits at most 4 s for a live answer instead of 3 s.
pub const DEFAULT_QUEUE: Duration = Duration::from_millis(1_000);

fn default_queue() -> Duration {
    DEFAULT_QUEUE
}

impl Budget {
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            timeout,
            slow_after: timeout.mul_f64(0.8),
            queue: DEFAULT_QUEUE,
        }
    }

    /// How long the asker waits for the gateway's answer, from the
    /// request's creation: the call's budget and the queue's allowance.
    pub fn asker_wait(&self) -> Duration {
        self.timeout + self.queue
    }
}

/// The budget of every operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Budgets {
    pub search: Budget,
    pub price: Budget,
    /// A ping asks nothing: an API that answers at all answers it in a few
    /// hundred milliseconds.
    pub ping: Budget,
    /// A booking: longer than a search, since the operator takes the seats
    /// and the payment before it answers, and nobody waits on the line for
    /// it (held orders are booked in the background). A booking that times
    /// out is asked again with the same idempotency key.
    pub book: Budget,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            search: Budget::with_timeout(Duration::from_millis(3_000)),
            price: Budget::with_timeout(Duration::from_millis(2_750)),
            ping: Budget::with_timeout(Duration::from_millis(1_000)),
            book: Budget::with_timeout(Duration::from_millis(8_000)),
        }
    }
}

impl Budgets {
    pub fn for_operation(&self, operation: Operation) -> Budget {
        match operation {
            Operation::Search => self.search,
            Operation::Price => self.price,
            Operation::Ping => self.ping,
            Operation::Book => self.book,
        }
    }
}

/// Serde helper: a `Duration` as whole milliseconds.
pub mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_answer_clusters() {
        let b = Budgets::default();
        assert_eq!(
            b.for_operation(Operation::Search).timeout,
            Duration::from_secs(3)
        );
        assert_eq!(
            b.for_operation(Operation::Price).timeout,
            Duration::from_millis(2750)
        );
        assert_eq!(b.search.slow_after, Duration::from_millis(2400));
        let book = b.for_operation(Operation::Book);
        assert_eq!(
            (book.timeout, book.slow_after),
            (Duration::from_secs(8), Duration::from_millis(6400))
        );
        let given: Budgets =
            serde_json::from_str(r#"{"book": {"timeout": 12000, "slow_after": 10000}}"#).unwrap();
        assert_eq!(given.book.timeout, Duration::from_secs(12));
        assert_eq!(given.search, b.search, "the others keep their defaults");
        assert_eq!(b.search.asker_wait(), Duration::from_millis(4000));
        let given: Budget =
            serde_json::from_str(r#"{"timeout": 2500, "slow_after": 2000}"#).unwrap();
        assert_eq!(
            given.queue, DEFAULT_QUEUE,
            "a budget given without a queue keeps the default"
        );
        let none: Budget =
            serde_json::from_str(r#"{"timeout": 2500, "slow_after": 2000, "queue": 0}"#).unwrap();
        assert_eq!(none.asker_wait(), Duration::from_millis(2500));
    }
}
