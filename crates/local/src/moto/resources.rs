//! lifeboat's AWS resources, created through the SDK with the schemas of
//! `template.yaml`: the Requests table (stream NEW_AND_OLD_IMAGES, TTL
//! `expires_at`), the Breaker table (`operator` + `item`, TTL `expires_at`),
//! the Cache table (`cache_key`, TTL `expires_at`), the Carts table
//! (`cart_id`, TTL `expires_at`), the SaleStatus table (`operator`, no TTL),
//! SQS queues, the event bus with an SQS queue catching its events, and the
//! two stream consumers with the event source mapping between them.
//!
//! Meant for moto (see the module above), where nothing but the API exists:
//! the functions have no code that runs and the queue needs no policy. What
//! already exists under a name (a moto that outlives `lifeboat local` runs)
//! is used as it is: tables, bus, role, functions, queues and rules (the
//! gateway's Requests mapping too; [`create_stream_mapping`] always adds
//! one). The end-to-end harness and the adapter tests build on
//! [`stack::Stack::create`] or the single steps.

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription,
    TimeToLiveSpecification,
};
use aws_sdk_eventbridge::types::Target;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{EventSourcePosition, FunctionCode, FunctionResponseType, Runtime};
use aws_sdk_sqs::types::QueueAttributeName;

pub mod stack;

/// The TTL attribute of every table that has one.
pub const TTL_ATTRIBUTE: &str = "expires_at";

/// The event pattern of every lifeboat event.
pub const LIFEBOAT_EVENTS_PATTERN: &str = r#"{"source": ["lifeboat"]}"#;

/// The filter the template puts on the stream mapping: new request items only.
pub const REQUESTS_FILTER_PATTERN: &str =
    r#"{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"record_type": {"S": ["request"]}}}}"#;

/// An empty zip archive: moto stores function code without looking into it.
const EMPTY_ZIP: [u8; 22] = [
    0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// A call that set up a resource failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct ResourceError {
    pub what: String,
    pub message: String,
}

impl ResourceError {
    fn new(what: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            message: message.into(),
        }
    }

    fn from_sdk(what: impl Into<String>, e: impl std::error::Error) -> Self {
        Self::new(what, DisplayErrorContext(e).to_string())
    }
}

/// The Requests table as created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestsTable {
    pub name: String,
    pub arn: String,
    /// The table's stream, for the event source mapping and the stream pump.
    pub stream_arn: String,
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, ResourceError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| ResourceError::from_sdk("key schema", e))
}

fn string_attribute(name: &str) -> Result<AttributeDefinition, ResourceError> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| ResourceError::from_sdk("attribute definition", e))
}

async fn enable_ttl(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), ResourceError> {
    let spec = TimeToLiveSpecification::builder()
        .attribute_name(TTL_ATTRIBUTE)
        .enabled(true)
        .build()
        .map_err(|e| ResourceError::from_sdk("TTL specification", e))?;
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(spec)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("UpdateTimeToLive {table}"), e))?;
    Ok(())
}

/// Whether TTL is on (or being turned on) for `table`.
async fn ttl_enabled(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<bool, ResourceError> {
    use aws_sdk_dynamodb::types::TimeToLiveStatus;
    let status = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("DescribeTimeToLive {table}"), e))?
        .time_to_live_description
        .and_then(|d| d.time_to_live_status);
    Ok(matches!(
        status,
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    ))
}

/// Create the table `name` with `request` (and TTL on `expires_at` if
/// `ttl`), or describe it if it exists: a moto the suite attached to keeps
/// its tables, and their items, from one run to the next.
async fn create_or_describe(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    request: aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder,
    ttl: bool,
) -> Result<TableDescription, ResourceError> {
    match request.send().await {
        Ok(output) => {
            if ttl {
                enable_ttl(client, name).await?;
            }
            output.table_description.ok_or_else(|| {
                ResourceError::new(format!("CreateTable {name}"), "no table description")
            })
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            let table = client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .map_err(|e| ResourceError::from_sdk(format!("DescribeTable {name}"), e))?
                .table
                .ok_or_else(|| ResourceError::new(format!("DescribeTable {name}"), "no table"))?;
            if ttl && !ttl_enabled(client, name).await? {
                // An earlier run stopped between creating it and its TTL.
                enable_ttl(client, name).await?;
            }
            Ok(table)
        }
        Err(e) => Err(ResourceError::from_sdk(format!("CreateTable {name}"), e)),
    }
}

