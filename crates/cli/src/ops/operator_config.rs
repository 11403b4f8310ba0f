//! `lifeboat config put` and `lifeboat config show`: the operator config
//! table's one item (every operator's endpoints and settings, docs
//! /configuration.md "Operator config table").
//!
//! `put` checks the endpoints and settings with the parsers the functions
//! use at start ([`OperatorUrls::parse`], [`Settings::from_json`]) before it
//! writes anything, keeps what it is not given from the item already there,
//! bumps the revision, refuses an item over [`MAX_ITEM_BYTES`], and writes
//! only over the revision it read (someone else's write meanwhile is an
//! error, never overwritten). The functions read the item when an instance
//! starts: `sam deploy` with a new `OperatorConfigRevision` replaces the
//! running ones.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use lifeboat_aws::{Clients, DynamoOperatorConfigStore, Env};
use lifeboat_command::CliError;
use lifeboat_command::runtime::block_on;
use lifeboat_core::OperatorId;
use lifeboat_core::operator_config::{MAX_ITEM_BYTES, OperatorConfigItem};
use lifeboat_core::ports::{OperatorConfigStore, StoreError};
use lifeboat_core::settings::Settings;
use lifeboat_operator::OperatorUrls;
use serde::Serialize;

use super::config::Setting;
use super::stack::{self, FromStack, Stack, StackArgs, StackDescription};

/// The operator config table, from `--table`, `OPERATOR_CONFIG_TABLE` or
/// the stack.
pub const TABLE: Setting = super::config::OPERATOR_CONFIG_TABLE;

#[derive(Subcommand)]
pub enum ConfigAction {
    /// Check endpoints and settings as the functions parse them, then write
    /// them to the operator config table's item (bumping its revision).
    Put(PutArgs),
    /// Print the operator config table's item.
    Show(ShowArgs),
}

#[derive(Args)]
pub struct PutArgs {
    /// The operator config table (the stack's OperatorConfigTableName
    /// output) [default: env OPERATOR_CONFIG_TABLE, else the stack's
    /// OperatorConfigTable].
    #[arg(long)]
    table: Option<String>,
    #[command(flatten)]
    stack: StackArgs,
    /// A file of operator=url entries, separated by commas or line breaks
    /// (OPERATOR_ENDPOINTS's format); kept as the item's `endpoints`.
    #[arg(long)]
    endpoints_file: Option<PathBuf>,
    /// A file of settings JSON (OPERATOR_SETTINGS's format); kept as the
    /// item's `settings`.
    #[arg(long)]
    settings_file: Option<PathBuf>,
}

#[derive(Args)]
pub struct ShowArgs {
    /// The operator config table [default: env OPERATOR_CONFIG_TABLE, else
    /// the stack's OperatorConfigTable].
    #[arg(long)]
    table: Option<String>,
    #[command(flatten)]
    stack: StackArgs,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    json: bool,
}

/// Why `config put` or `config show` failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigCommandError {
    #[error("give --endpoints-file, --settings-file or both")]
    NothingToPut,
    #[error("{path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not the endpoints the functions read: {reason}")]
    Endpoints { path: String, reason: String },
    #[error("{path}: not the settings the functions read: {reason}")]
    Settings { path: String, reason: String },
    #[error(
        "the item would be {bytes} bytes, over the {MAX_ITEM_BYTES} bytes this command writes (DynamoDB refuses items over 400 KB): shorten the settings, e.g. move shared values into \"default\""
    )]
    TooLarge { bytes: usize },
    #[error("{0} (the stack's parameters; nothing was written)")]
    Capacity(#[from] lifeboat_core::capacity::CapacityError),
    #[error("stack {stack}: {why}")]
    StackParameters { stack: String, why: String },
    #[error("operator config table {table}: {source}")]
    Store {
        table: String,
        #[source]
        source: StoreError,
    },
}

