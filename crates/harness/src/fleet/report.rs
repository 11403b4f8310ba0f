//! What the fleet's day did, counted from what the handlers answered, the
//! calls the operators received and the transitions the switch made.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::memory::{RequestCounts, SwitchWrite};
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerState, OperatorId};
use lifeboat_sim::meter::{InvocationKind, Ledger};
use lifeboat_sim::{LaneLayout, Transition};
use serde::Serialize;

use super::day::CallSeen;
pub use super::incident::{BreakerMove, IncidentReport, ProbeSeen, SearchShares};
use super::incident::{Timeline, incident_report};
pub(crate) use super::tally::SearchTally;
use super::{FleetScript, Incident};

/// An incident counts as on from its start until this long after its end
/// (the breaker's recovery and the caches' catching up), for the healthy
/// and bystander figures.
pub(super) const AFTERMATH: Duration = Duration::from_secs(120);

/// The `--json` object.
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub operators: usize,
    pub virtual_s: f64,
    pub wall_s: f64,
    pub seed: u64,
    pub lanes: &'static str,
    pub searches_per_s: f64,
    /// The process's peak resident memory by the end of the day, in MB
    /// (`VmHWM` of /proc/self/status; null where the system does not say):
    /// the fleet folds its figures as they happen, so this follows the
    /// operators and the requests kept, not the searches played.
    pub peak_resident_mb: Option<f64>,
    /// The real consumer's reserved concurrency the day ran with (the
    /// template's `RealConsumerConcurrency`, as the capacity check asks for
    /// this many lanes unless given).
    pub real_consumer_concurrency: usize,
    /// Batches of one lane that ran at once (`LaneParallelization`).
    pub lane_parallelization: usize,
    /// The lanes that ran at a parallelization of their own (their
    /// operators' `lane.parallelization`), by operator.
    pub lanes_sized: BTreeMap<String, u8>,
    pub incidents: Vec<IncidentReport>,
    /// Openings (from closed) outside the operator's own incidents and
    /// their aftermath: of any operator, the busiest ones with an incident
    /// earlier or later in the day included.
    pub false_trips: usize,
    /// The same by operator (those with at least one).
    pub false_trips_by_operator: BTreeMap<OperatorId, usize>,
    /// The same by the breaker's reason, its numbers written `N`
    /// (`failure rate N% over N calls`).
    pub false_trip_reasons: BTreeMap<String, usize>,
    /// Each of them, in time order (the first [`FALSE_TRIPS_LISTED`]): the
    /// operator, when (seconds into the day) and the breaker's reason with
    /// its numbers.
    pub false_trip_list: Vec<FalseTrip>,
    pub bystanders: Bystanders,
    pub healthy: Healthy,
    /// What the AWS world charged beside store calls: cold starts,
    /// throttles and peak environments per function, and Lambda
    /// control-plane calls (all zero in the ideal world).
    pub aws: lifeboat_sim::AwsCounts,
    /// The orders the buyers' carts held, and how each ended.
    pub orders: crate::buyers::orders::OrdersEnded,
    pub requests: Requests,
    pub store_calls: StoreCallsReport,
}

/// Store calls (port calls: reads and writes of the Requests, Breaker,
/// window and cache stores) per unit of work, averaged over the day.
#[derive(Debug, Clone, Serialize)]
pub struct StoreCallsReport {
    /// A search answered from the cache.
    pub per_search_hit: f64,
    /// A search that asked the operator: its request, the polls of its
    /// outcome, and its breaker and cache reads.
    pub per_search_miss: f64,
    /// The consumers' calls per request they handled (batches share the
    /// breaker read and the window's add and read).
    pub per_request: f64,
    /// The circuit switch's schedule tick.
    pub per_tick: f64,
    /// Lambda control-plane calls (Get/UpdateEventSourceMapping) per tick:
    /// lanes whose breakers moved since they were last seen routed, plus a
    /// constant sweep, not one per lane.
    pub control_plane_per_tick: f64,
    pub max_items_read_per_invocation: u64,
    /// The same by kind, as reads, writes and items read per unit.
    pub detail: BTreeMap<&'static str, PerUnit>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerUnit {
    pub units: u64,
    pub reads: f64,
    pub writes: f64,
    pub items_read: f64,
    /// Lambda control-plane calls.
    pub control_plane: f64,
}

