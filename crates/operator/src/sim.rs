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
//!
//! This file is the operator that answers: its state, each call's plan
//! (how long it waits and what it replies) and its answers. Beside it:
//! `config` (the outage modes, the outage script and the rest of a
//! [`SimConfig`]), `stats` (what it counts, [`SimStats`]) and `operators`
//! (several behind one [`OperatorApi`]), with the tests of the operator,
//! its hesitation and its bookings.
//!
//! [`Hesitation`]: crate::Hesitation
//! [`LatencyModel`]: crate::LatencyModel

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lifeboat_core::budget::Budget;
use lifeboat_core::ports::{Clock, OperatorApi};
use lifeboat_core::request::{CallResult, OperatorCall};
use lifeboat_core::{Operation, OperatorId};

use crate::answers;
use crate::bookings::{self, BookingDesk, Effect};
use crate::hesitation::Load;
use crate::latency::SimRng;
use crate::payload;

mod config;
mod operators;
mod stats;

#[cfg(test)]
mod booking_tests;
#[cfg(test)]
mod hesitation_tests;
#[cfg(test)]
mod tests;

pub use config::{Outage, OutageMode, SimConfig};
pub use operators::SimulatedOperators;
pub use stats::{ModeCounts, OperationCounts, SimStats};

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
        state.stats.count(operation, mode);
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

    /// The idempotency keys its desk booked under, each once, sorted.
    pub fn booked_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.lock().desk.booked_keys().map(str::to_owned).collect();
        keys.sort();
        keys
    }

    /// The idempotency keys its desk answered sold out, with their
    /// sailings: seats a seller promised that a sailing no longer had.
    pub fn sold_out(&self) -> std::collections::BTreeMap<String, String> {
        self.lock().desk.sold_out().clone()
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
