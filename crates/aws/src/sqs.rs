//! When a message of the off-sale queue comes back: SQS
//! `ChangeMessageVisibility` on the message the listener is holding.
//!
//! The off-sale listener reports a message it has to retry as a batch item
//! failure, so the queue delivers it again once it is visible. Before that it
//! sets the message's visibility to the retry schedule's gap: the message then
//! comes back when the next attempt is due instead of after the queue's
//! visibility timeout.
//!
//! SQS counts visibility in whole seconds, from 0 to 43 200 (12 hours): a
//! delay is rounded up, so a message never comes back before its attempt is
//! due, and longer delays are cut to 12 hours (the listener's record still says
//! when the attempt is due; a message back early is put back without one).
//!
//! The circuit switch's timers ([`SqsBreakerTimers`]) are delayed messages on
//! the breaker timer queue.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use lifeboat_core::ports::{BreakerTimers, MessageHandle, Redelivery, RedeliveryError, TimerError};
use lifeboat_core::probe::BreakerTimer;

use crate::error::describe;

/// The longest visibility SQS accepts, in seconds.
pub const MAX_VISIBILITY_S: u64 = 43_200;

/// The visibility timeout that makes a message come back after `delay`:
/// whole seconds rounded up, at most [`MAX_VISIBILITY_S`].
pub fn visibility_timeout(delay: Duration) -> i32 {
    let secs = delay
        .as_secs()
        .saturating_add(u64::from(delay.subsec_nanos() > 0))
        .min(MAX_VISIBILITY_S);
    // At most 43 200: always fits.
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// The error codes that say the receipt handle no longer names a message in
/// flight: it was deleted, received again since, or never existed.
fn not_in_flight(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ReceiptHandleIsInvalid"
                | "MessageNotInflight"
                | "AWS.SimpleQueueService.MessageNotInflight"
        )
    )
}

