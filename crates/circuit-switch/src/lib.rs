//! The circuit switch: the single owner of breaker transitions.
//!
//! * this file: [`CircuitSwitch`], its ports and errors, built from its
//!   environment;
//! * `handle`: one invocation, each operator's input decided and written;
//! * `timers`: the timers and probes that end open periods and half-open
//!   rounds;
//! * `streams`: the reconcile, each lane's stream pointed where its breakers
//!   say and every state change published;
//! * [`input`]: the payloads that wake the switch, read;
//! * `report`: what an invocation did ([`SwitchReport`]);
//! * [`capacity`]: the stack's capacity check, a custom resource;
//! * `main.rs`: the Lambda function; `tests.rs`: inputs on the in-memory
//!   stores.
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
mod handle;
pub mod input;
mod report;
mod streams;
#[cfg(test)]
mod tests;
mod timers;

pub use report::{LaneResized, OperatorDecision, Skipped, StreamReport, SwitchReport};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::Diagnostic;
use lifeboat_core::OperatorId;
use lifeboat_core::lane::Lanes;
use lifeboat_core::metrics::StdoutMetrics;
use lifeboat_core::ports::{
    AlarmContributors, BreakerStore, BreakerTimers, Clock, EventPublisher, MetricsSink,
    OperatorApi, RouterError, StoreError, WindowStore,
};
use lifeboat_core::settings::{Parallelization, Settings};
use lifeboat_core::watched::watch;

use crate::input::{AlarmMap, InputError};

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
    #[error("{0}")]
    LaneCapacity(String),
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
    /// What the lanes may run at (`LANE_PARALLELIZATION`,
    /// `REAL_CONSUMER_RESERVED`); `None`: the operators'
    /// `lane.parallelization` is not applied, and the tick says why.
    pub(crate) lane_capacity: Option<LaneCapacity>,
    /// The parallelization this instance set or found on each lane (by
    /// name): the tick sets a lane's only when its settings differ from
    /// this, or in its sweep.
    pub(crate) sized: std::sync::Mutex<HashMap<String, Parallelization>>,
}

/// What the lanes may run at: the template's parallelization, which a lane
/// keeps unless its operators' settings ask another, and the real
/// consumer's reservation, which every lane's must fit in
/// ([`lifeboat_core::capacity::check_lanes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneCapacity {
    /// `LANE_PARALLELIZATION`.
    pub default: Parallelization,
    /// `REAL_CONSUMER_RESERVED`: `None` when the real consumer is not
    /// reserved (`none`), so not capped.
    pub reserved: Option<usize>,
}

/// Environment variable: the template's `LaneParallelization`.
pub const LANE_PARALLELIZATION: &str = "LANE_PARALLELIZATION";
/// Environment variable: the real consumer's reserved concurrency, or
/// `none`.
pub const REAL_CONSUMER_RESERVED: &str = "REAL_CONSUMER_RESERVED";

impl LaneCapacity {
    /// From `LANE_PARALLELIZATION` and `REAL_CONSUMER_RESERVED`; `None`
    /// when the first is unset.
    pub fn from_env(env: &lifeboat_aws::Env) -> Result<Option<Self>, StartupError> {
        let Some(default) = env.optional(LANE_PARALLELIZATION)? else {
            return Ok(None);
        };
        let default = default
            .trim()
            .parse::<u64>()
            .map_err(|e| e.to_string())
            .and_then(Parallelization::new)
            .map_err(|why| StartupError::LaneCapacity(format!("{LANE_PARALLELIZATION}: {why}")))?;
        let reserved = match env.optional(REAL_CONSUMER_RESERVED)?.map(str::trim) {
            None | Some("none") => None,
            Some(n) => Some(n.parse::<usize>().map_err(|e| {
                StartupError::LaneCapacity(format!(
                    "{REAL_CONSUMER_RESERVED} is a number of instances or `none`, not {n:?}: {e}"
                ))
            })?),
        };
        Ok(Some(Self { default, reserved }))
    }
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
            lane_capacity: None,
            sized: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// What the lanes may run at: with it, the tick sets each lane's
    /// parallelization its operators' settings ask, within the reservation.
    pub fn with_lane_capacity(self, lane_capacity: LaneCapacity) -> Self {
        Self {
            lane_capacity: Some(lane_capacity),
            ..self
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
        if let Some(capacity) = LaneCapacity::from_env(env)? {
            switch = switch.with_lane_capacity(capacity);
        }
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
}
