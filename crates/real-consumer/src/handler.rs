//! The real consumer: takes request records from the Requests stream, calls the
//! operator within the operation's budget, and writes exactly one outcome per
//! request.
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::event::streams::DynamoDbEventResponse;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use lambda_runtime::Diagnostic;
use lifeboat_core::breaker::TripReason;
use lifeboat_core::cache::{CacheKey, CacheStore, CachedAnswer};
use lifeboat_core::events::{LifeboatEvent, SCHEMA_VERSION, TrialsPassed, TripRequested};
use lifeboat_core::invocation::NotABatch;
use lifeboat_core::metrics::{MetricSet, MetricsSink, StdoutMetrics, Unit, names};
use lifeboat_core::ports::{
    BreakerStore, EventPublisher, OperatorApi, RequestStore, StoreError, WindowStore,
};
use lifeboat_core::request::{
    CallClass, FailureReason, Health, MAX_ANSWER_BYTES, OperatorCall, Outcome, RequestRecord,
};
use lifeboat_core::settings::Settings;
use lifeboat_core::watched::watch;
use lifeboat_core::window::{CallCounts, WindowVerdict};
use lifeboat_core::{BreakerRecord, BreakerState, Clock, Operation, OperatorId};
use lifeboat_stream::{batch_response, failure_event, publish_all, read_batch};
use serde_json::Value;

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
    #[error("OPERATOR_ENDPOINTS: {0}")]
    Endpoints(#[from] lifeboat_operator::HttpApiError),
    #[error(transparent)]
    Settings(#[from] lifeboat_core::settings::SettingsError),
    #[error("CALL_CONCURRENCY must be a whole number from 1 to 1000, got {0:?}")]
    Concurrency(String),
    #[error(
        "CALL_LOG_SHARE must be a share from 0 to 1 (0.01 logs one call in a hundred), got {0:?}"
    )]
    CallLogShare(String),
}

