//! Retry schedules with growing gaps, for writes that must eventually land
//! (the off-sale listener's sale switch writes).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Gaps of `first`, doubling each attempt, never more than `max_gap`, for at
/// most `max_attempts` attempts in all. The default is 5, 10, 20, 40, 60, 60, …
/// seconds over 8 attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetrySchedule {
    #[serde(with = "crate::budget::millis")]
    pub first: Duration,
    #[serde(with = "crate::budget::millis")]
    pub max_gap: Duration,
    pub max_attempts: u32,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(5),
            max_gap: Duration::from_secs(60),
            max_attempts: 8,
        }
    }
}

impl RetrySchedule {
    /// The wait after failed attempt number `attempt` (1-based) before the next
    /// one, or `None` when no attempt is left.
    pub fn gap_after(&self, attempt: u32) -> Option<Duration> {
        if attempt == 0 || attempt >= self.max_attempts {
            return None;
        }
        let factor = 1u32.checked_shl(attempt - 1).unwrap_or(u32::MAX);
        Some(
            self.first
                .checked_mul(factor)
                .unwrap_or(self.max_gap)
                .min(self.max_gap),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_grow_from_five_seconds_to_a_minute() {
        let s = RetrySchedule::default();
        let gaps: Vec<u64> = (1..=8)
            .filter_map(|a| s.gap_after(a))
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(gaps, vec![5, 10, 20, 40, 60, 60, 60]);
        assert_eq!(s.gap_after(8), None);
        assert_eq!(s.gap_after(0), None);
    }
}
