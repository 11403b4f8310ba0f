//! The queues, the event bus and the rules that deliver its events to a
//! queue.

use aws_sdk_eventbridge::types::Target;
use aws_sdk_sqs::types::QueueAttributeName;

use super::ResourceError;

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
