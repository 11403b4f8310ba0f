//! [`Stack`]: every resource the lifeboat functions need, created in one go
//! from the single steps of the parent module.

use aws_config::SdkConfig;

use super::{
    LIFEBOAT_EVENTS_PATTERN, QueueTarget, RequestsTable, ResourceError, create_breaker_table,
    create_event_bus, create_lambda_role, create_queue_target, create_requests_table,
    create_stream_mapping, create_stub_function,
};

/// Names of the resources of one [`Stack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackNames {
    pub requests_table: String,
    pub breaker_table: String,
    pub bus: String,
    pub events_rule: String,
    pub events_queue: String,
    pub role: String,
    pub real_function: String,
    pub fallback_function: String,
}

impl StackNames {
    /// Every name starts with `prefix`; the functions are called after the
    /// consumer binaries (`real-consumer`, `fallback-consumer`).
    pub fn prefixed(prefix: &str) -> Self {
        Self {
            requests_table: format!("{prefix}Requests"),
            breaker_table: format!("{prefix}Breaker"),
            bus: format!("{prefix}lifeboat"),
            events_rule: format!("{prefix}lifeboat-events"),
            events_queue: format!("{prefix}lifeboat-events"),
            role: format!("{prefix}lifeboat-consumer"),
            real_function: format!("{prefix}real-consumer"),
            fallback_function: format!("{prefix}fallback-consumer"),
        }
    }
}

impl Default for StackNames {
    fn default() -> Self {
        Self::prefixed("")
    }
}

/// Everything the lifeboat functions need, created in one go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub names: StackNames,
    pub requests: RequestsTable,
    pub bus_arn: String,
    /// Every lifeboat event on the bus lands here.
    pub events: QueueTarget,
    pub real_function_arn: String,
    pub fallback_function_arn: String,
    /// The Requests stream's mapping, pointing at the real consumer.
    pub mapping_uuid: String,
}

impl Stack {
    pub async fn create(config: &SdkConfig, names: StackNames) -> Result<Self, ResourceError> {
        let dynamodb = aws_sdk_dynamodb::Client::new(config);
        let eventbridge = aws_sdk_eventbridge::Client::new(config);
        let sqs = aws_sdk_sqs::Client::new(config);
        let iam = aws_sdk_iam::Client::new(config);
        let lambda = aws_sdk_lambda::Client::new(config);

        let requests = create_requests_table(&dynamodb, &names.requests_table).await?;
        create_breaker_table(&dynamodb, &names.breaker_table).await?;
        let bus_arn = create_event_bus(&eventbridge, &names.bus).await?;
        let events = create_queue_target(
            &eventbridge,
            &sqs,
            &names.bus,
            &names.events_rule,
            &names.events_queue,
            LIFEBOAT_EVENTS_PATTERN,
        )
        .await?;
        let role = create_lambda_role(&iam, &names.role).await?;
        let real_function_arn = create_stub_function(&lambda, &names.real_function, &role).await?;
        let fallback_function_arn =
            create_stub_function(&lambda, &names.fallback_function, &role).await?;
        let mapping_uuid =
            create_stream_mapping(&lambda, &requests.stream_arn, &names.real_function).await?;
        Ok(Self {
            names,
            requests,
            bus_arn,
            events,
            real_function_arn,
            fallback_function_arn,
            mapping_uuid,
        })
    }

    /// The environment variables the functions read (see
    /// `lifeboat_aws::clients`), naming this stack's resources.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("REQUESTS_TABLE", self.names.requests_table.clone()),
            ("BREAKER_TABLE", self.names.breaker_table.clone()),
            ("EVENT_BUS_NAME", self.names.bus.clone()),
            ("REQUESTS_MAPPING_UUID", self.mapping_uuid.clone()),
            ("REAL_CONSUMER_FUNCTION", self.names.real_function.clone()),
            (
                "FALLBACK_CONSUMER_FUNCTION",
                self.names.fallback_function.clone(),
            ),
        ]
    }
}
