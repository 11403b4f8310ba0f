//! What the campaign found: outcomes, faults injected and seen, and how
//! long the breaker, the stream's target and the sale status took to match
//! the truth after the faults stopped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use lifeboat_core::memory::RequestCounts;
use lifeboat_core::metrics::{MemoryMetrics, names};
use lifeboat_core::{BreakerState, ConsumerTarget};
use lifeboat_sim::fault::FaultClass;
use serde::Serialize;

use super::ChaosScript;

/// One operator as sampled.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    pub index: usize,
    pub state: BreakerState,
    pub target: ConsumerTarget,
    pub on_sale: bool,
}

/// Every operator, every second.
#[derive(Debug, Default)]
pub(super) struct Samples(Vec<(Duration, Vec<Seen>)>);

impl Samples {
    pub fn push(&mut self, at: Duration, seen: Vec<Seen>) {
        self.0.push((at, seen));
    }
}

pub(super) struct Inputs<'a> {
    pub script: &'a ChaosScript,
    pub counts: RequestCounts,
    pub given_up: usize,
    pub injected: BTreeMap<FaultClass, u64>,
    pub metrics: &'a MemoryMetrics,
    /// Lambda `Errors` of the consumers and of the switch.
    pub lambda_errors: [u64; 2],
    pub samples: &'a Samples,
    pub self_fault_events: usize,
    pub wall: Duration,
}

/// Injected and seen, for one class of fault.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FaultFigures {
    pub injected: u64,
    /// Where it shows: `DependencyErrors{Dependency=…}`, or Lambda's
    /// `Errors` for invocations that died.
    pub seen: u64,
    pub shown_by: String,
}

/// Seconds from the faults stopping (or the operator's last real change,
/// if later) to the last second each part disagreed with the truth; `None`
/// if it still disagreed when the campaign ended.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Converged {
    pub breaker: Option<f64>,
    pub stream_target: Option<f64>,
    pub sale_status: Option<f64>,
}

/// The egress fault: every operator unreachable from lifeboat.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EgressFigures {
    pub seconds: f64,
    /// The listener's off-sale hold.
    pub off_sale_hold_s: f64,
    /// Operators whose breaker opened during it.
    pub breakers_opened: usize,
    /// Operators healthy (no real outage during it or in the 5 minutes
    /// before) but off sale when it ended.
    pub healthy_taken_off_sale: usize,
    pub healthy_operators: usize,
    pub self_fault_events: usize,
    /// `SelfFaultSuspected`: off-sale writes held back.
    pub off_sale_writes_held: f64,
}

/// The campaign's figures (`lifeboat chaos --json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChaosReport {
    pub seed: u64,
    pub operators: usize,
    /// Questions customers asked, each one new.
    pub questions: u64,
    /// Request records written (a question whose record write failed has
    /// none: its customer got a 503 or the last good answer).
    pub records: usize,
    pub with_outcome: usize,
    /// Outcomes written over an existing one.
    pub duplicate_outcomes: u64,
    /// Records the stream mapping gave up on after its retries.
    pub records_given_up: usize,
    /// Requests their search closed as expired whose consumer's outcome
    /// came later and took the close's place.
    pub closes_replaced: u64,
    /// Dependency faults and invocation deaths injected.
    pub faults_injected: u64,
    /// Of those, shown by a metric.
    pub faults_seen: u64,
    pub by_fault: BTreeMap<String, FaultFigures>,
    /// Deliveries disturbed (redelivered, duplicated, reordered): not
    /// failures, what at-least-once delivery does; handled idempotently.
    pub deliveries: BTreeMap<String, u64>,
    pub converged_s: Converged,
    /// Operator and part still off the truth at the end.
    pub not_converged: Vec<String>,
    pub egress: EgressFigures,
    pub faults_stop_s: f64,
    pub virtual_s: f64,
    pub wall_s: f64,
}

