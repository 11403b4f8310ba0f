//! Turning SDK errors into the ports' errors: a concise message with the
//! service's error code, never a Debug dump of the whole response.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// `"<what>: <code>: <message>"` for a service error, `"<what>: <error and its
/// sources>"` for anything else (timeouts, connection errors, bad responses).
pub(crate) fn describe<E, R>(what: &str, err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            match (e.code(), e.message()) {
                (Some(code), Some(message)) => format!("{what}: {code}: {message}"),
                (Some(code), None) => format!("{what}: {code}"),
                _ => format!("{what}: {}", DisplayErrorContext(e)),
            }
        }
        other => format!("{what}: {}", DisplayErrorContext(other)),
    }
}
