//! A clock that follows tokio's time, so paused and auto-advanced time in tests
//! and the demo moves the handlers' clock too.

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::ports::Clock;
use tokio::time::Instant;

/// `base` plus the tokio time elapsed since the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: DateTime<Utc>,
    start: Instant,
}

impl TokioClock {
    pub fn starting_at(base: DateTime<Utc>) -> Self {
        Self {
            base,
            start: Instant::now(),
        }
    }

    /// Seconds since the clock started.
    pub fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        self.base + TimeDelta::from_std(self.start.elapsed()).unwrap_or(TimeDelta::MAX)
    }
}
