//! One request of a batch, in the order it is handled: skip it if it was
//! answered meanwhile, fail it without a call if it cannot or may not be
//! called (expired, unknown operator, breaker open, no trial slot), call the
//! operator, then cache the answer and write the outcome.

use chrono::{DateTime, Utc};
use lifeboat_core::cache::{CacheKey, CachedAnswer, CachedRefusal};
use lifeboat_core::ports::{StoreError, Trial};
use lifeboat_core::probe::ProbeSpec;
use lifeboat_core::request::{
    CallClass, CallResult, FailureReason, Health, MAX_ANSWER_BYTES, OperatorCall, Outcome,
    OutcomeKind, RequestRecord,
};
use lifeboat_core::{BreakerRecord, BreakerState};
use lifeboat_stream::failure_event;

use super::train::{Answers, Slots, Train};
use super::{BreakerView, CallSeen, NAME, Processed, RealConsumer, Written, limit, sampled};

impl Processed {
    /// Nothing done yet for `request`.
    fn new(sequence: Option<String>, request: &RequestRecord) -> Self {
        Processed {
            sequence,
            operator: request.operator.clone(),
            written: Ok(Written::Nothing),
            called: None,
            call: None,
            failed_fast: false,
            trial: None,
            event: None,
            hang_train: None,
            answered: None,
            backpressure: false,
        }
    }

    /// Note the call made: its health, what the metrics see of it, and how
    /// a trial went.
    fn record_call(
        &mut self,
        request: &RequestRecord,
        result: &CallResult,
        health: Health,
        view: Option<&BreakerRecord>,
    ) {
        self.called = Some(health);
        if matches!(health, Health::Success | Health::SlowSuccess) {
            self.answered =
                ProbeSpec::remembered(request.operation, &request.params, request.created_at);
        }
        self.call = Some(CallSeen {
            operation: request.operation,
            class: result.class.name(),
            elapsed_ms: result.elapsed.as_secs_f64() * 1000.0,
            while_open: view.is_some_and(|r| r.state.is_open()),
        });
        if self.trial.is_some() {
            // A neutral answer (a 4xx the operator's settings do not name)
            // says nothing of its health, nor a slow one after a slow-call
            // trip (up, not well): the trial is neither passed nor failed,
            // and the round waits for the other slots.
            self.trial = health.trial(view.is_some_and(|r| r.opened_slow));
        }
    }
}

impl RealConsumer {
    /// Handle one request: what it did, for the batch to count.
    pub(super) async fn process(
        &self,
        sequence: Option<String>,
        request: RequestRecord,
        view: BreakerView,
        slots: &Slots,
    ) -> Processed {
        let mut done = Processed::new(sequence, &request);
        if let Some(written) = self.answered_already(&request).await {
            done.written = written;
            return done;
        }
        if let Some((reason, detail)) = self.not_callable(&request) {
            return self.fail(done, &request, reason, &detail).await;
        }
        match self.pass_breaker(&request, view.as_ref()).await {
            Ok(trial) => done.trial = trial.then_some(Trial::Failed),
            Err(detail) => {
                return self
                    .fail(done, &request, FailureReason::BreakerOpen, detail)
                    .await;
            }
        }
        // A trial call is never held back: the round needs its verdict.
        let permit = if done.trial.is_some() {
            None
        } else {
            match self.place(&request).await {
                Ok(permit) => Some(permit),
                Err((reason, detail)) => return self.fail(done, &request, reason, detail).await,
            }
        };
        // The hang check watches calls to a closed operator only (only those
        // can ask for a trip), one call per operator and batch at a time.
        let watched = view
            .as_ref()
            .filter(|r| r.state == BreakerState::Closed)
            .filter(|_| {
                self.settings
                    .for_operator(&request.operator)
                    .hang_check
                    .is_some()
            })
            .and_then(|_| slots.claim(&request.operator));
        let was_watched = watched.is_some();
        let (mut result, mut health, train) = self.call_operator(&request, watched).await;
        if lifeboat_core::hang::answered(&result.class) {
            slots.answered(&request.operator);
        }
        if was_watched && train.is_none() {
            slots.release(&request.operator);
        }
        done.hang_train = train;
        if let Some(permit) = permit {
            let (signal, counted) = limit::judge(&result.class, permit.in_flight);
            permit.finish(signal);
            if !counted {
                // A 429 to our own burst: the limit is cut, and the request
                // asks once more when a place comes free before its
                // deadline, so the customer still gets a live answer.
                tracing::info!(operator = %request.operator, request_id = %request.request_id, "429 to our own burst: calls in flight to the operator cut, asking again");
                done.backpressure = true;
                if let Ok(again) = self.place(&request).await {
                    let (second, second_health, _) = self.call_operator(&request, None).await;
                    if lifeboat_core::hang::answered(&second.class) {
                        slots.answered(&request.operator);
                    }
                    let (signal, counted) = limit::judge(&second.class, again.in_flight);
                    again.finish(signal);
                    (result, health) = (second, second_health);
                    done.backpressure = !counted;
                }
            }
        }
        // Back-pressure says nothing of the operator's health.
        let window_health = if done.backpressure {
            Health::Neutral
        } else {
            health
        };
        done.record_call(&request, &result, window_health, view.as_ref());
        let (outcome, refused) = self.outcome_of(result, health);
        self.cache_answer(&request, &outcome, refused).await;
        self.write_answer(done, &request, outcome).await
    }

