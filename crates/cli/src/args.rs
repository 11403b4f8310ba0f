//! `lifeboat`'s command line: the list of commands and its dispatch, the
//! flags of `status`, `breaker` and `detection` as clap reads them, and the
//! checks of their values. The developers' harness commands (`demo`,
//! `chaos`, `fleet`, `local`: lifeboat-harness) are in the default build
//! only; every other command's flags are beside its code in
//! `lifeboat_cli::ops` and `lifeboat_cli::replay`.

use clap::{Args, Parser, Subcommand};
use lifeboat_cli::ops::detection::{self, Since};
use lifeboat_cli::ops::stack::StackArgs;
use lifeboat_command::CliError;
use lifeboat_core::OperatorId;

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
    Demo(lifeboat_harness::DemoArgs),
    /// The fault campaign: lifeboat's own dependencies failing (every store
    /// operation, PutEvents, mapping updates, consumers killed mid-batch,
    /// switch timeouts, duplicated and reordered events, an egress fault)
    /// under customer traffic, on virtual time: outcomes, faults seen, and
    /// how soon everything matched the truth after the faults stopped.
    #[cfg(feature = "harness")]
    Chaos(lifeboat_harness::ChaosArgs),
    /// A marketplace day of many operators with uneven traffic and
    /// overlapping incidents, on virtual time: what each incident did to its
    /// operator and to everyone else's answers.
    #[cfg(feature = "harness")]
    Fleet(lifeboat_harness::FleetArgs),
    /// Print what the simulations charge for each AWS call and limit (the
    /// AWS world of demo, chaos and fleet), as a markdown table.
    #[cfg(feature = "harness")]
    AwsModel,
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
    /// Held orders (carts confirmed while their operator could not book):
    /// where they stand per operator (held, booking, booked, needs the
    /// customer, refunded, parked) and, per minute, the orders held and
    /// their moves, from the Orders table.
    Orders(lifeboat_cli::ops::orders_cmd::OrdersArgs),
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
    Local(lifeboat_harness::LocalArgs),
}

impl Command {
    /// Run the command; `main` prints its error.
    pub(crate) fn run(self) -> Result<(), CliError> {
        match self {
            #[cfg(feature = "harness")]
            Command::Demo(args) => args.run(),
            #[cfg(feature = "harness")]
            Command::Chaos(args) => args.run(),
            #[cfg(feature = "harness")]
            Command::Fleet(args) => args.run(),
            #[cfg(feature = "harness")]
            Command::AwsModel => {
                print!("{}", lifeboat_harness::aws_model_table());
                Ok(())
            }
            Command::Status(args) => args.run(),
            Command::Breaker { action } => action.run(),
            Command::Detection(args) => args.run(),
            Command::AdviseTimeouts(args) => args.run(),
            Command::Replay(args) => args.run(),
            Command::Carts(args) => args.run(),
            Command::Orders(args) => args.run(),
            Command::Config { action } => action.run(),
            #[cfg(feature = "harness")]
            Command::Local(args) => args.run(),
        }
    }
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
    /// REAL_CONSUMER_FUNCTION, else the stack's RealConsumerAlias].
    #[arg(long)]
    pub(crate) real_consumer_function: Option<String>,
    /// The fallback consumer's name or ARN [default: env
    /// FALLBACK_CONSUMER_FUNCTION, else the stack's FallbackConsumerAlias].
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

fn non_blank(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(s.trim().to_owned())
    }
}
