use super::*;
use crate::clock::ManualClock;
use crate::memory::{MemoryQueue, MemorySaleStatusStore, MemorySaleSwitch};
use crate::ports::{MessageHandle, Redelivery, SaleStatusStore, SaleSwitch, StoreError};
use std::sync::Arc;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

fn secs(s: i64) -> DateTime<Utc> {
    t0() + TimeDelta::seconds(s)
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn change(version: u64, breaker: BreakerState) -> SaleChange {
    SaleChange {
        operator: nordic(),
        version,
        status: SaleStatus::for_breaker(breaker),
        breaker,
    }
}

fn policy(max_attempts: u32) -> WritePolicy {
    WritePolicy::new(
        RetrySchedule {
            max_attempts,
            ..RetrySchedule::default()
        },
        Duration::from_secs(5),
    )
    // The write mechanics, without the holds (tested on their own).
    .with_on_sale_hold(Duration::ZERO)
    .with_off_sale_hold(Duration::ZERO)
}

/// Plan, save what the plan says, and return the step.
fn step(record: &mut SaleRecord, change: &SaleChange, now: DateTime<Utc>, p: &WritePolicy) -> Step {
    let plan = record.plan(change, now, p);
    if let Some(next) = plan.save {
        assert_eq!(next.revision, record.revision + 1);
        *record = next;
    }
    plan.step
}

fn finish(
    record: &mut SaleRecord,
    change: &SaleChange,
    attempt: u32,
    ok: bool,
    now: DateTime<Utc>,
    p: &WritePolicy,
) {
    let result = if ok { Ok(()) } else { Err("503".to_owned()) };
    if let Some(next) = record.after_attempt(change, attempt, result, now, p) {
        *record = next;
    }
}

#[test]
fn the_newest_version_wins_and_older_ones_are_ignored() {
    let p = policy(8);
    let mut r = SaleRecord::new(nordic());
    let v3 = change(3, BreakerState::Open);
    assert_eq!(step(&mut r, &v3, t0(), &p), Step::Attempt { attempt: 1 });
    finish(&mut r, &v3, 1, true, t0(), &p);
    assert_eq!((r.applied_version, r.status()), (3, SaleStatus::OffSale));
    assert_eq!((r.pending.clone(), r.lease.clone()), (None, None));

    let v5 = change(5, BreakerState::Closed);
    assert_eq!(step(&mut r, &v5, t0(), &p), Step::Attempt { attempt: 1 });
    finish(&mut r, &v5, 1, true, t0(), &p);
    for late in [change(4, BreakerState::HalfOpen), v3] {
        assert_eq!(
            step(&mut r, &late, t0(), &p),
            Step::Done(Settled::Outdated { applied: 5 })
        );
    }
    assert_eq!(step(&mut r, &v5, t0(), &p), Step::Done(Settled::Applied));
    assert_eq!((r.applied_version, r.status()), (5, SaleStatus::OnSale));
}

#[test]
fn a_status_already_held_is_applied_without_a_write_unless_an_attempt_may_have_landed() {
    let p = policy(8);
    let mut r = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::Open);
    step(&mut r, &v1, t0(), &p);
    finish(&mut r, &v1, 1, true, t0(), &p);
    // Off sale already: a newer open (a reopened round) needs no write.
    let v3 = change(3, BreakerState::Open);
    assert_eq!(
        step(&mut r, &v3, t0(), &p),
        Step::Done(Settled::AlreadyHeld)
    );
    assert_eq!((r.applied_version, r.status()), (3, SaleStatus::OffSale));
    // An on-sale write whose attempt failed (it may still have reached
    // the switch), then a newer open: written, not assumed.
    let v4 = change(4, BreakerState::Closed);
    assert_eq!(step(&mut r, &v4, t0(), &p), Step::Attempt { attempt: 1 });
    finish(&mut r, &v4, 1, false, t0(), &p);
    let v5 = change(5, BreakerState::Open);
    assert_eq!(step(&mut r, &v5, t0(), &p), Step::Attempt { attempt: 1 });
}

