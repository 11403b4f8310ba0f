//! The listener end to end on the in-memory store, switch, queue and bus.

use super::*;
use crate::selffault::MAX_FAILED_ROUNDS;
use std::collections::HashSet;

use crate::config::{ListenerConfig, StoreChoice, SwitchTarget};
use crate::http::{HttpSwitchConfig, legacy::Legacy};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::events::SaleSwitchWriteFailed;
use lifeboat_core::events::{
    BREAKER_STATE_CHANGED, BreakerStateChanged, LifeboatEvent, OperatorRequestFailed,
    SCHEMA_VERSION, SOURCE,
};
use lifeboat_core::memory::{
    MemoryEventBus, MemoryQueue, MemorySaleStatusStore, MemorySaleSwitch, ReceivedMessage,
    SwitchOutcome,
};
use lifeboat_core::metrics::names;
use lifeboat_core::request::FailureReason;
use lifeboat_core::retry::RetrySchedule;
use lifeboat_core::sale::DEFAULT_ON_SALE_HOLD;
use lifeboat_core::sale::{SaleRecord, until};
use lifeboat_core::{BreakerState, ManualClock, OperatorId};
use serde_json::{Value, json};

/// The SQS message body the `Breaker State Changed` rule delivers for `change`.
fn rule_message(change: &BreakerStateChanged) -> String {
    let mut event = EventBridgeEvent::<Value>::default();
    event.version = Some("0".to_owned());
    event.id = Some(format!("{}-{}", change.operator, change.version));
    event.detail_type = BREAKER_STATE_CHANGED.to_owned();
    event.source = SOURCE.to_owned();
    event.time = Some(change.at);
    event.detail = serde_json::to_value(change).unwrap();
    serde_json::to_string(&event).unwrap()
}

/// The batch the SQS event source mapping delivers for `messages`.
fn sqs_event(messages: &[ReceivedMessage]) -> Value {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|m| {
            let mut record = SqsMessage::default();
            record.message_id = Some(m.message_id.clone());
            record.receipt_handle = Some(m.receipt_handle.clone());
            record.body = Some(m.body.clone());
            record.event_source = Some("aws:sqs".to_owned());
            record.event_source_arn = Some(MemoryQueue::ARN.to_owned());
            record
        })
        .collect();
    serde_json::to_value(&event).unwrap()
}

/// One round of the SQS event source mapping on `queue`: up to `max` visible
/// messages to `listener` as one batch, those not reported as failures deleted.
async fn deliver(
    listener: &OffsaleListener,
    queue: &MemoryQueue,
    max: usize,
) -> Result<Option<ListenerReport>, ListenerError> {
    let received = queue.receive(max);
    if received.is_empty() {
        return Ok(None);
    }
    let report = listener.handle(&sqs_event(&received)).await?;
    let failed: HashSet<&str> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    for m in &received {
        if !failed.contains(m.message_id.as_str()) {
            queue.delete(&m.receipt_handle);
        }
    }
    Ok(Some(report))
}

/// Follows tokio's (paused) time.
#[derive(Debug, Clone, Copy)]
struct TokioClock {
    base: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        self.base + TimeDelta::from_std(self.start.elapsed()).unwrap()
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn change(version: u64, to: BreakerState) -> BreakerStateChanged {
    BreakerStateChanged {
        schema_version: SCHEMA_VERSION,
        operator: nordic(),
        from: BreakerState::Closed,
        to,
        version,
        reason: "test".into(),
        at: t0(),
    }
}

const VISIBILITY: Duration = Duration::from_secs(30);

struct World {
    store: Arc<MemorySaleStatusStore>,
    switch: Arc<MemorySaleSwitch>,
    queue: Arc<MemoryQueue>,
    events: Arc<MemoryEventBus>,
    clock: Arc<dyn Clock>,
    policy: WritePolicy,
    metrics: Arc<lifeboat_core::memory::MemoryMetrics>,
}

impl World {
    /// A world on paused tokio time (call inside a paused runtime).
    fn paused(max_attempts: u32) -> Self {
        Self::on(
            Arc::new(TokioClock {
                base: t0(),
                start: tokio::time::Instant::now(),
            }),
            max_attempts,
        )
    }

