//! What one invocation did, as returned to direct callers (commands) and
//! logged: each operator's decision, where the streams of the lanes it
//! reconciled point, and what it could not handle.

use aws_lambda_events::event::sqs::SqsBatchResponse;
use lifeboat_core::{BreakerState, ConsumerTarget, OperatorId};
use serde::Serialize;

use crate::SwitchError;

/// What one invocation did: returned to direct callers (commands) and logged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SwitchReport {
    pub decisions: Vec<OperatorDecision>,
    /// Where the streams of the lanes this invocation reconciled point.
    pub streams: Vec<StreamReport>,
    pub announced: Vec<u64>,
    /// Probe calls made (half-open trials by the switch included).
    pub probe_calls: u32,
    /// Operators and lanes this invocation could not handle, with why; the
    /// others were handled all the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Lanes the tick left alone because their marks say they point right.
    pub lanes_left: usize,
    /// Lanes whose parallelization this invocation set, from the operators'
    /// `lane.parallelization`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resized: Vec<LaneResized>,
    /// With a batch from the timer queue: the timers to deliver again
    /// (Lambda reads `batchItemFailures`).
    #[serde(flatten)]
    pub response: SqsBatchResponse,
}

/// An operator (or a lane) an invocation could not handle.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Skipped {
    pub operator: Option<OperatorId>,
    /// The lane, when it was the lane's mapping that failed.
    pub lane: Option<String>,
    pub error: String,
}

/// A lane whose mapping's `ParallelizationFactor` an invocation set.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LaneResized {
    pub lane: String,
    pub parallelization: u8,
}

/// Where one lane's stream points after an invocation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamReport {
    pub lane: String,
    pub target: ConsumerTarget,
    /// Whether this invocation moved it.
    pub repointed: bool,
}

impl SwitchReport {
    /// Where `lane`'s stream points, if this invocation reconciled it.
    pub fn target_of(&self, lane: &str) -> Option<ConsumerTarget> {
        self.streams
            .iter()
            .find(|s| s.lane == lane)
            .map(|s| s.target)
    }

    /// Whether any stream was re-pointed.
    pub fn repointed(&self) -> bool {
        self.streams.iter().any(|s| s.repointed)
    }

    /// Take in what another part of the same invocation did.
    pub(crate) fn absorb(&mut self, other: SwitchReport) {
        self.decisions.extend(other.decisions);
        self.streams.extend(other.streams);
        self.announced.extend(other.announced);
        self.probe_calls += other.probe_calls;
        self.skipped.extend(other.skipped);
        self.lanes_left += other.lanes_left;
        self.resized.extend(other.resized);
        self.response
            .batch_item_failures
            .extend(other.response.batch_item_failures);
    }

    /// Note that `operator` could not be handled, and why.
    pub(crate) fn skip(&mut self, operator: &OperatorId, error: &SwitchError) {
        if self
            .skipped
            .iter()
            .any(|s| s.lane.is_none() && s.operator.as_ref() == Some(operator))
        {
            return;
        }
        tracing::error!(operator = %operator, error = %error, "operator skipped; the others are handled");
        self.skipped.push(Skipped {
            operator: Some(operator.clone()),
            lane: None,
            error: error.to_string(),
        });
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OperatorDecision {
    pub operator: OperatorId,
    pub from: BreakerState,
    pub to: BreakerState,
    pub version: u64,
    /// Why it moved, or why it did not.
    pub reason: String,
    pub changed: bool,
}
