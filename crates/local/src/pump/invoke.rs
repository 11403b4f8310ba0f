//! Lambda's `Invoke` API through `aws-sdk-lambda`, pointed at
//! `cargo lambda watch` (or any Invoke endpoint).
//!
//! The SDK's own retries are off: whoever invokes decides whether and when to
//! try again, as Lambda's pollers and EventBridge do. A function error comes
//! back from `cargo lambda watch` as HTTP 500 with `{"errorType",
//! "errorMessage"}`, and from Lambda as 200 with `X-Amz-Function-Error`; both
//! are [`InvokeError::Function`].

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_lambda::config::http::HttpResponse;
use aws_sdk_lambda::config::retry::RetryConfig;
use aws_sdk_lambda::config::timeout::TimeoutConfig;
use aws_sdk_lambda::error::{DisplayErrorContext, SdkError};
use aws_sdk_lambda::primitives::Blob;
use serde_json::Value;

/// Why an invocation did not produce an answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InvokeError {
    #[error("{function} returned a function error: {body}")]
    Function { function: String, body: String },
    #[error("invoking {function} was refused (http {status}): {body}")]
    Refused {
        function: String,
        status: u16,
        body: String,
    },
    #[error("invoking {function} failed: {message}")]
    Transport { function: String, message: String },
    #[error("{function} answered with something that is not json: {message}")]
    BadAnswer { function: String, message: String },
}

impl InvokeError {
    pub fn function(&self) -> &str {
        match self {
            InvokeError::Function { function, .. }
            | InvokeError::Refused { function, .. }
            | InvokeError::Transport { function, .. }
            | InvokeError::BadAnswer { function, .. } => function,
        }
    }
}

/// Synchronous (`RequestResponse`) invocations by function name.
#[derive(Debug, Clone)]
pub struct Invoker {
    client: aws_sdk_lambda::Client,
}

impl Invoker {
    /// An invoker on a client built elsewhere (its retry settings apply).
    pub fn new(client: aws_sdk_lambda::Client) -> Self {
        Self { client }
    }

    /// An invoker for the Invoke API at `endpoint` (e.g.
    /// [`crate::watch::Watch::invoke_endpoint`]): no SDK retries, each
    /// invocation bounded by `timeout`.
    pub async fn for_endpoint(endpoint: &str, timeout: Duration) -> Self {
        let sdk: SdkConfig = crate::moto::sdk_config_for(endpoint).await;
        let config = aws_sdk_lambda::config::Builder::from(&sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_timeout(timeout)
                    .build(),
            )
            .build();
        Self::new(aws_sdk_lambda::Client::from_conf(config))
    }

    /// Invoke `function` with `payload` and return its JSON answer (`null`
    /// for an empty one).
    pub async fn invoke(&self, function: &str, payload: &Value) -> Result<Value, InvokeError> {
        let output = self
            .client
            .invoke()
            .function_name(function)
            .payload(Blob::new(payload.to_string()))
            .send()
            .await
            .map_err(|e| classify(function, e))?;
        let body = output
            .payload
            .as_ref()
            .map(|b| String::from_utf8_lossy(b.as_ref()).into_owned())
            .unwrap_or_default();
        if output.function_error.is_some() {
            return Err(InvokeError::Function {
                function: function.to_owned(),
                body,
            });
        }
        if body.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&body).map_err(|e| InvokeError::BadAnswer {
            function: function.to_owned(),
            message: e.to_string(),
        })
    }
}

fn classify(
    function: &str,
    error: SdkError<aws_sdk_lambda::operation::invoke::InvokeError, HttpResponse>,
) -> InvokeError {
    let function = function.to_owned();
    if let Some(raw) = error.raw_response() {
        let status = raw.status().as_u16();
        let body = raw
            .body()
            .bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        return if status >= 500 {
            InvokeError::Function { function, body }
        } else {
            InvokeError::Refused {
                function,
                status,
                body,
            }
        };
    }
    InvokeError::Transport {
        function,
        message: DisplayErrorContext(&error).to_string(),
    }
}