    fn on(clock: Arc<dyn Clock>, max_attempts: u32) -> Self {
        Self {
            store: Arc::new(MemorySaleStatusStore::new()),
            switch: Arc::new(MemorySaleSwitch::new(clock.clone())),
            queue: Arc::new(MemoryQueue::new(clock.clone(), VISIBILITY)),
            events: Arc::new(MemoryEventBus::new()),
            metrics: Arc::new(lifeboat_core::memory::MemoryMetrics::new()),
            clock,
            policy: WritePolicy::new(
                RetrySchedule {
                    max_attempts,
                    ..RetrySchedule::default()
                },
                Duration::from_secs(5),
            )
            // The write mechanics, without the holds.
            .with_on_sale_hold(Duration::ZERO)
            .with_off_sale_hold(Duration::ZERO),
        }
    }

    /// A listener on this world's stores: as many as you like, one per
    /// Lambda instance.
    fn listener(&self) -> OffsaleListener {
        OffsaleListener {
            store: self.store.clone(),
            switch: self.switch.clone(),
            redelivery: self.queue.clone(),
            events: self.events.clone(),
            clock: self.clock.clone(),
            policy: self.policy,
            on_sale_at: OnSaleAt::HalfOpen,
            metrics: self.metrics.clone(),
            trust: trust::Trust::default(),
            self_fault: selffault::SelfFaultRule::default(),
        }
    }

    fn send(&self, version: u64, to: BreakerState) -> String {
        self.queue.send(rule_message(&change(version, to)))
    }

    async fn deliver(&self, listener: &OffsaleListener) -> Option<ListenerReport> {
        deliver(listener, &self.queue, 10).await.unwrap()
    }

    /// Deliver until the queue is empty, sleeping (paused) until the next
    /// message is visible.
    async fn drain(&self, listener: &OffsaleListener) -> usize {
        let mut rounds = 0;
        while rounds < 200 {
            if self.deliver(listener).await.is_some() {
                rounds += 1;
                continue;
            }
            let Some(at) = self.queue.next_visible_at() else {
                return rounds;
            };
            tokio::time::sleep(until(self.clock.now(), at).max(Duration::from_millis(1))).await;
        }
        panic!("the queue never emptied");
    }

    /// Every write to the switch: whole seconds after t0, version, accepted.
    fn writes(&self) -> Vec<(i64, u64, SwitchOutcome)> {
        self.switch
            .writes()
            .into_iter()
            .map(|w| {
                let ms = (w.at - t0()).num_milliseconds();
                ((ms + 500).div_euclid(1000), w.version, w.outcome)
            })
            .collect()
    }

    fn faults(&self) -> Vec<SaleSwitchWriteFailed> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                LifeboatEvent::SaleSwitchWriteFailed(f) => Some(f),
                _ => None,
            })
            .collect()
    }

    fn poison_reports(&self) -> Vec<OperatorRequestFailed> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                LifeboatEvent::OperatorRequestFailed(f) => Some(f),
                _ => None,
            })
            .collect()
    }

    async fn record(&self) -> SaleRecord {
        self.store.load(&nordic()).await.unwrap().unwrap()
    }
}

fn failed() -> SwitchOutcome {
    SwitchOutcome::Failed("503 Service Unavailable".into())
}

#[tokio::test(start_paused = true)]
async fn a_healthy_switch_takes_the_operator_off_sale_in_the_same_invocation() {
    let w = World::paused(8);
    let listener = w.listener();
    w.send(1, BreakerState::Open);
    let report = w.deliver(&listener).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(
        report.messages[0].disposition,
        Disposition::Settled(Settled::Applied)
    );
    assert_eq!(report.messages[0].attempts, vec![(1, None)]);
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    // Written at the moment of delivery, well within 2 s of the breaker opening.
    assert_eq!(w.switch.writes()[0].at, t0());
    assert!(w.queue.is_empty());
    let record = w.record().await;
    assert_eq!(
        (record.applied_version, record.status()),
        (1, SaleStatus::OffSale)
    );
    assert_eq!((record.pending, record.lease), (None, None));
}

