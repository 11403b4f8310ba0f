//! The off-sale listener: takes an operator off sale when its breaker opens
//! and puts it back on sale when the breaker goes half-open or closes, so the
//! cart stops selling what the operator cannot confirm.
//!
//! # Input
//!
//! `Breaker State Changed` events, routed by an EventBridge rule to an SQS
//! queue and from there to this function. Each message body is the
//! EventBridge event as the rule delivers it
//! (`{"source": "lifeboat", "detail-type": "Breaker State Changed", "detail": {…}}`).
//! `open` and `forced_open` ask for off sale; `closed` and `forced_closed` for
//! on sale; `half_open` keeps the operator off sale by default and puts it on
//! sale with `SALE_ON_SALE_AT=half_open`
//! ([`OnSaleAt`](lifeboat_core::sale::OnSaleAt)). A change that asks for what
//! the switch already holds is recorded without a write. With a healthy
//! switch the write happens in the invocation that receives the event, within
//! milliseconds of the event's arrival.
//!
//! # The newest version wins
//!
//! Each operator has one [`SaleRecord`] in the status store: the version and
//! status the switch holds, and the newer one still owed to it. A change is
//! written only if its version is newer than both (a conditional save on the
//! record's revision), so duplicates and late arrivals change nothing, and a
//! newer change replaces a write that is still being retried. Only one write
//! per operator is in flight at a time (a lease in the record), so a slow old
//! write cannot land after a newer one. The rules are in
//! [`lifeboat_core::sale`]. The messages of one batch are grouped per operator
//! and taken newest first, so an older change in the same batch costs no write.
//!
//! # Retries: the queue keeps time, the record keeps count
//!
//! A failed write is recorded in the operator's record (attempts, when the
//! next one is due, the last error); the message's visibility is then set to
//! the schedule's gap (SQS `ChangeMessageVisibility`, the [`Redelivery`] port)
//! and the message is reported as a batch item failure, so the queue delivers
//! it again when the gap is over: 5, 10, 20, 40, 60, 60, … seconds
//! ([`RetrySchedule`](lifeboat_core::retry::RetrySchedule)), up to
//! `SALE_RETRY_MAX_ATTEMPTS` attempts. Then `Sale Switch Write Failed` is
//! published with the attempts and the last error, and the message is
//! acknowledged; the version stays recorded as given up, so a late duplicate
//! does not start over, while any newer change does.
//!
//! Why this and not a re-enqueued copy with `DelaySeconds`: the original
//! message stays the only carrier of the retry. There is no copy to send (a
//! send that can fail after the original was acknowledged, or succeed twice),
//! the attempt count lives beside the state it is about instead of in a
//! message body, and a newer change does not need to chase copies: a retry
//! that comes back for a superseded version finds the newer one in the record
//! and is dropped. A crash between retries loses nothing: the message comes
//! back (after the gap, or at worst after the queue's visibility timeout) and
//! the record says where the retries stand. A crash mid-write leaves a lease
//! that runs out; that attempt counts as made. If changing the visibility
//! fails, the message comes back after the queue's visibility timeout; a
//! message that comes back before its attempt is due is put back without an
//! attempt, so the switch is never tried faster than the schedule.
//!
//! # Poison messages
//!
//! A message that is not JSON, not a lifeboat event, of another detail-type,
//! of a newer schema version or otherwise not a readable `Breaker State
//! Changed` is logged, reported once as an `Operator Request Failed` event
//! with reason `malformed` (the detail names the SQS message and why), and
//! acknowledged. It is never retried: it would not read any better.
//!
//! # What the queue and the function need (template)
//!
//! - A standard queue (a FIFO group would hold a newer change behind an
//!   older one that keeps failing), target of the `Breaker State Changed`
//!   rule, with an event source mapping that sets
//!   `FunctionResponseTypes: [ReportBatchItemFailures]`.
//! - `sqs:ChangeMessageVisibility` on the queue for the function, besides
//!   what the mapping needs.
//! - A visibility timeout of at least six times the function timeout (AWS's
//!   advice); it is also the pace of a retry after a crash.
//! - A redrive policy whose `maxReceiveCount` is well above
//!   `SALE_RETRY_MAX_ATTEMPTS` (every attempt is one receive, and waiting for
//!   another write in flight adds a few): three times it plus five is ample.
//!   The dead-letter queue is a backstop for a store outage, not the retry path.
//!
//! # Configuration
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `SALE_SWITCH` | `table`: our status table is the switch and the cart reads it; `http`: the legacy booking system's switch | `table` |
//! | `SALE_SWITCH_URL` | with `http`: URL template, `{operator}` replaced by the operator id, e.g. `https://legacy.example/operators/{operator}/sale-status` | — |
//! | `SALE_SWITCH_METHOD` | with `http`: `PUT` or `POST`; the body is `{"operator": "nordic", "status": "off_sale", "version": 7}` | `PUT` |
//! | `SALE_SWITCH_AUTH_HEADER`, `SALE_SWITCH_AUTH_VALUE` | with `http`: one header sent with every write (both or neither) | none |
//! | `SALE_SWITCH_TIMEOUT_MS` | the longest one write may take; an attempt's lease lasts 10 s longer | `5000` |
//! | `SALE_RETRY_MAX_ATTEMPTS` | attempts per version before the fault | `8` |
//! | `SALE_STATUS_STORE` | where sale records live: `dynamodb` (the SaleStatus table) or `memory` (local runs: lost with the instance) | `dynamodb` |
//! | `SALE_STATUS_TABLE` | with `dynamodb`: the SaleStatus table's name | required |
//! | `OFFSALE_QUEUE_URL` | with `dynamodb`: the queue's URL, for `ChangeMessageVisibility`; unset, retries come at the queue's visibility timeout (a warning at start) | unset |
//! | `EVENT_BUS_NAME` | the bus the fault and poison reports go to | required |
//!
//! # Limits
//!
//! The legacy switch keeps no versions as far as we know: the last write it
//! receives wins there. The lease keeps our own writes in order, but a write
//! we gave up on at its timeout may still reach the legacy system later; the
//! body carries the version so that system can refuse an older one.