/// [`Redelivery`] on an SQS queue.
#[derive(Debug, Clone)]
pub struct SqsRedelivery {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsRedelivery {
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

#[async_trait]
impl Redelivery for SqsRedelivery {
    async fn redeliver_after(
        &self,
        message: &MessageHandle,
        delay: Duration,
    ) -> Result<(), RedeliveryError> {
        let result = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(&message.receipt_handle)
            .visibility_timeout(visibility_timeout(delay))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(s)
                    if s.is_receipt_handle_is_invalid()
                        || s.is_message_not_inflight()
                        || not_in_flight(s.code()) =>
                {
                    Err(RedeliveryError::NotInFlight(message.message_id.clone()))
                }
                _ => Err(RedeliveryError::Unavailable(describe(
                    &format!("ChangeMessageVisibility {}", self.queue_url),
                    &e,
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::Client;
    use aws_sdk_sqs::operation::change_message_visibility::{
        ChangeMessageVisibilityError, ChangeMessageVisibilityOutput,
    };
    use aws_sdk_sqs::types::error::{MessageNotInflight, ReceiptHandleIsInvalid, RequestThrottled};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    #[test]
    fn delays_round_up_to_whole_seconds_within_twelve_hours() {
        assert_eq!(visibility_timeout(Duration::ZERO), 0);
        assert_eq!(visibility_timeout(Duration::from_millis(1)), 1);
        assert_eq!(visibility_timeout(Duration::from_secs(5)), 5);
        assert_eq!(visibility_timeout(Duration::from_millis(5_001)), 6);
        assert_eq!(visibility_timeout(Duration::from_secs(43_200)), 43_200);
        assert_eq!(visibility_timeout(Duration::from_secs(90_000)), 43_200);
        assert_eq!(visibility_timeout(Duration::MAX), 43_200);
    }

    fn handle() -> MessageHandle {
        MessageHandle {
            queue_arn: None,
            message_id: "m-1".into(),
            receipt_handle: "r-1".into(),
        }
    }

    #[tokio::test]
    async fn the_visibility_is_set_on_the_configured_queue() {
        let change = mock!(Client::change_message_visibility)
            .match_requests(|r| {
                r.queue_url() == Some("https://queue.test/offsale")
                    && r.receipt_handle() == Some("r-1")
                    && r.visibility_timeout() == Some(11)
            })
            .then_output(|| ChangeMessageVisibilityOutput::builder().build());
        let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&change]);
        let redelivery = SqsRedelivery::new(client, "https://queue.test/offsale");
        redelivery
            .redeliver_after(&handle(), Duration::from_millis(10_500))
            .await
            .unwrap();
        assert_eq!(change.num_calls(), 1);
    }

    #[tokio::test]
    async fn gone_messages_are_not_in_flight_and_the_rest_unavailable() {
        let cases: [(fn() -> ChangeMessageVisibilityError, bool); 3] = [
            (
                || {
                    ChangeMessageVisibilityError::ReceiptHandleIsInvalid(
                        ReceiptHandleIsInvalid::builder().message("bad").build(),
                    )
                },
                true,
            ),
            (
                || {
                    ChangeMessageVisibilityError::MessageNotInflight(
                        MessageNotInflight::builder().build(),
                    )
                },
                true,
            ),
            (
                || {
                    ChangeMessageVisibilityError::RequestThrottled(
                        RequestThrottled::builder().message("slow down").build(),
                    )
                },
                false,
            ),
        ];
        for (error, gone) in cases {
            let change = mock!(Client::change_message_visibility).then_error(error);
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&change]);
            let result = SqsRedelivery::new(client, "q")
                .redeliver_after(&handle(), Duration::from_secs(5))
                .await;
            if gone {
                assert_eq!(result, Err(RedeliveryError::NotInFlight("m-1".into())));
            } else {
                assert!(
                    matches!(&result, Err(RedeliveryError::Unavailable(m)) if m.contains("ChangeMessageVisibility q")),
                    "{result:?}"
                );
            }
        }
    }
}

/// The longest delay SQS gives a message, in seconds (15 minutes).
pub const MAX_DELAY_S: i64 = 900;

/// [`BreakerTimers`] on an SQS queue: each timer is a message delayed until
/// it is due (`DelaySeconds`, whole seconds rounded up). The queue's event
/// source mapping hands it to the circuit switch. A timer further out than
/// SQS's 15 minutes arrives early; the switch finds it early and sets it
/// again.
#[derive(Clone)]
pub struct SqsBreakerTimers {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    clock: std::sync::Arc<dyn lifeboat_core::ports::Clock>,
}

impl SqsBreakerTimers {
    pub fn new(
        client: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
        clock: std::sync::Arc<dyn lifeboat_core::ports::Clock>,
    ) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            clock,
        }
    }
}

/// The `DelaySeconds` that delivers a message at `due` when sent at `now`.
pub fn delay_seconds(
    now: chrono::DateTime<chrono::Utc>,
    due: chrono::DateTime<chrono::Utc>,
) -> i32 {
    let millis = (due - now).num_milliseconds().max(0);
    let secs = (millis + 999) / 1000;
    i32::try_from(secs.min(MAX_DELAY_S)).unwrap_or(0)
}

#[async_trait]
impl BreakerTimers for SqsBreakerTimers {
    async fn set(&self, timer: &BreakerTimer) -> Result<(), TimerError> {
        let body = serde_json::to_string(timer).map_err(|e| TimerError(e.to_string()))?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .delay_seconds(delay_seconds(self.clock.now(), timer.due))
            .send()
            .await
            .map_err(|e| TimerError(describe(&format!("SendMessage {}", self.queue_url), &e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod timer_tests {
    use super::*;

    #[test]
    fn delays_round_up_to_whole_seconds_within_sqs_limits() {
        let t = |ms: i64| chrono::DateTime::from_timestamp_millis(1_796_000_000_000 + ms).unwrap();
        assert_eq!(delay_seconds(t(0), t(10_000)), 10);
        assert_eq!(delay_seconds(t(0), t(10_001)), 11);
        assert_eq!(delay_seconds(t(5_000), t(0)), 0);
        assert_eq!(delay_seconds(t(0), t(3_600_000)), 900);
    }
}
