//! Injected time: the adapters of the [`Clock`] port. Handlers never read
//! the system clock directly.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use crate::ports::Clock;

/// Wall-clock time, for the deployed functions.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Time that only moves when told to: for tests and the demo's virtual day.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.lock() = to;
    }

    pub fn advance(&self, by: std::time::Duration) {
        let by = Duration::from_std(by).unwrap_or(Duration::MAX);
        let mut now = self.lock();
        *now += by;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned clock still holds a valid time; keep going with it.
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(std::time::Duration::from_millis(1500));
        assert_eq!((clock.now() - start).num_milliseconds(), 1500);
    }
}
