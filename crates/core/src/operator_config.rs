//! The operators' configuration kept in a table rather than the functions'
//! environment: where each operator's API is (`OPERATOR_ENDPOINTS`'s text)
//! and its settings (`OPERATOR_SETTINGS`'s JSON).
//!
//! Lambda gives a function 4 KB of environment and CloudFormation a
//! parameter 4,096 bytes, so with a probe and a hang check per operator
//! about 20 operators fit in the environment. A stack of hundreds keeps them
//! in one item of the operator config table (`OPERATOR_CONFIG_TABLE`), read
//! with one `GetItem` when an instance starts:
//!
//! | attribute | type | |
//! |---|---|---|
//! | `name` | S | partition key, always `operators` ([`ITEM_NAME`]) |
//! | `endpoints` | S | `OPERATOR_ENDPOINTS`'s text, `nordic=https://…,baltic=https://…`; absent: the environment's |
//! | `settings` | S | `OPERATOR_SETTINGS`'s JSON; absent: the environment's |
//! | `revision` | N | bumped by every `lifeboat config put`; the write's condition |
//! | `updated_at` | S | RFC 3339, when it was last put |
//!
//! [`OperatorConfig::resolve`] decides, per attribute, what a function starts
//! with: the item's value where the item has one, else the environment's (so
//! a small stack with no item keeps working from its parameters). Values are
//! kept as text and parsed by the function that uses them, with the parsers
//! the environment's values always went through; an error names where the
//! text came from ([`Source`]).
//!
//! The item is read and written through an
//! [`OperatorConfigStore`](crate::ports::OperatorConfigStore), one of the
//! [`ports`](crate::ports).

use chrono::{DateTime, Utc};
use std::fmt;

use crate::ports::StoreError;
use crate::settings::{OPERATOR_SETTINGS, Settings};

/// Environment variable: the operator config table's name. Unset: the
/// functions read endpoints and settings from their environment only.
pub const OPERATOR_CONFIG_TABLE: &str = "OPERATOR_CONFIG_TABLE";
/// Environment variable: the stack's `OperatorConfigRevision`, logged at
/// start. Changing it changes every function's configuration, so Lambda
/// starts new instances, which read the item again.
pub const OPERATOR_CONFIG_REVISION: &str = "OPERATOR_CONFIG_REVISION";
/// Environment variable: each operator's API base URL (the same as
/// `lifeboat_operator::OPERATOR_ENDPOINTS`, which core cannot name).
pub const OPERATOR_ENDPOINTS: &str = "OPERATOR_ENDPOINTS";
/// The partition key's value of the one item.
pub const ITEM_NAME: &str = "operators";
/// The largest item `lifeboat config put` writes: DynamoDB refuses items
/// over 400 KB, and this leaves room to spare.
pub const MAX_ITEM_BYTES: usize = 350 * 1024;

/// The configuration item as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OperatorConfigItem {
    /// `OPERATOR_ENDPOINTS`'s text; `None`: not kept in the item.
    pub endpoints: Option<String>,
    /// `OPERATOR_SETTINGS`'s JSON; `None`: not kept in the item.
    pub settings: Option<String>,
    /// Bumped by every write (0: never written).
    pub revision: u64,
    pub updated_at: Option<DateTime<Utc>>,
}

impl OperatorConfigItem {
    /// The item's size as DynamoDB counts it (each attribute's name and
    /// value in UTF-8 bytes; a number at most 21 bytes), to stay under
    /// DynamoDB's 400 KB before writing.
    pub fn size_bytes(&self) -> usize {
        let text = |name: &str, value: &str| name.len() + value.len();
        let mut size = text("name", ITEM_NAME) + "revision".len() + 21;
        if let Some(endpoints) = &self.endpoints {
            size += text("endpoints", endpoints);
        }
        if let Some(settings) = &self.settings {
            size += text("settings", settings);
        }
        if let Some(at) = &self.updated_at {
            size += text("updated_at", &at.to_rfc3339());
        }
        size
    }
}