/// Endpoints as the functions take them: the file's entries joined with
/// commas, checked by [`OperatorUrls::parse`]; they must name an operator.
pub fn checked_endpoints(text: &str, path: &str) -> Result<String, ConfigCommandError> {
    let joined = text
        .lines()
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    let urls = OperatorUrls::parse(&joined).map_err(|e| ConfigCommandError::Endpoints {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    if urls.is_empty() {
        return Err(ConfigCommandError::Endpoints {
            path: path.to_owned(),
            reason: "it names no operator".to_owned(),
        });
    }
    Ok(joined)
}

/// Settings as the functions take them, checked by [`Settings::from_json`].
pub fn checked_settings(text: &str, path: &str) -> Result<String, ConfigCommandError> {
    Settings::from_json(text).map_err(|e| ConfigCommandError::Settings {
        path: path.to_owned(),
        reason: e.0.to_string(),
    })?;
    Ok(text.trim().to_owned())
}

/// The item `put` writes over `current`: the new values where given, the
/// current ones elsewhere, the next revision.
pub fn next_item(
    current: Option<&OperatorConfigItem>,
    endpoints: Option<String>,
    settings: Option<String>,
    now: DateTime<Utc>,
) -> Result<OperatorConfigItem, ConfigCommandError> {
    if endpoints.is_none() && settings.is_none() {
        return Err(ConfigCommandError::NothingToPut);
    }
    let item = OperatorConfigItem {
        endpoints: endpoints.or_else(|| current.and_then(|c| c.endpoints.clone())),
        settings: settings.or_else(|| current.and_then(|c| c.settings.clone())),
        revision: current.map_or(1, |c| c.revision + 1),
        updated_at: Some(now),
    };
    let bytes = item.size_bytes();
    if bytes > MAX_ITEM_BYTES {
        return Err(ConfigCommandError::TooLarge { bytes });
    }
    Ok(item)
}

/// What `put` wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Written {
    pub table: String,
    pub revision: u64,
    pub bytes: usize,
    /// Operators with an endpoint in the item.
    pub endpoints: usize,
    /// Operators with a block of their own in the item's settings.
    pub operators_with_settings: usize,
}

/// Read the item, write the next one over its revision.
pub async fn put(
    store: &dyn OperatorConfigStore,
    endpoints: Option<String>,
    settings: Option<String>,
    now: DateTime<Utc>,
) -> Result<Written, ConfigCommandError> {
    let failed = |source| ConfigCommandError::Store {
        table: store.name().to_owned(),
        source,
    };
    let current = store.load().await.map_err(failed)?;
    let item = next_item(current.as_ref(), endpoints, settings, now)?;
    // What is kept from the item is checked too: it may have been written
    // by hand, and the functions would refuse to start on it.
    if let Some(kept) = &item.endpoints {
        checked_endpoints(kept, "the item's endpoints")?;
    }
    if let Some(kept) = &item.settings {
        checked_settings(kept, "the item's settings")?;
    }
    store
        .save(&item, current.as_ref().map(|c| c.revision))
        .await
        .map_err(failed)?;
    Ok(Written {
        table: store.name().to_owned(),
        revision: item.revision,
        bytes: item.size_bytes(),
        endpoints: count_endpoints(&item),
        operators_with_settings: count_settings(&item),
    })
}

fn count_endpoints(item: &OperatorConfigItem) -> usize {
    item.endpoints
        .as_deref()
        .and_then(|e| OperatorUrls::parse(e).ok())
        .map_or(0, |urls| urls.len())
}

fn count_settings(item: &OperatorConfigItem) -> usize {
    item.settings
        .as_deref()
        .and_then(|s| Settings::from_json(s).ok())
        .map_or(0, |s| s.operators.len())
}

/// Whether `settings` ask any lane for a parallelization of its own.
pub fn asks_lanes(settings: &Settings) -> bool {
    settings.default.lane.parallelization.is_some()
        || settings
            .operators
            .values()
            .any(|o| o.lane.parallelization.is_some())
}

/// Whether the lanes `settings` size fit the stack's real consumer, as the
/// circuit switch's tick checks them before it sets any: every operator of
/// `Operators` at its `lane.parallelization`, else `LaneParallelization`,
/// against `RealConsumerConcurrency` while `ReservedConcurrency` is
/// `enabled`. A put the tick would refuse is refused before it is written.
pub fn lanes_fit(settings: &Settings, stack: &StackDescription) -> Result<(), ConfigCommandError> {
    let parameter = |key: &'static str| {
        stack
            .value(FromStack::Parameter(key))
            .map_err(|why| ConfigCommandError::StackParameters {
                stack: stack.name.clone(),
                why,
            })
    };
    let number = |key: &'static str| -> Result<usize, ConfigCommandError> {
        let text = parameter(key)?;
        text.parse()
            .map_err(|e| ConfigCommandError::StackParameters {
                stack: stack.name.clone(),
                why: format!("parameter {key} is {text:?}, not a number: {e}"),
            })
    };
    let default = number("LaneParallelization")?;
    let reserved = match parameter("ReservedConcurrency")? {
        "enabled" => Some(number("RealConsumerConcurrency")?),
        _ => None,
    };
    let asked: Vec<_> = parameter("Operators")?
        .split(',')
        .filter_map(|o| OperatorId::new(o.trim()).ok())
        .map(|o| settings.for_operator(&o).lane.parallelization)
        .collect();
    lifeboat_core::capacity::check_lanes(&asked, default, reserved)?;
    Ok(())
}