/// The Requests table: `request_id` (S) key, stream NEW_AND_OLD_IMAGES, TTL
/// on `expires_at`, on demand.
pub async fn create_requests_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<RequestsTable, ResourceError> {
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewAndOldImages)
        .build()
        .map_err(|e| ResourceError::from_sdk("stream specification", e))?;
    let request = client
        .create_table()
        .table_name(name)
        .attribute_definitions(string_attribute("request_id")?)
        .key_schema(key("request_id", KeyType::Hash)?)
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(stream);
    let description = create_or_describe(client, name, request, true).await?;
    let arn = description.table_arn.unwrap_or_default();
    let stream_arn = description.latest_stream_arn.ok_or_else(|| {
        ResourceError::new(
            format!("Requests table {name}"),
            "it has no stream (a table of that name made by something else?)",
        )
    })?;
    Ok(RequestsTable {
        name: name.to_owned(),
        arn,
        stream_arn,
    })
}

/// The Breaker table: `operator` (S) partition key, `item` (S) sort key,
/// TTL on `expires_at`, on demand. Returns its ARN.
pub async fn create_breaker_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, ResourceError> {
    let request = client
        .create_table()
        .table_name(name)
        .attribute_definitions(string_attribute("operator")?)
        .attribute_definitions(string_attribute("item")?)
        .key_schema(key("operator", KeyType::Hash)?)
        .key_schema(key("item", KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest);
    Ok(create_or_describe(client, name, request, true)
        .await?
        .table_arn
        .unwrap_or_default())
}

/// An on-demand table keyed by the string attribute `key` alone, with TTL on
/// `expires_at` if `ttl`. Returns its ARN.
async fn create_keyed_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    key_name: &str,
    ttl: bool,
) -> Result<String, ResourceError> {
    let request = client
        .create_table()
        .table_name(name)
        .attribute_definitions(string_attribute(key_name)?)
        .key_schema(key(key_name, KeyType::Hash)?)
        .billing_mode(BillingMode::PayPerRequest);
    Ok(create_or_describe(client, name, request, ttl)
        .await?
        .table_arn
        .unwrap_or_default())
}

/// The Cache table: `cache_key` (S) key, TTL on `expires_at`, on demand.
/// Returns its ARN.
pub async fn create_cache_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, ResourceError> {
    create_keyed_table(client, name, "cache_key", true).await
}

/// The Carts table: `cart_id` (S) key, TTL on `expires_at`, on demand.
/// Returns its ARN.
pub async fn create_carts_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, ResourceError> {
    create_keyed_table(client, name, "cart_id", true).await
}

/// The Orders table (docs/orders.md): `pk` (S) key, the sparse index
/// `open-by-operator` (`open_operator` S, `open_at` N, all attributes), TTL
/// on `expires_at`, on demand. Returns its ARN.
pub async fn create_orders_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, ResourceError> {
    let index = GlobalSecondaryIndex::builder()
        .index_name(lifeboat_aws::orders::OPEN_BY_OPERATOR)
        .key_schema(key("open_operator", KeyType::Hash)?)
        .key_schema(key("open_at", KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::All)
                .build(),
        )
        .build()
        .map_err(|e| ResourceError::from_sdk("index open-by-operator", e))?;
    let open_at = AttributeDefinition::builder()
        .attribute_name("open_at")
        .attribute_type(ScalarAttributeType::N)
        .build()
        .map_err(|e| ResourceError::from_sdk("attribute open_at", e))?;
    let request = client
        .create_table()
        .table_name(name)
        .attribute_definitions(string_attribute("pk")?)
        .attribute_definitions(string_attribute("open_operator")?)
        .attribute_definitions(open_at)
        .key_schema(key("pk", KeyType::Hash)?)
        .global_secondary_indexes(index)
        .billing_mode(BillingMode::PayPerRequest);
    Ok(create_or_describe(client, name, request, true)
        .await?
        .table_arn
        .unwrap_or_default())
}

/// The SaleStatus table: `operator` (S) key, no TTL, on demand. Returns its
/// ARN.
pub async fn create_sale_status_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, ResourceError> {
    create_keyed_table(client, name, "operator", false).await
}

/// Create the operator config table `name` (template: `OperatorConfigTable`,
/// key `name`): one item holding every operator's endpoints and settings.
pub async fn create_operator_config_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, ResourceError> {
    create_keyed_table(client, name, "name", false).await
}

/// A standard SQS queue with default settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    pub url: String,
    pub arn: String,
}

