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
//! Every invocation also reconciles: the stream mapping is pointed where the
//! stored states say it should be, and any state change whose event was not
//! published yet is published. So a crash between the state write and the
//! re-point or the publish is repaired by the next invocation (at the latest
//! the next tick), and the same input twice changes nothing.
//!
//! One Requests stream may serve several operators. It feeds the fallback
//! consumer only while every operator it serves is open; otherwise it feeds the
//! real consumer, which fails requests for open operators fast by itself.

pub mod input;

use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::Diagnostic;
use lifeboat_core::breaker::{Decision, Input, decide};
use lifeboat_core::events::{BreakerStateChanged, LifeboatEvent, SCHEMA_VERSION};
use lifeboat_core::ports::{BreakerStore, EventPublisher, Repoint, RouterError, StoreError, StreamRouter};
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerRecord, BreakerState, Clock, ConsumerTarget, OperatorId};
use serde::Serialize;
use serde_json::Value;

use crate::input::{AlarmMap, InputError, SwitchInput};

/// Attempts at a conditional write before giving up on a contended breaker.
const WRITE_ATTEMPTS: u32 = 5;
/// Attempts at re-pointing a mapping that is busy updating.
const REPOINT_ATTEMPTS: u32 = 4;

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
}

impl From<SwitchError> for Diagnostic {
    fn from(e: SwitchError) -> Self {
        let error_type = match &e {
            SwitchError::Input(InputError::UnknownAlarm(_)) => "UnknownAlarm",
            SwitchError::Input(_) => "BadInput",
            SwitchError::Store(_) => "StoreError",
            SwitchError::Contended(_) => "Contended",
            SwitchError::Router(_) => "RouterError",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

/// Everything the switch needs, built once per Lambda instance.
pub struct CircuitSwitch {
    pub breakers: Arc<dyn BreakerStore>,
    pub events: Arc<dyn EventPublisher>,
    pub router: Arc<dyn StreamRouter>,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub alarms: AlarmMap,
    /// The operators this gateway's stream serves. Empty: every operator with
    /// a stored breaker.
    pub operators: Vec<OperatorId>,
    /// Pause between attempts at re-pointing a busy mapping.
    pub repoint_backoff: Duration,
}

/// What one invocation did: returned to direct callers (commands) and logged.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SwitchReport {
    pub decisions: Vec<OperatorDecision>,
    /// Where the stream points after this invocation.
    pub stream_target: Option<ConsumerTarget>,
    pub stream_repointed: bool,
    pub announced: Vec<u64>,
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
    /// Handle one payload.
    pub async fn handle(&self, payload: &Value) -> Result<SwitchReport, SwitchError> {
        let parsed = input::parse(payload, &self.alarms)?;
        let mut report = SwitchReport::default();
        match parsed {
            SwitchInput::One { operator, input } => {
                report.decisions.push(self.apply(&operator, &input).await?);
            }
            SwitchInput::Tick => {
                for operator in self.known_operators().await? {
                    report.decisions.push(self.apply(&operator, &Input::Tick).await?);
                }
            }
        }
        self.reconcile(&mut report).await?;
        Ok(report)
    }

    /// Configured operators plus every operator with a stored breaker.
    async fn known_operators(&self) -> Result<Vec<OperatorId>, SwitchError> {
        let mut operators = self.operators.clone();
        for record in self.breakers.list().await? {
            if !operators.contains(&record.operator) {
                operators.push(record.operator);
            }
        }
        Ok(operators)
    }

    /// Decide and persist one input for one operator.
    async fn apply(&self, operator: &OperatorId, input: &Input) -> Result<OperatorDecision, SwitchError> {
        let cfg = self.settings.for_operator(operator).breaker;
        for _ in 0..WRITE_ATTEMPTS {
            let stored = self.breakers.load(operator).await?;
            let expected = stored.as_ref().map(|r| r.version);
            let now = self.clock.now();
            let current = stored.unwrap_or_else(|| BreakerRecord::initial(operator.clone(), now));
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

    /// Point the stream where the stored states say, and publish every state
    /// change not yet announced.
    async fn reconcile(&self, report: &mut SwitchReport) -> Result<(), SwitchError> {
        let records = self.breakers.list().await?;
        let served: Vec<&BreakerRecord> = records
            .iter()
            .filter(|r| self.operators.is_empty() || self.operators.contains(&r.operator))
            .collect();
        let all_open = !served.is_empty()
            && served.iter().all(|r| r.state.target() == ConsumerTarget::Fallback)
            && (self.operators.is_empty() || self.operators.len() == served.len());
        let target = if all_open { ConsumerTarget::Fallback } else { ConsumerTarget::Real };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.router.point_at(target).await {
                Ok(Repoint::Changed) => {
                    tracing::warn!(target = %target, "stream re-pointed");
                    report.stream_repointed = true;
                    break;
                }
                Ok(Repoint::AlreadyThere) => break,
                Err(RouterError::Busy(why)) if attempt < REPOINT_ATTEMPTS => {
                    tracing::info!(why = %why, attempt, "stream mapping busy; trying again");
                    tokio::time::sleep(self.repoint_backoff * attempt).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        report.stream_target = Some(target);

        let unannounced: Vec<&BreakerRecord> = records.iter().filter(|r| r.announced_version < r.version).collect();
        if unannounced.is_empty() {
            return Ok(());
        }
        let events: Vec<LifeboatEvent> = unannounced
            .iter()
            .map(|r| {
                LifeboatEvent::BreakerStateChanged(BreakerStateChanged {
                    schema_version: SCHEMA_VERSION,
                    operator: r.operator.clone(),
                    from: r.previous.unwrap_or(BreakerState::Closed),
                    to: r.state,
                    version: r.version,
                    reason: r.reason.clone(),
                    at: r.since,
                })
            })
            .collect();
        let failed = match self.events.publish(&events).await {
            Ok(()) => Vec::new(),
            Err(e) => {
                tracing::error!(error = %e, "state change not published; the next invocation tries again");
                e.failed_indexes(events.len())
            }
        };
        for (i, record) in unannounced.iter().enumerate() {
            if failed.contains(&i) {
                continue;
            }
            self.breakers.mark_announced(&record.operator, record.version).await?;
            tracing::info!(operator = %record.operator, state = %record.state, version = record.version, "state change announced");
            report.announced.push(record.version);
        }
        Ok(())
    }
}
