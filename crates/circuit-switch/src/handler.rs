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

pub mod capacity;
pub mod input;
mod streams;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use chrono::DateTime;
use lambda_runtime::Diagnostic;
use lifeboat_core::breaker::TripReason;
use lifeboat_core::breaker::{Decision, Input, decide};
use lifeboat_core::corroborate::{self, NotCorroborated};
use lifeboat_core::lane::Lanes;
use lifeboat_core::metrics::{MetricSet, StdoutMetrics, Unit, names};
use lifeboat_core::ports::{
    AlarmContributors, BreakerStore, BreakerTimers, Clock, EventPublisher, MetricsSink,
    OperatorApi, RouterError, StoreError, WindowStore,
};
use lifeboat_core::settings::Settings;
use lifeboat_core::watched::watch;
use lifeboat_core::{BreakerRecord, BreakerState, ConsumerTarget, OperatorId};
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
/// Lanes the tick looks at each minute whatever their marks say (see
/// `streams::sweep_slice`): a GetEventSourceMapping each, so that a
/// mapping changed by hand is found within `lanes / 10` minutes at a
/// constant cost per tick.
pub const SWEEP_LANES_PER_TICK: usize = 10;

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
    /// A contributor alarm's operators could not be read, or the switch
    /// has no way to read them.
    #[error("contributor alarm {alarm}: {why}")]
    Contributors { alarm: String, why: String },
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
            SwitchError::Contributors { .. } => "AlarmContributors",
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
    /// The endpoints or settings, from the environment or the operator
    /// config table.
    #[error(transparent)]
    OperatorConfig(#[from] lifeboat_core::operator_config::OperatorConfigError),
    #[error("OPERATORS: {0}")]
    Operators(#[from] lifeboat_core::operator::InvalidOperatorId),
    #[error("OPERATORS names no operator: the switch has no breaker to keep")]
    NoOperators,
    #[error("ALARM_OPERATORS names {0}, which is not in OPERATORS")]
    AlarmForUnknownOperator(OperatorId),
    #[error("{from}: {source}")]
    Endpoints {
        from: lifeboat_core::operator_config::Source,
        #[source]
        source: lifeboat_operator::HttpApiError,
    },
    #[error("the lanes of REQUESTS_TABLE_PREFIX: {0}")]
    Lanes(#[from] lifeboat_aws::LaneDiscoveryError),
}

/// Everything the switch needs, built once per Lambda instance:
/// [`CircuitSwitch::new`] with its ports, then `with_…` for what a
/// deployment (or a test) may add.
pub struct CircuitSwitch {
    pub(crate) breakers: Arc<dyn BreakerStore>,
    /// The failure window's buckets the consumers write: a trip request or
    /// an ALARM opens a closed breaker only when they bear it out
    /// ([`lifeboat_core::corroborate`]).
    pub(crate) windows: Arc<dyn WindowStore>,
    pub(crate) events: Arc<dyn EventPublisher>,
    /// The streams of Requests and the operators each carries.
    pub(crate) lanes: Lanes,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: Settings,
    pub(crate) alarms: AlarmMap,
    /// The operators this gateway's stream serves: the only breakers the
    /// switch reads, ticks and moves.
    pub(crate) operators: Vec<OperatorId>,
    /// Pause between attempts at re-pointing a busy mapping.
    pub(crate) repoint_backoff: Duration,
    /// Each operator's breaker state after every invocation, as EMF lines.
    pub(crate) metrics: Arc<dyn MetricsSink>,
    /// Wake-ups at the end of open periods and for probes
    /// (`BREAKER_TIMER_QUEUE_URL`); `None`: only the tick ends open periods.
    pub(crate) timers: Option<Arc<dyn BreakerTimers>>,
    /// The operator API the switch probes open breakers with
    /// (`OPERATOR_ENDPOINTS`); only operators with a `probe` in their
    /// settings are probed.
    pub(crate) prober: Option<Arc<dyn OperatorApi>>,
    /// Who the contributor alarms of `alarms` have in ALARM (CloudWatch);
    /// `None`: no contributor alarm is mapped.
    pub(crate) contributors: Option<Arc<dyn AlarmContributors>>,
}

/// The ports a switch cannot work without.
pub struct SwitchPorts {
    pub breakers: Arc<dyn BreakerStore>,
    pub windows: Arc<dyn WindowStore>,
    pub events: Arc<dyn EventPublisher>,
    /// The streams of Requests and the operators each carries.
    pub lanes: Lanes,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<dyn MetricsSink>,
}

/// Pause between attempts at re-pointing a busy mapping, unless
/// [`CircuitSwitch::with_repoint_backoff`] says otherwise.
pub const REPOINT_BACKOFF: Duration = Duration::from_millis(500);

impl CircuitSwitch {
    /// A switch keeping the breakers of `operators` with `settings`: no
    /// alarm mapped, no timers (the tick ends open periods), no probes.
    pub fn new(ports: SwitchPorts, settings: Settings, operators: Vec<OperatorId>) -> Self {
        let SwitchPorts {
            breakers,
            windows,
            events,
            lanes,
            clock,
            metrics,
        } = ports;
        Self {
            breakers,
            windows,
            events,
            lanes,
            clock,
            settings,
            alarms: AlarmMap::default(),
            operators,
            repoint_backoff: REPOINT_BACKOFF,
            metrics,
            timers: None,
            prober: None,
            contributors: None,
        }
    }

    /// Which operator each errors alarm speaks for (`ALARM_OPERATORS`).
    pub fn with_alarms(self, alarms: AlarmMap) -> Self {
        Self { alarms, ..self }
    }

    /// Who the contributor alarms (`alarm=*` in `ALARM_OPERATORS`) have in
    /// ALARM.
    pub fn with_alarm_contributors(self, contributors: Arc<dyn AlarmContributors>) -> Self {
        Self {
            contributors: Some(contributors),
            ..self
        }
    }

    /// Wake-ups at the end of open periods and for probes.
    pub fn with_timers(self, timers: Arc<dyn BreakerTimers>) -> Self {
        Self {
            timers: Some(timers),
            ..self
        }
    }

    /// The operator API the switch probes open breakers with.
    pub fn with_prober(self, prober: Arc<dyn OperatorApi>) -> Self {
        Self {
            prober: Some(prober),
            ..self
        }
    }

    /// The pause between attempts at re-pointing a busy mapping.
    pub fn with_repoint_backoff(self, repoint_backoff: Duration) -> Self {
        Self {
            repoint_backoff,
            ..self
        }
    }

    /// The operators whose breakers this switch keeps.
    pub fn operators(&self) -> &[OperatorId] {
        &self.operators
    }

    /// The settings it decides with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether it probes open breakers (it was given an operator API).
    pub fn has_prober(&self) -> bool {
        self.prober.is_some()
    }
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
    /// Operators and lanes this invocation could not handle, with why; the
    /// others were handled all the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Lanes the tick left alone because their marks say they point right.
    pub lanes_left: usize,
    /// With a batch from the timer queue: the timers to deliver again
    /// (Lambda reads `batchItemFailures`).
    #[serde(flatten)]
    pub response: SqsBatchResponse,
}

/// An operator (or a lane) an invocation could not handle.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Skipped {
    pub operator: Option<OperatorId>,
    /// The lane, when it was the lane's mapping that failed.
    pub lane: Option<String>,
    pub error: String,
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

    /// Take in what another part of the same invocation did.
    fn absorb(&mut self, other: SwitchReport) {
        self.decisions.extend(other.decisions);
        self.streams.extend(other.streams);
        self.announced.extend(other.announced);
        self.probe_calls += other.probe_calls;
        self.skipped.extend(other.skipped);
        self.lanes_left += other.lanes_left;
        self.response
            .batch_item_failures
            .extend(other.response.batch_item_failures);
    }

    /// Note that `operator` could not be handled, and why.
    pub(crate) fn skip(&mut self, operator: &OperatorId, error: &SwitchError) {
        if self
            .skipped
            .iter()
            .any(|s| s.lane.is_none() && s.operator.as_ref() == Some(operator))
        {
            return;
        }
        tracing::error!(operator = %operator, error = %error, "operator skipped; the others are handled");
        self.skipped.push(Skipped {
            operator: Some(operator.clone()),
            lane: None,
            error: error.to_string(),
        });
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
    ///
    /// With `OPERATOR_CONFIG_TABLE`, the endpoints and settings of that
    /// table's item where it has them
    /// ([`lifeboat_aws::operator_config::load`]).
    pub async fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
    ) -> Result<Self, StartupError> {
        let config = lifeboat_aws::operator_config::load(env, clients).await?;
        Self::from_config(env, clients, &config).await
    }

    /// [`Self::from_env`] with the operators' endpoints and settings
    /// already read.
    pub async fn from_config(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
        config: &lifeboat_core::operator_config::OperatorConfig,
    ) -> Result<Self, StartupError> {
        let operators = env
            .optional(lifeboat_core::settings::OPERATORS)?
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
                    clients.lambda(),
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
        let ports = SwitchPorts {
            breakers: watch(
                Arc::new(clients.breaker_store(
                    env,
                    lifeboat_core::watched::FailureCounter::new(metrics.clone(), clock.clone()),
                )?),
                &metrics,
                &clock,
            ),
            windows: watch(Arc::new(clients.window_store(env)?), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            lanes: lanes.watched(&metrics, &clock),
            clock: clock.clone(),
            metrics: metrics.clone(),
        };
        let contributor_alarm = alarms.has_contributor_alarm();
        let mut switch = Self::new(ports, config.settings()?, operators).with_alarms(alarms);
        if contributor_alarm {
            switch = switch.with_alarm_contributors(Arc::new(clients.alarm_contributors()));
        }
        if let Some(url) = env.optional(BREAKER_TIMER_QUEUE_URL)? {
            switch = switch.with_timers(watch(
                Arc::new(clients.breaker_timers(url)),
                &metrics,
                &clock,
            ));
        }
        if let Some(endpoints) = config.endpoints.as_deref() {
            switch = switch.with_prober(Arc::new(
                lifeboat_operator::HttpOperatorApi::configured(
                    endpoints,
                    clients.operator_credentials(env)?,
                )
                .await
                .map_err(|source| StartupError::Endpoints {
                    from: config.endpoints_from.clone(),
                    source,
                })?,
            ));
        }
        Ok(switch)
    }

    /// A contributor alarm changed: each operator it has in ALARM (only
    /// `only`, when the change named its contributor) gets the alarm as its
    /// input, timed when that contributor entered ALARM, so a breaker that
    /// closed since is not reopened by another contributor's change (and
    /// opened only where its failure window bears it out, as for a
    /// single-operator alarm). Contributors that name no operator of
    /// `OPERATORS` are logged and skipped; one operator's failure does not
    /// stop the others, and the first is returned so the delivery is
    /// retried (the others, applied again, change nothing).
    async fn on_contributors(
        &self,
        alarm: &str,
        at: Option<DateTime<chrono::Utc>>,
        only: Option<&OperatorId>,
        report: &mut SwitchReport,
    ) -> Result<(), SwitchError> {
        let failed = |why: String| SwitchError::Contributors {
            alarm: alarm.to_owned(),
            why,
        };
        let Some(contributors) = &self.contributors else {
            return Err(failed(
                "mapped to * in ALARM_OPERATORS, but the switch cannot read contributors".into(),
            ));
        };
        let in_alarm = contributors
            .in_alarm(alarm)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let changed_at = at.unwrap_or_else(|| self.clock.now());
        let mut first_error = None;
        for contributor in in_alarm {
            let operator = contributor
                .attributes
                .get(names::OPERATOR)
                .and_then(|o| OperatorId::new(o.as_str()).ok());
            let Some(operator) = operator.filter(|o| self.operators.contains(o)) else {
                tracing::warn!(
                    alarm,
                    attributes = ?contributor.attributes,
                    "contributor in ALARM names no operator of OPERATORS: skipped"
                );
                continue;
            };
            if only.is_some_and(|only| *only != operator) {
                continue;
            }
            let input = Input::Alarm {
                alarm: alarm.to_owned(),
                state: lifeboat_core::breaker::AlarmState::Alarm,
                at: contributor.since.unwrap_or(changed_at),
            };
            match self.apply(&operator, &input, None).await {
                Ok(decision) => report.decisions.push(decision),
                Err(e) => {
                    tracing::error!(alarm, operator = %operator, error = %e, "contributor's alarm not applied");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Handle one payload.
    pub async fn handle(&self, payload: &Value) -> Result<SwitchReport, SwitchError> {
        let parsed = input::parse(payload, &self.alarms)?;
        let is_tick = matches!(parsed, SwitchInput::Tick);
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
            SwitchInput::Tick => self.tick(&mut report).await?,
            SwitchInput::Contributors {
                alarm,
                at,
                operator,
            } => {
                self.on_contributors(&alarm, at, operator.as_ref(), &mut report)
                    .await?;
            }
            SwitchInput::Timers(timers) => {
                // Side by side: in a mass outage each timer's probe may wait
                // out a whole budget, and ten of them one after another
                // would not keep the 10 s cadence.
                let handled = futures::future::join_all(timers.into_iter().map(
                    |(message_id, timer)| async move {
                        let mut own = SwitchReport::default();
                        let failed = match timer {
                            Err(why) => {
                                tracing::warn!(message_id, why, "timer message dropped");
                                false
                            }
                            Ok(timer) if !self.operators.contains(&timer.operator) => {
                                tracing::warn!(operator = %timer.operator, message_id, "timer for an operator not in OPERATORS dropped");
                                false
                            }
                            Ok(timer) => match self.on_timer(&timer, &mut own).await {
                                Ok(()) => false,
                                Err(e) => {
                                    tracing::error!(operator = %timer.operator, version = timer.version, error = %e, "timer not handled; it comes back");
                                    true
                                }
                            },
                        };
                        (message_id, own, failed)
                    },
                ))
                .await;
                for (message_id, own, failed) in handled {
                    report.absorb(own);
                    if failed {
                        report.response.add_failure(message_id);
                    }
                }
            }
        }
        self.follow_up(&mut report).await;
        let tick = is_tick.then(|| {
            u64::try_from(self.clock.now().timestamp().div_euclid(60)).unwrap_or_default()
        });
        let reconciled = self.reconcile(&mut report, tick).await;
        // The tick's failures are its report's `skipped`: one operator or
        // lane that fails must not hide the others' states. Any other
        // input's caller (a command, Lambda's retry of an event) sees the
        // error.
        if tick.is_none() {
            reconciled?;
        }
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

    /// The schedule's tick: every configured breaker read in one batched
    /// read, each decided on its own. An operator whose breaker cannot be
    /// read or written is skipped and reported; the others are ticked.
    async fn tick(&self, report: &mut SwitchReport) -> Result<(), SwitchError> {
        let (records, unreadable) = self.load_isolated(&self.operators).await?;
        let mut stored: HashMap<OperatorId, BreakerRecord> = records
            .into_iter()
            .map(|r| (r.operator.clone(), r))
            .collect();
        for (operator, e) in &unreadable {
            report.skip(operator, e);
        }
        for operator in &self.operators {
            if unreadable.iter().any(|(o, _)| o == operator) {
                continue;
            }
            let read = stored.remove(operator);
            if let Some(record) = &read
                && self.timer_owns(record)
            {
                // A probe chain whose timer was lost (a failed
                // SendMessage, an invocation that died between its claim
                // and its timer) is taken over here, not left until the
                // open period ends.
                let reason = if self.probe_overdue(record) {
                    tracing::warn!(operator = %operator, state = %record.state, version = record.version, "probe timer overdue: setting it again");
                    self.arm(record).await;
                    "open: its probe timer was overdue and is set again"
                } else {
                    "open: its probe timer ends the period"
                };
                report.decisions.push(OperatorDecision {
                    operator: operator.clone(),
                    from: record.state,
                    to: record.state,
                    version: record.version,
                    reason: reason.to_owned(),
                    changed: false,
                });
                continue;
            }
            match self.apply(operator, &Input::Tick, Some(read)).await {
                Ok(decision) => report.decisions.push(decision),
                Err(e) => report.skip(operator, &e),
            }
        }
        Ok(())
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
            let decision = decide(&current, input, now, &cfg);
            if matches!(&decision, Decision::Transition(_))
                && current.state == BreakerState::Closed
                && let Err(refused) = self.corroborate(operator, input, &current).await?
            {
                tracing::warn!(operator = %operator, version = current.version, why = %refused, "signal not borne out by the failure window: breaker stays closed");
                return Ok(OperatorDecision {
                    operator: operator.clone(),
                    from: current.state,
                    to: current.state,
                    version: current.version,
                    reason: refused.to_string(),
                    changed: false,
                });
            }
            match decision {
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

    /// Whether the failure window bears out `input`, about to open the
    /// closed breaker `current`: a trip request of the window or an ALARM
    /// must be seen in the buckets the consumers wrote; a command, a
    /// trial's failure or the switch's own inputs need nothing.
    async fn corroborate(
        &self,
        operator: &OperatorId,
        input: &Input,
        current: &BreakerRecord,
    ) -> Result<Result<(), NotCorroborated>, SwitchError> {
        let settings = self.settings.for_operator(operator);
        let now = self.clock.now();
        let needs_window = match input {
            Input::Trip {
                reason: TripReason::Window { .. },
                ..
            } => true,
            Input::Alarm { .. } => settings.breaker.alarm_failed_calls > 0,
            _ => false,
        };
        if !needs_window {
            return Ok(Ok(()));
        }
        let since = corroborate::read_since(&settings.window, current.since, now);
        let buckets = self.windows.since(operator, since).await?;
        Ok(match input {
            Input::Trip {
                reason: TripReason::Window { verdict },
                ..
            } => corroborate::trip(verdict, &settings.window, &buckets, current.since, now),
            _ => corroborate::alarm(&settings.breaker, &buckets, current.since, now),
        })
    }
}