pub mod config;
pub mod http;
pub mod selffault;
pub mod sweep;
pub mod trust;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsMessage};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use lambda_runtime::Diagnostic;
use lifeboat_aws::{DynamoSaleStatusStore, SqsRedelivery};
use lifeboat_core::events::{
    BreakerStateChanged, LifeboatEvent, OperatorRequestFailed, SCHEMA_VERSION, SOURCE,
};
use lifeboat_core::invocation::NotABatch;
use lifeboat_core::metrics::{MetricSet, MetricsSink, StdoutMetrics, names};
use lifeboat_core::ports::{EventPublisher, PublishError, StoreError};
use lifeboat_core::request::FailureReason;
use lifeboat_core::sale::{
    MemoryQueue, MemorySaleStatusStore, MessageHandle, OnSaleAt, QueueTimeoutRedelivery,
    Redelivery, SaleChange, SaleRecord, SaleStatusStore, SaleSwitch, SaleSwitchError, Settled,
    StatusTableSwitch, Step, Wait, WritePolicy, status_str, until,
};
use lifeboat_core::watched::watch;
use lifeboat_core::{BreakerState, Clock, OperatorId};
use serde_json::Value;

use crate::config::{ListenerConfig, OFFSALE_QUEUE_URL, StoreChoice, SwitchTarget};
use crate::http::{HttpSaleSwitch, HttpSwitchError};

/// Operators handled at once within a batch (one operator's messages are
/// handled one after the other).
const OPERATOR_CONCURRENCY: usize = 8;
/// Store round trips per message before giving up on a contended record.
const STEPS: u32 = 16;
/// The longest poison detail put in an event.
const MAX_DETAIL_CHARS: usize = 400;

/// Why a whole invocation failed (messages never fail the invocation).
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error("payload is not an SQS batch: {0}")]
    NotABatch(#[from] NotABatch),
    /// The batch response could not be written: the whole batch comes back.
    #[error("batch response not serialisable: {0}")]
    Response(String),
}