/// Where a function's endpoints or settings came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The environment variable of that name (or nowhere, when it is unset).
    Environment(&'static str),
    /// An attribute of the configuration item in that table.
    Table {
        table: String,
        attribute: &'static str,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Environment(var) => f.write_str(var),
            Source::Table { table, attribute } => write!(
                f,
                "operator config table {table} (item name={ITEM_NAME:?}, attribute {attribute})"
            ),
        }
    }
}

/// Why a function cannot start with the operators' configuration.
#[derive(Debug, thiserror::Error)]
pub enum OperatorConfigError {
    /// The table could not be read, or its item is not of the right types.
    #[error("operator config table {table} (OPERATOR_CONFIG_TABLE): {source}")]
    Unreadable {
        table: String,
        #[source]
        source: StoreError,
    },
    /// The settings are not settings JSON.
    #[error("{from} is not valid settings JSON: {source}")]
    Settings {
        from: Source,
        #[source]
        source: serde_json::Error,
    },
    /// No endpoints anywhere, for a function that needs them.
    #[error("no operator endpoints: {0}")]
    NoEndpoints(String),
    /// A variable of the environment could not be read.
    #[error("{0}")]
    Environment(String),
}

/// What a function starts with: its operators' endpoints and settings and
/// where each came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfig {
    pub endpoints: Option<String>,
    pub endpoints_from: Source,
    pub settings: Option<String>,
    pub settings_from: Source,
    /// The item's revision, when there is an item.
    pub revision: Option<u64>,
    /// The table read, if any.
    pub table: Option<String>,
    /// The environment variables with a value of their own that the item
    /// replaced (worth a warning: someone may think they are in force).
    pub overridden: Vec<&'static str>,
}

