//! The real consumer: takes request records from the Requests stream, calls the
//! operator within the operation's budget, and writes exactly one outcome per
//! request.
//!
//! * this file: [`RealConsumer`], the handler: reads the batch, the
//!   operators' breakers once each, and reports what the batch did;
//! * `process`: one request, from its breaker to its outcome;
//! * `train`: the hang check's pings while a call is late;
//! * [`limit`]: the adaptive limit on each operator's calls in flight;
//! * `health`: the batch's calls turned into the window's and the trials'
//!   verdicts;
//! * `answered`: the question each operator last answered, kept for the
//!   switch's probes;
//! * `metrics`: what the batch did, counted;
//! * `main.rs`: the Lambda function; `tests.rs`: batches on the in-memory
//!   stores against the simulated operator.
//!
//! Per batch it reads each operator's breaker once. Closed: every request is
//! called (concurrently, up to `concurrency` at a time). Open (a batch that was
//! already on its way when the stream was re-pointed): nobody is called, every
//! request fails fast with `breaker_open`. Half-open: each request tries to
//! claim a trial slot with one atomic conditional write; only the holders of a
//! slot call the operator, the rest fail fast.
//!
//! After the calls it adds the batch's counts to the shared failure window (one
//! atomic add per operator per batch), reads the window back and, if a rule
//! trips, publishes `Trip Requested`. Trial results are counted in the breaker
//! record; a failed trial asks for a trip, enough successes publish `Trials
//! Passed`. The circuit switch decides on both.
//!
//! A record whose outcome cannot be written is reported as a batch item
//! failure and comes back; when it does, the request is not called again if an
//! outcome was written meanwhile.

mod answered;
mod health;
pub mod limit;
mod metrics;
mod process;
#[cfg(test)]
mod tests;
mod train;

pub use answered::{REMEMBER_EVERY, Remembered};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::event::streams::DynamoDbEventResponse;
use chrono::DateTime;
use futures::StreamExt;
use lambda_runtime::Diagnostic;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::invocation::NotABatch;
use lifeboat_core::metrics::StdoutMetrics;
use lifeboat_core::ports::{
    BreakerStore, CacheStore, Clock, EventPublisher, MetricsSink, OperatorApi, RequestStore,
    StoreError, WindowStore,
};
use lifeboat_core::request::Health;
use lifeboat_core::settings::Settings;
use lifeboat_core::watched::watch;
use lifeboat_core::window::CallCounts;
use lifeboat_core::{BreakerRecord, Operation, OperatorId};
use lifeboat_stream::{batch_response, publish_all, read_batch};
use serde_json::Value;

use metrics::BatchMetrics;

/// The name this function writes into the outcomes it produces.
pub const NAME: &str = "real-consumer";

/// Default number of operator calls in flight per batch: a whole batch of the
/// template's BatchSize at once, so a batch takes as long as its slowest call
/// (at most one budget) rather than several budgets in waves. The same as
/// the template's `CallConcurrency` default (a test holds them together).
pub const DEFAULT_CONCURRENCY: usize = 50;

/// Environment variable: the most operator calls one batch makes at once.
pub const CALL_CONCURRENCY: &str = "CALL_CONCURRENCY";

/// Environment variable: the share of operator calls logged at INFO for
/// `lifeboat advise-timeouts` (docs/timeouts.md).
pub const CALL_LOG_SHARE: &str = "CALL_LOG_SHARE";

/// Why a whole invocation failed (records never fail the invocation).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error(transparent)]
    NotABatch(#[from] NotABatch),
}

impl From<ConsumerError> for Diagnostic {
    fn from(e: ConsumerError) -> Self {
        Diagnostic {
            error_type: NotABatch::ERROR_TYPE.into(),
            error_message: e.to_string(),
        }
    }
}

/// The function refuses to start, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] lifeboat_aws::ConfigError),
    #[error("{from}: {source}")]
    Endpoints {
        from: lifeboat_core::operator_config::Source,
        #[source]
        source: lifeboat_operator::HttpApiError,
    },
    /// The endpoints or settings, from the environment or the operator
    /// config table.
    #[error(transparent)]
    OperatorConfig(#[from] lifeboat_core::operator_config::OperatorConfigError),
    #[error("CALL_CONCURRENCY must be a whole number from 1 to 1000, got {0:?}")]
    Concurrency(String),
    #[error(
        "CALL_LOG_SHARE must be a share from 0 to 1 (0.01 logs one call in a hundred), got {0:?}"
    )]
    CallLogShare(String),
}

