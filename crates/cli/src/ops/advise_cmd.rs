//! The `lifeboat advise-timeouts` command line: where the calls come from,
//! and how the advice is printed.

use std::path::PathBuf;
use std::time::Duration;

use chrono::DateTime;
use clap::Args;
use lifeboat_command::CliError;
use lifeboat_core::{Operation, OperatorId};
use lifeboat_operator::LatencyModel;

use super::advise::{self, AdviceRules};
use super::calls::{self, CallRecord};

#[derive(Args)]
pub struct AdviseArgs {
    /// Recorded calls: CSV with the header
    /// `at,operator,operation,duration_ms,outcome`, or JSON Lines with the
    /// same fields (docs/timeouts.md exports them from the logs).
    #[arg(long, conflicts_with = "synthetic")]
    input: Option<PathBuf>,
    /// Advise on calls drawn from the simulated operator's latency model
    /// (the incident's: answers around 1.3 s and 2.3 s, a sparse tail to
    /// 6 s), recorded under the incident's old budgets (search 7 s, price
    /// 5 s).
    #[arg(long)]
    synthetic: bool,
    /// With --synthetic, another latency model, as JSON (fields of
    /// `LatencyModel`: fast_share, fast_median_ms, fast_spread_ms,
    /// slow_share, slow_median_ms, slow_spread_ms, tail_from_ms, tail_to_ms,
    /// error_rate; missing fields keep their defaults).
    #[arg(long, requires = "synthetic")]
    latency_model: Option<String>,
    /// With --synthetic, calls per operation.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=2_000_000))]
    calls: u64,
    /// With --synthetic, the seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// With --synthetic, also write the calls as CSV to this file.
    #[arg(long, requires = "synthetic")]
    export: Option<PathBuf>,
    /// Margin past the last cluster's end, as a share (0.10 is 10 %).
    #[arg(long, default_value_t = 0.10, value_parser = parse_margin)]
    margin: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw the answers' durations per operator and operation, with
    /// the clusters' centres and the chosen budgets marked, as SVG to this
    /// file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// The answered calls' durations per operator and operation, the clusters
/// and budgets marked.
fn plot(
    path: &std::path::Path,
    recorded: &[CallRecord],
    advice: &advise::Advice,
) -> Result<(), String> {
    let names: Vec<String> = advice
        .budgets
        .iter()
        .map(|b| format!("{} {}", b.operator, b.operation))
        .collect();
    let values: Vec<Vec<f64>> = advice
        .budgets
        .iter()
        .map(|b| {
            recorded
                .iter()
                .filter(|c| {
                    c.operator == b.operator
                        && c.operation == b.operation
                        && c.outcome == calls::CallOutcome::Answered
                })
                .map(|c| c.duration_ms)
                .collect()
        })
        .collect();
    let series: Vec<lifeboat_command::plot::Series<'_>> = names
        .iter()
        .zip(&values)
        .map(|(name, values)| lifeboat_command::plot::Series { name, values })
        .collect();
    let mut marks = Vec::new();
    for (b, name) in advice.budgets.iter().zip(&names) {
        for (i, cluster) in b.clusters.iter().enumerate() {
            marks.push(lifeboat_command::plot::Mark {
                label: format!("{name}: cluster {} ({:.0} ms)", i + 1, cluster.centre_ms),
                x: cluster.centre_ms,
            });
        }
        if let Some(budget) = b.budget_ms {
            marks.push(lifeboat_command::plot::Mark {
                label: format!("{name}: budget {budget} ms"),
                x: budget as f64,
            });
        }
    }
    let max_ms = values
        .iter()
        .flatten()
        .copied()
        .fold(1_000.0_f64, f64::max)
        .min(20_000.0);
    lifeboat_command::plot::distributions(
        path,
        "answer times, clusters and advised budgets",
        &series,
        &marks,
        max_ms,
        max_ms / 120.0,
    )
}

fn parse_margin(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(m) if (0.0..=1.0).contains(&m) => Ok(m),
        _ => Err(format!("{text:?}: give a share from 0 to 1 (0.10 is 10 %)")),
    }
}

fn load(args: &AdviseArgs) -> Result<Vec<CallRecord>, String> {
    if let Some(path) = &args.input {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return calls::read(&text).map_err(|e| format!("{}: {e}", path.display()));
    }
    if !args.synthetic {
        return Err("give --input FILE or --synthetic".to_owned());
    }
    let model = match &args.latency_model {
        None => LatencyModel::default(),
        Some(json) => serde_json::from_str(json).map_err(|e| format!("--latency-model: {e}"))?,
    };
    let operator = OperatorId::new("nordic").map_err(|e| e.to_string())?;
    let budgets = [
        (Operation::Search, Duration::from_secs(7)),
        (Operation::Price, Duration::from_secs(5)),
    ];
    let n = usize::try_from(args.calls).unwrap_or(20_000);
    // 2026-11-03T00:00:00Z
    let start = DateTime::from_timestamp(1_793_664_000, 0).unwrap_or_default();
    let recorded = calls::synthetic(&operator, &model, budgets, n, args.seed, start);
    if let Some(path) = &args.export {
        std::fs::write(path, calls::to_csv(&recorded))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(recorded)
}

impl AdviseArgs {
    /// `lifeboat advise-timeouts`.
    pub fn run(self) -> Result<(), CliError> {
        let fail = |e: &dyn std::fmt::Display| CliError::new("advise-timeouts", e);
        let recorded = load(&self).map_err(|e| fail(&e))?;
        let rules = AdviceRules {
            margin: self.margin,
            ..AdviceRules::default()
        };
        let advice = advise::advise(&recorded, &rules);
        if let Some(path) = &self.plot {
            plot(path, &recorded, &advice).map_err(|e| fail(&e))?;
        }
        if self.json {
            let text = serde_json::to_string_pretty(&advice).map_err(|e| fail(&e))?;
            println!("{text}");
        } else {
            print!("{}", advise::render(&advice));
        }
        Ok(())
    }
}
