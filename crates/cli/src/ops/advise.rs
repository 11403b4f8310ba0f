//! `lifeboat advise-timeouts`: a budget per operator and operation, from the
//! shape of the recorded call durations.
//!
//! Useful answers come in clusters (the incident's operator answered around
//! 1.3 s and around 2.3 s, with almost nothing useful after): the advisor
//! estimates the density of the answers' durations on a log scale, finds
//! its clusters, and puts the budget past the last cluster's end with a
//! stated margin. For every cluster it also shows the budget that would end
//! there, what it would cut off and what calls would then cost
//! (docs/timeouts.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use lifeboat_core::{Operation, OperatorId};
use serde::Serialize;

use super::calls::{CallOutcome, CallRecord};

/// How the advisor decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdviceRules {
    /// Added past the last cluster's end: 0.10 is 10 %.
    pub margin: f64,
    /// A cluster holds at least this share of the answers; smaller bumps
    /// belong to their neighbour.
    pub min_cluster_share: f64,
    /// A cluster ends where the density falls under this share of its peak.
    pub edge: f64,
    /// Budgets are rounded up to this many milliseconds.
    pub round_ms: u64,
}

impl Default for AdviceRules {
    fn default() -> Self {
        Self {
            margin: 0.10,
            min_cluster_share: 0.05,
            edge: 0.05,
            round_ms: 50,
        }
    }
}

/// Fewer answers than this say nothing about clusters.
const MIN_ANSWERS: usize = 50;
/// Points of the density's grid.
const GRID: usize = 512;

/// One cluster of useful answers.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Cluster {
    /// Where the density peaks.
    pub centre_ms: f64,
    /// Its share of the answers, up to its end.
    pub share: f64,
    /// Where its density falls under `edge` of its peak.
    pub ends_ms: f64,
}

/// What one budget would do to the recorded calls.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Candidate {
    pub budget_ms: u64,
    /// Past which cluster (from 1).
    pub after_cluster: usize,
    /// Answers that took longer than the budget, as a share of answers.
    pub cut_off_share: f64,
    /// Call durations with the budget: answers past it and timeouts cost the
    /// budget.
    pub p95_ms: f64,
    pub mean_ms: f64,
}

/// The advice for one operator and operation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Budget {
    pub operator: OperatorId,
    pub operation: Operation,
    /// `None` when the data cannot tell (too few answers).
    pub budget_ms: Option<u64>,
    pub cut_off_share: Option<f64>,
    pub p95_ms: Option<f64>,
    pub mean_ms: Option<f64>,
    pub why: String,
    pub calls: usize,
    pub answers: usize,
    /// The longest recorded timeout: answers past it were never seen.
    pub censored_at_ms: Option<f64>,
    pub clusters: Vec<Cluster>,
    pub candidates: Vec<Candidate>,
}

/// `lifeboat advise-timeouts --json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Advice {
    pub budgets: Vec<Budget>,
    pub margin: f64,
}

/// Advise a budget for every operator and operation in `calls`.
pub fn advise(calls: &[CallRecord], rules: &AdviceRules) -> Advice {
    let mut groups: BTreeMap<(OperatorId, Operation), Vec<&CallRecord>> = BTreeMap::new();
    for call in calls {
        groups
            .entry((call.operator.clone(), call.operation))
            .or_default()
            .push(call);
    }
    Advice {
        budgets: groups
            .into_iter()
            .map(|((operator, operation), calls)| one(operator, operation, &calls, rules))
            .collect(),
        margin: rules.margin,
    }
}