#[tokio::test(start_paused = true)]
async fn by_default_an_incident_costs_one_off_sale_and_one_on_sale_write() {
    // Three failed half-open rounds, then a closing one, a trip 20 s
    // later (the operator flapped), and the close that holds.
    let w = World::paused(8);
    let listener = OffsaleListener {
        on_sale_at: OnSaleAt::Closed,
        policy: w.policy.with_on_sale_hold(DEFAULT_ON_SALE_HOLD),
        ..w.listener()
    };
    let rounds = [
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::Closed,
    ];
    for (i, to) in rounds.into_iter().enumerate() {
        let version = u64::try_from(i).unwrap() + 1;
        w.send(version, to);
        let report = w.deliver(&listener).await.unwrap();
        // A close comes back when its hold is over.
        let held = usize::from(to == BreakerState::Closed);
        assert_eq!(report.response.batch_item_failures.len(), held);
        // The operator stays off sale, closed breaker included: the
        // on-sale write waits for the breaker to stay closed a minute.
        assert_eq!(
            w.switch.status(&nordic()),
            SaleStatus::OffSale,
            "after v{version} {to}"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    // The last close at +90 s goes on sale at +150 s; the one at +60 s,
    // tripped again 10 s later, was never written.
    w.drain(&listener).await;
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    assert_eq!(w.record().await.applied_version, 10);
    assert_eq!(
        w.writes(),
        vec![
            (0, 1, SwitchOutcome::Accepted),
            (150, 10, SwitchOutcome::Accepted)
        ]
    );
    // The same incident on sale at half-open without a hold (the seed
    // behaviour): a write per change, but for closing after a half-open
    // round that had already put the operator on sale.
    let w = World::paused(8);
    let listener = w.listener();
    for (i, to) in rounds.into_iter().enumerate() {
        w.send(u64::try_from(i).unwrap() + 1, to);
        w.deliver(&listener).await.unwrap();
    }
    assert_eq!(w.writes().len(), rounds.len() - 2);
    assert_eq!(w.record().await.applied_version, 10);
}

#[tokio::test(start_paused = true)]
async fn forged_changes_and_strangers_are_dropped_with_a_fault() {
    let w = World::paused(8);
    let breakers = Arc::new(lifeboat_core::memory::MemoryBreakerStore::new());
    let mut open = lifeboat_core::BreakerRecord::initial(nordic(), t0());
    open.state = BreakerState::Open;
    open.version = 3;
    lifeboat_core::ports::BreakerStore::save(breakers.as_ref(), &open, None)
        .await
        .unwrap();
    let listener = OffsaleListener {
        trust: trust::Trust {
            operators: Some([nordic()].into()),
            breakers: Some(breakers.clone()),
        },
        ..w.listener()
    };
    // A forged change far in the future, a stranger, and a state the
    // table does not hold: all acknowledged, none written.
    w.send(1 << 62, BreakerState::Open);
    let mut stranger = change(2, BreakerState::Open);
    stranger.operator = OperatorId::new("zzz").unwrap();
    w.queue.send(rule_message(&stranger));
    w.send(3, BreakerState::Closed);
    let report = w.deliver(&listener).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(report.messages.len(), 3);
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.disposition, Disposition::Poison { .. })),
        "{:?}",
        report.messages
    );
    assert!(w.writes().is_empty());
    assert_eq!(w.events.events().len(), 3, "a fault event each");
    // The real change goes through, and the forged one blocks nothing.
    w.send(3, BreakerState::Open);
    w.deliver(&listener).await.unwrap();
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    assert_eq!(w.record().await.applied_version, 3);
}