/// Whether operator `index` is really down `at`.
fn down(outages: &[Outage], index: usize, at: Duration) -> bool {
    outages
        .iter()
        .any(|&(i, _, start, end)| i == index && start <= at && at < end)
}

/// An operator's real outage: index, mode, from, to.
type Outage = (usize, lifeboat_operator::OutageMode, Duration, Duration);

pub(super) fn build(i: Inputs<'_>) -> ChaosReport {
    let script = i.script;
    let stop = script.faults_stop();
    let outages = script.outages();
    let mut by_fault = BTreeMap::new();
    let (mut injected, mut seen) = (0, 0);
    for (class, dependency) in FaultClass::DEPENDENCIES {
        let n = i.injected.get(&class).copied().unwrap_or(0);
        let shown =
            i.metrics
                .sum(names::DEPENDENCY_ERRORS, &[("Dependency", dependency)]) as u64;
        injected += n;
        seen += shown.min(n);
        by_fault.insert(
            format!("{class:?}"),
            FaultFigures {
                injected: n,
                seen: shown,
                shown_by: format!("DependencyErrors{{Dependency={dependency}}}"),
            },
        );
    }
    for (class, errors, function) in [
        (
            FaultClass::ConsumerKill,
            i.lambda_errors[0],
            "the consumers",
        ),
        (
            FaultClass::SwitchTimeout,
            i.lambda_errors[1],
            "the circuit switch",
        ),
    ] {
        let n = i.injected.get(&class).copied().unwrap_or(0);
        injected += n;
        seen += errors.min(n);
        by_fault.insert(
            format!("{class:?}"),
            FaultFigures {
                injected: n,
                seen: errors,
                shown_by: format!("AWS/Lambda Errors of {function}"),
            },
        );
    }

    // Convergence, per operator and part.
    let mut converged = [Some(0.0f64); 3];
    let mut not_converged = Vec::new();
    let last_at = i.samples.0.last().map(|(at, _)| *at).unwrap_or_default();
    for index in 0..script.operators {
        let changes = outages
            .iter()
            .filter(|o| o.0 == index)
            .flat_map(|o| [o.2, o.3])
            .filter(|&t| t <= last_at)
            .max()
            .unwrap_or_default();
        let origin = changes.max(stop);
        let mut last_bad: [Option<Duration>; 3] = [None; 3];
        for (at, seen) in i.samples.0.iter().filter(|(at, _)| *at >= origin) {
            let Some(s) = seen.iter().find(|s| s.index == index) else {
                continue;
            };
            let is_down = down(&outages, index, *at);
            let ok = [
                (s.state != BreakerState::Closed) == is_down,
                (s.target == ConsumerTarget::Fallback) == (s.state == BreakerState::Open),
                s.on_sale != is_down,
            ];
            for (part, ok) in ok.iter().enumerate() {
                if !ok {
                    last_bad[part] = Some(*at);
                }
            }
        }
        for (part, bad) in last_bad.iter().enumerate() {
            match bad {
                Some(at) if *at >= last_at => {
                    converged[part] = None;
                    not_converged.push(format!(
                        "op{:02} {}",
                        index + 1,
                        ["breaker", "stream_target", "sale_status"][part]
                    ));
                }
                Some(at) => {
                    let took = (*at + Duration::from_secs(1) - origin).as_secs_f64();
                    converged[part] = converged[part].map(|c| c.max(took));
                }
                None => {}
            }
        }
    }

    // The egress fault, as it ended.
    let egress_start = stop.saturating_sub(Duration::from_secs(super::EGRESS));
    // Healthy: no real outage during the egress fault nor in the 5 minutes
    // before it (an operator still recovering may rightly be off sale).
    let quiet_since = egress_start.saturating_sub(Duration::from_secs(300));
    let healthy: Vec<usize> = (0..script.operators)
        .filter(|&k| {
            !outages
                .iter()
                .any(|o| o.0 == k && o.2 < stop && o.3 > quiet_since)
        })
        .collect();
    let during = |at: &Duration| *at >= egress_start && *at < stop;
    let opened: std::collections::BTreeSet<usize> = i
        .samples
        .0
        .iter()
        .filter(|(at, _)| during(at))
        .flat_map(|(_, seen)| seen.iter())
        .filter(|s| s.state != BreakerState::Closed)
        .map(|s| s.index)
        .collect();
    let at_end = i
        .samples
        .0
        .iter()
        .rev()
        .find(|(at, _)| during(at))
        .map(|(_, seen)| seen.clone())
        .unwrap_or_default();
    let healthy_off = at_end
        .iter()
        .filter(|s| healthy.contains(&s.index) && !s.on_sale)
        .count();

    ChaosReport {
        seed: script.seed,
        operators: script.operators,
        questions: script.records,
        records: i.counts.total,
        with_outcome: i.counts.with_outcome,
        duplicate_outcomes: i
            .counts
            .outcome_writes
            .saturating_sub(i.counts.with_outcome as u64),
        records_given_up: i.given_up,
        closes_replaced: i.counts.closes_replaced,
        faults_injected: injected,
        faults_seen: seen,
        by_fault,
        deliveries: FaultClass::DELIVERIES
            .iter()
            .map(|c| (format!("{c:?}"), i.injected.get(c).copied().unwrap_or(0)))
            .collect(),
        converged_s: Converged {
            breaker: converged[0],
            stream_target: converged[1],
            sale_status: converged[2],
        },
        not_converged,
        egress: EgressFigures {
            seconds: super::EGRESS as f64,
            off_sale_hold_s: script.off_sale_hold.as_secs_f64(),
            breakers_opened: opened.len(),
            healthy_taken_off_sale: healthy_off,
            healthy_operators: healthy.len(),
            self_fault_events: i.self_fault_events,
            off_sale_writes_held: i.metrics.sum(names::SELF_FAULT, &[]),
        },
        faults_stop_s: stop.as_secs_f64(),
        virtual_s: script.duration().as_secs_f64(),
        wall_s: i.wall.as_secs_f64(),
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "not converged".to_owned(), |s| format!("{s:.0} s"))
}

