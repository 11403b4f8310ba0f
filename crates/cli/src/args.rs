//! `lifeboat`'s command line: the commands and their flags as clap reads
//! them, and the checks of flag values. The developers' harness commands
//! (`demo`, `chaos`, `fleet`, `local`) are in the default build only.

use clap::{Args, Parser, Subcommand};
#[cfg(feature = "harness")]
use lifeboat_cli::demo::Script;
use lifeboat_cli::ops::detection::{self, Since};
use lifeboat_cli::ops::stack::StackArgs;
use lifeboat_core::OperatorId;
#[cfg(feature = "harness")]
use lifeboat_core::settings::Settings;
#[cfg(feature = "harness")]
use lifeboat_operator::OutageMode;
#[cfg(feature = "harness")]
use lifeboat_sim::{LaneLayout, World};

#[derive(Parser)]
#[command(
    name = "lifeboat",
    version,
    about = "Keep selling when a ferry operator's API goes down"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the whole suite through a scripted day with an operator outage,
    /// on virtual time, without network or AWS.
    #[cfg(feature = "harness")]
    Demo(DemoArgs),
    /// The fault campaign: lifeboat's own dependencies failing (every store
    /// operation, PutEvents, mapping updates, consumers killed mid-batch,
    /// switch timeouts, duplicated and reordered events, an egress fault)
    /// under customer traffic, on virtual time: outcomes, faults seen, and
    /// how soon everything matched the truth after the faults stopped.
    #[cfg(feature = "harness")]
    Chaos(ChaosArgs),
    /// A marketplace day of many operators with uneven traffic and
    /// overlapping incidents, on virtual time: what each incident did to its
    /// operator and to everyone else's answers.
    #[cfg(feature = "harness")]
    Fleet(FleetArgs),
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
    /// The operator config table's item, every operator's endpoints and
    /// settings for stacks too large for the environment: `put` checks
    /// them as the functions parse them and writes them; `show` prints them.
    Config {
        #[command(subcommand)]
        action: lifeboat_cli::ops::operator_config::ConfigAction,
    },
    /// Run the whole wired suite on this machine (moto_server, the six
    /// functions under cargo lambda watch, the simulated operator, customers)
    /// and print what the breaker does; `--outage 60s` scripts an outage.
    #[cfg(feature = "harness")]
    Local(lifeboat_cli::local::cli::LocalArgs),
}

#[derive(Args)]
pub(crate) struct DetectionArgs {
    /// The errors alarm (the template's ErrorsAlarmName) [default: env
    /// ERRORS_ALARM_NAME, else the stack's RealConsumerErrorsAlarm].
    #[arg(long, value_parser = non_blank)]
    pub(crate) alarm: Option<String>,
    /// Incidents that started since: RFC 3339 (2026-12-01T10:00:00Z) or a
    /// span back from now (2h, 30m, 1d).
    #[arg(long, default_value = detection::DEFAULT_SINCE, value_parser = detection::parse_since)]
    pub(crate) since: Since,
    /// Only this operator's incidents. Also names the operator the alarm
    /// watches when ALARM_OPERATORS does not.
    #[arg(long)]
    pub(crate) operator: Option<OperatorId>,
    /// An ALARM and a breaker opening at most this far apart are one
    /// incident (2m, 10m, 1h).
    #[arg(long, default_value = detection::DEFAULT_WINDOW, value_parser = detection::parse_span)]
    pub(crate) window: std::time::Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// The Breaker table [default: env BREAKER_TABLE, else the stack's
    /// BreakerTable].
    #[arg(long)]
    pub(crate) breaker_table: Option<String>,
    /// Which operator each alarm watches, alarm=operator,… [default: env
    /// ALARM_OPERATORS, else the stack's AlarmOperators parameter].
    #[arg(long)]
    pub(crate) alarm_operators: Option<String>,
    #[command(flatten)]
    pub(crate) stack: StackArgs,
}

