//! What the demo counted: the JSON report, the timeline and the summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::BreakerState;
use lifeboat_core::events::{LifeboatEvent, SaleStatus};
use lifeboat_core::memory::RequestCounts;
use lifeboat_core::sale::{SwitchOutcome, SwitchWrite};
use lifeboat_sim::Transition;
use serde::Serialize;

use super::customer::{self, CartSeen, Observed, SearchSeen};
use super::{Phase, Script};
use crate::ops::carts::{self, MinuteRow, MinutesQuery, StateChange};
use lifeboat_core::cart::Cart;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// From the outage's start to the breaker opening.
    pub detection_s: Option<f64>,
    /// From the outage's end to the breaker closing again.
    pub recovery_s: Option<f64>,
    pub requests: Requests,
    pub search: BTreeMap<Phase, SearchFigures>,
    pub offsale: Offsale,
    pub carts: Carts,
    pub breaker: Vec<TransitionSeen>,
    /// Calls the simulated operator received.
    pub operator_calls: u64,
    /// Of those, the circuit switch's probes of the open breaker (its own
    /// half-open trials included).
    pub probe_calls: u64,
    /// Seconds of virtual time the day took.
    pub virtual_s: f64,
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
    /// Request records written by search and cart.
    pub total: usize,
    pub with_outcome: usize,
    /// Outcomes written beyond the first of a request (never: the write is
    /// conditional).
    pub duplicate_outcomes: u64,
    /// Second outcome writes that the store refused.
    pub refused_second_outcomes: u64,
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
pub struct Carts {
    pub started: usize,
    pub reached_payment: usize,
    pub degraded: usize,
    pub price_changes_shown: u32,
    /// Carts first shown a changed price at payment (confirm).
    pub price_changes_first_at_payment: usize,
    /// Carts by the step at which a changed price was first shown
    /// (`accommodation`, `extras`, `price`, `confirm`).
    pub price_changes_first_at: std::collections::BTreeMap<&'static str, usize>,
    /// Carts whose customer left at a step before payment when shown a
    /// changed price (counted in `lost_to_price_change` too).
    pub lost_to_price_change_before_payment: usize,
    /// Carts whose customer left when shown a changed price (the customer
    /// model's shares are in `customer_model`).
    pub lost_to_price_change: usize,
    /// Carts whose payment showed a price for their choices for the first
    /// time, differing from the last price the customer saw (a choice step
    /// could not price them); counted apart from changes.
    pub prices_first_shown_at_payment: usize,
    /// Carts whose customer left when shown that price (the payment share of
    /// the customer model).
    pub lost_to_price_first_shown_at_payment: usize,
    pub customer_model: CustomerModel,
    pub started_during_outage: usize,
    /// Carts started during the outage that reached payment (at any time).
    pub outage_carts_reached_payment: usize,
    /// Carts started during the outage whose customer left when shown a
    /// changed price, or a price first shown at payment (the customer
    /// model's choice, not a stuck cart).
    pub outage_carts_left_on_price_change: usize,
    /// Carts that reached payment while the operator was down.
    pub reached_payment_during_outage: usize,
    pub confirmed_on_cached_price: usize,
}

/// The demo's customer model of the price shock.
#[derive(Debug, Clone, Serialize)]
pub struct CustomerModel {
    /// Share of customers who leave when first shown a changed price at payment.
    pub leave_on_change_at_payment: f64,
    /// Share who leave when shown one at an earlier step.
    pub leave_on_change_before_payment: f64,
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
}

/// The demo's carts minute by minute, and when they were judged.
#[derive(Debug, Clone, Default)]
pub struct CartsMinutesSeen {
    pub rows: Vec<MinuteRow>,
    /// Stopped carts are judged as of this time: the end of the day plus
    /// [`carts::STOPPED_AFTER`], since every customer has left by then and
    /// no cart takes another step.
    pub judged_at: Option<DateTime<Utc>>,
    /// Why there are no rows, if the range was refused.
    pub error: Option<String>,
}

