//! The stack's capacity check: a CloudFormation custom resource
//! (`CapacityCheck` in template.yaml) that the circuit switch answers.
//!
//! CloudFormation cannot do arithmetic in a rule, so it cannot see that
//! `RealConsumerConcurrency` is too small for `Operators` ×
//! `LaneParallelization`. At create and update it invokes the switch with
//! the stack's numbers; the switch checks them with
//! [`lifeboat_core::capacity::check`] and answers `FAILED` with the reason,
//! which stops the deploy and rolls it back, before a marketplace finds out
//! on its busiest day. A delete always succeeds: a check never holds a stack
//! hostage.
//!
//! CloudFormation waits for the answer at the request's presigned
//! `ResponseURL` (up to an hour); an answer that cannot be sent fails the
//! invocation, and Lambda's own retries of the asynchronous invoke send it
//! again.

use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::cloudformation::{
    CloudFormationCustomResourceRequest, CloudFormationCustomResourceResponse,
    CloudFormationCustomResourceResponseStatus,
};
use lifeboat_core::capacity::{self, Lanes};
use serde::Deserialize;
use serde_json::Value;

/// The check's physical id: one per stack, never replaced.
pub const PHYSICAL_ID: &str = "lifeboat-capacity-check";

/// The custom resource's properties as the template passes them
/// (CloudFormation sends every scalar as a string).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CapacityProperties {
    pub operators: Vec<String>,
    pub lane_parallelization: String,
    pub real_consumer_concurrency: String,
    /// `enabled` or `disabled` (the template's `ReservedConcurrency`).
    pub reserved_concurrency: String,
}

impl CapacityProperties {
    /// The stack's numbers checked, or why they cannot be.
    pub fn verdict(&self) -> Result<(), String> {
        let number = |name: &str, text: &str| {
            text.trim()
                .parse::<usize>()
                .map_err(|_| format!("{name} {text:?} is not a whole number"))
        };
        let lanes = Lanes {
            operators: self
                .operators
                .iter()
                .filter(|o| !o.trim().is_empty())
                .count(),
            parallelization: number("LaneParallelization", &self.lane_parallelization)?,
        };
        let reserved = match self.reserved_concurrency.as_str() {
            "enabled" => Some(number(
                "RealConsumerConcurrency",
                &self.real_consumer_concurrency,
            )?),
            "disabled" => None,
            other => {
                return Err(format!(
                    "ReservedConcurrency {other:?} is not enabled or disabled"
                ));
            }
        };
        capacity::check(lanes, reserved).map_err(|e| e.to_string())
    }
}

/// Whether `payload` is a CloudFormation custom resource request (it has
/// a `RequestType` and a `ResponseURL`), read with its properties as they
/// come.
pub fn request(payload: &Value) -> Option<CloudFormationCustomResourceRequest> {
    if payload.get("RequestType").is_none() || payload.get("ResponseURL").is_none() {
        return None;
    }
    serde_json::from_value(payload.clone())
        .ok()
        .filter(|request| parts(request).is_some())
}

/// Where the answer goes: CloudFormation's presigned URL.
#[async_trait]
pub trait Responder: Send + Sync {
    async fn send(
        &self,
        url: &str,
        response: &CloudFormationCustomResourceResponse,
    ) -> Result<(), String>;
}

/// What the answer needs of a request, whatever its kind.
struct Parts<'a> {
    url: &'a str,
    stack_id: &'a str,
    request_id: &'a str,
    logical_id: &'a str,
    /// The id to answer with: the one the stack knows, or ours at create.
    physical_id: &'a str,
    /// The properties to check (none for a delete).
    properties: Option<&'a Value>,
}

