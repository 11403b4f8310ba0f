//! The `lifeboat carts` command line: carts minute by minute against the
//! breaker, read from the Carts table (a `Scan`) and the Breaker table (the
//! breakers and their `change#` items), on clients from the default
//! configuration chain (so `AWS_ENDPOINT_URL` points it at a local moto).
//! The tables are named by flags, the functions' variables or the stack
//! ([`super::stack`]).

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use clap::Args;
use lifeboat_aws::breaker::BreakerChange;
use lifeboat_aws::{Clients, DynamoBreakerStore, DynamoCartStore, Env};
use lifeboat_command::carts::{self, CartsMinutes, MinuteRow, MinutesQuery, StateChange};
use lifeboat_command::runtime::block_on;
use lifeboat_command::{CliError, plot};
use lifeboat_core::ports::BreakerStore;
use lifeboat_core::{BreakerState, OperatorId};

use super::config::{BREAKER_TABLE, CARTS_TABLE};
use super::detection::{Since, parse_since};
use super::stack::{self, StackArgs};

/// `--since` when not given.
pub const DEFAULT_SINCE: &str = "3h";

/// The minutes a command reads (`carts`, `orders`), and how it prints
/// them.
#[derive(Args)]
pub struct MinutesArgs {
    /// The first minute: RFC 3339 (2026-12-01T10:00:00Z) or a span back
    /// from now (2h, 30m, 1d).
    #[arg(long, default_value = DEFAULT_SINCE, value_parser = parse_since)]
    pub since: Since,
    /// The end of the range, as --since [default: now].
    #[arg(long, value_parser = parse_since)]
    pub until: Option<Since>,
    /// Only this operator.
    #[arg(long)]
    pub operator: Option<OperatorId>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl MinutesArgs {
    /// The range and the end of the data for a run at `now` ([`query`]).
    pub fn query(&self, now: DateTime<Utc>) -> MinutesQuery {
        query(self.since, self.until, self.operator.clone(), now)
    }
}

#[derive(Args)]
pub struct CartsArgs {
    /// Per minute and operator: the breaker's state, carts started, steps
    /// taken, carts reaching payment, carts stopped (no step for 30 min)
    /// and price changes shown (the only view so far, and required).
    #[arg(long)]
    minutes: bool,
    #[command(flatten)]
    range: MinutesArgs,
    /// Also draw the minutes (steps, carts started, payments; minutes the
    /// breaker was not closed shaded) as SVG to this file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// The Carts table [default: env CARTS_TABLE, else the stack's
    /// CartsTable].
    #[arg(long)]
    carts_table: Option<String>,
    /// The Breaker table [default: env BREAKER_TABLE, else the stack's
    /// BreakerTable].
    #[arg(long)]
    breaker_table: Option<String>,
    #[command(flatten)]
    stack: StackArgs,
}

/// What the tables hold, read once.
pub struct Read {
    pub carts: Vec<lifeboat_core::cart::Cart>,
    pub changes: Vec<StateChange>,
    pub current: BTreeMap<OperatorId, BreakerState>,
    /// Items that are not readable carts, left out.
    pub unreadable: Vec<String>,
}

/// Read every cart, and the breakers and state changes of `operator` (or
/// of every operator).
pub async fn read(
    carts: &DynamoCartStore,
    breakers: &DynamoBreakerStore,
    operator: Option<&OperatorId>,
) -> Result<Read, String> {
    let (carts, unreadable) = carts.all().await.map_err(|e| format!("carts table: {e}"))?;
    let changes = breakers
        .changes(operator)
        .await
        .map_err(|e| format!("breaker table: {e}"))?
        .iter()
        .map(state_change)
        .collect();
    let records = match operator {
        Some(operator) => breakers
            .load(operator)
            .await
            .map(|r| r.into_iter().collect()),
        None => breakers.list().await,
    }
    .map_err(|e| format!("breaker table: {e}"))?;
    Ok(Read {
        carts,
        changes,
        current: records.into_iter().map(|r| (r.operator, r.state)).collect(),
        unreadable,
    })
}

/// The range and the end of the data for a run at `now`: a future
/// `--until` ends at now (nothing later is known).
pub fn query(
    since: Since,
    until: Option<Since>,
    operator: Option<OperatorId>,
    now: DateTime<Utc>,
) -> MinutesQuery {
    MinutesQuery {
        since: since.resolve(now),
        until: until.map_or(now, |u| u.resolve(now)).min(now),
        judged_at: now,
        operator,
    }
}

/// Rows as `--json` prints them.
pub fn to_json(rows: Vec<MinuteRow>) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&CartsMinutes { minutes: rows })
}

impl CartsArgs {
    /// `lifeboat carts`.
    pub fn run(self) -> Result<(), CliError> {
        block_on("carts", minutes(self))
    }
}

/// A breaker change the Breaker table recorded, as the rows count it.
fn state_change(c: &BreakerChange) -> StateChange {
    StateChange {
        operator: c.operator.clone(),
        at: c.at,
        from: c.from,
        to: c.to,
    }
}

async fn minutes(args: CartsArgs) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::new("carts", e);
    if !args.minutes {
        return Err(fail(
            &"give --minutes (carts minute by minute against the breaker)",
        ));
    }
    let now = Utc::now();
    let query = args.range.query(now);
    // A bad range is refused before anything is read.
    query.check_range().map_err(|e| fail(&e))?;
    let env = Env::from_process();
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let needed = !CARTS_TABLE.is_given(args.carts_table.as_deref(), &env)
        || !BREAKER_TABLE.is_given(args.breaker_table.as_deref(), &env);
    let stack = stack::find(args.stack.stack.as_deref(), needed, Path::new("."), &sdk)
        .await
        .map_err(|e| fail(&e))?;
    let carts_table = CARTS_TABLE
        .resolve_in(args.carts_table.as_deref(), &env, &stack)
        .map_err(|e| fail(&e))?;
    let breaker_table = BREAKER_TABLE
        .resolve_in(args.breaker_table.as_deref(), &env, &stack)
        .map_err(|e| fail(&e))?;
    let clients = Clients::new(&sdk);
    let read = read(
        &DynamoCartStore::new(clients.dynamodb().clone(), carts_table),
        &DynamoBreakerStore::new(clients.dynamodb().clone(), breaker_table),
        query.operator.as_ref(),
    )
    .await
    .map_err(|e| fail(&e))?;
    let rows =
        carts::minutes(&read.carts, &read.changes, &read.current, &query).map_err(|e| fail(&e))?;
    if let Some(path) = &args.plot {
        plot::carts_rows(path, "carts minute by minute against the breaker", &rows)
            .map_err(|e| fail(&e))?;
    }
    if args.range.json {
        let text = to_json(rows).map_err(|e| fail(&format!("report not written: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", carts::render(&rows, query.judged_at));
    }
    for note in &read.unreadable {
        eprintln!("lifeboat carts: skipped {note}");
    }
    Ok(())
}