fn per_unit(ledger: &Ledger, kinds: &[InvocationKind], by_records: bool) -> PerUnit {
    let (invocations, records, calls) = ledger.total(kinds);
    let units = if by_records { records } else { invocations };
    let per = |n: u64| n as f64 / units.max(1) as f64;
    PerUnit {
        units,
        reads: per(calls.reads),
        writes: per(calls.writes),
        items_read: per(calls.items_read),
        control_plane: per(calls.control_plane),
    }
}

fn store_calls(ledger: &Ledger) -> StoreCallsReport {
    use InvocationKind::*;
    let detail: BTreeMap<&'static str, PerUnit> = [
        ("search_hit", per_unit(ledger, &[SearchHit], false)),
        ("search_miss", per_unit(ledger, &[SearchMiss], false)),
        ("search_other", per_unit(ledger, &[SearchOther], false)),
        (
            "request",
            per_unit(ledger, &[RealBatch, FallbackBatch], true),
        ),
        ("real_batch", per_unit(ledger, &[RealBatch], false)),
        ("fallback_batch", per_unit(ledger, &[FallbackBatch], false)),
        ("tick", per_unit(ledger, &[Tick], false)),
        ("switch_other", per_unit(ledger, &[Switch], false)),
    ]
    .into_iter()
    .collect();
    let calls = |name: &str| detail.get(name).map_or(0.0, |d| d.reads + d.writes);
    StoreCallsReport {
        per_search_hit: calls("search_hit"),
        per_search_miss: calls("search_miss"),
        per_request: calls("request"),
        per_tick: calls("tick"),
        control_plane_per_tick: detail.get("tick").map_or(0.0, |d| d.control_plane),
        max_items_read_per_invocation: ledger.max_items_read(),
        detail,
    }
}

/// Searches of operators without an incident while some other operator has
/// one.
#[derive(Debug, Clone, Serialize)]
pub struct Bystanders {
    /// Their searches, counted as an incident's customers are (the JSON
    /// keeps the fields at the top of `bystanders`).
    #[serde(flatten)]
    pub answers: SearchShares,
    /// The same p95 while no incident is on.
    pub baseline_p95_ms: Option<u64>,
}

/// Searches while no incident is on.
#[derive(Debug, Clone, Serialize)]
pub struct Healthy {
    pub searches: usize,
    pub live_or_fresh: usize,
    /// Searches answered live or fresh, or whose request the operator
    /// answered within its budget.
    pub answerable: usize,
    /// `live_or_fresh` as a percentage of all `searches`.
    pub live_or_fresh_pct: f64,
    /// `answerable` as a percentage of all `searches`.
    pub answerable_pct: f64,
    /// Searches not answered live or fresh, as a percentage of all
    /// `searches` (the raw share beside the next one).
    pub not_live_or_fresh_pct: f64,
    /// Answerable searches not answered live or fresh, as a percentage of
    /// the `answerable`: what the gateway itself cost.
    pub answerable_not_live_or_fresh_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Requests {
    pub total: usize,
    pub with_outcome: usize,
    /// Outcome writes that landed on a request that already had an
    /// outcome, other than a consumer's over its asker's close: counted by
    /// the store from what each write found, so a broken outcome condition
    /// shows here (the product's refuses them: 0).
    pub duplicate_outcomes: u64,
    /// Second outcome writes the store refused: each request keeps its
    /// first (a second delivery's outcome, or a search's close after the
    /// consumer's answer, say).
    pub refused_second_outcomes: u64,
    /// Requests whose stored outcome changed after their customer was
    /// answered: the search closed the request as expired when its budget
    /// ran out, and the consumer's outcome came later and took its place.
    pub closes_replaced: u64,
}

pub(crate) struct Inputs<'a> {
    pub script: &'a FleetScript,
    pub operators: &'a [OperatorId],
    pub incidents: &'a [Incident],
    pub ended: DateTime<Utc>,
    pub transitions: &'a [Transition],
    pub sale_writes: &'a [SwitchWrite],
    /// The calls of operators with an incident.
    pub calls: &'a [CallSeen],
    /// The searches, folded as they were answered.
    pub searches: &'a SearchTally,
    pub counts: RequestCounts,
    pub ledger: &'a Ledger,
    pub settings: &'a Settings,
    pub wall: Duration,
}