impl ChaosReport {
    /// The summary for a terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "lifeboat chaos: {} operators, {} questions, faults until {:.0} s, watched to {:.0} s (virtual; {:.1} s wall)",
            self.operators, self.questions, self.faults_stop_s, self.virtual_s, self.wall_s
        );
        let _ = writeln!(
            out,
            "  request records {:>8}   with an outcome {:>8}   duplicated outcomes {}   given up by the mapping {}",
            self.records, self.with_outcome, self.duplicate_outcomes, self.records_given_up
        );
        let _ = writeln!(
            out,
            "  faults injected {:>8}   seen in a metric {:>8}",
            self.faults_injected, self.faults_seen
        );
        for (class, f) in &self.by_fault {
            let _ = writeln!(
                out,
                "    {class:<14} injected {:>6}  seen {:>6}  by {}",
                f.injected, f.seen, f.shown_by
            );
        }
        let deliveries: Vec<String> = self
            .deliveries
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "  deliveries disturbed: {}", deliveries.join(", "));
        let _ = writeln!(
            out,
            "  converged after the faults stopped: breaker {}, stream target {}, sale status {}",
            secs(self.converged_s.breaker),
            secs(self.converged_s.stream_target),
            secs(self.converged_s.sale_status)
        );
        if !self.not_converged.is_empty() {
            let _ = writeln!(out, "  NOT converged: {}", self.not_converged.join(", "));
        }
        let e = &self.egress;
        let _ = writeln!(
            out,
            "  egress fault ({:.0} s, off-sale hold {:.0} s): {} breakers opened, {} of {} healthy operators off sale at its end, {} Self Fault Suspected events, {:.0} off-sale writes held",
            e.seconds,
            e.off_sale_hold_s,
            e.breakers_opened,
            e.healthy_taken_off_sale,
            e.healthy_operators,
            e.self_fault_events,
            e.off_sale_writes_held
        );
        out
    }
}
