//! Where the Requests stream goes: the event source mapping's function.
//!
//! Re-pointing is `UpdateEventSourceMapping` with a new `FunctionName`, which
//! keeps the mapping's position in the stream (deleting and re-creating the
//! mapping would not). While a previous update is still being applied Lambda
//! refuses another one with `ResourceInUseException`: that is
//! [`RouterError::Busy`], and the caller tries again later.

use async_trait::async_trait;
use aws_sdk_lambda::operation::get_event_source_mapping::GetEventSourceMappingError;
use aws_sdk_lambda::operation::update_event_source_mapping::UpdateEventSourceMappingError;
use std::sync::Arc;

use lifeboat_core::OperatorId;
use lifeboat_core::breaker::ConsumerTarget;
use lifeboat_core::lane::{Lane, LaneError, Lanes};
use lifeboat_core::ports::{Repoint, RouterError, StreamRouter};
use lifeboat_core::settings::Parallelization;

use crate::error::describe;
use crate::requests::RequestTables;

/// Whether `function_arn` (as the mapping reports it) is the function
/// configured as `configured`: a full ARN must match exactly, a name (with an
/// optional `:qualifier`) must match what follows `:function:` in the ARN.
pub fn names_function(configured: &str, function_arn: &str) -> bool {
    if configured == function_arn {
        return true;
    }
    if configured.starts_with("arn:") {
        return false;
    }
    function_arn
        .split_once(":function:")
        .is_some_and(|(_, name)| name == configured)
}

/// [`StreamRouter`] on one Lambda event source mapping.
#[derive(Debug, Clone)]
pub struct LambdaStreamRouter {
    client: aws_sdk_lambda::Client,
    mapping_uuid: String,
    real_function: String,
    fallback_function: String,
}

impl LambdaStreamRouter {
    /// The functions are names or ARNs, as in the template's outputs.
    pub fn new(
        client: aws_sdk_lambda::Client,
        mapping_uuid: impl Into<String>,
        real_function: impl Into<String>,
        fallback_function: impl Into<String>,
    ) -> Self {
        Self {
            client,
            mapping_uuid: mapping_uuid.into(),
            real_function: real_function.into(),
            fallback_function: fallback_function.into(),
        }
    }

    pub fn mapping_uuid(&self) -> &str {
        &self.mapping_uuid
    }

    fn function(&self, target: ConsumerTarget) -> &str {
        match target {
            ConsumerTarget::Real => &self.real_function,
            ConsumerTarget::Fallback => &self.fallback_function,
        }
    }

    /// The mapping as it is now.
    async fn read(
        &self,
    ) -> Result<
        aws_sdk_lambda::operation::get_event_source_mapping::GetEventSourceMappingOutput,
        RouterError,
    > {
        self.client
            .get_event_source_mapping()
            .uuid(&self.mapping_uuid)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(GetEventSourceMappingError::ResourceNotFoundException(_)) => {
                    RouterError::NotFound(self.mapping_uuid.clone())
                }
                Some(GetEventSourceMappingError::TooManyRequestsException(_)) => {
                    RouterError::Throttled(describe(
                        &format!("GetEventSourceMapping {}", self.mapping_uuid),
                        &e,
                    ))
                }
                _ => RouterError::Unavailable(describe(
                    &format!("GetEventSourceMapping {}", self.mapping_uuid),
                    &e,
                )),
            })
    }

    /// The ARN of the function the mapping delivers to now.
    async fn function_arn(&self) -> Result<String, RouterError> {
        self.read().await?.function_arn.ok_or_else(|| {
            RouterError::Unavailable(format!(
                "event source mapping {} names no function",
                self.mapping_uuid
            ))
        })
    }

    /// An `UpdateEventSourceMapping` of this mapping, its errors told apart.
    async fn update(
        &self,
        update: aws_sdk_lambda::operation::update_event_source_mapping::builders::UpdateEventSourceMappingFluentBuilder,
    ) -> Result<
        aws_sdk_lambda::operation::update_event_source_mapping::UpdateEventSourceMappingOutput,
        RouterError,
    > {
        update.uuid(&self.mapping_uuid).send().await.map_err(|e| {
            let what = format!("UpdateEventSourceMapping {}", self.mapping_uuid);
            match e.as_service_error() {
                Some(UpdateEventSourceMappingError::ResourceNotFoundException(_)) => {
                    RouterError::NotFound(self.mapping_uuid.clone())
                }
                Some(
                    UpdateEventSourceMappingError::ResourceInUseException(_)
                    | UpdateEventSourceMappingError::ResourceConflictException(_),
                ) => RouterError::Busy(describe(&what, &e)),
                Some(UpdateEventSourceMappingError::TooManyRequestsException(_)) => {
                    RouterError::Throttled(describe(&what, &e))
                }
                _ => RouterError::Unavailable(describe(&what, &e)),
            }
        })
    }

    fn target_of(&self, function_arn: &str) -> Option<ConsumerTarget> {
        [ConsumerTarget::Real, ConsumerTarget::Fallback]
            .into_iter()
            .find(|t| names_function(self.function(*t), function_arn))
    }
}