fn one(
    operator: OperatorId,
    operation: Operation,
    calls: &[&CallRecord],
    rules: &AdviceRules,
) -> Budget {
    let mut answers: Vec<f64> = calls
        .iter()
        .filter(|c| c.outcome == CallOutcome::Answered)
        .map(|c| c.duration_ms.max(1.0))
        .collect();
    answers.sort_by(f64::total_cmp);
    let censored_at_ms = calls
        .iter()
        .filter(|c| c.outcome == CallOutcome::Timeout)
        .map(|c| c.duration_ms)
        .max_by(f64::total_cmp);
    let mut budget = Budget {
        operator,
        operation,
        budget_ms: None,
        cut_off_share: None,
        p95_ms: None,
        mean_ms: None,
        why: String::new(),
        calls: calls.len(),
        answers: answers.len(),
        censored_at_ms,
        clusters: Vec::new(),
        candidates: Vec::new(),
    };
    if answers.len() < MIN_ANSWERS {
        budget.why = format!(
            "too few answers to see clusters ({} of at least {MIN_ANSWERS})",
            answers.len()
        );
        return budget;
    }
    budget.clusters = clusters(&answers, rules);
    budget.candidates = budget
        .clusters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ms = round_up(c.ends_ms * (1.0 + rules.margin), rules.round_ms);
            candidate(ms, i + 1, calls, &answers)
        })
        .collect();
    let Some(chosen) = budget.candidates.last().cloned() else {
        budget.why = "no cluster found".to_owned();
        return budget;
    };
    let described: Vec<String> = budget
        .clusters
        .iter()
        .map(|c| format!("around {} ({:.0} %)", secs(c.centre_ms), 100.0 * c.share))
        .collect();
    let last = budget.clusters.last().map_or(0.0, |c| c.ends_ms);
    let mut why = format!(
        "{} cluster{} of useful answers: {}; the last ends at {} (density under {:.0} % of its peak); budget = that + {:.0} % margin, rounded up to {} ms; cuts off {:.1} % of answers (those later than every cluster)",
        budget.clusters.len(),
        if budget.clusters.len() == 1 { "" } else { "s" },
        described.join(", "),
        secs(last),
        100.0 * rules.edge,
        100.0 * rules.margin,
        rules.round_ms,
        100.0 * chosen.cut_off_share,
    );
    if let Some(at) = censored_at_ms.filter(|at| (chosen.budget_ms as f64) >= *at) {
        let _ = write!(
            why,
            "; calls timed out at {}: answers after that were never seen, so this budget is not checked past it",
            secs(at)
        );
    }
    budget.budget_ms = Some(chosen.budget_ms);
    budget.cut_off_share = Some(chosen.cut_off_share);
    budget.p95_ms = Some(chosen.p95_ms);
    budget.mean_ms = Some(chosen.mean_ms);
    budget.why = why;
    budget
}

fn round_up(ms: f64, to: u64) -> u64 {
    let to = to.max(1);
    (ms.max(0.0).ceil() as u64).div_ceil(to) * to
}

fn secs(ms: f64) -> String {
    format!("{:.2} s", ms / 1000.0)
}

/// What a budget of `budget_ms` would have made of `calls`.
fn candidate(budget_ms: u64, after: usize, calls: &[&CallRecord], answers: &[f64]) -> Candidate {
    let b = budget_ms as f64;
    let cut = answers.iter().filter(|&&d| d > b).count();
    let mut costs: Vec<f64> = calls
        .iter()
        .map(|c| match c.outcome {
            CallOutcome::Timeout => b,
            _ => c.duration_ms.min(b),
        })
        .collect();
    costs.sort_by(f64::total_cmp);
    let mean = costs.iter().sum::<f64>() / costs.len().max(1) as f64;
    Candidate {
        budget_ms,
        after_cluster: after,
        cut_off_share: cut as f64 / answers.len().max(1) as f64,
        p95_ms: quantile(&costs, 0.95),
        mean_ms: mean,
    }
}

