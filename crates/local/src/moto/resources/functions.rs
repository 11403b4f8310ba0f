//! The functions' role, stub functions (no code that runs) and the
//! stream mappings between a Requests table and a consumer.

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{EventSourcePosition, FunctionCode, FunctionResponseType, Runtime};

use super::{REQUESTS_FILTER_PATTERN, ResourceError};

/// An empty zip archive: moto stores function code without looking into it.
const EMPTY_ZIP: [u8; 22] = [
    0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

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
