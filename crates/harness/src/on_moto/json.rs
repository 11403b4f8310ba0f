//! `lifeboat local --json`: the run's figures as one JSON object, named as
//! `lifeboat demo --json` names the same figures (`detection_s`,
//! `recovery_s`, `offsale.off_after_open_s`, `orders`, …), so the two can
//! be read side by side (tools/figures, docs/aws-model.md).

use std::time::Duration;

use lifeboat_core::breaker::BreakerState;
use serde::Serialize;

use super::traffic::TrafficCounts;
use super::{LocalConfig, LocalReport, Milestones};
use crate::demo::report::Orders;

/// See the module docs. Times are seconds of wall-clock time, from the
/// milestones as the run saw them (the breaker, the mapping and the sale
/// status are read every 250 ms).
#[derive(Debug, Clone, Serialize)]
pub struct LocalJson {
    /// The functions' `OPERATOR_SETTINGS` ("" is the template's default).
    pub settings: String,
    /// The schedule's period (the template's rule: 60 s).
    pub tick_s: f64,
    pub mode: String,
    pub outage_s: Option<f64>,
    /// From starting to the suite answering (builds and start-ups included).
    pub ready_s: Option<f64>,
    /// From the outage's start to the breaker seen open.
    pub detection_s: Option<f64>,
    /// Why it opened.
    pub open_reason: Option<String>,
    /// From the outage's start to the errors alarm's first ALARM.
    pub alarm_s: Option<f64>,
    /// From the outage's end to the breaker seen closed.
    pub recovery_s: Option<f64>,
    pub stream: Stream,
    pub offsale: Offsale,
    /// Searches asked while the breaker was seen open (not half-open), from
    /// its opening in the outage to its close after it (as the demo's
    /// `search_while_open`).
    pub search_while_open: SearchTimes,
    /// Every search of the run.
    pub search_all: SearchTimes,
    pub traffic: Traffic,
    /// Alarm transitions sent to the circuit switch.
    pub alarm_transitions: usize,
    pub interrupted: bool,
    /// The orders held during the run and how they ended (`null`: not
    /// read).
    pub orders: Option<OrdersJson>,
}

