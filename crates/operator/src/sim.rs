//! A simulated operator: healthy answer times from [`LatencyModel`], outages
//! scripted in (possibly virtual) time or switched at run time, and fake but
//! plausible answers.
//!
//! [`SimulatedOperator`] implements [`OperatorApi`] in-process. It waits with
//! `tokio::time::sleep`, so under `tokio::time::pause()` a simulated day runs
//! in an instant, and it reads the time of its outage script from an injected
//! [`Clock`]. [`crate::SimServer`] serves the same simulation over HTTP.
//!
//! What each [`OutageMode`] does, in-process and over HTTP:
//!
//! | mode | in-process | over HTTP |
//! | --- | --- | --- |
//! | none (healthy) | drawn latency and [`Hesitation`], then the answer (1 % background 500s) | same, `200` JSON |
//! | `hang` | never answers: `timeout` once the budget is spent | holds the connection without a response |
//! | `refuse` | `connect` at once | closes the connection without a response |
//! | `server_error` | quick `503` | quick `503` |
//! | `slow` | answers after `slow_factor` × the call's budget | same, with the configured `budgets` |
//! | `garbage` | drawn latency, then a `200` HTML page: `bad_payload` | same |
//!
//! A ping answers in 30 ms, plus the operator's [`Hesitation`] (its load
//! tail and slow moments), whenever the API itself is up.
//!
//! Bookings are made at its [`BookingDesk`] when the call arrives, in every
//! mode that answers (a `slow` booking is made, then answered too late: the
//! caller's retry with the same key gets the same booking); a hanging,
//! refusing or failing operator books nothing. Searches carry the seats
//! left on each sailing.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lifeboat_core::budget::{Budget, Budgets};
use lifeboat_core::ports::{Clock, OperatorApi};
use lifeboat_core::request::{CallResult, OperatorCall};
use lifeboat_core::{Operation, OperatorId};
use serde::{Deserialize, Serialize};

use crate::answers::{self, PriceDrift};
use crate::bookings::{self, BookingDesk, Effect, SeatModel};
use crate::hesitation::{Hesitation, Load};
use crate::latency::{LatencyModel, SimRng};
use crate::payload;

#[cfg(test)]
mod booking_tests;
mod operators;
pub use operators::SimulatedOperators;

/// How the operator misbehaves during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutageMode {
    /// Never answers; the caller's budget runs out.
    Hang,
    /// Refuses the connection (over HTTP: closes it without a response).
    Refuse,
    /// Answers a quick `503`.
    ServerError,
    /// Answers, but only after `slow_factor` × the budget.
    Slow,
    /// Answers `200` with an HTML maintenance page instead of JSON.
    Garbage,
    /// Answers a quick `429 Too Many Requests` (a rate-limit storm).
    RateLimited,
    /// Slow but under the thresholds: `brownout_share` of the calls answer
    /// after `brownout_factor` × the budget (in time, counted as slow), the
    /// rest as when healthy.
    Brownout,
    /// Answers in time with a valid JSON answer of `oversized_bytes` (1 MiB
    /// by default): more than lifeboat keeps of an answer.
    Oversized,
}

impl std::str::FromStr for OutageMode {
    type Err = String;

    /// A mode by its name ([`OutageMode::as_str`]), as command lines take it.
    fn from_str(name: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(name.to_owned())).map_err(|_| {
            format!(
                "unknown outage mode {name:?}: use hang, refuse, server_error, slow, garbage, rate_limited, brownout or oversized"
            )
        })
    }
}

impl OutageMode {
    /// The mode's name, as in configuration and the control endpoint.
    pub fn as_str(self) -> &'static str {
        match self {
            OutageMode::Hang => "hang",
            OutageMode::Refuse => "refuse",
            OutageMode::ServerError => "server_error",
            OutageMode::Slow => "slow",
            OutageMode::Garbage => "garbage",
            OutageMode::RateLimited => "rate_limited",
            OutageMode::Brownout => "brownout",
            OutageMode::Oversized => "oversized",
        }
    }
}

impl fmt::Display for OutageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scripted outage: from `start` (inclusive) to `end` (exclusive) the
/// operator behaves as `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub mode: OutageMode,
}

impl Outage {
    /// Whether the outage is on at `now`.
    pub fn covers(&self, now: DateTime<Utc>) -> bool {
        self.start <= now && now < self.end
    }
}