/// Create the standard queue `name` (with `VisibilityTimeout` in seconds if
/// given).
pub async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    visibility_timeout_s: Option<u32>,
) -> Result<Queue, ResourceError> {
    let attributes: Vec<(QueueAttributeName, String)> = visibility_timeout_s
        .map(|s| (QueueAttributeName::VisibilityTimeout, s.to_string()))
        .into_iter()
        .collect();
    create_queue_with(sqs, name, &attributes).await
}

/// Create the standard queue `name` with `attributes` (e.g.
/// `VisibilityTimeout`, `RedrivePolicy`).
pub async fn create_queue_with(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> Result<Queue, ResourceError> {
    let request = attributes
        .iter()
        .fold(sqs.create_queue().queue_name(name), |request, (k, v)| {
            request.attributes(k.clone(), v)
        });
    let url = request
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("CreateQueue {name}"), e))?
        .queue_url
        .ok_or_else(|| ResourceError::new(format!("CreateQueue {name}"), "no queue URL"))?;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("GetQueueAttributes {name}"), e))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| ResourceError::new(format!("GetQueueAttributes {name}"), "no QueueArn"))?;
    Ok(Queue { url, arn })
}

/// The `RedrivePolicy` attribute that moves a message to `dead_letter_arn`
/// after `max_receive_count` receives.
pub fn redrive_policy(dead_letter_arn: &str, max_receive_count: u32) -> String {
    serde_json::json!({
        "deadLetterTargetArn": dead_letter_arn,
        "maxReceiveCount": max_receive_count,
    })
    .to_string()
}

/// A custom event bus (an existing one of that name is reused). Returns its
/// ARN.
pub async fn create_event_bus(
    client: &aws_sdk_eventbridge::Client,
    name: &str,
) -> Result<String, ResourceError> {
    match client.create_event_bus().name(name).send().await {
        Ok(output) => Ok(output.event_bus_arn.unwrap_or_default()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_already_exists_exception()) =>
        {
            Ok(client
                .describe_event_bus()
                .name(name)
                .send()
                .await
                .map_err(|e| ResourceError::from_sdk(format!("DescribeEventBus {name}"), e))?
                .arn
                .unwrap_or_default())
        }
        Err(e) => Err(ResourceError::from_sdk(format!("CreateEventBus {name}"), e)),
    }
}

/// An SQS queue that receives a bus's events through a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTarget {
    pub queue_url: String,
    pub queue_arn: String,
    pub rule_arn: String,
}

/// Create `queue`, and a rule `rule` on `bus` with `pattern` that targets it.
/// (On AWS the queue would also need a policy letting EventBridge send to it;
/// moto does not check one.)
pub async fn create_queue_target(
    eventbridge: &aws_sdk_eventbridge::Client,
    sqs: &aws_sdk_sqs::Client,
    bus: &str,
    rule: &str,
    queue: &str,
    pattern: &str,
) -> Result<QueueTarget, ResourceError> {
    let Queue {
        url: queue_url,
        arn: queue_arn,
    } = create_queue(sqs, queue, None).await?;
    let rule_arn = create_rule_to_queue(eventbridge, bus, rule, pattern, queue, &queue_arn).await?;
    Ok(QueueTarget {
        queue_url,
        queue_arn,
        rule_arn,
    })
}

/// A rule `rule` on `bus` with `pattern` whose one target (id `target_id`)
/// is the existing queue `queue_arn`. Returns the rule's ARN. (On AWS the
/// queue would also need a policy letting EventBridge send to it; moto does
/// not check one.)
pub async fn create_rule_to_queue(
    eventbridge: &aws_sdk_eventbridge::Client,
    bus: &str,
    rule: &str,
    pattern: &str,
    target_id: &str,
    queue_arn: &str,
) -> Result<String, ResourceError> {
    let rule_arn = eventbridge
        .put_rule()
        .name(rule)
        .event_bus_name(bus)
        .event_pattern(pattern)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("PutRule {rule}"), e))?
        .rule_arn
        .unwrap_or_default();
    let target = Target::builder()
        .id(target_id)
        .arn(queue_arn)
        .build()
        .map_err(|e| ResourceError::from_sdk("target", e))?;
    let output = eventbridge
        .put_targets()
        .rule(rule)
        .event_bus_name(bus)
        .targets(target)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("PutTargets {rule}"), e))?;
    if output.failed_entry_count() > 0 {
        return Err(ResourceError::new(
            format!("PutTargets {rule}"),
            format!("{:?}", output.failed_entries()),
        ));
    }
    Ok(rule_arn)
}

