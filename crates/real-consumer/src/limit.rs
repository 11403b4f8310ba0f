//! Adaptive concurrency per operator: lifeboat never sends an operator more
//! calls at once than it answers.
//!
//! An additive-increase, multiplicative-decrease limit on calls in flight,
//! as TCP's congestion window and the AIMD limit of Netflix's
//! concurrency-limits: each answer in time while the limit is in use raises
//! it by `1 / limit` (one a round), and an answer that says "too many" (a
//! 429) halves it, at most once per round (calls started before the last cut do not cut
//! again). A call over the limit waits for a place until its request's
//! deadline, then is failed without a call ([`lifeboat_core::request::FailureReason::Shed`]):
//! the customer gets the cached answer, the operator gets nothing.
//!
//! The limit is what lets a 429 mean two things. A 429 to a call made while
//! other calls to the operator were in flight is back-pressure on lifeboat's
//! own burst: the limit shrinks and the failure window does not count it. A
//! 429 to a call made alone says the operator refuses even one call: that
//! is a failure, and enough of them trip the breaker. So a healthy operator
//! that limits callers' concurrency slows lifeboat down; it never trips.
//!
//! The limit is per operator and per Lambda instance, learned while the
//! instance is warm. A lane runs at most `ParallelizationFactor` instances
//! per shard, so the operator sees at most that many times the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use lifeboat_core::OperatorId;
use lifeboat_core::request::CallClass;

/// Bounds and steps of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitConfig {
    /// Where a new operator's limit starts.
    pub initial: u32,
    /// The limit never goes below this.
    pub min: u32,
    /// Nor above this (the batch's own `CALL_CONCURRENCY`).
    pub max: u32,
    /// What a cut multiplies the limit by.
    pub backoff: f64,
}

impl LimitConfig {
    /// Starting at `max`: a healthy operator is not slowed before it says
    /// "too many".
    pub fn up_to(max: u32) -> Self {
        let max = max.max(1);
        Self {
            initial: max,
            min: 1,
            max,
            backoff: 0.5,
        }
    }
}

/// What an answer says to the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Answered in time: room for one more.
    Room,
    /// Too many: a 429. (Slow answers are not a signal: an operator's
    /// healthy latency has a slow tail, and cutting on it starved healthy
    /// operators in the fleet.)
    TooMany,
    /// Says nothing of the operator's capacity (a timeout is the breaker's
    /// business, a refusal the question's).
    Nothing,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: u32,
    /// Bumped by every cut: a call started before it does not cut again.
    round: u64,
}

/// One operator's limit.
#[derive(Debug)]
pub struct AdaptiveLimit {
    config: LimitConfig,
    state: Mutex<State>,
    room: Notify,
}

/// A place among the calls in flight; freed when dropped.
#[derive(Debug)]
pub struct Permit {
    limit: Arc<AdaptiveLimit>,
    round: u64,
    /// Calls to the operator in flight when this one started, itself
    /// included.
    pub in_flight: u32,
    /// What the answer said; nothing until [`Permit::finish`].
    signal: Signal,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AdaptiveLimit {
    pub fn new(config: LimitConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            state: Mutex::new(State {
                limit: f64::from(config.initial.clamp(config.min.max(1), config.max.max(1))),
                in_flight: 0,
                round: 0,
            }),
            room: Notify::new(),
        })
    }

    /// The limit now, in whole calls.
    pub fn limit(&self) -> u32 {
        lock(&self.state).limit.floor() as u32
    }

    /// A place if one is free now.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut state = lock(&self.state);
        if f64::from(state.in_flight) + 1.0 > state.limit.floor().max(1.0) {
            return None;
        }
        state.in_flight += 1;
        Some(Permit {
            limit: self.clone(),
            round: state.round,
            in_flight: state.in_flight,
            signal: Signal::Nothing,
        })
    }

    /// A place, waiting up to `wait` for one; `None` if none came free.
    pub async fn acquire(self: &Arc<Self>, wait: Duration) -> Option<Permit> {
        let waited = tokio::time::timeout(wait, async {
            loop {
                let freed = self.room.notified();
                if let Some(permit) = self.try_acquire() {
                    return permit;
                }
                freed.await;
            }
        })
        .await;
        waited.ok()
    }

    fn release(&self, round: u64, signal: Signal) {
        let mut state = lock(&self.state);
        state.in_flight = state.in_flight.saturating_sub(1);
        let (min, max) = (
            f64::from(self.config.min.max(1)),
            f64::from(self.config.max.max(1)),
        );
        match signal {
            Signal::Room => {
                state.limit = (state.limit + 1.0 / state.limit.max(1.0)).min(max);
            }
            Signal::TooMany if round == state.round => {
                state.limit = (state.limit * self.config.backoff).max(min);
                state.round += 1;
            }
            Signal::TooMany | Signal::Nothing => {}
        }
        drop(state);
        self.room.notify_waiters();
    }
}

impl Permit {
    /// Free the place with what the answer said.
    pub fn finish(mut self, signal: Signal) {
        self.signal = signal;
    }
}

