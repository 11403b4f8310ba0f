//! Stream records in Lambda's shape, and where a batch's redelivery starts.

use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record};
use serde_json::{Value, json};

use super::PumpError;

/// A stream record in the shape Lambda gives it to a function.
pub fn lambda_record(record: &Record, stream_arn: &str) -> Result<Value, PumpError> {
    let change = record
        .dynamodb()
        .ok_or_else(|| PumpError::Record("no dynamodb part".into()))?;
    let mut dynamodb = serde_json::Map::new();
    if let Some(at) = change.approximate_creation_date_time() {
        dynamodb.insert("ApproximateCreationDateTime".into(), json!(at.secs()));
    }
    for (name, image) in [
        ("Keys", change.keys()),
        ("NewImage", change.new_image()),
        ("OldImage", change.old_image()),
    ] {
        if let Some(image) = image {
            dynamodb.insert(name.into(), item_json(image)?);
        }
    }
    let sequence = change
        .sequence_number()
        .ok_or_else(|| PumpError::Record("no SequenceNumber".into()))?;
    dynamodb.insert("SequenceNumber".into(), json!(sequence));
    if let Some(size) = change.size_bytes() {
        dynamodb.insert("SizeBytes".into(), json!(size));
    }
    if let Some(view) = change.stream_view_type() {
        dynamodb.insert("StreamViewType".into(), json!(view.as_str()));
    }
    let mut out = json!({
        "eventID": record.event_id().unwrap_or_default(),
        "eventName": record.event_name().map(|n| n.as_str()).unwrap_or_default(),
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "eventSource": record.event_source().unwrap_or("aws:dynamodb"),
        "awsRegion": record.aws_region().unwrap_or(crate::moto::REGION),
        "dynamodb": dynamodb,
        "eventSourceARN": stream_arn,
    });
    if let Some(identity) = record.user_identity() {
        out["userIdentity"] = json!({
            "type": identity.r#type().unwrap_or_default(),
            "principalId": identity.principal_id().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// An attribute map in DynamoDB JSON (`{"name": {"S": "…"}}`).
fn item_json(map: &HashMap<String, AttributeValue>) -> Result<Value, PumpError> {
    let item: HashMap<String, serde_dynamo::AttributeValue> = map
        .iter()
        .map(|(k, v)| Ok((k.clone(), attribute(v)?)))
        .collect::<Result<_, PumpError>>()?;
    serde_json::to_value(serde_dynamo::Item::from(item))
        .map_err(|e| PumpError::Record(e.to_string()))
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
