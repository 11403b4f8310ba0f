//! The functions' environment, its env file for an attached watch, and the
//! warm-up that starts every function under `cargo lambda watch`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lifeboat_core::OperatorId;
use serde_json::{Value, json};

use crate::moto::REGION;
use crate::pump::TickerConfig;
use crate::template::{
    BOOKING_WORKER, CART, CIRCUIT_SWITCH, FALLBACK_CONSUMER, OFFSALE_LISTENER, REAL_CONSUMER,
    SEARCH,
};
use crate::watch::{Watch, WatchError};

use super::{AttachWatch, SuiteError, SuiteOptions, SuiteResources};

/// The environment of every function: the stack's (see
/// [`SuiteResources::environment`]), for the functions the suite runs, with
/// what makes it local: AWS at moto (`moto_endpoint`) with moto's region
/// and credentials, and the functions' log level.
pub fn function_env(
    moto_endpoint: &str,
    resources: &SuiteResources,
    options: &SuiteOptions,
) -> Result<Vec<(String, String)>, SuiteError> {
    let running: Vec<&str> = resources
        .binaries
        .values()
        .map(String::as_str)
        .filter(|binary| super::from_stack::runs(options, binary))
        .collect();
    let mut env = resources.environment(&running)?;
    for (key, value) in [
        ("AWS_ENDPOINT_URL", moto_endpoint.to_owned()),
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_DEFAULT_REGION", REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        (
            lifeboat_core::metrics::AWS_LAMBDA_LOG_LEVEL,
            options.log_level.clone(),
        ),
    ] {
        env.insert(key.to_owned(), value);
    }
    Ok(env.into_iter().collect())
}

