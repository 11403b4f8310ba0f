//! One operator's work in an invocation: rounds of reading its open
//! orders, settling what came back, and starting the next booking calls.
//!
//! A round, top to bottom:
//!
//! 1. read the operator's open orders, oldest first;
//! 2. settle each: a booking call out with an outcome is answered
//!    ([`BookingAnswer::from_outcome`]); one unanswered past
//!    `booking_lost_after_s`, or a customer silent past the deadline, is
//!    moved by time ([`HeldOrder::expire`]);
//! 3. while the breaker is closed, start the oldest due held orders, as
//!    many as the operator's `in_flight` leaves room for: each saved as
//!    booking, then its request written;
//! 4. publish the round's moves, and say when to look again.
//!
//! Every save is conditional on the revision read, so a worker that read a
//! stale order (the index is eventually consistent) or raced another loses
//! the save and looks again next round; nothing is moved twice.

use chrono::{DateTime, Utc};
use lifeboat_core::budget::Budget;
use lifeboat_core::events::{LifeboatEvent, OrderMoved};
use lifeboat_core::metrics::{MetricSet, Unit, names};
use lifeboat_core::order::booking::to_start;
use lifeboat_core::order::{BookingAnswer, HeldOrder, OrderPolicy, OrderState, StateName};
use lifeboat_core::ports::{StoreError, StoredRequest};
use lifeboat_core::request::{CLOSED_BY_BOOKING_WORKER, FailureReason, Outcome};
use lifeboat_core::{BreakerState, OperatorId};
use std::time::Duration;

use crate::{BookingWorker, OperatorReport};

/// What a round says about the next.
struct Next {
    /// When to look again; `None`: nothing more to do in this invocation.
    after: Option<Duration>,
    /// A booking call is out (its answer is to be read).
    calls_out: bool,
}

impl BookingWorker {
    /// Work `operator`'s orders in rounds until nothing is left to do now
    /// or `deadline` comes.
    pub(crate) async fn work(
        &self,
        operator: &OperatorId,
        deadline: DateTime<Utc>,
    ) -> OperatorReport {
        let policy = self.order_settings.for_operator(operator).clone();
        let budget = self.settings.for_operator(operator).budgets.book;
        let mut report = OperatorReport {
            operator: operator.to_string(),
            ..OperatorReport::default()
        };
        let mut calls_out = true;
        let mut first = true;
        loop {
            let bookable = self.bookable(operator).await;
            // An operator that cannot book is only watched: its orders are
            // read once per run (for what time does to them) and while a
            // call of theirs is out, not every round of an outage.
            let after = if first || bookable || calls_out {
                let next = self
                    .round(operator, bookable, &policy, &budget, &mut report)
                    .await;
                calls_out = next.calls_out;
                next.after
            } else {
                Some(self.limits.idle)
            };
            first = false;
            let Some(after) = after else { break };
            let wake = self.clock.now() + chrono::Duration::from_std(after).unwrap_or_default();
            if wake >= deadline {
                break;
            }
            tokio::time::sleep(after).await;
        }
        report
    }

    /// Whether `operator`'s orders may be booked now: its breaker closed
    /// (or forced closed), or never opened. A half-open breaker's calls are
    /// its trials', and a breaker that cannot be read books nothing.
    async fn bookable(&self, operator: &OperatorId) -> bool {
        match self.breakers.load(operator).await {
            Ok(None) => true,
            Ok(Some(record)) => matches!(
                record.state,
                BreakerState::Closed | BreakerState::ForcedClosed
            ),
            Err(e) => {
                tracing::warn!(operator = %operator, error = %e, "breaker not read: no booking started");
                false
            }
        }
    }