    /// A place among the operator's calls in flight ([`limit`]): at once if
    /// one is free, else waiting up to the request's deadline, after which
    /// the breaker is read again (the batch read it before the wait, and a
    /// hang holds every place for a whole budget). `Err`: fail the request
    /// without a call, with this reason and detail.
    async fn place(
        &self,
        request: &RequestRecord,
    ) -> Result<limit::Permit, (FailureReason, &'static str)> {
        let limit = self.limits.of(&request.operator);
        if let Some(permit) = limit.try_acquire() {
            return Ok(permit);
        }
        let wait = request.remaining(self.clock.now()).unwrap_or_default();
        let Some(permit) = limit.acquire(wait).await else {
            return Err((
                FailureReason::Shed,
                "held back: the operator's limit on calls in flight had no place before the deadline",
            ));
        };
        match self.breakers.load(&request.operator).await {
            Ok(Some(now))
                if now.state != BreakerState::Closed && now.state != BreakerState::ForcedClosed =>
            {
                Err((
                    FailureReason::BreakerOpen,
                    "breaker opened while the request waited for a place",
                ))
            }
            _ => Ok(permit),
        }
    }

    /// `Some`: the request needs no call, and this is what to report as
    /// written: an outcome is already stored, the item is gone, or it could
    /// not be read (`Err`, the record comes back).
    async fn answered_already(
        &self,
        request: &RequestRecord,
    ) -> Option<Result<Written, StoreError>> {
        match self
            .requests
            .get(&request.operator, &request.request_id)
            .await
        {
            Ok(Some(stored)) if stored.outcome.is_some() => Some(Ok(Written::AlreadyAnswered)),
            Ok(Some(_)) => None,
            Ok(None) => {
                tracing::warn!(request_id = %request.request_id, "request item is gone; nothing to answer");
                Some(Ok(Written::Nothing))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Why the request cannot be called whatever the breaker says: its
    /// deadline has passed, or its operator is unknown.
    fn not_callable(&self, request: &RequestRecord) -> Option<(FailureReason, String)> {
        let now = self.clock.now();
        if request.remaining(now).is_none() {
            return Some((
                FailureReason::Expired,
                "deadline passed before the call".to_owned(),
            ));
        }
        if !self.operator.knows(&request.operator) {
            let detail = format!("unknown operator {}", request.operator);
            return Some((FailureReason::Malformed, detail));
        }
        None
    }

    /// Whether the breaker lets the request call: `Ok(true)` as a half-open
    /// trial (its slot claimed), `Ok(false)` as an ordinary call, `Err` with
    /// the detail of failing fast. An unreadable breaker (`None`) is called
    /// as if closed.
    async fn pass_breaker(
        &self,
        request: &RequestRecord,
        view: Option<&BreakerRecord>,
    ) -> Result<bool, &'static str> {
        match view.map(|r| (r.state, r.version)) {
            Some((BreakerState::Open | BreakerState::ForcedOpen, _)) => Err("breaker open"),
            Some((BreakerState::HalfOpen, version)) => {
                let limit = self
                    .settings
                    .for_operator(&request.operator)
                    .breaker
                    .round(view.is_some_and(|r| r.opened_slow))
                    .trial_calls;
                match self
                    .breakers
                    .claim_trial(&request.operator, version, limit)
                    .await
                {
                    Ok(true) => {
                        tracing::info!(operator = %request.operator, state = %BreakerState::HalfOpen, version, request_id = %request.request_id, "half-open trial call");
                        Ok(true)
                    }
                    Ok(false) => Err("half-open: every trial slot is taken"),
                    Err(e) => {
                        tracing::warn!(operator = %request.operator, error = %e, "trial slot not claimed");
                        Err("half-open: trial slot not claimed")
                    }
                }
            }
            Some((BreakerState::Closed | BreakerState::ForcedClosed, _)) | None => Ok(false),
        }
    }

    /// Call the operator and log the call; the result (cut to what an
    /// outcome can hold), what it says of the operator's health, and, for a
    /// `watched` call (the batch's other answers from the operator with it)
    /// that timed out, the hang check's pings sent while it was late
    /// (lifeboat_core::hang), for the batch to judge.
    async fn call_operator(
        &self,
        request: &RequestRecord,
        watched: Option<Answers>,
    ) -> (CallResult, Health, Option<Train>) {
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
        let train = self
            .settings
            .for_operator(&request.operator)
            .hang_check
            .clone()
            .zip(watched)
            .map(|(check, answers)| {
                Train::start(
                    super::train::Watched {
                        api: self.operator.clone(),
                        breakers: self.breakers.clone(),
                        clock: self.clock.clone(),
                        operator: request.operator.clone(),
                        answers,
                    },
                    check,
                    budget.timeout,
                )
            });
        let result = self.operator.call(&call).await.within(MAX_ANSWER_BYTES);
        // Only a timeout is judged; any other end of the call stops the
        // pings (dropping the train).
        let train = train.filter(|_| result.class == CallClass::Timeout);
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
        (result, health, train)
    }

    /// The outcome of a call, and the status of a refusal (a neutral 4xx
    /// that refuses the question, not one refusing lifeboat's credentials:
    /// those stay upstream errors).
    fn outcome_of(&self, result: CallResult, health: Health) -> (Outcome, Option<u16>) {
        let refused = match (&result.class, health) {
            (CallClass::ClientError { status }, Health::Neutral) => {
                FailureReason::refusal(*status).map(|reason| (*status, reason))
            }
            _ => None,
        };
        let mut outcome = result.into_outcome(self.clock.now(), NAME);
        if let Some((_, refusal)) = refused
            && let OutcomeKind::Failed { reason, .. } = &mut outcome.kind
        {
            // The operator said no to the question itself: a 404 or 422 for
            // the caller, not a 503 to retry.
            *reason = refusal;
        }
        (outcome, refused.map(|(status, _)| status))
    }

    /// Keep an answer, or a refusal, in the answer cache. Never a
    /// booking's: it is one order's, not an answer anyone else may be
    /// given, nor one to give again instead of asking.
    async fn cache_answer(&self, request: &RequestRecord, outcome: &Outcome, refused: Option<u16>) {
        if !request.operation.is_read() {
            return;
        }
        if let OutcomeKind::Answered { body } = &outcome.kind {
            // The cache first: whoever sees the outcome also finds the cache
            // refreshed. A failed cache write costs freshness, not the answer.
            self.refresh_cache(request, body, outcome.at).await;
        }
        if let (Some(status), OutcomeKind::Failed { detail, .. }) = (refused, &outcome.kind) {
            // Cached briefly as a negative answer: askers of the same
            // question get the refusal without another call. Kept beside
            // the last good answer, which it never replaces.
            self.remember_refusal(request, status, detail, outcome.at)
                .await;
        }
    }

    /// Write the outcome of a call, and say a failed one in an event.
    async fn write_answer(
        &self,
        mut done: Processed,
        request: &RequestRecord,
        outcome: Outcome,
    ) -> Processed {
        if let Some(reason) = outcome.failure_reason() {
            let detail = match &outcome.kind {
                OutcomeKind::Failed { detail, .. } => detail.clone(),
                OutcomeKind::Answered { .. } => String::new(),
            };
            done.event = Some(failure_event(request, reason, &detail, outcome.at));
        }
        done.written = lifeboat_stream::write_outcome(self.requests.as_ref(), request, &outcome)
            .await
            .map(Written::from);
        if let Err(StoreError::Rejected(why)) = &done.written {
            // The outcome can never be stored as it is: store that it
            // failed instead, rather than send the record back to call the
            // operator again.
            tracing::error!(operator = %request.operator, request_id = %request.request_id, error = %why, "outcome refused by the store; written as failed");
            let detail = "the answer could not be stored";
            return self
                .fail(done, request, FailureReason::UpstreamError, detail)
                .await;
        }
        if matches!(done.written, Ok(Written::AlreadyAnswered)) {
            done.event = None;
        }
        done
    }

    async fn refresh_cache(&self, request: &RequestRecord, body: &str, at: DateTime<Utc>) {
        let policy = self.settings.for_operator(&request.operator).cache;
        let answer = CachedAnswer {
            key: CacheKey::new(&request.operator, request.operation, &request.params),
            operator: request.operator.clone(),
            operation: request.operation,
            body: body.to_owned(),
            as_of: at,
        };
        if let Err(e) = self.cache.put(&answer, policy.expires_at(at)).await {
            tracing::warn!(
                operator = %request.operator, operation = %request.operation, request_id = %request.request_id,
                error = %e, "answer cache not refreshed"
            );
        }
    }

    async fn remember_refusal(
        &self,
        request: &RequestRecord,
        status: u16,
        detail: &str,
        at: DateTime<Utc>,
    ) {
        let policy = self.settings.for_operator(&request.operator).cache;
        let refusal = CachedRefusal {
            key: CacheKey::new(&request.operator, request.operation, &request.params),
            operator: request.operator.clone(),
            operation: request.operation,
            status,
            detail: detail.to_owned(),
            at,
        };
        if let Err(e) = self
            .cache
            .put_refusal(&refusal, policy.expires_at(at))
            .await
        {
            tracing::warn!(
                operator = %request.operator, operation = %request.operation, request_id = %request.request_id,
                status, error = %e, "refusal not cached"
            );
        }
    }

    /// Fail the request without a call (or after an outcome the store
    /// refused), and say so in an event if the outcome was written.
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
            .map(Written::from);
        if matches!(done.written, Ok(Written::Outcome)) {
            done.event = Some(failure_event(request, reason, detail, outcome.at));
        }
        done
    }
}
