//! What the suite does in moto besides the stack: the checks and clean-up
//! an attached moto needs, and the operator's credential.

use aws_config::SdkConfig;
use lifeboat_core::OperatorId;

use super::{OperatorCredential, SuiteError, SuiteResources};

/// moto as `moto_server` runs it delivers a table's stream records to the
/// mapping's function itself and then empties the stream (see
/// [`super::launcher::MOTO_DELIVERY`]): nothing would reach the pump. A moto
/// the suite attaches to must be the launcher's (`lifeboat local moto`);
/// this writes a probe item and reads it back from the stream.
pub(super) async fn check_stream_keeps_records(
    sdk: &SdkConfig,
    resources: &SuiteResources,
) -> Result<(), SuiteError> {
    let what = |detail: String| SuiteError::StreamProbe { detail };
    let streams = aws_sdk_dynamodbstreams::Client::new(sdk);
    let shards = streams
        .describe_stream()
        .stream_arn(&resources.lane().stream_arn)
        .send()
        .await
        .map_err(|e| what(aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string()))?
        .stream_description
        .and_then(|d| d.shards)
        .unwrap_or_default();
    let mut iterators = Vec::new();
    for shard in shards.iter().filter_map(|s| s.shard_id()) {
        let iterator = streams
            .get_shard_iterator()
            .stream_arn(&resources.lane().stream_arn)
            .shard_id(shard)
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::Latest)
            .send()
            .await
            .map_err(|e| what(aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string()))?
            .shard_iterator;
        iterators.extend(iterator);
    }
    let probe = format!("lifeboat-local-probe-{}", uuid::Uuid::new_v4());
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let key = aws_sdk_dynamodb::types::AttributeValue::S(probe.clone());
    dynamodb
        .put_item()
        .table_name(&resources.lane().requests_table)
        .item("request_id", key.clone())
        .item(
            "record_type",
            aws_sdk_dynamodb::types::AttributeValue::S("probe".into()),
        )
        .send()
        .await
        .map_err(|e| what(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))?;
    let mut found = false;
    for iterator in iterators {
        let records = streams
            .get_records()
            .shard_iterator(iterator)
            .send()
            .await
            .map_err(|e| what(aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string()))?
            .records
            .unwrap_or_default();
        found |= records.iter().any(|r| {
            r.dynamodb()
                .and_then(|d| d.keys())
                .and_then(|k| k.get("request_id"))
                .and_then(|v| v.as_s().ok())
                == Some(&probe)
        });
    }
    let _ = dynamodb
        .delete_item()
        .table_name(&resources.lane().requests_table)
        .key("request_id", key)
        .send()
        .await;
    if found {
        Ok(())
    } else {
        Err(what(
            "a probe item written to the Requests table is not in its stream: this moto_server \
             delivers stream records itself and drops them; start it with `lifeboat local moto`"
                .to_owned(),
        ))
    }
}

/// Empty the queues the harness drains (`queue_urls`): what an earlier run
/// left there (a Trip Requested, a sale change, a timer) belongs to that
/// run.
pub(super) async fn purge_queues(sdk: &SdkConfig, queue_urls: &[String]) -> Result<(), SuiteError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    for url in queue_urls {
        sqs.purge_queue()
            .queue_url(url)
            .send()
            .await
            .map_err(|e| SuiteError::Purge {
                queue: url.clone(),
                detail: aws_sdk_sqs::error::DisplayErrorContext(e).to_string(),
            })?;
    }
    Ok(())
}

/// Put `operator`'s credential where the functions read it: the SecureString
/// parameter `<path>/<operator>` holding `{"header": …, "value": …}`.
pub async fn put_operator_credential(
    sdk: &SdkConfig,
    operator: &OperatorId,
    credential: &OperatorCredential,
) -> Result<(), SuiteError> {
    let name = format!("{}/{operator}", credential.path.trim_end_matches('/'));
    let value = serde_json::json!({"header": credential.header, "value": credential.value});
    aws_sdk_ssm::Client::new(sdk)
        .put_parameter()
        .name(&name)
        .value(value.to_string())
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .overwrite(true)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| SuiteError::Credential {
            operator: operator.to_string(),
            path: credential.path.clone(),
            detail: aws_sdk_ssm::error::DisplayErrorContext(&e).to_string(),
        })
}
