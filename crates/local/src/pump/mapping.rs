//! The event source mapping as the pump reads it.

use std::time::Duration;

use aws_sdk_lambda::operation::get_event_source_mapping::GetEventSourceMappingOutput;
use aws_sdk_lambda::types::{EventSourcePosition, FunctionResponseType};

use super::{FilterCriteria, PumpError, StartingPosition};

/// An event source mapping, as the pump reads it before each batch.
#[derive(Debug, Clone, PartialEq)]
pub struct MappingView {
    pub uuid: String,
    pub stream_arn: String,
    pub function_arn: String,
    /// The function's name: the binary's name under `cargo lambda watch`.
    pub function: String,
    pub state: Option<String>,
    pub batch_size: usize,
    pub filter: FilterCriteria,
    pub report_item_failures: bool,
    /// `None`: retry until the records expire (Lambda's -1).
    pub max_retry_attempts: Option<u32>,
    /// `None`: records never get too old (Lambda's -1).
    pub max_record_age: Option<Duration>,
    pub bisect_on_error: bool,
    pub starting_position: Option<StartingPosition>,
}

impl MappingView {
    pub fn from_sdk(uuid: &str, m: &GetEventSourceMappingOutput) -> Result<Self, PumpError> {
        let incomplete = |what| PumpError::Incomplete {
            uuid: uuid.to_owned(),
            what,
        };
        let stream_arn = m
            .event_source_arn()
            .ok_or_else(|| incomplete("EventSourceArn"))?;
        let function_arn = m.function_arn().ok_or_else(|| incomplete("FunctionArn"))?;
        let filter =
            FilterCriteria::from_sdk(m.filter_criteria()).map_err(|source| PumpError::Filter {
                uuid: uuid.to_owned(),
                source,
            })?;
        Ok(Self {
            uuid: uuid.to_owned(),
            stream_arn: stream_arn.to_owned(),
            function_arn: function_arn.to_owned(),
            function: function_name(function_arn).to_owned(),
            state: m.state().map(str::to_owned),
            // Lambda's default for DynamoDB streams.
            batch_size: m
                .batch_size()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(100),
            filter,
            report_item_failures: m
                .function_response_types()
                .contains(&FunctionResponseType::ReportBatchItemFailures),
            max_retry_attempts: m
                .maximum_retry_attempts()
                .and_then(|n| u32::try_from(n).ok()),
            max_record_age: m
                .maximum_record_age_in_seconds()
                .and_then(|n| u64::try_from(n).ok())
                .map(Duration::from_secs),
            bisect_on_error: m.bisect_batch_on_function_error().unwrap_or(false),
            starting_position: match m.starting_position() {
                Some(EventSourcePosition::TrimHorizon) => Some(StartingPosition::TrimHorizon),
                Some(EventSourcePosition::Latest) => Some(StartingPosition::Latest),
                _ => None,
            },
        })
    }

    /// Whether Lambda delivers records in this state.
    pub fn delivers(&self) -> bool {
        matches!(self.state.as_deref(), None | Some("Enabled" | "Updating"))
    }
}

/// The function name in a function ARN
/// (`arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]`); anything
/// else is taken as a name already.
pub fn function_name(function_arn: &str) -> &str {
    match function_arn.split_once(":function:") {
        Some((_, rest)) => rest.split(':').next().unwrap_or(rest),
        None => function_arn,
    }
}

/// Read an event source mapping from the Lambda API.
pub async fn read_mapping(
    lambda: &aws_sdk_lambda::Client,
    uuid: &str,
) -> Result<MappingView, PumpError> {
    let output = lambda
        .get_event_source_mapping()
        .uuid(uuid)
        .send()
        .await
        .map_err(|e| PumpError::Mapping {
            uuid: uuid.to_owned(),
            message: aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
        })?;
    MappingView::from_sdk(uuid, &output)
}
