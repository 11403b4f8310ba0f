//! The operators' commands on a deployed (or local) suite: `status`,
//! `breaker force-open|force-closed|release` and `detection`, each reading
//! its settings from its flags, the functions' environment variables and
//! the stack (`--stack`, else samconfig.toml's), calling the AWS APIs and
//! printing a table or JSON.

use std::path::Path;

use aws_config::SdkConfig;
use lifeboat_aws::{Clients, Env};
use lifeboat_cli::ops::aws::{StatusConfig, StatusFlags};
use lifeboat_cli::ops::config::{
    ALARM_OPERATORS, BREAKER_TABLE, CIRCUIT_SWITCH_FUNCTION, ERRORS_ALARM,
};
use lifeboat_cli::ops::detection::{self, DetectionQuery};
use lifeboat_cli::ops::stack::{self, Stack, StackArgs};
use lifeboat_cli::ops::{BreakerCommand, breaker, status};
use lifeboat_command::CliError;
use lifeboat_command::runtime::block_on;
use lifeboat_core::breaker::Command as SwitchCommand;

use crate::args::{BreakerAction, BreakerArgs, DetectionArgs, StatusArgs};

impl StatusArgs {
    /// `lifeboat status`.
    pub(crate) fn run(self) -> Result<(), CliError> {
        block_on("status", status(self))
    }
}

impl BreakerAction {
    /// `lifeboat breaker force-open|force-closed|release`.
    pub(crate) fn run(self) -> Result<(), CliError> {
        let (command, args) = match self {
            BreakerAction::ForceOpen(args) => (SwitchCommand::ForceOpen, args),
            BreakerAction::ForceClosed(args) => (SwitchCommand::ForceClosed, args),
            BreakerAction::Release(args) => (SwitchCommand::Release, args),
        };
        block_on("breaker", breaker_command(command, args))
    }
}

impl DetectionArgs {
    /// `lifeboat detection`.
    pub(crate) fn run(self) -> Result<(), CliError> {
        block_on("detection", detection_command(self))
    }
}

/// The stack `command` reads what `needed` says flags and variables leave
/// unnamed; a stack `--stack` names that cannot be read ends the command.
async fn stack_of(
    command: &'static str,
    args: &StackArgs,
    needed: bool,
    sdk: &SdkConfig,
) -> Result<Stack, CliError> {
    stack::find(args.stack.as_deref(), needed, Path::new("."), sdk)
        .await
        .map_err(|e| CliError::new(command, e))
}

async fn status(args: StatusArgs) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::new("status", e);
    let flags = StatusFlags {
        breaker_table: args.breaker_table,
        sale_status_table: args.sale_status_table,
        requests_table_prefix: args.requests_table_prefix,
        requests_mapping_uuid: args.requests_mapping_uuid,
        real_consumer_function: args.real_consumer_function,
        fallback_consumer_function: args.fallback_consumer_function,
    };
    let env = Env::from_process();
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let stack = stack_of("status", &args.stack, flags.leave_unnamed(&env), &sdk).await?;
    let config = StatusConfig::resolve(&flags, &env, &stack).map_err(|e| fail(&e))?;
    let adapters = config.adapters(&Clients::new(&sdk)).await;
    let report = status::gather(
        &adapters.sources(),
        args.operator.as_ref(),
        chrono::Utc::now(),
    )
    .await
    .map_err(|e| fail(&e))?;
    if args.json {
        let text = report
            .to_json()
            .map_err(|e| fail(&format!("report not written: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", status::render_table(&report));
    }
    if report.has_failures() {
        return Err(fail(&"some reads failed; see the report"));
    }
    Ok(())
}

async fn breaker_command(command: SwitchCommand, args: BreakerArgs) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::new("breaker", e);
    let env = Env::from_process();
    let command =
        BreakerCommand::new(command, args.operator, &args.reason).map_err(|e| fail(&e))?;
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let command = match breaker::caller(&sdk).await {
        Ok(caller) => command.sent_by(Some(caller)),
        Err(why) => {
            eprintln!(
                "lifeboat breaker: warning: the command goes without its caller (who you are is unknown: {why})"
            );
            command
        }
    };
    let needed = !CIRCUIT_SWITCH_FUNCTION.is_given(args.function.as_deref(), &env);
    let stack = stack_of("breaker", &args.stack, needed, &sdk).await?;
    let function = CIRCUIT_SWITCH_FUNCTION
        .resolve_in(args.function.as_deref(), &env, &stack)
        .map_err(|e| fail(&e))?;
    let lambda = match args.invoke_endpoint.as_deref().map(str::trim) {
        Some(endpoint) if !endpoint.is_empty() => aws_sdk_lambda::Client::from_conf(
            aws_sdk_lambda::config::Builder::from(&sdk)
                .endpoint_url(endpoint)
                .build(),
        ),
        _ => aws_sdk_lambda::Client::new(&sdk),
    };
    let invoked = breaker::invoke(&lambda, &function, &command)
        .await
        .map_err(|e| fail(&e))?;
    if args.json {
        let text = serde_json::to_string_pretty(&invoked.answer)
            .map_err(|e| fail(&format!("report not written: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", invoked.report.render());
    }
    Ok(())
}

async fn detection_command(args: DetectionArgs) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::new("detection", e);
    let env = Env::from_process();
    let config = lifeboat_aws::clients::load_sdk_config().await;
    // The alarm-to-operator map is optional (`--operator` can say it), so
    // it alone does not make the stack needed.
    let needed = !BREAKER_TABLE.is_given(args.breaker_table.as_deref(), &env)
        || !ERRORS_ALARM.is_given(args.alarm.as_deref(), &env);
    let stack = stack_of("detection", &args.stack, needed, &config).await?;
    let (table, alarm) = BREAKER_TABLE
        .resolve_in(args.breaker_table.as_deref(), &env, &stack)
        .and_then(|table| {
            ERRORS_ALARM
                .resolve_in(args.alarm.as_deref(), &env, &stack)
                .map(|alarm| (table, alarm))
        })
        .map_err(|e| fail(&e))?;
    let map = ALARM_OPERATORS
        .resolve_in(args.alarm_operators.as_deref(), &env, &stack)
        .ok();
    let alarm_operator = detection::alarm_operator(&alarm, map.as_deref(), args.operator.as_ref())
        .map_err(|e| fail(&e))?;
    let now = chrono::Utc::now();
    let query = DetectionQuery {
        alarm,
        alarm_operator,
        only: args.operator,
        since: args.since.resolve(now),
        window: args.window,
        now,
    };
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let breakers =
        lifeboat_aws::DynamoBreakerStore::new(Clients::new(&config).dynamodb().clone(), table);
    // Alarms up to one pairing window before --since still pair with an
    // opening after it.
    let from = query.since - chrono::TimeDelta::from_std(query.window).unwrap_or_default();
    let history = detection::alarm_history(&cloudwatch, &query.alarm, from, now)
        .await
        .map_err(|e| fail(&e))?;
    let changes = breakers
        .changes(query.only.as_ref())
        .await
        .map_err(|e| fail(&format!("breaker table: {e}")))?;
    let report = detection::detect(&query, &history.transitions, &changes, history.warnings);
    if args.json {
        let text = report
            .to_json()
            .map_err(|e| fail(&format!("report not written: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", detection::render_table(&report));
    }
    if !report.warnings.is_empty() {
        eprintln!(
            "lifeboat detection: {} alarm history item(s) skipped; see the warnings",
            report.warnings.len()
        );
    }
    Ok(())
}
