//! The circuit switch: the single owner of breaker transitions.
//!
//! Woken by the CloudWatch alarm (both its EventBridge state-change event and
//! its direct Lambda action), by `Trip Requested` and `Trials Passed` from the
//! real consumer, by the schedule's tick, and by operator commands. For each
//! input it reads the operator's breaker, decides with
//! [`lifeboat_core::breaker::decide`], writes the next record conditionally on
//! the version it read (re-reading and re-deciding if another instance won),
//! then re-points the Requests stream and publishes `Breaker State Changed`.
//!
//! On AWS the breaker store writes each transition together with a
//! state-change item (the breaker's history, read by `lifeboat detection`)
//! in one transaction; see `lifeboat_aws::breaker`.
//!
//! Every invocation also reconciles: the stream mapping is pointed where the
//! stored states say it should be, and any state change whose event was not
//! published yet is published. So a crash between the state write and the
//! re-point or the publish is repaired by the next invocation (at the latest
//! the next tick), and the same input twice changes nothing.
//!
//! Requests flow in lanes ([`lifeboat_core::lane`]): a stream and its mapping
//! per operator, or one stream shared by several. A lane feeds the fallback
//! consumer only while every operator on it is open; otherwise the real
//! consumer, which fails requests for open operators fast by itself. Each
//! invocation reconciles only the lanes of the operators it decided for (the
//! tick: all of them).
//!
//! The switch reads only the breakers of the operators in `OPERATORS`, by key
//! (one batched read per tick and per reconcile), and refuses inputs for any
//! other operator: nothing it does grows with what else the Breaker table
//! holds.

pub mod input;
mod streams;
mod timers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use chrono::DateTime;
use lambda_runtime::Diagnostic;
use lifeboat_core::breaker::TripReason;
use lifeboat_core::breaker::{Decision, Input, decide};
use lifeboat_core::events::{BreakerStateChanged, LifeboatEvent, SCHEMA_VERSION};
use lifeboat_core::lane::Lanes;
use lifeboat_core::metrics::{MetricSet, MetricsSink, StdoutMetrics, Unit, names};
use lifeboat_core::ports::{
    BreakerStore, BreakerTimers, EventPublisher, OperatorApi, Repoint, RouterError, StoreError,
};
use lifeboat_core::probe::{BreakerTimer, next_wake};
use lifeboat_core::request::Health;
use lifeboat_core::settings::Settings;
use lifeboat_core::watched::watch;
use lifeboat_core::{BreakerRecord, BreakerState, Clock, ConsumerTarget, OperatorId};
use serde::Serialize;
use serde_json::Value;

use crate::input::{AlarmMap, InputError, SwitchInput};

/// The queue whose delayed messages wake the switch (`BreakerTimerQueue`).
pub const BREAKER_TIMER_QUEUE_URL: &str = "BREAKER_TIMER_QUEUE_URL";

/// Environment variable: which operator each errors alarm watches,
/// `alarm=operator,…`.
pub const ALARM_OPERATORS: &str = "ALARM_OPERATORS";

/// The name of the one lane of a gateway whose operators share a stream.
pub const SHARED_LANE: &str = "requests";

