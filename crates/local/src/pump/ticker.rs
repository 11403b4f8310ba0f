//! An EventBridge schedule rule (`rate(…)`) targeting a Lambda: [`Ticker`]
//! invokes the function with a "Scheduled Event" every period, the payload
//! EventBridge sends for a rule without `Input` (tests/events/schedule-tick.json).
//!
//! One invocation at a time, as a function with a reserved concurrency of
//! one runs: a tick that comes due while the last run goes on is sent when
//! it ends. EventBridge invokes its target asynchronously and never waits
//! for the run, so stopping the ticker does not wait for it either: the
//! run in flight goes on until the functions are stopped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use tokio::time::MissedTickBehavior;

use super::task::{StopSignal, TaskHandle};
use super::{Invoker, lock};

/// How a [`Ticker`] runs.
#[derive(Debug, Clone)]
pub struct TickerConfig {
    /// The function the rule targets (its binary name).
    pub function: String,
    /// The rule's rate. The first tick comes one period after the start.
    pub every: Duration,
    /// The rule's ARN, in the event's `resources`.
    pub rule_arn: String,
    pub account: String,
    pub region: String,
}

impl TickerConfig {
    pub fn new(function: impl Into<String>, every: Duration, rule_name: &str) -> Self {
        let account = crate::moto::ACCOUNT_ID;
        let region = crate::moto::REGION;
        Self {
            function: function.into(),
            every,
            rule_arn: format!("arn:aws:events:{region}:{account}:rule/{rule_name}"),
            account: account.to_owned(),
            region: region.to_owned(),
        }
    }
}

/// What a [`Ticker`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickerStats {
    pub ticks: u64,
    pub failed: u64,
    pub last_error: Option<String>,
}

/// The scheduled event of a tick at `time`.
pub fn schedule_event(config: &TickerConfig, id: &str, time: DateTime<Utc>) -> Value {
    json!({
        "version": "0",
        "id": id,
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": config.account,
        "time": time.to_rfc3339_opts(SecondsFormat::Secs, true),
        "region": config.region,
        "resources": [config.rule_arn],
        "detail": {}
    })
}

/// Invokes a function on a schedule; see the module docs.
#[derive(Debug)]
pub struct Ticker {
    task: TaskHandle,
    stats: Arc<Mutex<TickerStats>>,
}

impl Ticker {
    pub fn start(invoker: Invoker, config: TickerConfig) -> Self {
        let stats = Arc::new(Mutex::new(TickerStats::default()));
        let shared = Arc::clone(&stats);
        let task = TaskHandle::spawn(move |stop| run(invoker, config, shared, stop));
        Self { task, stats }
    }

    pub fn stats(&self) -> TickerStats {
        lock(&self.stats).clone()
    }

    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stop ticking; an invocation in flight is not waited for (see the
    /// module docs).
    pub async fn stop(self) {
        self.task.stop().await;
    }
}

async fn run(
    invoker: Invoker,
    config: TickerConfig,
    stats: Arc<Mutex<TickerStats>>,
    mut stop: StopSignal,
) {
    let every = config.every.max(Duration::from_millis(10));
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.stopped() => return,
            _ = interval.tick() => {}
        }
        let event = schedule_event(&config, &uuid::Uuid::new_v4().to_string(), Utc::now());
        let result = tokio::select! {
            () = stop.stopped() => return,
            result = invoker.invoke(&config.function, &event) => result,
        };
        let mut stats = lock(&stats);
        stats.ticks += 1;
        if let Err(e) = result {
            tracing::warn!(error = %e, "scheduled invocation failed");
            stats.failed += 1;
            stats.last_error = Some(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture of the schedule's payload, as EventBridge sends it.
    const FIXTURE: &str = include_str!("../../../../tests/events/schedule-tick.json");

    fn keys(v: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = v
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn ticks_look_like_the_fixture() {
        let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
        let config = TickerConfig::new(
            "circuit-switch",
            Duration::from_secs(60),
            "lifeboat-HalfOpenScheduleRule-3JkLmNoPqRsT",
        );
        let at = DateTime::parse_from_rfc3339("2026-11-30T10:16:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let tick = schedule_event(&config, "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6", at);
        assert_eq!(keys(&tick), keys(&fixture));
        assert_eq!(tick, fixture);
    }
}
