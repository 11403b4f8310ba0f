//! `lifeboat replay`: recorded (or modelled) operator calls replayed through
//! lifeboat's core logic under several configurations side by side
//! (docs/replay.md).

pub mod calibrate;
pub mod engine;
pub mod figures;
pub mod model;
pub mod outages;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::DateTime;
use clap::Args;
use lifeboat_command::CliError;
use lifeboat_core::budget::Budget;
use lifeboat_core::probe::ProbeSpec;
use lifeboat_core::settings::{OperatorSettings, Settings};
use lifeboat_core::{Operation, OperatorId};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::ops::calls::{self, CallRecord};
use engine::{AlarmModel, ConfigFigures, ReplayConfig, replay};
use model::IncidentModel;

#[derive(Args)]
pub struct ReplayArgs {
    /// Recorded calls (the format of docs/timeouts.md; an optional
    /// `question` column lets the cache be replayed too).
    #[arg(long, conflicts_with = "synthetic")]
    input: Option<PathBuf>,
    /// Four weeks from the model calibrated on the incident's figures.
    #[arg(long)]
    synthetic: bool,
    /// A configuration: `old`, `tuned`, `lifeboat`, or a JSON file
    /// `{"operator_settings": {…}, "alarm": {"period_s", "evaluation_periods",
    /// "threshold"} or null, "fast_detector": true}` named after its file.
    /// Repeat for several; default old, tuned and lifeboat.
    #[arg(long = "config")]
    configs: Vec<String>,
    /// With --synthetic, the seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// With --synthetic, the seeds the prediction's spread is taken over.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    seeds: u64,
    /// With --synthetic, other model parameters, as JSON (fields of the
    /// model in docs/replay.md; missing fields keep the calibrated values).
    #[arg(long, requires = "synthetic")]
    model: Option<String>,
    /// With --synthetic, also write the calls as CSV to this file.
    #[arg(long, requires = "synthetic")]
    export: Option<PathBuf>,
    /// Search the synthetic model's parameters against the incident's
    /// figures on the fitting seeds (101-103), from the search's fixed
    /// start, and report the errors on the fitting seeds and on
    /// --seed/--seeds (held out); says whether the search found the
    /// committed parameters.
    #[arg(long, conflicts_with_all = ["input", "synthetic", "export", "plot", "model"])]
    calibrate: bool,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Also draw the call durations of each configuration, their search
    /// budgets marked, as SVG to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// The named configurations: the incident's old and tuned settings, and
/// today's defaults.
pub fn named(name: &str) -> Option<ReplayConfig> {
    // The incident's system: no detector but the alarm (an error rate of
    // 50 % or more in 30-second periods), customers' calls as the half-open
    // trials. Before its change it had no cache (customers got empty
    // results); after it, it answered from a recent cache and then the last
    // good answer (the write-up gives no ages: lifeboat's defaults).
    let incident = |search_ms: u64, price_ms: u64, periods: u32, cache: bool| {
        let mut settings = OperatorSettings::default();
        settings.budgets.search = Budget::with_timeout(Duration::from_millis(search_ms));
        settings.budgets.price = Budget::with_timeout(Duration::from_millis(price_ms));
        if !cache {
            settings.cache.recent = Duration::ZERO;
            settings.cache.last_good = Duration::ZERO;
        }
        ReplayConfig {
            name: name.to_owned(),
            settings: Settings {
                default: settings,
                operators: BTreeMap::new(),
            },
            alarm: Some(AlarmModel {
                period_s: 30,
                evaluation_periods: periods,
                threshold: 1,
                rate: Some(0.5),
            }),
            fast_detector: false,
        }
    };
    match name {
        "old" => Some(incident(7_000, 5_000, 3, false)),
        "tuned" => Some(incident(3_000, 2_750, 2, true)),
        "lifeboat" => {
            let mut settings = Settings::default();
            settings.default.probe = Some(ProbeSpec {
                operation: Operation::Search,
                params: BTreeMap::new(),
            });
            Some(ReplayConfig {
                name: name.to_owned(),
                settings,
                // The template's FailedOperatorCalls alarm.
                alarm: Some(AlarmModel {
                    period_s: 10,
                    evaluation_periods: 2,
                    threshold: 5,
                    rate: None,
                }),
                fast_detector: true,
            })
        }
        _ => None,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    operator_settings: Settings,
    #[serde(default)]
    alarm: Option<AlarmModel>,
    #[serde(default = "yes")]
    fast_detector: bool,
}

fn yes() -> bool {
    true
}

fn config(spec: &str) -> Result<ReplayConfig, String> {
    if let Some(config) = named(spec) {
        return Ok(config);
    }
    let path = Path::new(spec);
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("--config {spec}: not old, tuned or lifeboat, and not a readable file ({e})")
    })?;
    let file: ConfigFile =
        serde_json::from_str(&text).map_err(|e| format!("--config {spec}: {e}"))?;
    Ok(ReplayConfig {
        name: path
            .file_stem()
            .map_or_else(|| spec.to_owned(), |s| s.to_string_lossy().into_owned()),
        settings: file.operator_settings,
        alarm: file.alarm,
        fast_detector: file.fast_detector,
    })
}