#[async_trait]
impl StreamRouter for LambdaStreamRouter {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        let arn = self.function_arn().await?;
        self.target_of(&arn).ok_or_else(|| {
            RouterError::Unavailable(format!(
                "event source mapping {} delivers to {arn}, which is neither the real consumer ({}) nor the fallback consumer ({})",
                self.mapping_uuid, self.real_function, self.fallback_function
            ))
        })
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        let arn = self.function_arn().await?;
        let function = self.function(target);
        if names_function(function, &arn) {
            return Ok(Repoint::AlreadyThere);
        }
        if self.target_of(&arn).is_none() {
            // Someone pointed it elsewhere by hand; the breaker's word wins.
            tracing::warn!(
                mapping = %self.mapping_uuid,
                function_arn = %arn,
                %target,
                "event source mapping pointed at neither consumer; re-pointing it"
            );
        }
        let output = self
            .update(
                self.client
                    .update_event_source_mapping()
                    .function_name(function),
            )
            .await?;
        match output.function_arn() {
            Some(now) if !names_function(function, now) => Err(RouterError::Unavailable(format!(
                "event source mapping {} was updated to {function} but reports {now}",
                self.mapping_uuid
            ))),
            _ => Ok(Repoint::Changed),
        }
    }

    /// The update names the function the mapping delivers to now, so the
    /// switch's `lambda:FunctionArn` condition holds (the key is the
    /// function after the update) and the target is left as it is.
    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        let wanted = i32::from(factor.get());
        let mapping = self.read().await?;
        if mapping.parallelization_factor == Some(wanted) {
            return Ok(Repoint::AlreadyThere);
        }
        let arn = mapping.function_arn.unwrap_or_default();
        let target = self.target_of(&arn).ok_or_else(|| {
            RouterError::Unavailable(format!(
                "event source mapping {} delivers to {arn:?}, neither consumer: its parallelization is set once it is re-pointed",
                self.mapping_uuid
            ))
        })?;
        let output = self
            .update(
                self.client
                    .update_event_source_mapping()
                    .function_name(self.function(target))
                    .parallelization_factor(wanted),
            )
            .await?;
        match output.parallelization_factor {
            Some(now) if now != wanted => Err(RouterError::Unavailable(format!(
                "event source mapping {} was given parallelization {wanted} but reports {now}",
                self.mapping_uuid
            ))),
            _ => Ok(Repoint::Changed),
        }
    }
}

