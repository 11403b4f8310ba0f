//! What the demo counted: the JSON report, the timeline and the summary.
//!
//! This module builds the [`Report`] from what the day recorded: detection
//! and recovery, requests, searches and the sale switch. The carts' figures
//! are counted in `carts`, the held orders' in `orders`; the timeline and
//! the summary for people are written in `render`.

mod carts;
mod orders;
mod render;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::BreakerState;
use lifeboat_core::events::{LifeboatEvent, SaleStatus};
use lifeboat_core::memory::{RequestCounts, SwitchOutcome, SwitchWrite};
use lifeboat_sim::Transition;
use serde::Serialize;

use super::customer::{Observed, SearchSeen};
use super::{Phase, Script};
use lifeboat_core::cart::Cart;
use lifeboat_core::order::HeldOrder;

pub use carts::{Carts, CartsMinutesSeen, CustomerModel};
#[cfg(test)]
pub(crate) use orders::tests as order_fixtures;
pub(crate) use orders::{DeskSeen, key_order, key_orders};
pub use orders::{MinutesToBook, Orders, Refunded};
pub use render::clock;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// From the outage's start to the breaker opening.
    pub detection_s: Option<f64>,
    /// From the outage's end to the breaker closing again.
    pub recovery_s: Option<f64>,
    /// Why the breaker opened in the outage.
    pub open_reason: Option<String>,
    pub requests: Requests,
    pub search: BTreeMap<Phase, SearchFigures>,
    /// Searches asked while the breaker was open (not half-open), from its
    /// opening in the outage to its close after it, whatever the phase:
    /// the answers the open circuit gives.
    pub search_while_open: SearchFigures,
    pub offsale: Offsale,
    pub carts: Carts,
    /// The orders held while the operator could not book, and how each
    /// ended.
    pub orders: Orders,
    pub breaker: Vec<TransitionSeen>,
    /// Calls the simulated operator received.
    pub operator_calls: u64,
    /// Of those, the circuit switch's probes of the open breaker (its own
    /// half-open trials included).
    pub probe_calls: u64,
    /// Seconds of virtual time the day took.
    pub virtual_s: f64,
    /// What the AWS world charged beside store calls: cold starts,
    /// throttles and peak environments per function, and Lambda
    /// control-plane calls (all zero in the ideal world).
    pub aws: lifeboat_sim::AwsCounts,
    #[serde(skip)]
    pub timeline: Vec<(f64, String)>,
    /// Carts minute by minute against the breaker, from the Carts table and
    /// the switch's transitions (`--carts-minutes`).
    #[serde(skip)]
    pub carts_minutes: CartsMinutesSeen,
    #[serde(skip)]
    pub script: Script,
}