impl From<ListenerError> for Diagnostic {
    fn from(e: ListenerError) -> Self {
        let error_type = match e {
            ListenerError::NotABatch(_) => NotABatch::ERROR_TYPE,
            ListenerError::Response(_) => "Response",
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
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Aws(#[from] lifeboat_aws::ConfigError),
    #[error(transparent)]
    Http(#[from] HttpSwitchError),
    /// The secret named by `SALE_SWITCH_AUTH_PARAMETER` could not be read
    /// (the message names the parameter, never a value).
    #[error("{0}")]
    Secret(String),
}

/// Why one message could not be settled this time (it is retried).
#[derive(Debug, thiserror::Error)]
enum SettleError {
    #[error("sale status store: {0}")]
    Store(#[from] StoreError),
    #[error("fault event not published: {0}")]
    Publish(#[from] PublishError),
    #[error("sale record of {0} kept changing under us; giving up after {STEPS} tries")]
    Contended(OperatorId),
}

/// How far one message got in this invocation.
enum Progress {
    Settled(Settled),
    Wait { retry_at: DateTime<Utc>, why: Wait },
}

/// Everything the listener needs, built once per Lambda instance.
pub struct OffsaleListener {
    pub store: Arc<dyn SaleStatusStore>,
    pub switch: Arc<dyn SaleSwitch>,
    pub redelivery: Arc<dyn Redelivery>,
    pub events: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub policy: WritePolicy,
    /// When an operator goes back on sale (`SALE_ON_SALE_AT`).
    pub on_sale_at: OnSaleAt,
    /// Sale changes and faults, as EMF lines.
    pub metrics: Arc<dyn MetricsSink>,
    /// Which changes are believed (see [`trust`]).
    pub trust: trust::Trust,
    /// When open operators are too many to be theirs (see [`selffault`]).
    pub self_fault: selffault::SelfFaultRule,
}

/// Why a message comes back.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryReason {
    /// Its next attempt is not due, or another write is in flight.
    Wait(Wait),
    /// The store or the bus failed; tried again after the first gap.
    Failed(String),
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    /// Nothing more to do: acknowledged (deleted from the queue).
    Settled(Settled),
    /// Reported as a batch item failure; back after `delay`.
    Retry { delay: Duration, why: RetryReason },
    /// Unreadable or not for this listener: reported once, acknowledged.
    Poison { reason: String },
    /// An off-sale change held back: most operators are open at once, more
    /// likely a fault of lifeboat's own than theirs (see [`selffault`]).
    /// Acknowledged; the sale sweep looks again every 5 minutes.
    HeldOnSale { open: usize, of: usize },
}

/// One message of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageReport {
    pub message_id: Option<String>,
    pub change: Option<SaleChange>,
    /// Writes made for it in this invocation: attempt number and error.
    pub attempts: Vec<(u32, Option<String>)>,
    pub disposition: Disposition,
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct ListenerReport {
    pub response: SqsBatchResponse,
    pub messages: Vec<MessageReport>,
    /// Poison reports the bus did not take (the messages are dropped anyway).
    pub poison_not_reported: usize,
}

/// A readable state change and where it came from.
struct Delivery {
    message_id: String,
    handle: MessageHandle,
    change: SaleChange,
    from: BreakerState,
}

/// A message that will never be readable.
struct Poison {
    message_id: Option<String>,
    operator: Option<String>,
    reason: String,
}

impl Poison {
    fn event(&self, at: DateTime<Utc>) -> LifeboatEvent {
        let detail = format!(
            "off-sale listener dropped SQS message {}: {}",
            self.message_id.as_deref().unwrap_or("without id"),
            self.reason
        );
        LifeboatEvent::OperatorRequestFailed(OperatorRequestFailed {
            schema_version: SCHEMA_VERSION,
            request_id: None,
            operator: self.operator.clone(),
            kind: None,
            reason: FailureReason::Malformed,
            detail: detail.chars().take(MAX_DETAIL_CHARS).collect(),
            at,
        })
    }
}

/// Read one SQS record: a state change, or poison.
fn read(record: &Value, on_sale_at: OnSaleAt) -> Result<Delivery, Poison> {
    let raw_id = record
        .get("messageId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let poison = |operator: Option<String>, reason: String| Poison {
        message_id: raw_id.clone(),
        operator,
        reason,
    };
    let message: SqsMessage = serde_json::from_value(record.clone())
        .map_err(|e| poison(None, format!("not an SQS message: {e}")))?;
    let (Some(message_id), Some(receipt_handle)) =
        (message.message_id.clone(), message.receipt_handle.clone())
    else {
        return Err(poison(None, "no messageId or receiptHandle".into()));
    };
    let body = message
        .body
        .as_deref()
        .ok_or_else(|| poison(None, "no body".into()))?;
    let event: Value =
        serde_json::from_str(body).map_err(|e| poison(None, format!("body is not JSON: {e}")))?;
    let detail = event.get("detail");
    let operator = detail
        .and_then(|d| d.get("operator"))
        .and_then(Value::as_str)
        .map(|o| o.chars().take(64).collect());
    let source = event.get("source").and_then(Value::as_str);
    if source != Some(SOURCE) {
        return Err(poison(
            operator,
            format!("source {source:?} is not {SOURCE:?}"),
        ));
    }
    let (Some(detail_type), Some(detail)) =
        (event.get("detail-type").and_then(Value::as_str), detail)
    else {
        return Err(poison(operator, "no detail-type or no detail".into()));
    };
    match LifeboatEvent::parse(detail_type, detail) {
        Ok(LifeboatEvent::BreakerStateChanged(e)) => Ok(Delivery {
            handle: MessageHandle {
                queue_arn: message.event_source_arn.clone(),
                message_id: message_id.clone(),
                receipt_handle,
            },
            message_id,
            change: SaleChange::of(&e, on_sale_at),
            from: e.from,
        }),
        Ok(other) => Err(poison(
            operator,
            format!("{} is not for the off-sale listener", other.detail_type()),
        )),
        Err(e) => Err(poison(operator, e.to_string())),
    }
}

/// Read one SQS record as [`OffsaleListener::handle`] does, without a store:
/// the sale change it asks for, or, for a poison message, the `Operator
/// Request Failed` event that reports it (stamped `at`). For the fuzz targets.
pub fn read_message(
    record: &Value,
    on_sale_at: OnSaleAt,
    at: DateTime<Utc>,
) -> Result<SaleChange, LifeboatEvent> {
    read(record, on_sale_at)
        .map(|d| d.change)
        .map_err(|p| p.event(at))
}

/// The decrypted value of SSM SecureString parameter `name`.
async fn read_secure_string(ssm: &aws_sdk_ssm::Client, name: &str) -> Result<String, StartupError> {
    let output = ssm
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| {
            StartupError::Secret(format!(
                "SSM parameter {name} not read: {}",
                aws_sdk_ssm::error::DisplayErrorContext(&e)
            ))
        })?;
    output
        .parameter
        .and_then(|p| p.value)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| StartupError::Secret(format!("SSM parameter {name} has no value")))
}

impl OffsaleListener {
    /// Build the listener from the environment (see the crate documentation)
    /// and the bus named by `EVENT_BUS_NAME`, reading the sale switch's auth
    /// value from SSM when `SALE_SWITCH_AUTH_PARAMETER` names it (once, here:
    /// every write of this instance then uses it).
    pub async fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
        ssm: &aws_sdk_ssm::Client,
    ) -> Result<Self, StartupError> {
        let mut config = ListenerConfig::from_env(env)?;
        if let Some(secret) = config.auth_secret.take() {
            let value = read_secure_string(ssm, &secret.parameter).await?;
            if let SwitchTarget::Http(http) = &mut config.switch {
                *http = http.clone().with_auth(&secret.header, &value)?;
            }
        }
        let (store, redelivery) = Self::store_ports(&config.store, clients);
        // Every failed table or bus call counts in DependencyErrors.
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn Clock> = Arc::new(lifeboat_core::SystemClock);
        let mut listener = Self::with_ports(
            &config,
            watch(store, &metrics, &clock),
            redelivery,
            watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            clock.clone(),
        )?;
        match env.optional(lifeboat_aws::clients::BREAKER_TABLE)? {
            Some(table) => {
                listener.trust.breakers = Some(watch(
                    Arc::new(lifeboat_aws::DynamoBreakerStore::new(
                        clients.dynamodb.clone(),
                        table,
                    )),
                    &metrics,
                    &clock,
                ));
            }
            None => tracing::warn!(
                "BREAKER_TABLE is not set: state changes are applied without the Breaker table confirming them"
            ),
        }
        if listener.trust.operators.is_none() {
            tracing::warn!("OPERATORS is not set: changes of any operator are applied");
        }
        Ok(listener)
    }

    /// The sale status store and the redelivery `store` asks for: the
    /// SaleStatus table with `ChangeMessageVisibility` on the off-sale queue
    /// (or the queue's own visibility timeout when its URL is not set, with a
    /// warning), or both in memory.
    fn store_ports(
        store: &StoreChoice,
        clients: &lifeboat_aws::Clients,
    ) -> (Arc<dyn SaleStatusStore>, Arc<dyn Redelivery>) {
        match store {
            StoreChoice::Dynamodb { table, queue_url } => {
                let redelivery: Arc<dyn Redelivery> = match queue_url {
                    Some(url) => Arc::new(SqsRedelivery::new(clients.sqs.clone(), url)),
                    None => {
                        tracing::warn!(
                            "{OFFSALE_QUEUE_URL} is not set: failed writes are retried when the queue's visibility timeout runs out, not on the retry schedule"
                        );
                        Arc::new(QueueTimeoutRedelivery)
                    }
                };
                (
                    Arc::new(DynamoSaleStatusStore::new(clients.dynamodb.clone(), table)),
                    redelivery,
                )
            }
            StoreChoice::Memory => {
                tracing::warn!(
                    "sale records are kept in memory: they do not survive this instance"
                );
                (
                    Arc::new(MemorySaleStatusStore::new()),
                    Arc::new(QueueTimeoutRedelivery),
                )
            }
        }
    }

    /// Build the listener on the given ports, with the switch and policy
    /// `config` names.
    pub fn with_ports(
        config: &ListenerConfig,
        store: Arc<dyn SaleStatusStore>,
        redelivery: Arc<dyn Redelivery>,
        events: Arc<dyn EventPublisher>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StartupError> {
        let switch: Arc<dyn SaleSwitch> = match &config.switch {
            SwitchTarget::Table => Arc::new(StatusTableSwitch),
            SwitchTarget::Http(http) => Arc::new(HttpSaleSwitch::new(http.clone())?),
        };
        Ok(Self {
            store,
            switch,
            redelivery,
            events,
            clock,
            policy: config.policy,
            on_sale_at: config.on_sale_at,
            metrics: Arc::new(StdoutMetrics::from_env()),
            trust: trust::Trust {
                operators: config.operators.clone(),
                breakers: None,
            },
            self_fault: config.self_fault,
        })
    }

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

    /// Plan, save, act and repeat until the change is settled or must wait.
    async fn settle(
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
    async fn load(&self, operator: &OperatorId) -> Result<(SaleRecord, Option<u64>), StoreError> {
        Ok(match self.store.load(operator).await? {
            Some(record) => {
                let revision = record.revision;
                (record, Some(revision))
            }
            None => (SaleRecord::new(operator.clone()), None),
        })
    }

    /// Save `change(record)` conditionally, reading again after a lost race.
    async fn update(
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

    /// Publish one report per poison message; how many the bus did not take.
    async fn report_poison(&self, poison: &[Poison]) -> usize {
        if poison.is_empty() {
            return 0;
        }
        let at = self.clock.now();
        for p in poison {
            tracing::error!(
                message_id = p.message_id.as_deref().unwrap_or("-"),
                operator = p.operator.as_deref().unwrap_or("-"),
                reason = %p.reason,
                "poison message acknowledged without retry"
            );
        }
        let events: Vec<LifeboatEvent> = poison.iter().map(|p| p.event(at)).collect();
        match self.events.publish(&events).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!(error = %e, "poison reports not published");
                e.failed_indexes(events.len()).len()
            }
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

/// The SQS message body the `Breaker State Changed` rule delivers for `change`.
pub fn rule_message(change: &BreakerStateChanged) -> String {
    serde_json::json!({
        "version": "0",
        "id": format!("{}-{}", change.operator, change.version),
        "detail-type": lifeboat_core::events::BREAKER_STATE_CHANGED,
        "source": SOURCE,
        "account": "123456789012",
        "time": change.at,
        "region": "us-east-1",
        "resources": [],
        "detail": change,
    })
    .to_string()
}

/// The batch Lambda's SQS event source mapping would deliver for `messages`.
pub fn sqs_event(messages: &[lifeboat_core::sale::ReceivedMessage]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            serde_json::json!({
                "messageId": m.message_id,
                "receiptHandle": m.receipt_handle,
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": m.receive_count.to_string(),
                    "SentTimestamp": m.sent_at.timestamp_millis().to_string(),
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": m.sent_at.timestamp_millis().to_string(),
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": MemoryQueue::ARN,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::json!({ "Records": records })
}

/// One round of the SQS event source mapping on a [`MemoryQueue`]: receive up
/// to `max` visible messages, hand them to `listener` as one batch, and delete
/// those not reported as failures. `None` when no message was visible.
pub async fn deliver(
    listener: &OffsaleListener,
    queue: &MemoryQueue,
    max: usize,
) -> Result<Option<ListenerReport>, ListenerError> {
    let received = queue.receive(max);
    if received.is_empty() {
        return Ok(None);
    }
    let report = listener.handle(&sqs_event(&received)).await?;
    let failed: HashSet<&str> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    for m in &received {
        if !failed.contains(m.message_id.as_str()) {
            queue.delete(&m.receipt_handle);
        }
    }
    Ok(Some(report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{StoreChoice, SwitchTarget};
    use crate::http::{HttpSwitchConfig, legacy::Legacy};
    use chrono::TimeDelta;
    use lifeboat_core::ManualClock;
    use lifeboat_core::events::SaleStatus;
    use lifeboat_core::events::SaleSwitchWriteFailed;
    use lifeboat_core::memory::MemoryEventBus;
    use lifeboat_core::retry::RetrySchedule;
    use lifeboat_core::sale::DEFAULT_ON_SALE_HOLD;
    use lifeboat_core::sale::{MemorySaleSwitch, SwitchOutcome};
    use serde_json::json;

    /// Follows tokio's (paused) time.
    #[derive(Debug, Clone, Copy)]
    struct TokioClock {
        base: DateTime<Utc>,
        start: tokio::time::Instant,
    }

    impl Clock for TokioClock {
        fn now(&self) -> DateTime<Utc> {
            self.base + TimeDelta::from_std(self.start.elapsed()).unwrap()
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_032_800, 0).unwrap()
    }

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn change(version: u64, to: BreakerState) -> BreakerStateChanged {
        BreakerStateChanged {
            schema_version: SCHEMA_VERSION,
            operator: nordic(),
            from: BreakerState::Closed,
            to,
            version,
            reason: "test".into(),
            at: t0(),
        }
    }

    const VISIBILITY: Duration = Duration::from_secs(30);

    struct World {
        store: Arc<MemorySaleStatusStore>,
        switch: Arc<MemorySaleSwitch>,
        queue: Arc<MemoryQueue>,
        events: Arc<MemoryEventBus>,
        clock: Arc<dyn Clock>,
        policy: WritePolicy,
        metrics: Arc<lifeboat_core::metrics::MemoryMetrics>,
    }

    impl World {
        /// A world on paused tokio time (call inside a paused runtime).
        fn paused(max_attempts: u32) -> Self {
            Self::on(
                Arc::new(TokioClock {
                    base: t0(),
                    start: tokio::time::Instant::now(),
                }),
                max_attempts,
            )
        }

        fn on(clock: Arc<dyn Clock>, max_attempts: u32) -> Self {
            Self {
                store: Arc::new(MemorySaleStatusStore::new()),
                switch: Arc::new(MemorySaleSwitch::new(clock.clone())),
                queue: Arc::new(MemoryQueue::new(clock.clone(), VISIBILITY)),
                events: Arc::new(MemoryEventBus::new()),
                metrics: Arc::new(lifeboat_core::metrics::MemoryMetrics::new()),
                clock,
                policy: WritePolicy::new(
                    RetrySchedule {
                        max_attempts,
                        ..RetrySchedule::default()
                    },
                    Duration::from_secs(5),
                )
                // The write mechanics, without the holds.
                .with_on_sale_hold(Duration::ZERO)
                .with_off_sale_hold(Duration::ZERO),
            }
        }

        /// A listener on this world's stores: as many as you like, one per
        /// Lambda instance.
        fn listener(&self) -> OffsaleListener {
            OffsaleListener {
                store: self.store.clone(),
                switch: self.switch.clone(),
                redelivery: self.queue.clone(),
                events: self.events.clone(),
                clock: self.clock.clone(),
                policy: self.policy,
                on_sale_at: OnSaleAt::HalfOpen,
                metrics: self.metrics.clone(),
                trust: trust::Trust::default(),
                self_fault: selffault::SelfFaultRule::default(),
            }
        }

        fn send(&self, version: u64, to: BreakerState) -> String {
            self.queue.send(rule_message(&change(version, to)))
        }

        async fn deliver(&self, listener: &OffsaleListener) -> Option<ListenerReport> {
            deliver(listener, &self.queue, 10).await.unwrap()
        }

        /// Deliver until the queue is empty, sleeping (paused) until the next
        /// message is visible.
        async fn drain(&self, listener: &OffsaleListener) -> usize {
            let mut rounds = 0;
            while rounds < 200 {
                if self.deliver(listener).await.is_some() {
                    rounds += 1;
                    continue;
                }
                let Some(at) = self.queue.next_visible_at() else {
                    return rounds;
                };
                tokio::time::sleep(until(self.clock.now(), at).max(Duration::from_millis(1))).await;
            }
            panic!("the queue never emptied");
        }

        /// Every write to the switch: whole seconds after t0, version, accepted.
        fn writes(&self) -> Vec<(i64, u64, SwitchOutcome)> {
            self.switch
                .writes()
                .into_iter()
                .map(|w| {
                    let ms = (w.at - t0()).num_milliseconds();
                    ((ms + 500).div_euclid(1000), w.version, w.outcome)
                })
                .collect()
        }

        fn faults(&self) -> Vec<SaleSwitchWriteFailed> {
            self.events
                .events()
                .into_iter()
                .filter_map(|e| match e {
                    LifeboatEvent::SaleSwitchWriteFailed(f) => Some(f),
                    _ => None,
                })
                .collect()
        }

        fn poison_reports(&self) -> Vec<OperatorRequestFailed> {
            self.events
                .events()
                .into_iter()
                .filter_map(|e| match e {
                    LifeboatEvent::OperatorRequestFailed(f) => Some(f),
                    _ => None,
                })
                .collect()
        }

        async fn record(&self) -> SaleRecord {
            self.store.load(&nordic()).await.unwrap().unwrap()
        }
    }

    fn failed() -> SwitchOutcome {
        SwitchOutcome::Failed("503 Service Unavailable".into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_switch_takes_the_operator_off_sale_in_the_same_invocation() {
        let w = World::paused(8);
        let listener = w.listener();
        w.send(1, BreakerState::Open);
        let report = w.deliver(&listener).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(
            report.messages[0].disposition,
            Disposition::Settled(Settled::Applied)
        );
        assert_eq!(report.messages[0].attempts, vec![(1, None)]);
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        // Written at the moment of delivery, well within 2 s of the breaker opening.
        assert_eq!(w.switch.writes()[0].at, t0());
        assert!(w.queue.is_empty());
        let record = w.record().await;
        assert_eq!(
            (record.applied_version, record.status()),
            (1, SaleStatus::OffSale)
        );
        assert_eq!((record.pending, record.lease), (None, None));
    }

    #[tokio::test(start_paused = true)]
    async fn by_default_an_incident_costs_one_off_sale_and_one_on_sale_write() {
        // Three failed half-open rounds, then a closing one, a trip 20 s
        // later (the operator flapped), and the close that holds.
        let w = World::paused(8);
        let listener = OffsaleListener {
            on_sale_at: OnSaleAt::Closed,
            policy: w.policy.with_on_sale_hold(DEFAULT_ON_SALE_HOLD),
            ..w.listener()
        };
        let rounds = [
            BreakerState::Open,
            BreakerState::HalfOpen,
            BreakerState::Open,
            BreakerState::HalfOpen,
            BreakerState::Open,
            BreakerState::HalfOpen,
            BreakerState::Closed,
            BreakerState::Open,
            BreakerState::HalfOpen,
            BreakerState::Closed,
        ];
        for (i, to) in rounds.into_iter().enumerate() {
            let version = u64::try_from(i).unwrap() + 1;
            w.send(version, to);
            let report = w.deliver(&listener).await.unwrap();
            // A close comes back when its hold is over.
            let held = usize::from(to == BreakerState::Closed);
            assert_eq!(report.response.batch_item_failures.len(), held);
            // The operator stays off sale, closed breaker included: the
            // on-sale write waits for the breaker to stay closed a minute.
            assert_eq!(
                w.switch.status(&nordic()),
                SaleStatus::OffSale,
                "after v{version} {to}"
            );
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        // The last close at +90 s goes on sale at +150 s; the one at +60 s,
        // tripped again 10 s later, was never written.
        w.drain(&listener).await;
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        assert_eq!(w.record().await.applied_version, 10);
        assert_eq!(
            w.writes(),
            vec![
                (0, 1, SwitchOutcome::Accepted),
                (150, 10, SwitchOutcome::Accepted)
            ]
        );
        // The same incident on sale at half-open without a hold (the seed
        // behaviour): a write per change, but for closing after a half-open
        // round that had already put the operator on sale.
        let w = World::paused(8);
        let listener = w.listener();
        for (i, to) in rounds.into_iter().enumerate() {
            w.send(u64::try_from(i).unwrap() + 1, to);
            w.deliver(&listener).await.unwrap();
        }
        assert_eq!(w.writes().len(), rounds.len() - 2);
        assert_eq!(w.record().await.applied_version, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn forged_changes_and_strangers_are_dropped_with_a_fault() {
        let w = World::paused(8);
        let breakers = Arc::new(lifeboat_core::memory::MemoryBreakerStore::new());
        let mut open = lifeboat_core::BreakerRecord::initial(nordic(), t0());
        open.state = BreakerState::Open;
        open.version = 3;
        lifeboat_core::ports::BreakerStore::save(breakers.as_ref(), &open, None)
            .await
            .unwrap();
        let listener = OffsaleListener {
            trust: trust::Trust {
                operators: Some([nordic()].into()),
                breakers: Some(breakers.clone()),
            },
            ..w.listener()
        };
        // A forged change far in the future, a stranger, and a state the
        // table does not hold: all acknowledged, none written.
        w.send(1 << 62, BreakerState::Open);
        let mut stranger = change(2, BreakerState::Open);
        stranger.operator = OperatorId::new("zzz").unwrap();
        w.queue.send(rule_message(&stranger));
        w.send(3, BreakerState::Closed);
        let report = w.deliver(&listener).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(report.messages.len(), 3);
        assert!(
            report
                .messages
                .iter()
                .all(|m| matches!(m.disposition, Disposition::Poison { .. })),
            "{:?}",
            report.messages
        );
        assert!(w.writes().is_empty());
        assert_eq!(w.events.events().len(), 3, "a fault event each");
        // The real change goes through, and the forged one blocks nothing.
        w.send(3, BreakerState::Open);
        w.deliver(&listener).await.unwrap();
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        assert_eq!(w.record().await.applied_version, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn duplicates_and_out_of_order_changes_leave_the_newest_state() {
        // One at a time: v3 open, v5 closed, v4 half-open (late), v3 again.
        let w = World::paused(8);
        let listener = w.listener();
        for (version, to) in [
            (3, BreakerState::Open),
            (5, BreakerState::Closed),
            (4, BreakerState::HalfOpen),
            (3, BreakerState::Open),
        ] {
            w.send(version, to);
            let report = w.deliver(&listener).await.unwrap();
            assert!(report.response.batch_item_failures.is_empty());
        }
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        assert_eq!(
            w.writes(),
            vec![
                (0, 3, SwitchOutcome::Accepted),
                (0, 5, SwitchOutcome::Accepted)
            ]
        );
        let record = w.record().await;
        assert_eq!(
            (record.applied_version, record.status()),
            (5, SaleStatus::OnSale)
        );
        assert!(w.queue.is_empty());

        // All in one batch, in the same order: only the newest is written.
        let w = World::paused(8);
        let listener = w.listener();
        for (version, to) in [
            (3, BreakerState::Open),
            (5, BreakerState::Closed),
            (4, BreakerState::HalfOpen),
            (3, BreakerState::Open),
        ] {
            w.send(version, to);
        }
        let report = w.deliver(&listener).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(w.writes(), vec![(0, 5, SwitchOutcome::Accepted)]);
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        let settled: Vec<_> = report.messages.iter().map(|m| &m.disposition).collect();
        assert_eq!(
            settled,
            vec![
                &Disposition::Settled(Settled::Applied),
                &Disposition::Settled(Settled::Outdated { applied: 5 }),
                &Disposition::Settled(Settled::Outdated { applied: 5 }),
                &Disposition::Settled(Settled::Outdated { applied: 5 }),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failed_writes_are_retried_after_5_10_20_40_and_60_seconds() {
        let w = World::paused(8);
        w.switch.fail_next(5);
        let listener = w.listener();
        w.send(1, BreakerState::Open);
        let first = w.deliver(&listener).await.unwrap();
        assert_eq!(first.response.batch_item_failures.len(), 1);
        assert!(matches!(
            &first.messages[0].disposition,
            Disposition::Retry { delay, why: RetryReason::Wait(Wait::NotDue { attempts: 1, .. }) }
                if *delay == Duration::from_secs(5)
        ));
        let pending = w.record().await.pending.unwrap();
        assert_eq!(
            pending.last_error.as_deref(),
            Some("sale switch answered 503 Service Unavailable")
        );
        w.drain(&listener).await;
        assert_eq!(
            w.writes(),
            vec![
                (0, 1, failed()),
                (5, 1, failed()),
                (15, 1, failed()),
                (35, 1, failed()),
                (75, 1, failed()),
                (135, 1, SwitchOutcome::Accepted),
            ]
        );
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        assert!(w.faults().is_empty());
        assert!(w.queue.is_empty());
        assert_eq!(w.record().await.pending, None);
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_last_attempt_the_fault_is_published_once() {
        let w = World::paused(5);
        w.switch.fail_next(u32::MAX);
        let listener = w.listener();
        w.send(1, BreakerState::Open);
        w.drain(&listener).await;
        let times: Vec<i64> = w.writes().iter().map(|(t, _, _)| *t).collect();
        assert_eq!(times, vec![0, 5, 15, 35, 75]);
        let faults = w.faults();
        assert_eq!(faults.len(), 1);
        assert_eq!(
            (
                faults[0].operator.clone(),
                faults[0].wanted,
                faults[0].version,
                faults[0].attempts
            ),
            (nordic(), SaleStatus::OffSale, 1, 5)
        );
        assert_eq!(
            faults[0].last_error,
            "sale switch answered 503 Service Unavailable"
        );
        assert_eq!(faults[0].at, t0() + TimeDelta::seconds(75));
        // The message was acknowledged; a late duplicate starts nothing again.
        assert!(w.queue.is_empty());
        w.send(1, BreakerState::Open);
        let report = w.deliver(&listener).await.unwrap();
        assert!(matches!(
            report.messages[0].disposition,
            Disposition::Settled(Settled::GaveUp { attempts: 5, .. })
        ));
        assert_eq!((w.writes().len(), w.faults().len()), (5, 1));
        // The legacy system recovers; the next change goes through.
        w.switch.fail_next(0);
        w.send(2, BreakerState::HalfOpen);
        w.drain(&listener).await;
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        assert_eq!(w.record().await.applied_version, 2);

        // One fault and one change written, as metrics.
        let sum = |name, dims: &[(&str, &str)]| w.metrics.sum(name, dims);
        assert_eq!(sum(names::FAULTS, &[("Operator", "nordic")]), 1.0);
        assert_eq!(
            sum(
                names::SALE_CHANGES,
                &[("Operator", "nordic"), ("Status", "on_sale")]
            ),
            1.0
        );
        assert_eq!(sum(names::SALE_CHANGES, &[("Status", "off_sale")]), 0.0);
    }

    /// A listener that trusts nordic's breakers in `breakers` (and sweeps them).
    fn trusting(
        w: &World,
        breakers: &Arc<lifeboat_core::memory::MemoryBreakerStore>,
    ) -> OffsaleListener {
        OffsaleListener {
            on_sale_at: OnSaleAt::Closed,
            trust: trust::Trust {
                operators: Some([nordic()].into()),
                breakers: Some(breakers.clone()),
            },
            ..w.listener()
        }
    }

    async fn put_breaker(
        breakers: &lifeboat_core::memory::MemoryBreakerStore,
        version: u64,
        state: BreakerState,
    ) {
        let mut record = lifeboat_core::BreakerRecord::initial(nordic(), t0());
        record.version = version;
        record.state = state;
        let stored = lifeboat_core::ports::BreakerStore::load(breakers, &nordic())
            .await
            .unwrap()
            .map(|r| r.version);
        lifeboat_core::ports::BreakerStore::save(breakers, &record, stored)
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_writes_a_given_up_change_again_and_a_lost_one_at_all() {
        let w = World::paused(2);
        let breakers = Arc::new(lifeboat_core::memory::MemoryBreakerStore::new());
        let listener = trusting(&w, &breakers);
        // In step: nothing to do.
        assert_eq!(listener.sweep().await.in_step, 1);

        // Open at v1; the switch is down for both attempts: given up.
        put_breaker(&breakers, 1, BreakerState::Open).await;
        w.switch.fail_next(2);
        w.send(1, BreakerState::Open);
        w.drain(&listener).await;
        assert_eq!(w.faults().len(), 1);
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        // The switch is back: the next sweep writes it.
        let swept = listener.sweep().await;
        assert_eq!(swept.settled.len(), 1, "{swept:?}");
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        assert_eq!(w.record().await.applied_version, 1);

        // Closed at v3, and its event lost: the sweep starts the on-sale
        // write, which waits for its hold like any other, then writes it.
        put_breaker(&breakers, 3, BreakerState::Closed).await;
        let listener = OffsaleListener {
            policy: w.policy.with_on_sale_hold(Duration::from_secs(60)),
            ..listener
        };
        assert_eq!(listener.sweep().await.waiting.len(), 1);
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        tokio::time::sleep(Duration::from_secs(300)).await;
        let swept = listener.sweep().await;
        assert_eq!(swept.settled.len(), 1, "{swept:?}");
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        assert_eq!(listener.sweep().await.in_step, 1);
        // Without OPERATORS and the Breaker table it does nothing.
        assert!(w.listener().sweep().await.skipped.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn when_most_operators_open_at_once_none_goes_off_sale() {
        // Four operators, three open together: our own egress, most likely.
        let w = World::paused(8);
        let breakers = Arc::new(lifeboat_core::memory::MemoryBreakerStore::new());
        let names = ["nordic", "baltic", "aland", "gotland"];
        let listener = OffsaleListener {
            on_sale_at: OnSaleAt::Closed,
            trust: trust::Trust {
                operators: Some(names.iter().map(|n| OperatorId::new(*n).unwrap()).collect()),
                breakers: Some(breakers.clone()),
            },
            ..w.listener()
        };
        let open = async |name: &str| {
            let mut r = lifeboat_core::BreakerRecord::initial(OperatorId::new(name).unwrap(), t0());
            r.state = BreakerState::Open;
            r.version = 1;
            lifeboat_core::ports::BreakerStore::save(breakers.as_ref(), &r, None)
                .await
                .unwrap();
            let mut change = change(1, BreakerState::Open);
            change.operator = OperatorId::new(name).unwrap();
            w.queue.send(rule_message(&change));
        };
        // One down: off sale as usual.
        open("nordic").await;
        w.deliver(&listener).await.unwrap();
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        // Two of four: half, "most" by the default share: held on sale.
        open("baltic").await;
        let report = w.deliver(&listener).await.unwrap();
        assert_eq!(
            report.messages[0].disposition,
            Disposition::HeldOnSale { open: 2, of: 4 }
        );
        assert!(report.response.batch_item_failures.is_empty());
        let baltic = OperatorId::new("baltic").unwrap();
        assert_eq!(w.switch.status(&baltic), SaleStatus::OnSale);
        let suspected = w
            .events
            .events()
            .into_iter()
            .filter(|e| matches!(e, LifeboatEvent::SelfFaultSuspected(_)))
            .count();
        assert_eq!(suspected, 1);
        assert_eq!(w.metrics.sum(names::SELF_FAULT, &[]), 1.0);
        // The fault passes (baltic's own breaker stays open): the sweep
        // writes what was held.
        let mut nordic_closed = lifeboat_core::BreakerRecord::initial(nordic(), t0());
        nordic_closed.version = 2;
        lifeboat_core::ports::BreakerStore::save(breakers.as_ref(), &nordic_closed, Some(1))
            .await
            .unwrap();
        let swept = listener.sweep().await;
        assert!(
            swept
                .settled
                .iter()
                .any(|(o, v, _)| *o == baltic && *v == 1),
            "{swept:?}"
        );
        assert_eq!(w.switch.status(&baltic), SaleStatus::OffSale);
    }

    #[tokio::test(start_paused = true)]
    async fn a_newer_state_supersedes_a_pending_retry() {
        let w = World::paused(8);
        w.switch.fail_next(1);
        let listener = w.listener();
        w.send(5, BreakerState::Open);
        w.deliver(&listener).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.send(6, BreakerState::HalfOpen);
        let report = w.deliver(&listener).await.unwrap();
        assert_eq!(
            report.messages[0].disposition,
            Disposition::Settled(Settled::Applied)
        );
        w.drain(&listener).await;
        // v5's retry came back at +5 s and was dropped without a write.
        assert_eq!(
            w.writes(),
            vec![(0, 5, failed()), (1, 6, SwitchOutcome::Accepted)]
        );
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
        let record = w.record().await;
        assert_eq!((record.applied_version, record.pending), (6, None));
        assert!(w.faults().is_empty());

        // The newer state failing too: its own schedule runs, v5 never again.
        let w = World::paused(8);
        w.switch.fail_next(2);
        let listener = w.listener();
        w.send(5, BreakerState::Open);
        w.deliver(&listener).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.send(6, BreakerState::HalfOpen);
        w.drain(&listener).await;
        assert_eq!(
            w.writes(),
            vec![
                (0, 5, failed()),
                (1, 6, failed()),
                (6, 6, SwitchOutcome::Accepted)
            ]
        );
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_between_retries_loses_nothing() {
        let w = World::paused(8);
        w.switch.fail_next(2);
        let listener = w.listener();
        w.send(1, BreakerState::Open);
        w.deliver(&listener).await.unwrap();
        drop(listener);
        // Everything needed to carry on is in the store and the queue.
        let pending = w.record().await.pending.unwrap();
        assert_eq!(pending.attempts, 1);
        assert_eq!(pending.next_attempt_at, t0() + TimeDelta::seconds(5));
        let restarted = w.listener();
        w.drain(&restarted).await;
        assert_eq!(
            w.writes(),
            vec![
                (0, 1, failed()),
                (5, 1, failed()),
                (15, 1, SwitchOutcome::Accepted)
            ]
        );
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_mid_write_is_taken_up_when_the_message_returns() {
        let w = World::paused(8);
        w.switch.hang_next(1);
        let listener = w.listener();
        w.send(1, BreakerState::Open);
        // The instance dies while the write hangs.
        let crashed = tokio::time::timeout(Duration::from_millis(100), w.deliver(&listener)).await;
        assert!(crashed.is_err());
        drop(listener);
        assert!(w.record().await.lease.is_some());
        let restarted = w.listener();
        w.drain(&restarted).await;
        // The message came back after the queue's visibility timeout; the
        // lease had run out, so the second attempt went ahead.
        assert_eq!(
            w.writes(),
            vec![
                (0, 1, SwitchOutcome::Hung),
                (30, 1, SwitchOutcome::Accepted)
            ]
        );
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_answers_times_out_and_is_retried() {
        let w = World::paused(8);
        w.switch.hang_next(1);
        let listener = w.listener();
        w.send(1, BreakerState::Open);
        let report = w.deliver(&listener).await.unwrap();
        assert_eq!(
            report.messages[0].attempts,
            vec![(
                1,
                Some("sale switch did not answer within 5000 ms".to_owned())
            )]
        );
        w.drain(&listener).await;
        // Timed out at +5 s, retried 5 s later.
        assert_eq!(
            w.writes(),
            vec![
                (0, 1, SwitchOutcome::Hung),
                (10, 1, SwitchOutcome::Accepted)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn poison_messages_are_acknowledged_and_reported_not_retried() {
        let w = World::paused(8);
        let listener = w.listener();
        let mut newer = json!({"source": "lifeboat", "detail-type": "Breaker State Changed",
            "detail": serde_json::to_value(change(2, BreakerState::Open)).unwrap()});
        newer["detail"]["schema_version"] = 2.into();
        let bodies = [
            "not json at all".to_owned(),
            json!({"source": "lifeboat", "detail-type": "Breaker Exploded", "detail": {"operator": "nordic"}}).to_string(),
            newer.to_string(),
            json!({"source": "lifeboat", "detail-type": "Trials Passed", "detail": {"schema_version": 1,
                "operator": "nordic", "observed_version": 2, "successes": 2, "at": "2026-11-30T10:16:03Z"}}).to_string(),
            json!({"source": "someone.else", "detail-type": "Breaker State Changed", "detail": {}}).to_string(),
            json!({"source": "lifeboat", "detail-type": "Breaker State Changed", "detail": {"operator": "nordic"}}).to_string(),
        ];
        for body in &bodies {
            w.queue.send(body.clone());
        }
        w.send(1, BreakerState::Open);
        let report = w.deliver(&listener).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert!(w.queue.is_empty());
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        let poison: Vec<&str> = report
            .messages
            .iter()
            .filter_map(|m| match &m.disposition {
                Disposition::Poison { reason } => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(poison.len(), bodies.len());
        assert!(poison[0].contains("not JSON"));
        assert!(poison[1].contains("unknown detail-type"));
        assert!(poison[2].contains("schema_version 2 is newer"));
        assert!(poison[3].contains("Trials Passed is not for the off-sale listener"));
        assert!(poison[4].contains("someone.else"));
        assert!(poison[5].contains("does not match its schema"));
        let reports = w.poison_reports();
        assert_eq!(reports.len(), bodies.len());
        assert!(reports.iter().all(|r| r.reason == FailureReason::Malformed));
        assert!(
            reports[0]
                .detail
                .starts_with("off-sale listener dropped SQS message msg-1: ")
        );
        assert_eq!(reports[1].operator.as_deref(), Some("nordic"));

        // A record that is not even an SQS message is dropped the same way.
        let odd = listener
            .handle(&json!({"Records": [{"messageId": 7}, {"messageId": "m", "body": "{}"}]}))
            .await
            .unwrap();
        assert!(odd.response.batch_item_failures.is_empty());
        assert_eq!(w.poison_reports().len(), bodies.len() + 2);
    }

    #[tokio::test]
    async fn not_a_batch_is_an_error_with_a_diagnostic() {
        let w = World::on(Arc::new(ManualClock::new(t0())), 8);
        let err = w.listener().handle(&json!({"foo": 1})).await.unwrap_err();
        let diagnostic: Diagnostic = err.into();
        assert_eq!(diagnostic.error_type, "NotABatch");
        assert!(diagnostic.error_message.contains("Records"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_deliveries_of_one_change_write_it_once() {
        let clock = ManualClock::new(t0());
        let w = World::on(Arc::new(clock.clone()), 8);
        for _ in 0..16 {
            w.send(1, BreakerState::Open);
        }
        let batches: Vec<_> = (0..8).map(|_| sqs_event(&w.queue.receive(2))).collect();
        let listener = Arc::new(w.listener());
        let tasks: Vec<_> = batches
            .into_iter()
            .map(|batch| {
                let listener = listener.clone();
                tokio::spawn(async move { listener.handle(&batch).await.unwrap() })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        // The rest come back and find it applied.
        clock.advance(VISIBILITY);
        while deliver(&listener, &w.queue, 10).await.unwrap().is_some() {}
        let accepted = w
            .switch
            .writes()
            .into_iter()
            .filter(|w| w.outcome == SwitchOutcome::Accepted)
            .count();
        assert_eq!(accepted, 1);
        assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
        assert!(w.queue.is_empty());
    }

    #[tokio::test]
    async fn the_fixture_payload_is_understood() {
        let w = World::on(Arc::new(ManualClock::new(t0())), 8);
        let path = format!(
            "{}/events/sqs-breaker-state-changed.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let payload: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let report = w.listener().handle(&payload).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        // The same event delivered twice (EventBridge and SQS deliver at least once).
        assert_eq!(report.messages.len(), 2);
        assert_eq!(w.switch.writes().len(), 1);
        let record = w.record().await;
        assert_eq!(
            (record.applied_version, record.status()),
            (7, SaleStatus::OffSale)
        );
    }

    fn http_world(legacy: &Legacy, clock: &ManualClock) -> (World, OffsaleListener) {
        let w = World::on(Arc::new(clock.clone()), 8);
        let config = ListenerConfig {
            switch: SwitchTarget::Http(
                HttpSwitchConfig::new(
                    &legacy.url("/operators/{operator}/sale-status"),
                    "PUT",
                    Some(("x-api-key", "k")),
                    Duration::from_secs(2),
                )
                .unwrap(),
            ),
            policy: w.policy,
            store: StoreChoice::Memory,
            on_sale_at: OnSaleAt::HalfOpen,
            operators: None,
            self_fault: selffault::SelfFaultRule::default(),
            auth_secret: None,
        };
        let listener = OffsaleListener::with_ports(
            &config,
            w.store.clone(),
            w.queue.clone(),
            w.events.clone(),
            w.clock.clone(),
        )
        .unwrap();
        (w, listener)
    }

    #[tokio::test]
    async fn the_legacy_switch_is_written_within_two_seconds_of_the_event() {
        let legacy = Legacy::start().await;
        let clock = ManualClock::new(t0());
        let (w, listener) = http_world(&legacy, &clock);
        w.send(7, BreakerState::Open);
        let started = std::time::Instant::now();
        let report = w.deliver(&listener).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(report.response.batch_item_failures.is_empty());
        let seen = legacy.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/operators/nordic/sale-status");
        assert_eq!(
            seen[0].body,
            json!({"operator": "nordic", "status": "off_sale", "version": 7})
        );
        assert_eq!(w.record().await.status(), SaleStatus::OffSale);
    }

    #[tokio::test]
    async fn a_legacy_outage_is_retried_on_schedule() {
        let legacy = Legacy::start().await;
        legacy.answer_with(&[503, 500]);
        let clock = ManualClock::new(t0());
        let (w, listener) = http_world(&legacy, &clock);
        w.send(1, BreakerState::Open);
        let report = w.deliver(&listener).await.unwrap();
        assert_eq!(report.response.batch_item_failures.len(), 1);
        assert_eq!(
            w.queue.next_visible_at(),
            Some(t0() + TimeDelta::seconds(5))
        );
        // Nothing is visible before the gap is over.
        clock.advance(Duration::from_secs(4));
        assert!(w.deliver(&listener).await.is_none());
        clock.advance(Duration::from_secs(1));
        w.deliver(&listener).await.unwrap();
        let pending = w.record().await.pending.unwrap();
        assert_eq!(pending.attempts, 2);
        assert_eq!(
            pending.last_error.as_deref(),
            Some("sale switch answered 500 Internal Server Error")
        );
        clock.advance(Duration::from_secs(10));
        let report = w.deliver(&listener).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(legacy.seen().len(), 3);
        assert_eq!(w.record().await.status(), SaleStatus::OffSale);
        assert!(w.queue.is_empty());
    }
}
