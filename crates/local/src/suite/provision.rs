//! The suite's resources in moto, built on [`crate::moto::resources`], and
//! the checks and clean-up an attached moto needs.

use aws_config::SdkConfig;
use aws_sdk_lambda::types::{
    DestinationConfig, EventSourcePosition, Filter, FunctionResponseType, OnFailure,
};
use aws_sdk_sqs::types::QueueAttributeName;
use lifeboat_core::OperatorId;

use crate::moto::resources::{self, ResourceError};
use crate::template::{self, CIRCUIT_SWITCH, FALLBACK_CONSUMER, REAL_CONSUMER};

use super::{CustomerResources, OperatorCredential, SuiteError, SuiteNames, SuiteResources};

/// The customer half's resources in moto, as the template has them: the
/// Carts, Orders and SaleStatus tables, `OffsaleDeadLetterQueue`, `OffsaleQueue`
/// with its visibility timeout and redrive policy, and
/// `BreakerStateChangedRule` on the bus (which must exist) targeting it.
pub async fn create_customer_resources(
    sdk: &SdkConfig,
    names: &SuiteNames,
) -> Result<CustomerResources, ResourceError> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let eventbridge = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    resources::create_carts_table(&dynamodb, &names.carts_table).await?;
    resources::create_orders_table(&dynamodb, &names.orders_table).await?;
    resources::create_sale_status_table(&dynamodb, &names.sale_status_table).await?;
    let offsale_dead_letter_queue =
        resources::create_queue(&sqs, &names.offsale_dead_letter_queue, None).await?;
    let offsale_queue = resources::create_queue_with(
        &sqs,
        &names.offsale_queue,
        &[
            (
                QueueAttributeName::VisibilityTimeout,
                template::OFFSALE_VISIBILITY_TIMEOUT.to_string(),
            ),
            (
                QueueAttributeName::RedrivePolicy,
                resources::redrive_policy(
                    &offsale_dead_letter_queue.arn,
                    template::OFFSALE_MAX_RECEIVE_COUNT,
                ),
            ),
        ],
    )
    .await?;
    let offsale_rule_arn = resources::create_rule_to_queue(
        &eventbridge,
        &names.bus,
        &names.offsale_rule,
        template::OFFSALE_RULE_PATTERN,
        template::OFFSALE_TARGET_ID,
        &offsale_queue.arn,
    )
    .await?;
    Ok(CustomerResources {
        offsale_queue,
        offsale_dead_letter_queue,
        offsale_rule_arn,
    })
}

/// Everything in moto; see the module docs.
pub async fn create_resources(
    sdk: &SdkConfig,
    names: &SuiteNames,
    operator: &OperatorId,
) -> Result<SuiteResources, ResourceError> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let eventbridge = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let iam = aws_sdk_iam::Client::new(sdk);
    let lambda = aws_sdk_lambda::Client::new(sdk);

    resources::create_breaker_table(&dynamodb, &names.breaker_table).await?;
    resources::create_cache_table(&dynamodb, &names.cache_table).await?;
    resources::create_operator_config_table(&dynamodb, &names.operator_config_table).await?;
    let bus_arn = resources::create_event_bus(&eventbridge, &names.bus).await?;
    let switch_queue = resources::create_queue_target(
        &eventbridge,
        &sqs,
        &names.bus,
        &names.switch_rule,
        &names.switch_queue,
        template::SWITCH_RULE_PATTERN,
    )
    .await?;
    let failed_queue = resources::create_queue(&sqs, &names.failed_queue, None).await?;
    let timer_queue = resources::create_queue(
        &sqs,
        &names.timer_queue,
        Some(template::TIMER_QUEUE_VISIBILITY_S),
    )
    .await?;
    let role = resources::create_lambda_role(&iam, &names.role).await?;
    let real_function_arn = resources::create_stub_function(&lambda, REAL_CONSUMER, &role).await?;
    let fallback_function_arn =
        resources::create_stub_function(&lambda, FALLBACK_CONSUMER, &role).await?;
    let switch_function_arn =
        resources::create_stub_function(&lambda, CIRCUIT_SWITCH, &role).await?;
    let lane = create_lane(sdk, names, operator, &failed_queue.arn).await?;
    Ok(SuiteResources {
        names: names.clone(),
        requests_table: lane.requests_table,
        stream_arn: lane.stream_arn,
        bus_arn,
        switch_queue,
        failed_queue_url: failed_queue.url,
        failed_queue_arn: failed_queue.arn,
        timer_queue,
        real_function_arn,
        fallback_function_arn,
        switch_function_arn,
        mapping_uuid: lane.mapping_uuid,
        customer: None,
    })
}

