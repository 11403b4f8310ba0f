//! One SQS batch: read every record, group the changes per operator and
//! check them against the Breaker table, settle them newest first, report
//! poison, and say which messages come back and when.

use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;
use lifeboat_core::OperatorId;
use lifeboat_core::invocation::NotABatch;
use lifeboat_core::metrics::{MetricSet, names};
use lifeboat_core::ports::StoreError;
use lifeboat_core::sale::{Settled, status_str, until};
use serde_json::Value;

use crate::read::{Delivery, Poison, read};
use crate::settle::Progress;
use crate::{
    Disposition, ListenerError, ListenerReport, MessageReport, OffsaleListener, RetryReason,
};

/// Operators handled at once within a batch (one operator's messages are
/// handled one after the other).
const OPERATOR_CONCURRENCY: usize = 8;

impl OffsaleListener {
    /// Handle one SQS batch.
    pub async fn handle(&self, payload: &Value) -> Result<ListenerReport, ListenerError> {
        let records = payload
            .get("Records")
            .and_then(Value::as_array)
            .ok_or_else(|| NotABatch("no Records array".into()))?;
        let mut by_operator: BTreeMap<OperatorId, Vec<Delivery>> = BTreeMap::new();
        let mut poison = Vec::new();
        for record in records {
            match read(record, self.on_sale_at) {
                Ok(d) => by_operator
                    .entry(d.change.operator.clone())
                    .or_default()
                    .push(d),
                Err(p) => poison.push(p),
            }
        }
        let mut unconfirmed = Vec::new();
        let mut believed = Vec::new();
        for (operator, deliveries) in by_operator {
            match self.trust.read(&operator).await {
                Ok(stored) => {
                    let mut kept = Vec::with_capacity(deliveries.len());
                    for d in deliveries {
                        match self.trust.refuse(&d.change, &stored) {
                            None => kept.push(d),
                            Some(reason) => {
                                tracing::warn!(operator = %operator, version = d.change.version, state = %d.change.breaker, reason, "state change not believed; dropped");
                                poison.push(Poison {
                                    message_id: Some(d.message_id),
                                    operator: Some(operator.to_string()),
                                    reason,
                                });
                            }
                        }
                    }
                    believed.push(kept);
                }
                Err(e) => {
                    for d in deliveries {
                        unconfirmed.push(self.unconfirmed(d, &e).await);
                    }
                }
            }
        }
        for deliveries in &mut believed {
            // Newest first: an older change in the same batch then costs nothing.
            deliveries.sort_by_key(|d| std::cmp::Reverse(d.change.version));
        }
        let mut report = ListenerReport {
            messages: futures::stream::iter(believed)
                .map(|deliveries| self.process_all(deliveries))
                .buffer_unordered(OPERATOR_CONCURRENCY)
                .flat_map(futures::stream::iter)
                .collect()
                .await,
            ..ListenerReport::default()
        };
        report.messages.extend(unconfirmed);
        report.poison_not_reported = self.report_poison(&poison).await;
        report
            .messages
            .extend(poison.into_iter().map(|p| MessageReport {
                message_id: p.message_id,
                change: None,
                attempts: Vec::new(),
                disposition: Disposition::Poison { reason: p.reason },
            }));
        let mut retried = HashSet::new();
        for m in &report.messages {
            if let (Disposition::Retry { .. }, Some(id)) = (&m.disposition, &m.message_id)
                && retried.insert(id.clone())
            {
                report.response.add_failure(id.clone());
            }
        }
        self.metrics
            .emit(&batch_metrics(&report.messages), self.clock.now());
        tracing::info!(
            messages = report.messages.len(),
            retried = report.response.batch_item_failures.len(),
            "off-sale batch done"
        );
        Ok(report)
    }

    /// A change the Breaker table could not be read for: back after the
    /// schedule's first gap, unjudged.
    async fn unconfirmed(&self, d: Delivery, e: &StoreError) -> MessageReport {
        let delay = self.policy.schedule.first;
        tracing::warn!(operator = %d.change.operator, version = d.change.version, error = %e, "Breaker table unreadable: the change comes back");
        if let Err(e) = self.redelivery.redeliver_after(&d.handle, delay).await {
            tracing::warn!(message_id = %d.message_id, error = %e, "could not set when the message comes back; the queue's visibility timeout decides");
        }
        MessageReport {
            message_id: Some(d.message_id),
            change: Some(d.change),
            attempts: Vec::new(),
            disposition: Disposition::Retry {
                delay,
                why: RetryReason::Failed(format!("Breaker table unreadable: {e}")),
            },
        }
    }

