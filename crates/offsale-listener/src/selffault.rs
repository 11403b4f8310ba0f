//! When everyone fails at once, suspect ourselves.
//!
//! A fault in lifeboat's own egress (DNS, a NAT gateway, TLS roots, an expired
//! credential) looks exactly like every operator failing together: every
//! breaker opens. Taking the whole marketplace off sale for it would turn our
//! incident into every operator's. So, like Envoy's panic threshold, an
//! off-sale change is held back while at least `SELF_FAULT_SHARE` of the
//! served operators (and at least [`MIN_OPERATORS`] of them) are open: the
//! listener keeps the operator on sale, publishes `Self Fault Suspected` and
//! counts `SelfFaultSuspected` (`SelfFaultAlarm`). Searches still answer from
//! the cache while the breakers are open; only the sale status waits. When
//! the share drops, the sale sweep (every 5 minutes) writes what is still
//! owed, and a real outage of one operator among many is never held.

use lifeboat_core::BreakerState;
use lifeboat_core::events::{LifeboatEvent, SCHEMA_VERSION, SaleStatus, SelfFaultSuspected};
use lifeboat_core::sale::SaleChange;

use crate::OffsaleListener;

/// Below this many served operators the rule is off: two of three down
/// together happens.
pub const MIN_OPERATORS: usize = 3;

/// The default `SELF_FAULT_SHARE`.
pub const DEFAULT_SHARE: f64 = 0.5;

/// When open operators count as "most".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelfFaultRule {
    /// The share of served operators open at once from which lifeboat
    /// suspects itself; above 1 turns the rule off.
    pub share: f64,
}

impl Default for SelfFaultRule {
    fn default() -> Self {
        Self {
            share: DEFAULT_SHARE,
        }
    }
}

impl SelfFaultRule {
    /// Whether `open` of `of` served operators is "most".
    pub fn suspects(&self, open: usize, of: usize) -> bool {
        of >= MIN_OPERATORS && open as f64 >= self.share * of as f64
    }
}

impl OffsaleListener {
    /// `Some((open, of))` when `change` takes an operator off sale while most
    /// served operators are open: the change is held, and the event published.
    pub(crate) async fn suspect_self(&self, change: &SaleChange) -> Option<(usize, usize)> {
        if change.status != SaleStatus::OffSale {
            return None;
        }
        let (Some(operators), Some(breakers)) = (&self.trust.operators, &self.trust.breakers)
        else {
            return None;
        };
        let of = operators.len();
        if of < MIN_OPERATORS {
            return None;
        }
        let served: Vec<_> = operators.iter().cloned().collect();
        let stored = match breakers.load_many(&served).await {
            Ok(stored) => stored,
            Err(e) => {
                // Unknown: the operator's own outage is the likelier case.
                tracing::warn!(error = %e, "breakers not read; off-sale write not held");
                return None;
            }
        };
        let open = stored
            .iter()
            .filter(|b| matches!(b.state, BreakerState::Open | BreakerState::HalfOpen))
            .count();
        if !self.self_fault.suspects(open, of) {
            return None;
        }
        tracing::error!(operator = %change.operator, version = change.version, open, of, "most operators are open at once: suspecting lifeboat's own fault, the operator stays on sale");
        let event = LifeboatEvent::SelfFaultSuspected(SelfFaultSuspected {
            schema_version: SCHEMA_VERSION,
            operator: change.operator.clone(),
            version: change.version,
            open,
            of,
            at: self.clock.now(),
        });
        if let Err(e) = self.events.publish(&[event]).await {
            tracing::warn!(error = %e, "Self Fault Suspected not published");
        }
        Some((open, of))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_is_a_share_of_at_least_three() {
        let rule = SelfFaultRule::default();
        assert!(rule.suspects(5, 10));
        assert!(!rule.suspects(4, 10));
        assert!(rule.suspects(2, 3) && !rule.suspects(1, 3));
        assert!(!rule.suspects(2, 2), "too few operators to tell");
        assert!(!SelfFaultRule { share: 1.1 }.suspects(10, 10));
    }
}