/// The run's orders: the demo's `orders` figures, counted the same way
/// from the Orders table and the simulated operator's desk at the end of
/// the run, and what a run on moto adds.
#[derive(Debug, Clone, Serialize)]
pub struct OrdersJson {
    #[serde(flatten)]
    pub figures: Orders,
    /// Booked, at any price.
    pub booked: usize,
    /// Not final at the end: held, booking, or waiting for the customer.
    pub open: usize,
    /// From the breaker seen closed to every order held before the close
    /// seen out of held and booking (booked, most often).
    pub settled_after_close_s: Option<f64>,
    /// Booking calls that reached the operator.
    pub book_calls: u64,
    /// Booking calls the operator answered with their key's booking again
    /// (nothing booked twice).
    pub repeated_bookings: u64,
    /// The booking worker's scheduled runs, and those that failed.
    pub worker_runs: u64,
    pub worker_runs_failed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Stream {
    /// From the breaker seen open to the mapping seen on the fallback consumer.
    pub fallback_after_open_s: Option<f64>,
    /// From the breaker seen closed to the mapping seen on the real consumer
    /// (0: seen at the same read).
    pub real_after_close_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Offsale {
    /// From the breaker seen open to the sale status seen off sale.
    pub off_after_open_s: Option<f64>,
    /// From the breaker seen closed to the sale status seen on sale again.
    pub on_after_close_s: Option<f64>,
    /// Closed within the off-sale hold of opening: never taken off sale.
    pub never_off_sale: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SearchTimes {
    pub count: usize,
    /// Answer times over HTTP, from the customer's request to the reply.
    pub p50_ms: u64,
    pub p95_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Traffic {
    pub searches: u64,
    pub fresh: u64,
    pub live: u64,
    pub last_good: u64,
    pub unavailable: u64,
    pub errors: u64,
    pub skipped: u64,
    pub carts: u64,
    pub carts_paid: u64,
    /// Confirms that held an order.
    pub carts_held: u64,
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

fn between(later: Option<Duration>, earlier: Option<Duration>) -> Option<f64> {
    Some(secs(later?.saturating_sub(earlier?)))
}

/// The breaker's state as last seen at or before `at`.
fn state_at(seen: &[(Duration, BreakerState)], at: Duration) -> Option<BreakerState> {
    seen.iter().rev().find(|(t, _)| *t <= at).map(|(_, s)| *s)
}

/// p50 and p95 as the demo takes them: the answer at rank ⌈p·n⌉.
pub fn search_times<'a>(times: impl Iterator<Item = &'a Duration>) -> SearchTimes {
    let mut took: Vec<Duration> = times.copied().collect();
    took.sort();
    let pct = |p: f64| -> u64 {
        if took.is_empty() {
            return 0;
        }
        let rank = ((p * took.len() as f64).ceil() as usize).clamp(1, took.len());
        u64::try_from(took[rank - 1].as_millis()).unwrap_or(u64::MAX)
    };
    SearchTimes {
        count: took.len(),
        p50_ms: pct(0.50),
        p95_ms: pct(0.95),
    }
}

impl LocalJson {
    pub fn of(config: &LocalConfig, report: &LocalReport) -> Self {
        let m: &Milestones = &report.milestones;
        let while_open = report.search_times.iter().filter(|(asked, _)| {
            m.opened.is_some_and(|open| *asked >= open)
                && m.closed.is_none_or(|c| *asked < c)
                && state_at(&m.breaker_seen, *asked) == Some(BreakerState::Open)
        });
        let t: &TrafficCounts = &report.traffic;
        LocalJson {
            settings: config.operator_settings.clone(),
            tick_s: secs(config.tick_every),
            mode: config.mode.as_str().to_owned(),
            outage_s: config.outage.map(secs),
            ready_s: m.ready.map(secs),
            detection_s: between(m.opened, m.outage_began),
            open_reason: m.open_reason.clone(),
            alarm_s: between(m.alarm, m.outage_began),
            recovery_s: between(m.closed, m.outage_ended),
            stream: Stream {
                fallback_after_open_s: between(m.mapping_fallback, m.opened),
                real_after_close_s: between(m.mapping_real, m.closed),
            },
            offsale: Offsale {
                off_after_open_s: between(m.off_sale, m.opened),
                on_after_close_s: between(m.on_sale, m.closed),
                never_off_sale: m.off_sale.is_none() && m.closed_within_the_hold(),
            },
            search_while_open: search_times(while_open.map(|(_, took)| took)),
            search_all: search_times(report.search_times.iter().map(|(_, took)| took)),
            traffic: Traffic {
                searches: t.searches,
                fresh: t.fresh,
                live: t.live,
                last_good: t.last_good,
                unavailable: t.unavailable,
                errors: t.errors,
                skipped: t.skipped,
                carts: t.carts,
                carts_paid: t.carts_paid,
                carts_held: t.carts_held,
            },
            alarm_transitions: report.alarm_transitions,
            interrupted: report.interrupted,
            orders: report.orders.as_ref().map(|orders| OrdersJson {
                figures: orders.figures(),
                booked: orders.booked(),
                open: orders.open(),
                settled_after_close_s: between(m.orders_settled, m.closed),
                book_calls: orders.book_calls,
                repeated_bookings: orders.repeated_bookings,
                worker_runs: report.booking_runs.ticks,
                worker_runs_failed: report.booking_runs.failed,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_are_taken_at_rank_ceil_p_n() {
        let times: Vec<Duration> = (1..=20).map(ms).collect();
        let s = search_times(times.iter());
        assert_eq!((s.count, s.p50_ms, s.p95_ms), (20, 10, 19));
        assert_eq!(search_times([].iter()).p95_ms, 0);
    }

    #[test]
    fn only_searches_asked_while_the_breaker_was_open_count_as_open() {
        let s = |secs: u64| Some(Duration::from_secs(secs));
        let milestones = Milestones {
            outage_began: s(10),
            opened: s(15),
            outage_ended: s(70),
            closed: s(80),
            mapping_fallback: s(16),
            mapping_real: s(80),
            off_sale: s(26),
            on_sale: s(140),
            breaker_seen: vec![
                (Duration::from_secs(15), BreakerState::Open),
                (Duration::from_secs(50), BreakerState::HalfOpen),
                (Duration::from_secs(51), BreakerState::Open),
                (Duration::from_secs(80), BreakerState::Closed),
            ],
            ..Milestones::default()
        };
        let search_times = vec![
            (Duration::from_secs(14), ms(3000)),
            (Duration::from_secs(15), ms(20)),
            (Duration::from_secs(50), ms(2500)),
            (Duration::from_secs(79), ms(30)),
            (Duration::from_secs(80), ms(900)),
        ];
        let report = LocalReport {
            milestones,
            search_times,
            ..LocalReport::default()
        };
        let config = LocalConfig::new("nordic".parse().unwrap());
        let json = LocalJson::of(&config, &report);
        assert_eq!(json.search_while_open.count, 2);
        assert_eq!(json.search_while_open.p95_ms, 30);
        assert_eq!(json.search_all.count, 5);
        assert_eq!(json.detection_s, Some(5.0));
        assert_eq!(json.recovery_s, Some(10.0));
        assert_eq!(json.offsale.off_after_open_s, Some(11.0));
        assert_eq!(json.offsale.on_after_close_s, Some(60.0));
        assert_eq!(json.stream.real_after_close_s, Some(0.0));
        assert!(!json.offsale.never_off_sale);
    }
}
