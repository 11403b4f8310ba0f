//! Injected time: its adapters are [`crate::SystemClock`] and
//! [`crate::ManualClock`].

use std::sync::Arc;

use chrono::{DateTime, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }
}