/// Everything the handler needs, built once per Lambda instance.
pub struct RealConsumer {
    pub requests: Arc<dyn RequestStore>,
    pub breakers: Arc<dyn BreakerStore>,
    pub window: Arc<dyn WindowStore>,
    pub events: Arc<dyn EventPublisher>,
    /// The answer cache, refreshed after every answered call.
    pub cache: Arc<dyn CacheStore>,
    /// Where the batch's metrics go (EMF lines on stdout in Lambda).
    pub metrics: Arc<dyn MetricsSink>,
    pub operator: Arc<dyn OperatorApi>,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub concurrency: usize,
    /// Share of operator calls logged at INFO as `operator call` lines
    /// (`CALL_LOG_SHARE`), the input of `lifeboat advise-timeouts`; every
    /// call is logged at DEBUG.
    pub call_log_share: f64,
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

/// The end of one request in this batch.
struct Processed {
    sequence: Option<String>,
    operator: OperatorId,
    /// `Err`: the record must come back.
    written: Result<Option<bool>, StoreError>,
    called: Option<Health>,
    /// The call made, for metrics.
    call: Option<CallSeen>,
    /// Failed fast because the breaker was open.
    failed_fast: bool,
    trial: Option<bool>,
    event: Option<LifeboatEvent>,
}

impl RealConsumer {
    /// Build the consumer on AWS from the function's environment:
    /// `REQUESTS_TABLE`, `BREAKER_TABLE`, `EVENT_BUS_NAME`,
    /// `OPERATOR_ENDPOINTS` (`nordic=https://…,baltic=https://…`), and the
    /// optional `CALL_CONCURRENCY` and `OPERATOR_SETTINGS`.
    pub fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
    ) -> Result<Self, StartupError> {
        let endpoints = env.required(lifeboat_operator::OPERATOR_ENDPOINTS)?;
        let concurrency = match env.optional(CALL_CONCURRENCY)? {
            None => DEFAULT_CONCURRENCY,
            Some(text) => match text.trim().parse::<usize>() {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => return Err(StartupError::Concurrency(text.to_owned())),
            },
        };
        let settings = Settings::from_json(
            env.optional(lifeboat_core::settings::OPERATOR_SETTINGS)?
                .unwrap_or(""),
        )?;
        let call_log_share = match env.optional(CALL_LOG_SHARE)? {
            None => DEFAULT_CALL_LOG_SHARE,
            Some(text) => match text.trim().parse::<f64>() {
                Ok(share) if (0.0..=1.0).contains(&share) => share,
                _ => return Err(StartupError::CallLogShare(text.to_owned())),
            },
        };
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn Clock> = Arc::new(lifeboat_core::SystemClock);
        Ok(Self {
            requests: watch(Arc::new(clients.request_store(env)?), &metrics, &clock),
            breakers: watch(Arc::new(clients.breaker_store(env)?), &metrics, &clock),
            window: watch(Arc::new(clients.window_store(env)?), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            cache: watch(Arc::new(clients.cache_store(env)?), &metrics, &clock),
            metrics,
            operator: Arc::new(lifeboat_operator::HttpOperatorApi::parse(endpoints)?),
            clock,
            settings,
            concurrency,
            call_log_share,
        })
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
        let processed: Vec<Processed> = futures::stream::iter(requests)
            .map(|(sequence, request)| {
                let view = views.get(&request.operator).cloned().flatten();
                async move { self.process(sequence, request, view).await }
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;

        let mut failed = Vec::new();
        let mut metrics = BatchMetrics::default();
        let mut counts: BTreeMap<OperatorId, CallCounts> = BTreeMap::new();
        let mut trials: BTreeMap<OperatorId, Vec<bool>> = BTreeMap::new();
        for p in processed {
            metrics.record(&p);
            match p.written {
                Ok(Some(true)) => report.outcomes_written += 1,
                Ok(Some(false)) => report.already_answered += 1,
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, sequence = p.sequence.as_deref().unwrap_or("-"), "outcome not written; the record will come back");
                    if let Some(seq) = p.sequence {
                        failed.push(seq);
                    }
                }
            }
            if let Some(health) = p.called {
                report.calls += 1;
                counts.entry(p.operator.clone()).or_default().record(health);
            }
            if let Some(ok) = p.trial {
                trials.entry(p.operator.clone()).or_default().push(ok);
            }
            events.extend(p.event);
        }

        for (operator, counts) in &counts {
            let view = views.get(operator).cloned().flatten();
            if let Some(event) = self
                .update_window(operator, counts, started, view.as_ref())
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

    async fn process(
        &self,
        sequence: Option<String>,
        request: RequestRecord,
        view: BreakerView,
    ) -> Processed {
        let mut done = Processed {
            sequence,
            operator: request.operator.clone(),
            written: Ok(None),
            called: None,
            call: None,
            failed_fast: false,
            trial: None,
            event: None,
        };
        match self
            .requests
            .get(&request.operator, &request.request_id)
            .await
        {
            Ok(Some(stored)) if stored.outcome.is_some() => {
                done.written = Ok(Some(false));
                return done;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!(request_id = %request.request_id, "request item is gone; nothing to answer");
                return done;
            }
            Err(e) => {
                done.written = Err(e);
                return done;
            }
        }

        let now = self.clock.now();
        if request.remaining(now).is_none() {
            return self
                .fail(
                    done,
                    &request,
                    FailureReason::Expired,
                    "deadline passed before the call",
                )
                .await;
        }
        if !self.operator.knows(&request.operator) {
            let detail = format!("unknown operator {}", request.operator);
            return self
                .fail(done, &request, FailureReason::Malformed, &detail)
                .await;
        }
        let view_open = view.as_ref().is_some_and(|r| r.state.is_open());
        // An unreadable breaker (`None`) is called as if closed.
        match view.as_ref().map(|r| (r.state, r.version)) {
            Some((BreakerState::Open | BreakerState::ForcedOpen, _)) => {
                return self
                    .fail(done, &request, FailureReason::BreakerOpen, "breaker open")
                    .await;
            }
            Some((BreakerState::HalfOpen, version)) => {
                let limit = self
                    .settings
                    .for_operator(&request.operator)
                    .breaker
                    .trial_calls;
                match self
                    .breakers
                    .claim_trial(&request.operator, version, limit)
                    .await
                {
                    Ok(true) => {
                        tracing::info!(operator = %request.operator, state = %BreakerState::HalfOpen, version, request_id = %request.request_id, "half-open trial call");
                    }
                    Ok(false) => {
                        return self
                            .fail(
                                done,
                                &request,
                                FailureReason::BreakerOpen,
                                "half-open: every trial slot is taken",
                            )
                            .await;
                    }
                    Err(e) => {
                        tracing::warn!(operator = %request.operator, error = %e, "trial slot not claimed");
                        return self
                            .fail(
                                done,
                                &request,
                                FailureReason::BreakerOpen,
                                "half-open: trial slot not claimed",
                            )
                            .await;
                    }
                }
                done.trial = Some(false);
            }
            Some((BreakerState::Closed | BreakerState::ForcedClosed, _)) | None => {}
        }

        // The call gets the operation's whole budget even when the request's
        // own deadline is nearer: a timeout then always means the operator
        // did not answer in its budget (an honest signal for the failure
        // window, whatever our queue looks like), and a late answer still
        // refreshes the caches. Only a request already past its deadline is
        // not called at all.
        let budget = self
            .settings
            .for_operator(&request.operator)
            .budgets
            .for_operation(request.operation);
        let call = OperatorCall {
            request_id: request.request_id.clone(),
            operator: request.operator.clone(),
            operation: request.operation,
            params: request.params.clone(),
            budget,
        };
        let result = self.operator.call(&call).await.within(MAX_ANSWER_BYTES);
        let health = result.class.health(
            &self
                .settings
                .for_operator(&request.operator)
                .failure_statuses,
        );
        // The fields and names docs/timeouts.md's query reads.
        let outcome = match health {
            Health::Success | Health::SlowSuccess | Health::Neutral => "answered",
            Health::Timeout => "timeout",
            Health::Failure => "failed",
        };
        let duration_ms = result.elapsed.as_millis() as u64;
        if sampled(&request.request_id, self.call_log_share) {
            tracing::info!(
                operator = %request.operator, operation = %request.operation, duration_ms, outcome,
                class = result.class.name(), request_id = %request.request_id, "operator call"
            );
        } else {
            tracing::debug!(
                operator = %request.operator, operation = %request.operation, duration_ms, outcome,
                class = result.class.name(), request_id = %request.request_id, "operator call"
            );
        }
        done.called = Some(health);
        done.call = Some(CallSeen {
            operation: request.operation,
            class: result.class.name(),
            elapsed_ms: result.elapsed.as_secs_f64() * 1000.0,
            while_open: view_open,
        });
        if done.trial.is_some() {
            // A neutral answer (a 4xx the operator's settings do not name)
            // says nothing of its health: the trial is neither passed nor
            // failed, and the round waits for the other slots.
            done.trial = match health {
                Health::Success | Health::SlowSuccess => Some(true),
                Health::Timeout | Health::Failure => Some(false),
                Health::Neutral => None,
            };
        }
        // A neutral 4xx that refuses the question (not one refusing
        // lifeboat's credentials: those stay upstream errors).
        let refused = match (&result.class, health) {
            (CallClass::ClientError { status }, Health::Neutral) => {
                FailureReason::refusal(*status).map(|reason| (*status, reason))
            }
            _ => None,
        };
        let mut outcome = result.into_outcome(self.clock.now(), NAME);
        if let Some((_, refusal)) = refused
            && let lifeboat_core::request::OutcomeKind::Failed { reason, .. } = &mut outcome.kind
        {
            // The operator said no to the question itself: a 404 or 422 for
            // the caller, not a 503 to retry.
            *reason = refusal;
        }
        if let lifeboat_core::request::OutcomeKind::Answered { body } = &outcome.kind {
            // The cache first: whoever sees the outcome also finds the cache
            // refreshed. A failed cache write costs freshness, not the answer.
            self.refresh_cache(&request, body, None, outcome.at).await;
        }
        if let (Some((status, _)), lifeboat_core::request::OutcomeKind::Failed { detail, .. }) =
            (refused, &outcome.kind)
        {
            // Cached briefly as a negative answer: askers of the same
            // question get the refusal without another call.
            self.refresh_cache(&request, detail, Some(status), outcome.at)
                .await;
        }
        if let Some(reason) = outcome.failure_reason() {
            let detail = match &outcome.kind {
                lifeboat_core::request::OutcomeKind::Failed { detail, .. } => detail.clone(),
                lifeboat_core::request::OutcomeKind::Answered { .. } => String::new(),
            };
            done.event = Some(failure_event(&request, reason, &detail, outcome.at));
        }
        done.written = lifeboat_stream::write_outcome(self.requests.as_ref(), &request, &outcome)
            .await
            .map(Some);
        if let Err(StoreError::Rejected(why)) = &done.written {
            // The outcome can never be stored as it is: store that it
            // failed instead, rather than send the record back to call the
            // operator again.
            tracing::error!(operator = %request.operator, request_id = %request.request_id, error = %why, "outcome refused by the store; written as failed");
            let detail = "the answer could not be stored";
            return self
                .fail(done, &request, FailureReason::UpstreamError, detail)
                .await;
        }
        if matches!(done.written, Ok(Some(false))) {
            done.event = None;
        }
        done
    }

    async fn refresh_cache(
        &self,
        request: &RequestRecord,
        body: &str,
        refused: Option<u16>,
        at: DateTime<Utc>,
    ) {
        let policy = self.settings.for_operator(&request.operator).cache;
        let answer = CachedAnswer {
            key: CacheKey::new(&request.operator, request.operation, &request.params),
            operator: request.operator.clone(),
            operation: request.operation,
            body: body.to_owned(),
            as_of: at,
            refused,
        };
        if let Err(e) = self.cache.put(&answer, policy.expires_at(at)).await {
            tracing::warn!(
                operator = %request.operator, operation = %request.operation, request_id = %request.request_id,
                error = %e, "answer cache not refreshed"
            );
        }
    }

    async fn fail(
        &self,
        mut done: Processed,
        request: &RequestRecord,
        reason: FailureReason,
        detail: &str,
    ) -> Processed {
        done.failed_fast = reason == FailureReason::BreakerOpen;
        let outcome = Outcome::failed(reason, detail, self.clock.now(), NAME);
        done.written = lifeboat_stream::write_outcome(self.requests.as_ref(), request, &outcome)
            .await
            .map(Some);
        if matches!(done.written, Ok(Some(true))) {
            done.event = Some(failure_event(request, reason, detail, outcome.at));
        }
        done
    }

    /// Add the batch's counts to the window; ask for a trip if it says so.
    async fn update_window(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
        started: DateTime<Utc>,
        view: Option<&BreakerRecord>,
    ) -> Option<LifeboatEvent> {
        let cfg = self.settings.for_operator(operator).window;
        let now = self.clock.now();
        if let Err(e) = self
            .window
            .add(operator, cfg.bucket_start(started), counts)
            .await
        {
            tracing::warn!(operator = %operator, error = %e, "window counts not written");
        }
        let record = view?;
        if record.state != BreakerState::Closed {
            return None;
        }
        // Only calls made since the breaker closed: the failures that opened
        // it last time must not trip it again (the streak rule looks back a
        // minute, and a probe can close the breaker within seconds).
        let since = cfg.oldest_read(now).max(record.since);
        let buckets: Vec<lifeboat_core::window::Bucket> =
            match self.window.since(operator, since).await {
                // A bucket that starts at or before the close may hold calls
                // made before it.
                Ok(b) => b.into_iter().filter(|b| b.start > record.since).collect(),
                Err(e) => {
                    tracing::warn!(operator = %operator, error = %e, "window unreadable");
                    return None;
                }
            };
        let verdict = match cfg.evaluate(&buckets, now) {
            Some(verdict) => verdict,
            None => self.check_hang(operator, counts).await?,
        };
        tracing::warn!(operator = %operator, state = %record.state, version = record.version, verdict = %verdict, "failure window asks for a trip");
        Some(LifeboatEvent::TripRequested(TripRequested {
            schema_version: SCHEMA_VERSION,
            operator: operator.clone(),
            observed_version: record.version,
            reason: TripReason::Window { verdict },
            at: self.clock.now(),
        }))
    }

    /// After a batch with a timed-out call that the window let pass, ask the
    /// operator's hang check (if its settings have one): no answer in time,
    /// or a failure, confirms a hang (lifeboat_core::settings::HangCheck).
    async fn check_hang(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
    ) -> Option<WindowVerdict> {
        let settings = self.settings.for_operator(operator);
        let check = settings
            .hang_check
            .as_ref()
            .filter(|_| counts.timeouts > 0)?;
        let result = self
            .operator
            .call(&check.call(operator, self.clock.now()))
            .await;
        // Only "nothing answers" confirms a hang: no answer in time, no
        // connection, a 5xx. A 4xx (a gateway without the route, a rate
        // limit) or an unreadable body says the API is there.
        let hung = matches!(
            result.class,
            CallClass::Timeout | CallClass::Connect | CallClass::ServerError { .. }
        );
        tracing::info!(operator = %operator, timeouts = counts.timeouts, duration_ms = u64::try_from(result.elapsed.as_millis()).unwrap_or(u64::MAX), class = ?result.class, "hang check");
        hung.then(|| WindowVerdict::HangConfirmed {
            timeouts: counts.timeouts,
            check_ms: u64::try_from(check.timeout.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Count trial results in the breaker record; report a failed round or a
    /// passed one.
    async fn count_trials(
        &self,
        operator: &OperatorId,
        results: &[bool],
        view: Option<&BreakerRecord>,
    ) -> Vec<LifeboatEvent> {
        let Some(record) = view else {
            return Vec::new();
        };
        let needed = self
            .settings
            .for_operator(operator)
            .breaker
            .successes_to_close;
        let now = self.clock.now();
        let mut events = Vec::new();
        let mut best = None;
        for ok in results {
            match self
                .breakers
                .record_trial(operator, record.version, *ok)
                .await
            {
                Ok(Some(tally)) => best = Some(tally),
                Ok(None) => return events,
                Err(e) => {
                    tracing::warn!(operator = %operator, error = %e, "trial result not counted")
                }
            }
        }
        if results.iter().any(|ok| !ok) {
            events.push(LifeboatEvent::TripRequested(TripRequested {
                schema_version: SCHEMA_VERSION,
                operator: operator.clone(),
                observed_version: record.version,
                reason: TripReason::TrialFailed {
                    detail: "a half-open trial call failed".into(),
                },
                at: now,
            }));
        } else if let Some(tally) = best
            && tally.failures == 0
            && tally.successes >= needed
        {
            tracing::info!(operator = %operator, state = %record.state, version = record.version, successes = tally.successes, "half-open trials passed");
            events.push(LifeboatEvent::TrialsPassed(TrialsPassed {
                schema_version: SCHEMA_VERSION,
                operator: operator.clone(),
                observed_version: record.version,
                successes: tally.successes,
                at: now,
            }));
        }
        events
    }
}

/// What one batch did, per metric family.
#[derive(Default)]
struct BatchMetrics {
    calls: BTreeMap<(OperatorId, Operation, &'static str), u64>,
    durations: BTreeMap<(OperatorId, Operation), Vec<f64>>,
    /// Per operator: failed calls, calls while open, requests failed fast.
    per_operator: BTreeMap<OperatorId, (u64, u64, u64)>,
}

impl BatchMetrics {
    fn record(&mut self, p: &Processed) {
        if p.call.is_none() && !p.failed_fast {
            return;
        }
        let tally = self.per_operator.entry(p.operator.clone()).or_default();
        if p.failed_fast {
            tally.2 += 1;
        }
        if let Some(call) = &p.call {
            if matches!(p.called, Some(Health::Failure | Health::Timeout)) {
                tally.0 += 1;
            }
            if call.while_open {
                tally.1 += 1;
            }
            *self
                .calls
                .entry((p.operator.clone(), call.operation, call.class))
                .or_default() += 1;
            self.durations
                .entry((p.operator.clone(), call.operation))
                .or_default()
                .push(call.elapsed_ms);
        }
    }

    fn sets(&self) -> Vec<MetricSet> {
        let mut sets = Vec::new();
        for (operator, (failed, while_open, failed_fast)) in &self.per_operator {
            sets.push(
                MetricSet::new()
                    .dimension("Operator", operator.as_str())
                    .count(names::FAILED_CALLS, *failed)
                    .count(names::CALLS_WHILE_OPEN, *while_open)
                    .count(names::FAILED_FAST, *failed_fast),
            );
        }
        for ((operator, operation, class), n) in &self.calls {
            sets.push(
                MetricSet::new()
                    .dimension("Operator", operator.as_str())
                    .dimension("Operation", operation.as_str())
                    .dimension("Class", *class)
                    .count(names::OPERATOR_CALLS, *n),
            );
        }
        for ((operator, operation), durations) in &self.durations {
            sets.extend(MetricSet::series(
                &[
                    ("Operator", operator.as_str().to_owned()),
                    ("Operation", operation.as_str().to_owned()),
                ],
                names::CALL_DURATION,
                Unit::Milliseconds,
                durations,
            ));
        }
        sets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use lifeboat_core::events::LifeboatEvent;
    use lifeboat_core::memory::{
        MemoryBreakerStore, MemoryCacheStore, MemoryEventBus, MemoryRequestStore, MemoryWindowStore,
    };
    use lifeboat_core::metrics::MemoryMetrics;
    use lifeboat_core::request::OutcomeKind;
    use lifeboat_operator::{OutageMode, SimConfig, SimulatedOperator};
    use lifeboat_sim::TokioClock;
    use lifeboat_sim::suite::stream_record;
    use lifeboat_stream::{StreamItem, classify, records};
    use serde_json::json;

    /// 2026-11-30T10:15:00Z, the time of the fixtures.
    fn base() -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_033_700, 0).unwrap()
    }

    struct World {
        consumer: RealConsumer,
        requests: Arc<MemoryRequestStore>,
        breakers: Arc<MemoryBreakerStore>,
        bus: Arc<MemoryEventBus>,
        cache: Arc<MemoryCacheStore>,
        metrics: Arc<MemoryMetrics>,
        sim: SimulatedOperator,
        clock: Arc<TokioClock>,
    }

    fn world() -> World {
        let clock = Arc::new(TokioClock::starting_at(base()));
        let requests = Arc::new(MemoryRequestStore::new());
        let breakers = Arc::new(MemoryBreakerStore::new());
        let bus = Arc::new(MemoryEventBus::new());
        let cache = Arc::new(MemoryCacheStore::new());
        let metrics = Arc::new(MemoryMetrics::new());
        let sim = SimulatedOperator::new(
            OperatorId::new("nordic").unwrap(),
            SimConfig::default(),
            clock.clone(),
        );
        let consumer = RealConsumer {
            requests: requests.clone(),
            breakers: breakers.clone(),
            window: Arc::new(MemoryWindowStore::new()),
            events: bus.clone(),
            cache: cache.clone(),
            metrics: metrics.clone(),
            operator: Arc::new(sim.clone()),
            clock: clock.clone(),
            settings: Settings::default(),
            concurrency: DEFAULT_CONCURRENCY,
            call_log_share: DEFAULT_CALL_LOG_SHARE,
        };
        World {
            consumer,
            requests,
            breakers,
            bus,
            cache,
            metrics,
            sim,
            clock,
        }
    }

    fn fixture(name: &str) -> Value {
        let path = format!("{}/../../tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// `n` fresh requests for `operator`, stored, and their stream batch.
    async fn batch(w: &World, operator: &str, n: usize, deadline_s: i64) -> Value {
        let now = w.clock.now();
        let mut records = Vec::new();
        for i in 0..n {
            let request = RequestRecord {
                request_id: format!("{operator}-{}-{i}", now.timestamp_millis()),
                operator: OperatorId::new(operator).unwrap(),
                operation: lifeboat_core::Operation::Search,
                params: [
                    ("from".to_owned(), "HEL".to_owned()),
                    ("to".to_owned(), "TLL".to_owned()),
                ]
                .into(),
                created_at: now,
                deadline: now + TimeDelta::seconds(deadline_s),
            };
            w.requests.put_request(&request).await.unwrap();
            records.push(stream_record(&request, i));
        }
        json!({ "Records": records })
    }

    fn events_of(bus: &MemoryEventBus, detail_type: &str) -> usize {
        bus.events()
            .iter()
            .filter(|e| e.detail_type() == detail_type)
            .count()
    }

    /// A breaker in `state` since a minute ago.
    async fn put_breaker(w: &World, state: BreakerState, version: u64) {
        let since = w.clock.now() - chrono::TimeDelta::seconds(60);
        let mut record = BreakerRecord::initial(OperatorId::new("nordic").unwrap(), since);
        record.state = state;
        record.version = version;
        w.breakers.save(&record, None).await.unwrap();
    }

    #[test]
    fn the_default_concurrency_is_the_templates() {
        let template = include_str!("../../../template.yaml");
        let block = template.split("\n  CallConcurrency:\n").nth(1).unwrap();
        let default = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("Default: "))
            .unwrap();
        assert_eq!(default.parse::<usize>().unwrap(), DEFAULT_CONCURRENCY);
    }

    #[test]
    fn the_call_log_samples_a_share_of_requests_always_the_same() {
        let ids: Vec<String> = (0..100_000).map(|i| format!("req-{i}")).collect();
        let logged = |share: f64| ids.iter().filter(|id| sampled(id, share)).count();
        assert_eq!(logged(0.0), 0);
        assert_eq!(logged(1.0), ids.len());
        assert!((800..1_200).contains(&logged(0.01)), "{}", logged(0.01));
        assert_eq!(sampled("req-7", 0.5), sampled("req-7", 0.5));
    }

    #[tokio::test(start_paused = true)]
    async fn healthy_requests_are_answered_once() {
        let w = world();
        let payload = batch(&w, "nordic", 20, 10).await;
        let report = w.consumer.handle(&payload).await.unwrap();
        assert_eq!(
            (report.requests, report.calls, report.outcomes_written),
            (20, 20, 20)
        );
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(report.trips_requested, 0);
        let answered = w
            .requests
            .all()
            .iter()
            .filter(|s| {
                matches!(
                    s.outcome.as_ref().map(|o| &o.kind),
                    Some(OutcomeKind::Answered { .. })
                )
            })
            .count();
        assert!(answered >= 17, "{answered} of 20 answered");

        // The one question of the batch is cached with the newest answer.
        let key = CacheKey::new(
            &OperatorId::new("nordic").unwrap(),
            lifeboat_core::Operation::Search,
            &[
                ("from".to_owned(), "HEL".to_owned()),
                ("to".to_owned(), "TLL".to_owned()),
            ]
            .into(),
        );
        let cached = w.cache.get(&key).await.unwrap().unwrap();
        let newest = w
            .requests
            .all()
            .iter()
            .filter_map(|s| s.outcome.as_ref())
            .filter(|o| matches!(o.kind, OutcomeKind::Answered { .. }))
            .map(|o| o.at)
            .max()
            .unwrap();
        assert_eq!((w.cache.len(), cached.as_of), (1, newest));
        assert!(cached.body.contains("sailings"));

        // The batch's metrics: 20 calls by class, 20 durations, the failed ones.
        let calls = w
            .metrics
            .sum(names::OPERATOR_CALLS, &[("Operator", "nordic")]);
        assert_eq!(calls, 20.0);
        let durations: usize = w
            .metrics
            .lines()
            .iter()
            .filter_map(|l| l[names::CALL_DURATION].as_array().map(Vec::len))
            .sum();
        assert_eq!(durations, 20);
        let failed = w
            .metrics
            .sum(names::FAILED_CALLS, &[("Operator", "nordic")]);
        assert_eq!(failed, (20 - answered) as f64);
        assert_eq!(w.metrics.sum(names::CALLS_WHILE_OPEN, &[]), 0.0);

        // The same batch again (Lambda retrying it) calls nobody.
        let again = w.consumer.handle(&payload).await.unwrap();
        assert_eq!((again.calls, again.already_answered), (0, 20));
        assert_eq!(w.sim.stats().total, 20);
    }

    #[tokio::test(start_paused = true)]
    async fn the_fixture_batch_is_processed() {
        let w = world();
        let payload = fixture("dynamodb-insert-requests.json");
        for record in records(&payload).unwrap() {
            if let StreamItem::Request { request, .. } = classify(record) {
                w.requests.put_request(&request).await.unwrap();
            }
        }
        let report = w.consumer.handle(&payload).await.unwrap();
        assert_eq!(report.requests, 3);
        assert_eq!(report.outcomes_written, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn foreign_and_malformed_records_neither_crash_nor_fail_the_batch() {
        let w = world();
        let payload = fixture("dynamodb-foreign-and-malformed.json");
        for record in records(&payload).unwrap() {
            if let StreamItem::Request { request, .. } = classify(record) {
                w.requests.put_request(&request).await.unwrap();
            }
        }
        let report = w.consumer.handle(&payload).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty(), "{report:?}");
        assert_eq!(report.skipped, 2, "the MODIFY and the REMOVE");
        assert!(report.quarantined >= 3, "{report:?}");
        assert_eq!(
            events_of(&w.bus, "Operator Request Failed"),
            report.quarantined
        );
        assert!(
            w.consumer
                .handle(&json!({"Records": "nope"}))
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_operators_and_expired_requests_are_not_called() {
        let w = world();
        let unknown = batch(&w, "atlantis", 2, 10).await;
        let report = w.consumer.handle(&unknown).await.unwrap();
        assert_eq!((report.calls, report.outcomes_written), (0, 2));
        let expired = batch(&w, "nordic", 3, 1).await;
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        let report = w.consumer.handle(&expired).await.unwrap();
        assert_eq!((report.calls, report.outcomes_written), (0, 3));
        let reasons: Vec<_> = w
            .requests
            .all()
            .iter()
            .filter_map(|s| s.outcome.as_ref()?.failure_reason())
            .collect();
        assert_eq!(
            reasons
                .iter()
                .filter(|r| **r == FailureReason::Malformed)
                .count(),
            2
        );
        assert_eq!(
            reasons
                .iter()
                .filter(|r| **r == FailureReason::Expired)
                .count(),
            3
        );
        assert_eq!(w.sim.stats().total, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_breaker_means_no_calls() {
        let w = world();
        put_breaker(&w, BreakerState::Open, 3).await;
        let report = w
            .consumer
            .handle(&batch(&w, "nordic", 10, 10).await)
            .await
            .unwrap();
        assert_eq!((report.calls, report.outcomes_written), (0, 10));
        assert_eq!(w.sim.stats().total, 0);
        assert_eq!(events_of(&w.bus, "Operator Request Failed"), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_too_big_to_keep_is_a_failed_outcome_not_a_retry() {
        let w = world();
        w.sim.set_mode(Some(OutageMode::Oversized));
        let report = w
            .consumer
            .handle(&batch(&w, "nordic", 3, 10).await)
            .await
            .unwrap();
        // Called once each, answered failed, and nothing comes back.
        assert_eq!((report.calls, report.outcomes_written), (3, 3));
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(w.sim.stats().total, 3);
        for stored in w.requests.all() {
            match stored.outcome.map(|o| o.kind) {
                Some(OutcomeKind::Failed { reason, detail }) => {
                    assert_eq!(reason, FailureReason::UpstreamError);
                    assert!(detail.contains("larger than the 262144"), "{detail}");
                }
                other => panic!("expected a failed outcome, got {other:?}"),
            }
        }
        assert_eq!(events_of(&w.bus, "Operator Request Failed"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_operator_asks_for_a_trip() {
        let w = world();
        put_breaker(&w, BreakerState::Closed, 2).await;
        w.sim.set_mode(Some(OutageMode::Hang));
        let report = w
            .consumer
            .handle(&batch(&w, "nordic", 12, 10).await)
            .await
            .unwrap();
        assert_eq!(report.calls, 12);
        assert_eq!(report.trips_requested, 1);
        let trip = w.bus.events().into_iter().find_map(|e| match e {
            LifeboatEvent::TripRequested(t) => Some(t),
            _ => None,
        });
        assert_eq!(trip.unwrap().observed_version, 2);
        assert_eq!(events_of(&w.bus, "Operator Request Failed"), 12);
    }

    /// nordic's settings with a ping hang check.
    fn with_hang_check(w: &mut World) {
        let check = lifeboat_core::settings::HangCheck::default();
        w.consumer.settings.default.hang_check = Some(check);
    }

    #[tokio::test(start_paused = true)]
    async fn one_timeout_confirmed_by_the_hang_check_trips_at_once() {
        let mut w = world();
        with_hang_check(&mut w);
        put_breaker(&w, BreakerState::Closed, 2).await;
        w.sim.set_mode(Some(OutageMode::Hang));
        let started = w.clock.now();
        let report = w
            .consumer
            .handle(&batch(&w, "nordic", 1, 10).await)
            .await
            .unwrap();
        assert_eq!(report.trips_requested, 1);
        let trip = w.bus.events().into_iter().find_map(|e| match e {
            LifeboatEvent::TripRequested(t) => Some(t),
            _ => None,
        });
        let trip = trip.unwrap();
        assert_eq!(
            trip.reason,
            TripReason::Window {
                verdict: WindowVerdict::HangConfirmed {
                    timeouts: 1,
                    check_ms: 1_000
                }
            }
        );
        // The search's 3 s, then the check's 1 s.
        assert_eq!(trip.at - started, TimeDelta::seconds(4));
        assert_eq!(w.sim.stats().by_operation.ping, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_operator_that_answers_the_hang_check_is_left_to_the_window() {
        let mut w = world();
        with_hang_check(&mut w);
        put_breaker(&w, BreakerState::Closed, 2).await;
        // Answers after the budget, but pings are answered at once.
        w.sim.set_mode(Some(OutageMode::Slow));
        assert_eq!(trips(&w, 1).await, 0);
        assert_eq!(w.sim.stats().by_operation.ping, 1);
        // Without a timeout there is nothing to check.
        w.sim.set_mode(None);
        assert_eq!(trips(&w, 1).await, 0);
        assert_eq!(w.sim.stats().by_operation.ping, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_hang_check_one_timeout_does_not_trip() {
        let w = world();
        put_breaker(&w, BreakerState::Closed, 2).await;
        w.sim.set_mode(Some(OutageMode::Hang));
        assert_eq!(trips(&w, 1).await, 0);
        assert_eq!(w.sim.stats().by_operation.ping, 0);
    }

    /// The trips one batch of `n` requests for nordic asks for.
    async fn trips(w: &World, n: usize) -> usize {
        let payload = batch(w, "nordic", n, 10).await;
        w.consumer.handle(&payload).await.unwrap().trips_requested
    }

    #[tokio::test(start_paused = true)]
    async fn a_breaker_never_stored_counts_every_batch_of_the_window() {
        // Closed since forever: timeouts of earlier batches count too.
        let w = world();
        w.sim.set_mode(Some(OutageMode::Hang));
        assert_eq!(trips(&w, 3).await, 0);
        assert_eq!(trips(&w, 3).await, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_from_before_the_breaker_closed_do_not_count() {
        let w = world();
        put_breaker(&w, BreakerState::Closed, 2).await;
        w.sim.set_mode(Some(OutageMode::Hang));
        assert_eq!(trips(&w, 3).await, 0);
        // The breaker opened and closed again since (a probe found the
        // operator back within seconds): three more timeouts make six in a
        // row in the window, but only three since the close.
        let mut closed = BreakerRecord::initial(OperatorId::new("nordic").unwrap(), w.clock.now());
        closed.version = 4;
        w.breakers.save(&closed, Some(2)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert_eq!(trips(&w, 3).await, 0);
        // Two more after the close make five: that trips.
        assert_eq!(trips(&w, 2).await, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_calls_at_most_k_and_reports_the_round() {
        let w = world();
        put_breaker(&w, BreakerState::HalfOpen, 5).await;
        let report = w
            .consumer
            .handle(&batch(&w, "nordic", 30, 10).await)
            .await
            .unwrap();
        let k = Settings::default().default.breaker.trial_calls as usize;
        assert_eq!(report.calls, k);
        assert_eq!(w.sim.stats().total as usize, k);
        assert_eq!(report.outcomes_written, 30);
        let record = w
            .breakers
            .load(&OperatorId::new("nordic").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.trials_claimed as usize, k);
        // The simulated operator is healthy: the round passes (or, on a rare
        // background error, fails) and says so.
        assert_eq!(report.trials_passed + report.trips_requested, 1);
        // A second batch in the same round gets no slot.
        let second = w
            .consumer
            .handle(&batch(&w, "nordic", 5, 10).await)
            .await
            .unwrap();
        assert_eq!(second.calls, 0);
    }
}