/// Everything a simulated operator does. Every field has a default, so `{}`
/// is a complete configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimConfig {
    /// Seed of the generator behind latencies and background errors. Two
    /// simulators with the same seed and the same calls behave the same.
    pub seed: u64,
    /// Healthy answer times and background error rate.
    pub latency: LatencyModel,
    /// The outage script. Where windows overlap, the first listed wins.
    pub outages: Vec<Outage>,
    /// In `slow` mode an answer takes this many times the budget. Default 2.0
    /// (a timeout); below 1.0 but above the budget's `slow_after` share (0.8
    /// by default) the answer arrives in time and counts as slow.
    pub slow_factor: f64,
    /// Optional price changes over time.
    pub price_drift: Option<PriceDrift>,
    /// In `brownout` mode, the share of calls that are slow. Default 0.7.
    pub brownout_share: f64,
    /// In `brownout` mode, a slow call answers after this many times the
    /// budget. Default 0.95: in time, after `slow_after`.
    pub brownout_factor: f64,
    /// In `oversized` mode, the size of every answer in bytes. Default 1 MiB.
    pub oversized_bytes: usize,
    /// The budgets `slow` mode is measured against when the caller's budget
    /// is not known, that is over HTTP. Default: lifeboat's default budgets.
    pub budgets: Budgets,
    /// How a healthy operator hesitates: a latency tail that grows with its
    /// load and occasional slow moments, the ping included. On by default;
    /// `{"enabled": false}` (or [`Hesitation::off`]) turns it off.
    pub hesitation: Hesitation,
    /// The sailings' seats and how fast other channels sell them, from the
    /// simulator's start ([`BookingDesk`]).
    pub seats: SeatModel,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 0x5EED_F3EE_B0A7,
            latency: LatencyModel::default(),
            outages: Vec::new(),
            slow_factor: 2.0,
            price_drift: None,
            brownout_share: 0.7,
            brownout_factor: 0.95,
            oversized_bytes: 1 << 20,
            budgets: Budgets::default(),
            hesitation: Hesitation::default(),
            seats: SeatModel::default(),
        }
    }
}

impl SimConfig {
    /// An operator that answers every call, in tens of milliseconds (a
    /// hundredth of the default latency, its tail cut): for tests that
    /// talk to it over HTTP on wall-clock time.
    pub fn quick() -> Self {
        Self {
            latency: LatencyModel {
                error_rate: 0.0,
                tail_to: LatencyModel::default().tail_from,
                ..LatencyModel::scaled(0.01)
            },
            ..Self::default()
        }
    }
}

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
/// [`SimulatedOperator::reset_stats`]).
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
}

/// A simulated operator. Cheap to clone: clones share the script, the mode
/// switch, the generator and the counts.
#[derive(Clone)]
pub struct SimulatedOperator {
    inner: Arc<Inner>,
}

struct Inner {
    operator: OperatorId,
    config: SimConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

struct State {
    rng: SimRng,
    /// `Some(mode)` overrides the script; `Some(None)` forces healthy.
    forced: Option<Option<OutageMode>>,
    stats: SimStats,
    last_request_id: Option<String>,
    /// The calls received lately, for the hesitation's load tail.
    load: Load,
    /// Questions in hand right now ([`SimStats::peak_in_flight`]).
    in_flight: u64,
    /// The seats and the bookings.
    desk: BookingDesk,
}

/// A question in the operator's hand: counted in flight until dropped.
pub(crate) struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        state.in_flight = state.in_flight.saturating_sub(1);
    }
}

/// Quick failures (a `503`, a `400`) take this long, times the model's scale.
const QUICK: Duration = Duration::from_millis(30);

/// The page a misconfigured gateway serves in `garbage` mode.
const MAINTENANCE_PAGE: &str = "<html><body><h1>Down for maintenance</h1></body></html>";

/// What the simulator does with one call: wait `delay`, then `reply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub delay: Duration,
    pub reply: Reply,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Answer {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// Never answer.
    Hang,
    /// Drop the connection without answering.
    Close,
}

impl SimulatedOperator {
    /// A simulator playing `operator`, reading the time of its outage script
    /// from `clock`.
    pub fn new(operator: OperatorId, config: SimConfig, clock: Arc<dyn Clock>) -> Self {
        let state = State {
            rng: SimRng::new(config.seed),
            forced: None,
            stats: SimStats::default(),
            last_request_id: None,
            load: Load::default(),
            in_flight: 0,
            desk: BookingDesk::new(config.seats, clock.now()),
        };
        Self {
            inner: Arc::new(Inner {
                operator,
                config,
                clock,
                state: Mutex::new(state),
            }),
        }
    }

