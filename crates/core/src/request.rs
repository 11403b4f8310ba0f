//! Request records, their outcomes, and the classification of operator calls.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::operator::{Operation, OperatorId};

/// A request for the operator, written by search or cart into the Requests table
/// and carried to a consumer by the table's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub request_id: String,
    pub operator: OperatorId,
    pub operation: Operation,
    /// The operation's parameters (route, date, passengers, …), passed through
    /// to the operator unchanged.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    pub created_at: DateTime<Utc>,
    /// After this instant nobody waits for the answer any more: the consumer
    /// writes an `expired` outcome without calling the operator.
    pub deadline: DateTime<Utc>,
}

impl RequestRecord {
    /// What is left of the request's own deadline at `now`, if anything.
    pub fn remaining(&self, now: DateTime<Utc>) -> Option<Duration> {
        (self.deadline - now).to_std().ok().filter(|d| !d.is_zero())
    }
}

/// Why a request ended without an answer. These strings are part of the event
/// schema (`Operator Request Failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// The breaker is open: the operator was not asked.
    BreakerOpen,
    /// The operator did not answer within the budget.
    Timeout,
    /// The operator answered with an error, refused the connection, or sent a
    /// payload we could not read.
    UpstreamError,
    /// The request's deadline had passed before it could be sent.
    Expired,
    /// The stream record was not a request lifeboat can read.
    Malformed,
    /// The operator answered 404 or 410: there is no such sailing or route.
    NotFound,
    /// The operator refused the question with another 4xx its settings do
    /// not count as a failure: asking again will not change that.
    Rejected,
    /// lifeboat held the call back: the operator's limit on calls in flight
    /// ([`crate::limit`]) had no place for it before its deadline. The
    /// operator was not asked.
    Shed,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::BreakerOpen => "breaker_open",
            FailureReason::Timeout => "timeout",
            FailureReason::UpstreamError => "upstream_error",
            FailureReason::Expired => "expired",
            FailureReason::Malformed => "malformed",
            FailureReason::NotFound => "not_found",
            FailureReason::Rejected => "rejected",
            FailureReason::Shed => "shed",
        }
    }

    /// The reason an operator's 4xx `status` (one that is not a failure)
    /// gives a request, when it refuses the question itself. A 401, 403 or
    /// 407 refuses lifeboat, not the question (its credentials or network
    /// path): `None`, an upstream error for the caller, neither a "no such
    /// sailing" nor a "not sold" that asking another way would change.
    pub fn refusal(status: u16) -> Option<Self> {
        match status {
            401 | 403 | 407 => None,
            404 | 410 => Some(FailureReason::NotFound),
            _ => Some(FailureReason::Rejected),
        }
    }
}

/// The one outcome of a request: the operator's answer or the reason there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum OutcomeKind {
    Answered {
        /// The operator's answer, as JSON text.
        body: String,
    },
    Failed {
        reason: FailureReason,
        detail: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub kind: OutcomeKind,
    pub at: DateTime<Utc>,
    /// Which function wrote it (`real-consumer`, `fallback-consumer`).
    pub by: String,
    /// Time spent calling the operator, if it was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_ms: Option<u64>,
}

/// Who writes the outcome of a request its asker gave up on with no
/// outcome yet (`Outcome::by`): the search, when its budget runs out.
pub const CLOSED_BY_ASKER: &str = "search";
/// The same for a booking call: the booking worker, when it takes the call
/// as lost (`booking_lost_after_s`) and holds its order again.
pub const CLOSED_BY_BOOKING_WORKER: &str = "booking-worker";
/// Every asker that closes its own requests: a close is the outcome of a
/// request nobody answered, which a consumer's answer may still replace.
pub const ASKERS_CLOSES: [&str; 2] = [CLOSED_BY_ASKER, CLOSED_BY_BOOKING_WORKER];

impl Outcome {
    /// Whether this is an asker's close ([`ASKERS_CLOSES`]), not a
    /// consumer's outcome.
    pub fn is_askers_close(&self) -> bool {
        ASKERS_CLOSES.contains(&self.by.as_str())
    }