/// An operator's lane, as the template makes each: its Requests table and
/// the mapping of its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneResources {
    pub requests_table: String,
    pub stream_arn: String,
    pub mapping_uuid: String,
}

/// `operator`'s lane: the table `{requests_table_prefix}{operator}` and its
/// stream's mapping into the real consumer (the consumers must exist).
pub async fn create_lane(
    sdk: &SdkConfig,
    names: &SuiteNames,
    operator: &OperatorId,
    failed_queue_arn: &str,
) -> Result<LaneResources, ResourceError> {
    let requests_table = format!("{}{operator}", names.requests_table_prefix);
    let created =
        resources::create_requests_table(&aws_sdk_dynamodb::Client::new(sdk), &requests_table)
            .await?;
    let mapping_uuid = create_requests_mapping(
        &aws_sdk_lambda::Client::new(sdk),
        &created.stream_arn,
        failed_queue_arn,
    )
    .await?;
    Ok(LaneResources {
        requests_table,
        stream_arn: created.stream_arn,
        mapping_uuid,
    })
}

fn resource_error(what: impl Into<String>, e: impl std::fmt::Display) -> ResourceError {
    ResourceError {
        what: what.into(),
        message: e.to_string(),
    }
}

/// The Requests stream's mapping with every setting of the template's
/// `RequestsStreamMapping` (or the one already on the stream, as a moto the
/// suite attached to keeps it). Returns its UUID.
pub async fn create_requests_mapping(
    lambda: &aws_sdk_lambda::Client,
    stream_arn: &str,
    failed_queue_arn: &str,
) -> Result<String, ResourceError> {
    if let Some(uuid) =
        resources::existing_mapping(lambda, stream_arn, &[REAL_CONSUMER, FALLBACK_CONSUMER]).await?
    {
        return Ok(uuid);
    }
    let what = "CreateEventSourceMapping RequestsStreamMapping";
    let filter = aws_sdk_lambda::types::FilterCriteria::builder()
        .filters(Filter::builder().pattern(template::FILTER_PATTERN).build())
        .build();
    let destination = DestinationConfig::builder()
        .on_failure(OnFailure::builder().destination(failed_queue_arn).build())
        .build();
    lambda
        .create_event_source_mapping()
        .event_source_arn(stream_arn)
        .function_name(REAL_CONSUMER)
        .starting_position(EventSourcePosition::Latest)
        .batch_size(template::BATCH_SIZE)
        .maximum_batching_window_in_seconds(template::MAXIMUM_BATCHING_WINDOW_IN_SECONDS)
        .parallelization_factor(template::PARALLELIZATION_FACTOR)
        .filter_criteria(filter)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .bisect_batch_on_function_error(template::BISECT_BATCH_ON_FUNCTION_ERROR)
        .maximum_retry_attempts(template::MAXIMUM_RETRY_ATTEMPTS)
        .maximum_record_age_in_seconds(template::MAXIMUM_RECORD_AGE_IN_SECONDS)
        .destination_config(destination)
        .send()
        .await
        .map_err(|e| resource_error(what, aws_sdk_lambda::error::DisplayErrorContext(e)))?
        .uuid
        .ok_or_else(|| resource_error(what, "no UUID"))
}

/// moto as `moto_server` runs it delivers a table's stream records to the
/// mapping's function itself and then empties the stream (see
/// [`MOTO_WITHOUT_STREAM_DELIVERY`]): nothing would reach the pump. A moto
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
        .stream_arn(&resources.stream_arn)
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
            .stream_arn(&resources.stream_arn)
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
        .table_name(&resources.requests_table)
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
        .table_name(&resources.requests_table)
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

/// Empty the queues the harness drains: what an earlier run left there (a
/// Trip Requested, a sale change) belongs to that run.
pub(super) async fn purge_queues(
    sdk: &SdkConfig,
    resources: &SuiteResources,
) -> Result<(), SuiteError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut queues = vec![
        resources.switch_queue.queue_url.clone(),
        resources.timer_queue.url.clone(),
    ];
    if let Some(customer) = &resources.customer {
        queues.push(customer.offsale_queue.url.clone());
    }
    for url in queues {
        sqs.purge_queue()
            .queue_url(&url)
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
