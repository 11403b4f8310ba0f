//! `lifeboat`: the suite's command line.
//!
//! `lifeboat demo` runs every function's real handler code in one process on
//! in-memory adapters, a simulated operator and virtual time, through a
//! scripted day with an outage, and reports what happened.
//!
//! `lifeboat status`, `lifeboat breaker …`, `lifeboat detection` and
//! `lifeboat carts --minutes` work on a
//! deployed (or local) suite through the AWS APIs, configured like the
//! functions themselves (the same environment variables), with flags
//! overriding them.
//!
//! `demo`, `chaos`, `fleet` and `local` (the developers' harness) are in the
//! default build only: `--no-default-features` builds the operators'
//! `lifeboat` without them and without their simulator, moto and test-util
//! dependencies (docs/binaries.md).

use std::process::ExitCode;
#[cfg(feature = "harness")]
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use lifeboat_aws::{Clients, Env};
#[cfg(feature = "harness")]
use lifeboat_cli::chaos::{self, ChaosScript};
#[cfg(feature = "harness")]
use lifeboat_cli::demo::{self, Script};
#[cfg(feature = "harness")]
use lifeboat_cli::fleet::{self, FleetScript};
use lifeboat_cli::ops::aws::{StatusConfig, StatusFlags};
use lifeboat_cli::ops::config::{ALARM_OPERATORS, BREAKER_TABLE, CIRCUIT_SWITCH_FUNCTION};
use lifeboat_cli::ops::detection::{self, DetectionQuery, Since};
use lifeboat_cli::ops::{BreakerCommand, breaker, status};
use lifeboat_core::OperatorId;
use lifeboat_core::breaker::Command as SwitchCommand;
#[cfg(feature = "harness")]
use lifeboat_operator::OutageMode;
#[cfg(feature = "harness")]
use lifeboat_sim::LaneLayout;

