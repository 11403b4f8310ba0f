//! What the functions of a deployed stack run on, read back from moto's
//! APIs as a function's SDK would see it: each function's environment, each
//! event source mapping's settings, each rule's pattern or schedule and
//! targets, each queue's visibility timeout and redrive policy. ARNs and
//! URLs are given back as the logical ids of the stack's resources, and
//! functions as their binaries, so two stacks (or a stack and what a test
//! expects) compare field by field.

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use super::{Deployed, StackError, api_error};

/// An event source mapping's settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mapping {
    /// What it reads: the logical id of the table (its stream) or queue.
    pub source: String,
    /// The binary of the function it delivers to.
    pub function: String,
    pub starting_position: Option<String>,
    pub batch_size: Option<i32>,
    pub maximum_batching_window_in_seconds: Option<i32>,
    pub parallelization_factor: Option<i32>,
    pub bisect_batch_on_function_error: Option<bool>,
    pub maximum_retry_attempts: Option<i32>,
    pub maximum_record_age_in_seconds: Option<i32>,
    /// `FilterCriteria`'s patterns, as JSON.
    pub filter_patterns: Vec<Value>,
    /// `DestinationConfig.OnFailure`: a logical id.
    pub on_failure: Option<String>,
    pub function_response_types: Vec<String>,
    /// `ScalingConfig.MaximumConcurrency`.
    pub maximum_concurrency: Option<i32>,
}

/// A rule's trigger and targets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rule {
    /// The bus's logical id, or `default`.
    pub bus: String,
    pub pattern: Option<Value>,
    pub schedule: Option<String>,
    /// Target id → the target's logical id (a function: its binary).
    pub targets: BTreeMap<String, String>,
}

/// A queue's delivery settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    pub visibility_timeout_s: Option<u32>,
    /// The dead-letter queue's logical id and `maxReceiveCount`.
    pub dead_letter: Option<(String, u32)>,
}

/// A stack's wiring; see the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wiring {
    /// Each function's environment, by binary.
    pub environments: BTreeMap<String, BTreeMap<String, String>>,
    /// By logical id.
    pub mappings: BTreeMap<String, Mapping>,
    pub rules: BTreeMap<String, Rule>,
    pub queues: BTreeMap<String, Queue>,
}

impl Deployed {
    /// The logical id of the resource `arn` names (a function, or a version
    /// or alias of one: its binary), or the ARN itself when it names none of
    /// the stack's.
    pub fn name_of_arn(&self, arn: &str) -> String {
        let binaries = self.binaries();
        let named = self.resources.iter().find_map(|(id, r)| {
            let id = id.as_str();
            let physical = r.physical_id.as_str();
            let hit = match r.resource_type.as_str() {
                // The function, or one of its versions or aliases (the
                // stack invokes each through its alias `live`).
                "AWS::Lambda::Function" => arn
                    .split_once(":function:")
                    .is_some_and(|(_, name)| name.split(':').next() == Some(physical)),
                "AWS::DynamoDB::Table" => {
                    arn.ends_with(&format!(":table/{physical}"))
                        || arn.contains(&format!(":table/{physical}/stream/"))
                }
                "AWS::SQS::Queue" => physical
                    .rsplit('/')
                    .next()
                    .is_some_and(|name| arn.ends_with(&format!(":{name}"))),
                "AWS::Events::EventBus" => arn.ends_with(&format!(":event-bus/{physical}")),
                _ => false,
            };
            hit.then(|| binaries.get(id).cloned().unwrap_or_else(|| id.to_owned()))
        });
        named.unwrap_or_else(|| arn.to_owned())
    }
}