fn parts(request: &CloudFormationCustomResourceRequest) -> Option<Parts<'_>> {
    Some(match request {
        CloudFormationCustomResourceRequest::Create(c) => Parts {
            url: &c.response_url,
            stack_id: &c.stack_id,
            request_id: &c.request_id,
            logical_id: &c.logical_resource_id,
            physical_id: PHYSICAL_ID,
            properties: Some(&c.resource_properties),
        },
        CloudFormationCustomResourceRequest::Update(u) => Parts {
            url: &u.response_url,
            stack_id: &u.stack_id,
            request_id: &u.request_id,
            logical_id: &u.logical_resource_id,
            physical_id: &u.physical_resource_id,
            properties: Some(&u.resource_properties),
        },
        CloudFormationCustomResourceRequest::Delete(d) => Parts {
            url: &d.response_url,
            stack_id: &d.stack_id,
            request_id: &d.request_id,
            logical_id: &d.logical_resource_id,
            physical_id: &d.physical_resource_id,
            properties: None,
        },
        _ => return None,
    })
}

/// The answer to `request`: success for a delete, else the verdict on its
/// properties (unreadable properties fail the check, with the reason).
fn answer(parts: &Parts<'_>) -> CloudFormationCustomResourceResponse {
    let verdict = parts.properties.map_or(Ok(()), verdict_of);
    let mut response = CloudFormationCustomResourceResponse::default();
    response.physical_resource_id = parts.physical_id.to_owned();
    response.stack_id = parts.stack_id.to_owned();
    response.request_id = parts.request_id.to_owned();
    response.logical_resource_id = parts.logical_id.to_owned();
    match verdict {
        Ok(()) => response.status = CloudFormationCustomResourceResponseStatus::Success,
        Err(reason) => {
            response.status = CloudFormationCustomResourceResponseStatus::Failed;
            response.reason = Some(reason);
        }
    }
    response
}

fn verdict_of(properties: &Value) -> Result<(), String> {
    serde_json::from_value::<CapacityProperties>(properties.clone())
        .map_err(|e| format!("the capacity check's properties are unreadable: {e}"))?
        .verdict()
}

/// Answer `request` at its `ResponseURL`, trying three times; logs the
/// verdict.
pub async fn respond(
    request: &CloudFormationCustomResourceRequest,
    responder: &dyn Responder,
) -> Result<(), String> {
    let parts = parts(request).ok_or("not a create, update or delete request")?;
    let response = answer(&parts);
    let url = parts.url;
    match &response.reason {
        Some(reason) => tracing::error!(
            reason,
            "capacity check failed: the stack cannot serve its lanes"
        ),
        None => tracing::info!("capacity check passed"),
    }
    let mut last = String::new();
    for attempt in 0..3u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
        }
        match responder.send(url, &response).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!(attempt, error = %e, "capacity check answer not sent");
                last = e;
            }
        }
    }
    Err(format!(
        "the capacity check's answer could not be sent: {last}"
    ))
}

/// The answer PUT to the presigned URL with reqwest (no content type: the
/// URL was signed without one).
pub struct HttpResponder {
    client: reqwest::Client,
}

impl HttpResponder {
    pub fn new() -> Result<Self, String> {
        lifeboat_aws::tls::install_default_provider();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("no HTTP client for the capacity check: {e}"))?;
        Ok(Self { client })
    }
}

#[async_trait]
impl Responder for HttpResponder {
    async fn send(
        &self,
        url: &str,
        response: &CloudFormationCustomResourceResponse,
    ) -> Result<(), String> {
        let body = serde_json::to_vec(response).map_err(|e| e.to_string())?;
        let answer = self
            .client
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "")
            .body(body)
            .send()
            .await
            // Never the URL: it carries its signature.
            .map_err(|e| format!("PUT failed: {}", e.without_url()))?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(format!("PUT answered {}", answer.status()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Keeps what it was sent; fails the first `fail` sends.
    #[derive(Default)]
    struct Kept {
        sent: Mutex<Vec<(String, CloudFormationCustomResourceResponse)>>,
        fail: Mutex<u32>,
    }

    #[async_trait]
    impl Responder for Kept {
        async fn send(
            &self,
            url: &str,
            response: &CloudFormationCustomResourceResponse,
        ) -> Result<(), String> {
            let mut fail = self.fail.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err("connection reset".into());
            }
            self.sent
                .lock()
                .unwrap()
                .push((url.to_owned(), response.clone()));
            Ok(())
        }
    }

    fn event(kind: &str, operators: usize, reserved: &str, mode: &str) -> Value {
        let operators: Vec<String> = (0..operators).map(|k| format!("op{k:03}")).collect();
        serde_json::json!({
            "RequestType": kind,
            "ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:switch",
            "ResponseURL": "https://cloudformation-answers.example/signed",
            "StackId": "arn:aws:cloudformation:eu-west-1:123456789012:stack/lifeboat/1",
            "RequestId": "r-1",
            "ResourceType": "Custom::LifeboatCapacity",
            "LogicalResourceId": "CapacityCheck",
            "PhysicalResourceId": PHYSICAL_ID,
            "ResourceProperties": {
                "ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:switch",
                "Operators": operators,
                "LaneParallelization": "4",
                "RealConsumerConcurrency": reserved,
                "ReservedConcurrency": mode
            },
            "OldResourceProperties": {}
        })
    }

    async fn verdict(payload: Value) -> CloudFormationCustomResourceResponse {
        let request = request(&payload).expect("a custom resource request");
        let kept = Kept::default();
        respond(&request, &kept).await.unwrap();
        let sent = kept.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, "https://cloudformation-answers.example/signed");
        sent[0].1.clone()
    }

