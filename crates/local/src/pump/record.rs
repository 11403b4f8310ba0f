//! Stream records in Lambda's shape, and where a batch's redelivery starts.

use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record};
use serde_json::Value;

use super::PumpError;

/// A stream record in the shape Lambda gives it to a function: the typed
/// `aws_lambda_events` record the consumers read, as JSON.
pub fn lambda_record(record: &Record, stream_arn: &str) -> Result<Value, PumpError> {
    use aws_lambda_events::event::dynamodb::{
        EventRecord, StreamRecord, StreamViewType, UserIdentity,
    };
    use aws_sdk_dynamodbstreams::types::StreamViewType as SdkView;

    let change = record
        .dynamodb()
        .ok_or_else(|| PumpError::Record("no dynamodb part".into()))?;
    let mut typed = StreamRecord::default();
    if let Some(at) = change.approximate_creation_date_time() {
        typed.approximate_creation_date_time = chrono::DateTime::from_timestamp(at.secs(), 0)
            .ok_or_else(|| {
                PumpError::Record(format!("ApproximateCreationDateTime {at} out of range"))
            })?;
    }
    typed.keys = item(change.keys())?;
    typed.new_image = item(change.new_image())?;
    typed.old_image = item(change.old_image())?;
    typed.sequence_number = Some(
        change
            .sequence_number()
            .ok_or_else(|| PumpError::Record("no SequenceNumber".into()))?
            .to_owned(),
    );
    typed.size_bytes = change.size_bytes().unwrap_or_default();
    typed.stream_view_type = match change.stream_view_type() {
        Some(SdkView::KeysOnly) => Some(StreamViewType::KeysOnly),
        Some(SdkView::NewImage) => Some(StreamViewType::NewImage),
        Some(SdkView::OldImage) => Some(StreamViewType::OldImage),
        Some(SdkView::NewAndOldImages) => Some(StreamViewType::NewAndOldImages),
        _ => None,
    };
    let mut out = EventRecord::default();
    out.aws_region = record
        .aws_region()
        .unwrap_or(crate::moto::REGION)
        .to_owned();
    out.change = typed;
    out.event_id = record.event_id().unwrap_or_default().to_owned();
    out.event_name = record
        .event_name()
        .map(|n| n.as_str())
        .unwrap_or_default()
        .to_owned();
    out.event_source = Some(record.event_source().unwrap_or("aws:dynamodb").to_owned());
    out.event_version = Some(record.event_version().unwrap_or("1.1").to_owned());
    out.event_source_arn = Some(stream_arn.to_owned());
    out.user_identity = record.user_identity().map(|identity| {
        let mut user = UserIdentity::default();
        user.type_ = identity.r#type().unwrap_or_default().to_owned();
        user.principal_id = identity.principal_id().unwrap_or_default().to_owned();
        user
    });
    serde_json::to_value(out).map_err(|e| PumpError::Record(e.to_string()))
}

/// An attribute map as the typed record holds it (`{}` when absent).
fn item(map: Option<&HashMap<String, AttributeValue>>) -> Result<serde_dynamo::Item, PumpError> {
    let Some(map) = map else {
        return Ok(serde_dynamo::Item::default());
    };
    let item: HashMap<String, serde_dynamo::AttributeValue> = map
        .iter()
        .map(|(k, v)| Ok((k.clone(), attribute(v)?)))
        .collect::<Result<_, PumpError>>()?;
    Ok(serde_dynamo::Item::from(item))
}

/// serde_dynamo's own conversion panics on a type it does not know; this one
/// refuses it.
fn attribute(value: &AttributeValue) -> Result<serde_dynamo::AttributeValue, PumpError> {
    use serde_dynamo::AttributeValue as Av;
    Ok(match value {
        AttributeValue::S(s) => Av::S(s.clone()),
        AttributeValue::N(n) => Av::N(n.clone()),
        AttributeValue::Bool(b) => Av::Bool(*b),
        AttributeValue::Null(b) => Av::Null(*b),
        AttributeValue::B(b) => Av::B(b.as_ref().to_vec()),
        AttributeValue::Ss(v) => Av::Ss(v.clone()),
        AttributeValue::Ns(v) => Av::Ns(v.clone()),
        AttributeValue::Bs(v) => Av::Bs(v.iter().map(|b| b.as_ref().to_vec()).collect()),
        AttributeValue::L(v) => Av::L(v.iter().map(attribute).collect::<Result<_, _>>()?),
        AttributeValue::M(m) => Av::M(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), attribute(v)?)))
                .collect::<Result<_, PumpError>>()?,
        ),
        other => {
            return Err(PumpError::Record(format!(
                "unknown attribute type {other:?}"
            )));
        }
    })
}

/// The first failed record of a batch from a function's answer
/// (`{"batchItemFailures": [{"itemIdentifier": SEQ}, …]}`): `Ok(None)` when
/// nothing failed, `Err` when an identifier is empty or not in the batch,
/// which Lambda takes as a failure of the whole batch.
pub fn first_failed(answer: &Value, batch: &[&str]) -> Result<Option<usize>, String> {
    let Some(failures) = answer.get("batchItemFailures") else {
        return Ok(None);
    };
    let failures = match failures {
        Value::Null => return Ok(None),
        Value::Array(items) => items,
        other => return Err(format!("batchItemFailures is not an array: {other}")),
    };
    let ids = failures
        .iter()
        .map(|f| f.get("itemIdentifier").and_then(Value::as_str));
    lifeboat_core::invocation::first_failed(ids, batch)
}
