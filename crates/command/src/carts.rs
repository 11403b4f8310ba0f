//! Carts minute by minute against the breaker: for every minute of a range
//! and every operator, the breaker's state in that minute and what the
//! carts did.
//!
//! The same rows come from the Carts table and the Breaker table's `change#`
//! items (`lifeboat carts --minutes`) and from the demo's in-memory stores
//! (`lifeboat demo --carts-minutes`). The counting is here, pure:
//!
//! * `breaker`: the state at the minute's start, then every state it moved
//!   to inside the minute (`closed`, `closed→open`, `open→half_open→closed`);
//! * `carts_started`: carts created in the minute;
//! * `steps`: steps customers took on carts in the minute (opening one
//!   included; refused and failed steps too), from each cart's step history;
//! * `reached_payment`: carts confirmed in the minute;
//! * `stopped`: carts never confirmed whose last step was in the minute and
//!   that had no further step for [`STOPPED_AFTER`], judged at the end of
//!   the data (a cart idle for less than that by then is not counted);
//! * `price_changes_shown`: steps in the minute whose answer showed a
//!   changed price.
//!
//! Carts stored before steps were recorded have no history: they count as
//! started, paid and stopped from their own times (`updated_at` as the last
//! step), their latest shown price change counts, and their steps do not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use lifeboat_core::cart::Cart;
use lifeboat_core::{BreakerState, OperatorId};
use serde::Serialize;

/// A cart with no step for this long has stopped.
pub const STOPPED_AFTER: TimeDelta = TimeDelta::minutes(30);

/// The longest range the rows cover.
pub const MAX_RANGE: TimeDelta = TimeDelta::days(31);

/// Quiet minutes in a row (no cart activity, no breaker change) the text
/// table folds into one line from this many on.
const FOLD_FROM: usize = 3;

/// One breaker transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    pub operator: OperatorId,
    pub at: DateTime<Utc>,
    /// The state it left, when recorded.
    pub from: Option<BreakerState>,
    pub to: BreakerState,
}

/// Which minutes, which operators, and when the data ends.
#[derive(Debug, Clone)]
pub struct MinutesQuery {
    /// The first row is the minute holding this time.
    pub since: DateTime<Utc>,
    /// The last row is the minute holding the time just before this one.
    pub until: DateTime<Utc>,
    /// The end of the data: no step after it is known. A cart idle since
    /// at least [`STOPPED_AFTER`] before it has stopped.
    pub judged_at: DateTime<Utc>,
    /// Only this operator.
    pub operator: Option<OperatorId>,
}

impl MinutesQuery {
    /// A range that is not empty and at most [`MAX_RANGE`] long.
    pub fn check_range(&self) -> Result<(), MinutesError> {
        let (since, until) = (self.since, self.until);
        if since >= until {
            return Err(MinutesError::EmptyRange { since, until });
        }
        if until - since > MAX_RANGE {
            return Err(MinutesError::TooLong { since, until });
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MinutesError {
    #[error(
        "the range is empty: --since {} is not before --until {}",
        rfc3339(.since),
        rfc3339(.until)
    )]
    EmptyRange {
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    #[error(
        "the range from {} to {} is longer than 31 days: narrow it",
        rfc3339(.since),
        rfc3339(.until)
    )]
    TooLong {
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    #[error("unknown operator {0}: no cart and no breaker of it is stored")]
    UnknownOperator(OperatorId),
}

/// One minute of one operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteRow {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    pub operator: OperatorId,
    pub breaker: String,
    pub carts_started: u32,
    pub steps: u32,
    pub reached_payment: u32,
    pub stopped: u32,
    pub price_changes_shown: u32,
}

impl MinuteRow {
    /// Nothing happened to the carts and the breaker did not move.
    pub fn is_quiet(&self) -> bool {
        self.carts_started == 0
            && self.steps == 0
            && self.reached_payment == 0
            && self.stopped == 0
            && self.price_changes_shown == 0
            && !self.breaker.contains('→')
    }
}

/// `lifeboat carts --minutes --json`.
#[derive(Debug, Clone, Serialize)]
pub struct CartsMinutes {
    pub minutes: Vec<MinuteRow>,
}

fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn floor_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::minutes(1)).unwrap_or(t)
}