/// Everything the handler needs, built once per Lambda instance:
/// [`RealConsumer::new`] with its ports, then `with_…` for what a
/// deployment (or a simulation) sets otherwise.
pub struct RealConsumer {
    pub(crate) requests: Arc<dyn RequestStore>,
    pub(crate) breakers: Arc<dyn BreakerStore>,
    pub(crate) window: Arc<dyn WindowStore>,
    pub(crate) events: Arc<dyn EventPublisher>,
    /// The answer cache, refreshed after every answered call.
    pub(crate) cache: Arc<dyn CacheStore>,
    /// Where the batch's metrics go (EMF lines on stdout in Lambda).
    pub(crate) metrics: Arc<dyn MetricsSink>,
    pub(crate) operator: Arc<dyn OperatorApi>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: Settings,
    pub(crate) concurrency: usize,
    /// Share of operator calls logged at INFO as `operator call` lines
    /// (`CALL_LOG_SHARE`), the input of `lifeboat advise-timeouts`; every
    /// call is logged at DEBUG.
    pub(crate) call_log_share: f64,
    /// When this instance last kept each operator's answered question.
    pub(crate) remembered: Remembered,
    /// Each operator's limit on calls in flight from this instance
    /// ([`limit`]), learned from its answers; at most `concurrency`.
    pub(crate) limits: Arc<limit::Limits>,
}

/// The ports a real consumer cannot work without.
pub struct ConsumerPorts {
    pub requests: Arc<dyn RequestStore>,
    pub breakers: Arc<dyn BreakerStore>,
    pub window: Arc<dyn WindowStore>,
    pub events: Arc<dyn EventPublisher>,
    pub cache: Arc<dyn CacheStore>,
    pub metrics: Arc<dyn MetricsSink>,
    pub operator: Arc<dyn OperatorApi>,
    pub clock: Arc<dyn Clock>,
}

impl RealConsumer {
    /// A consumer making up to `concurrency` operator calls at once in a
    /// batch (each operator's limit learned up to it), logging
    /// [`DEFAULT_CALL_LOG_SHARE`] of its calls.
    pub fn new(ports: ConsumerPorts, settings: Settings, concurrency: usize) -> Self {
        let ConsumerPorts {
            requests,
            breakers,
            window,
            events,
            cache,
            metrics,
            operator,
            clock,
        } = ports;
        Self {
            requests,
            breakers,
            window,
            events,
            cache,
            metrics,
            operator,
            clock,
            settings,
            concurrency,
            call_log_share: DEFAULT_CALL_LOG_SHARE,
            remembered: Remembered::default(),
            limits: limit::Limits::for_concurrency(concurrency),
        }
    }

    /// The share of operator calls logged at INFO (`CALL_LOG_SHARE`).
    pub fn with_call_log_share(self, call_log_share: f64) -> Self {
        Self {
            call_log_share,
            ..self
        }
    }

    /// Each operator's limit on calls in flight, in place of one learned up
    /// to `concurrency` (a simulation's one consumer standing for several
    /// instances).
    pub fn with_limits(self, limits: Arc<limit::Limits>) -> Self {
        Self { limits, ..self }
    }
}

/// The default `CALL_LOG_SHARE`: one call in a hundred, chosen by request
/// id, so a day of traffic leaves a sample without the cost of a line per
/// call.
pub const DEFAULT_CALL_LOG_SHARE: f64 = 0.01;

/// Whether the call of `request_id` is in a `share` sample (FNV-1a of the
/// id: the same request is always in or out).
pub fn sampled(request_id: &str, share: f64) -> bool {
    let hash = request_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (hash as f64 / u64::MAX as f64) < share
}

/// What one batch did, for logs, the demo and tests.
#[derive(Debug, Default)]
pub struct BatchReport {
    pub response: DynamoDbEventResponse,
    pub requests: usize,
    pub skipped: usize,
    pub quarantined: usize,
    pub calls: usize,
    pub outcomes_written: usize,
    pub already_answered: usize,
    pub trips_requested: usize,
    pub trials_passed: usize,
    pub events_not_published: usize,
}

/// The breaker as this batch saw it. `None`: it could not be read.
type BreakerView = Option<BreakerRecord>;

