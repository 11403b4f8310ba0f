//! Writing the sale status of one change: plan on the operator's sale
//! record, save it conditionally, attempt the switch within the attempt
//! timeout, record the attempt, and publish `Sale Switch Write Failed` once
//! the attempts are used up.

use chrono::{DateTime, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::ports::{PublishError, SaleSwitchError, StoreError};
use lifeboat_core::sale::{SaleChange, SaleRecord, Settled, Step, Wait, status_str};

use crate::OffsaleListener;

/// Store round trips per message before giving up on a contended record.
const STEPS: u32 = 16;

/// Why one message could not be settled this time (it is retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SettleError {
    #[error("sale status store: {0}")]
    Store(#[from] StoreError),
    #[error("fault event not published: {0}")]
    Publish(#[from] PublishError),
    #[error("sale record of {0} kept changing under us; giving up after {STEPS} tries")]
    Contended(OperatorId),
}

/// How far one message got in this invocation.
pub(crate) enum Progress {
    Settled(Settled),
    Wait { retry_at: DateTime<Utc>, why: Wait },
}

impl OffsaleListener {
    /// Plan, save, act and repeat until the change is settled or must wait.
    pub(crate) async fn settle(
        &self,
        change: &SaleChange,
        attempts: &mut Vec<(u32, Option<String>)>,
    ) -> Result<Progress, SettleError> {
        for _ in 0..STEPS {
            let (record, expected) = self.load(&change.operator).await?;
            let plan = record.plan(change, self.clock.now(), &self.policy);
            if let Some(next) = &plan.save {
                match self.store.save(next, expected).await {
                    Ok(()) => {}
                    Err(StoreError::Conflict(why)) => {
                        tracing::debug!(operator = %change.operator, version = change.version, why, "sale record changed under us; planning again");
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            match plan.step {
                Step::Done(settled) => return Ok(Progress::Settled(settled)),
                Step::Wait { retry_at, why } => return Ok(Progress::Wait { retry_at, why }),
                Step::Attempt { attempt } => {
                    let result = self.write(change, attempt).await;
                    attempts.push((attempt, result.as_ref().err().map(ToString::to_string)));
                    self.record_attempt(change, attempt, result.map_err(|e| e.to_string()))
                        .await?;
                }
                Step::Fault(fault) => {
                    tracing::error!(operator = %change.operator, version = fault.version, attempts = fault.attempts, last_error = %fault.last_error, "publishing Sale Switch Write Failed");
                    let version = fault.version;
                    self.events
                        .publish(&[LifeboatEvent::SaleSwitchWriteFailed(fault)])
                        .await?;
                    self.update(&change.operator, |r| r.fault_published(version))
                        .await?;
                }
            }
        }
        Err(SettleError::Contended(change.operator.clone()))
    }

    /// One attempt at the switch, bounded by the attempt timeout.
    async fn write(&self, change: &SaleChange, attempt: u32) -> Result<(), SaleSwitchError> {
        let write = self
            .switch
            .set(&change.operator, change.status, change.version);
        let result = tokio::time::timeout(self.policy.attempt_timeout, write)
            .await
            .unwrap_or(Err(SaleSwitchError::Timeout(self.policy.attempt_timeout)));
        match &result {
            Ok(()) => {
                tracing::warn!(operator = %change.operator, state = %change.breaker, version = change.version, status = status_str(change.status), attempt, "sale switch written")
            }
            Err(e) => {
                tracing::warn!(operator = %change.operator, state = %change.breaker, version = change.version, status = status_str(change.status), attempt, error = %e, "sale switch write failed")
            }
        }
        result
    }

    async fn record_attempt(
        &self,
        change: &SaleChange,
        attempt: u32,
        result: Result<(), String>,
    ) -> Result<(), SettleError> {
        let now = self.clock.now();
        self.update(&change.operator, |r| {
            r.after_attempt(change, attempt, result.clone(), now, &self.policy)
        })
        .await
    }

    /// The stored record (or a fresh one) and the revision to save it on.
    pub(crate) async fn load(
        &self,
        operator: &OperatorId,
    ) -> Result<(SaleRecord, Option<u64>), StoreError> {
        Ok(match self.store.load(operator).await? {
            Some(record) => {
                let revision = record.revision;
                (record, Some(revision))
            }
            None => (SaleRecord::new(operator.clone()), None),
        })
    }

    /// Save `change(record)` conditionally, reading again after a lost race.
    pub(crate) async fn update(
        &self,
        operator: &OperatorId,
        change: impl Fn(&SaleRecord) -> Option<SaleRecord>,
    ) -> Result<(), SettleError> {
        for _ in 0..STEPS {
            let (record, expected) = self.load(operator).await?;
            let Some(next) = change(&record) else {
                return Ok(());
            };
            match self.store.save(&next, expected).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SettleError::Contended(operator.clone()))
    }
}