#[derive(Debug, Clone, Serialize)]
pub struct Requests {
    /// Request records written by search, cart and the booking worker.
    pub total: usize,
    pub with_outcome: usize,
    /// Outcome writes that landed on a request that already had an outcome,
    /// other than a consumer's over its asker's close: the store's own count
    /// of what each write found, so a store whose outcome condition is
    /// broken shows here (the product's condition refuses them: 0).
    pub duplicate_outcomes: u64,
    /// Second outcome writes that the store refused.
    pub refused_second_outcomes: u64,
    /// Requests whose stored outcome changed after their customer was
    /// answered: the search closed the request as expired when its budget
    /// ran out, and the consumer's outcome came later and took the close's
    /// place (the store's count of writes that landed on a close).
    pub closes_replaced: u64,
    /// Records the stream gave up on after its retries (sent to the
    /// mapping's failure queue).
    pub discarded: usize,
    /// Requests, by the phase they were made in, that the operator answered
    /// within its budget but whose answer was written after the request's
    /// deadline: the asker had stopped waiting (queue and stream delay on
    /// top of the call), so an answerable question was shown something else.
    pub answered_too_late: BTreeMap<Phase, usize>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SearchFigures {
    pub count: usize,
    pub p50_ms: u64,
    pub p95_ms: u64,
    /// 200 answers with no sailings.
    pub empty: usize,
    /// 503 "unavailable right now".
    pub unavailable: usize,
    pub by_source: BySource,
    /// Searches for a question answered before the outage, and how many of
    /// them were answered (any source).
    pub seen_before: usize,
    pub seen_before_answered: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BySource {
    pub fresh: usize,
    pub live: usize,
    pub last_good: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Offsale {
    /// Seconds from the outage's start to the operator going off sale.
    pub off_at_s: Option<f64>,
    /// Seconds from the outage's start to the operator's final return on sale.
    pub on_at_s: Option<f64>,
    /// Seconds from the breaker opening to the operator going off sale.
    pub off_after_open_s: Option<f64>,
    /// Seconds from the breaker closing to the operator being on sale.
    pub on_after_close_s: Option<f64>,
    /// Writes the sale switch refused (each retried on the schedule).
    pub writes_failed: usize,
    pub writes: usize,
    /// Sale Switch Write Failed faults published.
    pub faults: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TransitionSeen {
    pub at_s: f64,
    pub from: BreakerState,
    pub to: BreakerState,
    pub version: u64,
    pub reason: String,
}

pub(crate) struct Inputs<'a> {
    pub script: &'a Script,
    pub start: DateTime<Utc>,
    pub ended: DateTime<Utc>,
    pub transitions: &'a [Transition],
    pub switch_writes: &'a [SwitchWrite],
    pub requests: RequestCounts,
    pub discarded: usize,
    pub operator_calls: u64,
    pub probe_calls: u64,
    pub answered_too_late: BTreeMap<Phase, usize>,
    pub events: &'a [LifeboatEvent],
    pub observed: &'a Observed,
    /// Every cart the cart function stored.
    pub carts: &'a [Cart],
    /// Every order the cart held, as the Orders table holds it at the end.
    pub orders: &'a [HeldOrder],
    /// What the simulated operator's desk booked and could not.
    pub desk: DeskSeen<'a>,
}

fn secs_since(start: DateTime<Utc>, at: DateTime<Utc>) -> f64 {
    (at - start).num_milliseconds() as f64 / 1000.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub(crate) fn build(i: Inputs<'_>) -> Report {
    let outage_start = i.script.outage_start().as_secs_f64();
    let outage_end = i.script.outage_end().as_secs_f64();
    let breaker: Vec<TransitionSeen> = i
        .transitions
        .iter()
        .map(|t| TransitionSeen {
            at_s: round1(secs_since(i.start, t.at)),
            from: t.from,
            to: t.to,
            version: t.version,
            reason: t.reason.clone(),
        })
        .collect();
    let outage_open = breaker
        .iter()
        .find(|t| t.to == BreakerState::Open && t.at_s >= outage_start);
    let opened = outage_open.map(|t| t.at_s);
    let open_reason = outage_open.map(|t| t.reason.clone());
    let closed = breaker
        .iter()
        .find(|t| t.to == BreakerState::Closed && t.at_s >= outage_end)
        .map(|t| t.at_s);

    let accepted: Vec<(f64, SaleStatus)> = i
        .switch_writes
        .iter()
        .filter(|w| w.outcome == SwitchOutcome::Accepted)
        .map(|w| (round1(secs_since(i.start, w.at)), w.status))
        .collect();
    let off = accepted
        .iter()
        .find(|(at, s)| *s == SaleStatus::OffSale && *at >= outage_start)
        .map(|(at, _)| *at);
    let last_on = accepted
        .iter()
        .rev()
        .find(|(_, s)| *s == SaleStatus::OnSale)
        .map(|(at, _)| *at)
        .filter(|at| off.is_some_and(|off| *at > off));

    let mut search = BTreeMap::new();
    for phase in [Phase::Healthy, Phase::Outage, Phase::Recovery] {
        let seen: Vec<&SearchSeen> = i
            .observed
            .searches
            .iter()
            .filter(|s| s.phase == phase)
            .collect();
        search.insert(phase, search_figures(&seen));
    }
    let while_open: Vec<&SearchSeen> = match opened {
        Some(open) => i
            .observed
            .searches
            .iter()
            .filter(|s| {
                let at = s.at.as_secs_f64();
                at >= open
                    && closed.is_none_or(|c| at < c)
                    && state_at(&breaker, at) == Some(BreakerState::Open)
            })
            .collect(),
        None => Vec::new(),
    };
    let carts = &i.observed.carts;
    let timeline = render::timeline(&i, &breaker, &accepted);
    Report {
        detection_s: opened.map(|t| round1(t - outage_start)),
        recovery_s: closed.map(|t| round1(t - outage_end)),
        open_reason,
        requests: Requests {
            total: i.requests.total,
            with_outcome: i.requests.with_outcome,
            duplicate_outcomes: i.requests.duplicate_outcomes,
            refused_second_outcomes: i.requests.refused_outcome_writes,
            closes_replaced: i.requests.closes_replaced,
            discarded: i.discarded,
            answered_too_late: i.answered_too_late.clone(),
        },
        search,
        search_while_open: search_figures(&while_open),
        offsale: Offsale {
            off_at_s: off.map(|t| round1(t - outage_start)),
            on_at_s: last_on.map(|t| round1(t - outage_start)),
            off_after_open_s: off.zip(opened).map(|(o, b)| round1(o - b)),
            on_after_close_s: last_on.zip(closed).map(|(o, c)| round1(o - c)),
            writes_failed: i
                .switch_writes
                .iter()
                .filter(|w| w.outcome != SwitchOutcome::Accepted)
                .count(),
            writes: i.switch_writes.len(),
            faults: i
                .events
                .iter()
                .filter(|e| matches!(e, LifeboatEvent::SaleSwitchWriteFailed(_)))
                .count(),
        },
        carts: Carts::of(carts, i.script),
        orders: Orders::of(
            i.orders,
            &i.desk,
            i.start + chrono::TimeDelta::from_std(i.script.outage_end()).unwrap_or_default(),
        ),
        breaker,
        operator_calls: i.operator_calls,
        probe_calls: i.probe_calls,
        virtual_s: round1(secs_since(i.start, i.ended)),
        aws: lifeboat_sim::AwsCounts::default(),
        timeline,
        carts_minutes: CartsMinutesSeen::of(&i),
        script: i.script.clone(),
    }
}

/// The breaker's state at `at_s`: that of the last transition at or before it.
fn state_at(breaker: &[TransitionSeen], at_s: f64) -> Option<BreakerState> {
    breaker.iter().rev().find(|t| t.at_s <= at_s).map(|t| t.to)
}

fn search_figures(seen: &[&SearchSeen]) -> SearchFigures {
    let mut latencies: Vec<Duration> = seen.iter().map(|s| s.latency).collect();
    latencies.sort();
    let pct = |p: f64| -> u64 {
        if latencies.is_empty() {
            return 0;
        }
        let rank = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        u64::try_from(latencies[rank - 1].as_millis()).unwrap_or(u64::MAX)
    };
    let source = |name: &str| {
        seen.iter()
            .filter(|s| s.source.as_deref() == Some(name))
            .count()
    };
    SearchFigures {
        count: seen.len(),
        p50_ms: pct(0.50),
        p95_ms: pct(0.95),
        empty: seen.iter().filter(|s| s.empty).count(),
        unavailable: seen.iter().filter(|s| s.status == 503).count(),
        by_source: BySource {
            fresh: source("fresh"),
            live: source("live"),
            last_good: source("last_good"),
        },
        seen_before: seen.iter().filter(|s| s.seen_before_outage).count(),
        seen_before_answered: seen
            .iter()
            .filter(|s| s.seen_before_outage && s.status == 200)
            .count(),
    }
}
