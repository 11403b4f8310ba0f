//! Held orders: where they stand and how they moved, per operator and
//! minute (`lifeboat orders`, read from the Orders table).
//!
//! Two views of the same orders, counted here, pure:
//!
//! * **now**, per operator: the orders held in the range and every order
//!   still open whenever it was held, by the state each is in (held,
//!   booking, booked, needs the customer, refunded, parked), and how long
//!   the oldest open one has waited;
//! * **minutes**, per operator and minute of the range: the orders held
//!   in it (`held`, from each order's `held_at`) and the moves its orders'
//!   histories record in it: booking calls started (`booking`), `booked`,
//!   customers asked (`needs_customer`), `refunded`, `parked`, and orders
//!   held again (`held_again`: a call unanswered, a price accepted).
//!
//! An order's history keeps its newest [`MAX_ORDER_HISTORY`] moves, so an
//! order with more moves than that counts only those in the minutes; its
//! hold is counted from `held_at` all the same.
//!
//! [`MAX_ORDER_HISTORY`]: lifeboat_core::order::MAX_ORDER_HISTORY

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::order::{HeldOrder, StateName};
use serde::Serialize;

use crate::carts::{MinutesError, MinutesQuery};

/// Quiet minutes in a row the text table folds into one line from this
/// many on.
const FOLD_FROM: usize = 3;

/// Where one operator's orders stand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorNow {
    pub operator: OperatorId,
    pub held: u32,
    pub booking: u32,
    pub booked: u32,
    pub needs_customer: u32,
    pub refunded: u32,
    pub parked: u32,
    /// When the oldest order still open (held, booking or waiting on its
    /// customer) was held; `None`: every order is done.
    pub oldest_open_held_at: Option<DateTime<Utc>>,
}

impl OperatorNow {
    /// No order of `operator`'s yet.
    pub fn empty(operator: OperatorId) -> Self {
        Self {
            operator,
            held: 0,
            booking: 0,
            booked: 0,
            needs_customer: 0,
            refunded: 0,
            parked: 0,
            oldest_open_held_at: None,
        }
    }

    fn count(&mut self, state: StateName) {
        match state {
            StateName::Held => self.held += 1,
            StateName::Booking => self.booking += 1,
            StateName::Booked => self.booked += 1,
            StateName::AskCustomer => self.needs_customer += 1,
            StateName::Refunded => self.refunded += 1,
            StateName::Parked => self.parked += 1,
        }
    }

    /// Orders not yet booked, refunded or parked.
    pub fn open(&self) -> u32 {
        self.held + self.booking + self.needs_customer
    }
}

/// One minute of one operator's orders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderMinute {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    pub operator: OperatorId,
    /// Orders held (carts confirmed while the operator could not book).
    pub held: u32,
    /// Booking calls started.
    pub booking: u32,
    pub booked: u32,
    /// Prices past the tolerance: the customer asked.
    pub needs_customer: u32,
    pub refunded: u32,
    pub parked: u32,
    /// Orders held again: a booking call unanswered, or a new price the
    /// customer accepted.
    pub held_again: u32,
}

impl OrderMinute {
    fn is_quiet(&self) -> bool {
        self.held == 0
            && self.booking == 0
            && self.booked == 0
            && self.needs_customer == 0
            && self.refunded == 0
            && self.parked == 0
            && self.held_again == 0
    }
}

/// `lifeboat orders --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrdersReport {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Per operator with an order in the range or still open.
    pub now: Vec<OperatorNow>,
    /// By minute, then operator.
    pub minutes: Vec<OrderMinute>,
}

fn floor_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::minutes(1)).unwrap_or(t)
}