#[derive(Args)]
pub(crate) struct StatusArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Only this operator.
    #[arg(long)]
    pub(crate) operator: Option<OperatorId>,
    /// The Breaker table [default: env BREAKER_TABLE, else the stack's
    /// BreakerTable].
    #[arg(long)]
    pub(crate) breaker_table: Option<String>,
    /// The SaleStatus table [default: env SALE_STATUS_TABLE, else the
    /// stack's SaleStatusTable].
    #[arg(long)]
    pub(crate) sale_status_table: Option<String>,
    /// With a lane per operator (the template's layout), the Requests
    /// tables' prefix; each operator's mapping is found by its table
    /// [default: env REQUESTS_TABLE_PREFIX, else the stack's
    /// RequestsTablePrefix output].
    #[arg(long)]
    pub(crate) requests_table_prefix: Option<String>,
    /// With one shared stream, its event source mapping [default: env
    /// REQUESTS_MAPPING_UUID].
    #[arg(long)]
    pub(crate) requests_mapping_uuid: Option<String>,
    /// The real consumer's name or ARN [default: env
    /// REAL_CONSUMER_FUNCTION, else the stack's RealConsumerFunction].
    #[arg(long)]
    pub(crate) real_consumer_function: Option<String>,
    /// The fallback consumer's name or ARN [default: env
    /// FALLBACK_CONSUMER_FUNCTION, else the stack's FallbackConsumerFunction].
    #[arg(long)]
    pub(crate) fallback_consumer_function: Option<String>,
    #[command(flatten)]
    pub(crate) stack: StackArgs,
}

#[derive(Subcommand)]
pub(crate) enum BreakerAction {
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
pub(crate) struct BreakerArgs {
    /// The operator whose breaker to move.
    #[arg(long)]
    pub(crate) operator: OperatorId,
    /// Why, recorded in the breaker, its event and the switch's log.
    #[arg(long, value_parser = non_blank)]
    pub(crate) reason: String,
    /// The circuit switch function's name or ARN [default: env
    /// CIRCUIT_SWITCH_FUNCTION, else the stack's CircuitSwitchFunction].
    #[arg(long)]
    pub(crate) function: Option<String>,
    #[command(flatten)]
    pub(crate) stack: StackArgs,
    /// Send the Invoke here instead of Lambda's endpoint: `lifeboat local`
    /// serves the functions apart from moto (`lifeboat local env` sets it).
    #[arg(long, env = "LIFEBOAT_INVOKE_ENDPOINT_URL")]
    pub(crate) invoke_endpoint: Option<String>,
    /// Print the switch's report as JSON, as it answered.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(feature = "harness")]
#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Print one JSON object with the figures instead of the timeline.
    #[arg(long)]
    pub(crate) json: bool,
    /// How the operator fails: hang, refuse, server_error, slow, garbage, rate_limited or brownout.
    #[arg(long, default_value = "hang")]
    pub(crate) mode: OutageMode,
    /// Seconds of outage.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(30..=3600))]
    pub(crate) outage_s: u64,
    /// Seed of every random choice.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// The rise at payment, in percent of the price shown, that the
    /// demo's marketplace absorbs (CART_SETTINGS `absorb_rise_percent`;
    /// 0 absorbs nothing, as lifeboat's default).
    #[arg(long, default_value_t = Script::default().absorb_rise_percent,
          value_parser = clap::value_parser!(u32).range(0..=20))]
    pub(crate) absorb_rise_percent: u32,
    /// Also print the carts minute by minute against the breaker (with
    /// --json: under `carts_minutes`).
    #[arg(long)]
    pub(crate) carts_minutes: bool,
    /// Draw the day's carts minute by minute against the breaker as SVG
    /// to this file.
    #[arg(long)]
    pub(crate) plot: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