/// The rows, by minute then operator. `current` holds each operator's
/// breaker state now, for operators whose breaker has no recorded change
/// (it has been in that state all along).
pub fn minutes(
    carts: &[Cart],
    changes: &[StateChange],
    current: &BTreeMap<OperatorId, BreakerState>,
    query: &MinutesQuery,
) -> Result<Vec<MinuteRow>, MinutesError> {
    query.check_range()?;
    let (since, until) = (query.since, query.until);
    let first = floor_minute(since);
    // Every minute that starts before `until`, a part of one included (in
    // milliseconds: a step in the last second of the range has its row).
    let count = usize::try_from((until - first).num_milliseconds().saturating_sub(1) / 60_000 + 1)
        .unwrap_or(0);
    let index = |t: DateTime<Utc>| -> Option<usize> {
        if t < first || t >= until {
            return None;
        }
        usize::try_from((t - first).num_seconds() / 60).ok()
    };

    let mut operators: BTreeSet<OperatorId> = carts.iter().map(|c| c.operator.clone()).collect();
    operators.extend(changes.iter().map(|c| c.operator.clone()));
    operators.extend(current.keys().cloned());
    if let Some(only) = &query.operator {
        if !operators.contains(only) {
            return Err(MinutesError::UnknownOperator(only.clone()));
        }
        operators.retain(|o| o == only);
    }

    let mut tallies: BTreeMap<&OperatorId, Vec<Tally>> = operators
        .iter()
        .map(|o| (o, vec![Tally::default(); count]))
        .collect();
    for cart in carts {
        let Some(tally) = tallies.get_mut(&cart.operator) else {
            continue;
        };
        let mut add = |t: DateTime<Utc>, f: fn(&mut Tally)| {
            if let Some(slot) = index(t).and_then(|i| tally.get_mut(i)) {
                f(slot);
            }
        };
        add(cart.created_at, |t| t.started += 1);
        for step in &cart.steps {
            add(step.at, |t| t.steps += 1);
            if step.price_change_shown {
                add(step.at, |t| t.price_changes += 1);
            }
        }
        if cart.steps.is_empty()
            && let Some(change) = &cart.price_change
        {
            add(change.at, |t| t.price_changes += 1);
        }
        if let Some(confirmation) = &cart.confirmation {
            add(confirmation.at, |t| t.paid += 1);
        } else {
            let last = cart
                .steps
                .iter()
                .map(|s| s.at)
                .max()
                .unwrap_or(cart.updated_at)
                .max(cart.created_at);
            if last + STOPPED_AFTER <= query.judged_at {
                add(last, |t| t.stopped += 1);
            }
        }
    }

    let mut by_operator: BTreeMap<&OperatorId, Vec<&StateChange>> = BTreeMap::new();
    for change in changes {
        by_operator
            .entry(&change.operator)
            .or_default()
            .push(change);
    }
    for list in by_operator.values_mut() {
        list.sort_by_key(|c| c.at);
    }

    let mut rows = Vec::with_capacity(count * operators.len());
    for (operator, tally) in &tallies {
        let list = by_operator.get(operator).map_or(&[][..], Vec::as_slice);
        let mut state = list.first().map_or_else(
            || {
                current
                    .get(*operator)
                    .copied()
                    .unwrap_or(BreakerState::Closed)
            },
            |c| c.from.unwrap_or(BreakerState::Closed),
        );
        let mut next = 0;
        // Changes before the range set the state at its start.
        while next < list.len() && list[next].at < first {
            state = list[next].to;
            next += 1;
        }
        for (i, t) in tally.iter().enumerate() {
            let minute = first + TimeDelta::minutes(i64::try_from(i).unwrap_or(i64::MAX));
            let end = minute + TimeDelta::minutes(1);
            let mut breaker = state.as_str().to_owned();
            while next < list.len() && list[next].at < end {
                let to = list[next].to;
                if to != state {
                    breaker.push('→');
                    breaker.push_str(to.as_str());
                    state = to;
                }
                next += 1;
            }
            rows.push(MinuteRow {
                minute,
                operator: (*operator).clone(),
                breaker,
                carts_started: t.started,
                steps: t.steps,
                reached_payment: t.paid,
                stopped: t.stopped,
                price_changes_shown: t.price_changes,
            });
        }
    }
    rows.sort_by(|a, b| (a.minute, &a.operator).cmp(&(b.minute, &b.operator)));
    Ok(rows)
}

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    started: u32,
    steps: u32,
    paid: u32,
    stopped: u32,
    price_changes: u32,
}

/// The rows for a terminal: a block per operator, runs of quiet minutes
/// folded into one line.
pub fn render(rows: &[MinuteRow], judged_at: DateTime<Utc>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "carts minute by minute against the breaker (stopped: no step for {} min, judged at {})",
        STOPPED_AFTER.num_minutes(),
        judged_at.format("%Y-%m-%d %H:%M:%S UTC")
    );
    let one_day = rows
        .first()
        .zip(rows.last())
        .is_some_and(|(a, b)| a.minute.date_naive() == b.minute.date_naive());
    let when = |t: DateTime<Utc>| {
        if one_day {
            t.format("%H:%M").to_string()
        } else {
            t.format("%Y-%m-%d %H:%M").to_string()
        }
    };
    let operators: BTreeSet<&OperatorId> = rows.iter().map(|r| &r.operator).collect();
    if operators.is_empty() {
        let _ = writeln!(out, "\n  no operators: no cart and no breaker is stored");
    }
    for operator in operators {
        let mine: Vec<&MinuteRow> = rows.iter().filter(|r| &r.operator == operator).collect();
        let _ = writeln!(out, "\n{operator}");
        let _ = writeln!(
            out,
            "  {:<16} {:<28} {:>7} {:>6} {:>7} {:>7} {:>13}",
            "minute", "breaker", "started", "steps", "payment", "stopped", "price changes"
        );
        let mut i = 0;
        while i < mine.len() {
            let row = mine[i];
            let run = mine[i..]
                .iter()
                .take_while(|r| r.is_quiet() && r.breaker == row.breaker)
                .count();
            if run >= FOLD_FROM {
                let last = mine[i + run - 1];
                let _ = writeln!(
                    out,
                    "  {:<16} {:<28} ({run} quiet minutes, to {})",
                    when(row.minute),
                    row.breaker,
                    when(last.minute)
                );
                i += run;
                continue;
            }
            let _ = writeln!(
                out,
                "  {:<16} {:<28} {:>7} {:>6} {:>7} {:>7} {:>13}",
                when(row.minute),
                row.breaker,
                row.carts_started,
                row.steps,
                row.reached_payment,
                row.stopped,
                row.price_changes_shown
            );
            i += 1;
        }
        let total = |f: fn(&MinuteRow) -> u32| mine.iter().map(|r| f(r)).sum::<u32>();
        let _ = writeln!(
            out,
            "  {:<16} {:<28} {:>7} {:>6} {:>7} {:>7} {:>13}",
            "total",
            "",
            total(|r| r.carts_started),
            total(|r| r.steps),
            total(|r| r.reached_payment),
            total(|r| r.stopped),
            total(|r| r.price_changes_shown)
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
