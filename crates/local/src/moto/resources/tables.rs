//! The tables: Requests (with its stream), Breaker, Cache, Carts, Orders,
//! SaleStatus and the operator config table, each with its TTL where the
//! template gives one.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription,
    TimeToLiveSpecification,
};

use super::{ResourceError, TTL_ATTRIBUTE};

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