/// The report on `orders` for `query` (its `judged_at` unused: an order's
/// state is as stored).
pub fn report(orders: &[HeldOrder], query: &MinutesQuery) -> Result<OrdersReport, MinutesError> {
    query.check_range()?;
    let (since, until) = (query.since, query.until);
    let first = floor_minute(since);
    let count = usize::try_from((until - first).num_milliseconds().saturating_sub(1) / 60_000 + 1)
        .unwrap_or(0);
    let index = |t: DateTime<Utc>| -> Option<usize> {
        if t < first || t >= until {
            return None;
        }
        usize::try_from((t - first).num_seconds() / 60).ok()
    };
    let wanted = |o: &HeldOrder| {
        query
            .operator
            .as_ref()
            .is_none_or(|only| &o.operator == only)
    };

    let mut now: BTreeMap<&OperatorId, OperatorNow> = BTreeMap::new();
    let mut minutes: BTreeMap<&OperatorId, Vec<OrderMinute>> = BTreeMap::new();
    for order in orders.iter().filter(|o| wanted(o)) {
        let open = !order.state.is_final();
        let in_range = order.held_at >= since && order.held_at < until;
        let moved_in_range = order.history.iter().any(|e| index(e.at).is_some());
        if open || in_range {
            let stand = now
                .entry(&order.operator)
                .or_insert_with(|| OperatorNow::empty(order.operator.clone()));
            stand.count(order.state.name());
            if open {
                stand.oldest_open_held_at = Some(
                    stand
                        .oldest_open_held_at
                        .map_or(order.held_at, |t| t.min(order.held_at)),
                );
            }
        }
        if !(in_range || moved_in_range) {
            continue;
        }
        let rows = minutes.entry(&order.operator).or_insert_with(|| {
            (0..count)
                .map(|i| OrderMinute {
                    minute: first + TimeDelta::minutes(i64::try_from(i).unwrap_or(i64::MAX)),
                    operator: order.operator.clone(),
                    held: 0,
                    booking: 0,
                    booked: 0,
                    needs_customer: 0,
                    refunded: 0,
                    parked: 0,
                    held_again: 0,
                })
                .collect()
        });
        if let Some(row) = index(order.held_at).and_then(|i| rows.get_mut(i)) {
            row.held += 1;
        }
        for event in &order.history {
            let Some(row) = index(event.at).and_then(|i| rows.get_mut(i)) else {
                continue;
            };
            match event.to {
                // The hold itself is counted from held_at above.
                StateName::Held if event.at == order.held_at => {}
                StateName::Held => row.held_again += 1,
                StateName::Booking => row.booking += 1,
                StateName::Booked => row.booked += 1,
                StateName::AskCustomer => row.needs_customer += 1,
                StateName::Refunded => row.refunded += 1,
                StateName::Parked => row.parked += 1,
            }
        }
    }
    let mut rows: Vec<OrderMinute> = minutes.into_values().flatten().collect();
    rows.sort_by(|a, b| (a.minute, &a.operator).cmp(&(b.minute, &b.operator)));
    Ok(OrdersReport {
        since,
        until,
        now: now.into_values().collect(),
        minutes: rows,
    })
}

/// The report for a terminal: where each operator's orders stand, then a
/// block of minutes per operator, runs of quiet minutes folded into one
/// line.
pub fn render(report: &OrdersReport, judged_at: DateTime<Utc>) -> String {
    let mut out = String::new();
    let stamp = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    let _ = writeln!(
        out,
        "held orders from {} to {}, and every order still open (at {})",
        stamp(report.since),
        stamp(report.until),
        judged_at.format("%Y-%m-%d %H:%M:%S UTC")
    );
    if report.now.is_empty() {
        let _ = writeln!(out, "\n  no orders: none held in the range, none open");
        return out;
    }
    let _ = writeln!(
        out,
        "\n  {:<16} {:>6} {:>8} {:>7} {:>15} {:>9} {:>7}  oldest open",
        "operator", "held", "booking", "booked", "needs customer", "refunded", "parked"
    );
    for n in &report.now {
        let oldest = n.oldest_open_held_at.map_or_else(
            || "-".to_owned(),
            |t| {
                let waited = (judged_at - t).num_minutes().max(0);
                format!("held {waited} min ago")
            },
        );
        let _ = writeln!(
            out,
            "  {:<16} {:>6} {:>8} {:>7} {:>15} {:>9} {:>7}  {oldest}",
            n.operator.as_str(),
            n.held,
            n.booking,
            n.booked,
            n.needs_customer,
            n.refunded,
            n.parked
        );
    }
    let one_day = report.since.date_naive() == report.until.date_naive();
    let when = |t: DateTime<Utc>| {
        if one_day {
            t.format("%H:%M").to_string()
        } else {
            t.format("%Y-%m-%d %H:%M").to_string()
        }
    };
    let operators: BTreeSet<&OperatorId> = report.minutes.iter().map(|r| &r.operator).collect();
    for operator in operators {
        let mine: Vec<&OrderMinute> = report
            .minutes
            .iter()
            .filter(|r| &r.operator == operator)
            .collect();
        let _ = writeln!(out, "\n{operator}");
        let header = [
            "held",
            "booking",
            "booked",
            "needs customer",
            "refunded",
            "parked",
            "held again",
        ];
        let _ = writeln!(
            out,
            "  {:<16} {:>6} {:>8} {:>7} {:>15} {:>9} {:>7} {:>11}",
            "minute", header[0], header[1], header[2], header[3], header[4], header[5], header[6]
        );
        let line = |out: &mut String, label: &str, r: [u32; 7]| {
            let _ = writeln!(
                out,
                "  {label:<16} {:>6} {:>8} {:>7} {:>15} {:>9} {:>7} {:>11}",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6]
            );
        };
        let cells = |r: &OrderMinute| {
            [
                r.held,
                r.booking,
                r.booked,
                r.needs_customer,
                r.refunded,
                r.parked,
                r.held_again,
            ]
        };
        let mut i = 0;
        while i < mine.len() {
            let run = mine[i..].iter().take_while(|r| r.is_quiet()).count();
            if run >= FOLD_FROM {
                let _ = writeln!(
                    out,
                    "  {:<16} ({run} quiet minutes, to {})",
                    when(mine[i].minute),
                    when(mine[i + run - 1].minute)
                );
                i += run;
                continue;
            }
            line(&mut out, &when(mine[i].minute), cells(mine[i]));
            i += 1;
        }
        let mut total = [0u32; 7];
        for r in &mine {
            for (t, c) in total.iter_mut().zip(cells(r)) {
                *t += c;
            }
        }
        line(&mut out, "total", total);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