/// The `q` quantile of sorted `values` (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The clusters of sorted `answers` (milliseconds): modes of a Gaussian
/// kernel density of their logarithms, with small or shallow bumps merged
/// into their neighbour.
fn clusters(answers: &[f64], rules: &AdviceRules) -> Vec<Cluster> {
    let logs: Vec<f64> = answers.iter().map(|d| d.ln()).collect();
    let (lo, hi) = (logs[0], logs[logs.len() - 1]);
    let n = logs.len() as f64;
    let sd = {
        let mean = logs.iter().sum::<f64>() / n;
        (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt()
    };
    let iqr = quantile(&logs, 0.75) - quantile(&logs, 0.25);
    // Half of Silverman's bandwidth: his rule assumes one bump and smooths
    // two into one.
    let spread = if iqr > 0.0 { sd.min(iqr / 1.34) } else { sd };
    let h = (0.45 * spread * n.powf(-0.2)).max(1e-3);
    let (from, to) = (lo - 3.0 * h, hi + 3.0 * h);
    let step = (to - from) / (GRID - 1) as f64;
    let x = |i: usize| from + step * i as f64;
    // Binned, then smoothed.
    let mut bins = vec![0.0; GRID];
    for l in &logs {
        let i = (((l - from) / step).round() as usize).min(GRID - 1);
        bins[i] += 1.0;
    }
    let radius = ((4.0 * h / step).ceil() as usize).max(1);
    let kernel: Vec<f64> = (0..=radius)
        .map(|k| (-0.5 * (k as f64 * step / h).powi(2)).exp())
        .collect();
    let norm = n * h * (std::f64::consts::TAU).sqrt();
    let density: Vec<f64> = (0..GRID)
        .map(|i| {
            let (a, b) = (i.saturating_sub(radius), (i + radius).min(GRID - 1));
            (a..=b)
                .map(|j| bins[j] * kernel[i.abs_diff(j)])
                .sum::<f64>()
                / norm
        })
        .collect();

    // Segments between valleys, one per local maximum.
    let peaks: Vec<usize> = (1..GRID - 1)
        .filter(|&i| density[i] > density[i - 1] && density[i] >= density[i + 1])
        .collect();
    let mut cuts: Vec<usize> = peaks
        .windows(2)
        .map(|w| {
            (w[0]..=w[1])
                .min_by(|&a, &b| density[a].total_cmp(&density[b]))
                .unwrap_or(w[0])
        })
        .collect();
    let mass = |a: usize, b: usize| -> f64 {
        logs.iter().filter(|&&l| l >= x(a) && l < x(b)).count() as f64 / n
    };
    let peak_in = |a: usize, b: usize| (a..b).map(|i| density[i]).fold(0.0, f64::max);
    loop {
        let bounds: Vec<usize> = std::iter::once(0)
            .chain(cuts.iter().copied())
            .chain(std::iter::once(GRID))
            .collect();
        // The weakest cut: a segment too small, or a valley too shallow.
        let weakest = (0..cuts.len())
            .map(|k| {
                let (left, right) = ((bounds[k], bounds[k + 1]), (bounds[k + 1], bounds[k + 2]));
                let small = mass(left.0, left.1).min(mass(right.0, right.1));
                let shallow =
                    peak_in(left.0, left.1).min(peak_in(right.0, right.1)) < 1.5 * density[cuts[k]];
                (k, small, shallow)
            })
            .filter(|(_, small, shallow)| *small < rules.min_cluster_share || *shallow)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match weakest {
            Some((k, ..)) => {
                cuts.remove(k);
            }
            None => break,
        }
    }
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(cuts.iter().copied())
        .chain(std::iter::once(GRID))
        .collect();
    bounds
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0], w[1]);
            let top = (a..b).max_by(|&i, &j| density[i].total_cmp(&density[j]))?;
            let end = (top..b)
                .find(|&i| density[i] < rules.edge * density[top])
                .unwrap_or(b - 1);
            Some((
                mass(a, b),
                Cluster {
                    centre_ms: x(top).exp(),
                    // Up to its end: the sparse tail after it is no cluster.
                    share: mass(a, end + 1),
                    ends_ms: x(end).exp(),
                },
            ))
        })
        .filter(|(segment, _)| *segment >= rules.min_cluster_share)
        .map(|(_, cluster)| cluster)
        .collect()
}

