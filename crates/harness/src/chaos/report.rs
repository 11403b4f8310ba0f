//! What the campaign found: outcomes, faults injected and seen, and how
//! long the breaker, the stream's target and the sale status took to match
//! the truth after the faults stopped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use lifeboat_core::memory::{MemoryMetrics, RequestCounts};
use lifeboat_core::metrics::names;
use lifeboat_core::{BreakerState, ConsumerTarget};
use lifeboat_sim::fault::FaultClass;
use serde::Serialize;

use super::ChaosScript;
use crate::buyers::orders::OrdersEnded;

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
    /// Which operator each part waited on longest, and from when it was
    /// counted (the faults' stop, or the operator's own last outage change
    /// if later): where a slow convergence comes from.
    pub slowest: BTreeMap<String, Slowest>,
}

/// The operator a part of [`Converged`] waited on longest.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Slowest {
    pub operator: String,
    pub took_s: f64,
    /// Seconds into the campaign the wait was counted from.
    pub from_s: f64,
}

/// [`ChaosReport`]'s request counts, named as demo's and fleet's.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChaosRequests {
    pub total: usize,
    pub with_outcome: usize,
    pub duplicate_outcomes: u64,
    pub closes_replaced: u64,
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
    /// Outcome writes that landed on a request that already had an
    /// outcome, other than a consumer's over its asker's close: counted by
    /// the store from what each write found, so a broken outcome condition
    /// shows here (the product's refuses them: 0).
    pub duplicate_outcomes: u64,
    /// Records the stream mapping gave up on after its retries.
    pub records_given_up: usize,
    /// Requests their search closed as expired whose consumer's outcome
    /// came later and took the close's place: the stored outcome changed
    /// after the customer was answered.
    pub closes_replaced: u64,
    /// The same request counts under the names demo and fleet give them
    /// (`requests.total`, `requests.closes_replaced`, ...), for scripts
    /// that read all three.
    pub requests: ChaosRequests,
    /// Dependency faults and invocation deaths injected.
    pub faults_injected: u64,
    /// What the metrics show of them, not capped at `faults_injected`: the
    /// `DependencyErrors{Dependency=…}` values of the metric lines the
    /// functions emitted, for every dependency a fault class strikes, plus
    /// Lambda's `Errors` of the consumers and the switch (a killed
    /// invocation writes no line; Lambda counts it).
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
    /// The orders the buyers' carts held, and how each ended.
    pub orders: OrdersEnded,
    /// What the AWS world charged beside store calls: cold starts,
    /// throttles and peak environments per function, and Lambda
    /// control-plane calls (all zero in the ideal world).
    pub aws: lifeboat_sim::AwsCounts,
}

/// Whether operator `index` is really down `at`.
pub(super) fn down(outages: &[Outage], index: usize, at: Duration) -> bool {
    outages
        .iter()
        .any(|&(i, _, start, end)| i == index && start <= at && at < end)
}

/// An operator's real outage: index, mode, from, to.
pub(super) type Outage = (usize, lifeboat_operator::OutageMode, Duration, Duration);

pub(super) fn build(i: Inputs<'_>) -> ChaosReport {
    let script = i.script;
    let stop = script.faults_stop();
    let outages = script.outages();
    let mut by_fault = BTreeMap::new();
    let (mut injected, mut seen) = (0, 0);
    for (class, dependency) in FaultClass::DEPENDENCIES {
        let n = i.injected.get(&class).copied().unwrap_or(0);
        let shown = dependency_errors(i.metrics, dependency);
        injected += n;
        seen += shown;
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
        seen += errors;
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
    let mut slowest: BTreeMap<String, Slowest> = BTreeMap::new();
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
        // A part disagrees when it did at two samples in a row: a
        // transition in flight (the breaker saved, its mapping update a
        // control-plane call later) is not a disagreement.
        let mut was_bad = [false; 3];
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
                if !ok && was_bad[part] {
                    last_bad[part] = Some(*at);
                }
                was_bad[part] = !ok;
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
                    let name = ["breaker", "stream_target", "sale_status"][part].to_owned();
                    if slowest.get(&name).is_none_or(|s| s.took_s < took) {
                        slowest.insert(
                            name,
                            Slowest {
                                operator: format!("op{:02}", index + 1),
                                took_s: took,
                                from_s: origin.as_secs_f64(),
                            },
                        );
                    }
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
        duplicate_outcomes: i.counts.duplicate_outcomes,
        records_given_up: i.given_up,
        closes_replaced: i.counts.closes_replaced,
        requests: ChaosRequests {
            total: i.counts.total,
            with_outcome: i.counts.with_outcome,
            duplicate_outcomes: i.counts.duplicate_outcomes,
            closes_replaced: i.counts.closes_replaced,
        },
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
            slowest,
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
        orders: OrdersEnded::default(),
        aws: lifeboat_sim::AwsCounts::default(),
    }
}

