//! The `lifeboat carts` command line: carts minute by minute against the
//! breaker, read from the Carts table (a `Scan`) and the Breaker table (the
//! breakers and their `change#` items), on clients from the default
//! configuration chain (so `AWS_ENDPOINT_URL` points it at a local moto).
//! The tables are named by flags, the functions' variables or the stack
//! ([`super::stack`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::Args;
use lifeboat_aws::{Clients, DynamoBreakerStore, DynamoCartStore, Env};
use lifeboat_core::ports::BreakerStore;
use lifeboat_core::{BreakerState, OperatorId};

use super::carts::{self, CartsMinutes, MinuteRow, MinutesQuery, StateChange};
use super::config::{BREAKER_TABLE, CARTS_TABLE};
use super::detection::{Since, parse_since};
use super::stack::{self, StackArgs};

/// `--since` when not given.
pub const DEFAULT_SINCE: &str = "3h";

#[derive(Args)]
pub struct CartsArgs {
    /// Per minute and operator: the breaker's state, carts started, steps
    /// taken, carts reaching payment, carts stopped (no step for 30 min)
    /// and price changes shown (the only view so far, and required).
    #[arg(long)]
    minutes: bool,
    /// The first minute: RFC 3339 (2026-12-01T10:00:00Z) or a span back
    /// from now (2h, 30m, 1d).
    #[arg(long, default_value = DEFAULT_SINCE, value_parser = parse_since)]
    since: Since,
    /// The end of the range, as --since [default: now].
    #[arg(long, value_parser = parse_since)]
    until: Option<Since>,
    /// Only this operator.
    #[arg(long)]
    operator: Option<OperatorId>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
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
        .map(StateChange::from)
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

pub async fn run(args: CartsArgs) -> ExitCode {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("lifeboat carts: {e}");
        ExitCode::FAILURE
    };
    if !args.minutes {
        return fail(&"give --minutes (carts minute by minute against the breaker)");
    }
    let now = Utc::now();
    let query = query(args.since, args.until, args.operator, now);
    // A bad range is refused before anything is read.
    if let Err(e) = query.check_range() {
        return fail(&e);
    }
    let env = Env::from_process();
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let needed = !CARTS_TABLE.is_given(args.carts_table.as_deref(), &env)
        || !BREAKER_TABLE.is_given(args.breaker_table.as_deref(), &env);
    let stack = match stack::find(args.stack.stack.as_deref(), needed, Path::new("."), &sdk).await {
        Ok(stack) => stack,
        Err(e) => return fail(&e),
    };
    let carts_table = match CARTS_TABLE.resolve_in(args.carts_table.as_deref(), &env, &stack) {
        Ok(table) => table,
        Err(e) => return fail(&e),
    };
    let breaker_table = match BREAKER_TABLE.resolve_in(args.breaker_table.as_deref(), &env, &stack)
    {
        Ok(table) => table,
        Err(e) => return fail(&e),
    };
    let clients = Clients::new(&sdk);
    let read = match read(
        &DynamoCartStore::new(clients.dynamodb().clone(), carts_table),
        &DynamoBreakerStore::new(clients.dynamodb().clone(), breaker_table),
        query.operator.as_ref(),
    )
    .await
    {
        Ok(read) => read,
        Err(e) => return fail(&e),
    };
    let rows = match carts::minutes(&read.carts, &read.changes, &read.current, &query) {
        Ok(rows) => rows,
        Err(e) => return fail(&e),
    };
    if let Some(path) = &args.plot
        && let Err(e) =
            crate::plot::carts_rows(path, "carts minute by minute against the breaker", &rows)
    {
        return fail(&e);
    }
    if args.json {
        match to_json(rows) {
            Ok(text) => println!("{text}"),
            Err(e) => return fail(&format!("report not written: {e}")),
        }
    } else {
        print!("{}", carts::render(&rows, query.judged_at));
    }
    for note in &read.unreadable {
        eprintln!("lifeboat carts: skipped {note}");
    }
    ExitCode::SUCCESS
}