/// The item as `show` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shown {
    pub table: String,
    /// `false`: no item; the functions use their environment.
    pub exists: bool,
    pub revision: Option<u64>,
    pub updated_at: Option<DateTime<Utc>>,
    pub bytes: usize,
    pub endpoints: Option<String>,
    pub settings: Option<serde_json::Value>,
}

pub async fn show(store: &dyn OperatorConfigStore) -> Result<Shown, ConfigCommandError> {
    let item = store
        .load()
        .await
        .map_err(|source| ConfigCommandError::Store {
            table: store.name().to_owned(),
            source,
        })?;
    Ok(Shown {
        table: store.name().to_owned(),
        exists: item.is_some(),
        revision: item.as_ref().map(|i| i.revision),
        updated_at: item.as_ref().and_then(|i| i.updated_at),
        bytes: item.as_ref().map_or(0, OperatorConfigItem::size_bytes),
        endpoints: item.as_ref().and_then(|i| i.endpoints.clone()),
        settings: item.as_ref().and_then(|i| {
            i.settings.as_deref().map(|s| {
                serde_json::from_str(s).unwrap_or_else(|_| serde_json::Value::String(s.to_owned()))
            })
        }),
    })
}

/// `show`'s text: a summary, then each endpoint on its own line and the
/// settings pretty-printed.
pub fn render(shown: &Shown) -> String {
    if !shown.exists {
        return format!(
            "operator config table {}: no item; the functions use OPERATOR_ENDPOINTS and OPERATOR_SETTINGS\n",
            shown.table
        );
    }
    let mut text = format!(
        "operator config table {}: revision {}, updated {}, {} bytes\n",
        shown.table,
        shown.revision.unwrap_or(0),
        shown
            .updated_at
            .map_or("-".to_owned(), |at| at.to_rfc3339()),
        shown.bytes
    );
    match &shown.endpoints {
        Some(endpoints) => {
            text.push_str("endpoints:\n");
            for entry in endpoints.split(',') {
                text.push_str(&format!("  {entry}\n"));
            }
        }
        None => text.push_str("endpoints: none (OPERATOR_ENDPOINTS is used)\n"),
    }
    match &shown.settings {
        Some(settings) => {
            let pretty = serde_json::to_string_pretty(settings).unwrap_or_default();
            text.push_str(&format!("settings:\n{pretty}\n"));
        }
        None => text.push_str("settings: none (OPERATOR_SETTINGS is used)\n"),
    }
    text
}

fn read(path: &Path) -> Result<String, ConfigCommandError> {
    std::fs::read_to_string(path).map_err(|source| ConfigCommandError::File {
        path: path.display().to_string(),
        source,
    })
}

/// Read and check the files of `put`: nothing is written unless both are
/// what the functions would take.
pub fn read_files(
    endpoints_file: Option<&Path>,
    settings_file: Option<&Path>,
) -> Result<(Option<String>, Option<String>), ConfigCommandError> {
    let endpoints = endpoints_file
        .map(|path| checked_endpoints(&read(path)?, &path.display().to_string()))
        .transpose()?;
    let settings = settings_file
        .map(|path| checked_settings(&read(path)?, &path.display().to_string()))
        .transpose()?;
    if endpoints.is_none() && settings.is_none() {
        return Err(ConfigCommandError::NothingToPut);
    }
    Ok((endpoints, settings))
}

/// The store of the table `--table`, `OPERATOR_CONFIG_TABLE` or the stack
/// names, and the stack: read when it names the table or when `read_stack`.
async fn store(
    table: Option<&str>,
    stack: &StackArgs,
    read_stack: bool,
) -> Result<(DynamoOperatorConfigStore, Stack), String> {
    let env = Env::from_process();
    let sdk = lifeboat_aws::clients::load_sdk_config().await;
    let needed = read_stack || !TABLE.is_given(table, &env);
    let stack = stack::find(stack.stack.as_deref(), needed, Path::new("."), &sdk)
        .await
        .map_err(|e| e.to_string())?;
    let table = TABLE
        .resolve_in(table, &env, &stack)
        .map_err(|e| e.to_string())?;
    Ok((
        DynamoOperatorConfigStore::new(Clients::new(&sdk).dynamodb().clone(), table),
        stack,
    ))
}

