//! What a stack must reserve to serve its lanes.
//!
//! The template gives the real consumer one reserved concurrency
//! (`RealConsumerConcurrency`) for every operator's lane. A reservation is a
//! floor and also a cap: each lane's mapping runs up to its
//! `ParallelizationFactor` batches at once, and a poll that finds the
//! function at its cap is throttled and waits for a later poll while the
//! lane's requests queue and its customers' budgets run out. A stack whose
//! reservation is under its lanes' parallelization serves some lanes late
//! on an ordinary day; [`check`] refuses it before it is deployed (the
//! stack's capacity check, run by CloudFormation at create and update).

/// The shape of a stack: what its real consumer must serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    /// Operators, each with a lane of its own.
    pub operators: usize,
    /// Batches of one lane that run at once (`LaneParallelization`).
    pub parallelization: usize,
}

impl Lanes {
    /// Real consumer instances the lanes can ask for at once: every lane at
    /// its parallelization.
    pub fn real_consumer_needed(&self) -> usize {
        self.operators.saturating_mul(self.parallelization)
    }
}

/// A stack that cannot serve its lanes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    #[error(
        "RealConsumerConcurrency {reserved} cannot serve {operators} operators' lanes at \
         LaneParallelization {parallelization}: they run up to {needed} batches at once, and \
         the reservation is also a cap, so lanes past it wait while their customers' budgets \
         run out. Set RealConsumerConcurrency to at least {needed}, lower LaneParallelization, \
         or set ReservedConcurrency to disabled"
    )]
    RealConsumerShort {
        reserved: usize,
        operators: usize,
        parallelization: usize,
        needed: usize,
    },
    #[error("the stack serves no operator: Operators is empty")]
    NoOperators,
}

/// Whether `lanes` can be served by a real consumer reserved at `reserved`
/// instances (`None`: not reserved, so not capped).
pub fn check(lanes: Lanes, reserved: Option<usize>) -> Result<(), CapacityError> {
    if lanes.operators == 0 {
        return Err(CapacityError::NoOperators);
    }
    let needed = lanes.real_consumer_needed();
    match reserved {
        Some(reserved) if reserved < needed => Err(CapacityError::RealConsumerShort {
            reserved,
            operators: lanes.operators,
            parallelization: lanes.parallelization,
            needed,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_under_the_lanes_parallelization_is_refused() {
        let lanes = Lanes {
            operators: 200,
            parallelization: 4,
        };
        assert_eq!(lanes.real_consumer_needed(), 800);
        assert_eq!(check(lanes, Some(800)), Ok(()));
        assert_eq!(check(lanes, None), Ok(()));
        let short = check(lanes, Some(100)).unwrap_err();
        assert!(
            short.to_string().contains("at least 800"),
            "names the figure to set: {short}"
        );
        let small = Lanes {
            operators: 25,
            parallelization: 4,
        };
        assert_eq!(check(small, Some(100)), Ok(()));
        assert_eq!(
            check(
                Lanes {
                    operators: 0,
                    parallelization: 4
                },
                Some(100)
            ),
            Err(CapacityError::NoOperators)
        );
    }
}
