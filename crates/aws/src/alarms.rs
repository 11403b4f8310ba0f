//! [`AlarmContributors`] on CloudWatch: `DescribeAlarmContributors`, page by
//! page, for a Metrics Insights alarm whose time series are its
//! contributors (lifeboat's `OperatorsErrorsAlarm`, one per operator).
//!
//! The role needs `cloudwatch:DescribeAlarmContributors` on the alarm's ARN.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lifeboat_core::ports::{AlarmContributor, AlarmContributors, StoreError};

/// A contributor alarm's pages are read until this many: CloudWatch keeps
/// at most 100 contributors in ALARM, so more pages than this are a loop.
const MAX_PAGES: usize = 20;

/// [`AlarmContributors`] on CloudWatch.
#[derive(Debug, Clone)]
pub struct CloudWatchAlarmContributors {
    client: aws_sdk_cloudwatch::Client,
}

impl CloudWatchAlarmContributors {
    pub fn new(client: aws_sdk_cloudwatch::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl AlarmContributors for CloudWatchAlarmContributors {
    async fn in_alarm(&self, alarm: &str) -> Result<Vec<AlarmContributor>, StoreError> {
        let mut contributors = Vec::new();
        let mut next = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .client
                .describe_alarm_contributors()
                .alarm_name(alarm)
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!(
                        "DescribeAlarmContributors {alarm}: {}",
                        aws_sdk_cloudwatch::error::DisplayErrorContext(&e)
                    ))
                })?;
            contributors.extend(page.alarm_contributors().iter().map(|c| {
                AlarmContributor {
                    attributes: c
                        .contributor_attributes()
                        .map(|a| {
                            a.iter()
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect::<BTreeMap<_, _>>()
                        })
                        .unwrap_or_default(),
                    since: c
                        .state_transitioned_timestamp()
                        .and_then(|t| DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())),
                }
            }));
            match page.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_owned()),
                _ => return Ok(contributors),
            }
        }
        Err(StoreError::Unavailable(format!(
            "DescribeAlarmContributors {alarm}: still more pages after {MAX_PAGES}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_cloudwatch::operation::describe_alarm_contributors::DescribeAlarmContributorsOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    fn contributor(id: &str, operator: &str) -> aws_sdk_cloudwatch::types::AlarmContributor {
        aws_sdk_cloudwatch::types::AlarmContributor::builder()
            .contributor_id(id)
            .contributor_attributes("Operator", operator)
            .state_reason("Threshold Crossed")
            .state_transitioned_timestamp(aws_sdk_cloudwatch::primitives::DateTime::from_secs(
                1_796_032_800,
            ))
            .build()
    }

    #[tokio::test]
    async fn every_page_of_contributors_is_read() {
        let first = mock!(aws_sdk_cloudwatch::Client::describe_alarm_contributors)
            .match_requests(|r| {
                r.alarm_name() == Some("lifeboat-operators-errors") && r.next_token().is_none()
            })
            .then_output(|| {
                DescribeAlarmContributorsOutput::builder()
                    .alarm_contributors(contributor("a1", "nordic"))
                    .next_token("page-2")
                    .build()
            });
        let second = mock!(aws_sdk_cloudwatch::Client::describe_alarm_contributors)
            .match_requests(|r| r.next_token() == Some("page-2"))
            .then_output(|| {
                DescribeAlarmContributorsOutput::builder()
                    .alarm_contributors(contributor("b2", "baltic"))
                    .build()
            });
        let client = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&first, &second]);
        let found = CloudWatchAlarmContributors::new(client)
            .in_alarm("lifeboat-operators-errors")
            .await
            .expect("contributors");
        let operators: Vec<&str> = found
            .iter()
            .map(|c| c.attributes["Operator"].as_str())
            .collect();
        assert_eq!(operators, ["nordic", "baltic"]);
        assert_eq!(
            found[0].since,
            DateTime::<Utc>::from_timestamp(1_796_032_800, 0),
            "when it entered ALARM"
        );
    }

    #[tokio::test]
    async fn a_refusal_is_an_unavailable_store() {
        let refused = mock!(aws_sdk_cloudwatch::Client::describe_alarm_contributors).then_error(|| {
            aws_sdk_cloudwatch::operation::describe_alarm_contributors::DescribeAlarmContributorsError::ResourceNotFoundException(
                aws_sdk_cloudwatch::types::error::ResourceNotFoundException::builder()
                    .message("no such alarm")
                    .build(),
            )
        });
        let client = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&refused]);
        let err = CloudWatchAlarmContributors::new(client)
            .in_alarm("gone")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Unavailable(why) if why.contains("gone")),
            "{err}"
        );
    }
}
