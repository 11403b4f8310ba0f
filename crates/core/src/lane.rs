//! Lanes: each stream of Requests, the operators whose requests it carries,
//! and the mapping that delivers it (a bulkhead per lane).
//!
//! A batch lasts as long as its slowest call, so operators that share a lane
//! share each other's hangs; and a lane can go to the fallback consumer only
//! when every operator on it is open. One lane per operator isolates them
//! and lets the switch re-point exactly the operator that tripped (see
//! docs/breaker.md, "Lanes").

use std::sync::Arc;

use crate::breaker::{BreakerRecord, ConsumerTarget};
use crate::operator::OperatorId;
use crate::ports::StreamRouter;
use crate::settings::{Parallelization, Settings};

/// One stream of Requests and where its mapping delivers.
#[derive(Clone)]
pub struct Lane {
    /// For logs and reports: the operator of a lane of one, else the
    /// mapping's name.
    pub name: String,
    /// The operators whose requests this stream carries.
    pub operators: Vec<OperatorId>,
    pub router: Arc<dyn StreamRouter>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("name", &self.name)
            .field("operators", &self.operators)
            .finish_non_exhaustive()
    }
}

impl Lane {
    /// Where this lane's stream must point for these stored breakers: the
    /// fallback consumer only while every operator on it is open (a breaker
    /// never stored is closed).
    pub fn wanted(&self, records: &[BreakerRecord]) -> ConsumerTarget {
        let all_open = !self.operators.is_empty()
            && self.operators.iter().all(|o| {
                records
                    .iter()
                    .any(|r| &r.operator == o && r.state.target() == ConsumerTarget::Fallback)
            });
        if all_open {
            ConsumerTarget::Fallback
        } else {
            ConsumerTarget::Real
        }
    }

    pub fn serves(&self, operator: &OperatorId) -> bool {
        self.operators.contains(operator)
    }

    /// The parallelization `settings` ask of this lane: the most any of its
    /// operators asks; `None` when none does (the template's stays).
    pub fn parallelization(&self, settings: &Settings) -> Option<Parallelization> {
        self.operators
            .iter()
            .filter_map(|o| settings.for_operator(o).lane.parallelization)
            .max()
    }
}

/// A lane layout that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    #[error("operator {0} is on two lanes; each operator's requests flow through one stream")]
    OnTwoLanes(OperatorId),
    #[error("operator {0} is on no lane: nothing would carry its requests")]
    OnNoLane(OperatorId),
}

/// Every lane of a gateway.
#[derive(Debug, Clone, Default)]
pub struct Lanes {
    lanes: Vec<Lane>,
}

impl Lanes {
    /// One stream for every operator (a gateway without bulkheads).
    pub fn shared(
        name: impl Into<String>,
        operators: Vec<OperatorId>,
        router: Arc<dyn StreamRouter>,
    ) -> Self {
        Self {
            lanes: vec![Lane {
                name: name.into(),
                operators,
                router,
            }],
        }
    }

    /// These lanes, which must carry each of `operators` exactly once.
    pub fn new(lanes: Vec<Lane>, operators: &[OperatorId]) -> Result<Self, LaneError> {
        let mut seen: Vec<&OperatorId> = Vec::new();
        for operator in lanes.iter().flat_map(|l| &l.operators) {
            if seen.contains(&operator) {
                return Err(LaneError::OnTwoLanes(operator.clone()));
            }
            seen.push(operator);
        }
        if let Some(missing) = operators.iter().find(|o| !seen.contains(o)) {
            return Err(LaneError::OnNoLane(missing.clone()));
        }
        Ok(Self { lanes })
    }

    /// Lanes as found (say, among a stack's mappings), not checked against a
    /// list of operators; an operator on two lanes keeps its first.
    pub fn from_found(found: Vec<Lane>) -> Self {
        let mut lanes: Vec<Lane> = Vec::new();
        for lane in found {
            if !lane
                .operators
                .iter()
                .any(|o| lanes.iter().any(|l| l.serves(o)))
            {
                lanes.push(lane);
            }
        }
        Self { lanes }
    }

