//! Per-operator settings: timeout budgets, failure window and breaker timings.
//!
//! Given to the functions as JSON in `OPERATOR_SETTINGS`, for example
//!
//! ```json
//! {"default": {"breaker": {"open_base": 20000}},
//!  "operators": {"nordic": {"budgets": {"search": {"timeout": 2500, "slow_after": 2000}}}}}
//! ```
//!
//! Every field is optional. Durations are milliseconds. An operator's own
//! block is taken whole where given and falls back to the built-in defaults
//! (not to `default`) field by field; `default` applies to operators without a
//! block of their own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::breaker::BreakerConfig;
use crate::budget::Budgets;
use crate::cache::CachePolicy;
use crate::operator::OperatorId;
use crate::probe::ProbeSpec;
use crate::request::FailureStatuses;
use crate::window::WindowConfig;

/// Everything tunable about one operator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OperatorSettings {
    pub budgets: Budgets,
    pub window: WindowConfig,
    pub breaker: BreakerConfig,
    /// How old a cached answer may be to skip the operator, and to show as
    /// the last good answer.
    pub cache: CachePolicy,
    /// 4xx statuses that count as the operator failing (408 and 429 by
    /// default); every other 4xx is neutral.
    pub failure_statuses: FailureStatuses,
    /// The call the circuit switch probes an open breaker with; no probes
    /// without one ([`crate::probe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSpec>,
}

/// Settings of every operator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub default: OperatorSettings,
    pub operators: BTreeMap<OperatorId, OperatorSettings>,
}

#[derive(Debug, thiserror::Error)]
#[error("OPERATOR_SETTINGS is not valid settings JSON: {0}")]
pub struct SettingsError(#[from] serde_json::Error);

impl Settings {
    /// Parse settings JSON; an empty string means all defaults.
    pub fn from_json(json: &str) -> Result<Self, SettingsError> {
        if json.trim().is_empty() {
            return Ok(Self::default());
        }
        let settings: Settings = serde_json::from_str(json)?;
        Ok(settings)
    }

    pub fn for_operator(&self, operator: &OperatorId) -> &OperatorSettings {
        self.operators.get(operator).unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::operator::Operation;

    #[test]
    fn empty_means_defaults() {
        let s = Settings::from_json("").unwrap();
        let op = OperatorId::new("any").unwrap();
        assert_eq!(
            s.for_operator(&op)
                .budgets
                .for_operation(Operation::Search)
                .timeout,
            Duration::from_secs(3)
        );
    }

    #[test]
    fn per_operator_overrides() {
        let s = Settings::from_json(
            r#"{"default": {"breaker": {"open_base": 20000}},
                "operators": {"nordic": {"budgets": {"search": {"timeout": 2500, "slow_after": 2000}}}}}"#,
        )
        .unwrap();
        let nordic = s.for_operator(&OperatorId::new("nordic").unwrap());
        assert_eq!(nordic.budgets.search.timeout, Duration::from_millis(2500));
        assert_eq!(nordic.budgets.price.timeout, Duration::from_millis(2750));
        assert_eq!(nordic.breaker.open_base, Duration::from_secs(30));
        let other = s.for_operator(&OperatorId::new("baltic").unwrap());
        assert_eq!(other.breaker.open_base, Duration::from_secs(20));
    }

    #[test]
    fn typos_are_errors() {
        assert!(Settings::from_json(r#"{"operatorz": {}}"#).is_err());
        assert!(Settings::from_json(r#"{"operators": {"BAD ID": {}}}"#).is_err());
    }
}
