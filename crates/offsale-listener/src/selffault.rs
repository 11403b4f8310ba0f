//! When everyone fails at once, suspect ourselves.
//!
//! A fault in lifeboat's own egress (DNS, a NAT gateway, TLS roots, an expired
//! credential) looks exactly like every operator failing together: every
//! breaker opens within seconds of the others. Taking the whole marketplace
//! off sale for it would turn our incident into every operator's. So, like
//! Envoy's panic threshold, an off-sale change is held back while its
//! operator's breaker opened together with most of the others: at least
//! `SELF_FAULT_SHARE` of the served operators, and at least
//! [`MIN_OPEN_TOGETHER`] of them, not closed and last opened within
//! [`TOGETHER`] of it. The listener then keeps the operator on sale,
//! publishes `Self Fault Suspected` and counts `SelfFaultSuspected`
//! (`SelfFaultAlarm`). Searches still answer from the cache while the
//! breakers are open; only the sale status waits.
//!
//! The suspicion is bounded: an operator whose own breaker has failed
//! [`MAX_FAILED_ROUNDS`] half-open rounds since it opened (about three and a
//! half minutes at the default open periods) goes off sale whatever the
//! others do, since by then an egress fault of ours is an outage for the
//! marketplace's customers too; and openings that merely overlap (two
//! outages hours apart that are both still going on) are not "together".
//! When the suspicion ends, the sale sweep (every 5 minutes) writes what is
//! still owed.

use std::time::Duration;

use lifeboat_core::events::{LifeboatEvent, SCHEMA_VERSION, SaleStatus, SelfFaultSuspected};
use lifeboat_core::sale::SaleChange;
use lifeboat_core::{BreakerRecord, BreakerState};

use crate::OffsaleListener;

/// Fewer operators than this opening together is never suspected: two
/// genuine outages at once happen, whatever the size of the marketplace.
pub const MIN_OPEN_TOGETHER: usize = 3;

/// Openings this close to the held operator's count as together: an egress
/// fault trips every breaker within one detection time of the others. Its
/// breakers' later moves (half-open, open again) drift apart with the
/// jittered open periods, so after `n` failed rounds the window is
/// `2^n` times this.
pub const TOGETHER: Duration = Duration::from_secs(30);

/// After this many failed half-open rounds of its own breaker, an operator
/// is taken off sale whatever the others do.
pub const MAX_FAILED_ROUNDS: u32 = 3;

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
    /// Whether `together` operators opening together, of `of` served, is
    /// "most".
    pub fn suspects(&self, together: usize, of: usize) -> bool {
        together >= MIN_OPEN_TOGETHER && together as f64 >= self.share * of as f64
    }

    /// How many of `stored` opened together with `own` (itself included),
    /// or `None` when `own` is past the bound of the suspicion.
    pub fn together(&self, own: &BreakerRecord, stored: &[BreakerRecord]) -> Option<usize> {
        if own.failed_trials >= MAX_FAILED_ROUNDS || !is_open(own) {
            return None;
        }
        // Breakers that opened together move together: each failed round
        // reopens them for a period twice the last, so their latest moves
        // drift apart by the periods' jitter. The window grows with the
        // round: 30 s, 60 s, 120 s.
        let window = |b: &BreakerRecord| {
            let rounds = b
                .failed_trials
                .max(own.failed_trials)
                .min(MAX_FAILED_ROUNDS);
            chrono::TimeDelta::from_std(TOGETHER.saturating_mul(1 << rounds)).unwrap_or_default()
        };
        Some(
            stored
                .iter()
                .filter(|b| is_open(b) && (b.since - own.since).abs() <= window(b))
                .count(),
        )
    }
}

fn is_open(b: &BreakerRecord) -> bool {
    matches!(b.state, BreakerState::Open | BreakerState::HalfOpen)
}

impl OffsaleListener {
    /// `Some((together, of))` when `change` takes an operator off sale whose
    /// breaker opened together with most served operators: the change is
    /// held, and the event published.
    pub(crate) async fn suspect_self(&self, change: &SaleChange) -> Option<(usize, usize)> {
        if change.status != SaleStatus::OffSale {
            return None;
        }
        let (Some(operators), Some(breakers)) = (&self.trust.operators, &self.trust.breakers)
        else {
            return None;
        };
        let of = operators.len();
        if of < MIN_OPEN_TOGETHER {
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
        let own = stored.iter().find(|b| b.operator == change.operator)?;
        let together = self.self_fault.together(own, &stored)?;
        if !self.self_fault.suspects(together, of) {
            return None;
        }
        tracing::error!(operator = %change.operator, version = change.version, together, of, "most operators opened together: suspecting lifeboat's own fault, the operator stays on sale");
        let event = LifeboatEvent::SelfFaultSuspected(SelfFaultSuspected {
            schema_version: SCHEMA_VERSION,
            operator: change.operator.clone(),
            version: change.version,
            open: together,
            of,
            at: self.clock.now(),
        });
        if let Err(e) = self.events.publish(&[event]).await {
            tracing::warn!(error = %e, "Self Fault Suspected not published");
        }
        Some((together, of))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use chrono::{DateTime, TimeDelta};
    use lifeboat_core::OperatorId;

    #[test]
    fn most_is_a_share_and_never_fewer_than_three() {
        let rule = SelfFaultRule::default();
        assert!(rule.suspects(5, 10));
        assert!(!rule.suspects(4, 10));
        assert!(
            rule.suspects(3, 3) && !rule.suspects(2, 3),
            "two of three happens"
        );
        assert!(!rule.suspects(2, 4), "two genuine outages of four");
        assert!(rule.suspects(3, 4));
        assert!(!SelfFaultRule { share: 1.1 }.suspects(10, 10));
    }

    fn open(name: &str, at_s: i64, failed_trials: u32) -> BreakerRecord {
        let mut b = BreakerRecord::initial(
            OperatorId::new(name).unwrap_or_else(|e| panic!("{e}")),
            DateTime::UNIX_EPOCH,
        );
        b.state = BreakerState::Open;
        b.version = 1;
        b.since = DateTime::UNIX_EPOCH + TimeDelta::seconds(at_s);
        b.failed_trials = failed_trials;
        b
    }

    #[test]
    fn together_means_within_thirty_seconds_and_for_three_rounds_at_most() {
        let rule = SelfFaultRule::default();
        let stored = [
            open("a", 1000, 0),
            open("b", 1020, 0),
            open("c", 1031, 0),
            open("d", 100, 0),
        ];
        assert_eq!(rule.together(&stored[0], &stored), Some(2));
        assert_eq!(rule.together(&stored[1], &stored), Some(3));
        assert_eq!(rule.together(&stored[3], &stored), Some(1));
        // A round later the window is a minute.
        let later = [open("a", 1000, 1), open("b", 1055, 1), open("c", 1065, 0)];
        assert_eq!(rule.together(&later[0], &later), Some(2));
        let worn = open("a", 1000, MAX_FAILED_ROUNDS);
        assert_eq!(rule.together(&worn, &stored), None);
        let mut closed = open("a", 1000, 0);
        closed.state = BreakerState::Closed;
        assert_eq!(rule.together(&closed, &stored), None);
    }
}