#[derive(Parser)]
#[command(
    name = "lifeboat",
    version,
    about = "Keep selling when a ferry operator's API goes down"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole suite through a scripted day with an operator outage,
    /// on virtual time, without network or AWS.
    #[cfg(feature = "harness")]
    Demo {
        /// Print one JSON object with the figures instead of the timeline.
        #[arg(long)]
        json: bool,
        /// How the operator fails: hang, refuse, server_error, slow, garbage, rate_limited or brownout.
        #[arg(long, default_value = "hang")]
        mode: OutageMode,
        /// Seconds of outage.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(30..=3600))]
        outage_s: u64,
        /// Seed of every random choice.
        #[arg(long)]
        seed: Option<u64>,
        /// The rise at payment, in percent of the price shown, that the
        /// demo's marketplace absorbs (CART_SETTINGS `absorb_rise_percent`;
        /// 0 absorbs nothing, as lifeboat's default).
        #[arg(long, default_value_t = Script::default().absorb_rise_percent,
              value_parser = clap::value_parser!(u32).range(0..=20))]
        absorb_rise_percent: u32,
        /// Also print the carts minute by minute against the breaker (with
        /// --json: under `carts_minutes`).
        #[arg(long)]
        carts_minutes: bool,
        /// Draw the day's carts minute by minute against the breaker as SVG
        /// to this file.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
    },
    /// The fault campaign: lifeboat's own dependencies failing (every store
    /// operation, PutEvents, mapping updates, consumers killed mid-batch,
    /// switch timeouts, duplicated and reordered events, an egress fault)
    /// under customer traffic, on virtual time: outcomes, faults seen, and
    /// how soon everything matched the truth after the faults stopped.
    #[cfg(feature = "harness")]
    Chaos {
        /// Print one JSON object with the figures instead of the summary.
        #[arg(long)]
        json: bool,
        /// Questions customers ask, each a new request record.
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1_000..=1_000_000))]
        records: u64,
        /// How many operators sell through the gateway (at least 5: the
        /// campaign's outages need them).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(5..=50))]
        operators: u64,
        /// The off-sale listener's SALE_OFF_SALE_HOLD_S (0 to 300).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=300))]
        off_sale_hold_s: u64,
        /// Seed of every random choice and every fault.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// A marketplace day of many operators with uneven traffic and
    /// overlapping incidents, on virtual time: what each incident did to its
    /// operator and to everyone else's answers.
    #[cfg(feature = "harness")]
    Fleet {
        /// Print one JSON object with the figures instead of the summary.
        #[arg(long)]
        json: bool,
        /// How many operators sell through the gateway.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(8..=500))]
        operators: u64,
        /// Hours of virtual time.
        #[arg(long, default_value_t = 2.0, value_parser = parse_hours)]
        hours: f64,
        /// Searches per second over the whole marketplace.
        #[arg(long, default_value_t = 10.0, value_parser = parse_rate)]
        searches_per_s: f64,
        /// How requests flow to the consumers: a lane (stream and mapping)
        /// per operator, or one shared by all.
        #[arg(long, default_value = "per-operator", value_parser = parse_lanes)]
        lanes: LaneLayout,
        /// Seed of every random choice.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Show each operator's breaker, sale status and where the Requests
    /// stream points, read from the deployed tables and mapping.
    Status(StatusArgs),
    /// Force an operator's breaker open or closed, or release it, through
    /// the circuit switch function.
    Breaker {
        #[command(subcommand)]
        action: BreakerAction,
    },
    /// For each incident, the time from the first failed operator call to
    /// the errors alarm going to ALARM and to the breaker opening, from the
    /// alarm's history and the breaker's recorded state changes.
    Detection(DetectionArgs),
    /// Propose a timeout budget per operator and operation from recorded
    /// call durations: the clusters of useful answers, and a budget past
    /// the last one.
    AdviseTimeouts(lifeboat_cli::ops::advise_cmd::AdviseArgs),
    /// Replay recorded operator calls (or four modelled weeks) through the
    /// budgets, failure window, alarm and breaker under several
    /// configurations side by side: durations, failures, detection, calls
    /// while open and what customers got.
    Replay(lifeboat_cli::replay::ReplayArgs),
    /// Carts minute by minute against the breaker (`--minutes`): per minute
    /// and operator, the breaker's state, carts started, steps taken, carts
    /// reaching payment, carts stopped and price changes shown, from the
    /// Carts table and the breaker's recorded state changes.
    Carts(lifeboat_cli::ops::carts_cmd::CartsArgs),
    /// Run the whole wired suite on this machine (moto_server, the six
    /// functions under cargo lambda watch, the simulated operator, customers)
    /// and print what the breaker does; `--outage 60s` scripts an outage.
    #[cfg(feature = "harness")]
    Local(lifeboat_cli::local::cli::LocalArgs),
}

#[derive(Args)]
struct DetectionArgs {
    /// The errors alarm (the template's ErrorsAlarmName).
    #[arg(long, value_parser = non_blank)]
    alarm: String,
    /// Incidents that started since: RFC 3339 (2026-12-01T10:00:00Z) or a
    /// span back from now (2h, 30m, 1d).
    #[arg(long, default_value = detection::DEFAULT_SINCE, value_parser = detection::parse_since)]
    since: Since,
    /// Only this operator's incidents. Also names the operator the alarm
    /// watches when ALARM_OPERATORS does not.
    #[arg(long)]
    operator: Option<OperatorId>,
    /// An ALARM and a breaker opening at most this far apart are one
    /// incident (2m, 10m, 1h).
    #[arg(long, default_value = detection::DEFAULT_WINDOW, value_parser = detection::parse_span)]
    window: std::time::Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// The Breaker table [default: env BREAKER_TABLE].
    #[arg(long)]
    breaker_table: Option<String>,
    /// Which operator each alarm watches, alarm=operator,… [default: env
    /// ALARM_OPERATORS].
    #[arg(long)]
    alarm_operators: Option<String>,
}