/// One operator call, as the metrics see it.
struct CallSeen {
    operation: Operation,
    class: &'static str,
    elapsed_ms: f64,
    /// The breaker was open when the call was made (never, by design).
    while_open: bool,
}

/// What became of a request's outcome in this batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Nothing to write: the request item is gone (expired and removed).
    Nothing,
    /// This batch wrote the outcome.
    Outcome,
    /// An outcome was already stored (another delivery's), or the item
    /// went while this one was called: left as it was.
    AlreadyAnswered,
}

impl From<bool> for Written {
    /// [`lifeboat_stream::write_outcome`]'s answer: written or left as it was.
    fn from(written: bool) -> Self {
        if written {
            Written::Outcome
        } else {
            Written::AlreadyAnswered
        }
    }
}

/// The end of one request in this batch.
struct Processed {
    sequence: Option<String>,
    operator: OperatorId,
    /// `Err`: the record must come back.
    written: Result<Written, StoreError>,
    called: Option<Health>,
    /// The call made, for metrics.
    call: Option<CallSeen>,
    /// Failed fast because the breaker was open.
    failed_fast: bool,
    trial: Option<lifeboat_core::ports::Trial>,
    event: Option<LifeboatEvent>,
    /// The hang check's pings of a call that timed out.
    hang_train: Option<train::Train>,
    /// The question, when the operator answered a search (to probe with).
    answered: Option<lifeboat_core::probe::ProbeSpec>,
    /// The call drew a 429 while other calls to the operator were in
    /// flight: back-pressure on our own burst, left out of the window.
    backpressure: bool,
}

impl RealConsumer {
    /// Build the consumer on AWS from the function's environment:
    /// `REQUESTS_TABLE`, `BREAKER_TABLE`, `EVENT_BUS_NAME`,
    /// `OPERATOR_ENDPOINTS` (`nordic=https://…,baltic=https://…`), and the
    /// optional `CALL_CONCURRENCY` and `OPERATOR_SETTINGS`; with
    /// `OPERATOR_CONFIG_TABLE`, the endpoints and settings of that table's
    /// item where it has them ([`lifeboat_aws::operator_config::load`]).
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
        let endpoints = config.required_endpoints()?;
        let concurrency = match env.optional(CALL_CONCURRENCY)? {
            None => DEFAULT_CONCURRENCY,
            Some(text) => match text.trim().parse::<usize>() {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => return Err(StartupError::Concurrency(text.to_owned())),
            },
        };
        let settings = config.settings()?;
        let call_log_share = match env.optional(CALL_LOG_SHARE)? {
            None => DEFAULT_CALL_LOG_SHARE,
            Some(text) => match text.trim().parse::<f64>() {
                Ok(share) if (0.0..=1.0).contains(&share) => share,
                _ => return Err(StartupError::CallLogShare(text.to_owned())),
            },
        };
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn Clock> = Arc::new(lifeboat_core::SystemClock);
        let ports = ConsumerPorts {
            requests: watch(Arc::new(clients.request_store(env)?), &metrics, &clock),
            breakers: watch(
                Arc::new(clients.breaker_store(
                    env,
                    lifeboat_core::watched::FailureCounter::new(metrics.clone(), clock.clone()),
                )?),
                &metrics,
                &clock,
            ),
            window: watch(Arc::new(clients.window_store(env)?), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            cache: watch(Arc::new(clients.cache_store(env)?), &metrics, &clock),
            metrics,
            operator: Arc::new(
                lifeboat_operator::HttpOperatorApi::configured(
                    endpoints,
                    clients.operator_credentials(env)?,
                )
                .await
                .map_err(|source| StartupError::Endpoints {
                    from: config.endpoints_from.clone(),
                    source,
                })?,
            ),
            clock,
        };
        Ok(Self::new(ports, settings, concurrency).with_call_log_share(call_log_share))
    }