/// The advice for a terminal.
pub fn render(advice: &Advice) -> String {
    let mut out = String::new();
    for b in &advice.budgets {
        let _ = writeln!(
            out,
            "{} {}: {} calls, {} answers",
            b.operator, b.operation, b.calls, b.answers
        );
        for c in &b.candidates {
            let _ = writeln!(
                out,
                "  {:>6} ms past cluster {}: cuts off {:>5.1} % of answers, p95 {:>6.0} ms, mean {:>6.0} ms",
                c.budget_ms,
                c.after_cluster,
                100.0 * c.cut_off_share,
                c.p95_ms,
                c.mean_ms
            );
        }
        match b.budget_ms {
            Some(ms) => {
                let _ = writeln!(out, "  budget {ms} ms: {}", b.why);
            }
            None => {
                let _ = writeln!(out, "  no budget: {}", b.why);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::calls::synthetic;
    use chrono::DateTime;
    use lifeboat_operator::LatencyModel;
    use std::time::Duration;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"))
    }

    fn sample(model: &LatencyModel) -> Vec<CallRecord> {
        let budgets = [
            (Operation::Search, Duration::from_secs(7)),
            (Operation::Price, Duration::from_secs(5)),
        ];
        synthetic(&nordic(), model, budgets, 20_000, 7, DateTime::UNIX_EPOCH)
    }

    #[test]
    fn the_incidents_two_clusters_give_a_budget_just_past_the_second() {
        let advice = advise(&sample(&LatencyModel::default()), &AdviceRules::default());
        assert_eq!(advice.budgets.len(), 2);
        for b in &advice.budgets {
            let centres: Vec<f64> = b.clusters.iter().map(|c| c.centre_ms).collect();
            assert_eq!(centres.len(), 2, "{b:?}");
            assert!((1_150.0..1_450.0).contains(&centres[0]), "{centres:?}");
            assert!((2_200.0..2_400.0).contains(&centres[1]), "{centres:?}");
            let budget = b.budget_ms.unwrap_or(0);
            assert!((2_700..3_300).contains(&budget), "{budget}: {}", b.why);
            // Only the sparse tail after the clusters is cut off.
            let cut = b.cut_off_share.unwrap_or(1.0);
            assert!((0.02..0.06).contains(&cut), "{cut}");
            assert!(b.why.contains("2 clusters"), "{}", b.why);
        }
    }

    #[test]
    fn clusters_elsewhere_get_other_budgets() {
        let fast = LatencyModel {
            fast_share: 0.8,
            fast_median: Duration::from_millis(300),
            fast_spread: Duration::from_millis(60),
            slow_share: 0.18,
            slow_median: Duration::from_millis(900),
            slow_spread: Duration::from_millis(80),
            tail_from: Duration::from_millis(1_200),
            tail_to: Duration::from_millis(4_000),
            ..LatencyModel::default()
        };
        let advice = advise(&sample(&fast), &AdviceRules::default());
        for b in &advice.budgets {
            assert_eq!(b.clusters.len(), 2, "{b:?}");
            let budget = b.budget_ms.unwrap_or(0);
            assert!((1_000..1_400).contains(&budget), "{budget}: {}", b.why);
        }
        // One cluster only: the budget ends it.
        let single = LatencyModel {
            fast_share: 0.99,
            slow_share: 0.0,
            ..LatencyModel::default()
        };
        let advice = advise(&sample(&single), &AdviceRules::default());
        for b in &advice.budgets {
            assert_eq!(b.clusters.len(), 1, "{b:?}");
            let budget = b.budget_ms.unwrap_or(0);
            assert!((1_900..2_400).contains(&budget), "{budget}: {}", b.why);
        }
    }

    #[test]
    fn too_few_answers_or_timeouts_under_the_budget_say_so() {
        let few: Vec<CallRecord> = sample(&LatencyModel::default())
            .into_iter()
            .take(20)
            .collect();
        let advice = advise(&few, &AdviceRules::default());
        assert!(advice.budgets.iter().all(|b| b.budget_ms.is_none()));
        assert!(advice.budgets[0].why.contains("too few answers"));
        // Recorded with a 2 s price budget: the second cluster was never seen.
        let budgets = [
            (Operation::Search, Duration::from_secs(7)),
            (Operation::Price, Duration::from_secs(2)),
        ];
        let calls = synthetic(
            &nordic(),
            &LatencyModel::default(),
            budgets,
            20_000,
            3,
            DateTime::UNIX_EPOCH,
        );
        let advice = advise(&calls, &AdviceRules::default());
        let price = advice
            .budgets
            .iter()
            .find(|b| b.operation == Operation::Price)
            .unwrap_or_else(|| panic!("no price advice"));
        assert_eq!(price.censored_at_ms, Some(2_000.0));
        assert!(price.why.contains("never seen"), "{}", price.why);
    }

    #[test]
    fn budgets_round_up() {
        assert_eq!(round_up(2_761.3, 50), 2_800);
        assert_eq!(round_up(2_800.0, 50), 2_800);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.95), 4.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