/// Lanes could not be found.
#[derive(Debug, thiserror::Error)]
pub enum LaneDiscoveryError {
    #[error("ListEventSourceMappings: {0}")]
    List(String),
    #[error(transparent)]
    Layout(#[from] LaneError),
}

/// The table an event source ARN of a DynamoDB stream belongs to
/// (`arn:aws:dynamodb:…:table/NAME/stream/LABEL`).
pub fn table_of_stream(event_source_arn: &str) -> Option<&str> {
    let (_, rest) = event_source_arn.split_once(":table/")?;
    Some(rest.split_once("/stream/").map_or(rest, |(table, _)| table))
}

/// The lanes of a gateway with a Requests table per operator: each mapping
/// that delivers to the real or the fallback consumer from the stream of
/// one of `operators`' tables. Two calls (and a page per 100 mappings) per
/// consumer, however many operators; an operator without a mapping, or with
/// two, is an error.
pub async fn discover_lanes(
    client: &aws_sdk_lambda::Client,
    tables: &RequestTables,
    real_function: &str,
    fallback_function: &str,
    operators: &[OperatorId],
) -> Result<Lanes, LaneDiscoveryError> {
    let lanes = find_lanes(client, tables, real_function, fallback_function).await?;
    let lanes = lanes
        .into_iter()
        .filter(|lane| lane.operators.iter().all(|o| operators.contains(o)))
        .collect();
    Ok(Lanes::new(lanes, operators)?)
}

/// Every lane whose table has `tables`' prefix, whatever operators the
/// caller knows of (for `lifeboat status`).
pub async fn find_lanes(
    client: &aws_sdk_lambda::Client,
    tables: &RequestTables,
    real_function: &str,
    fallback_function: &str,
) -> Result<Vec<Lane>, LaneDiscoveryError> {
    let mut lanes: Vec<Lane> = Vec::new();
    for function in [real_function, fallback_function] {
        // By name (what follows `:function:` in an ARN): Lambda takes both,
        // moto only the name.
        let name = function
            .split_once(":function:")
            .map_or(function, |(_, name)| name);
        let mut pages = client
            .list_event_source_mappings()
            .function_name(name)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                LaneDiscoveryError::List(describe(
                    &format!("ListEventSourceMappings {function}"),
                    &e,
                ))
            })?;
            for mapping in page.event_source_mappings() {
                let operator = mapping
                    .event_source_arn()
                    .and_then(table_of_stream)
                    .and_then(|table| tables.operator_of(table));
                let (Some(operator), Some(uuid)) = (operator, mapping.uuid()) else {
                    continue;
                };
                lanes.push(Lane {
                    name: operator.to_string(),
                    operators: vec![operator],
                    router: Arc::new(LambdaStreamRouter::new(
                        client.clone(),
                        uuid,
                        real_function,
                        fallback_function,
                    )),
                });
            }
        }
    }
    Ok(lanes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_lambda::Client;
    use aws_sdk_lambda::operation::get_event_source_mapping::GetEventSourceMappingOutput;
    use aws_sdk_lambda::types::error::{ResourceInUseException, ResourceNotFoundException};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    const REAL: &str = "arn:aws:lambda:us-east-1:123456789012:function:real-consumer";

    #[test]
    fn a_stream_arn_names_its_table() {
        assert_eq!(
            table_of_stream(
                "arn:aws:dynamodb:eu-west-1:123456789012:table/lifeboat.requests.nordic/stream/2026-12-01T06:00:00.000"
            ),
            Some("lifeboat.requests.nordic")
        );
        assert_eq!(
            table_of_stream("arn:aws:dynamodb:eu-west-1:1:table/t"),
            Some("t")
        );
        assert_eq!(table_of_stream("arn:aws:sqs:eu-west-1:1:queue"), None);
    }

    #[test]
    fn functions_are_matched_by_arn_or_name() {
        assert!(names_function(REAL, REAL));
        assert!(names_function("real-consumer", REAL));
        assert!(!names_function("real", REAL));
        assert!(!names_function("fallback-consumer", REAL));
        assert!(!names_function(
            "arn:aws:lambda:eu-west-1:123456789012:function:real-consumer",
            REAL
        ));
        assert!(!names_function("real-consumer", &format!("{REAL}:live")));
        assert!(names_function(
            "real-consumer:live",
            &format!("{REAL}:live")
        ));
    }

    fn router(client: Client) -> LambdaStreamRouter {
        LambdaStreamRouter::new(client, "uuid-1", "real-consumer", "fallback-consumer")
    }

    fn mapping(arn: &'static str) -> aws_smithy_mocks::Rule {
        mock!(Client::get_event_source_mapping).then_output(move || {
            GetEventSourceMappingOutput::builder()
                .function_arn(arn)
                .build()
        })
    }

    #[tokio::test]
    async fn a_mapping_still_updating_is_busy() {
        let get = mapping(REAL);
        let update = mock!(Client::update_event_source_mapping).then_error(|| {
            UpdateEventSourceMappingError::ResourceInUseException(
                ResourceInUseException::builder()
                    .message("The resource you requested is currently in use")
                    .build(),
            )
        });
        let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&get, &update]);
        let err = router(client)
            .point_at(ConsumerTarget::Fallback)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RouterError::Busy(m) if m.contains("ResourceInUseException")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_missing_mapping_is_not_found() {
        let get = mock!(Client::get_event_source_mapping).then_error(|| {
            GetEventSourceMappingError::ResourceNotFoundException(
                ResourceNotFoundException::builder().build(),
            )
        });
        let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&get]);
        let router = router(client);
        assert!(matches!(router.current().await, Err(RouterError::NotFound(u)) if u == "uuid-1"));
        assert!(matches!(
            router.point_at(ConsumerTarget::Real).await,
            Err(RouterError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_mapping_pointing_elsewhere_is_reported() {
        let get = mapping("arn:aws:lambda:us-east-1:123456789012:function:something-else");
        let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&get]);
        let err = router(client).current().await.unwrap_err();
        assert!(
            matches!(&err, RouterError::Unavailable(m) if m.contains("something-else")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_lanes_parallelization_is_set_only_when_it_differs() {
        let at = |factor: i32| {
            mock!(Client::get_event_source_mapping).then_output(move || {
                GetEventSourceMappingOutput::builder()
                    .function_arn(REAL)
                    .parallelization_factor(factor)
                    .build()
            })
        };
        let update = mock!(Client::update_event_source_mapping)
            .match_requests(|r| {
                r.parallelization_factor == Some(10)
                    && r.function_name.as_deref() == Some("real-consumer")
            })
            .then_output(|| {
                aws_sdk_lambda::operation::update_event_source_mapping::UpdateEventSourceMappingOutput::builder()
                    .function_arn(REAL)
                    .parallelization_factor(10)
                    .build()
            });
        let ten = Parallelization::new(10).unwrap();
        let (four, there) = (at(4), at(10));
        let client = mock_client!(aws_sdk_lambda, RuleMode::Sequential, [&four, &update]);
        assert_eq!(
            router(client).set_parallelization(ten).await.unwrap(),
            Repoint::Changed
        );
        assert_eq!(update.num_calls(), 1, "the update keeps the function");
        let client = mock_client!(aws_sdk_lambda, RuleMode::Sequential, [&there]);
        assert_eq!(
            router(client).set_parallelization(ten).await.unwrap(),
            Repoint::AlreadyThere
        );
        assert_eq!(update.num_calls(), 1, "no update when it is already 10");
    }
}