#[derive(Args)]
struct StatusArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Only this operator.
    #[arg(long)]
    operator: Option<OperatorId>,
    /// The Breaker table [default: env BREAKER_TABLE].
    #[arg(long)]
    breaker_table: Option<String>,
    /// The SaleStatus table [default: env SALE_STATUS_TABLE].
    #[arg(long)]
    sale_status_table: Option<String>,
    /// With a lane per operator (the template's layout), the Requests
    /// tables' prefix; each operator's mapping is found by its table
    /// [default: env REQUESTS_TABLE_PREFIX].
    #[arg(long)]
    requests_table_prefix: Option<String>,
    /// With one shared stream, its event source mapping [default: env
    /// REQUESTS_MAPPING_UUID].
    #[arg(long)]
    requests_mapping_uuid: Option<String>,
    /// The real consumer's name or ARN [default: env REAL_CONSUMER_FUNCTION].
    #[arg(long)]
    real_consumer_function: Option<String>,
    /// The fallback consumer's name or ARN [default: env
    /// FALLBACK_CONSUMER_FUNCTION].
    #[arg(long)]
    fallback_consumer_function: Option<String>,
}

#[derive(Subcommand)]
enum BreakerAction {
    /// Pin the breaker open: requests fail fast and the operator goes off
    /// sale until `release`.
    ForceOpen(BreakerArgs),
    /// Pin the breaker closed: the operator is called whatever fails, until
    /// `release`.
    ForceClosed(BreakerArgs),
    /// Unpin the breaker: forced open goes half-open (trial calls), forced
    /// closed goes closed.
    Release(BreakerArgs),
}

#[derive(Args)]
struct BreakerArgs {
    /// The operator whose breaker to move.
    #[arg(long)]
    operator: OperatorId,
    /// Why, recorded in the breaker, its event and the switch's log.
    #[arg(long, value_parser = non_blank)]
    reason: String,
    /// The circuit switch function's name or ARN [default: env
    /// CIRCUIT_SWITCH_FUNCTION].
    #[arg(long)]
    function: Option<String>,
    /// Send the Invoke here instead of Lambda's endpoint: `lifeboat local`
    /// serves the functions apart from moto (`lifeboat local env` sets it).
    #[arg(long, env = "LIFEBOAT_INVOKE_ENDPOINT_URL")]
    invoke_endpoint: Option<String>,
    /// Print the switch's report as JSON, as it answered.
    #[arg(long)]
    json: bool,
}

fn non_blank(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(s.trim().to_owned())
    }
}