/// `OPERATOR_ENDPOINTS`'s text for `endpoints`.
pub fn endpoints_text(endpoints: &[(OperatorId, String)]) -> String {
    endpoints
        .iter()
        .map(|(o, url)| format!("{o}={url}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// With [`SuiteOptions::operator_config_in_table`], write the operators'
/// endpoints and settings as the operator config table's item (over any
/// item an attached moto kept from an earlier run), before a function
/// starts.
pub async fn put_operator_config(
    sdk: &aws_config::SdkConfig,
    resources: &SuiteResources,
    options: &SuiteOptions,
    endpoints: &[(OperatorId, String)],
) -> Result<(), SuiteError> {
    use lifeboat_core::operator_config::OperatorConfigItem;
    use lifeboat_core::ports::OperatorConfigStore;
    if !options.operator_config_in_table {
        return Ok(());
    }
    let store = lifeboat_aws::DynamoOperatorConfigStore::new(
        aws_sdk_dynamodb::Client::new(sdk),
        &resources.names.operator_config_table,
    );
    let failed = |e: lifeboat_core::ports::StoreError| SuiteError::OperatorConfig(e.to_string());
    let current = store.load().await.map_err(failed)?;
    let item = OperatorConfigItem {
        endpoints: Some(endpoints_text(endpoints)),
        settings: Some(options.operator_settings.clone()),
        revision: current.as_ref().map_or(1, |c| c.revision + 1),
        updated_at: Some(chrono::Utc::now()),
    };
    store
        .save(&item, current.map(|c| c.revision))
        .await
        .map_err(failed)
}

/// The functions' environment as a file for cargo-lambda's `--env-file`:
/// `KEY='value'` lines. cargo-lambda's reader keeps what is between single
/// quotes as it is (JSON settings, `$`) except `\n` and `\'`, so a value
/// with a backslash, a quote or a line break is refused rather than
/// changed on the way.
pub fn env_file_text(env: &[(String, String)]) -> Result<String, SuiteError> {
    let mut text = String::from(
        "# The environment of lifeboat's functions under `lifeboat local`, for\n\
         # cargo lambda watch --env-file. Written by lifeboat local; do not edit.\n",
    );
    for (key, value) in env {
        if value.contains(['\'', '\n', '\\']) {
            return Err(SuiteError::EnvFile {
                key: key.clone(),
                why: "a quote, a backslash or a line break would not reach the functions as it is"
                    .to_owned(),
            });
        }
        text.push_str(&format!("{key}='{value}'\n"));
    }
    Ok(text)
}

/// Write the functions' environment for the running watch and attach to it.
/// A watch already running with another environment (or none) would run the
/// functions against the wrong resources: that is refused.
pub(super) async fn attach_watch(
    running: &AttachWatch,
    env: &[(String, String)],
    invoke_timeout: Duration,
) -> Result<Watch, SuiteError> {
    let text = env_file_text(env)?;
    let port = crate::net::loopback_port(&running.endpoint).map_err(WatchError::from)?;
    let listening = tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
        .await
        .is_ok();
    let before = std::fs::read_to_string(&running.env_file).unwrap_or_default();
    let same = env_lines(&before) == env_lines(&text);
    if listening && !same {
        return Err(SuiteError::EnvChanged {
            file: running.env_file.clone(),
            endpoint: running.endpoint.clone(),
            keys: changed_keys(&before, &text),
        });
    }
    if !same {
        let temp = running
            .env_file
            .with_extension(format!("{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            if let Some(dir) = running.env_file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&temp, &text)?;
            std::fs::rename(&temp, &running.env_file)
        };
        write().map_err(|source| SuiteError::EnvFileWrite {
            file: running.env_file.clone(),
            source,
        })?;
    }
    Ok(Watch::attach(
        &running.endpoint,
        running.log.clone(),
        running.wait,
        invoke_timeout,
    )
    .await?)
}

/// The KEY=value lines of an env file.
pub(super) fn env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .collect()
}

/// The keys whose lines differ between two env files.
pub(super) fn changed_keys(before: &str, after: &str) -> String {
    let (before, after) = (env_lines(before), env_lines(after));
    if before.is_empty() {
        return "no environment file was there".to_owned();
    }
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Invoke each function once with a harmless payload, so `cargo lambda
/// watch` starts it (`cargo run`, a build if it is not built) now.
pub(super) async fn warm_up(watch: &Watch) -> Result<(), SuiteError> {
    let empty_batch = json!({ "Records": [] });
    let tick = crate::pump::schedule_event(
        &TickerConfig::new(CIRCUIT_SWITCH, Duration::from_secs(60), "warm-up"),
        "00000000-0000-4000-8000-000000000000",
        chrono::Utc::now(),
    );
    for (function, payload) in [
        (REAL_CONSUMER, &empty_batch),
        (FALLBACK_CONSUMER, &empty_batch),
        (CIRCUIT_SWITCH, &tick),
    ] {
        watch
            .invoke(function, payload)
            .await
            .map_err(|source| SuiteError::WarmUp {
                function,
                log: watch.log_hint(),
                source,
            })?;
    }
    Ok(())
}

/// Start the customer functions under `cargo lambda watch`: search and cart
/// with an HTTP request to a path they do not serve (their own 404 problem
/// proves the function answered), the off-sale listener with an empty
/// batch, the booking worker with an empty payload (its own refusal of
/// anything but its schedule's tick proves it started, and no run begins:
/// a run over orders an attached moto kept could last `BOOKING_RUN_MS`).
pub(super) async fn warm_up_customer(watch: &Watch) -> Result<(), SuiteError> {
    let log = || watch.log_hint();
    // As long as the first invocation of the gateway functions may take.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(SuiteError::Control)?;
    for function in [SEARCH, CART] {
        let fail = |detail: String| SuiteError::WarmUpHttp {
            function,
            log: log(),
            detail,
        };
        let response = http
            .get(watch.function_url(function, "/"))
            .send()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status().as_u16();
        let body: Value = response
            .json()
            .await
            .map_err(|e| fail(format!("HTTP {status}, not JSON: {e}")))?;
        // The handler's own problem reply, not cargo-lambda's "Missing
        // function" or a function error.
        if status != 404 || body.get("title") != Some(&json!("not found")) {
            return Err(fail(format!("HTTP {status}: {body}")));
        }
    }
    watch
        .invoke(OFFSALE_LISTENER, &json!({ "Records": [] }))
        .await
        .map_err(|source| SuiteError::WarmUp {
            function: OFFSALE_LISTENER,
            log: log(),
            source,
        })?;
    match watch.invoke(BOOKING_WORKER, &json!({})).await {
        Err(WatchError::FunctionError { body, .. }) if body.contains("NotASchedule") => Ok(()),
        Err(source) => Err(SuiteError::WarmUp {
            function: BOOKING_WORKER,
            log: log(),
            source,
        }),
        Ok(answer) => Err(SuiteError::WarmUpAnswer {
            function: BOOKING_WORKER,
            log: log(),
            detail: format!("an empty payload was not refused: {answer}"),
        }),
    }
}