#[tokio::test(start_paused = true)]
async fn duplicates_and_out_of_order_changes_leave_the_newest_state() {
    // One at a time: v3 open, v5 closed, v4 half-open (late), v3 again.
    let w = World::paused(8);
    let listener = w.listener();
    for (version, to) in [
        (3, BreakerState::Open),
        (5, BreakerState::Closed),
        (4, BreakerState::HalfOpen),
        (3, BreakerState::Open),
    ] {
        w.send(version, to);
        let report = w.deliver(&listener).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
    }
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    assert_eq!(
        w.writes(),
        vec![
            (0, 3, SwitchOutcome::Accepted),
            (0, 5, SwitchOutcome::Accepted)
        ]
    );
    let record = w.record().await;
    assert_eq!(
        (record.applied_version, record.status()),
        (5, SaleStatus::OnSale)
    );
    assert!(w.queue.is_empty());

    // All in one batch, in the same order: only the newest is written.
    let w = World::paused(8);
    let listener = w.listener();
    for (version, to) in [
        (3, BreakerState::Open),
        (5, BreakerState::Closed),
        (4, BreakerState::HalfOpen),
        (3, BreakerState::Open),
    ] {
        w.send(version, to);
    }
    let report = w.deliver(&listener).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(w.writes(), vec![(0, 5, SwitchOutcome::Accepted)]);
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    let settled: Vec<_> = report.messages.iter().map(|m| &m.disposition).collect();
    assert_eq!(
        settled,
        vec![
            &Disposition::Settled(Settled::Applied),
            &Disposition::Settled(Settled::Outdated { applied: 5 }),
            &Disposition::Settled(Settled::Outdated { applied: 5 }),
            &Disposition::Settled(Settled::Outdated { applied: 5 }),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn failed_writes_are_retried_after_5_10_20_40_and_60_seconds() {
    let w = World::paused(8);
    w.switch.fail_next(5);
    let listener = w.listener();
    w.send(1, BreakerState::Open);
    let first = w.deliver(&listener).await.unwrap();
    assert_eq!(first.response.batch_item_failures.len(), 1);
    assert!(matches!(
        &first.messages[0].disposition,
        Disposition::Retry { delay, why: RetryReason::Wait(Wait::NotDue { attempts: 1, .. }) }
            if *delay == Duration::from_secs(5)
    ));
    let pending = w.record().await.pending.unwrap();
    assert_eq!(
        pending.last_error.as_deref(),
        Some("sale switch answered 503 Service Unavailable")
    );
    w.drain(&listener).await;
    assert_eq!(
        w.writes(),
        vec![
            (0, 1, failed()),
            (5, 1, failed()),
            (15, 1, failed()),
            (35, 1, failed()),
            (75, 1, failed()),
            (135, 1, SwitchOutcome::Accepted),
        ]
    );
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    assert!(w.faults().is_empty());
    assert!(w.queue.is_empty());
    assert_eq!(w.record().await.pending, None);
}

#[tokio::test(start_paused = true)]
async fn after_the_last_attempt_the_fault_is_published_once() {
    let w = World::paused(5);
    w.switch.fail_next(u32::MAX);
    let listener = w.listener();
    w.send(1, BreakerState::Open);
    w.drain(&listener).await;
    let times: Vec<i64> = w.writes().iter().map(|(t, _, _)| *t).collect();
    assert_eq!(times, vec![0, 5, 15, 35, 75]);
    let faults = w.faults();
    assert_eq!(faults.len(), 1);
    assert_eq!(
        (
            faults[0].operator.clone(),
            faults[0].wanted,
            faults[0].version,
            faults[0].attempts
        ),
        (nordic(), SaleStatus::OffSale, 1, 5)
    );
    assert_eq!(
        faults[0].last_error,
        "sale switch answered 503 Service Unavailable"
    );
    assert_eq!(faults[0].at, t0() + TimeDelta::seconds(75));
    // The message was acknowledged; a late duplicate starts nothing again.
    assert!(w.queue.is_empty());
    w.send(1, BreakerState::Open);
    let report = w.deliver(&listener).await.unwrap();
    assert!(matches!(
        report.messages[0].disposition,
        Disposition::Settled(Settled::GaveUp { attempts: 5, .. })
    ));
    assert_eq!((w.writes().len(), w.faults().len()), (5, 1));
    // The legacy system recovers; the next change goes through.
    w.switch.fail_next(0);
    w.send(2, BreakerState::HalfOpen);
    w.drain(&listener).await;
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    assert_eq!(w.record().await.applied_version, 2);

    // One fault and one change written, as metrics.
    let sum = |name, dims: &[(&str, &str)]| w.metrics.sum(name, dims);
    assert_eq!(sum(names::FAULTS, &[("Operator", "nordic")]), 1.0);
    assert_eq!(
        sum(
            names::SALE_CHANGES,
            &[("Operator", "nordic"), ("Status", "on_sale")]
        ),
        1.0
    );
    assert_eq!(sum(names::SALE_CHANGES, &[("Status", "off_sale")]), 0.0);
}

/// A listener that trusts nordic's breakers in `breakers` (and sweeps them).
fn trusting(
    w: &World,
    breakers: &Arc<lifeboat_core::memory::MemoryBreakerStore>,
) -> OffsaleListener {
    OffsaleListener {
        on_sale_at: OnSaleAt::Closed,
        trust: trust::Trust {
            operators: Some([nordic()].into()),
            breakers: Some(breakers.clone()),
        },
        ..w.listener()
    }
}

async fn put_breaker(
    breakers: &lifeboat_core::memory::MemoryBreakerStore,
    version: u64,
    state: BreakerState,
) {
    let mut record = lifeboat_core::BreakerRecord::initial(nordic(), t0());
    record.version = version;
    record.state = state;
    let stored = lifeboat_core::ports::BreakerStore::load(breakers, &nordic())
        .await
        .unwrap()
        .map(|r| r.version);
    lifeboat_core::ports::BreakerStore::save(breakers, &record, stored)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_sweep_writes_a_given_up_change_again_and_a_lost_one_at_all() {
    let w = World::paused(2);
    let breakers = Arc::new(lifeboat_core::memory::MemoryBreakerStore::new());
    let listener = trusting(&w, &breakers);
    // In step: nothing to do.
    assert_eq!(listener.sweep().await.in_step, 1);

    // Open at v1; the switch is down for both attempts: given up.
    put_breaker(&breakers, 1, BreakerState::Open).await;
    w.switch.fail_next(2);
    w.send(1, BreakerState::Open);
    w.drain(&listener).await;
    assert_eq!(w.faults().len(), 1);
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    // The switch is back: the next sweep writes it.
    let swept = listener.sweep().await;
    assert_eq!(swept.settled.len(), 1, "{swept:?}");
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    assert_eq!(w.record().await.applied_version, 1);

    // Closed at v3, and its event lost: the sweep starts the on-sale
    // write, which waits for its hold like any other, then writes it.
    put_breaker(&breakers, 3, BreakerState::Closed).await;
    let listener = OffsaleListener {
        policy: w.policy.with_on_sale_hold(Duration::from_secs(60)),
        ..listener
    };
    assert_eq!(listener.sweep().await.waiting.len(), 1);
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    tokio::time::sleep(Duration::from_secs(300)).await;
    let swept = listener.sweep().await;
    assert_eq!(swept.settled.len(), 1, "{swept:?}");
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    assert_eq!(listener.sweep().await.in_step, 1);
    // Without OPERATORS and the Breaker table it does nothing.
    assert!(w.listener().sweep().await.skipped.is_some());
}

#[tokio::test(start_paused = true)]
async fn when_most_operators_open_together_none_goes_off_sale_for_a_while() {
    // Four operators. Two genuine outages at once happen: both go off sale.
    // A third opening with them is most of the marketplace: our own egress,
    // most likely, until the held operator's own breaker has failed three
    // rounds.
    let w = World::paused(8);
    let breakers = Arc::new(lifeboat_core::memory::MemoryBreakerStore::new());
    let names = ["nordic", "baltic", "aland", "gotland"];
    let listener = OffsaleListener {
        on_sale_at: OnSaleAt::Closed,
        trust: trust::Trust {
            operators: Some(names.iter().map(|n| OperatorId::new(*n).unwrap()).collect()),
            breakers: Some(breakers.clone()),
        },
        ..w.listener()
    };
    let open = async |name: &str, version: u64, at: DateTime<Utc>, failed_trials: u32| {
        let operator = OperatorId::new(name).unwrap();
        let stored = lifeboat_core::ports::BreakerStore::load(breakers.as_ref(), &operator)
            .await
            .unwrap();
        let mut r = lifeboat_core::BreakerRecord::initial(operator.clone(), at);
        r.state = BreakerState::Open;
        r.version = version;
        r.failed_trials = failed_trials;
        lifeboat_core::ports::BreakerStore::save(breakers.as_ref(), &r, stored.map(|s| s.version))
            .await
            .unwrap();
        let mut change = change(version, BreakerState::Open);
        change.operator = operator;
        w.queue.send(rule_message(&change));
    };
    let held = || {
        w.events
            .events()
            .into_iter()
            .filter(|e| matches!(e, LifeboatEvent::SelfFaultSuspected(_)))
            .count()
    };
    let status = |name: &str| w.switch.status(&OperatorId::new(name).unwrap());
    open("nordic", 1, t0(), 0).await;
    w.deliver(&listener).await.unwrap();
    open("baltic", 1, t0() + TimeDelta::seconds(5), 0).await;
    w.deliver(&listener).await.unwrap();
    assert_eq!(status("nordic"), SaleStatus::OffSale);
    assert_eq!(status("baltic"), SaleStatus::OffSale, "two outages of four");
    assert_eq!(held(), 0);
    // A third within thirty seconds: held on sale.
    open("aland", 1, t0() + TimeDelta::seconds(20), 0).await;
    let report = w.deliver(&listener).await.unwrap();
    assert_eq!(
        report.messages[0].disposition,
        Disposition::HeldOnSale { open: 3, of: 4 }
    );
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(status("aland"), SaleStatus::OnSale);
    assert_eq!(held(), 1);
    assert_eq!(w.metrics.sum(names::SELF_FAULT, &[]), 1.0);
    // An opening ten minutes later is not "together" with them.
    open("gotland", 1, t0() + TimeDelta::minutes(10), 0).await;
    w.deliver(&listener).await.unwrap();
    assert_eq!(status("gotland"), SaleStatus::OffSale);
    // Aland's own breaker fails round after round: held through two, off
    // sale at the third.
    open("aland", 3, t0() + TimeDelta::seconds(21), 2).await;
    let report = w.deliver(&listener).await.unwrap();
    assert!(
        matches!(
            report.messages[0].disposition,
            Disposition::HeldOnSale { .. }
        ),
        "{report:?}"
    );
    assert_eq!(status("aland"), SaleStatus::OnSale);
    open("aland", 5, t0() + TimeDelta::seconds(22), MAX_FAILED_ROUNDS).await;
    w.drain(&listener).await;
    assert_eq!(status("aland"), SaleStatus::OffSale);
}

#[tokio::test(start_paused = true)]
async fn a_newer_state_supersedes_a_pending_retry() {
    let w = World::paused(8);
    w.switch.fail_next(1);
    let listener = w.listener();
    w.send(5, BreakerState::Open);
    w.deliver(&listener).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.send(6, BreakerState::HalfOpen);
    let report = w.deliver(&listener).await.unwrap();
    assert_eq!(
        report.messages[0].disposition,
        Disposition::Settled(Settled::Applied)
    );
    w.drain(&listener).await;
    // v5's retry came back at +5 s and was dropped without a write.
    assert_eq!(
        w.writes(),
        vec![(0, 5, failed()), (1, 6, SwitchOutcome::Accepted)]
    );
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
    let record = w.record().await;
    assert_eq!((record.applied_version, record.pending), (6, None));
    assert!(w.faults().is_empty());

    // The newer state failing too: its own schedule runs, v5 never again.
    let w = World::paused(8);
    w.switch.fail_next(2);
    let listener = w.listener();
    w.send(5, BreakerState::Open);
    w.deliver(&listener).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.send(6, BreakerState::HalfOpen);
    w.drain(&listener).await;
    assert_eq!(
        w.writes(),
        vec![
            (0, 5, failed()),
            (1, 6, failed()),
            (6, 6, SwitchOutcome::Accepted)
        ]
    );
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OnSale);
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_retries_loses_nothing() {
    let w = World::paused(8);
    w.switch.fail_next(2);
    let listener = w.listener();
    w.send(1, BreakerState::Open);
    w.deliver(&listener).await.unwrap();
    drop(listener);
    // Everything needed to carry on is in the store and the queue.
    let pending = w.record().await.pending.unwrap();
    assert_eq!(pending.attempts, 1);
    assert_eq!(pending.next_attempt_at, t0() + TimeDelta::seconds(5));
    let restarted = w.listener();
    w.drain(&restarted).await;
    assert_eq!(
        w.writes(),
        vec![
            (0, 1, failed()),
            (5, 1, failed()),
            (15, 1, SwitchOutcome::Accepted)
        ]
    );
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
}

#[tokio::test(start_paused = true)]
async fn a_crash_mid_write_is_taken_up_when_the_message_returns() {
    let w = World::paused(8);
    w.switch.hang_next(1);
    let listener = w.listener();
    w.send(1, BreakerState::Open);
    // The instance dies while the write hangs.
    let crashed = tokio::time::timeout(Duration::from_millis(100), w.deliver(&listener)).await;
    assert!(crashed.is_err());
    drop(listener);
    assert!(w.record().await.lease.is_some());
    let restarted = w.listener();
    w.drain(&restarted).await;
    // The message came back after the queue's visibility timeout; the
    // lease had run out, so the second attempt went ahead.
    assert_eq!(
        w.writes(),
        vec![
            (0, 1, SwitchOutcome::Hung),
            (30, 1, SwitchOutcome::Accepted)
        ]
    );
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
}

#[tokio::test(start_paused = true)]
async fn a_write_that_never_answers_times_out_and_is_retried() {
    let w = World::paused(8);
    w.switch.hang_next(1);
    let listener = w.listener();
    w.send(1, BreakerState::Open);
    let report = w.deliver(&listener).await.unwrap();
    assert_eq!(
        report.messages[0].attempts,
        vec![(
            1,
            Some("sale switch did not answer within 5000 ms".to_owned())
        )]
    );
    w.drain(&listener).await;
    // Timed out at +5 s, retried 5 s later.
    assert_eq!(
        w.writes(),
        vec![
            (0, 1, SwitchOutcome::Hung),
            (10, 1, SwitchOutcome::Accepted)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn poison_messages_are_acknowledged_and_reported_not_retried() {
    let w = World::paused(8);
    let listener = w.listener();
    let mut newer = json!({"source": "lifeboat", "detail-type": "Breaker State Changed",
        "detail": serde_json::to_value(change(2, BreakerState::Open)).unwrap()});
    newer["detail"]["schema_version"] = 2.into();
    let bodies = [
        "not json at all".to_owned(),
        json!({"source": "lifeboat", "detail-type": "Breaker Exploded", "detail": {"operator": "nordic"}}).to_string(),
        newer.to_string(),
        json!({"source": "lifeboat", "detail-type": "Trials Passed", "detail": {"schema_version": 1,
            "operator": "nordic", "observed_version": 2, "successes": 2, "at": "2026-11-30T10:16:03Z"}}).to_string(),
        json!({"source": "someone.else", "detail-type": "Breaker State Changed", "detail": {}}).to_string(),
        json!({"source": "lifeboat", "detail-type": "Breaker State Changed", "detail": {"operator": "nordic"}}).to_string(),
    ];
    for body in &bodies {
        w.queue.send(body.clone());
    }
    w.send(1, BreakerState::Open);
    let report = w.deliver(&listener).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    assert!(w.queue.is_empty());
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    let poison: Vec<&str> = report
        .messages
        .iter()
        .filter_map(|m| match &m.disposition {
            Disposition::Poison { reason } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(poison.len(), bodies.len());
    assert!(poison[0].contains("not JSON"));
    assert!(poison[1].contains("unknown detail-type"));
    assert!(poison[2].contains("schema_version 2 is newer"));
    assert!(poison[3].contains("Trials Passed is not for the off-sale listener"));
    assert!(poison[4].contains("someone.else"));
    assert!(poison[5].contains("does not match its schema"));
    let reports = w.poison_reports();
    assert_eq!(reports.len(), bodies.len());
    assert!(reports.iter().all(|r| r.reason == FailureReason::Malformed));
    assert!(
        reports[0]
            .detail
            .starts_with("off-sale listener dropped SQS message msg-1: ")
    );
    assert_eq!(reports[1].operator.as_deref(), Some("nordic"));

    // A record that is not even an SQS message is dropped the same way.
    let odd = listener
        .handle(&json!({"Records": [{"messageId": 7}, {"messageId": "m", "body": "{}"}]}))
        .await
        .unwrap();
    assert!(odd.response.batch_item_failures.is_empty());
    assert_eq!(w.poison_reports().len(), bodies.len() + 2);
}

#[tokio::test]
async fn not_a_batch_is_an_error_with_a_diagnostic() {
    let w = World::on(Arc::new(ManualClock::new(t0())), 8);
    let err = w.listener().handle(&json!({"foo": 1})).await.unwrap_err();
    let diagnostic: Diagnostic = err.into();
    assert_eq!(diagnostic.error_type, "NotABatch");
    assert!(diagnostic.error_message.contains("Records"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deliveries_of_one_change_write_it_once() {
    let clock = ManualClock::new(t0());
    let w = World::on(Arc::new(clock.clone()), 8);
    for _ in 0..16 {
        w.send(1, BreakerState::Open);
    }
    let batches: Vec<_> = (0..8).map(|_| sqs_event(&w.queue.receive(2))).collect();
    let listener = Arc::new(w.listener());
    let tasks: Vec<_> = batches
        .into_iter()
        .map(|batch| {
            let listener = listener.clone();
            tokio::spawn(async move { listener.handle(&batch).await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // The rest come back and find it applied.
    clock.advance(VISIBILITY);
    while deliver(&listener, &w.queue, 10).await.unwrap().is_some() {}
    let accepted = w
        .switch
        .writes()
        .into_iter()
        .filter(|w| w.outcome == SwitchOutcome::Accepted)
        .count();
    assert_eq!(accepted, 1);
    assert_eq!(w.switch.status(&nordic()), SaleStatus::OffSale);
    assert!(w.queue.is_empty());
}

#[tokio::test]
async fn the_fixture_payload_is_understood() {
    let w = World::on(Arc::new(ManualClock::new(t0())), 8);
    let path = format!(
        "{}/events/sqs-breaker-state-changed.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let report = w.listener().handle(&payload).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    // The same event delivered twice (EventBridge and SQS deliver at least once).
    assert_eq!(report.messages.len(), 2);
    assert_eq!(w.switch.writes().len(), 1);
    let record = w.record().await;
    assert_eq!(
        (record.applied_version, record.status()),
        (7, SaleStatus::OffSale)
    );
}

fn http_world(legacy: &Legacy, clock: &ManualClock) -> (World, OffsaleListener) {
    let w = World::on(Arc::new(clock.clone()), 8);
    let config = ListenerConfig {
        switch: SwitchTarget::Http(
            HttpSwitchConfig::new(
                &legacy.url("/operators/{operator}/sale-status"),
                "PUT",
                Some(("x-api-key", "k")),
                Duration::from_secs(2),
            )
            .unwrap(),
        ),
        policy: w.policy,
        store: StoreChoice::Memory,
        on_sale_at: OnSaleAt::HalfOpen,
        operators: None,
        self_fault: selffault::SelfFaultRule::default(),
        auth_secret: None,
    };
    let listener = OffsaleListener::with_ports(
        &config,
        w.store.clone(),
        w.queue.clone(),
        w.events.clone(),
        w.clock.clone(),
    )
    .unwrap();
    (w, listener)
}

#[tokio::test]
async fn the_legacy_switch_is_written_within_two_seconds_of_the_event() {
    let legacy = Legacy::start().await;
    let clock = ManualClock::new(t0());
    let (w, listener) = http_world(&legacy, &clock);
    w.send(7, BreakerState::Open);
    let started = std::time::Instant::now();
    let report = w.deliver(&listener).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(report.response.batch_item_failures.is_empty());
    let seen = legacy.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/operators/nordic/sale-status");
    assert_eq!(
        seen[0].body,
        json!({"operator": "nordic", "status": "off_sale", "version": 7})
    );
    assert_eq!(w.record().await.status(), SaleStatus::OffSale);
}

#[tokio::test]
async fn a_legacy_outage_is_retried_on_schedule() {
    let legacy = Legacy::start().await;
    legacy.answer_with(&[503, 500]);
    let clock = ManualClock::new(t0());
    let (w, listener) = http_world(&legacy, &clock);
    w.send(1, BreakerState::Open);
    let report = w.deliver(&listener).await.unwrap();
    assert_eq!(report.response.batch_item_failures.len(), 1);
    assert_eq!(
        w.queue.next_visible_at(),
        Some(t0() + TimeDelta::seconds(5))
    );
    // Nothing is visible before the gap is over.
    clock.advance(Duration::from_secs(4));
    assert!(w.deliver(&listener).await.is_none());
    clock.advance(Duration::from_secs(1));
    w.deliver(&listener).await.unwrap();
    let pending = w.record().await.pending.unwrap();
    assert_eq!(pending.attempts, 2);
    assert_eq!(
        pending.last_error.as_deref(),
        Some("sale switch answered 500 Internal Server Error")
    );
    clock.advance(Duration::from_secs(10));
    let report = w.deliver(&listener).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(legacy.seen().len(), 3);
    assert_eq!(w.record().await.status(), SaleStatus::OffSale);
    assert!(w.queue.is_empty());
}