    /// A lane of its own for each operator.
    pub fn per_operator(
        routers: impl IntoIterator<Item = (OperatorId, Arc<dyn StreamRouter>)>,
    ) -> Self {
        Self {
            lanes: routers
                .into_iter()
                .map(|(operator, router)| Lane {
                    name: operator.to_string(),
                    operators: vec![operator],
                    router,
                })
                .collect(),
        }
    }

    /// The same lanes, each mapping's failures counted into `metrics`.
    pub fn watched(
        self,
        metrics: &Arc<dyn crate::ports::MetricsSink>,
        clock: &Arc<dyn crate::ports::Clock>,
    ) -> Self {
        Self {
            lanes: self
                .lanes
                .into_iter()
                .map(|lane| Lane {
                    router: crate::watched::watch(lane.router, metrics, clock),
                    ..lane
                })
                .collect(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter()
    }

    /// The lane carrying `operator`'s requests.
    pub fn of(&self, operator: &OperatorId) -> Option<&Lane> {
        self.lanes.iter().find(|l| l.serves(operator))
    }

    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::BreakerState;
    use crate::memory::MemoryStreamRouter;
    use chrono::DateTime;

    fn op(name: &str) -> OperatorId {
        OperatorId::new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    fn record(operator: &str, state: BreakerState) -> BreakerRecord {
        let mut r = BreakerRecord::initial(op(operator), DateTime::UNIX_EPOCH);
        r.state = state;
        r
    }

    fn router() -> Arc<dyn StreamRouter> {
        Arc::new(MemoryStreamRouter::new())
    }

    #[test]
    fn a_shared_lane_goes_to_the_fallback_only_when_all_its_operators_are_open() {
        let lanes = Lanes::shared("requests", vec![op("alpha"), op("bravo")], router());
        let lane = lanes.of(&op("alpha")).unwrap_or_else(|| panic!("no lane"));
        let alpha_open = [record("alpha", BreakerState::Open)];
        assert_eq!(lane.wanted(&alpha_open), ConsumerTarget::Real);
        let both = [
            record("alpha", BreakerState::Open),
            record("bravo", BreakerState::ForcedOpen),
        ];
        assert_eq!(lane.wanted(&both), ConsumerTarget::Fallback);
    }

    #[test]
    fn a_lane_per_operator_follows_its_own_breaker() {
        let lanes = Lanes::per_operator([(op("alpha"), router()), (op("bravo"), router())]);
        let records = [record("alpha", BreakerState::Open)];
        let alpha = lanes.of(&op("alpha")).unwrap_or_else(|| panic!("no lane"));
        let bravo = lanes.of(&op("bravo")).unwrap_or_else(|| panic!("no lane"));
        assert_eq!(alpha.wanted(&records), ConsumerTarget::Fallback);
        assert_eq!(bravo.wanted(&records), ConsumerTarget::Real);
        assert_eq!(lanes.len(), 2);
    }

    #[test]
    fn a_layout_carries_each_operator_once() {
        let lane = |name: &str, ops: &[&str]| Lane {
            name: name.to_owned(),
            operators: ops.iter().map(|o| op(o)).collect(),
            router: router(),
        };
        let operators = [op("alpha"), op("bravo")];
        assert_eq!(
            Lanes::new(
                vec![lane("a", &["alpha"]), lane("b", &["bravo", "alpha"])],
                &operators
            )
            .err(),
            Some(LaneError::OnTwoLanes(op("alpha")))
        );
        assert_eq!(
            Lanes::new(vec![lane("a", &["alpha"])], &operators).err(),
            Some(LaneError::OnNoLane(op("bravo")))
        );
        assert!(Lanes::new(vec![lane("a", &["alpha", "bravo"])], &operators).is_ok());
    }
}