/// `{"figure": {"target", "model", "error"}}`: the model's figures averaged
/// over `seeds` seeds from `first_seed`, error relative, with whether those
/// seeds are held out (none of them among the fitting seeds).
fn calibration(operator: &OperatorId, model: &IncidentModel, first_seed: u64, seeds: u64) -> Value {
    let report: Vec<u64> = (first_seed..first_seed.saturating_add(seeds)).collect();
    let measured = calibrate::measure(operator, model, &report, start(), true);
    json!({
        "seeds": seeds,
        "first_seed": first_seed,
        "fit_seeds": [calibrate::FIT_SEEDS.start(), calibrate::FIT_SEEDS.end()],
        "held_out": !report.iter().any(|s| calibrate::FIT_SEEDS.contains(s)),
        "figures": calibrate::error_rows(&measured),
    })
}

/// Mean, min and max of each figure over `seeds` seeds, per configuration.
fn prediction(
    operator: &OperatorId,
    model: &IncidentModel,
    configs: &[ReplayConfig],
    first_seed: u64,
    seeds: u64,
) -> Value {
    let mut out = serde_json::Map::new();
    let runs: Vec<Vec<ConfigFigures>> = (0..seeds)
        .map(|i| {
            let calls = model.generate(operator, first_seed + i, start());
            configs.iter().map(|c| replay(&calls, c)).collect()
        })
        .collect();
    for (k, config) in configs.iter().enumerate() {
        let figure = |f: &dyn Fn(&ConfigFigures) -> Option<f64>| {
            let values: Vec<f64> = runs.iter().filter_map(|r| r.get(k)).filter_map(f).collect();
            if values.is_empty() {
                return Value::Null;
            }
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let (min, max) = values
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
            let r = |x: f64| if x.abs() < 10.0 { round3(x) } else { round(x) };
            json!({"mean": r(mean), "min": r(min), "max": r(max)})
        };
        let live_share = |c: &ConfigFigures| {
            let t = &c.customers;
            let all = (t.live + t.fresh + t.last_good + t.unavailable).max(1) as f64;
            Some(t.unavailable as f64 / all)
        };
        out.insert(
            config.name.clone(),
            json!({
                "p50_ms": figure(&|c| Some(c.p50_ms)),
                "p95_ms": figure(&|c| Some(c.p95_ms)),
                "mean_ms": figure(&|c| Some(c.mean_ms)),
                "outage_day_median_ms": figure(&|c| c.outage_day_median_ms),
                "failure_rate": figure(&|c| Some(c.failure_rate)),
                "failure_rate_overall": figure(&|c| Some(c.failure_rate_overall)),
                "invocations": figure(&|c| Some(c.invocations as f64)),
                "detection_s": figure(&|c| c.detection_s),
                "calls_while_open": figure(&|c| Some(c.calls_while_open as f64)),
                "unavailable_share": figure(&live_share),
            }),
        );
    }
    json!({"seeds": seeds, "first_seed": first_seed, "configs": out})
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// 2026-11-02T00:00:00Z, a Monday: where modelled weeks start.
fn start() -> DateTime<chrono::Utc> {
    DateTime::from_timestamp(1_793_577_600, 0).unwrap_or_default()
}

/// Each configuration's invocation durations, its search budget marked.
fn plot(path: &Path, recorded: &[CallRecord], configs: &[ReplayConfig]) -> Result<(), String> {
    let durations: Vec<Vec<f64>> = configs
        .iter()
        .map(|c| engine::durations(recorded, c))
        .collect();
    let series: Vec<lifeboat_command::plot::Series<'_>> = configs
        .iter()
        .zip(&durations)
        .map(|(c, values)| lifeboat_command::plot::Series {
            name: &c.name,
            values,
        })
        .collect();
    let marks: Vec<lifeboat_command::plot::Mark> = configs
        .iter()
        .map(|c| {
            let budget = c.settings.default.budgets.search.timeout.as_millis();
            lifeboat_command::plot::Mark {
                label: format!("{}: search budget {budget} ms", c.name),
                x: budget as f64,
            }
        })
        .collect();
    lifeboat_command::plot::distributions(
        path,
        "operator-calling invocation durations per configuration",
        &series,
        &marks,
        8_000.0,
        100.0,
    )
}

#[derive(Serialize)]
struct Report<'a> {
    input: Value,
    configs: BTreeMap<&'a str, &'a ConfigFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<Value>,
}

