//! The `lifeboat orders` command line: held orders, where they stand and
//! how they moved per minute, read from the Orders table (a `Scan`) on
//! clients from the default configuration chain (so `AWS_ENDPOINT_URL`
//! points it at a local moto). The table is named by a flag, the
//! functions' variable or the stack ([`super::stack`]).

use std::path::Path;

use chrono::Utc;
use clap::Args;
use lifeboat_aws::{Clients, DynamoOrderStore, Env};
use lifeboat_command::CliError;
use lifeboat_command::orders::{self, OrdersReport};
use lifeboat_command::runtime::block_on;

use super::carts_cmd::MinutesArgs;
use super::config::ORDERS_TABLE;
use super::stack::{self, StackArgs};

/// `lifeboat orders`: the range (orders still open are shown whenever they
/// were held), the Orders table and the stack.
#[derive(Args)]
pub struct OrdersArgs {
    #[command(flatten)]
    range: MinutesArgs,
    /// The Orders table [default: env ORDERS_TABLE, else the stack's
    /// OrdersTable].
    #[arg(long)]
    orders_table: Option<String>,
    #[command(flatten)]
    stack: StackArgs,
}

impl OrdersArgs {
    /// `lifeboat orders`.
    pub fn run(self) -> Result<(), CliError> {
        block_on("orders", orders(self))
    }
}

/// The report as `--json` prints it.
pub fn to_json(report: &OrdersReport) -> serde_json::Result<String> {
    serde_json::to_string_pretty(report)
}

async fn orders(args: OrdersArgs) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::new("orders", e);
    let now = Utc::now();
    let query = args.range.query(now);
    // A bad range is refused before anything is read.
    query.check_range().map_err(|e| fail(&e))?;
    let env = Env::from_process();
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let needed = !ORDERS_TABLE.is_given(args.orders_table.as_deref(), &env);
    let stack = stack::find(args.stack.stack.as_deref(), needed, Path::new("."), &sdk)
        .await
        .map_err(|e| fail(&e))?;
    let table = ORDERS_TABLE
        .resolve_in(args.orders_table.as_deref(), &env, &stack)
        .map_err(|e| fail(&e))?;
    let store = DynamoOrderStore::new(Clients::new(&sdk).dynamodb().clone(), table);
    let (held, unreadable) = store
        .all()
        .await
        .map_err(|e| fail(&format!("orders table: {e}")))?;
    let report = orders::report(&held, &query).map_err(|e| fail(&e))?;
    if args.range.json {
        let text = to_json(&report).map_err(|e| fail(&format!("report not written: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", orders::render(&report, now));
    }
    for note in &unreadable {
        eprintln!("lifeboat orders: skipped {note}");
    }
    Ok(())
}
