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

use crate::settings::Parallelization;

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
    #[error(
        "RealConsumerConcurrency {reserved} cannot serve the lanes at the parallelization the \
         operators' settings ask ({raised} lanes raised): they run up to {needed} batches at \
         once. Set RealConsumerConcurrency to at least {needed}, or lower `lane.parallelization` \
         in the operators' settings; until then the lanes keep the parallelization they have"
    )]
    SettingsShort {
        reserved: usize,
        raised: usize,
        needed: usize,
    },
}

/// The parallelization a lane needs for its operator's traffic: every call
/// of a second's `requests_per_s` in flight at once while each takes up to
/// `call` (the operation's budget: what a brownout makes them take), at
/// `concurrency` calls to a batch (`CallConcurrency`), within Lambda's 1 to
/// 10. A lane past 10 still queues in a brownout; its operator's adaptive
/// limit answers the rest from the cache.
pub fn lane_parallelization_for(
    requests_per_s: f64,
    call: std::time::Duration,
    concurrency: usize,
) -> u8 {
    let batches = requests_per_s.max(0.0) * call.as_secs_f64() / concurrency.max(1) as f64;
    batches.ceil().clamp(1.0, 10.0) as u8
}

/// Whether lanes can be served by a real consumer reserved at `reserved`
/// (`None`: not capped), each at what its operators' settings ask
/// (`lane.parallelization`, one entry a lane) or else at `default`, the
/// template's `LaneParallelization`.
pub fn check_lanes(
    asked: &[Option<Parallelization>],
    default: usize,
    reserved: Option<usize>,
) -> Result<(), CapacityError> {
    if asked.is_empty() {
        return Err(CapacityError::NoOperators);
    }
    let needed = asked
        .iter()
        .map(|p| p.map_or(default, |p| usize::from(p.get())))
        .sum();
    match reserved {
        Some(reserved) if reserved < needed => Err(CapacityError::SettingsShort {
            reserved,
            raised: asked.iter().flatten().count(),
            needed,
        }),
        _ => Ok(()),
    }
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
    fn a_lane_is_sized_for_a_seconds_calls_at_the_budget() {
        let budget = std::time::Duration::from_secs(3);
        // The priced marketplace's busiest operators (2,000 searches/s,
        // Zipf over 200): 340, 170, 113, 85 and 68 searches/s.
        let sized: Vec<u8> = [340.0, 170.0, 113.0, 85.0, 68.0, 57.0, 0.2]
            .iter()
            .map(|&r| lane_parallelization_for(r, budget, 50))
            .collect();
        assert_eq!(sized, [10, 10, 7, 6, 5, 4, 1]);
        assert_eq!(lane_parallelization_for(f64::NAN, budget, 0), 1);
    }

    #[test]
    fn lanes_raised_by_settings_count_at_their_own_parallelization() {
        let mut asked = vec![None; 200];
        assert_eq!(check_lanes(&asked, 4, Some(800)), Ok(()));
        asked[0] = Parallelization::new(10).ok();
        asked[1] = Parallelization::new(10).ok();
        let short = check_lanes(&asked, 4, Some(800)).unwrap_err();
        assert_eq!(
            short,
            CapacityError::SettingsShort {
                reserved: 800,
                raised: 2,
                needed: 812
            }
        );
        assert!(short.to_string().contains("at least 812"), "{short}");
        assert_eq!(check_lanes(&asked, 4, Some(812)), Ok(()));
        assert_eq!(check_lanes(&asked, 4, None), Ok(()));
        assert_eq!(
            check_lanes(&[], 4, Some(1)),
            Err(CapacityError::NoOperators)
        );
    }

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