pub(super) fn secs(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds() as f64 / 1000.0
}

/// The process's peak resident set so far, in MB, from /proc/self/status.
fn peak_resident_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kb / 1024.0).round())
}

/// `part` as a percentage of `whole` (0 of nothing), to two decimals.
pub(super) fn pct(part: usize, whole: usize) -> f64 {
    (10_000.0 * part as f64 / whole.max(1) as f64).round() / 100.0
}

/// Whether `incident` counts as on at `t`: from its start to
/// [`AFTERMATH`] after its end.
pub(super) fn is_on(
    incident: &Incident,
    t: DateTime<Utc>,
    at: impl Fn(Duration) -> DateTime<Utc>,
) -> bool {
    at(incident.start) <= t && t < at(incident.end + AFTERMATH)
}

/// The most false trips [`FleetReport::false_trip_list`] lists.
pub const FALSE_TRIPS_LISTED: usize = 1_000;

/// One false trip.
#[derive(Debug, Clone, Serialize)]
pub struct FalseTrip {
    pub operator: OperatorId,
    pub at_s: f64,
    pub reason: String,
}

/// Whether `t` opens a breaker that nothing was wrong with: a closed
/// breaker (not a failed half-open round) opening while its operator had no
/// incident on (from the incident's start to [`AFTERMATH`] after its end).
fn is_false_trip(
    t: &Transition,
    operators: &[OperatorId],
    incidents: &[Incident],
    at: impl Fn(Duration) -> DateTime<Utc>,
) -> bool {
    if t.to != BreakerState::Open || t.from == BreakerState::HalfOpen {
        return false;
    }
    let Some(rank) = operators.iter().position(|o| o == &t.operator) else {
        return false;
    };
    !incidents
        .iter()
        .any(|i| i.rank == rank && is_on(i, t.at, &at))
}

/// A breaker's reason with every run of digits (and decimal point) as
/// `N`, so reasons of one rule count together.
fn reason_kind(reason: &str) -> String {
    let mut kind = String::with_capacity(reason.len());
    let mut in_number = false;
    for c in reason.chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                kind.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            kind.push(c);
        }
    }
    kind
}

