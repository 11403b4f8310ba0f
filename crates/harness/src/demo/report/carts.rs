//! The demo's carts: the figures of the carts the simulated customers drove
//! ([`Carts`], with the [`CustomerModel`] of the price shock they were
//! driven by) and the carts minute by minute against the breaker
//! ([`CartsMinutesSeen`]), as `lifeboat carts --minutes` counts them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use lifeboat_command::carts::{self, MinuteRow, MinutesQuery, StateChange};
use lifeboat_sim::Transition;
use serde::Serialize;

use super::Inputs;
use crate::demo::customer::{self, CartSeen};
use crate::demo::{Phase, Script};

#[derive(Debug, Clone, Serialize)]
pub struct Carts {
    pub started: usize,
    pub reached_payment: usize,
    pub degraded: usize,
    pub price_changes_shown: u32,
    /// Carts first shown a changed price at payment (confirm).
    pub price_changes_first_at_payment: usize,
    /// Carts by the step at which a changed price was first shown
    /// (`accommodation`, `extras`, `price`, `confirm`).
    pub price_changes_first_at: std::collections::BTreeMap<&'static str, usize>,
    /// Carts whose customer left at a step before payment when shown a
    /// changed price (counted in `lost_to_price_change` too).
    pub lost_to_price_change_before_payment: usize,
    /// Carts whose customer left when shown a changed price (the customer
    /// model's shares are in `customer_model`).
    pub lost_to_price_change: usize,
    /// Carts whose payment showed a price for their choices for the first
    /// time, differing from the last price the customer saw (a choice step
    /// could not price them); counted apart from changes.
    pub prices_first_shown_at_payment: usize,
    /// Carts whose customer left when shown that price (the payment share of
    /// the customer model).
    pub lost_to_price_first_shown_at_payment: usize,
    pub customer_model: CustomerModel,
    pub started_during_outage: usize,
    /// Carts started during the outage that reached payment (at any time).
    pub outage_carts_reached_payment: usize,
    /// Carts started during the outage whose customer left when shown a
    /// changed price, or a price first shown at payment (the customer
    /// model's choice, not a stuck cart).
    pub outage_carts_left_on_price_change: usize,
    /// Carts that reached payment while the operator was down.
    pub reached_payment_during_outage: usize,
    pub confirmed_on_cached_price: usize,
}

/// The demo's customer model of the price shock.
#[derive(Debug, Clone, Serialize)]
pub struct CustomerModel {
    /// Share of customers who leave when first shown a changed price at payment.
    pub leave_on_change_at_payment: f64,
    /// Share who leave when shown one at an earlier step.
    pub leave_on_change_before_payment: f64,
}

impl Carts {
    /// The figures of the carts the customers drove through `script`'s day.
    pub(super) fn of(carts: &[CartSeen], script: &Script) -> Self {
        let in_outage = |c: &&CartSeen| c.phase == Phase::Outage;
        Carts {
            started: carts.len(),
            reached_payment: carts.iter().filter(|c| c.reached_payment.is_some()).count(),
            degraded: carts.iter().filter(|c| c.degraded).count(),
            price_changes_shown: carts.iter().map(|c| c.price_changes).sum(),
            price_changes_first_at_payment: carts
                .iter()
                .filter(|c| c.first_change_at == Some("confirm"))
                .count(),
            lost_to_price_change: carts.iter().filter(|c| c.left_on_price_change).count(),
            price_changes_first_at: carts.iter().filter_map(|c| c.first_change_at).fold(
                std::collections::BTreeMap::new(),
                |mut by_step, step| {
                    *by_step.entry(step).or_default() += 1;
                    by_step
                },
            ),
            lost_to_price_change_before_payment: carts
                .iter()
                .filter(|c| c.left_on_price_change && c.first_change_at != Some("confirm"))
                .count(),
            prices_first_shown_at_payment: carts
                .iter()
                .filter(|c| c.first_priced_at_payment)
                .count(),
            lost_to_price_first_shown_at_payment: carts
                .iter()
                .filter(|c| c.left_on_first_price_at_payment)
                .count(),
            customer_model: CustomerModel {
                leave_on_change_at_payment: customer::LEAVE_ON_CHANGE_AT_PAYMENT,
                leave_on_change_before_payment: customer::LEAVE_ON_CHANGE_BEFORE_PAYMENT,
            },
            started_during_outage: carts.iter().filter(in_outage).count(),
            outage_carts_reached_payment: carts
                .iter()
                .filter(in_outage)
                .filter(|c| c.reached_payment.is_some())
                .count(),
            outage_carts_left_on_price_change: carts
                .iter()
                .filter(in_outage)
                .filter(|c| c.left_on_price_change || c.left_on_first_price_at_payment)
                .count(),
            reached_payment_during_outage: carts
                .iter()
                .filter_map(|c| c.reached_payment)
                .filter(|paid| Phase::at(script, *paid) == Phase::Outage)
                .count(),
            confirmed_on_cached_price: carts.iter().filter(|c| c.on_cached_price).count(),
        }
    }
}

/// The demo's carts minute by minute, and when they were judged.
#[derive(Debug, Clone, Default)]
pub struct CartsMinutesSeen {
    pub rows: Vec<MinuteRow>,
    /// Stopped carts are judged as of this time: the end of the day plus
    /// [`carts::STOPPED_AFTER`], since every customer has left by then and
    /// no cart takes another step.
    pub judged_at: Option<DateTime<Utc>>,
    /// Why there are no rows, if the range was refused.
    pub error: Option<String>,
}

impl CartsMinutesSeen {
    pub(super) fn of(i: &Inputs<'_>) -> Self {
        let changes: Vec<StateChange> = i.transitions.iter().map(state_change).collect();
        let judged_at = i.ended + carts::STOPPED_AFTER;
        let query = MinutesQuery {
            since: i.start,
            until: i.ended,
            judged_at,
            operator: None,
        };
        match carts::minutes(i.carts, &changes, &BTreeMap::new(), &query) {
            Ok(rows) => Self {
                rows,
                judged_at: Some(judged_at),
                error: None,
            },
            Err(e) => Self {
                error: Some(e.to_string()),
                ..Self::default()
            },
        }
    }

    /// The table, for people.
    pub fn render(&self) -> String {
        match (&self.error, self.judged_at) {
            (Some(e), _) => format!("carts minute by minute: {e}\n"),
            (None, Some(judged_at)) => carts::render(&self.rows, judged_at),
            (None, None) => "carts minute by minute: nothing was counted\n".to_owned(),
        }
    }
}

/// A breaker transition the simulation recorded, as the carts' rows read
/// one from the Breaker table.
fn state_change(t: &Transition) -> StateChange {
    StateChange {
        operator: t.operator.clone(),
        at: t.at,
        from: Some(t.from),
        to: t.to,
    }
}
