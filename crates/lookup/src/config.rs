//! Start-up configuration shared by the functions that look answers up.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use lifeboat_aws::{Clients, ConfigError, Env};
use lifeboat_core::OperatorId;
use lifeboat_core::operator::InvalidOperatorId;
use lifeboat_core::operator_config::{OperatorConfig, OperatorConfigError};
use lifeboat_core::settings::SettingsError;
use lifeboat_core::watched::watch;

use crate::{BreakerCache, Lookup, MAX_BREAKER_CACHE, Polling};

/// The operators this deployment serves (comma-separated).
pub use lifeboat_core::settings::OPERATORS;
/// How long a breaker state is kept per instance, in ms (0 to 1000, default 1000).
pub const BREAKER_CACHE_MS: &str = "BREAKER_CACHE_MS";
/// Per-operator budgets, breaker and cache settings (JSON).
pub use lifeboat_core::settings::OPERATOR_SETTINGS;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The settings, from the environment or the operator config table.
    #[error(transparent)]
    OperatorConfig(#[from] OperatorConfigError),
    #[error("OPERATORS: {0}")]
    Operator(#[from] InvalidOperatorId),
    #[error("OPERATORS names no operator")]
    NoOperators,
    #[error("BREAKER_CACHE_MS must be a whole number from 0 to 1000, got {0:?}")]
    BreakerCache(String),
    #[error("{name}: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// The operators named by `OPERATORS`.
pub fn operators(env: &Env) -> Result<BTreeSet<OperatorId>, StartupError> {
    parse_operators(env.required(OPERATORS)?)
}

pub fn parse_operators(text: &str) -> Result<BTreeSet<OperatorId>, StartupError> {
    let operators = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(OperatorId::new)
        .collect::<Result<BTreeSet<_>, _>>()?;
    if operators.is_empty() {
        return Err(StartupError::NoOperators);
    }
    Ok(operators)
}

/// The operators' settings (and endpoints) a function starts with: the
/// environment's `OPERATOR_SETTINGS`, or the operator config table's item
/// when `OPERATOR_CONFIG_TABLE` names one that has them.
pub async fn operator_config(env: &Env, clients: &Clients) -> Result<OperatorConfig, StartupError> {
    Ok(lifeboat_aws::operator_config::load(env, clients).await?)
}

/// A [`Lookup`] on the Requests, Cache and Breaker tables the environment
/// names, with the settings of `config`.
pub fn lookup(
    env: &Env,
    clients: &Clients,
    config: &OperatorConfig,
) -> Result<Lookup, StartupError> {
    let clock: Arc<dyn lifeboat_core::ports::Clock> = Arc::new(lifeboat_core::SystemClock);
    let metrics: Arc<dyn lifeboat_core::ports::MetricsSink> =
        Arc::new(lifeboat_core::metrics::StdoutMetrics::from_env());
    let breaker_cache = match env.optional(BREAKER_CACHE_MS)? {
        None => MAX_BREAKER_CACHE,
        Some(text) => match text.parse::<u64>() {
            Ok(ms) if ms <= 1000 => Duration::from_millis(ms),
            _ => return Err(StartupError::BreakerCache(text.to_owned())),
        },
    };
    // Every failed table call counts in DependencyErrors.
    Ok(Lookup {
        requests: watch(Arc::new(clients.request_store(env)?), &metrics, &clock),
        cache: watch(Arc::new(clients.cache_store(env)?), &metrics, &clock),
        breakers: BreakerCache::new(
            watch(
                Arc::new(clients.breaker_store(
                    env,
                    lifeboat_core::watched::FailureCounter::new(metrics.clone(), clock.clone()),
                )?),
                &metrics,
                &clock,
            ),
            clock.clone(),
            breaker_cache,
        ),
        clock,
        settings: config.settings()?,
        polling: Polling::default(),
        metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_are_a_checked_comma_list() {
        let ops = parse_operators(" nordic, baltic ,").unwrap_or_default();
        assert_eq!(ops.len(), 2);
        assert!(matches!(
            parse_operators(" , "),
            Err(StartupError::NoOperators)
        ));
        assert!(matches!(
            parse_operators("Nordic"),
            Err(StartupError::Operator(_))
        ));
    }
}