    async fn round(
        &self,
        operator: &OperatorId,
        bookable: bool,
        policy: &OrderPolicy,
        budget: &Budget,
        report: &mut OperatorReport,
    ) -> Next {
        report.rounds += 1;
        let conflicts = report.conflicts;
        let done = Next {
            after: None,
            calls_out: false,
        };
        let open = match self.orders.open_orders(operator, self.limits.scan).await {
            Ok(open) => open,
            Err(e) => {
                fail(report, operator, "open orders not read", &e);
                return done;
            }
        };
        let now = self.clock.now();
        let mut moves = Vec::new();
        let mut orders = Vec::with_capacity(open.len());
        for order in open {
            if let Some(order) = self.settle(order, policy, now, report, &mut moves).await {
                orders.push(order);
            }
        }
        if bookable {
            let starting: Vec<String> = to_start(&orders, policy, now)
                .iter()
                .map(|o| o.order_id.clone())
                .collect();
            for id in starting {
                let Some(slot) = orders.iter().position(|o| o.order_id == id) else {
                    continue;
                };
                let order = orders.swap_remove(slot);
                if let Some(order) = self.start(order, budget, policy, report, &mut moves).await {
                    orders.push(order);
                }
            }
        }
        let booked_after_s = booked_after_s(&moves, &orders);
        self.publish(operator, &moves, &booked_after_s, report)
            .await;
        report.open = orders.iter().filter(|o| !o.state.is_final()).count();
        let now = self.clock.now();
        let calls_out = orders
            .iter()
            .any(|o| matches!(o.state, OrderState::Booking { .. }));
        let retry = orders
            .iter()
            .filter(|o| matches!(o.state, OrderState::Held { .. }))
            .filter_map(|o| o.retry_at)
            .min();
        let held = orders
            .iter()
            .any(|o| matches!(o.state, OrderState::Held { .. }));
        // An order whose save was lost is read again next round.
        let lost = report.conflicts > conflicts;
        let after = if calls_out || lost || (bookable && orders.iter().any(|o| o.is_due(now))) {
            Some(self.limits.poll)
        } else if !bookable && held {
            Some(self.limits.idle)
        } else {
            // Bookable, nothing out and nothing due: the earliest retry, if
            // any order waits for one; customers' deadlines are looked at
            // by the next invocation.
            retry.map(|at| {
                (at - now)
                    .to_std()
                    .unwrap_or_default()
                    .max(self.limits.poll)
            })
        };
        Next { after, calls_out }
    }

    /// What the booking call out, or time, does to `order` at `now`; the
    /// order as it stands after, `None` if it could not be saved.
    async fn settle(
        &self,
        mut order: HeldOrder,
        policy: &OrderPolicy,
        now: DateTime<Utc>,
        report: &mut OperatorReport,
        moves: &mut Vec<LifeboatEvent>,
    ) -> Option<HeldOrder> {
        let moved = match order.booking_request_id() {
            Some(request_id) => match self.requests.get(&order.operator, &request_id).await {
                Ok(Some(StoredRequest {
                    outcome: Some(outcome),
                    ..
                })) => order
                    .answer(BookingAnswer::from_outcome(&outcome), policy, now)
                    .is_ok(),
                // Not answered yet: lost once booking_lost_after_s has
                // passed, and its request closed, as a search closes the
                // question it gave up on.
                Ok(Some(_)) => {
                    let lost = order.expire(policy, now).is_some();
                    if lost {
                        self.close(&order.operator, &request_id, now).await;
                    }
                    lost
                }
                // Its request never written: lost all the same.
                Ok(None) => order.expire(policy, now).is_some(),
                Err(e) => {
                    tracing::warn!(operator = %order.operator, order = %order.order_id, error = %e, "booking outcome not read");
                    false
                }
            },
            None => order.expire(policy, now).is_some(),
        };
        if !moved {
            return Some(order);
        }
        self.save(order, report, moves).await
    }

    /// Close the booking call `request_id` taken as lost with an expired
    /// outcome, unless it has one (the write is conditional, and a
    /// consumer's answer that comes later still takes its place): every
    /// request ends with an outcome, even one the stream gave up on. A
    /// close that fails is counted in `DependencyErrors` and changes
    /// nothing else: the order is held again all the same, and its next
    /// call carries the same key.
    async fn close(&self, operator: &OperatorId, request_id: &str, now: DateTime<Utc>) {
        let outcome = Outcome::failed(
            FailureReason::Expired,
            "no outcome before the booking worker took the call as lost",
            now,
            CLOSED_BY_BOOKING_WORKER,
        );
        if let Err(e) = self
            .requests
            .write_outcome(operator, request_id, &outcome)
            .await
        {
            tracing::warn!(operator = %operator, request_id, error = %e, "lost booking call not closed");
        }
    }