    #[tokio::test]
    async fn two_hundred_operators_on_the_default_reservation_fail_the_deploy() {
        let short = verdict(event("Create", 200, "100", "enabled")).await;
        assert_eq!(
            short.status,
            CloudFormationCustomResourceResponseStatus::Failed
        );
        let reason = short.reason.unwrap_or_default();
        assert!(reason.contains("at least 800"), "{reason}");
        assert_eq!(short.physical_resource_id, PHYSICAL_ID);
        let enough = verdict(event("Update", 200, "800", "enabled")).await;
        assert_eq!(
            enough.status,
            CloudFormationCustomResourceResponseStatus::Success
        );
        let unreserved = verdict(event("Create", 200, "100", "disabled")).await;
        assert_eq!(
            unreserved.status,
            CloudFormationCustomResourceResponseStatus::Success
        );
    }

    #[tokio::test]
    async fn a_delete_always_succeeds_and_bad_properties_fail_with_the_reason() {
        let deleted = verdict(event("Delete", 200, "1", "enabled")).await;
        assert_eq!(
            deleted.status,
            CloudFormationCustomResourceResponseStatus::Success
        );
        let bad = verdict(event("Create", 3, "lots", "enabled")).await;
        assert_eq!(
            bad.status,
            CloudFormationCustomResourceResponseStatus::Failed
        );
        assert!(
            bad.reason
                .unwrap_or_default()
                .contains("RealConsumerConcurrency")
        );
        let mut missing = event("Create", 3, "100", "enabled");
        missing["ResourceProperties"] = serde_json::json!({});
        let unreadable = verdict(missing).await;
        assert!(unreadable.reason.unwrap_or_default().contains("unreadable"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_not_sent_is_tried_again_then_fails_the_invocation() {
        let request = request(&event("Create", 3, "100", "enabled")).unwrap();
        let flaky = Kept::default();
        *flaky.fail.lock().unwrap() = 2;
        respond(&request, &flaky).await.unwrap();
        assert_eq!(flaky.sent.lock().unwrap().len(), 1);
        let down = Kept::default();
        *down.fail.lock().unwrap() = 3;
        assert!(respond(&request, &down).await.is_err());
    }

    /// The fixture `sam local` invokes the switch with
    /// (tests/events/cloudformation-capacity-check.json).
    #[tokio::test]
    async fn the_recorded_create_request_fails_with_the_figure_to_set() {
        let path = format!(
            "{}/../../tests/events/cloudformation-capacity-check.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut payload: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        payload["ResponseURL"] = "https://cloudformation-answers.example/signed".into();
        let answer = verdict(payload).await;
        assert_eq!(
            answer.status,
            CloudFormationCustomResourceResponseStatus::Failed
        );
        let reason = answer.reason.unwrap_or_default();
        assert!(reason.contains("at least 12"), "{reason}");
        assert_eq!(answer.logical_resource_id, "CapacityCheck");
    }

    #[test]
    fn only_custom_resource_requests_are_taken() {
        assert!(request(&serde_json::json!({"source": "aws.events"})).is_none());
        assert!(request(&event("Create", 3, "100", "enabled")).is_some());
    }
}
