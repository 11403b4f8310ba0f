//! Several simulated operators behind one [`OperatorApi`], as the
//! simulations' marketplaces call them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lifeboat_core::OperatorId;
use lifeboat_core::ports::OperatorApi;
use lifeboat_core::request::{CallResult, OperatorCall};

use super::SimulatedOperator;
use crate::payload;

/// Several simulated operators behind one [`OperatorApi`]: each call goes
/// to its operator's simulator; a call to any other is a 404, never sent.
#[derive(Clone, Default)]
pub struct SimulatedOperators(Arc<HashMap<OperatorId, SimulatedOperator>>);

impl SimulatedOperators {
    /// The simulator playing `operator`.
    pub fn get(&self, operator: &OperatorId) -> Option<&SimulatedOperator> {
        self.0.get(operator)
    }
}

impl FromIterator<SimulatedOperator> for SimulatedOperators {
    fn from_iter<I: IntoIterator<Item = SimulatedOperator>>(sims: I) -> Self {
        Self(Arc::new(
            sims.into_iter()
                .map(|sim| (sim.operator().clone(), sim))
                .collect(),
        ))
    }
}

impl fmt::Debug for SimulatedOperators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

#[async_trait]
impl OperatorApi for SimulatedOperators {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.0.contains_key(operator)
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        match self.0.get(&call.operator) {
            Some(sim) => sim.call(call).await,
            None => payload::not_sent(404, format!("unknown operator {}", call.operator)),
        }
    }
}