    /// Handle one stream batch.
    pub async fn handle(&self, payload: &Value) -> Result<BatchReport, ConsumerError> {
        // The batch's calls are counted in the window at the time they were
        // made, not answered (see lifeboat_core::window).
        let started = self.clock.now();
        let batch = read_batch(payload, self.requests.as_ref(), self.clock.now(), NAME)
            .await
            .map_err(NotABatch)?;
        let mut report = BatchReport {
            skipped: batch.skipped,
            quarantined: batch.quarantined,
            ..BatchReport::default()
        };
        let mut events = batch.events;
        let requests = batch.requests;
        report.requests = requests.len();

        let views = self
            .read_breakers(requests.iter().map(|(_, r)| &r.operator))
            .await;
        let slots = train::Slots::default();
        let processed: Vec<Processed> = futures::stream::iter(requests)
            .map(|(sequence, request)| {
                let view = views.get(&request.operator).cloned().flatten();
                let slots = &slots;
                async move { self.process(sequence, request, view, slots).await }
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;

        let mut failed = Vec::new();
        let mut metrics = BatchMetrics::default();
        let mut counts: BTreeMap<OperatorId, CallCounts> = BTreeMap::new();
        let mut trials: BTreeMap<OperatorId, Vec<lifeboat_core::ports::Trial>> = BTreeMap::new();
        let mut trains: BTreeMap<OperatorId, Vec<train::Train>> = BTreeMap::new();
        let mut answered = HashMap::new();
        for mut p in processed {
            if let Some(question) = p.answered.take() {
                answered.insert(p.operator.clone(), question);
            }
            if let Some(train) = p.hang_train.take() {
                trains.entry(p.operator.clone()).or_default().push(train);
            }
            metrics.record(&p);
            match p.written {
                Ok(Written::Outcome) => report.outcomes_written += 1,
                Ok(Written::AlreadyAnswered) => report.already_answered += 1,
                Ok(Written::Nothing) => {}
                Err(e) => {
                    tracing::error!(error = %e, sequence = p.sequence.as_deref().unwrap_or("-"), "outcome not written; the record will come back");
                    if let Some(seq) = p.sequence {
                        failed.push(seq);
                    }
                }
            }
            if let Some(health) = p.called {
                report.calls += 1;
                if !p.backpressure {
                    counts.entry(p.operator.clone()).or_default().record(health);
                }
            }
            if let Some(ok) = p.trial {
                trials.entry(p.operator.clone()).or_default().push(ok);
            }
            events.extend(p.event);
        }

        for (operator, counts) in &counts {
            let view = views.get(operator).cloned().flatten();
            let trains = trains.remove(operator).unwrap_or_default();
            if let Some(event) = self
                .update_window(operator, counts, started, view.as_ref(), trains)
                .await
            {
                report.trips_requested += 1;
                events.push(event);
            }
        }
        for (operator, results) in &trials {
            let view = views.get(operator).cloned().flatten();
            for event in self.count_trials(operator, results, view.as_ref()).await {
                match event {
                    LifeboatEvent::TripRequested(_) => report.trips_requested += 1,
                    _ => report.trials_passed += 1,
                }
                events.push(event);
            }
        }

        self.remember_answered(answered).await;
        report.events_not_published = publish_all(self.events.as_ref(), &events).await;
        report.response = batch_response(failed);
        self.metrics.emit(&metrics.sets(), self.clock.now());
        tracing::info!(
            requests = report.requests,
            calls = report.calls,
            outcomes_written = report.outcomes_written,
            already_answered = report.already_answered,
            quarantined = report.quarantined,
            skipped = report.skipped,
            retried = report.response.batch_item_failures.len(),
            trips_requested = report.trips_requested,
            "batch done"
        );
        Ok(report)
    }

    async fn read_breakers<'a>(
        &self,
        operators: impl Iterator<Item = &'a OperatorId>,
    ) -> HashMap<OperatorId, BreakerView> {
        let mut views = HashMap::new();
        for operator in operators {
            if views.contains_key(operator) {
                continue;
            }
            let view = match self.breakers.load(operator).await {
                Ok(Some(record)) => Some(record),
                // Never stored: closed since forever (as the switch sees it),
                // so every bucket of the window counts.
                Ok(None) => Some(BreakerRecord::initial(
                    operator.clone(),
                    DateTime::UNIX_EPOCH,
                )),
                Err(e) => {
                    // Availability first: an unreadable breaker is treated as
                    // closed for calls, and no trip is asked for on its behalf.
                    tracing::warn!(operator = %operator, error = %e, "breaker unreadable; calling as if closed");
                    None
                }
            };
            if let Some(record) = &view {
                tracing::debug!(operator = %operator, state = %record.state, version = record.version, "breaker read");
            }
            views.insert(operator.clone(), view);
        }
        views
    }
}