#[test]
fn failed_attempts_follow_the_schedule_then_give_up_once() {
    let p = policy(3);
    let mut r = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::Open);
    assert_eq!(step(&mut r, &v1, t0(), &p), Step::Attempt { attempt: 1 });
    finish(&mut r, &v1, 1, false, t0(), &p);
    assert!(matches!(
        step(&mut r, &v1, secs(4), &p),
        Step::Wait { retry_at, why: Wait::NotDue { attempts: 1, .. } } if retry_at == secs(5)
    ));
    assert_eq!(step(&mut r, &v1, secs(5), &p), Step::Attempt { attempt: 2 });
    finish(&mut r, &v1, 2, false, secs(5), &p);
    assert!(matches!(
        step(&mut r, &v1, secs(5), &p),
        Step::Wait { retry_at, .. } if retry_at == secs(15)
    ));
    assert_eq!(
        step(&mut r, &v1, secs(15), &p),
        Step::Attempt { attempt: 3 }
    );
    finish(&mut r, &v1, 3, false, secs(15), &p);
    let Step::Fault(fault) = step(&mut r, &v1, secs(15), &p) else {
        panic!("expected the fault");
    };
    assert_eq!(
        (fault.version, fault.attempts, fault.wanted),
        (1, 3, SaleStatus::OffSale)
    );
    assert_eq!(fault.last_error, "503");
    r = r.fault_published(1).unwrap();
    assert!(r.fault_published(1).is_none());
    assert!(matches!(
        step(&mut r, &v1, secs(100), &p),
        Step::Done(Settled::GaveUp { attempts: 3, .. })
    ));
    // The operator stays as it was; a newer change starts afresh.
    assert_eq!(r.status(), SaleStatus::OnSale);
    let v2 = change(2, BreakerState::HalfOpen);
    assert_eq!(
        step(&mut r, &v2, secs(100), &p),
        Step::Attempt { attempt: 1 }
    );
}