pub(crate) fn build(inputs: Inputs<'_>) -> FleetReport {
    let start = inputs.script.start;
    let at = |d: Duration| start + chrono::TimeDelta::from_std(d).unwrap_or_default();
    let timeline = |operator: &OperatorId| Timeline {
        transitions: inputs
            .transitions
            .iter()
            .filter(|t| &t.operator == operator)
            .collect(),
    };
    let incidents: Vec<IncidentReport> = inputs
        .incidents
        .iter()
        .enumerate()
        .filter_map(|(index, incident)| {
            let operator = inputs.operators.get(incident.rank)?;
            Some(incident_report(
                &inputs,
                (index, incident),
                operator,
                &timeline(operator),
                at,
            ))
        })
        .collect();

    let mut false_trips_by_operator: BTreeMap<OperatorId, usize> = BTreeMap::new();
    let mut false_trip_reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut false_trip_list = Vec::new();
    for t in inputs
        .transitions
        .iter()
        .filter(|t| is_false_trip(t, inputs.operators, inputs.incidents, at))
    {
        *false_trips_by_operator
            .entry(t.operator.clone())
            .or_default() += 1;
        *false_trip_reasons
            .entry(reason_kind(&t.reason))
            .or_default() += 1;
        if false_trip_list.len() < FALSE_TRIPS_LISTED {
            false_trip_list.push(FalseTrip {
                operator: t.operator.clone(),
                at_s: secs(start, t.at),
                reason: t.reason.clone(),
            });
        }
    }
    let false_trips = false_trips_by_operator.values().sum();

    FleetReport {
        operators: inputs.operators.len(),
        virtual_s: secs(start, inputs.ended),
        wall_s: inputs.wall.as_secs_f64(),
        seed: inputs.script.seed,
        lanes: match inputs.script.lanes {
            LaneLayout::Shared => "shared",
            LaneLayout::PerOperator => "per_operator",
        },
        searches_per_s: inputs.script.searches_per_s,
        peak_resident_mb: peak_resident_mb(),
        real_consumer_concurrency: inputs.script.real_consumer_concurrency(),
        lane_parallelization: inputs.script.lane_parallelization,
        lanes_sized: inputs.script.lanes_sized(),
        incidents,
        false_trips,
        false_trips_by_operator,
        false_trip_reasons,
        false_trip_list,
        bystanders: inputs.searches.bystanders(),
        healthy: inputs.searches.healthy(),
        requests: Requests {
            total: inputs.counts.total,
            with_outcome: inputs.counts.with_outcome,
            duplicate_outcomes: inputs.counts.duplicate_outcomes,
            refused_second_outcomes: inputs.counts.refused_outcome_writes,
            closes_replaced: inputs.counts.closes_replaced,
        },
        store_calls: store_calls(inputs.ledger),
        aws: lifeboat_sim::AwsCounts::default(),
        orders: crate::buyers::orders::OrdersEnded::default(),
    }
}

impl FleetReport {
    /// The summary for a terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "lifeboat fleet: {} operators, {:.0} searches/s, {:.1} h of virtual time in {:.1} s{} ({} lanes, seed {})",
            self.operators,
            self.searches_per_s,
            self.virtual_s / 3600.0,
            self.wall_s,
            self.peak_resident_mb
                .map_or(String::new(), |mb| format!(", at most {mb:.0} MB resident")),
            self.lanes,
            self.seed
        );
        let _ = writeln!(
            out,
            "\n  {:<8} {:<13} {:>8} {:>8} {:>8} {:>10} {:>10} {:>6} {:>6} {:>5}",
            "operator",
            "incident",
            "start",
            "end",
            "search/s",
            "detection",
            "recovery",
            "open",
            "probes",
            "sale"
        );
        let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} s"));
        for i in &self.incidents {
            let _ = writeln!(
                out,
                "  {:<8} {:<13} {:>8} {:>8} {:>8.2} {:>10} {:>10} {:>6} {:>6} {:>5}",
                i.operator.as_str(),
                i.kind,
                clock(i.start_s),
                clock(i.end_s),
                i.searches_per_s,
                opt(i.detection_s),
                opt(i.recovery_s),
                i.calls_while_open,
                i.probe_calls,
                i.sale_writes
            );
        }
        let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
        for i in &self.incidents {
            let Some(handled) = i.handled else { continue };
            let _ = writeln!(
                out,
                "  {} {}: {}; its customers {:.2} % live or fresh ({:.2} % of the answerable), live p95 {}",
                i.operator.as_str(),
                i.kind,
                if handled {
                    "handled without the breaker"
                } else {
                    "NOT handled"
                },
                i.customers.live_or_fresh_pct,
                i.customers.live_or_fresh_of_answerable_pct,
                ms(i.customers.p95_ms)
            );
        }
        let _ = writeln!(out, "\n  false trips: {}", self.false_trips);
        let _ = writeln!(
            out,
            "  bystanders: {} searches, {:.2} % live or fresh (of all searches), {:.2} % of the answerable; live p95 {} (without incidents {})",
            self.bystanders.answers.searches,
            self.bystanders.answers.live_or_fresh_pct,
            self.bystanders.answers.live_or_fresh_of_answerable_pct,
            ms(self.bystanders.answers.p95_ms),
            ms(self.bystanders.baseline_p95_ms)
        );
        let _ = writeln!(
            out,
            "  healthy: {} searches, {:.2} % live or fresh, {:.2} % answerable; {:.2} % of the answerable not live or fresh ({:.2} % of all searches)",
            self.healthy.searches,
            self.healthy.live_or_fresh_pct,
            self.healthy.answerable_pct,
            self.healthy.answerable_not_live_or_fresh_pct,
            self.healthy.not_live_or_fresh_pct
        );
        let _ = writeln!(
            out,
            "  requests: {} total, {} with an outcome, {} duplicated, {} second outcome writes refused, {} closes replaced by a later outcome",
            self.requests.total,
            self.requests.with_outcome,
            self.requests.duplicate_outcomes,
            self.requests.refused_second_outcomes,
            self.requests.closes_replaced
        );
        let s = &self.store_calls;
        let _ = writeln!(
            out,
            "  store calls: {:.1} per search hit, {:.1} per miss, {:.1} per request (consumers), {:.1} per tick (and {:.1} Lambda control-plane calls); at most {} items read by one invocation",
            s.per_search_hit,
            s.per_search_miss,
            s.per_request,
            s.per_tick,
            s.control_plane_per_tick,
            s.max_items_read_per_invocation
        );
        self.orders.render(&mut out);
        out
    }
}

