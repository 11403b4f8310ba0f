//! Reading one SQS record: a `Breaker State Changed` for this listener, or
//! poison, which is reported once as an `Operator Request Failed` event.

use aws_lambda_events::event::sqs::SqsMessage;
use chrono::{DateTime, Utc};
use lifeboat_core::BreakerState;
use lifeboat_core::events::{LifeboatEvent, OperatorRequestFailed, SCHEMA_VERSION, SOURCE};
use lifeboat_core::ports::MessageHandle;
use lifeboat_core::request::FailureReason;
use lifeboat_core::sale::{OnSaleAt, SaleChange};
use serde_json::Value;

use crate::OffsaleListener;

/// The longest poison detail put in an event.
const MAX_DETAIL_CHARS: usize = 400;

/// A readable state change and where it came from.
pub(crate) struct Delivery {
    pub(crate) message_id: String,
    pub(crate) handle: MessageHandle,
    pub(crate) change: SaleChange,
    pub(crate) from: BreakerState,
}

/// A message that will never be readable.
pub(crate) struct Poison {
    pub(crate) message_id: Option<String>,
    pub(crate) operator: Option<String>,
    pub(crate) reason: String,
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
pub(crate) fn read(record: &Value, on_sale_at: OnSaleAt) -> Result<Delivery, Poison> {
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

impl OffsaleListener {
    /// Publish one report per poison message; how many the bus did not take.
    pub(crate) async fn report_poison(&self, poison: &[Poison]) -> usize {
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