/// Read `deployed`'s wiring from the moto `sdk` points at.
pub async fn read(sdk: &SdkConfig, deployed: &Deployed) -> Result<Wiring, StackError> {
    let lambda = aws_sdk_lambda::Client::new(sdk);
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut wiring = Wiring::default();
    for (id, binary) in deployed.binaries() {
        let name = deployed.physical_id(&id).unwrap_or_default();
        let configuration = lambda
            .get_function_configuration()
            .function_name(name)
            .send()
            .await
            .map_err(|e| api_error(format!("GetFunctionConfiguration {name}"), e))?;
        let variables = configuration
            .environment
            .and_then(|e| e.variables)
            .unwrap_or_default();
        wiring
            .environments
            .insert(binary, variables.into_iter().collect());
    }
    for id in deployed.of_type("AWS::Lambda::EventSourceMapping") {
        let uuid = deployed.physical_id(id).unwrap_or_default();
        let m = lambda
            .get_event_source_mapping()
            .uuid(uuid)
            .send()
            .await
            .map_err(|e| api_error(format!("GetEventSourceMapping {id}"), e))?;
        let filter_patterns = m
            .filter_criteria()
            .map(|c| c.filters())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| f.pattern())
            .map(|p| serde_json::from_str(p).unwrap_or_else(|_| Value::String(p.to_owned())))
            .collect();
        let mapping = Mapping {
            source: deployed.name_of_arn(m.event_source_arn().unwrap_or_default()),
            function: deployed.name_of_arn(m.function_arn().unwrap_or_default()),
            starting_position: m.starting_position().map(|p| p.as_str().to_owned()),
            batch_size: m.batch_size(),
            maximum_batching_window_in_seconds: m.maximum_batching_window_in_seconds(),
            parallelization_factor: m.parallelization_factor(),
            bisect_batch_on_function_error: m.bisect_batch_on_function_error(),
            maximum_retry_attempts: m.maximum_retry_attempts(),
            maximum_record_age_in_seconds: m.maximum_record_age_in_seconds(),
            filter_patterns,
            on_failure: m
                .destination_config()
                .and_then(|d| d.on_failure())
                .and_then(|o| o.destination())
                .map(|arn| deployed.name_of_arn(arn)),
            function_response_types: m
                .function_response_types()
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect(),
            maximum_concurrency: m.scaling_config().and_then(|s| s.maximum_concurrency()),
        };
        wiring.mappings.insert(id.to_owned(), mapping);
    }
    for id in deployed.of_type("AWS::Events::Rule") {
        let name = deployed.physical_id(id).unwrap_or_default();
        let bus_id = deployed
            .definition(id)
            .and_then(|d| d.pointer("/Properties/EventBusName/Ref"))
            .and_then(Value::as_str);
        let bus = bus_id
            .and_then(|b| deployed.physical_id(b))
            .unwrap_or("default");
        let rule = events
            .describe_rule()
            .name(name)
            .event_bus_name(bus)
            .send()
            .await
            .map_err(|e| api_error(format!("DescribeRule {id}"), e))?;
        let targets = events
            .list_targets_by_rule()
            .rule(name)
            .event_bus_name(bus)
            .send()
            .await
            .map_err(|e| api_error(format!("ListTargetsByRule {id}"), e))?
            .targets
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.id.clone(), deployed.name_of_arn(&t.arn)))
            .collect();
        wiring.rules.insert(
            id.to_owned(),
            Rule {
                bus: bus_id.unwrap_or("default").to_owned(),
                pattern: rule.event_pattern().map(|p| {
                    serde_json::from_str(p).unwrap_or_else(|_| Value::String(p.to_owned()))
                }),
                schedule: rule.schedule_expression().map(str::to_owned),
                targets,
            },
        );
    }
    for id in deployed.of_type("AWS::SQS::Queue") {
        let url = deployed.physical_id(id).unwrap_or_default();
        let mut attributes = sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| api_error(format!("GetQueueAttributes {id}"), e))?
            .attributes
            .unwrap_or_default();
        let redrive: Option<Value> = attributes
            .remove(&QueueAttributeName::RedrivePolicy)
            .and_then(|p| serde_json::from_str(&p).ok());
        let dead_letter = redrive.and_then(|p| {
            let arn = p.get("deadLetterTargetArn")?.as_str()?;
            let count = match p.get("maxReceiveCount")? {
                Value::Number(n) => n.as_u64()?,
                Value::String(s) => s.parse().ok()?,
                _ => return None,
            };
            Some((deployed.name_of_arn(arn), u32::try_from(count).ok()?))
        });
        wiring.queues.insert(
            id.to_owned(),
            Queue {
                visibility_timeout_s: attributes
                    .remove(&QueueAttributeName::VisibilityTimeout)
                    .and_then(|v| v.parse().ok()),
                dead_letter,
            },
        );
    }
    Ok(wiring)
}
