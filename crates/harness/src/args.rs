//! The flags of the simulations' commands (`demo`, `chaos`, `fleet`) as
//! clap reads them, and the checks of their values. `lifeboat local`'s are
//! in [`crate::on_moto::cli`].

use clap::Args;
use lifeboat_core::settings::Settings;
use lifeboat_operator::OutageMode;
use lifeboat_sim::{LaneLayout, World};

use crate::demo::Script;

#[derive(Args)]
pub struct DemoArgs {
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
#[derive(Args)]
pub struct WorldArgs {
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

#[derive(Args)]
pub struct ChaosArgs {
    /// Print one JSON object with the figures instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Questions customers ask, each a new request record.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1_000..=1_000_000))]
    pub(crate) records: u64,
    /// Buyers, each taking a sailing it found to a confirmed cart: those
    /// confirmed while their operator cannot book hold orders.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub(crate) carts: u64,
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

#[derive(Args)]
pub struct FleetArgs {
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
    /// Buyers, as a share of the searches: each takes a sailing it found
    /// to a confirmed cart, and those confirmed while their operator
    /// cannot book hold orders (0 to 0.5).
    #[arg(long, default_value_t = 0.01, value_parser = parse_share)]
    pub(crate) cart_share: f64,
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
    /// Batches of one lane that run at once (the template's
    /// LaneParallelization, each lane mapping's ParallelizationFactor).
    /// By default the template's 4.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10))]
    pub(crate) lane_parallelization: Option<u64>,
    /// How the lanes are sized: `traffic` (the default) gives a busy
    /// operator's lane the parallelization its searches/s need
    /// (`lane.parallelization` in its settings, docs/capacity.md);
    /// `template` runs every lane at LaneParallelization.
    #[arg(long, value_enum, default_value_t = crate::fleet::LaneSizing::Traffic)]
    pub(crate) lane_sizing: crate::fleet::LaneSizing,
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=0.5).contains(&s) => Ok(s),
        _ => Err(format!("{text:?} is not a share from 0 to 0.5")),
    }
}

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
const MAX_SEARCHES_PER_S: f64 = 5000.0;

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= MAX_SEARCHES_PER_S => Ok(r),
        _ => Err(format!(
            "{text:?}: give searches per second above 0, at most {MAX_SEARCHES_PER_S}"
        )),
    }
}

fn parse_world(text: &str) -> Result<World, String> {
    text.parse::<World>().map_err(|e| e.to_string())
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    if text.trim() == "advised" {
        return Ok(lifeboat_sim::aws::advised_settings());
    }
    Settings::from_json(text).map_err(|e| e.to_string())
}

fn parse_lanes(text: &str) -> Result<LaneLayout, String> {
    match text {
        "per-operator" => Ok(LaneLayout::PerOperator),
        "shared" => Ok(LaneLayout::Shared),
        _ => Err(format!("{text:?}: use per-operator or shared")),
    }
}