    /// Whether this outcome may take the place of `existing`: only a
    /// consumer's outcome, and only over an asker's close. Each request
    /// keeps one outcome; a close keeps a request the stream gave up on from
    /// having none, and an answer that comes later still replaces it.
    pub fn replaces(&self, existing: &Outcome) -> bool {
        existing.is_askers_close() && !self.is_askers_close()
    }

    pub fn failed(
        reason: FailureReason,
        detail: impl Into<String>,
        at: DateTime<Utc>,
        by: &str,
    ) -> Self {
        Self {
            kind: OutcomeKind::Failed {
                reason,
                detail: detail.into(),
            },
            at,
            by: by.to_owned(),
            call_ms: None,
        }
    }

    pub fn failure_reason(&self) -> Option<FailureReason> {
        match &self.kind {
            OutcomeKind::Answered { .. } => None,
            OutcomeKind::Failed { reason, .. } => Some(*reason),
        }
    }
}

/// A call to the operator API, bounded by its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorCall {
    pub request_id: String,
    pub operator: OperatorId,
    pub operation: Operation,
    pub params: BTreeMap<String, String>,
    pub budget: Budget,
}

/// How an operator call went, as the breaker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum CallClass {
    /// Answered in time with a readable payload.
    Ok,
    /// Answered with a readable payload, but after the budget's `slow_after`.
    Slow,
    /// No answer within the budget.
    Timeout,
    /// The connection could not be made or broke.
    Connect,
    /// The operator answered 5xx.
    ServerError { status: u16 },
    /// The operator answered 4xx. Most say our request was wrong and the
    /// operator is up; those its settings name (408 and 429 by default) say
    /// it is not coping ([`FailureStatuses`]).
    ClientError { status: u16 },
    /// 2xx, but the payload was not what the operator's API promises.
    BadPayload,
}

/// What the breaker's failure window makes of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Success,
    SlowSuccess,
    Timeout,
    Failure,
    /// Says nothing about the operator's health (our own bad request): not
    /// counted by the failure window, and never a half-open trial's success.
    Neutral,
}

impl Health {
    /// What a probe or a half-open trial says of recovery: passed, failed
    /// or timed out, or `None`, nothing either way (a refusal of the
    /// question). A slow answer passes, unless the
    /// breaker opened for slowness (`opened_slow`): then it says the
    /// operator is still slow, and fails the round (whose quick successes
    /// are counted in a row, [`crate::breaker::BreakerConfig::round`]);
    /// passing it, or letting the round wait for quick ones among slow,
    /// closed the breaker in a brownout for the slow-call rule to open it
    /// again seconds later.
    pub fn trial(self, opened_slow: bool) -> Option<crate::ports::Trial> {
        use crate::ports::Trial;
        match self {
            Health::Success => Some(Trial::Passed),
            Health::SlowSuccess if !opened_slow => Some(Trial::Passed),
            Health::SlowSuccess => Some(Trial::Failed),
            Health::Timeout => Some(Trial::TimedOut),
            Health::Failure => Some(Trial::Failed),
            Health::Neutral => None,
        }
    }
}

/// The 4xx statuses that count as the operator failing (a failure for the
/// window, a failed half-open trial) rather than as our bad request. 408
/// (request timeout) and 429 (too many requests) by default: an operator
/// that sheds load or cannot finish in time is in trouble, and one answering
/// them throughout an incident must not pass a half-open round. Per operator
/// in `OPERATOR_SETTINGS` as a list (`"failure_statuses": [408, 429, 403]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureStatuses(u128);

impl FailureStatuses {
    /// The statuses `400..=499` that can be named.
    pub const RANGE: std::ops::RangeInclusive<u16> = 400..=499;