fn non_empty(text: Option<&str>) -> Option<String> {
    text.map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

impl OperatorConfig {
    /// The environment's values alone (no table).
    pub fn from_environment(endpoints: Option<&str>, settings: Option<&str>) -> Self {
        Self {
            endpoints: non_empty(endpoints),
            endpoints_from: Source::Environment(OPERATOR_ENDPOINTS),
            settings: non_empty(settings),
            settings_from: Source::Environment(OPERATOR_SETTINGS),
            revision: None,
            table: None,
            overridden: Vec::new(),
        }
    }

    /// The item's values where it has them, the environment's otherwise.
    /// An empty attribute counts as absent, as an empty variable does.
    pub fn resolve(
        endpoints: Option<&str>,
        settings: Option<&str>,
        table: &str,
        item: Option<OperatorConfigItem>,
    ) -> Self {
        let mut config = Self::from_environment(endpoints, settings);
        config.table = Some(table.to_owned());
        let Some(item) = item else {
            return config;
        };
        config.revision = Some(item.revision);
        let from_table = |attribute| Source::Table {
            table: table.to_owned(),
            attribute,
        };
        if let Some(endpoints) = non_empty(item.endpoints.as_deref()) {
            if config.endpoints.is_some() {
                config.overridden.push(OPERATOR_ENDPOINTS);
            }
            config.endpoints = Some(endpoints);
            config.endpoints_from = from_table("endpoints");
        }
        if let Some(settings) = non_empty(item.settings.as_deref()) {
            if config.settings.is_some() {
                config.overridden.push(OPERATOR_SETTINGS);
            }
            config.settings = Some(settings);
            config.settings_from = from_table("settings");
        }
        config
    }

    /// The settings, parsed as `OPERATOR_SETTINGS` always was (none: the
    /// defaults); an error names where they came from.
    pub fn settings(&self) -> Result<Settings, OperatorConfigError> {
        parse_settings(self.settings.as_deref().unwrap_or(""), &self.settings_from)
    }

    /// The endpoints' text, for a function that cannot work without them.
    pub fn required_endpoints(&self) -> Result<&str, OperatorConfigError> {
        self.endpoints.as_deref().ok_or_else(|| {
            OperatorConfigError::NoEndpoints(match &self.table {
                Some(table) => format!(
                    "{OPERATOR_ENDPOINTS} is empty and the operator config table {table} has no endpoints (lifeboat config put --endpoints-file)"
                ),
                None => format!("environment variable {OPERATOR_ENDPOINTS} is not set"),
            })
        })
    }
}

/// Settings JSON parsed as the functions parse it, an error naming `from`.
pub fn parse_settings(text: &str, from: &Source) -> Result<Settings, OperatorConfigError> {
    Settings::from_json(text).map_err(|e| OperatorConfigError::Settings {
        from: from.clone(),
        source: e.0,
    })
}

/// A config table item of revision 3 with `endpoints` and `settings`, for
/// the tests of the table's readers.
#[cfg(test)]
pub(crate) fn test_item(endpoints: Option<&str>, settings: Option<&str>) -> OperatorConfigItem {
    OperatorConfigItem {
        endpoints: endpoints.map(str::to_owned),
        settings: settings.map(str::to_owned),
        revision: 3,
        updated_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "lifeboat-operator-config";

    use crate::operator_config::test_item as item;

    #[test]
    fn without_an_item_the_environment_is_used() {
        let config = OperatorConfig::resolve(Some("nordic=https://n"), Some(" "), TABLE, None);
        assert_eq!(config.endpoints.as_deref(), Some("nordic=https://n"));
        assert_eq!(
            config.endpoints_from,
            Source::Environment(OPERATOR_ENDPOINTS)
        );
        assert_eq!(config.settings, None);
        assert_eq!(config.revision, None);
        assert!(config.overridden.is_empty());
        assert_eq!(config.settings().ok(), Some(Settings::default()));
    }

    #[test]
    fn the_item_wins_attribute_by_attribute_and_says_what_it_replaced() {
        let settings = r#"{"default": {"breaker": {"open_base": 20000}}}"#;
        let config = OperatorConfig::resolve(
            Some("nordic=https://n"),
            Some(r#"{"default": {}}"#),
            TABLE,
            Some(item(None, Some(settings))),
        );
        assert_eq!(config.endpoints.as_deref(), Some("nordic=https://n"));
        assert_eq!(config.settings.as_deref(), Some(settings));
        assert_eq!(config.revision, Some(3));
        assert_eq!(config.overridden, vec![OPERATOR_SETTINGS]);
        let parsed = config.settings().ok();
        assert_eq!(
            parsed.map(|s| s.default.breaker.open_base),
            Some(std::time::Duration::from_secs(20))
        );

        let config = OperatorConfig::resolve(
            None,
            None,
            TABLE,
            Some(item(Some("baltic=https://b"), None)),
        );
        assert_eq!(config.endpoints.as_deref(), Some("baltic=https://b"));
        assert!(config.overridden.is_empty(), "nothing in the environment");
        assert_eq!(config.required_endpoints().ok(), Some("baltic=https://b"));
    }

    #[test]
    fn bad_settings_name_the_table_and_attribute() {
        let config = OperatorConfig::resolve(
            None,
            Some(r#"{"default": {}}"#),
            TABLE,
            Some(item(None, Some(r#"{"operatorz": {}}"#))),
        );
        let text = config.settings().err().map(|e| e.to_string());
        let text = text.unwrap_or_default();
        assert!(
            text.contains(TABLE) && text.contains("attribute settings"),
            "{text}"
        );
        let env = OperatorConfig::from_environment(None, Some("{"));
        let text = env.settings().err().map(|e| e.to_string());
        assert!(
            text.as_deref()
                .is_some_and(|t| t.starts_with("OPERATOR_SETTINGS is not valid settings JSON")),
            "{text:?}"
        );
    }

    #[test]
    fn missing_endpoints_say_where_they_were_looked_for() {
        let config = OperatorConfig::resolve(None, None, TABLE, Some(item(Some(" "), None)));
        let text = config
            .required_endpoints()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            text.contains(TABLE) && text.contains(OPERATOR_ENDPOINTS),
            "{text}"
        );
        let text = OperatorConfig::from_environment(None, None)
            .required_endpoints()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(text.contains("OPERATOR_ENDPOINTS is not set"), "{text}");
    }

    #[test]
    fn the_size_counts_names_and_values() {
        let small = item(Some("a=b"), None);
        let big = item(Some("a=b"), Some(&"x".repeat(1000)));
        assert_eq!(
            big.size_bytes() - small.size_bytes(),
            1000 + "settings".len()
        );
    }
}