impl ReplayArgs {
    /// `lifeboat replay`: a failure exits with code 2.
    pub fn run(self) -> Result<(), CliError> {
        replay_or_calibrate(&self).map_err(|e| CliError::new("replay", e).with_code(2))
    }
}

fn replay_or_calibrate(args: &ReplayArgs) -> Result<(), String> {
    if args.calibrate {
        return run_calibration(args);
    }
    let specs: Vec<String> = if args.configs.is_empty() {
        ["old", "tuned", "lifeboat"].map(str::to_owned).to_vec()
    } else {
        args.configs.clone()
    };
    let configs = specs
        .iter()
        .map(|s| config(s))
        .collect::<Result<Vec<_>, _>>()?;
    let model = match &args.model {
        None => IncidentModel::calibrated(),
        Some(json) => serde_json::from_str(json).map_err(|e| format!("--model: {e}"))?,
    };
    let nordic = OperatorId::new("nordic").map_err(|e| e.to_string())?;
    let (mut recorded, input) = match (&args.input, args.synthetic) {
        (Some(path), _) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let calls = calls::read(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let input = json!({"file": path.display().to_string(), "calls": calls.len()});
            (calls, input)
        }
        (None, true) => {
            let calls = model.generate(&nordic, args.seed, start());
            if let Some(path) = &args.export {
                std::fs::write(path, calls::to_csv(&calls))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let input = json!({"synthetic": true, "seed": args.seed, "days": model.days, "calls": calls.len()});
            (calls, input)
        }
        (None, false) => return Err("give --input FILE or --synthetic".to_owned()),
    };
    recorded.sort_by_key(|c| c.at);
    let figures: Vec<ConfigFigures> = configs.iter().map(|c| replay(&recorded, c)).collect();
    if let Some(path) = &args.plot {
        plot(path, &recorded, &configs)?;
    }
    let model_block = args.synthetic.then(|| {
        json!({
            "parameters": model,
            "facts": model::outage_facts(&recorded, model.outage_window_days),
            "calibration": calibration(&nordic, &model, args.seed, args.seeds),
            "prediction": prediction(&nordic, &model, &configs, args.seed, args.seeds),
        })
    });
    let report = Report {
        input,
        configs: configs
            .iter()
            .map(|c| c.name.as_str())
            .zip(figures.iter())
            .collect(),
        model: model_block,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", text(&report, &configs, &figures));
    }
    Ok(())
}

fn text(report: &Report<'_>, configs: &[ReplayConfig], figures: &[ConfigFigures]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "replayed: {}", report.input);
    let _ = write!(out, "{:<28}", "");
    for c in configs {
        let _ = write!(out, "{:>14}", c.name);
    }
    out.push('\n');
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    type Row<'a> = (&'a str, &'a dyn Fn(&ConfigFigures) -> String);
    let rows: [Row<'_>; 13] = [
        ("invocations", &|f| f.invocations.to_string()),
        ("duration p50 (ms)", &|f| format!("{:.0}", f.p50_ms)),
        ("duration p95 (ms)", &|f| format!("{:.0}", f.p95_ms)),
        ("duration mean (ms)", &|f| format!("{:.0}", f.mean_ms)),
        ("outage-day median (ms)", &|f| opt(f.outage_day_median_ms)),
        ("failure rate (daily median)", &|f| {
            format!("{:.1} %", 100.0 * f.failure_rate)
        }),
        ("  overall, probes too", &|f| {
            format!("{:.1} %", 100.0 * f.failure_rate_overall)
        }),
        ("outage to open (s)", &|f| opt(f.detection_s)),
        ("outages opened", &|f| {
            format!("{}/{}", f.outages_detected, f.outages)
        }),
        ("calls while open", &|f| f.calls_while_open.to_string()),
        ("customers: live", &|f| f.customers.live.to_string()),
        ("  fresh / last good", &|f| {
            format!("{}/{}", f.customers.fresh, f.customers.last_good)
        }),
        ("  unavailable", &|f| f.customers.unavailable.to_string()),
    ];
    for (label, value) in rows {
        let _ = write!(out, "{label:<28}");
        for f in figures {
            let _ = write!(out, "{:>14}", value(f));
        }
        out.push('\n');
    }
    if let Some(model) = &report.model {
        let facts = &model["facts"];
        let _ = writeln!(
            out,
            "\noutages in the calls: {} of the last {} days (and {} before), {:.1} hours in all, at {:.2} times the traffic outside them",
            facts["outage_days"],
            facts["window_days"],
            facts["outage_days_before_window"],
            facts["unavailable_hours"].as_f64().unwrap_or(0.0),
            facts["outage_traffic"].as_f64().unwrap_or(0.0),
        );
        let calibration = &model["calibration"];
        let _ = writeln!(
            out,
            "\ncalibration (old settings, model over {} seeds from {} vs the incident; {}):",
            calibration["seeds"],
            calibration["first_seed"],
            held_out_text(calibration),
        );
        error_table(&mut out, &calibration["figures"]);
        let _ = writeln!(
            out,
            "\nprediction over {} seeds (mean [min, max]):",
            model["prediction"]["seeds"]
        );
        if let Some(configs) = model["prediction"]["configs"].as_object() {
            for (name, figures) in configs {
                let _ = writeln!(out, "  {name}:");
                if let Some(figures) = figures.as_object() {
                    for (figure, v) in figures {
                        let _ = writeln!(
                            out,
                            "    {figure:<22} {} [{}, {}]",
                            v["mean"], v["min"], v["max"]
                        );
                    }
                }
            }
        }
    }
    out
}

fn held_out_text(calibration: &Value) -> String {
    let fit = &calibration["fit_seeds"];
    if calibration["held_out"].as_bool().unwrap_or(false) {
        format!(
            "held out: the model was fitted on seeds {}-{}",
            fit[0], fit[1]
        )
    } else {
        format!(
            "NOT held out: seeds {}-{} are the fitting seeds, some of these among them",
            fit[0], fit[1]
        )
    }
}

fn error_table(out: &mut String, rows: &Value) {
    use std::fmt::Write as _;
    if let Some(rows) = rows.as_object() {
        for (name, row) in rows {
            let error = row["error"]
                .as_f64()
                .map_or_else(|| "-".to_owned(), |e| format!("{:+.1} %", e * 100.0));
            let fitted = if row["fitted"].as_bool().unwrap_or(true) {
                ""
            } else {
                "  (not fitted)"
            };
            let _ = writeln!(
                out,
                "  {name:<26} target {:>8}  model {:>8}  error {error:>8}{fitted}",
                row["target"], row["model"],
            );
        }
    }
}

/// `lifeboat replay --calibrate`: the search, then its errors on the
/// fitting seeds and on the held-out ones.
fn run_calibration(args: &ReplayArgs) -> Result<(), String> {
    use std::fmt::Write as _;
    let nordic = OperatorId::new("nordic").map_err(|e| e.to_string())?;
    let fit_seeds: Vec<u64> = calibrate::FIT_SEEDS.collect();
    let held_out: Vec<u64> = (args.seed..args.seed.saturating_add(args.seeds)).collect();
    if held_out.iter().any(|s| calibrate::FIT_SEEDS.contains(s)) {
        return Err(format!(
            "--seed/--seeds overlap the fitting seeds {}-{}: choose held-out seeds",
            calibrate::FIT_SEEDS.start(),
            calibrate::FIT_SEEDS.end()
        ));
    }
    let quiet = args.json;
    let from = IncidentModel::search_start();
    let found = calibrate::search(&nordic, from, &fit_seeds, start(), |line| {
        if !quiet {
            eprintln!("search: {line}");
        }
    });
    let held = calibrate::measure(&nordic, &found.model, &held_out, start(), true);
    let committed = calibrate::searched(&IncidentModel::calibrated());
    let searched = calibrate::searched(&found.model);
    let matches = found.model == IncidentModel::calibrated();
    let report = json!({
        "fit_seeds": fit_seeds,
        "held_out_seeds": held_out,
        "evaluations": found.evaluations,
        "score": found.score,
        "parameters": found.model,
        "searched": searched,
        "committed": committed,
        "matches_committed": matches,
        "fit": calibrate::error_rows(&found.fit),
        "held_out": calibrate::error_rows(&held),
    });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "search over seeds {fit_seeds:?}: {} evaluations, score {:.5}",
        found.evaluations, found.score
    );
    let _ = writeln!(out, "\nparameters found (committed):");
    for (name, value) in &searched {
        let _ = writeln!(
            out,
            "  {name:<26} {value:>10} ({})",
            committed
                .get(name)
                .map_or_else(|| "-".to_owned(), f64::to_string)
        );
    }
    let _ = writeln!(
        out,
        "  the committed IncidentModel::calibrated(): {}",
        if matches { "the same" } else { "DIFFERENT" }
    );
    let _ = writeln!(out, "\nerrors on the fitting seeds {fit_seeds:?}:");
    error_table(&mut out, &report["fit"]);
    let _ = writeln!(out, "\nerrors on the held-out seeds {held_out:?}:");
    error_table(&mut out, &report["held_out"]);
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests;