/// `DependencyErrors{Dependency=dependency}` summed over the metric lines
/// the functions emitted.
fn dependency_errors(metrics: &MemoryMetrics, dependency: &str) -> u64 {
    let sum = metrics.sum(names::DEPENDENCY_ERRORS, &[("Dependency", dependency)]);
    // A count: whole and not negative in any line the functions write.
    sum.max(0.0).round() as u64
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
            "  request records {:>8}   with an outcome {:>8}   duplicated outcomes {}   given up by the mapping {}   closes replaced by a later outcome {}",
            self.records,
            self.with_outcome,
            self.duplicate_outcomes,
            self.records_given_up,
            self.closes_replaced
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
        self.orders.render(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::DateTime;
    use lifeboat_core::OperatorId;
    use lifeboat_core::memory::{MemoryWindowStore, OutcomeCondition};
    use lifeboat_core::ports::{Clock, MetricsSink, WindowStore};
    use lifeboat_core::window::CallCounts;
    use lifeboat_sim::TokioClock;
    use lifeboat_sim::fault::{FaultPlan, Faulty, port};
    use serde_json::Value;

    use super::*;

    /// `n` window adds, every one failed by the plan, through the window
    /// store as a function holds it: `watched`, its failures written to the
    /// metric lines as `DependencyErrors{Dependency=window.add}`, or not.
    async fn failed_adds(n: u64, watched: bool) -> (BTreeMap<FaultClass, u64>, MemoryMetrics) {
        let plan = Arc::new(FaultPlan::new(3));
        plan.set_rates(&[(FaultClass::WindowAdd, 1.0)]);
        let metrics = Arc::new(MemoryMetrics::new());
        let sink: Arc<dyn MetricsSink> = metrics.clone();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(DateTime::UNIX_EPOCH));
        let store = Arc::new(MemoryWindowStore::new());
        let window: Arc<dyn WindowStore> = if watched {
            port(store, &plan, &sink, &clock)
        } else {
            Faulty::new(store, &plan)
        };
        let operator = OperatorId::new("op01").unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..n {
            let added = window
                .add(&operator, DateTime::UNIX_EPOCH, &CallCounts::default())
                .await;
            assert!(added.is_err());
        }
        (plan.injected(), MemoryMetrics::from(metrics.lines()))
    }

    fn report(injected: BTreeMap<FaultClass, u64>, metrics: &MemoryMetrics) -> ChaosReport {
        build(Inputs {
            script: &ChaosScript::default(),
            counts: RequestCounts::default(),
            given_up: 0,
            injected,
            metrics,
            lambda_errors: [0, 0],
            samples: &Samples::default(),
            self_fault_events: 0,
            wall: Duration::ZERO,
        })
    }

    /// The lines with `edit` applied to each.
    fn edited(metrics: &MemoryMetrics, edit: impl FnMut(Value) -> Vec<Value>) -> MemoryMetrics {
        MemoryMetrics::from(
            metrics
                .lines()
                .into_iter()
                .flat_map(edit)
                .collect::<Vec<_>>(),
        )
    }

    /// The metric `from` renamed `to`, in the line and in its directive.
    fn renamed(line: Value, from: &str, to: &str) -> Value {
        let text = line
            .to_string()
            .replace(&format!("\"{from}\""), &format!("\"{to}\""));
        serde_json::from_str(&text).unwrap_or(line)
    }

    #[tokio::test(start_paused = true)]
    async fn faults_seen_is_what_the_metric_lines_say() {
        let (injected, metrics) = failed_adds(7, true).await;
        let honest = report(injected.clone(), &metrics);
        assert_eq!((honest.faults_injected, honest.faults_seen), (7, 7));
        assert_eq!(honest.by_fault["WindowAdd"].seen, 7);

        // The metric renamed in the lines: nothing seen.
        let metric = edited(&metrics, |l| {
            vec![renamed(l, names::DEPENDENCY_ERRORS, "DependencyFailures")]
        });
        let r = report(injected.clone(), &metric);
        assert_eq!((r.faults_injected, r.faults_seen), (7, 0), "{r:?}");
        // The dependency renamed: not seen as a window add.
        let dependency = edited(&metrics, |l| vec![renamed(l, "window.add", "window.put")]);
        assert_eq!(report(injected.clone(), &dependency).faults_seen, 0);
        // Lines removed: only the ones left are seen.
        let mut kept = 0;
        let fewer = edited(&metrics, |l| {
            let per_dependency = l.get("Dependency").is_some();
            kept += u32::from(per_dependency);
            if per_dependency && kept > 3 {
                Vec::new()
            } else {
                vec![l]
            }
        });
        assert_eq!(report(injected.clone(), &fewer).faults_seen, 3);
        // Every line written twice: seen twice, above what was injected.
        let twice = edited(&metrics, |l| vec![l.clone(), l]);
        assert_eq!(report(injected.clone(), &twice).faults_seen, 14);
        // A function that does not watch its port writes no line.
        let (injected, unwatched) = failed_adds(7, false).await;
        let r = report(injected, &unwatched);
        assert_eq!((r.faults_injected, r.faults_seen), (7, 0), "{r:?}");
    }

    /// The Requests store's outcome condition broken on purpose: the
    /// campaign's counts, read from the store, move with it.
    #[test]
    fn a_broken_outcome_condition_shows_in_the_campaigns_counts() {
        let run_seeded = |outcome_condition, seed: Option<u64>| {
            // Duplicates come from races (a record delivered to both
            // consumers while its mapping moves, a retried batch): a few a
            // thousand records, none on some runs, so three thousand; and
            // a window quicker to trip than the default's (no hang check,
            // three fast failures in a row), so that the campaign's faults
            // move mappings more often.
            let mut settings = ChaosScript::default().settings;
            settings.default.hang_check = None;
            settings.default.window.consecutive_errors = 3;
            let default = ChaosScript::default();
            let script = ChaosScript {
                records: 3_000,
                settings,
                outcome_condition,
                seed: seed.unwrap_or(default.seed),
                ..default
            };
            super::super::run_paused(&script).unwrap_or_else(|e| panic!("{e}"))
        };
        let run = |outcome_condition| run_seeded(outcome_condition, None);
        let honest = run(OutcomeCondition::OneOutcome);
        assert_eq!(honest.duplicate_outcomes, 0, "{}", honest.render());
        assert!(honest.closes_replaced > 0, "{}", honest.render());
        // The races are few: the first of a few seeds that has one shows
        // the count moving (each run is deterministic).
        assert!(
            [None, Some(1), Some(2), Some(3)]
                .into_iter()
                .any(
                    |seed| run_seeded(OutcomeCondition::Unconditional, seed).duplicate_outcomes > 0
                ),
            "no duplicate outcome on the default seed nor seeds 1-3"
        );
        let first_only = run(OutcomeCondition::FirstOnly);
        assert_eq!(first_only.closes_replaced, 0, "{}", first_only.render());
        assert_eq!(first_only.duplicate_outcomes, 0, "{}", first_only.render());
    }

    #[test]
    fn lambda_errors_are_counted_as_they_are() {
        let injected: BTreeMap<FaultClass, u64> = [
            (FaultClass::ConsumerKill, 4),
            (FaultClass::SwitchTimeout, 2),
        ]
        .into();
        let metrics = MemoryMetrics::new();
        let seen = |errors: [u64; 2]| {
            build(Inputs {
                script: &ChaosScript::default(),
                counts: RequestCounts::default(),
                given_up: 0,
                injected: injected.clone(),
                metrics: &metrics,
                lambda_errors: errors,
                samples: &Samples::default(),
                self_fault_events: 0,
                wall: Duration::ZERO,
            })
            .faults_seen
        };
        assert_eq!(seen([4, 2]), 6);
        assert_eq!(seen([3, 2]), 5);
        assert_eq!(seen([9, 2]), 11, "not capped at what was injected");
    }
}
