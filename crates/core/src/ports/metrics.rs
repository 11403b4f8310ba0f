//! Where metric lines go: [`crate::metrics`] makes them.

use chrono::{DateTime, Utc};

use crate::metrics::MetricSet;

/// Where metric lines go.
pub trait MetricsSink: Send + Sync {
    fn emit(&self, sets: &[MetricSet], at: DateTime<Utc>);
}