    /// The set of `statuses`; `Err` names the first outside [`Self::RANGE`].
    pub fn new(statuses: impl IntoIterator<Item = u16>) -> Result<Self, u16> {
        let mut bits = 0u128;
        for status in statuses {
            if !Self::RANGE.contains(&status) {
                return Err(status);
            }
            bits |= 1u128 << (status - 400);
        }
        Ok(Self(bits))
    }

    pub fn contains(&self, status: u16) -> bool {
        Self::RANGE.contains(&status) && self.0 & (1u128 << (status - 400)) != 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        Self::RANGE.filter(|s| self.contains(*s))
    }
}

impl Default for FailureStatuses {
    fn default() -> Self {
        Self((1u128 << (408 - 400)) | (1u128 << (429 - 400)))
    }
}

impl Serialize for FailureStatuses {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for FailureStatuses {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let statuses = Vec::<u16>::deserialize(deserializer)?;
        Self::new(statuses).map_err(|bad| {
            serde::de::Error::custom(format!(
                "failure status {bad} is not a 4xx status (5xx, timeouts and refused connections always count as failures)"
            ))
        })
    }
}

impl CallClass {
    /// What the call says about the operator's health, with `failing` the
    /// 4xx statuses that count as failures.
    pub fn health(&self, failing: &FailureStatuses) -> Health {
        match self {
            CallClass::Ok => Health::Success,
            CallClass::Slow => Health::SlowSuccess,
            CallClass::Timeout => Health::Timeout,
            CallClass::Connect | CallClass::ServerError { .. } | CallClass::BadPayload => {
                Health::Failure
            }
            CallClass::ClientError { status } if failing.contains(*status) => Health::Failure,
            CallClass::ClientError { .. } => Health::Neutral,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            CallClass::Ok => "ok",
            CallClass::Slow => "slow",
            CallClass::Timeout => "timeout",
            CallClass::Connect => "connect",
            CallClass::ServerError { .. } => "server_error",
            CallClass::ClientError { .. } => "client_error",
            CallClass::BadPayload => "bad_payload",
        }
    }

    /// Classify a call that produced a readable answer after `elapsed`.
    pub fn answered(elapsed: Duration, budget: &Budget) -> Self {
        if elapsed > budget.slow_after {
            CallClass::Slow
        } else {
            CallClass::Ok
        }
    }
}

/// The largest answer lifeboat keeps (256 KiB): stored whole in the
/// request's outcome and in the answer cache, it must fit a DynamoDB item
/// (400 KB) beside the request's own attributes. A larger answer is a bad
/// payload: a permanent failure, never a write that fails and brings the
/// record back to call the operator again.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The result of one operator call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub class: CallClass,
    pub elapsed: Duration,
    /// The answer as JSON text, present for `Ok` and `Slow`.
    pub body: Option<String>,
    /// A short description for logs and failure events, never a secret.
    pub detail: String,
}

impl CallResult {
    /// This result, with an answer larger than `max` bytes turned into a bad
    /// payload (its body dropped), whatever adapter made the call.
    pub fn within(self, max: usize) -> Self {
        match &self.body {
            Some(body) if body.len() > max => CallResult {
                class: CallClass::BadPayload,
                detail: format!(
                    "answer of {} bytes, larger than the {max} lifeboat keeps",
                    body.len()
                ),
                body: None,
                elapsed: self.elapsed,
            },
            _ => self,
        }
    }