impl CartsMinutesSeen {
    fn of(i: &Inputs<'_>) -> Self {
        let changes: Vec<StateChange> = i.transitions.iter().map(StateChange::from).collect();
        let judged_at = i.ended + carts::STOPPED_AFTER;
        let query = MinutesQuery {
            since: i.start,
            until: i.ended,
            judged_at,
            operator: None,
        };
        match carts::minutes(i.carts, &changes, &BTreeMap::new(), &query) {
            Ok(rows) => Self {
                rows,
                judged_at: Some(judged_at),
                error: None,
            },
            Err(e) => Self {
                error: Some(e.to_string()),
                ..Self::default()
            },
        }
    }

    /// The table, for people.
    pub fn render(&self) -> String {
        match (&self.error, self.judged_at) {
            (Some(e), _) => format!("carts minute by minute: {e}\n"),
            (None, Some(judged_at)) => carts::render(&self.rows, judged_at),
            (None, None) => "carts minute by minute: nothing was counted\n".to_owned(),
        }
    }
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
    let opened = breaker
        .iter()
        .find(|t| t.to == BreakerState::Open && t.at_s >= outage_start)
        .map(|t| t.at_s);
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
    let carts = &i.observed.carts;
    let in_outage = |c: &&CartSeen| c.phase == Phase::Outage;
    let timeline = timeline(&i, &breaker, &accepted);
    Report {
        detection_s: opened.map(|t| round1(t - outage_start)),
        recovery_s: closed.map(|t| round1(t - outage_end)),
        requests: Requests {
            total: i.requests.total,
            with_outcome: i.requests.with_outcome,
            duplicate_outcomes: i
                .requests
                .outcome_writes
                .saturating_sub(i.requests.with_outcome as u64),
            refused_second_outcomes: i.requests.refused_outcome_writes,
            discarded: i.discarded,
            answered_too_late: i.answered_too_late.clone(),
        },
        search,
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
        carts: Carts {
            started: carts.len(),
            reached_payment: carts.iter().filter(|c| c.reached_payment.is_some()).count(),
            degraded: carts.iter().filter(|c| c.degraded).count(),
            price_changes_shown: carts.iter().map(|c| c.price_changes).sum(),
            price_changes_first_at_payment: carts
                .iter()
                .filter(|c| c.first_change_at == Some("confirm"))
                .count(),
            lost_to_price_change: carts.iter().filter(|c| c.left_on_price_change).count(),
            price_changes_first_at: carts.iter().filter_map(|c| c.first_change_at).fold(
                std::collections::BTreeMap::new(),
                |mut by_step, step| {
                    *by_step.entry(step).or_default() += 1;
                    by_step
                },
            ),
            lost_to_price_change_before_payment: carts
                .iter()
                .filter(|c| c.left_on_price_change && c.first_change_at != Some("confirm"))
                .count(),
            prices_first_shown_at_payment: carts
                .iter()
                .filter(|c| c.first_priced_at_payment)
                .count(),
            lost_to_price_first_shown_at_payment: carts
                .iter()
                .filter(|c| c.left_on_first_price_at_payment)
                .count(),
            customer_model: CustomerModel {
                leave_on_change_at_payment: customer::LEAVE_ON_CHANGE_AT_PAYMENT,
                leave_on_change_before_payment: customer::LEAVE_ON_CHANGE_BEFORE_PAYMENT,
            },
            started_during_outage: carts.iter().filter(in_outage).count(),
            outage_carts_reached_payment: carts
                .iter()
                .filter(in_outage)
                .filter(|c| c.reached_payment.is_some())
                .count(),
            outage_carts_left_on_price_change: carts
                .iter()
                .filter(in_outage)
                .filter(|c| c.left_on_price_change || c.left_on_first_price_at_payment)
                .count(),
            reached_payment_during_outage: carts
                .iter()
                .filter_map(|c| c.reached_payment)
                .filter(|paid| Phase::at(i.script, *paid) == Phase::Outage)
                .count(),
            confirmed_on_cached_price: carts.iter().filter(|c| c.on_cached_price).count(),
        },
        breaker,
        operator_calls: i.operator_calls,
        probe_calls: i.probe_calls,
        virtual_s: round1(secs_since(i.start, i.ended)),
        timeline,
        carts_minutes: CartsMinutesSeen::of(&i),
        script: i.script.clone(),
    }
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

/// The readable story: script marks, breaker transitions, sale changes,
/// sample searches and carts, in time order.
fn timeline(
    i: &Inputs<'_>,
    breaker: &[TransitionSeen],
    accepted: &[(f64, SaleStatus)],
) -> Vec<(f64, String)> {
    let s = i.script;
    let mut lines: Vec<(f64, String)> = vec![
        (
            0.0,
            format!(
                "healthy traffic: {} searches/s, {:.0}% go on to a cart",
                s.searches_per_s,
                s.cart_share * 100.0
            ),
        ),
        (
            s.outage_start().as_secs_f64(),
            format!(
                "OPERATOR OUTAGE begins ({}); traffic x{}",
                s.mode, s.outage_traffic
            ),
        ),
        (
            s.outage_end().as_secs_f64(),
            "operator back; normal traffic".to_owned(),
        ),
    ];
    for t in breaker {
        lines.push((
            t.at_s,
            format!(
                "breaker {} -> {} (v{}): {}",
                t.from.as_str(),
                t.to.as_str(),
                t.version,
                t.reason
            ),
        ));
    }
    for (at, status) in accepted {
        let what = match status {
            SaleStatus::OffSale => "OFF SALE",
            SaleStatus::OnSale => "ON SALE",
        };
        lines.push((*at, format!("sale switch: {what}")));
    }
    for w in i
        .switch_writes
        .iter()
        .filter(|w| w.outcome != SwitchOutcome::Accepted)
    {
        lines.push((
            round1(secs_since(i.start, w.at)),
            format!(
                "sale switch refused the write (v{}; a refusal the script injects); retried on the schedule",
                w.version
            ),
        ));
    }
    // The first search of each (phase, source or status), and the first
    // unavailable one.
    let mut shown = std::collections::BTreeSet::new();
    for seen in &i.observed.searches {
        let kind = seen
            .source
            .clone()
            .unwrap_or_else(|| format!("{}", seen.status));
        if shown.insert((seen.phase, kind.clone())) {
            let age = seen
                .age_s
                .map(|a| format!(", age {a} s"))
                .unwrap_or_default();
            lines.push((
                round1(seen.at.as_secs_f64()),
                format!(
                    "search {}: {kind}{age}, answered in {} ms",
                    seen.label,
                    seen.latency.as_millis()
                ),
            ));
        }
    }
    let mut cart_shown = std::collections::BTreeSet::new();
    for cart in &i.observed.carts {
        if let Some(paid) = cart.reached_payment {
            let kind = (cart.phase, cart.degraded, cart.price_changes > 0);
            if cart_shown.insert(kind) {
                let mut text = format!("cart {} reached payment", cart.label);
                if cart.degraded {
                    text.push_str(" (default accommodation, extras skipped");
                    if cart.on_cached_price {
                        let _ = write!(
                            text,
                            ", cached price {} s old",
                            cart.price_age_s.unwrap_or(0)
                        );
                    }
                    text.push(')');
                }
                if cart.price_changes > 0 {
                    text.push_str(" after a price change was shown");
                }
                let _ = write!(text, ", started at +{}", clock(cart.started.as_secs_f64()));
                lines.push((round1(paid.as_secs_f64()), text));
            }
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines
}

/// `mm:ss.s` since the start of the day.
pub fn clock(s: f64) -> String {
    let whole = s.max(0.0);
    let minutes = (whole / 60.0).floor();
    format!("{:02}:{:04.1}", minutes as u64, whole - minutes * 60.0)
}

impl Report {
    /// The timeline and the summary, for people.
    pub fn render(&self, wall: Duration) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "lifeboat demo: one operator through {:.0} min of virtual time (outage of {} s, {})\n",
            self.virtual_s / 60.0,
            self.script.outage.as_secs(),
            self.script.mode
        );
        for (at, line) in &self.timeline {
            let _ = writeln!(out, "  +{}  {line}", clock(*at));
        }
        let _ = writeln!(out, "\nsummary");
        let fmt_s = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.1} s"));
        let rows = [
            ("outage -> breaker open", fmt_s(self.detection_s)),
            ("operator back -> breaker closed", fmt_s(self.recovery_s)),
            (
                "breaker open -> off sale",
                fmt_s(self.offsale.off_after_open_s),
            ),
            (
                "breaker closed -> on sale",
                fmt_s(self.offsale.on_after_close_s),
            ),
            (
                "sale switch writes (refused)",
                format!("{} ({})", self.offsale.writes, self.offsale.writes_failed),
            ),
            (
                "gateway requests with one outcome",
                format!(
                    "{} / {} ({} duplicates, {} given up on)",
                    self.requests.with_outcome,
                    self.requests.total,
                    self.requests.duplicate_outcomes,
                    self.requests.discarded
                ),
            ),
            (
                "answers in budget but late (healthy)",
                self.requests
                    .answered_too_late
                    .get(&Phase::Healthy)
                    .copied()
                    .unwrap_or(0)
                    .to_string(),
            ),
            (
                "operator calls (switch's probes)",
                format!("{} ({})", self.operator_calls, self.probe_calls),
            ),
            (
                "carts reached payment",
                format!(
                    "{} / {} ({} degraded, {} price changes shown)",
                    self.carts.reached_payment,
                    self.carts.started,
                    self.carts.degraded,
                    self.carts.price_changes_shown
                ),
            ),
            (
                "  of those started in the outage",
                format!(
                    "{} / {} ({} paid during the outage)",
                    self.carts.outage_carts_reached_payment,
                    self.carts.started_during_outage,
                    self.carts.reached_payment_during_outage
                ),
            ),
            (
                "price changes first shown at payment",
                format!(
                    "{} carts ({} carts lost to a changed price; {:.0} % leave when shown one at payment, {:.0} % before)",
                    self.carts.price_changes_first_at_payment,
                    self.carts.lost_to_price_change,
                    self.carts.customer_model.leave_on_change_at_payment * 100.0,
                    self.carts.customer_model.leave_on_change_before_payment * 100.0
                ),
            ),
            (
                "prices first shown at payment",
                format!(
                    "{} carts ({} lost)",
                    self.carts.prices_first_shown_at_payment,
                    self.carts.lost_to_price_first_shown_at_payment,
                ),
            ),
        ];
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<36} {value}");
        }
        let _ = writeln!(
            out,
            "\n  {:<9} {:>6} {:>7} {:>7} {:>6} {:>5} {:>5} {:>9} {:>11}",
            "searches",
            "count",
            "p50 ms",
            "p95 ms",
            "fresh",
            "live",
            "empty",
            "last_good",
            "unavailable"
        );
        for (phase, f) in &self.search {
            let _ = writeln!(
                out,
                "  {:<9} {:>6} {:>7} {:>7} {:>6} {:>5} {:>5} {:>9} {:>11}",
                phase.as_str(),
                f.count,
                f.p50_ms,
                f.p95_ms,
                f.by_source.fresh,
                f.by_source.live,
                f.empty,
                f.by_source.last_good,
                f.unavailable
            );
        }
        let _ = writeln!(
            out,
            "  (answer times are virtual: waits on the operator and the stream count, the handlers' own work takes no virtual time)"
        );
        let _ = writeln!(
            out,
            "\n  ran in {:.1} s of wall time ({} searches, {} carts)",
            wall.as_secs_f64(),
            self.search.values().map(|f| f.count).sum::<usize>(),
            self.carts.started
        );
        out
    }
}
