//! The operators' commands on a deployed (or local) suite: `status`,
//! `breaker force-open|force-closed|release` and `detection`, each reading
//! its settings from its flags, the functions' environment variables and
//! the stack (`--stack`, else samconfig.toml's), calling the AWS APIs and
//! printing a table or JSON.

use std::path::Path;
use std::process::ExitCode;

use aws_config::SdkConfig;
use lifeboat_aws::{Clients, Env};
use lifeboat_cli::ops::aws::{StatusConfig, StatusFlags};
use lifeboat_cli::ops::config::{
    ALARM_OPERATORS, BREAKER_TABLE, CIRCUIT_SWITCH_FUNCTION, ERRORS_ALARM,
};
use lifeboat_cli::ops::detection::{self, DetectionQuery};
use lifeboat_cli::ops::stack::{self, Stack, StackArgs};
use lifeboat_cli::ops::{BreakerCommand, breaker, status};
use lifeboat_core::breaker::Command as SwitchCommand;

use crate::args::{BreakerArgs, DetectionArgs, StatusArgs};

/// The stack `command` reads what `needed` says flags and variables leave
/// unnamed; a stack `--stack` names that cannot be read ends the command.
async fn stack_of(
    command: &str,
    args: &StackArgs,
    needed: bool,
    sdk: &SdkConfig,
) -> Result<Stack, ExitCode> {
    stack::find(args.stack.as_deref(), needed, Path::new("."), sdk)
        .await
        .map_err(|e| {
            eprintln!("lifeboat {command}: {e}");
            ExitCode::FAILURE
        })
}

pub(crate) async fn status(args: StatusArgs) -> ExitCode {
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
    let stack = match stack_of("status", &args.stack, flags.leave_unnamed(&env), &sdk).await {
        Ok(stack) => stack,
        Err(code) => return code,
    };
    let config = match StatusConfig::resolve(&flags, &env, &stack) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("lifeboat status: {e}");
            return ExitCode::FAILURE;
        }
    };
    let adapters = config.adapters(&Clients::new(&sdk)).await;
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

pub(crate) async fn breaker_command(command: SwitchCommand, args: BreakerArgs) -> ExitCode {
    let env = Env::from_process();
    let command = match BreakerCommand::new(command, args.operator, &args.reason) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lifeboat breaker: {e}");
            return ExitCode::FAILURE;
        }
    };
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
    let stack = match stack_of("breaker", &args.stack, needed, &sdk).await {
        Ok(stack) => stack,
        Err(code) => return code,
    };
    let function = match CIRCUIT_SWITCH_FUNCTION.resolve_in(args.function.as_deref(), &env, &stack)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("lifeboat breaker: {e}");
            return ExitCode::FAILURE;
        }
    };
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

pub(crate) async fn detection_command(args: DetectionArgs) -> ExitCode {
    let env = Env::from_process();
    let config = lifeboat_aws::clients::load_sdk_config().await;
    // The alarm-to-operator map is optional (`--operator` can say it), so
    // it alone does not make the stack needed.
    let needed = !BREAKER_TABLE.is_given(args.breaker_table.as_deref(), &env)
        || !ERRORS_ALARM.is_given(args.alarm.as_deref(), &env);
    let stack = match stack_of("detection", &args.stack, needed, &config).await {
        Ok(stack) => stack,
        Err(code) => return code,
    };
    let resolved = BREAKER_TABLE
        .resolve_in(args.breaker_table.as_deref(), &env, &stack)
        .and_then(|table| {
            ERRORS_ALARM
                .resolve_in(args.alarm.as_deref(), &env, &stack)
                .map(|alarm| (table, alarm))
        });
    let (table, alarm) = match resolved {
        Ok(names) => names,
        Err(e) => {
            eprintln!("lifeboat detection: {e}");
            return ExitCode::FAILURE;
        }
    };
    let map = ALARM_OPERATORS
        .resolve_in(args.alarm_operators.as_deref(), &env, &stack)
        .ok();
    let alarm_operator =
        match detection::alarm_operator(&alarm, map.as_deref(), args.operator.as_ref()) {
            Ok(operator) => operator,
            Err(e) => {
                eprintln!("lifeboat detection: {e}");
                return ExitCode::FAILURE;
            }
        };
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