/// A runtime for the commands that talk to AWS.
fn block_on<F: std::future::Future<Output = ExitCode>>(what: &str, future: F) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(future),
        Err(e) => {
            eprintln!("lifeboat {what}: could not start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn status(args: StatusArgs) -> ExitCode {
    let flags = StatusFlags {
        breaker_table: args.breaker_table,
        sale_status_table: args.sale_status_table,
        requests_table_prefix: args.requests_table_prefix,
        requests_mapping_uuid: args.requests_mapping_uuid,
        real_consumer_function: args.real_consumer_function,
        fallback_consumer_function: args.fallback_consumer_function,
    };
    let config = match StatusConfig::resolve(&flags, &Env::from_process()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("lifeboat status: {e}");
            return ExitCode::FAILURE;
        }
    };
    let adapters = config.adapters(&Clients::load().await).await;
    let report = match status::gather(
        &adapters.sources(),
        args.operator.as_ref(),
        chrono::Utc::now(),
    )
    .await
    {
        Ok(report) => report,
        Err(e) => {
            eprintln!("lifeboat status: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        match report.to_json() {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("lifeboat status: report not written: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", status::render_table(&report));
    }
    if report.has_failures() {
        eprintln!("lifeboat status: some reads failed; see the report");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn breaker_command(command: SwitchCommand, args: BreakerArgs) -> ExitCode {
    let env = Env::from_process();
    let function = match CIRCUIT_SWITCH_FUNCTION.resolve(args.function.as_deref(), &env) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("lifeboat breaker: {e}");
            return ExitCode::FAILURE;
        }
    };
    let command = match BreakerCommand::new(command, args.operator, &args.reason) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lifeboat breaker: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let lambda = match args.invoke_endpoint.as_deref().map(str::trim) {
        Some(endpoint) if !endpoint.is_empty() => aws_sdk_lambda::Client::from_conf(
            aws_sdk_lambda::config::Builder::from(&sdk)
                .endpoint_url(endpoint)
                .build(),
        ),
        _ => aws_sdk_lambda::Client::new(&sdk),
    };
    match breaker::invoke(&lambda, &function, &command).await {
        Ok(invoked) => {
            if args.json {
                match serde_json::to_string_pretty(&invoked.answer) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("lifeboat breaker: report not written: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", invoked.report.render());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lifeboat breaker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn detection_command(args: DetectionArgs) -> ExitCode {
    let env = Env::from_process();
    let table = match BREAKER_TABLE.resolve(args.breaker_table.as_deref(), &env) {
        Ok(table) => table,
        Err(e) => {
            eprintln!("lifeboat detection: {e}");
            return ExitCode::FAILURE;
        }
    };
    let map = ALARM_OPERATORS
        .resolve(args.alarm_operators.as_deref(), &env)
        .ok();
    let alarm_operator =
        match detection::alarm_operator(&args.alarm, map.as_deref(), args.operator.as_ref()) {
            Ok(operator) => operator,
            Err(e) => {
                eprintln!("lifeboat detection: {e}");
                return ExitCode::FAILURE;
            }
        };
    let now = chrono::Utc::now();
    let query = DetectionQuery {
        alarm: args.alarm,
        alarm_operator,
        only: args.operator,
        since: args.since.resolve(now),
        window: args.window,
        now,
    };
    let config = lifeboat_aws::clients::load_sdk_config().await;
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let breakers = lifeboat_aws::DynamoBreakerStore::new(Clients::new(&config).dynamodb, table);
    // Alarms up to one pairing window before --since still pair with an
    // opening after it.
    let from = query.since - chrono::TimeDelta::from_std(query.window).unwrap_or_default();
    let history = match detection::alarm_history(&cloudwatch, &query.alarm, from, now).await {
        Ok(history) => history,
        Err(e) => {
            eprintln!("lifeboat detection: {e}");
            return ExitCode::FAILURE;
        }
    };
    let changes = match breakers.changes(query.only.as_ref()).await {
        Ok(changes) => changes,
        Err(e) => {
            eprintln!("lifeboat detection: breaker table: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = detection::detect(&query, &history.transitions, &changes, history.warnings);
    if args.json {
        match report.to_json() {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("lifeboat detection: report not written: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", detection::render_table(&report));
    }
    if !report.warnings.is_empty() {
        eprintln!(
            "lifeboat detection: {} alarm history item(s) skipped; see the warnings",
            report.warnings.len()
        );
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Detection(args) => block_on("detection", detection_command(args)),
        #[cfg(feature = "harness")]
        Command::Local(args) => lifeboat_cli::local::cli::main(args),
        Command::AdviseTimeouts(args) => lifeboat_cli::ops::advise_cmd::main(args),
        Command::Replay(args) => lifeboat_cli::replay::main(args),
        Command::Carts(args) => block_on("carts", lifeboat_cli::ops::carts_cmd::run(args)),
        Command::Status(args) => block_on("status", status(args)),
        Command::Breaker { action } => {
            let (command, args) = match action {
                BreakerAction::ForceOpen(args) => (SwitchCommand::ForceOpen, args),
                BreakerAction::ForceClosed(args) => (SwitchCommand::ForceClosed, args),
                BreakerAction::Release(args) => (SwitchCommand::Release, args),
            };
            block_on("breaker", breaker_command(command, args))
        }
        #[cfg(feature = "harness")]
        Command::Chaos {
            json,
            records,
            operators,
            off_sale_hold_s,
            seed,
        } => {
            let defaults = ChaosScript::default();
            let script = ChaosScript {
                seed: seed.unwrap_or(defaults.seed),
                records,
                operators: usize::try_from(operators).unwrap_or(defaults.operators),
                off_sale_hold: std::time::Duration::from_secs(off_sale_hold_s),
                ..defaults
            };
            print_report("chaos", json, chaos::run_paused(&script), |r| r.render())
        }
        #[cfg(feature = "harness")]
        Command::Fleet {
            json,
            operators,
            hours,
            searches_per_s,
            lanes,
            seed,
        } => {
            let defaults = FleetScript::default();
            let script = FleetScript {
                seed: seed.unwrap_or(defaults.seed),
                operators: usize::try_from(operators).unwrap_or(defaults.operators),
                duration: std::time::Duration::from_secs_f64(hours * 3600.0),
                searches_per_s,
                lanes,
                ..defaults
            };
            print_report("fleet", json, fleet::run_paused(&script), |r| r.render())
        }
        #[cfg(feature = "harness")]
        Command::Demo {
            json,
            mode,
            outage_s,
            seed,
            absorb_rise_percent,
            carts_minutes,
            plot,
        } => {
            let defaults = Script::default();
            let script = Script {
                mode,
                absorb_rise_percent,
                outage: std::time::Duration::from_secs(outage_s),
                seed: seed.unwrap_or(defaults.seed),
                ..defaults
            };
            let wall = Instant::now();
            let report = demo::run_paused(&script);
            if let (Some(path), Ok(report)) = (&plot, &report)
                && let Err(e) = lifeboat_cli::plot::carts_rows(
                    path,
                    "lifeboat demo: carts minute by minute against the breaker",
                    &report.carts_minutes.rows,
                )
            {
                eprintln!("lifeboat demo: no picture: {e}");
            }
            if carts_minutes {
                return print_demo_with_carts_minutes(json, report, wall);
            }
            print_report("demo", json, report, |r| r.render(wall.elapsed()))
        }
    }
}

#[cfg(feature = "harness")]
fn parse_hours(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(h) if (1.0..=24.0).contains(&h) => Ok(h),
        _ => Err(format!("{text:?}: give hours from 1 to 24")),
    }
}

#[cfg(feature = "harness")]
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 200.0 => Ok(r),
        _ => Err(format!(
            "{text:?}: give searches per second above 0, at most 200"
        )),
    }
}

#[cfg(feature = "harness")]
fn parse_lanes(text: &str) -> Result<LaneLayout, String> {
    match text {
        "per-operator" => Ok(LaneLayout::PerOperator),
        "shared" => Ok(LaneLayout::Shared),
        _ => Err(format!("{text:?}: use per-operator or shared")),
    }
}

/// Print the demo's report with its carts minute by minute: after the
/// summary, or in the JSON object under `carts_minutes`.
#[cfg(feature = "harness")]
fn print_demo_with_carts_minutes(
    json: bool,
    report: std::io::Result<demo::Report>,
    wall: Instant,
) -> ExitCode {
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("lifeboat demo: could not start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(e) = &report.carts_minutes.error {
        eprintln!("lifeboat demo: carts minute by minute: {e}");
        return ExitCode::FAILURE;
    }
    if !json {
        print!("{}", report.render(wall.elapsed()));
        print!("\n{}", report.carts_minutes.render());
        return ExitCode::SUCCESS;
    }
    let text = serde_json::to_value(&report).and_then(|mut value| {
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "carts_minutes".to_owned(),
                serde_json::to_value(&report.carts_minutes.rows)?,
            );
        }
        serde_json::to_string_pretty(&value)
    });
    match text {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("lifeboat demo: report not written: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Print a simulated day's report, as JSON or for a terminal.
#[cfg(feature = "harness")]
fn print_report<T: serde::Serialize>(
    command: &str,
    json: bool,
    report: std::io::Result<T>,
    render: impl FnOnce(&T) -> String,
) -> ExitCode {
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("lifeboat {command}: could not start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("lifeboat {command}: report not written: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", render(&report));
    }
    ExitCode::SUCCESS
}