/// An execution role Lambda may assume (moto's `CreateFunction` checks that
/// the role exists). An existing role of that name is reused. Returns its ARN.
pub async fn create_lambda_role(
    iam: &aws_sdk_iam::Client,
    name: &str,
) -> Result<String, ResourceError> {
    const TRUST: &str = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}"#;
    let created = iam
        .create_role()
        .role_name(name)
        .assume_role_policy_document(TRUST)
        .send()
        .await;
    let role = match created {
        Ok(output) => output.role,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_entity_already_exists_exception()) =>
        {
            iam.get_role()
                .role_name(name)
                .send()
                .await
                .map_err(|e| ResourceError::from_sdk(format!("GetRole {name}"), e))?
                .role
        }
        Err(e) => return Err(ResourceError::from_sdk(format!("CreateRole {name}"), e)),
    };
    role.map(|r| r.arn)
        .ok_or_else(|| ResourceError::new(format!("CreateRole {name}"), "no role"))
}

/// A function with no code that runs (runtime provided.al2023), standing in
/// for a consumer so a mapping can point at it (an existing one of that name
/// is reused). Returns its ARN.
pub async fn create_stub_function(
    lambda: &aws_sdk_lambda::Client,
    name: &str,
    role_arn: &str,
) -> Result<String, ResourceError> {
    let created = lambda
        .create_function()
        .function_name(name)
        .runtime(Runtime::Providedal2023)
        .handler("bootstrap")
        .role(role_arn)
        .code(
            FunctionCode::builder()
                .zip_file(Blob::new(EMPTY_ZIP.to_vec()))
                .build(),
        )
        .send()
        .await;
    let arn = match created {
        Ok(output) => output.function_arn,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_conflict_exception()) =>
        {
            lambda
                .get_function()
                .function_name(name)
                .send()
                .await
                .map_err(|e| ResourceError::from_sdk(format!("GetFunction {name}"), e))?
                .configuration
                .and_then(|c| c.function_arn)
        }
        Err(e) => return Err(ResourceError::from_sdk(format!("CreateFunction {name}"), e)),
    };
    arn.ok_or_else(|| ResourceError::new(format!("CreateFunction {name}"), "no function ARN"))
}

/// The UUID of a mapping already reading `stream_arn` into one of
/// `functions`, if there is one: a moto the suite attached to keeps its
/// mapping (and where it points) from one run to the next. A mapping on the
/// stream into anything else is an error.
pub async fn existing_mapping(
    lambda: &aws_sdk_lambda::Client,
    stream_arn: &str,
    functions: &[&str],
) -> Result<Option<String>, ResourceError> {
    let mappings = lambda
        .list_event_source_mappings()
        .event_source_arn(stream_arn)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk("ListEventSourceMappings", e))?
        .event_source_mappings
        .unwrap_or_default();
    let Some(mapping) = mappings.into_iter().next() else {
        return Ok(None);
    };
    let function = mapping.function_arn.clone().unwrap_or_default();
    let name = function.rsplit(':').next().unwrap_or_default();
    if !functions.contains(&name) {
        return Err(ResourceError::new(
            "the Requests stream's mapping",
            format!("the stream already has a mapping into {function:?}, not one of {functions:?}"),
        ));
    }
    Ok(mapping.uuid)
}

/// The Requests stream's event source mapping, as in the template: from the
/// latest record, batches of 50, new request items only, partial batch
/// failures. Returns its UUID.
pub async fn create_stream_mapping(
    lambda: &aws_sdk_lambda::Client,
    stream_arn: &str,
    function: &str,
) -> Result<String, ResourceError> {
    let filter = aws_sdk_lambda::types::FilterCriteria::builder()
        .filters(
            aws_sdk_lambda::types::Filter::builder()
                .pattern(REQUESTS_FILTER_PATTERN)
                .build(),
        )
        .build();
    let output = lambda
        .create_event_source_mapping()
        .event_source_arn(stream_arn)
        .function_name(function)
        .starting_position(EventSourcePosition::Latest)
        .batch_size(50)
        .filter_criteria(filter)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .send()
        .await
        .map_err(|e| ResourceError::from_sdk(format!("CreateEventSourceMapping {function}"), e))?;
    output.uuid.ok_or_else(|| {
        ResourceError::new(format!("CreateEventSourceMapping {function}"), "no UUID")
    })
}