    /// The operator this simulator plays.
    pub fn operator(&self) -> &OperatorId {
        &self.inner.operator
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &SimConfig {
        &self.inner.config
    }

    /// Override the script: `Some(mode)` puts the operator in that outage,
    /// `None` makes it healthy, until the next call of `set_mode` or
    /// [`follow_script`](Self::follow_script).
    pub fn set_mode(&self, mode: Option<OutageMode>) {
        self.lock().forced = Some(mode);
    }

    /// Drop any override set with [`set_mode`](Self::set_mode): the outage
    /// script decides again.
    pub fn follow_script(&self) {
        self.lock().forced = None;
    }

    /// The outage the operator is in now, if any.
    pub fn mode(&self) -> Option<OutageMode> {
        let now = self.inner.clock.now();
        self.lock().mode_at(now, &self.inner.config.outages)
    }

    /// Counts of the calls received so far.
    pub fn stats(&self) -> SimStats {
        self.lock().stats
    }

    /// Start counting from zero again (the peak in flight from the
    /// questions in hand now).
    pub fn reset_stats(&self) {
        let mut state = self.lock();
        state.stats = SimStats {
            peak_in_flight: state.in_flight,
            ..SimStats::default()
        };
    }

    /// Counts `operation`, unless it is a ping, as in the operator's hand
    /// until the guard is dropped.
    pub(crate) fn in_flight(&self, operation: Operation) -> Option<InFlight> {
        if operation == Operation::Ping {
            return None;
        }
        let mut state = self.lock();
        state.in_flight += 1;
        state.stats.peak_in_flight = state.stats.peak_in_flight.max(state.in_flight);
        Some(InFlight(self.inner.clone()))
    }

    /// The request id of the last call received, if it carried one.
    pub fn last_request_id(&self) -> Option<String> {
        self.lock().last_request_id.clone()
    }

    /// Receive one call: count it and decide how it goes. `budget` is what
    /// `slow` mode is measured against.
    pub(crate) fn plan(
        &self,
        operation: Operation,
        params: &BTreeMap<String, String>,
        budget: &Budget,
        request_id: Option<&str>,
    ) -> Plan {
        let config = &self.inner.config;
        let now = self.inner.clock.now();
        let quick = config.latency.scale(QUICK);
        let mut state = self.lock();
        let mode = state.mode_at(now, &config.outages);
        state.count(operation, mode);
        state.last_request_id = request_id.map(str::to_owned);
        let hesitation = &config.hesitation;
        let load = state.load.arrive(now, hesitation.load_window);
        if let Some(plan) = api_failure(mode, quick) {
            return plan;
        }
        let moment = hesitation.moment_at(config.seed, now);
        let hesitate = |state: &mut State, delay: Duration| {
            let (factor, wait) = hesitation.draw(load, moment, &mut state.rng);
            times(delay, factor) + config.latency.scale(wait)
        };
        if operation == Operation::Ping {
            return Plan {
                delay: hesitate(&mut state, quick),
                reply: Reply::Answer {
                    status: 200,
                    content_type: "application/json",
                    body: PING_ANSWER.to_string(),
                },
            };
        }
        match mode {
            // Answered above.
            Some(
                OutageMode::Hang
                | OutageMode::Refuse
                | OutageMode::ServerError
                | OutageMode::RateLimited,
            ) => unreachable_plan(quick),
            Some(OutageMode::Garbage) => Plan {
                delay: config.latency.sample(&mut state.rng),
                reply: Reply::Answer {
                    status: 200,
                    content_type: "text/html",
                    body: MAINTENANCE_PAGE.to_owned(),
                },
            },
            Some(OutageMode::Oversized) => Plan {
                delay: config.latency.sample(&mut state.rng),
                reply: Reply::Answer {
                    status: 200,
                    content_type: "application/json",
                    body: oversized_answer(config.oversized_bytes),
                },
            },
            Some(OutageMode::Brownout) => {
                let slow = state.rng.next_f64() < config.brownout_share;
                let delay = if slow {
                    times(budget.timeout, config.brownout_factor)
                } else {
                    config.latency.sample(&mut state.rng)
                };
                drop(state);
                match self.answer(operation, params, now) {
                    Ok(reply) => Plan { delay, reply },
                    Err(reply) => Plan {
                        delay: quick,
                        reply,
                    },
                }
            }
            Some(OutageMode::Slow) => {
                drop(state);
                let delay = times(budget.timeout, config.slow_factor);
                match self.answer(operation, params, now) {
                    Ok(reply) => Plan { delay, reply },
                    Err(reply) => Plan {
                        delay: quick,
                        reply,
                    },
                }
            }
            None => {
                let drawn = config.latency.sample(&mut state.rng);
                let delay = hesitate(&mut state, drawn);
                if config.latency.draws_error(&mut state.rng) {
                    state.stats.background_errors += 1;
                    return Plan {
                        delay: quick,
                        reply: error_reply(500, "internal server error"),
                    };
                }
                drop(state);
                match self.answer(operation, params, now) {
                    Ok(reply) => Plan { delay, reply },
                    Err(reply) => {
                        self.lock().stats.rejected += 1;
                        Plan {
                            delay: quick,
                            reply,
                        }
                    }
                }
            }
        }
    }

    /// The healthy answer to a call, or the `400` for its malformed
    /// parameters (a booking's `422` for an order the operator refuses).
    /// A booking is made here.
    fn answer(
        &self,
        operation: Operation,
        params: &BTreeMap<String, String>,
        now: DateTime<Utc>,
    ) -> Result<Reply, Reply> {
        let drift = self.inner.config.price_drift.as_ref();
        let answer = match operation {
            Operation::Search => answers::search(params, now, drift)
                .map(|mut found| {
                    self.add_seats_left(&mut found, now);
                    found
                })
                .map_err(|bad| (400, bad.0)),
            Operation::Price => answers::price(params, now, drift).map_err(|bad| (400, bad.0)),
            Operation::Ping => Ok(PING_ANSWER.clone()),
            Operation::Book => {
                let mut state = self.lock();
                let booked = bookings::answer(&mut state.desk, params, now, drift);
                if let Ok((_, effect)) = &booked {
                    match effect {
                        Effect::Booked => state.stats.bookings += 1,
                        Effect::Repeated => state.stats.repeated_bookings += 1,
                        Effect::Nothing => {}
                    }
                }
                booked.map(|(json, _)| json)
            }
        };
        match answer {
            Ok(json) => Ok(Reply::Answer {
                status: 200,
                content_type: "application/json",
                body: json.to_string(),
            }),
            Err((status, message)) => Err(error_reply(status, &message)),
        }
    }

    /// Each sailing of a search answer with its `seats_left` at `now`.
    fn add_seats_left(&self, found: &mut serde_json::Value, now: DateTime<Utc>) {
        let state = self.lock();
        let sailings = found
            .get_mut("sailings")
            .and_then(serde_json::Value::as_array_mut);
        for sailing in sailings.into_iter().flatten() {
            let left = sailing
                .get("sailing_id")
                .and_then(serde_json::Value::as_str)
                .map(|id| state.desk.seats_left(id, now));
            if let (Some(left), Some(fields)) = (left, sailing.as_object_mut()) {
                fields.insert("seats_left".to_owned(), left.into());
            }
        }
    }

    /// Seats left on `sailing_id` now, as the simulator's searches say.
    pub fn seats_left(&self, sailing_id: &str) -> u32 {
        let now = self.inner.clock.now();
        self.lock().desk.seats_left(sailing_id, now)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent between statements; a panic elsewhere
        // while holding the lock leaves nothing half-written.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn mode_at(&self, now: DateTime<Utc>, outages: &[Outage]) -> Option<OutageMode> {
        match self.forced {
            Some(forced) => forced,
            None => outages.iter().find(|o| o.covers(now)).map(|o| o.mode),
        }
    }

    fn count(&mut self, operation: Operation, mode: Option<OutageMode>) {
        let stats = &mut self.stats;
        stats.total += 1;
        match operation {
            Operation::Search => stats.by_operation.search += 1,
            Operation::Price => stats.by_operation.price += 1,
            Operation::Ping => stats.by_operation.ping += 1,
            Operation::Book => stats.by_operation.book += 1,
        }
        let by_mode = &mut stats.by_mode;
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

static PING_ANSWER: std::sync::LazyLock<serde_json::Value> =
    std::sync::LazyLock::new(|| serde_json::json!({"ok": true}));

/// How the whole API fails, every operation alike (a ping included): it
/// hangs, refuses, answers 5xx or 429. `None` in the modes where the API
/// answers but its answers are slow, wrong or too big (slow, brownout,
/// garbage, oversized): a ping then answers at once.
fn api_failure(mode: Option<OutageMode>, quick: Duration) -> Option<Plan> {
    let (delay, reply) = match mode? {
        OutageMode::Hang => (Duration::ZERO, Reply::Hang),
        OutageMode::Refuse => (Duration::ZERO, Reply::Close),
        OutageMode::ServerError => (quick, error_reply(503, "service unavailable")),
        OutageMode::RateLimited => (quick, error_reply(429, "too many requests")),
        OutageMode::Slow | OutageMode::Garbage | OutageMode::Brownout | OutageMode::Oversized => {
            return None;
        }
    };
    Some(Plan { delay, reply })
}

/// Never used: [`api_failure`] answers those modes first. A 500 rather than
/// a panic if that ever changes.
fn unreachable_plan(quick: Duration) -> Plan {
    Plan {
        delay: quick,
        reply: error_reply(500, "internal server error"),
    }
}

/// A valid JSON search answer of `bytes` bytes (at least a few dozen): one
/// sailing whose notes run on.
fn oversized_answer(bytes: usize) -> String {
    let head = r#"{"sailings":[{"sailing_id":"x","notes":""#;
    let tail = r#""}]}"#;
    let fill = bytes.saturating_sub(head.len() + tail.len());
    let mut body = String::with_capacity(bytes.max(head.len() + tail.len()));
    body.push_str(head);
    body.extend(std::iter::repeat_n('x', fill));
    body.push_str(tail);
    body
}

fn error_reply(status: u16, message: &str) -> Reply {
    Reply::Answer {
        status,
        content_type: "application/json",
        body: serde_json::json!({ "error": message }).to_string(),
    }
}

/// `d` × `factor`, without panicking on nonsense factors.
fn times(d: Duration, factor: f64) -> Duration {
    let factor = if factor.is_finite() && factor >= 0.0 {
        factor
    } else {
        2.0
    };
    Duration::try_from_secs_f64((d.as_secs_f64() * factor).min(3_600.0)).unwrap_or(d)
}

impl fmt::Debug for SimulatedOperator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimulatedOperator")
            .field("operator", &self.inner.operator)
            .field("mode", &self.mode())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl OperatorApi for SimulatedOperator {
    fn knows(&self, operator: &OperatorId) -> bool {
        *operator == self.inner.operator
    }

    /// Plays the call out in (possibly paused) tokio time, never longer than
    /// `call.budget.timeout`.
    async fn call(&self, call: &OperatorCall) -> CallResult {
        if !self.knows(&call.operator) {
            return payload::not_sent(404, format!("unknown operator {}", call.operator));
        }
        let started = tokio::time::Instant::now();
        let _in_flight = self.in_flight(call.operation);
        let budget = call.budget;
        let plan = self.plan(
            call.operation,
            &call.params,
            &budget,
            Some(&call.request_id),
        );
        if plan.reply == Reply::Hang || plan.delay >= budget.timeout {
            tokio::time::sleep(budget.timeout).await;
            return payload::timed_out(started.elapsed(), &budget);
        }
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        match plan.reply {
            Reply::Answer { status, body, .. } => payload::classify_answer(
                call.operation,
                status,
                body.into_bytes(),
                started.elapsed(),
                &budget,
            ),
            Reply::Hang | Reply::Close => {
                payload::connect_failed(started.elapsed(), "connection refused")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use lifeboat_core::ManualClock;
    use lifeboat_core::request::CallClass;

    use super::*;

    #[test]
    fn modes_parse_by_their_names() {
        for mode in [
            OutageMode::Hang,
            OutageMode::Refuse,
            OutageMode::ServerError,
            OutageMode::Slow,
            OutageMode::Garbage,
        ] {
            assert_eq!(mode.as_str().parse::<OutageMode>(), Ok(mode));
        }
        let e = "flaky".parse::<OutageMode>().unwrap_err();
        assert!(e.contains("unknown outage mode \"flaky\""), "{e}");
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-06-01T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn op() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn quiet() -> SimConfig {
        SimConfig {
            latency: LatencyModel {
                error_rate: 0.0,
                ..LatencyModel::default()
            },
            ..SimConfig::default()
        }
    }

    fn sim(config: SimConfig) -> (SimulatedOperator, ManualClock) {
        let clock = ManualClock::new(t0());
        (
            SimulatedOperator::new(op(), config, Arc::new(clock.clone())),
            clock,
        )
    }

    fn call(operation: Operation) -> OperatorCall {
        OperatorCall {
            request_id: "req-1".into(),
            operator: op(),
            operation,
            params: [("from", "HEL"), ("to", "TLL"), ("date", "2025-06-02")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            budget: Budget::with_timeout(Duration::from_secs(3)),
        }
    }

    /// The peak counts questions held at once: five hung together are five,
    /// three one after another one, pings none, and a question whose caller
    /// gave up leaves the operator's hand.
    #[tokio::test(start_paused = true)]
    async fn the_peak_in_flight_counts_the_questions_held_at_once() {
        let (sim, _clock) = sim(quiet());
        sim.set_mode(Some(OutageMode::Hang));
        let (search, price, ping) = (
            call(Operation::Search),
            call(Operation::Price),
            call(Operation::Ping),
        );
        tokio::join!(
            sim.call(&search),
            sim.call(&search),
            sim.call(&search),
            sim.call(&price),
            sim.call(&price),
            sim.call(&ping),
        );
        assert_eq!(sim.stats().peak_in_flight, 5);

        sim.reset_stats();
        assert_eq!(sim.stats().peak_in_flight, 0, "nothing in hand");
        for _ in 0..3 {
            sim.call(&search).await;
        }
        assert_eq!(sim.stats().peak_in_flight, 1);

        sim.reset_stats();
        tokio::join!(sim.call(&ping), sim.call(&ping));
        assert_eq!(sim.stats().peak_in_flight, 0, "pings are not questions");

        let gave_up = tokio::time::timeout(Duration::from_millis(10), sim.call(&search)).await;
        assert!(gave_up.is_err());
        sim.call(&search).await;
        assert_eq!(sim.stats().peak_in_flight, 1, "the abandoned call left");
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_operator_mostly_answers_in_time() {
        let (sim, _) = sim(SimConfig::default());
        let mut classes = BTreeMap::<&str, u32>::new();
        for _ in 0..400 {
            let result = sim.call(&call(Operation::Search)).await;
            assert!(result.elapsed <= Duration::from_secs(3));
            if result.class == CallClass::Ok {
                assert!(result.body.as_deref().unwrap().contains("sailings"));
            }
            *classes.entry(result.class.name()).or_default() += 1;
        }
        let count = |name| classes.get(name).copied().unwrap_or(0);
        // 3 s budget, slow after 2.4 s: the fast cluster and most of the
        // 2.3 s cluster are ok, its upper edge is slow, the tail times out.
        assert!((320..370).contains(&count("ok")), "{classes:?}");
        assert!((15..50).contains(&count("slow")), "{classes:?}");
        assert!((8..30).contains(&count("timeout")), "{classes:?}");
        assert!(count("server_error") < 15, "{classes:?}");
        assert_eq!(sim.stats().total, 400);
        assert_eq!(sim.stats().by_mode.healthy, 400);
        assert_eq!(
            sim.stats().background_errors,
            u64::from(count("server_error"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_seed_plays_the_same_calls() {
        let run = || async {
            let (sim, _) = sim(SimConfig::default());
            let mut out = Vec::new();
            for _ in 0..30 {
                let r = sim.call(&call(Operation::Price)).await;
                out.push((r.class, r.elapsed));
            }
            out
        };
        assert_eq!(run().await, run().await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ping_fails_with_the_api_and_not_with_its_answers() {
        let (sim, _) = sim(quiet());
        let expected = [
            (None, CallClass::Ok),
            (Some(OutageMode::Hang), CallClass::Timeout),
            (Some(OutageMode::Refuse), CallClass::Connect),
            (
                Some(OutageMode::ServerError),
                CallClass::ServerError { status: 503 },
            ),
            (
                Some(OutageMode::RateLimited),
                CallClass::ClientError { status: 429 },
            ),
            (Some(OutageMode::Slow), CallClass::Ok),
            (Some(OutageMode::Brownout), CallClass::Ok),
            (Some(OutageMode::Garbage), CallClass::Ok),
            (Some(OutageMode::Oversized), CallClass::Ok),
        ];
        for (mode, class) in expected {
            sim.set_mode(mode);
            let ping = sim.call(&call(Operation::Ping)).await;
            assert_eq!(ping.class, class, "{mode:?}");
            if class == CallClass::Ok {
                assert!(ping.elapsed < Duration::from_millis(100), "{mode:?}");
            }
        }
        assert_eq!(sim.stats().by_operation.ping, 9);
    }

    #[tokio::test(start_paused = true)]
    async fn each_outage_mode_fails_the_way_it_should() {
        let (sim, _) = sim(quiet());
        let started = tokio::time::Instant::now();

        sim.set_mode(Some(OutageMode::Hang));
        let hang = sim.call(&call(Operation::Search)).await;
        assert_eq!(hang.class, CallClass::Timeout);
        assert_eq!(hang.elapsed, Duration::from_secs(3));
        assert_eq!(hang.detail, "no answer within 3000 ms");

        sim.set_mode(Some(OutageMode::Refuse));
        let refuse = sim.call(&call(Operation::Search)).await;
        assert_eq!(refuse.class, CallClass::Connect);
        assert_eq!(refuse.elapsed, Duration::ZERO);

        sim.set_mode(Some(OutageMode::ServerError));
        let down = sim.call(&call(Operation::Price)).await;
        assert_eq!(down.class, CallClass::ServerError { status: 503 });
        assert!(down.elapsed < Duration::from_millis(100));

        sim.set_mode(Some(OutageMode::Slow));
        let slow = sim.call(&call(Operation::Search)).await;
        assert_eq!(slow.class, CallClass::Timeout);
        assert_eq!(slow.elapsed, Duration::from_secs(3));

        sim.set_mode(Some(OutageMode::Garbage));
        let garbage = sim.call(&call(Operation::Search)).await;
        assert_eq!(garbage.class, CallClass::BadPayload);
        assert!(garbage.body.is_none());

        sim.set_mode(Some(OutageMode::RateLimited));
        let limited = sim.call(&call(Operation::Search)).await;
        assert_eq!(limited.class, CallClass::ClientError { status: 429 });
        assert!(limited.elapsed < Duration::from_millis(100));

        sim.set_mode(Some(OutageMode::Brownout));
        let brownout = sim.call(&call(Operation::Search)).await;
        assert!(
            matches!(brownout.class, CallClass::Ok | CallClass::Slow),
            "{brownout:?}"
        );
        assert!(brownout.body.is_some());

        sim.set_mode(Some(OutageMode::Oversized));
        let oversized = sim.call(&call(Operation::Search)).await;
        let body = oversized.body.expect("an answer, only too big");
        assert_eq!(body.len(), 1 << 20);
        assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok());

        sim.set_mode(None);
        let healthy = sim.call(&call(Operation::Search)).await;
        assert!(matches!(
            healthy.class,
            CallClass::Ok | CallClass::Slow | CallClass::Timeout
        ));

        let stats = sim.stats();
        assert_eq!(stats.total, 9);
        assert_eq!(
            stats.by_operation,
            OperationCounts {
                search: 8,
                price: 1,
                ping: 0,
                book: 0
            }
        );
        let one = ModeCounts {
            healthy: 1,
            hang: 1,
            refuse: 1,
            server_error: 1,
            slow: 1,
            garbage: 1,
            rate_limited: 1,
            brownout: 1,
            oversized: 1,
        };
        assert_eq!(stats.by_mode, one);
        assert_eq!(sim.last_request_id().as_deref(), Some("req-1"));
        // Virtual time only: the whole test took a few virtual seconds.
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_brownout_is_slow_for_its_share_of_calls_and_in_time() {
        let (sim, _) = sim(SimConfig {
            seed: 7,
            ..SimConfig::default()
        });
        sim.set_mode(Some(OutageMode::Brownout));
        let mut slow = 0;
        for _ in 0..200 {
            // The rest answer as when healthy, slow tail included.
            let result = sim.call(&call(Operation::Search)).await;
            if result.elapsed == Duration::from_millis(2_850) {
                assert_eq!(result.class, CallClass::Slow);
                slow += 1;
            }
        }
        // 70 % near the budget, give or take the draw.
        assert!((120..=160).contains(&slow), "{slow} of 200 slow");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_factor_under_one_answers_slowly_in_time() {
        let (sim, _) = sim(SimConfig {
            slow_factor: 0.9,
            ..quiet()
        });
        sim.set_mode(Some(OutageMode::Slow));
        let result = sim.call(&call(Operation::Search)).await;
        assert_eq!(result.class, CallClass::Slow);
        assert_eq!(result.elapsed, Duration::from_millis(2_700));
        assert!(result.body.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_script_follows_the_injected_clock_until_overridden() {
        let outage = Outage {
            start: t0() + chrono::Duration::minutes(10),
            end: t0() + chrono::Duration::minutes(20),
            mode: OutageMode::Refuse,
        };
        let (sim, clock) = sim(SimConfig {
            outages: vec![outage],
            ..quiet()
        });
        assert_eq!(sim.mode(), None);
        assert_ne!(
            sim.call(&call(Operation::Search)).await.class,
            CallClass::Connect
        );
        clock.advance(Duration::from_secs(10 * 60));
        assert_eq!(sim.mode(), Some(OutageMode::Refuse));
        assert_eq!(
            sim.call(&call(Operation::Search)).await.class,
            CallClass::Connect
        );

        sim.set_mode(None);
        assert_eq!(sim.mode(), None);
        sim.set_mode(Some(OutageMode::ServerError));
        assert_eq!(sim.mode(), Some(OutageMode::ServerError));
        sim.follow_script();
        assert_eq!(sim.mode(), Some(OutageMode::Refuse));

        clock.advance(Duration::from_secs(10 * 60));
        assert_eq!(sim.mode(), None);
        assert_eq!(sim.stats().by_mode.refuse, 1);
        sim.reset_stats();
        assert_eq!(sim.stats(), SimStats::default());
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_operators_and_bad_parameters_are_client_errors() {
        let (sim, _) = sim(quiet());
        let mut stranger = call(Operation::Search);
        stranger.operator = OperatorId::new("baltic").unwrap();
        assert!(!sim.knows(&stranger.operator));
        let result = sim.call(&stranger).await;
        assert_eq!(result.class, CallClass::ClientError { status: 404 });
        assert_eq!(result.detail, "unknown operator baltic");
        assert_eq!(sim.stats().total, 0);

        let mut bad = call(Operation::Search);
        bad.params.insert("passengers".into(), "0".into());
        let result = sim.call(&bad).await;
        assert_eq!(result.class, CallClass::ClientError { status: 400 });
        assert_eq!(sim.stats().rejected, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn drifting_prices_change_over_virtual_time() {
        let (sim, clock) = sim(SimConfig {
            price_drift: Some(PriceDrift {
                start: t0(),
                every: Duration::from_secs(3_600),
                percent: 5.0,
            }),
            latency: LatencyModel {
                error_rate: 0.0,
                tail_to: Duration::from_millis(2_600),
                ..LatencyModel::default()
            },
            ..SimConfig::default()
        });
        let amount = |r: CallResult| {
            let json: serde_json::Value = serde_json::from_str(&r.body.unwrap()).unwrap();
            json["price"]["amount_cents"].as_u64().unwrap()
        };
        let before = amount(sim.call(&call(Operation::Price)).await);
        clock.advance(Duration::from_secs(3_600));
        let after = amount(sim.call(&call(Operation::Price)).await);
        assert_eq!(after, (before as f64 * 1.05).round() as u64);
    }

    #[test]
    fn the_config_reads_from_json_with_defaults() {
        let config: SimConfig = serde_json::from_str(
            r#"{"latency":{"scale":0.1},"outages":[{"start":"2025-06-01T08:00:00Z","end":"2025-06-01T09:00:00Z","mode":"server_error"}]}"#,
        )
        .unwrap();
        assert_eq!(config.latency.scale, 0.1);
        assert_eq!(config.outages[0].mode, OutageMode::ServerError);
        assert!(config.outages[0].covers(t0()));
        assert_eq!(config.slow_factor, 2.0);
        assert_eq!(config.budgets, Budgets::default());
    }
}

#[cfg(test)]
mod hesitation_tests {
    use std::time::Duration;

    use lifeboat_core::ManualClock;

    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-06-01T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// `calls_per_s` searches a second for `hours`, each followed at once by
    /// a ping when it would time out (as the hang check asks one): the
    /// searches' times, and the pings' times.
    fn day(config: SimConfig, calls_per_s: f64, hours: u64) -> (Vec<Duration>, Vec<Duration>) {
        let clock = ManualClock::new(t0());
        let sim = SimulatedOperator::new(
            OperatorId::new("nordic").unwrap(),
            config,
            Arc::new(clock.clone()),
        );
        let params: BTreeMap<String, String> =
            [("from", "HEL"), ("to", "TLL"), ("date", "2025-06-02")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let budget = Budget::with_timeout(Duration::from_secs(3));
        let step = Duration::from_secs_f64(1.0 / calls_per_s);
        let (mut searches, mut pings) = (Vec::new(), Vec::new());
        let mut at = Duration::ZERO;
        while at < Duration::from_secs(hours * 3_600) {
            let plan = sim.plan(Operation::Search, &params, &budget, None);
            searches.push(plan.delay);
            if plan.delay >= budget.timeout {
                clock.advance(budget.timeout);
                let ping = sim.plan(Operation::Ping, &params, &budget, None);
                pings.push(ping.delay);
                clock.advance(step.saturating_sub(budget.timeout));
            } else {
                clock.advance(step);
            }
            at += step.max(budget.timeout);
        }
        (searches, pings)
    }

    fn share(times: &[Duration], from_ms: u64, to_ms: u64) -> f64 {
        let hits = times
            .iter()
            .filter(|d| (from_ms..to_ms).contains(&(d.as_millis() as u64)))
            .count();
        hits as f64 / times.len() as f64
    }

    fn over_a_second(pings: &[Duration]) -> usize {
        pings
            .iter()
            .filter(|d| **d >= Duration::from_secs(1))
            .count()
    }

    #[test]
    fn a_hesitating_operator_keeps_the_healthy_figures() {
        let (mut searches, pings) = day(SimConfig::default(), 1.3, 12);
        searches.sort();
        let median = searches[searches.len() / 2];
        assert!(
            (Duration::from_millis(1_300)..Duration::from_millis(1_700)).contains(&median),
            "median {median:?}"
        );
        let fast = share(&searches, 550, 2_050);
        let second = share(&searches, 1_850, 2_750);
        let timeouts = share(&searches, 3_000, u64::MAX);
        assert!((0.60..0.68).contains(&fast), "fast share {fast}");
        assert!((0.28..0.35).contains(&second), "second cluster {second}");
        assert!((0.045..0.065).contains(&timeouts), "timeouts {timeouts}");
        // Right after a timed-out search, a ping now and then takes more
        // than a second (under 3 % of them), and some take more than two.
        let slow = over_a_second(&pings);
        assert!(
            slow > 0 && (slow as f64) < 0.03 * pings.len() as f64,
            "{slow} of {} pings over a second",
            pings.len()
        );
        assert!(pings.iter().all(|d| *d < Duration::from_secs(10)));
    }

    #[test]
    fn without_hesitation_pings_answer_at_once() {
        let config = SimConfig {
            hesitation: Hesitation::off(),
            ..SimConfig::default()
        };
        let (mut searches, pings) = day(config, 1.3, 12);
        assert!(!pings.is_empty());
        assert!(pings.iter().all(|d| *d == Duration::from_millis(30)));
        searches.sort();
        let timeouts = share(&searches, 3_000, u64::MAX);
        assert!((0.035..0.05).contains(&timeouts), "timeouts {timeouts}");
    }

    #[test]
    fn the_load_tail_grows_with_the_load() {
        // Slow moments off: only the load's tail.
        let tail_only = SimConfig {
            hesitation: Hesitation {
                moment_every: Duration::ZERO,
                ..Hesitation::default()
            },
            ..SimConfig::default()
        };
        let (_, quiet) = day(tail_only.clone(), 0.2, 48);
        let (_, busy) = day(tail_only, 3.0, 12);
        let queued = |pings: &[Duration]| {
            pings
                .iter()
                .filter(|d| **d > Duration::from_millis(30))
                .count() as f64
                / pings.len() as f64
        };
        let (q, b) = (queued(&quiet), queued(&busy));
        assert!(q < 0.03, "quiet: {q} of pings queued");
        assert!((0.08..0.25).contains(&b), "busy: {b} of pings queued");
    }
}