    /// The request outcome this call leads to.
    pub fn into_outcome(self, at: DateTime<Utc>, by: &str) -> Outcome {
        let call_ms = Some(u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX));
        let kind = match (&self.class, self.body) {
            (CallClass::Ok | CallClass::Slow, Some(body)) => OutcomeKind::Answered { body },
            (CallClass::Timeout, _) => OutcomeKind::Failed {
                reason: FailureReason::Timeout,
                detail: self.detail,
            },
            _ => OutcomeKind::Failed {
                reason: FailureReason::UpstreamError,
                detail: self.detail,
            },
        };
        Outcome {
            kind,
            at,
            by: by.to_owned(),
            call_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_of_lifeboat_is_not_a_refusal_of_the_question() {
        assert_eq!(FailureReason::refusal(404), Some(FailureReason::NotFound));
        assert_eq!(FailureReason::refusal(410), Some(FailureReason::NotFound));
        assert_eq!(FailureReason::refusal(400), Some(FailureReason::Rejected));
        assert_eq!(FailureReason::refusal(422), Some(FailureReason::Rejected));
        for status in [401, 403, 407] {
            assert_eq!(FailureReason::refusal(status), None, "{status}");
        }
    }

    #[test]
    fn rate_limits_and_request_timeouts_are_failures_other_4xx_neutral() {
        let default = FailureStatuses::default();
        let class = |status| CallClass::ClientError { status };
        assert_eq!(class(429).health(&default), Health::Failure);
        assert_eq!(class(408).health(&default), Health::Failure);
        assert_eq!(class(404).health(&default), Health::Neutral);
        assert_eq!(class(403).health(&default), Health::Neutral);
        let strict = FailureStatuses::new([403, 429]).unwrap();
        assert_eq!(class(403).health(&strict), Health::Failure);
        assert_eq!(class(408).health(&strict), Health::Neutral);
        assert_eq!(
            CallClass::ServerError { status: 503 }.health(&FailureStatuses::new([]).unwrap()),
            Health::Failure
        );
        // Settings JSON round trip, and a clear refusal of a non-4xx.
        let json = serde_json::to_string(&default).unwrap();
        assert_eq!(json, "[408,429]");
        let back: FailureStatuses = serde_json::from_str(&json).unwrap();
        assert_eq!(back, default);
        let err = serde_json::from_str::<FailureStatuses>("[500]").unwrap_err();
        assert!(err.to_string().contains("500 is not a 4xx"), "{err}");
        assert!(serde_json::from_str::<FailureStatuses>("[399]").is_err());
        assert!(!default.contains(600));
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    #[test]
    fn slow_answers_are_classified_by_the_budget() {
        let budget = Budget::with_timeout(Duration::from_secs(3));
        assert_eq!(
            CallClass::answered(Duration::from_millis(1300), &budget),
            CallClass::Ok
        );
        assert_eq!(
            CallClass::answered(Duration::from_millis(2500), &budget),
            CallClass::Slow
        );
    }

    #[test]
    fn outcomes_round_trip_as_json() {
        let outcome = Outcome::failed(
            FailureReason::BreakerOpen,
            "breaker open",
            at(10),
            "fallback-consumer",
        );
        let json = serde_json::to_value(&outcome).unwrap_or_default();
        assert_eq!(json["status"], "failed");
        assert_eq!(json["reason"], "breaker_open");
        let back: Outcome = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, outcome);
    }

    #[test]
    fn call_results_map_to_outcomes() {
        let timeout = CallResult {
            class: CallClass::Timeout,
            elapsed: Duration::from_secs(3),
            body: None,
            detail: "no answer in 3000 ms".into(),
        };
        assert_eq!(
            timeout
                .into_outcome(at(0), "real-consumer")
                .failure_reason(),
            Some(FailureReason::Timeout)
        );
        let ok = CallResult {
            class: CallClass::Ok,
            elapsed: Duration::from_millis(900),
            body: Some("{}".into()),
            detail: String::new(),
        };
        let outcome = ok.into_outcome(at(0), "real-consumer");
        assert_eq!(outcome.failure_reason(), None);
        assert_eq!(outcome.call_ms, Some(900));
    }

    #[test]
    fn remaining_time_is_none_past_the_deadline() {
        let record = RequestRecord {
            request_id: "r1".into(),
            operator: OperatorId::new("op").unwrap_or_else(|e| panic!("{e}")),
            operation: Operation::Search,
            params: BTreeMap::new(),
            created_at: at(0),
            deadline: at(5),
        };
        assert_eq!(record.remaining(at(3)), Some(Duration::from_secs(2)));
        assert_eq!(record.remaining(at(5)), None);
        assert_eq!(record.remaining(at(9)), None);
    }
}