#[test]
fn a_given_up_write_starts_again_when_asked() {
    let p = policy(1);
    let mut record = SaleRecord::new(nordic());
    let v2 = change(2, BreakerState::Open);
    assert_eq!(
        step(&mut record, &v2, secs(0), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v2, 1, false, secs(0), &p);
    assert!(matches!(
        step(&mut record, &v2, secs(10), &p),
        Step::Fault(_)
    ));
    assert!(
        record.restart_given_up(3, secs(300)).is_none(),
        "not that version"
    );
    record = record.restart_given_up(2, secs(300)).unwrap();
    assert_eq!(
        step(&mut record, &v2, secs(300), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v2, 1, true, secs(300), &p);
    assert_eq!(
        (record.applied_version, record.status()),
        (2, SaleStatus::OffSale)
    );
    assert!(
        record.restart_given_up(2, secs(600)).is_none(),
        "nothing given up"
    );
}

#[test]
fn a_newer_change_supersedes_a_pending_retry() {
    let p = policy(8);
    let mut r = SaleRecord::new(nordic());
    let v5 = change(5, BreakerState::Open);
    let v6 = change(6, BreakerState::HalfOpen);
    step(&mut r, &v5, t0(), &p);
    finish(&mut r, &v5, 1, false, t0(), &p);
    assert_eq!(step(&mut r, &v6, secs(1), &p), Step::Attempt { attempt: 1 });
    assert_eq!(
        step(&mut r, &v5, secs(5), &p),
        Step::Done(Settled::Superseded { by: 6 })
    );
    finish(&mut r, &v6, 1, true, secs(1), &p);
    assert_eq!(
        step(&mut r, &v5, secs(5), &p),
        Step::Done(Settled::Outdated { applied: 6 })
    );
    assert_eq!((r.status(), r.wanted_version()), (SaleStatus::OnSale, 6));
}

#[test]
fn off_sale_waits_for_its_hold_and_a_recovery_meanwhile_writes_nothing() {
    let p = policy(8).with_off_sale_hold(Duration::from_secs(10));
    let mut record = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::Open);
    assert!(matches!(
        step(&mut record, &v1, secs(0), &p),
        Step::Wait { retry_at, why: Wait::NotDue { attempts: 0, .. } } if retry_at == secs(10)
    ));
    assert_eq!(
        step(&mut record, &v1, secs(10), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v1, 1, true, secs(10), &p);
    assert_eq!(record.status(), SaleStatus::OffSale);

    // Back on sale (no on-sale hold here), then a trip that heals
    // within the off-sale hold: nothing is written for it.
    let p = p.with_on_sale_hold(Duration::ZERO);
    let v3 = change(3, BreakerState::Closed);
    assert_eq!(
        step(&mut record, &v3, secs(20), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v3, 1, true, secs(20), &p);
    let v4 = change(4, BreakerState::Open);
    assert!(matches!(
        step(&mut record, &v4, secs(30), &p),
        Step::Wait { .. }
    ));
    let v6 = change(6, BreakerState::Closed);
    assert_eq!(
        step(&mut record, &v6, secs(35), &p),
        Step::Done(Settled::AlreadyHeld)
    );
    assert_eq!(record.status(), SaleStatus::OnSale);
}

#[test]
fn a_newer_version_wanting_the_same_status_keeps_the_hold() {
    // Open, then half-open and open again every few seconds (probes pass,
    // trials fail): each version still wants off sale, and the write is
    // made when the first version's hold ends, not pushed back each time.
    let p = policy(8).with_off_sale_hold(Duration::from_secs(10));
    let mut record = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::Open);
    assert!(matches!(
        step(&mut record, &v1, secs(0), &p),
        Step::Wait { .. }
    ));
    // Half-open, with operators back on sale only when closed.
    let v2 = SaleChange {
        status: SaleStatus::OffSale,
        ..change(2, BreakerState::HalfOpen)
    };
    assert!(matches!(
        step(&mut record, &v2, secs(4), &p),
        Step::Wait { retry_at, .. } if retry_at == secs(10)
    ));
    let v3 = change(3, BreakerState::Open);
    assert!(matches!(
        step(&mut record, &v3, secs(8), &p),
        Step::Wait { retry_at, .. } if retry_at == secs(10)
    ));
    assert_eq!(
        step(&mut record, &v3, secs(10), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v3, 1, true, secs(10), &p);
    assert_eq!(
        (record.status(), record.applied_version),
        (SaleStatus::OffSale, 3)
    );
}

#[test]
fn on_sale_waits_for_the_hold_and_a_new_trip_meanwhile_writes_nothing() {
    let p = policy(8).with_on_sale_hold(Duration::from_secs(60));
    let mut record = SaleRecord::new(nordic());
    // Off sale at once.
    let v1 = change(1, BreakerState::Open);
    assert_eq!(
        step(&mut record, &v1, secs(0), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v1, 1, true, secs(0), &p);
    assert_eq!(record.status(), SaleStatus::OffSale);
    // Closed at 30 s: the on-sale write waits until 90 s.
    let v3 = change(3, BreakerState::Closed);
    assert!(matches!(
        step(&mut record, &v3, secs(30), &p),
        Step::Wait { retry_at, why: Wait::NotDue { attempts: 0, .. } } if retry_at == secs(90)
    ));
    // Tripped again at 50 s: replaces the held write, and the switch
    // already holds off sale, so nothing is written.
    let v4 = change(4, BreakerState::Open);
    assert_eq!(
        step(&mut record, &v4, secs(50), &p),
        Step::Done(Settled::AlreadyHeld)
    );
    // The held change comes back at 90 s: outdated.
    assert!(matches!(
        step(&mut record, &v3, secs(90), &p),
        Step::Done(Settled::Outdated { applied: 4 })
    ));
    // Closed at 100 s and for good: written at 160 s, once.
    let v6 = change(6, BreakerState::Closed);
    assert!(matches!(
        step(&mut record, &v6, secs(100), &p),
        Step::Wait { .. }
    ));
    assert!(matches!(
        step(&mut record, &v6, secs(159), &p),
        Step::Wait { .. }
    ));
    assert_eq!(
        step(&mut record, &v6, secs(160), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut record, &v6, 1, true, secs(160), &p);
    assert_eq!(record.status(), SaleStatus::OnSale);
    assert_eq!(record.applied_version, 6);
}

#[test]
fn one_write_in_flight_per_operator() {
    let p = policy(8);
    let mut r = SaleRecord::new(nordic());
    let v5 = change(5, BreakerState::Open);
    let v6 = change(6, BreakerState::Closed);
    assert_eq!(step(&mut r, &v5, t0(), &p), Step::Attempt { attempt: 1 });
    // v6 is wanted at once but waits for v5's write to end.
    assert!(matches!(
        step(&mut r, &v6, t0(), &p),
        Step::Wait { retry_at, why: Wait::WriteInFlight { version: 5, attempt: 1 } }
            if retry_at == secs(1)
    ));
    assert_eq!(r.pending.as_ref().unwrap().version, 6);
    // v5 landed: the switch holds it, v6 is still owed.
    finish(&mut r, &v5, 1, true, t0(), &p);
    assert_eq!((r.applied_version, r.wanted_version()), (5, 6));
    assert_eq!(step(&mut r, &v6, secs(1), &p), Step::Attempt { attempt: 1 });
    finish(&mut r, &v6, 1, true, secs(1), &p);
    assert_eq!((r.applied_version, r.status()), (6, SaleStatus::OnSale));
}

#[test]
fn a_lost_attempt_counts_and_the_next_one_follows_its_lease() {
    let p = policy(2);
    let mut r = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::Open);
    assert_eq!(step(&mut r, &v1, t0(), &p), Step::Attempt { attempt: 1 });
    // The listener stopped; until the lease runs out nobody writes.
    assert!(matches!(step(&mut r, &v1, secs(14), &p), Step::Wait { .. }));
    assert_eq!(
        step(&mut r, &v1, secs(15), &p),
        Step::Attempt { attempt: 2 }
    );
    assert!(
        r.pending
            .as_ref()
            .unwrap()
            .last_error
            .as_deref()
            .unwrap()
            .contains("attempt 1 did not finish")
    );
    // The last attempt is lost too: give up once its lease runs out.
    let Step::Fault(fault) = step(&mut r, &v1, secs(30), &p) else {
        panic!("expected the fault");
    };
    assert_eq!(fault.attempts, 2);
    assert!(fault.last_error.contains("attempt 2 did not finish"));
}

#[test]
fn records_round_trip_through_serde() {
    let p = policy(8);
    let mut r = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::ForcedOpen);
    step(&mut r, &v1, t0(), &p);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["pending"]["status"], "off_sale");
    assert_eq!(serde_json::from_value::<SaleRecord>(json).unwrap(), r);
}

#[tokio::test]
async fn the_store_saves_only_on_the_revision_it_was_read_at() {
    let store = MemorySaleStatusStore::new();
    let mut r = SaleRecord::new(nordic());
    r.revision = 1;
    store.save(&r, None).await.unwrap();
    assert!(matches!(
        store.save(&r, None).await,
        Err(StoreError::Conflict(_))
    ));
    r.revision = 2;
    store.save(&r, Some(1)).await.unwrap();
    assert!(store.save(&r, Some(1)).await.is_err());
    assert_eq!(store.load(&nordic()).await.unwrap().unwrap().revision, 2);
    assert_eq!(store.all().len(), 1);
}

#[tokio::test]
async fn the_memory_switch_fails_then_recovers() {
    let clock = Arc::new(ManualClock::new(t0()));
    let switch = MemorySaleSwitch::new(clock);
    switch.fail_next(1);
    let err = switch
        .set(&nordic(), SaleStatus::OffSale, 1)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "sale switch answered 503 Service Unavailable"
    );
    assert_eq!(switch.status(&nordic()), SaleStatus::OnSale);
    switch.set(&nordic(), SaleStatus::OffSale, 1).await.unwrap();
    assert_eq!(switch.status(&nordic()), SaleStatus::OffSale);
    assert_eq!(switch.writes().len(), 2);
}

#[tokio::test]
async fn the_memory_queue_hides_redelivers_and_deletes() {
    let clock = ManualClock::new(t0());
    let queue = MemoryQueue::new(Arc::new(clock.clone()), Duration::from_secs(30));
    let id = queue.send("hello");
    let first = queue.receive(10);
    assert_eq!(first.len(), 1);
    assert!(queue.receive(10).is_empty());
    let handle = MessageHandle {
        queue_arn: None,
        message_id: id.clone(),
        receipt_handle: first[0].receipt_handle.clone(),
    };
    queue
        .redeliver_after(&handle, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(queue.next_visible_at(), Some(secs(5)));
    clock.advance(Duration::from_secs(5));
    let second = queue.receive(10);
    assert_eq!(second[0].receive_count, 2);
    // The old receipt no longer works.
    assert!(!queue.delete(&first[0].receipt_handle));
    assert!(
        queue
            .redeliver_after(&handle, Duration::ZERO)
            .await
            .is_err()
    );
    assert!(queue.delete(&second[0].receipt_handle));
    assert!(queue.is_empty());
}

#[test]
fn an_unconfirmed_attempt_is_remembered_past_the_version_that_replaces_it() {
    // On sale (v1). Off sale wanted (v2): its attempt reaches the switch but
    // is never confirmed (the listener's save after the write failed).
    // Another open (v3) replaces v2 before its retry, then a close (v4):
    // the switch may hold off sale, so v4 is written, not assumed held.
    let p = policy(8);
    let mut r = SaleRecord::new(nordic());
    let v1 = change(1, BreakerState::Closed);
    step(&mut r, &v1, secs(0), &p);
    finish(&mut r, &v1, 1, true, secs(0), &p);
    let v2 = change(2, BreakerState::Open);
    assert_eq!(step(&mut r, &v2, secs(1), &p), Step::Attempt { attempt: 1 });
    assert!(!r.switch_unknown);
    let v3 = change(3, BreakerState::Open);
    // v2's lease still runs: v3 waits, and now carries v2's doubt.
    assert!(matches!(step(&mut r, &v3, secs(2), &p), Step::Wait { .. }));
    assert!(r.switch_unknown);
    assert_eq!(r.pending.as_ref().map(|p| p.attempts), Some(0));
    let v4 = change(4, BreakerState::Closed);
    assert_eq!(
        step(&mut r, &v4, secs(30), &p),
        Step::Attempt { attempt: 1 }
    );
    finish(&mut r, &v4, 1, true, secs(30), &p);
    assert!(!r.switch_unknown, "a confirmed write settles the doubt");
    assert_eq!((r.applied_version, r.status()), (4, SaleStatus::OnSale));
    // Known again: a newer close needs no write.
    let v6 = change(6, BreakerState::Closed);
    assert_eq!(
        step(&mut r, &v6, secs(31), &p),
        Step::Done(Settled::AlreadyHeld)
    );
}
