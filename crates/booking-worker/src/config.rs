//! The worker built from its environment, once per Lambda instance
//! (docs/configuration.md): `OPERATORS`, the gateway's `OPERATOR_SETTINGS`
//! (from the environment or the operator config table), `ORDER_SETTINGS`,
//! `BOOKING_RUN_MS`, and the Orders, Requests and Breaker tables and the
//! bus.

use std::sync::Arc;
use std::time::Duration;

use lifeboat_aws::{Clients, Env};
use lifeboat_core::metrics::StdoutMetrics;
use lifeboat_core::operator_config::OperatorConfigError;
use lifeboat_core::order::booking::{ORDER_SETTINGS, OrderSettings, OrderSettingsError};
use lifeboat_core::ports::{Clock, MetricsSink};
use lifeboat_core::watched::{FailureCounter, watch};

use crate::{BookingWorker, RunLimits};

/// Environment variable: the longest one invocation works, in ms.
pub const BOOKING_RUN_MS: &str = "BOOKING_RUN_MS";

/// The longest [`BOOKING_RUN_MS`] allowed: the schedule starts the next run
/// a minute after this one, and the function's timeout is a minute.
pub const MAX_RUN: Duration = Duration::from_secs(55);

/// The function refuses to start, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] lifeboat_aws::ConfigError),
    #[error(transparent)]
    Lookup(#[from] lifeboat_lookup::config::StartupError),
    #[error(transparent)]
    OperatorConfig(#[from] OperatorConfigError),
    #[error(transparent)]
    Orders(#[from] OrderSettingsError),
    #[error("BOOKING_RUN_MS must be a whole number from 1000 to 55000, got {0:?}")]
    RunFor(String),
}

/// [`RunLimits`] with the run's length from `BOOKING_RUN_MS` (unset: the
/// default 50 s).
pub fn run_limits(text: Option<&str>) -> Result<RunLimits, StartupError> {
    let mut limits = RunLimits::default();
    if let Some(text) = text {
        limits.run_for = match text.trim().parse::<u64>() {
            Ok(ms) if (1_000..=MAX_RUN.as_millis() as u64).contains(&ms) => {
                Duration::from_millis(ms)
            }
            _ => return Err(StartupError::RunFor(text.to_owned())),
        };
    }
    Ok(limits)
}

impl BookingWorker {
    /// Build the worker on AWS from the function's environment.
    pub async fn from_env(env: &Env, clients: &Clients) -> Result<Self, StartupError> {
        let operators = lifeboat_lookup::config::operators(env)?;
        let config = lifeboat_lookup::config::operator_config(env, clients).await?;
        let order_settings = OrderSettings::from_json(env.optional(ORDER_SETTINGS)?.unwrap_or(""))?;
        let limits = run_limits(env.optional(BOOKING_RUN_MS)?)?;
        // Every failed table or bus call counts in DependencyErrors.
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn Clock> = Arc::new(lifeboat_core::SystemClock);
        let breakers =
            clients.breaker_store(env, FailureCounter::new(metrics.clone(), clock.clone()))?;
        Ok(Self {
            orders: watch(Arc::new(clients.order_store(env)?), &metrics, &clock),
            requests: watch(Arc::new(clients.request_store(env)?), &metrics, &clock),
            breakers: watch(Arc::new(breakers), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            clock,
            metrics,
            operators,
            settings: config.settings()?,
            order_settings,
            limits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_run_is_the_templates() {
        let template = include_str!("../../../template.yaml");
        let block = template
            .split("\n  BookingRunMs:\n")
            .nth(1)
            .unwrap_or_default();
        let default = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("Default: "))
            .and_then(|d| d.parse::<u64>().ok());
        assert_eq!(
            default.map(Duration::from_millis),
            Some(RunLimits::default().run_for)
        );
        let max = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("MaxValue: "))
            .and_then(|d| d.parse::<u64>().ok());
        assert_eq!(max.map(Duration::from_millis), Some(MAX_RUN));
    }

    #[test]
    fn the_run_is_a_minute_at_most_and_fifty_seconds_by_default() {
        let default = run_limits(None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(default.run_for, Duration::from_secs(50));
        let given = run_limits(Some("20000")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(given.run_for, Duration::from_secs(20));
        for bad in ["0", "999", "55001", "fast", ""] {
            let e = run_limits(Some(bad)).map(|_| ()).unwrap_err();
            assert!(e.to_string().contains("BOOKING_RUN_MS"), "{bad}: {e}");
        }
    }
}