/// `+h:mm:ss` of a time since the start.
fn clock(s: f64) -> String {
    let s = s as u64;
    format!("+{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::IncidentKind;
    use lifeboat_core::ConsumerTarget;

    fn opening(operator: &OperatorId, at_s: i64, from: BreakerState) -> Transition {
        Transition {
            at: DateTime::<Utc>::UNIX_EPOCH + chrono::TimeDelta::seconds(at_s),
            operator: operator.clone(),
            from,
            to: BreakerState::Open,
            version: 1,
            reason: "failure window".to_owned(),
            stream: ConsumerTarget::Fallback,
            operator_calls: None,
            probe_calls: 0,
        }
    }

    /// The busiest operator has an incident from 1000 s to 1600 s: an
    /// opening of its breaker in the incident or its aftermath is the
    /// incident's, one before or long after is a false trip, as is any
    /// opening of an operator without an incident.
    #[test]
    fn an_opening_outside_the_operators_own_incident_is_a_false_trip() {
        let busy = OperatorId::new("op000").unwrap();
        let quiet = OperatorId::new("op001").unwrap();
        let operators = [busy.clone(), quiet.clone()];
        let incidents = [Incident {
            rank: 0,
            kind: IncidentKind::Brownout,
            start: Duration::from_secs(1000),
            end: Duration::from_secs(1600),
        }];
        let at = |d: Duration| {
            DateTime::<Utc>::UNIX_EPOCH + chrono::TimeDelta::from_std(d).unwrap_or_default()
        };
        let trip = |t: &Transition| is_false_trip(t, &operators, &incidents, at);
        assert!(trip(&opening(&busy, 900, BreakerState::Closed)), "before");
        assert!(
            !trip(&opening(&busy, 1000, BreakerState::Closed)),
            "at its start"
        );
        assert!(
            !trip(&opening(&busy, 1700, BreakerState::Closed)),
            "aftermath"
        );
        assert!(
            trip(&opening(&busy, 1720, BreakerState::Closed)),
            "after it"
        );
        assert!(
            trip(&opening(&busy, 5000, BreakerState::Closed)),
            "hours after"
        );
        assert!(
            !trip(&opening(&busy, 5000, BreakerState::HalfOpen)),
            "a failed half-open round opens an open breaker again"
        );
        assert!(
            trip(&opening(&quiet, 1200, BreakerState::Closed)),
            "no incident"
        );
    }

    #[test]
    fn reasons_of_one_rule_count_together() {
        assert_eq!(
            reason_kind("failure rate 62.5% over 16 calls"),
            "failure rate N% over N calls"
        );
        assert_eq!(reason_kind("5 timeouts in a row"), "N timeouts in a row");
    }
}