/// `lifeboat config put|show`.
impl ConfigAction {
    /// `lifeboat config put|show`.
    pub fn run(self) -> Result<(), CliError> {
        block_on("config", self.apply())
    }

    async fn apply(self) -> Result<(), CliError> {
        match self {
            ConfigAction::Put(args) => {
                let fail = |e: &dyn std::fmt::Display| CliError::new("config put", e);
                let (endpoints, settings) = read_files(
                    args.endpoints_file.as_deref(),
                    args.settings_file.as_deref(),
                )
                .map_err(|e| fail(&e))?;
                // Lanes sized by the settings are checked against the
                // stack's reservation, as the circuit switch's tick would.
                let sized = settings
                    .as_deref()
                    .and_then(|s| Settings::from_json(s).ok())
                    .filter(asks_lanes);
                let (store, stack) = store(args.table.as_deref(), &args.stack, sized.is_some())
                    .await
                    .map_err(|e| fail(&e))?;
                if let Some(sized) = &sized {
                    match &stack {
                        Stack::Read(description) => {
                            lanes_fit(sized, description).map_err(|e| fail(&e))?
                        }
                        _ => eprintln!(
                            "lifeboat config put: the stack was not read, so the lanes' parallelization was not checked against RealConsumerConcurrency; the circuit switch's tick checks it before setting any (name the stack with --stack to check it now)"
                        ),
                    }
                }
                let w = put(&store, endpoints, settings, Utc::now())
                    .await
                    .map_err(|e| fail(&e))?;
                println!(
                    "operator config table {}: revision {} written ({} bytes; endpoints of {} operators, settings of {} operators of their own)",
                    w.table, w.revision, w.bytes, w.endpoints, w.operators_with_settings
                );
                println!(
                    "Running instances keep what they read at start: sam deploy --parameter-overrides OperatorConfigRevision={} replaces them.",
                    w.revision
                );
                Ok(())
            }
            ConfigAction::Show(args) => {
                let fail = |e: &dyn std::fmt::Display| CliError::new("config show", e);
                let (store, _) = store(args.table.as_deref(), &args.stack, false)
                    .await
                    .map_err(|e| fail(&e))?;
                let shown = show(&store).await.map_err(|e| fail(&e))?;
                if args.json {
                    let text = serde_json::to_string_pretty(&shown).map_err(|e| fail(&e))?;
                    println!("{text}");
                } else {
                    print!("{}", render(&shown));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::memory::MemoryOperatorConfigStore;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_032_800 + s, 0).unwrap_or_default()
    }

    #[test]
    fn lanes_sized_past_the_reservation_are_refused_before_the_put() {
        let stack = |reserved: &str, enabled: &str| StackDescription {
            name: "lifeboat".to_owned(),
            status: "UPDATE_COMPLETE".to_owned(),
            parameters: [
                ("Operators", "nordic,baltic,aegean"),
                ("LaneParallelization", "4"),
                ("RealConsumerConcurrency", reserved),
                ("ReservedConcurrency", enabled),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            ..StackDescription::default()
        };
        let settings =
            Settings::from_json(r#"{"operators": {"nordic": {"lane": {"parallelization": 10}}}}"#)
                .unwrap_or_default();
        assert!(asks_lanes(&settings));
        assert!(!asks_lanes(&Settings::default()));
        // 10 + 4 + 4.
        assert!(lanes_fit(&settings, &stack("18", "enabled")).is_ok());
        let short = lanes_fit(&settings, &stack("17", "enabled"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(short.contains("at least 18"), "{short}");
        assert!(lanes_fit(&settings, &stack("17", "disabled")).is_ok());
        let unreadable = lanes_fit(&settings, &stack("lots", "enabled"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            unreadable.contains("RealConsumerConcurrency"),
            "{unreadable}"
        );
    }

    #[test]
    fn endpoints_are_checked_as_the_functions_check_them() {
        assert_eq!(
            checked_endpoints("nordic=https://n\n baltic=https://b,\n\n", "f").ok(),
            Some("nordic=https://n,baltic=https://b".to_owned())
        );
        for bad in [
            "nordic",
            "nordic=ftp://n",
            "nordic=http://api.nordic.example",
            "nordic=https://user:pw@n",
            "Nordic=https://n",
            "nordic=https://n,nordic=https://m",
            " \n",
        ] {
            let err = checked_endpoints(bad, "endpoints.txt").err();
            assert!(
                err.as_ref()
                    .is_some_and(|e| e.to_string().starts_with("endpoints.txt: ")),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn settings_are_checked_as_the_functions_check_them() {
        assert!(checked_settings(r#"{"default": {"hang_check": {}}}"#, "s").is_ok());
        assert!(checked_settings("", "s").is_ok());
        let err = checked_settings(r#"{"operatorz": {}}"#, "settings.json").err();
        assert!(err.is_some_and(
            |e| e.to_string().contains("settings.json") && e.to_string().contains("operatorz")
        ));
    }

    #[tokio::test]
    async fn put_keeps_what_it_is_not_given_and_bumps_the_revision() {
        let store = MemoryOperatorConfigStore::new("config");
        let written = put(&store, Some("nordic=https://n".into()), None, at(0))
            .await
            .ok();
        assert_eq!(
            written.as_ref().map(|w| (w.revision, w.endpoints)),
            Some((1, 1))
        );
        let written = put(
            &store,
            None,
            Some(r#"{"operators": {"nordic": {}}}"#.into()),
            at(5),
        )
        .await
        .ok();
        assert_eq!(
            written.map(|w| (w.revision, w.endpoints, w.operators_with_settings)),
            Some((2, 1, 1))
        );
        let item = store.load().await.ok().flatten().unwrap_or_default();
        assert_eq!(item.endpoints.as_deref(), Some("nordic=https://n"));
        assert_eq!(item.updated_at, Some(at(5)));
        assert!(matches!(
            put(&store, None, None, at(9)).await,
            Err(ConfigCommandError::NothingToPut)
        ));
        // Settings written by hand that the functions would refuse: a put
        // of the endpoints alone does not keep them silently.
        let broken = OperatorConfigItem {
            settings: Some("{".into()),
            revision: 3,
            ..item.clone()
        };
        assert!(store.save(&broken, Some(2)).await.is_ok());
        let err = put(&store, Some("nordic=https://n".into()), None, at(7)).await;
        assert!(
            err.as_ref()
                .is_err_and(|e| e.to_string().starts_with("the item's settings: ")),
            "{err:?}"
        );
        assert!(store.save(&item, Some(3)).await.is_ok());
        let shown = show(&store).await.ok();
        assert!(
            shown
                .as_ref()
                .is_some_and(|s| s.exists && s.revision == Some(2))
        );
        let text = render(&shown.unwrap_or_else(|| unreachable!()));
        assert!(text.contains("  nordic=https://n\n"), "{text}");
    }

    #[test]
    fn an_item_over_350_kb_is_refused() {
        let big = format!(
            r#"{{"default": {{"note": "{}"}}}}"#,
            "x".repeat(MAX_ITEM_BYTES)
        );
        let err = next_item(None, None, Some(big), at(0)).err();
        assert!(
            matches!(err, Some(ConfigCommandError::TooLarge { bytes }) if bytes > MAX_ITEM_BYTES)
        );
    }

    /// The configuration of 200 operators, each with a probe and a hang
    /// check (as infra/check-environment builds it): what the functions
    /// take, and far under DynamoDB's 400 KB.
    #[test]
    fn two_hundred_operators_with_probes_and_hang_checks_fit_one_item() {
        let names: Vec<String> = (1..=200).map(|i| format!("operator-{i:03}")).collect();
        let endpoints = names
            .iter()
            .map(|n| format!("{n}=https://api.{n}.example/v1"))
            .collect::<Vec<_>>()
            .join("\n");
        let blocks = names
            .iter()
            .map(|n| {
                format!(
                    r#""{n}": {{"probe": {{"operation": "search", "params": {{"from": "HEL", "to": "TLL", "date": "today+7", "passengers": "1"}}}}, "hang_check": {{"operation": "ping", "timeout": 1000}}}}"#
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let settings = format!(r#"{{"default": {{}}, "operators": {{{blocks}}}}}"#);
        let endpoints = checked_endpoints(&endpoints, "e").ok();
        let settings = checked_settings(&settings, "s").ok();
        assert!(endpoints.is_some() && settings.is_some());
        let item = next_item(None, endpoints, settings, at(0)).ok();
        let bytes = item
            .as_ref()
            .map_or(usize::MAX, OperatorConfigItem::size_bytes);
        assert!(bytes < 100 * 1024, "{bytes} bytes");
        assert!(item.is_some_and(|i| count_endpoints(&i) == 200 && count_settings(&i) == 200));
    }
}
