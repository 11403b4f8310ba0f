//! Why a whole invocation fails: the one error the batch functions (both
//! consumers and the off-sale listener) fail an invocation with.

/// The payload is not the batch the function takes (no `Records` array, or
/// records that are not the function's). Records never fail the invocation;
/// this does, with the Lambda error type [`NotABatch::ERROR_TYPE`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotABatch(pub String);

impl NotABatch {
    /// The `errorType` of the invocation's error.
    pub const ERROR_TYPE: &'static str = "NotABatch";
}