/// The world a simulation runs in and the settings it deploys.
#[cfg(feature = "harness")]
#[derive(Args)]
pub(crate) struct WorldArgs {
    /// The world around the functions: `aws` charges AWS's latencies and
    /// limits and runs the template's one-minute tick (docs/aws-model.md);
    /// `ideal` takes no time and limits nothing, for comparison.
    #[arg(long = "aws", default_value = "aws", value_parser = parse_world)]
    pub(crate) world: World,
    /// The gateway's OPERATOR_SETTINGS (the template's OperatorSettings
    /// JSON). Empty, the default: the template's default, which probes an
    /// open breaker with the last search its operator answered and confirms
    /// a late call with a ping (the built-in hang check). `advised`: every
    /// operator probed with a fixed search and hang-checked with a ping.
    #[arg(long, default_value = "", value_parser = parse_settings)]
    pub(crate) operator_settings: Settings,
}

#[cfg(feature = "harness")]
#[derive(Args)]
pub(crate) struct ChaosArgs {
    /// Print one JSON object with the figures instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Questions customers ask, each a new request record.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1_000..=1_000_000))]
    pub(crate) records: u64,
    /// How many operators sell through the gateway (at least 5: the
    /// campaign's outages need them).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(5..=50))]
    pub(crate) operators: u64,
    /// The off-sale listener's SALE_OFF_SALE_HOLD_S (0 to 300).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub(crate) off_sale_hold_s: u64,
    /// Seed of every random choice and every fault.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

#[cfg(feature = "harness")]
#[derive(Args)]
pub(crate) struct FleetArgs {
    /// Print one JSON object with the figures instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// How many operators sell through the gateway.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(8..=500))]
    pub(crate) operators: u64,
    /// Hours of virtual time.
    #[arg(long, default_value_t = 2.0, value_parser = parse_hours)]
    pub(crate) hours: f64,
    /// Searches per second over the whole marketplace.
    #[arg(long, default_value_t = 10.0, value_parser = parse_rate)]
    pub(crate) searches_per_s: f64,
    /// How requests flow to the consumers: a lane (stream and mapping)
    /// per operator, or one shared by all.
    #[arg(long, default_value = "per-operator", value_parser = parse_lanes)]
    pub(crate) lanes: LaneLayout,
    /// Seed of every random choice.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// The real consumer's reserved concurrency in the AWS world (the
    /// template's RealConsumerConcurrency). By default the template's 100,
    /// raised to what the stack's capacity check asks of the lanes
    /// (operators x LaneParallelization).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) real_consumer_concurrency: Option<u64>,
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

fn non_blank(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(s.trim().to_owned())
    }
}

#[cfg(feature = "harness")]
fn parse_hours(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(h) if (0.1..=24.0).contains(&h) => Ok(h),
        _ => Err(format!("{text:?}: give hours from 0.1 to 24")),
    }
}

/// The most searches per second `lifeboat fleet` plays: two and a half
/// times the marketplace docs/capacity.md prices. The fleet keeps counts,
/// not lines, so its memory follows the operators and the minutes of
/// requests kept, not the load; its wall time follows the load.
#[cfg(feature = "harness")]
const MAX_SEARCHES_PER_S: f64 = 5000.0;

#[cfg(feature = "harness")]
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= MAX_SEARCHES_PER_S => Ok(r),
        _ => Err(format!(
            "{text:?}: give searches per second above 0, at most {MAX_SEARCHES_PER_S}"
        )),
    }
}

#[cfg(feature = "harness")]
fn parse_world(text: &str) -> Result<World, String> {
    text.parse::<World>().map_err(|e| e.to_string())
}

#[cfg(feature = "harness")]
fn parse_settings(text: &str) -> Result<Settings, String> {
    if text.trim() == "advised" {
        return Ok(lifeboat_sim::aws::advised_settings());
    }
    Settings::from_json(text).map_err(|e| e.to_string())
}

#[cfg(feature = "harness")]
fn parse_lanes(text: &str) -> Result<LaneLayout, String> {
    match text {
        "per-operator" => Ok(LaneLayout::PerOperator),
        "shared" => Ok(LaneLayout::Shared),
        _ => Err(format!("{text:?}: use per-operator or shared")),
    }
}