/// Attempts at a conditional write before giving up on a contended breaker.
const WRITE_ATTEMPTS: u32 = 5;
/// Attempts at re-pointing a mapping that is busy updating.
const REPOINT_ATTEMPTS: u32 = 4;
/// Re-points in one reconcile while breakers keep moving under it; the next
/// invocation (at the latest the tick) carries on from there.
const REPOINT_ROUNDS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("breaker store: {0}")]
    Store(#[from] StoreError),
    #[error("breaker of {0} kept changing under us; giving up after {WRITE_ATTEMPTS} attempts")]
    Contended(OperatorId),
    #[error("stream mapping: {0}")]
    Router(#[from] RouterError),
    #[error("operator {0} is not one of this gateway's OPERATORS")]
    UnknownOperator(OperatorId),
}

impl From<SwitchError> for Diagnostic {
    fn from(e: SwitchError) -> Self {
        let error_type = match &e {
            SwitchError::Input(InputError::UnknownAlarm(_)) => "UnknownAlarm",
            SwitchError::Input(_) => "BadInput",
            SwitchError::Store(_) => "StoreError",
            SwitchError::Contended(_) => "Contended",
            SwitchError::Router(_) => "RouterError",
            SwitchError::UnknownOperator(_) => "UnknownOperator",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

/// The function refuses to start, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] lifeboat_aws::ConfigError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Settings(#[from] lifeboat_core::settings::SettingsError),
    #[error("OPERATORS: {0}")]
    Operators(#[from] lifeboat_core::operator::InvalidOperatorId),
    #[error("OPERATORS names no operator: the switch has no breaker to keep")]
    NoOperators,
    #[error("ALARM_OPERATORS names {0}, which is not in OPERATORS")]
    AlarmForUnknownOperator(OperatorId),
    #[error("OPERATOR_ENDPOINTS: {0}")]
    Endpoints(#[from] lifeboat_operator::HttpApiError),
    #[error("the lanes of REQUESTS_TABLE_PREFIX: {0}")]
    Lanes(#[from] lifeboat_aws::LaneDiscoveryError),
}

/// Everything the switch needs, built once per Lambda instance.
pub struct CircuitSwitch {
    pub breakers: Arc<dyn BreakerStore>,
    pub events: Arc<dyn EventPublisher>,
    /// The streams of Requests and the operators each carries.
    pub lanes: Lanes,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub alarms: AlarmMap,
    /// The operators this gateway's stream serves: the only breakers the
    /// switch reads, ticks and moves.
    pub operators: Vec<OperatorId>,
    /// Pause between attempts at re-pointing a busy mapping.
    pub repoint_backoff: Duration,
    /// Each operator's breaker state after every invocation, as EMF lines.
    pub metrics: Arc<dyn MetricsSink>,
    /// Wake-ups at the end of open periods and for probes
    /// (`BREAKER_TIMER_QUEUE_URL`); `None`: only the tick ends open periods.
    pub timers: Option<Arc<dyn BreakerTimers>>,
    /// The operator API the switch probes open breakers with
    /// (`OPERATOR_ENDPOINTS`); only operators with a `probe` in their
    /// settings are probed.
    pub prober: Option<Arc<dyn OperatorApi>>,
}

/// What one invocation did: returned to direct callers (commands) and logged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SwitchReport {
    pub decisions: Vec<OperatorDecision>,
    /// Where the streams of the lanes this invocation reconciled point.
    pub streams: Vec<StreamReport>,
    pub announced: Vec<u64>,
    /// Probe calls made (half-open trials by the switch included).
    pub probe_calls: u32,
    /// With a batch from the timer queue: the timers to deliver again
    /// (Lambda reads `batchItemFailures`).
    #[serde(flatten)]
    pub response: SqsBatchResponse,
}

/// Where one lane's stream points after an invocation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamReport {
    pub lane: String,
    pub target: ConsumerTarget,
    /// Whether this invocation moved it.
    pub repointed: bool,
}

impl SwitchReport {
    /// Where `lane`'s stream points, if this invocation reconciled it.
    pub fn target_of(&self, lane: &str) -> Option<ConsumerTarget> {
        self.streams
            .iter()
            .find(|s| s.lane == lane)
            .map(|s| s.target)
    }

    /// Whether any stream was re-pointed.
    pub fn repointed(&self) -> bool {
        self.streams.iter().any(|s| s.repointed)
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OperatorDecision {
    pub operator: OperatorId,
    pub from: BreakerState,
    pub to: BreakerState,
    pub version: u64,
    /// Why it moved, or why it did not.
    pub reason: String,
    pub changed: bool,
}

impl CircuitSwitch {
    /// Build the switch on AWS from `BREAKER_TABLE`, `EVENT_BUS_NAME`,
    /// `REAL_CONSUMER_FUNCTION`, `FALLBACK_CONSUMER_FUNCTION`, the lanes, and
    /// the optional `ALARM_OPERATORS` (`alarm-name=operator,…`), `OPERATORS`
    /// (`nordic,baltic`, required) and `OPERATOR_SETTINGS`.
    ///
    /// Lanes: with `REQUESTS_TABLE_PREFIX` (a Requests table per operator),
    /// each operator's mapping is found among the consumers' event source
    /// mappings by its stream's table; otherwise one lane, the mapping
    /// `REQUESTS_MAPPING_UUID`, carries every operator.
    pub async fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
    ) -> Result<Self, StartupError> {
        let operators = env
            .optional("OPERATORS")?
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(OperatorId::new)
            .collect::<Result<Vec<_>, _>>()?;
        if operators.is_empty() {
            return Err(StartupError::NoOperators);
        }
        let alarms = AlarmMap::parse(env.optional(ALARM_OPERATORS)?.unwrap_or(""))?;
        if let Some(stray) = alarms.operators().find(|o| !operators.contains(o)) {
            return Err(StartupError::AlarmForUnknownOperator(stray.clone()));
        }
        let lanes = match env.optional(lifeboat_aws::REQUESTS_TABLE_PREFIX)? {
            Some(prefix) => {
                let tables = lifeboat_aws::RequestTables::PerOperator {
                    prefix: prefix.to_owned(),
                };
                lifeboat_aws::discover_lanes(
                    &clients.lambda,
                    &tables,
                    env.real_consumer_function()?,
                    env.fallback_consumer_function()?,
                    &operators,
                )
                .await?
            }
            None => Lanes::shared(
                SHARED_LANE,
                operators.clone(),
                Arc::new(clients.stream_router(env)?),
            ),
        };
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn Clock> = Arc::new(lifeboat_core::SystemClock);
        Ok(Self {
            breakers: watch(Arc::new(clients.breaker_store(env)?), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            lanes: lanes.watched(&metrics, &clock),
            settings: Settings::from_json(
                env.optional(lifeboat_core::settings::OPERATOR_SETTINGS)?
                    .unwrap_or(""),
            )?,
            alarms,
            operators,
            repoint_backoff: Duration::from_millis(500),
            timers: match env.optional(BREAKER_TIMER_QUEUE_URL)? {
                Some(url) => Some(watch(
                    Arc::new(clients.breaker_timers(url)),
                    &metrics,
                    &clock,
                )),
                None => None,
            },
            clock,
            metrics,
            prober: match env.optional(lifeboat_operator::OPERATOR_ENDPOINTS)? {
                Some(endpoints) => Some(Arc::new(lifeboat_operator::HttpOperatorApi::parse(
                    endpoints,
                )?)),
                None => None,
            },
        })
    }

    /// Handle one payload.
    pub async fn handle(&self, payload: &Value) -> Result<SwitchReport, SwitchError> {
        let parsed = input::parse(payload, &self.alarms)?;
        let mut report = SwitchReport::default();
        match parsed {
            SwitchInput::One { operator, input } => {
                if !self.operators.contains(&operator) {
                    tracing::warn!(operator = %operator, "input for an operator not in OPERATORS refused");
                    return Err(SwitchError::UnknownOperator(operator));
                }
                report
                    .decisions
                    .push(self.apply(&operator, &input, None).await?);
            }
            SwitchInput::Tick => {
                // One batched read of every configured breaker by key; only
                // a breaker the tick moves is read again to write it.
                let mut stored: HashMap<OperatorId, BreakerRecord> = self
                    .breakers
                    .load_many(&self.operators)
                    .await?
                    .into_iter()
                    .map(|r| (r.operator.clone(), r))
                    .collect();
                for operator in &self.operators {
                    let read = stored.remove(operator);
                    if let Some(record) = &read
                        && self.timer_owns(record)
                    {
                        report.decisions.push(OperatorDecision {
                            operator: operator.clone(),
                            from: record.state,
                            to: record.state,
                            version: record.version,
                            reason: "open: its probe timer ends the period".to_owned(),
                            changed: false,
                        });
                        continue;
                    }
                    report
                        .decisions
                        .push(self.apply(operator, &Input::Tick, Some(read)).await?);
                }
            }
            SwitchInput::Timers(timers) => {
                for (message_id, timer) in timers {
                    match timer {
                        Err(why) => {
                            tracing::warn!(message_id, why, "timer message dropped");
                        }
                        Ok(timer) if !self.operators.contains(&timer.operator) => {
                            tracing::warn!(operator = %timer.operator, message_id, "timer for an operator not in OPERATORS dropped");
                        }
                        Ok(timer) => {
                            if let Err(e) = self.on_timer(&timer, &mut report).await {
                                tracing::error!(operator = %timer.operator, version = timer.version, error = %e, "timer not handled; it comes back");
                                report.response.add_failure(message_id);
                            }
                        }
                    }
                }
            }
        }
        self.follow_up(&mut report).await?;
        self.reconcile(&mut report).await?;
        // The state after every invocation (the tick included), so the
        // metric draws each operator's state as a continuous line.
        let sets: Vec<MetricSet> = report
            .decisions
            .iter()
            .map(|d| {
                MetricSet::new()
                    .dimension("Operator", d.operator.as_str())
                    .dimension("State", d.to.as_str())
                    .metric(
                        names::BREAKER_STATE,
                        Unit::None,
                        f64::from(d.to.metric_value()),
                    )
            })
            .collect();
        self.metrics.emit(&sets, self.clock.now());
        Ok(report)
    }

    /// Decide and persist one input for one operator. `read` is the stored
    /// breaker when the caller has just read it (`Some(None)`: none stored);
    /// otherwise it is read here.
    async fn apply(
        &self,
        operator: &OperatorId,
        input: &Input,
        mut read: Option<Option<BreakerRecord>>,
    ) -> Result<OperatorDecision, SwitchError> {
        let cfg = self.settings.for_operator(operator).breaker;
        for _ in 0..WRITE_ATTEMPTS {
            let stored = match read.take() {
                Some(stored) => stored,
                None => self.breakers.load(operator).await?,
            };
            let expected = stored.as_ref().map(|r| r.version);
            let now = self.clock.now();
            // A breaker never stored has been closed since forever, so any alarm
            // or trip is newer than its state.
            let current = stored
                .unwrap_or_else(|| BreakerRecord::initial(operator.clone(), DateTime::UNIX_EPOCH));
            match decide(&current, input, now, &cfg) {
                Decision::Unchanged(why) => {
                    tracing::info!(operator = %operator, state = %current.state, version = current.version, why, "no change");
                    return Ok(OperatorDecision {
                        operator: operator.clone(),
                        from: current.state,
                        to: current.state,
                        version: current.version,
                        reason: why.to_owned(),
                        changed: false,
                    });
                }
                Decision::Transition(next) => match self.breakers.save(&next, expected).await {
                    Ok(()) => {
                        tracing::warn!(
                            operator = %operator,
                            from = %current.state,
                            state = %next.state,
                            version = next.version,
                            reason = %next.reason,
                            open_until = ?next.open_until,
                            "breaker state changed"
                        );
                        return Ok(OperatorDecision {
                            operator: operator.clone(),
                            from: current.state,
                            to: next.state,
                            version: next.version,
                            reason: next.reason,
                            changed: true,
                        });
                    }
                    Err(StoreError::Conflict(why)) => {
                        tracing::info!(operator = %operator, version = current.version, why = %why, "lost a race; deciding again");
                    }
                    Err(e) => return Err(e.into()),
                },
            }
        }
        Err(SwitchError::Contended(operator.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use lifeboat_core::ManualClock;
    use lifeboat_core::memory::{
        MemoryBreakerStore, MemoryEventBus, MemoryStreamRouter, MemoryTimers,
    };
    use lifeboat_core::ports::StreamRouter;
    use serde_json::json;

    struct World {
        switch: Arc<CircuitSwitch>,
        breakers: Arc<MemoryBreakerStore>,
        events: Arc<MemoryEventBus>,
        router: Arc<MemoryStreamRouter>,
        clock: ManualClock,
        metrics: Arc<lifeboat_core::metrics::MemoryMetrics>,
    }

    fn start() -> DateTime<chrono::Utc> {
        DateTime::from_timestamp(1_796_032_800, 0).unwrap()
    }

    fn world() -> World {
        let breakers = Arc::new(MemoryBreakerStore::new());
        let events = Arc::new(MemoryEventBus::new());
        let router = Arc::new(MemoryStreamRouter::new());
        let clock = ManualClock::new(start());
        let metrics = Arc::new(lifeboat_core::metrics::MemoryMetrics::new());
        let switch = Arc::new(CircuitSwitch {
            breakers: breakers.clone(),
            events: events.clone(),
            lanes: Lanes::shared(SHARED_LANE, vec![nordic()], router.clone()),
            clock: Arc::new(clock.clone()),
            settings: Settings::default(),
            alarms: AlarmMap::parse("lifeboat-nordic-errors=nordic").unwrap(),
            operators: vec![OperatorId::new("nordic").unwrap()],
            repoint_backoff: Duration::ZERO,
            metrics: metrics.clone(),
            timers: None,
            prober: None,
        });
        World {
            switch,
            breakers,
            events,
            router,
            clock,
            metrics,
        }
    }

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn trip(version: u64) -> Value {
        json!({
            "version": "0", "id": "e1", "detail-type": "Trip Requested", "source": "lifeboat",
            "account": "123456789012", "time": "2026-11-30T12:00:00Z", "region": "us-east-1", "resources": [],
            "detail": {"schema_version": 1, "operator": "nordic", "observed_version": version,
                       "reason": {"kind": "window", "verdict": {"rule": "consecutive_timeouts", "count": 5}},
                       "at": "2026-11-30T12:00:00Z"}
        })
    }

    fn tick() -> Value {
        json!({"version": "0", "id": "t", "detail-type": "Scheduled Event", "source": "aws.events",
               "account": "123456789012", "time": "2026-11-30T12:00:00Z", "region": "us-east-1",
               "resources": ["arn:aws:events:us-east-1:123456789012:rule/tick"], "detail": {}})
    }

    fn alarm_action(state: &str, at: &str) -> Value {
        json!({"source": "aws.cloudwatch", "alarmArn": "arn:aws:cloudwatch:us-east-1:123456789012:alarm:lifeboat-nordic-errors",
               "accountId": "123456789012", "time": at, "region": "us-east-1",
               "alarmData": {"alarmName": "lifeboat-nordic-errors",
                             "state": {"value": state, "reason": "threshold crossed", "timestamp": at},
                             "previousState": {"value": "OK", "reason": "", "timestamp": at}}})
    }

    fn alarm_event(state: &str, at: &str) -> Value {
        json!({"version": "0", "id": "a", "detail-type": "CloudWatch Alarm State Change", "source": "aws.cloudwatch",
               "account": "123456789012", "time": at, "region": "us-east-1",
               "resources": ["arn:aws:cloudwatch:us-east-1:123456789012:alarm:lifeboat-nordic-errors"],
               "detail": {"alarmName": "lifeboat-nordic-errors", "state": {"value": state, "timestamp": at},
                          "previousState": {"value": "OK", "timestamp": at}}})
    }

    fn state_changes(events: &MemoryEventBus) -> Vec<(BreakerState, BreakerState, u64)> {
        events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                LifeboatEvent::BreakerStateChanged(c) => Some((c.from, c.to, c.version)),
                _ => None,
            })
            .collect()
    }

    async fn state(w: &World) -> BreakerRecord {
        w.breakers.load(&nordic()).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn a_trip_opens_repoints_and_announces_once() {
        let w = world();
        let report = w.switch.handle(&trip(0)).await.unwrap();
        assert!(report.decisions[0].changed);
        assert_eq!(
            report.target_of(SHARED_LANE),
            Some(ConsumerTarget::Fallback)
        );
        assert!(report.repointed());
        assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Fallback);
        let record = state(&w).await;
        assert_eq!(
            (record.state, record.version, record.announced_version),
            (BreakerState::Open, 1, 1)
        );

        // The same event again changes nothing and announces nothing.
        let again = w.switch.handle(&trip(0)).await.unwrap();
        assert!(!again.decisions[0].changed);
        assert!(!again.repointed());
        assert_eq!(
            state_changes(&w.events),
            vec![(BreakerState::Closed, BreakerState::Open, 1)]
        );

        // Both invocations drew the state: open (2) with its name.
        let open = w.metrics.sum(
            lifeboat_core::metrics::names::BREAKER_STATE,
            &[("Operator", "nordic"), ("State", "open")],
        );
        assert_eq!((open, w.metrics.lines().len()), (4.0, 2));
    }

    #[tokio::test]
    async fn recovery_goes_through_half_open_and_points_back() {
        let w = world();
        w.switch.handle(&trip(0)).await.unwrap();
        // An OK alarm while open does not close it.
        w.switch
            .handle(&alarm_event("OK", "2026-11-30T12:00:05.000+0000"))
            .await
            .unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Open);
        // A tick before the open period ends changes nothing.
        w.clock.advance(Duration::from_secs(5));
        w.switch.handle(&tick()).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Open);
        w.clock.advance(Duration::from_secs(30));
        let report = w.switch.handle(&tick()).await.unwrap();
        assert_eq!(report.target_of(SHARED_LANE), Some(ConsumerTarget::Real));
        let half = state(&w).await;
        assert_eq!(half.state, BreakerState::HalfOpen);
        // Trials counted by the consumers, then reported.
        assert!(
            w.breakers
                .claim_trial(&nordic(), half.version, 3)
                .await
                .unwrap()
        );
        assert!(
            w.breakers
                .claim_trial(&nordic(), half.version, 3)
                .await
                .unwrap()
        );
        w.breakers
            .record_trial(&nordic(), half.version, true)
            .await
            .unwrap();
        w.breakers
            .record_trial(&nordic(), half.version, true)
            .await
            .unwrap();
        let passed = json!({"detail-type": "Trials Passed", "source": "lifeboat",
            "detail": {"schema_version": 1, "operator": "nordic", "observed_version": half.version, "successes": 2,
                       "at": "2026-11-30T12:00:40Z"}});
        w.switch.handle(&passed).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Closed);
        assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
        assert_eq!(
            state_changes(&w.events),
            vec![
                (BreakerState::Closed, BreakerState::Open, 1),
                (BreakerState::Open, BreakerState::HalfOpen, 2),
                (BreakerState::HalfOpen, BreakerState::Closed, 3)
            ]
        );
        // The trip request from before the outage, delivered late, is ignored.
        w.switch.handle(&trip(0)).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Closed);
    }

    #[tokio::test]
    async fn both_alarm_shapes_open_and_a_late_alarm_does_not_reopen() {
        for payload in [
            alarm_action("ALARM", "2026-11-30T12:00:00.000+0000"),
            alarm_event("ALARM", "2026-11-30T12:00:00.000+0000"),
        ] {
            let w = world();
            // The alarm fired a while ago; the breaker was never stored: it opens.
            w.clock
                .set(DateTime::from_timestamp(1_796_100_000, 0).unwrap());
            let report = w.switch.handle(&payload).await.unwrap();
            assert!(report.decisions[0].changed, "{payload}");
            assert_eq!(state(&w).await.state, BreakerState::Open);
        }
        // An alarm older than the current state is ignored.
        let w = world();
        w.switch
            .handle(&json!({"command": "force-closed", "operator": "nordic", "reason": "test"}))
            .await
            .unwrap();
        w.switch
            .handle(&json!({"command": "release", "operator": "nordic", "reason": "test"}))
            .await
            .unwrap();
        let old = (start() - TimeDelta::hours(1))
            .format("%Y-%m-%dT%H:%M:%S%.3f+0000")
            .to_string();
        let report = w.switch.handle(&alarm_action("ALARM", &old)).await.unwrap();
        assert!(!report.decisions[0].changed);
    }

    #[tokio::test]
    async fn commands_pin_and_release() {
        let w = world();
        let cmd =
            |c: &str| json!({"command": c, "operator": "nordic", "reason": "supplier maintenance"});
        w.switch.handle(&cmd("force-open")).await.unwrap();
        assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Fallback);
        w.clock.advance(Duration::from_secs(3600));
        w.switch.handle(&tick()).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::ForcedOpen);
        assert!(state(&w).await.reason.contains("supplier maintenance"));
        w.switch.handle(&cmd("release")).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::HalfOpen);
        assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
    }

    #[tokio::test]
    async fn concurrent_switches_make_one_transition() {
        let w = world();
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let switch = w.switch.clone();
            tasks.push(tokio::spawn(async move {
                switch.handle(&trip(0)).await.unwrap()
            }));
        }
        let mut changed = 0;
        for t in tasks {
            changed += t
                .await
                .unwrap()
                .decisions
                .iter()
                .filter(|d| d.changed)
                .count();
        }
        assert_eq!(changed, 1);
        assert_eq!(state(&w).await.version, 1);
        assert_eq!(state_changes(&w.events).len(), 1);
    }

    /// A stream router on which another switch invocation runs to the end
    /// just before the first re-point to `slow_target` lands: the
    /// interleaving of two switches on AWS, where `UpdateEventSourceMapping`
    /// calls land in any order.
    struct OvertakenRouter {
        inner: Arc<MemoryStreamRouter>,
        slow_target: ConsumerTarget,
        overtaker: std::sync::Mutex<Option<(Arc<CircuitSwitch>, Value)>>,
    }

    #[async_trait::async_trait]
    impl StreamRouter for OvertakenRouter {
        async fn current(&self) -> Result<ConsumerTarget, RouterError> {
            self.inner.current().await
        }

        async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
            let overtaker = if target == self.slow_target {
                self.overtaker.lock().unwrap().take()
            } else {
                None
            };
            if let Some((switch, payload)) = overtaker {
                switch.handle(&payload).await.unwrap();
            }
            self.inner.point_at(target).await
        }
    }

    #[tokio::test]
    async fn a_re_point_from_a_stale_read_is_put_right() {
        // Switch B (on the plain router) forces the breaker closed and points
        // the stream at the real consumer while switch A, which read the
        // breaker open, is still re-pointing at the fallback; A's re-point
        // lands last.
        let w = world();
        let overtaking = switch_like(&w);
        let slow = CircuitSwitch {
            lanes: Lanes::shared(
                SHARED_LANE,
                vec![nordic()],
                Arc::new(OvertakenRouter {
                    inner: w.router.clone(),
                    slow_target: ConsumerTarget::Fallback,
                    overtaker: std::sync::Mutex::new(Some((
                        Arc::new(overtaking),
                        json!({"command": "force-closed", "operator": "nordic", "reason": "operator says it is fine"}),
                    ))),
                }),
            ),
            ..switch_like(&w)
        };
        let report = slow.handle(&trip(0)).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::ForcedClosed);
        assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
        assert_eq!(report.target_of(SHARED_LANE), Some(ConsumerTarget::Real));
        // The newest state was announced once (the record holds only the
        // newest; the opening it replaced before anyone announced it is in
        // the store's history, not on the bus).
        assert_eq!(
            state_changes(&w.events),
            vec![(BreakerState::Open, BreakerState::ForcedClosed, 2)]
        );
    }

    /// A mapping that cannot be reached.
    struct BrokenRouter;

    #[async_trait::async_trait]
    impl StreamRouter for BrokenRouter {
        async fn current(&self) -> Result<ConsumerTarget, RouterError> {
            Err(RouterError::Unavailable("throttled".into()))
        }

        async fn point_at(&self, _: ConsumerTarget) -> Result<Repoint, RouterError> {
            Err(RouterError::Unavailable("throttled".into()))
        }
    }

    #[tokio::test]
    async fn with_a_lane_per_operator_only_the_tripped_operator_moves() {
        let w = world();
        let (alpha, bravo, charlie) = (
            OperatorId::new("alpha").unwrap(),
            OperatorId::new("bravo").unwrap(),
            OperatorId::new("charlie").unwrap(),
        );
        let (alpha_lane, bravo_lane) = (
            Arc::new(MemoryStreamRouter::new()),
            Arc::new(MemoryStreamRouter::new()),
        );
        let routers: [(OperatorId, Arc<dyn StreamRouter>); 3] = [
            (alpha.clone(), alpha_lane.clone()),
            (bravo.clone(), bravo_lane.clone()),
            (charlie.clone(), Arc::new(BrokenRouter)),
        ];
        let switch = CircuitSwitch {
            lanes: Lanes::per_operator(routers),
            operators: vec![alpha.clone(), bravo.clone(), charlie.clone()],
            ..switch_like(&w)
        };
        let trip = |operator: &str| {
            let mut event = trip(0);
            event["detail"]["operator"] = json!(operator);
            event
        };
        let report = switch.handle(&trip("alpha")).await.unwrap();
        assert_eq!(report.target_of("alpha"), Some(ConsumerTarget::Fallback));
        assert_eq!(report.streams.len(), 1, "only alpha's lane is reconciled");
        assert_eq!(
            alpha_lane.current().await.unwrap(),
            ConsumerTarget::Fallback
        );
        assert_eq!(bravo_lane.current().await.unwrap(), ConsumerTarget::Real);

        // Charlie's mapping is unreachable: its trip is saved and announced,
        // the error returned, and the next tick still reconciles the others.
        let failed = switch.handle(&trip("charlie")).await;
        assert!(matches!(failed, Err(SwitchError::Router(_))), "{failed:?}");
        let announced: Vec<OperatorId> = w
            .events
            .events()
            .iter()
            .filter_map(|e| match e {
                LifeboatEvent::BreakerStateChanged(c) => Some(c.operator.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(announced, vec![alpha.clone(), charlie.clone()]);
        let tick = switch.handle(&tick()).await;
        assert!(tick.is_err());
        assert_eq!(
            alpha_lane.current().await.unwrap(),
            ConsumerTarget::Fallback
        );
        assert_eq!(bravo_lane.current().await.unwrap(), ConsumerTarget::Real);
    }

    #[tokio::test]
    async fn inputs_for_operators_not_served_are_refused() {
        let w = world();
        let mut forged = trip(0);
        forged["detail"]["operator"] = json!("zzz");
        let err = w.switch.handle(&forged).await.unwrap_err();
        assert!(matches!(err, SwitchError::UnknownOperator(_)), "{err}");
        assert_eq!(Diagnostic::from(err).error_type, "UnknownOperator");
        let command = json!({"command": "force-open", "operator": "zzz", "reason": "test"});
        assert!(w.switch.handle(&command).await.is_err());
        // Nothing was stored for it, and the tick never sees it.
        let zzz = OperatorId::new("zzz").unwrap();
        assert_eq!(w.breakers.load(&zzz).await.unwrap(), None);
        let report = w.switch.handle(&tick()).await.unwrap();
        assert_eq!(report.decisions.len(), 1);
        assert_eq!(report.decisions[0].operator, nordic());
    }

    /// The switch with timers and the simulated operator as its prober, the
    /// operator refusing every call from `start()` for `outage`.
    fn probing_world(outage: Duration) -> (World, Arc<CircuitSwitch>, Arc<MemoryTimers>) {
        let w = world();
        let timers = Arc::new(MemoryTimers::new());
        let mut settings = Settings::default();
        settings.default.probe = Some(
            serde_json::from_value(json!({"operation": "search",
                "params": {"from": "HEL", "to": "TLL", "date": "today+7", "passengers": "1"}}))
            .unwrap(),
        );
        let operator = lifeboat_operator::SimulatedOperator::new(
            nordic(),
            lifeboat_operator::SimConfig {
                outages: vec![lifeboat_operator::Outage {
                    start: start(),
                    end: start() + TimeDelta::from_std(outage).unwrap(),
                    mode: lifeboat_operator::OutageMode::Refuse,
                }],
                ..lifeboat_operator::SimConfig::default()
            },
            Arc::new(w.clock.clone()),
        );
        let switch = Arc::new(CircuitSwitch {
            settings,
            timers: Some(timers.clone()),
            prober: Some(Arc::new(operator)),
            ..switch_like(&w)
        });
        (w, switch, timers)
    }

    fn timer_batch(timers: &[BreakerTimer]) -> Value {
        json!({"Records": timers.iter().enumerate().map(|(i, t)| json!({
            "eventSource": "aws:sqs", "messageId": format!("m{i}"),
            "body": serde_json::to_string(t).unwrap()
        })).collect::<Vec<_>>()})
    }

    #[tokio::test(start_paused = true)]
    async fn probes_close_the_breaker_within_seconds_of_the_operator_coming_back() {
        // Down for 95 s: the open period (30 s, then doubling) would keep the
        // breaker open well past that; one probe per 10 s finds it back.
        let (w, switch, timers) = probing_world(Duration::from_secs(95));
        switch.handle(&trip(0)).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Open);
        let mut probes = Vec::new();
        for _ in 0..30 {
            let Some(due) = timers.next_due() else { break };
            w.clock.set(due);
            let batch = timers.take_due(due);
            assert_eq!(batch.len(), 1, "one timer per breaker at a time");
            let report = switch.handle(&timer_batch(&batch)).await.unwrap();
            if report.probe_calls > 0 {
                probes.push((due, report.probe_calls));
            }
            if state(&w).await.state == BreakerState::Closed {
                break;
            }
        }
        let closed = state(&w).await;
        assert_eq!(closed.state, BreakerState::Closed, "{closed:?}");
        let back = start() + TimeDelta::seconds(95);
        let recovery = (closed.since - back).num_milliseconds() as f64 / 1000.0;
        eprintln!(
            "probes: operator back -> closed {recovery:.1} s; probe calls {} ({} while down, over {:.0} s)",
            probes.iter().map(|(_, n)| n).sum::<u32>(),
            probes.iter().filter(|(at, _)| *at < back).count(),
            (back - start()).num_seconds()
        );
        assert!(
            recovery <= 10.0,
            "closed {recovery} s after the operator came back"
        );
        // While down: at most one probe call per 10 s (the half-open rounds
        // the open period's end starts make one trial call that fails).
        let while_down: Vec<_> = probes.iter().filter(|(at, _)| *at < back).collect();
        for pair in while_down.windows(2) {
            assert!(
                pair[1].0 - pair[0].0 >= TimeDelta::seconds(10),
                "{probes:?}"
            );
        }
        assert!(
            while_down.iter().all(|(_, calls)| *calls == 1),
            "{probes:?}"
        );
        assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
        assert_eq!(timers.next_due(), None, "nothing left to wake for");
    }

    #[tokio::test(start_paused = true)]
    async fn a_duplicated_timer_probes_once_and_leaves_one_timer() {
        // Down for ten minutes: every timer is a probe that fails.
        let (w, switch, timers) = probing_world(Duration::from_secs(600));
        switch.handle(&trip(0)).await.unwrap();
        let mut due = timers.next_due().unwrap();
        for _ in 0..5 {
            w.clock.set(due);
            let batch = timers.take_due(due);
            assert_eq!(batch.len(), 1, "one timer per breaker at a time");
            // Delivered twice (SQS delivers at least once): two invocations,
            // and the duplicate a second later.
            let first = switch.handle(&timer_batch(&batch)).await.unwrap();
            w.clock.set(due + TimeDelta::seconds(1));
            let again = switch.handle(&timer_batch(&batch)).await.unwrap();
            assert_eq!((first.probe_calls, again.probe_calls), (1, 0));
            let next = timers.next_due().unwrap();
            assert!(next - due >= TimeDelta::seconds(10), "{next} after {due}");
            assert_eq!(timers.take_due(next).len(), 1, "the duplicate set no timer");
            // Put the one timer back, as SQS would hold it.
            switch.arm(&state(&w).await).await;
            due = timers.next_due().unwrap();
        }
        assert_eq!(state(&w).await.state, BreakerState::Open);
    }

    #[tokio::test]
    async fn without_probes_the_timer_ends_the_open_period_to_the_second() {
        let w = world();
        let timers = Arc::new(MemoryTimers::new());
        let switch = CircuitSwitch {
            timers: Some(timers.clone()),
            ..switch_like(&w)
        };
        switch.handle(&trip(0)).await.unwrap();
        let open = state(&w).await;
        let due = timers.next_due().unwrap();
        assert_eq!(Some(due), open.open_until);
        // Early (a duplicate delivered before its delay): set again, no change.
        let early = BreakerTimer {
            operator: nordic(),
            version: open.version,
            due,
        };
        let report = switch
            .handle(&timer_batch(std::slice::from_ref(&early)))
            .await
            .unwrap();
        assert!(report.decisions.is_empty());
        w.clock.set(due);
        timers.take_due(due);
        let report = switch
            .handle(&timer_batch(std::slice::from_ref(&early)))
            .await
            .unwrap();
        assert_eq!(report.decisions[0].to, BreakerState::HalfOpen);
        // The half-open round's own timer, and a stale one that is dropped.
        assert!(timers.next_due().is_some());
        let report = switch.handle(&timer_batch(&[early])).await.unwrap();
        assert!(report.decisions.is_empty());
        // A body that is no timer is dropped, not retried; a timer of an
        // operator not served neither.
        let junk = json!({"Records": [
            {"eventSource": "aws:sqs", "messageId": "j", "body": "hello"},
            {"eventSource": "aws:sqs", "messageId": "z",
             "body": r#"{"operator": "zzz", "version": 1, "due": "2026-12-01T00:00:00Z"}"#}
        ]});
        let report = switch.handle(&junk).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
    }

    fn switch_like(w: &World) -> CircuitSwitch {
        CircuitSwitch {
            breakers: w.breakers.clone(),
            events: w.events.clone(),
            lanes: Lanes::shared(SHARED_LANE, vec![nordic()], w.router.clone()),
            clock: Arc::new(w.clock.clone()),
            settings: Settings::default(),
            alarms: AlarmMap::default(),
            operators: vec![nordic()],
            repoint_backoff: Duration::ZERO,
            metrics: w.metrics.clone(),
            timers: None,
            prober: None,
        }
    }

    #[tokio::test]
    async fn bad_payloads_are_clear_errors() {
        let w = world();
        let unknown = alarm_action("ALARM", "2026-11-30T12:00:00.000+0000");
        let mut unknown = unknown;
        unknown["alarmData"]["alarmName"] = json!("someone-elses-alarm");
        let err = w.switch.handle(&unknown).await.unwrap_err();
        assert!(err.to_string().contains("ALARM_OPERATORS"), "{err}");
        assert!(w.switch.handle(&json!({"foo": "bar"})).await.is_err());
        let diagnostic: Diagnostic = w.switch.handle(&json!([1, 2])).await.unwrap_err().into();
        assert_eq!(diagnostic.error_type, "BadInput");
    }

    fn fixture(name: &str) -> Value {
        let path = format!("{}/../../tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn every_fixture_payload_is_understood() {
        // Each alarm shape opens a fresh breaker.
        for name in [
            "cloudwatch-alarm-state-change.json",
            "cloudwatch-alarm-lambda-action.json",
        ] {
            let w = world();
            w.clock
                .set(DateTime::from_timestamp(1_796_033_760, 0).unwrap());
            let report = w.switch.handle(&fixture(name)).await.unwrap();
            assert_eq!(report.decisions[0].to, BreakerState::Open, "{name}");
        }
        // A trip, a tick after the open period, trials, and a command, in order.
        let w = world();
        w.switch
            .handle(&fixture("trip-requested.json"))
            .await
            .unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Open);
        w.clock.advance(Duration::from_secs(31));
        w.switch
            .handle(&fixture("schedule-tick.json"))
            .await
            .unwrap();
        let half = state(&w).await;
        assert_eq!(half.state, BreakerState::HalfOpen);
        let mut passed = fixture("trials-passed.json");
        passed["detail"]["observed_version"] = half.version.into();
        w.breakers
            .record_trial(&nordic(), half.version, true)
            .await
            .unwrap();
        w.breakers
            .record_trial(&nordic(), half.version, true)
            .await
            .unwrap();
        w.switch.handle(&passed).await.unwrap();
        assert_eq!(state(&w).await.state, BreakerState::Closed);
        // The timer of version 1, long stale: dropped, acknowledged.
        let report = w
            .switch
            .handle(&fixture("sqs-breaker-timer.json"))
            .await
            .unwrap();
        assert!(report.decisions.is_empty());
        assert!(report.response.batch_item_failures.is_empty());
        w.switch
            .handle(&fixture("operator-command.json"))
            .await
            .unwrap();
        let forced = state(&w).await;
        assert_eq!(forced.state, BreakerState::ForcedOpen);
        assert!(forced.reason.contains("maintenance window"));
    }
}