impl Drop for Permit {
    /// Freed when dropped, finished or not (a dropped call says nothing).
    fn drop(&mut self) {
        self.limit.release(self.round, self.signal);
    }
}

/// What an answer to a call made with `in_flight` calls to the operator in
/// flight says to the limit, and whether the failure window counts it: a
/// 429 to a call that was not alone is back-pressure on our own burst, not
/// the operator's failure.
pub fn judge(class: &CallClass, in_flight: u32) -> (Signal, bool) {
    match class {
        CallClass::ClientError { status: 429 } => (Signal::TooMany, in_flight <= 1),
        CallClass::Ok | CallClass::Slow => (Signal::Room, true),
        _ => (Signal::Nothing, true),
    }
}

/// Every operator's limit, made on first use.
#[derive(Debug)]
pub struct Limits {
    config: LimitConfig,
    /// Operators whose limit starts and tops out elsewhere: a lane of
    /// their own at a parallelization of its own.
    own: HashMap<OperatorId, LimitConfig>,
    by_operator: std::sync::Mutex<HashMap<OperatorId, Arc<AdaptiveLimit>>>,
}

impl Limits {
    /// Limits that start, and top out, at a batch's `concurrency`.
    pub fn for_concurrency(concurrency: usize) -> Arc<Self> {
        Arc::new(Self::new(LimitConfig::up_to(
            u32::try_from(concurrency).unwrap_or(u32::MAX),
        )))
    }

    pub fn new(config: LimitConfig) -> Self {
        Self {
            config,
            own: HashMap::new(),
            by_operator: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Limits that start, and top out, at `concurrency` for every operator
    /// but those of `own`, at theirs.
    pub fn for_concurrency_of(
        concurrency: usize,
        own: impl IntoIterator<Item = (OperatorId, usize)>,
    ) -> Arc<Self> {
        let up_to = |c: usize| LimitConfig::up_to(u32::try_from(c).unwrap_or(u32::MAX));
        Arc::new(Self {
            own: own.into_iter().map(|(o, c)| (o, up_to(c))).collect(),
            ..Self::new(up_to(concurrency))
        })
    }

    /// `operator`'s limit.
    pub fn of(&self, operator: &OperatorId) -> Arc<AdaptiveLimit> {
        let mut map = self.by_operator.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(operator.clone())
            .or_insert_with(|| AdaptiveLimit::new(*self.own.get(operator).unwrap_or(&self.config)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max: u32) -> Arc<AdaptiveLimit> {
        AdaptiveLimit::new(LimitConfig::up_to(max))
    }

    #[test]
    fn a_cut_halves_once_per_round_and_answers_grow_it_back() {
        let l = limit(40);
        let permits: Vec<Permit> = (0..40).filter_map(|_| l.try_acquire()).collect();
        assert_eq!(permits.len(), 40);
        assert!(l.try_acquire().is_none(), "full");
        // Every call of the round says "too many": one cut, not forty.
        for p in permits {
            p.finish(Signal::TooMany);
        }
        assert_eq!(l.limit(), 20);
        // A round of answers in time adds about one.
        for _ in 0..20 {
            let p = l.try_acquire().unwrap_or_else(|| panic!("room"));
            p.finish(Signal::Room);
        }
        assert_eq!(l.limit(), 20, "{} is under 21", l.limit());
        for _ in 0..25 {
            let p = l.try_acquire().unwrap_or_else(|| panic!("room"));
            p.finish(Signal::Room);
        }
        assert!(l.limit() >= 21, "{}", l.limit());
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let l = limit(4);
        for _ in 0..10 {
            let p = l.try_acquire().unwrap_or_else(|| panic!("room"));
            p.finish(Signal::TooMany);
        }
        assert_eq!(l.limit(), 1);
        for _ in 0..100 {
            let p = l.try_acquire().unwrap_or_else(|| panic!("room"));
            p.finish(Signal::Room);
        }
        assert_eq!(l.limit(), 4);
    }

    #[test]
    fn a_429_is_back_pressure_unless_the_call_was_alone() {
        let too_many = CallClass::ClientError { status: 429 };
        assert_eq!(judge(&too_many, 7), (Signal::TooMany, false));
        assert_eq!(judge(&too_many, 1), (Signal::TooMany, true));
        assert_eq!(judge(&CallClass::Ok, 7), (Signal::Room, true));
        assert_eq!(judge(&CallClass::Timeout, 7), (Signal::Nothing, true));
        assert_eq!(
            judge(&CallClass::ClientError { status: 404 }, 7),
            (Signal::Nothing, true)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_over_the_limit_waits_for_a_place_or_gives_up() {
        let l = limit(1);
        let first = l.try_acquire().unwrap_or_else(|| panic!("room"));
        assert_eq!(first.in_flight, 1);
        assert!(l.acquire(Duration::from_secs(1)).await.is_none());
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(Duration::from_secs(5)).await.is_some() }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(first);
        assert!(waiting.await.unwrap_or(false));
    }
}