    async fn process_all(&self, deliveries: Vec<Delivery>) -> Vec<MessageReport> {
        let mut reports = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            reports.push(self.process(delivery).await);
        }
        reports
    }

    /// Settle one message as far as possible now, and say when it comes back.
    async fn process(&self, d: Delivery) -> MessageReport {
        let change = &d.change;
        let mut attempts = Vec::new();
        if let Some((open, of)) = self.suspect_self(change).await {
            return MessageReport {
                message_id: Some(d.message_id),
                change: Some(d.change),
                attempts,
                disposition: Disposition::HeldOnSale { open, of },
            };
        }
        let disposition = match self.settle(change, &mut attempts).await {
            Ok(Progress::Settled(settled)) => Disposition::Settled(settled),
            Ok(Progress::Wait { retry_at, why }) => Disposition::Retry {
                delay: until(self.clock.now(), retry_at),
                why: RetryReason::Wait(why),
            },
            Err(e) => Disposition::Retry {
                delay: self.policy.schedule.first,
                why: RetryReason::Failed(e.to_string()),
            },
        };
        let (operator, state, version, from) =
            (&change.operator, change.breaker, change.version, d.from);
        let status = status_str(change.status);
        match &disposition {
            Disposition::Settled(Settled::GaveUp {
                attempts,
                last_error,
            }) => {
                tracing::error!(%operator, %state, version, status, attempts, last_error, "sale switch not written: gave up")
            }
            Disposition::Settled(settled) => {
                tracing::info!(%operator, %from, %state, version, status, ?settled, "sale status settled")
            }
            Disposition::Retry { delay, why } => {
                tracing::warn!(%operator, %state, version, status, ?why, retry_in_ms = delay.as_millis(), "sale status not settled yet");
                if let Err(e) = self.redelivery.redeliver_after(&d.handle, *delay).await {
                    tracing::warn!(%operator, version, message_id = %d.message_id, error = %e, "could not set when the message comes back; the queue's visibility timeout decides");
                }
            }
            Disposition::Poison { .. } | Disposition::HeldOnSale { .. } => {}
        }
        MessageReport {
            message_id: Some(d.message_id),
            change: Some(d.change),
            attempts,
            disposition,
        }
    }
}

/// Sale status changes written and faults raised by one batch: a change
/// counts when this invocation's write applied it, a fault when this
/// invocation gave up on a change or dropped a poison message.
fn batch_metrics(messages: &[MessageReport]) -> Vec<MetricSet> {
    let mut changes: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut held = 0u64;
    for m in messages {
        let operator = m
            .change
            .as_ref()
            .map_or_else(|| "unknown".to_owned(), |c| c.operator.as_str().to_owned());
        let wrote = m.attempts.iter().any(|(_, error)| error.is_none());
        match (&m.disposition, &m.change) {
            (Disposition::Settled(Settled::Applied), Some(change)) if wrote => {
                *changes
                    .entry((operator, status_str(change.status)))
                    .or_default() += 1;
            }
            (Disposition::Settled(Settled::GaveUp { .. }), _) if !m.attempts.is_empty() => {
                *faults.entry(operator).or_default() += 1;
            }
            (Disposition::Poison { .. }, _) => *faults.entry(operator).or_default() += 1,
            (Disposition::HeldOnSale { .. }, _) => held += 1,
            _ => {}
        }
    }
    let mut sets: Vec<MetricSet> = changes
        .into_iter()
        .map(|((operator, status), n)| {
            MetricSet::new()
                .dimension("Operator", operator)
                .dimension("Status", status)
                .count(names::SALE_CHANGES, n)
        })
        .collect();
    let total: u64 = faults.values().sum();
    sets.extend(faults.into_iter().map(|(operator, n)| {
        MetricSet::new()
            .dimension("Operator", operator)
            .count(names::FAULTS, n)
    }));
    sets.extend(fault_total(total));
    if held > 0 {
        sets.push(MetricSet::new().count(names::SELF_FAULT, held));
    }
    sets
}

/// The faults of every operator together, without dimensions: what
/// `FaultEventsAlarm` watches.
pub(crate) fn fault_total(n: u64) -> Option<MetricSet> {
    (n > 0).then(|| MetricSet::new().count(names::FAULTS, n))
}
