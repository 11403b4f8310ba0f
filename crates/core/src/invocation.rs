//! Why a whole invocation fails: the one error the batch functions (both
//! consumers and the off-sale listener) fail an invocation with; and, for
//! whatever plays Lambda's part around a stream's batch (the simulator and
//! the local pump), where Lambda delivers a batch again from. And whether
//! an invocation is a schedule's tick ([`is_schedule`]).

/// Whether `payload` is EventBridge's scheduled event, as a rule with a
/// `ScheduleExpression` delivers it (the off-sale listener's sweep, the
/// booking worker's run).
pub fn is_schedule(payload: &serde_json::Value) -> bool {
    payload.get("source").and_then(serde_json::Value::as_str) == Some("aws.events")
        && payload
            .get("detail-type")
            .and_then(serde_json::Value::as_str)
            == Some("Scheduled Event")
}

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

/// Where Lambda delivers a stream batch again after the function reported
/// `failures` (the `itemIdentifier`s of its `batchItemFailures`): the index
/// in `batch` (the records' identifiers, in order) of the first failed
/// record, from which the rest of the batch comes back; `Ok(None)` when
/// nothing failed. An identifier that is missing, empty or not in the batch
/// is `Err`: Lambda takes it as a failure of the whole batch.
pub fn first_failed<'a>(
    failures: impl IntoIterator<Item = Option<&'a str>>,
    batch: &[&str],
) -> Result<Option<usize>, String> {
    let mut first: Option<usize> = None;
    for id in failures {
        let id = id
            .filter(|id| !id.is_empty())
            .ok_or("batch item failure without an itemIdentifier")?;
        let at = batch
            .iter()
            .position(|record| *record == id)
            .ok_or_else(|| format!("batch item failure {id} is not in the batch"))?;
        first = Some(first.map_or(at, |f| f.min(at)));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_comes_back_from_its_first_failed_record() {
        let batch = ["10", "11", "12", "13"];
        assert_eq!(first_failed([], &batch), Ok(None));
        assert_eq!(first_failed([Some("12"), Some("11")], &batch), Ok(Some(1)));
        assert!(first_failed([Some("99")], &batch).is_err());
        assert!(first_failed([Some("")], &batch).is_err());
        assert!(first_failed([None], &batch).is_err());
    }
}