    /// Start a booking call for the held `order`: saved as booking first,
    /// then its request written, so no call goes out for an order the
    /// table does not say is booking. A request that cannot be written is
    /// an attempt without an answer: held again, asked after its gap.
    async fn start(
        &self,
        mut order: HeldOrder,
        budget: &Budget,
        policy: &OrderPolicy,
        report: &mut OperatorReport,
        moves: &mut Vec<LifeboatEvent>,
    ) -> Option<HeldOrder> {
        let now = self.clock.now();
        order.start_booking(now).ok()?;
        let mut order = self.save(order, report, moves).await?;
        let request = order.book_request(budget, now)?;
        match self.requests.put_request(&request).await {
            // A conflict is this attempt's own request, written before.
            Ok(()) | Err(StoreError::Conflict(_)) => {
                report.started += 1;
                tracing::info!(operator = %order.operator, order = %order.order_id, attempt = order.attempts, request_id = %request.request_id, "booking call started");
                Some(order)
            }
            Err(e) => {
                tracing::warn!(operator = %order.operator, order = %order.order_id, error = %e, "booking request not written");
                let answer = BookingAnswer::Unavailable {
                    detail: format!("the booking request was not written: {e}"),
                };
                order.answer(answer, policy, self.clock.now()).ok()?;
                self.save(order, report, moves).await
            }
        }
    }

    /// Save a moved `order` on the revision it was read at, and note its
    /// move for the bus.
    async fn save(
        &self,
        mut order: HeldOrder,
        report: &mut OperatorReport,
        moves: &mut Vec<LifeboatEvent>,
    ) -> Option<HeldOrder> {
        let expected = order.revision;
        order.revision = expected + 1;
        match self.orders.save(&order, expected).await {
            Ok(()) => {
                if let Some(moved) = OrderMoved::of(&order) {
                    *report.moved.entry(moved.to.as_str()).or_default() += 1;
                    tracing::info!(operator = %moved.operator, order = %moved.order_id, to = moved.to.as_str(), detail = %moved.detail, "order moved");
                    moves.push(LifeboatEvent::OrderMoved(Box::new(moved)));
                }
                Some(order)
            }
            Err(StoreError::Conflict(why)) => {
                tracing::info!(operator = %order.operator, order = %order.order_id, why = %why, "order moved by another writer: looked at again next round");
                report.conflicts += 1;
                None
            }
            Err(e) => {
                tracing::warn!(operator = %order.operator, order = %order.order_id, error = %e, "order not saved");
                report
                    .errors
                    .push(format!("order {} not saved: {e}", order.order_id));
                None
            }
        }
    }

    /// The round's moves on the bus, and counted per state; a parked order
    /// is a fault for a person; the orders booked, each with its time from
    /// the hold to the booking.
    async fn publish(
        &self,
        operator: &OperatorId,
        moves: &[LifeboatEvent],
        booked_after_s: &[f64],
        report: &mut OperatorReport,
    ) {
        if moves.is_empty() {
            return;
        }
        let now = self.clock.now();
        let mut sets = Vec::new();
        for state in StateName::ALL {
            let count = moves
                .iter()
                .filter(|e| matches!(e, LifeboatEvent::OrderMoved(m) if m.to == state))
                .count();
            if count == 0 {
                continue;
            }
            sets.push(
                MetricSet::new()
                    .dimension(names::OPERATOR, operator.as_str())
                    .dimension("State", state.as_str())
                    .count(names::ORDERS_MOVED, count as u64),
            );
            if state == StateName::Parked {
                sets.push(MetricSet::new().count(names::FAULTS, count as u64));
            }
        }
        sets.extend(MetricSet::series(
            &[(names::OPERATOR, operator.as_str().to_owned())],
            names::ORDER_TIME_TO_BOOK,
            Unit::Seconds,
            booked_after_s,
        ));
        self.metrics.emit(&sets, now);
        if let Err(e) = self.events.publish(moves).await {
            let failed = e.failed_indexes(moves.len()).len();
            tracing::warn!(operator = %operator, failed, error = %e, "order moves not all published");
            report.events_not_published += failed;
        }
    }
}

/// For each order this round booked (`moves` holds its move, `orders` the
/// order as saved), the seconds from its hold to its booking.
fn booked_after_s(moves: &[LifeboatEvent], orders: &[HeldOrder]) -> Vec<f64> {
    moves
        .iter()
        .filter_map(|e| match e {
            LifeboatEvent::OrderMoved(m) if m.to == StateName::Booked => {
                orders.iter().find(|o| o.order_id == m.order_id)
            }
            _ => None,
        })
        .filter_map(|o| match o.state {
            OrderState::Booked { at, .. } => {
                Some((at - o.held_at).num_milliseconds() as f64 / 1000.0)
            }
            _ => None,
        })
        .collect()
}

fn fail(report: &mut OperatorReport, operator: &OperatorId, what: &str, e: &StoreError) {
    tracing::warn!(operator = %operator, error = %e, "{what}");
    report.errors.push(format!("{what}: {e}"));
}
