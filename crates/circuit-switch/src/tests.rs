//! The switch's tests: inputs on in-memory stores, a manual clock and the
//! memory stream router.

use super::*;
use chrono::{DateTime, TimeDelta};
use lifeboat_core::ManualClock;
use lifeboat_core::Operation;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryEventBus, MemoryStreamRouter, MemoryTimers, MemoryWindowStore,
};
use lifeboat_core::ports::{BreakerStore, Repoint, StreamRouter};
use lifeboat_core::probe::BreakerTimer;
use lifeboat_core::request::Health;
use lifeboat_core::settings::Parallelization;
use lifeboat_core::{BreakerRecord, BreakerState, ConsumerTarget};
use serde_json::{Value, json};
use std::collections::BTreeMap;

struct World {
    switch: Arc<CircuitSwitch>,
    breakers: Arc<MemoryBreakerStore>,
    /// The failure window the consumers write.
    window: Arc<MemoryWindowStore>,
    events: Arc<MemoryEventBus>,
    router: Arc<MemoryStreamRouter>,
    clock: ManualClock,
    metrics: Arc<lifeboat_core::memory::MemoryMetrics>,
}

fn start() -> DateTime<chrono::Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

fn world() -> World {
    let breakers = Arc::new(MemoryBreakerStore::new());
    let events = Arc::new(MemoryEventBus::new());
    let router = Arc::new(MemoryStreamRouter::new());
    let clock = ManualClock::new(start());
    let metrics = Arc::new(lifeboat_core::memory::MemoryMetrics::new());
    let window = Arc::new(MemoryWindowStore::new());
    let switch = Arc::new(
        CircuitSwitch::new(
            SwitchPorts {
                breakers: breakers.clone(),
                windows: window.clone(),
                events: events.clone(),
                lanes: Lanes::shared(SHARED_LANE, vec![nordic()], router.clone()),
                clock: Arc::new(clock.clone()),
                metrics: metrics.clone(),
            },
            Settings::default(),
            vec![OperatorId::new("nordic").unwrap()],
        )
        .with_alarms(AlarmMap::parse("lifeboat-nordic-errors=nordic").unwrap())
        .with_repoint_backoff(Duration::ZERO),
    );
    World {
        switch,
        breakers,
        window,
        events,
        router,
        clock,
        metrics,
    }
}

/// `operators` failing every call in the window the consumers write, as
/// when a trip request or an alarm is real: ten timeouts in the bucket of
/// now, which the switch reads before it opens a closed breaker.
async fn failing(w: &World, operators: &[OperatorId]) {
    in_window(w, operators, Health::Timeout, 10).await;
}

/// `n` calls of `health` in the window the consumers write, for each of
/// `operators`, in the bucket of now.
async fn in_window(w: &World, operators: &[OperatorId], health: Health, n: u32) {
    let mut counts = lifeboat_core::window::CallCounts::default();
    for _ in 0..n {
        counts.record(health);
    }
    let now = w.clock.now();
    for operator in operators {
        let bucket = Settings::default()
            .for_operator(operator)
            .window
            .bucket_start(now);
        w.window.add(operator, bucket, &counts).await.unwrap();
    }
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn trip(version: u64) -> Value {
    json!({
        "version": "0", "id": "e1", "detail-type": "Trip Requested", "source": "lifeboat",
        "account": "123456789012", "time": "2026-11-30T12:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {"schema_version": 1, "operator": "nordic", "observed_version": version,
                   "reason": {"kind": "window", "verdict": {"rule": "consecutive_timeouts", "count": 5}},
                   "at": "2026-11-30T12:00:00Z"}
    })
}

fn tick() -> Value {
    json!({"version": "0", "id": "t", "detail-type": "Scheduled Event", "source": "aws.events",
           "account": "123456789012", "time": "2026-11-30T12:00:00Z", "region": "us-east-1",
           "resources": ["arn:aws:events:us-east-1:123456789012:rule/tick"], "detail": {}})
}

fn alarm_action(state: &str, at: &str) -> Value {
    json!({"source": "aws.cloudwatch", "alarmArn": "arn:aws:cloudwatch:us-east-1:123456789012:alarm:lifeboat-nordic-errors",
           "accountId": "123456789012", "time": at, "region": "us-east-1",
           "alarmData": {"alarmName": "lifeboat-nordic-errors",
                         "state": {"value": state, "reason": "threshold crossed", "timestamp": at},
                         "previousState": {"value": "OK", "reason": "", "timestamp": at}}})
}

fn alarm_event(state: &str, at: &str) -> Value {
    json!({"version": "0", "id": "a", "detail-type": "CloudWatch Alarm State Change", "source": "aws.cloudwatch",
           "account": "123456789012", "time": at, "region": "us-east-1",
           "resources": ["arn:aws:cloudwatch:us-east-1:123456789012:alarm:lifeboat-nordic-errors"],
           "detail": {"alarmName": "lifeboat-nordic-errors", "state": {"value": state, "timestamp": at},
                      "previousState": {"value": "OK", "timestamp": at}}})
}

fn state_changes(events: &MemoryEventBus) -> Vec<(BreakerState, BreakerState, u64)> {
    events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            LifeboatEvent::BreakerStateChanged(c) => Some((c.from, c.to, c.version)),
            _ => None,
        })
        .collect()
}

async fn state(w: &World) -> BreakerRecord {
    w.breakers.load(&nordic()).await.unwrap().unwrap()
}

#[tokio::test]
async fn a_trip_opens_repoints_and_announces_once() {
    let w = world();
    failing(&w, &[nordic()]).await;
    let report = w.switch.handle(&trip(0)).await.unwrap();
    assert!(report.decisions[0].changed);
    assert_eq!(
        report.target_of(SHARED_LANE),
        Some(ConsumerTarget::Fallback)
    );
    assert!(report.repointed());
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Fallback);
    let record = state(&w).await;
    assert_eq!(
        (record.state, record.version, record.announced_version),
        (BreakerState::Open, 1, 1)
    );

    // The same event again changes nothing and announces nothing.
    failing(&w, &[nordic()]).await;
    let again = w.switch.handle(&trip(0)).await.unwrap();
    assert!(!again.decisions[0].changed);
    assert!(!again.repointed());
    assert_eq!(
        state_changes(&w.events),
        vec![(BreakerState::Closed, BreakerState::Open, 1)]
    );

    // Both invocations drew the state: open (2) with its name.
    let open = w.metrics.sum(
        lifeboat_core::metrics::names::BREAKER_STATE,
        &[("Operator", "nordic"), ("State", "open")],
    );
    assert_eq!((open, w.metrics.lines().len()), (4.0, 2));
}

#[tokio::test]
async fn recovery_goes_through_half_open_and_points_back() {
    let w = world();
    failing(&w, &[nordic()]).await;
    w.switch.handle(&trip(0)).await.unwrap();
    // An OK alarm while open does not close it.
    w.switch
        .handle(&alarm_event("OK", "2026-11-30T12:00:05.000+0000"))
        .await
        .unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Open);
    // A tick before the open period ends changes nothing.
    w.clock.advance(Duration::from_secs(5));
    w.switch.handle(&tick()).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Open);
    w.clock.advance(Duration::from_secs(30));
    let report = w.switch.handle(&tick()).await.unwrap();
    assert_eq!(report.target_of(SHARED_LANE), Some(ConsumerTarget::Real));
    let half = state(&w).await;
    assert_eq!(half.state, BreakerState::HalfOpen);
    // Trials counted by the consumers, then reported.
    assert!(
        w.breakers
            .claim_trial(&nordic(), half.version, 3)
            .await
            .unwrap()
    );
    assert!(
        w.breakers
            .claim_trial(&nordic(), half.version, 3)
            .await
            .unwrap()
    );
    w.breakers
        .record_trial(&nordic(), half.version, lifeboat_core::ports::Trial::Passed)
        .await
        .unwrap();
    w.breakers
        .record_trial(&nordic(), half.version, lifeboat_core::ports::Trial::Passed)
        .await
        .unwrap();
    let passed = json!({"detail-type": "Trials Passed", "source": "lifeboat",
        "detail": {"schema_version": 1, "operator": "nordic", "observed_version": half.version, "successes": 2,
                   "at": "2026-11-30T12:00:40Z"}});
    w.switch.handle(&passed).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Closed);
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
    assert_eq!(
        state_changes(&w.events),
        vec![
            (BreakerState::Closed, BreakerState::Open, 1),
            (BreakerState::Open, BreakerState::HalfOpen, 2),
            (BreakerState::HalfOpen, BreakerState::Closed, 3)
        ]
    );
    // The trip request from before the outage, delivered late, is ignored.
    failing(&w, &[nordic()]).await;
    w.switch.handle(&trip(0)).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Closed);
}

#[tokio::test]
async fn both_alarm_shapes_open_and_a_late_alarm_does_not_reopen() {
    for payload in [
        alarm_action("ALARM", "2026-11-30T12:00:00.000+0000"),
        alarm_event("ALARM", "2026-11-30T12:00:00.000+0000"),
    ] {
        let w = world();
        // The alarm fired a while ago; the breaker was never stored: it opens.
        w.clock
            .set(DateTime::from_timestamp(1_796_100_000, 0).unwrap());
        failing(&w, &[nordic()]).await;
        let report = w.switch.handle(&payload).await.unwrap();
        assert!(report.decisions[0].changed, "{payload}");
        assert_eq!(state(&w).await.state, BreakerState::Open);
    }
    // An alarm older than the current state is ignored.
    let w = world();
    w.switch
        .handle(&json!({"command": "force-closed", "operator": "nordic", "reason": "test"}))
        .await
        .unwrap();
    w.switch
        .handle(&json!({"command": "release", "operator": "nordic", "reason": "test"}))
        .await
        .unwrap();
    let old = (start() - TimeDelta::hours(1))
        .format("%Y-%m-%dT%H:%M:%S%.3f+0000")
        .to_string();
    let report = w.switch.handle(&alarm_action("ALARM", &old)).await.unwrap();
    assert!(!report.decisions[0].changed);
}

#[tokio::test]
async fn commands_pin_and_release() {
    let w = world();
    let cmd = |c: &str| {
        json!({"command": c, "operator": "nordic", "reason": "supplier maintenance",
               "caller": "arn:aws:sts::123456789012:assumed-role/oncall/alice"})
    };
    w.switch.handle(&cmd("force-open")).await.unwrap();
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Fallback);
    // Who sent it is kept with the reason, in the record and its event.
    let signed =
        "force-open by arn:aws:sts::123456789012:assumed-role/oncall/alice: supplier maintenance";
    assert_eq!(state(&w).await.reason, signed);
    assert!(
        w.events
            .events()
            .iter()
            .any(|e| matches!(e, LifeboatEvent::BreakerStateChanged(c) if c.reason == signed))
    );
    w.clock.advance(Duration::from_secs(3600));
    w.switch.handle(&tick()).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::ForcedOpen);
    assert!(state(&w).await.reason.contains("supplier maintenance"));
    w.switch.handle(&cmd("release")).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::HalfOpen);
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
}

#[tokio::test]
async fn concurrent_switches_make_one_transition() {
    let w = world();
    failing(&w, &[nordic()]).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let switch = w.switch.clone();
        tasks.push(tokio::spawn(async move {
            switch.handle(&trip(0)).await.unwrap()
        }));
    }
    let mut changed = 0;
    for t in tasks {
        changed += t
            .await
            .unwrap()
            .decisions
            .iter()
            .filter(|d| d.changed)
            .count();
    }
    assert_eq!(changed, 1);
    assert_eq!(state(&w).await.version, 1);
    assert_eq!(state_changes(&w.events).len(), 1);
}

/// A stream router on which another switch invocation runs to the end
/// just before the first re-point to `slow_target` lands: the
/// interleaving of two switches on AWS, where `UpdateEventSourceMapping`
/// calls land in any order.
struct OvertakenRouter {
    inner: Arc<MemoryStreamRouter>,
    slow_target: ConsumerTarget,
    overtaker: std::sync::Mutex<Option<(Arc<CircuitSwitch>, Value)>>,
}

#[async_trait::async_trait]
impl StreamRouter for OvertakenRouter {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        self.inner.current().await
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        let overtaker = if target == self.slow_target {
            self.overtaker.lock().unwrap().take()
        } else {
            None
        };
        if let Some((switch, payload)) = overtaker {
            switch.handle(&payload).await.unwrap();
        }
        self.inner.point_at(target).await
    }
}

#[tokio::test]
async fn a_re_point_from_a_stale_read_is_put_right() {
    // Switch B (on the plain router) forces the breaker closed and points
    // the stream at the real consumer while switch A, which read the
    // breaker open, is still re-pointing at the fallback; A's re-point
    // lands last.
    let w = world();
    let overtaking = switch_like(&w);
    let slow = CircuitSwitch {
        lanes: Lanes::shared(
            SHARED_LANE,
            vec![nordic()],
            Arc::new(OvertakenRouter {
                inner: w.router.clone(),
                slow_target: ConsumerTarget::Fallback,
                overtaker: std::sync::Mutex::new(Some((
                    Arc::new(overtaking),
                    json!({"command": "force-closed", "operator": "nordic", "reason": "operator says it is fine"}),
                ))),
            }),
        ),
        ..switch_like(&w)
    };
    failing(&w, &[nordic()]).await;
    let report = slow.handle(&trip(0)).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::ForcedClosed);
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
    assert_eq!(report.target_of(SHARED_LANE), Some(ConsumerTarget::Real));
    // The newest state was announced once (the record holds only the
    // newest; the opening it replaced before anyone announced it is in
    // the store's history, not on the bus).
    assert_eq!(
        state_changes(&w.events),
        vec![(BreakerState::Open, BreakerState::ForcedClosed, 2)]
    );
}

/// A mapping that cannot be reached.
struct BrokenRouter;

#[async_trait::async_trait]
impl StreamRouter for BrokenRouter {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        Err(RouterError::Unavailable("throttled".into()))
    }

    async fn point_at(&self, _: ConsumerTarget) -> Result<Repoint, RouterError> {
        Err(RouterError::Unavailable("throttled".into()))
    }
}

#[tokio::test]
async fn with_a_lane_per_operator_only_the_tripped_operator_moves() {
    let w = world();
    let (alpha, bravo, charlie) = (
        OperatorId::new("alpha").unwrap(),
        OperatorId::new("bravo").unwrap(),
        OperatorId::new("charlie").unwrap(),
    );
    let (alpha_lane, bravo_lane) = (
        Arc::new(MemoryStreamRouter::new()),
        Arc::new(MemoryStreamRouter::new()),
    );
    let routers: [(OperatorId, Arc<dyn StreamRouter>); 3] = [
        (alpha.clone(), alpha_lane.clone()),
        (bravo.clone(), bravo_lane.clone()),
        (charlie.clone(), Arc::new(BrokenRouter)),
    ];
    let switch = CircuitSwitch {
        lanes: Lanes::per_operator(routers),
        operators: vec![alpha.clone(), bravo.clone(), charlie.clone()],
        ..switch_like(&w)
    };
    let trip = |operator: &str| {
        let mut event = trip(0);
        event["detail"]["operator"] = json!(operator);
        event
    };
    failing(&w, &[alpha.clone(), charlie.clone()]).await;
    let report = switch.handle(&trip("alpha")).await.unwrap();
    assert_eq!(report.target_of("alpha"), Some(ConsumerTarget::Fallback));
    assert_eq!(report.streams.len(), 1, "only alpha's lane is reconciled");
    assert_eq!(
        alpha_lane.current().await.unwrap(),
        ConsumerTarget::Fallback
    );
    assert_eq!(bravo_lane.current().await.unwrap(), ConsumerTarget::Real);

    // Charlie's mapping is unreachable: its trip is saved and announced,
    // the error returned, and the next tick still reconciles the others.
    let failed = switch.handle(&trip("charlie")).await;
    assert!(matches!(failed, Err(SwitchError::Router(_))), "{failed:?}");
    let announced: Vec<OperatorId> = w
        .events
        .events()
        .iter()
        .filter_map(|e| match e {
            LifeboatEvent::BreakerStateChanged(c) => Some(c.operator.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(announced, vec![alpha.clone(), charlie.clone()]);
    // The tick reports charlie's lane and still handles the others.
    let tick = switch.handle(&tick()).await.unwrap();
    assert_eq!(tick.decisions.len(), 3, "{tick:?}");
    assert_eq!(
        tick.skipped
            .iter()
            .map(|s| s.lane.clone())
            .collect::<Vec<_>>(),
        vec![Some("charlie".to_owned())],
        "{tick:?}"
    );
    assert_eq!(
        alpha_lane.current().await.unwrap(),
        ConsumerTarget::Fallback
    );
    assert_eq!(bravo_lane.current().await.unwrap(), ConsumerTarget::Real);
}

#[tokio::test]
async fn inputs_for_operators_not_served_are_refused() {
    let w = world();
    let mut forged = trip(0);
    forged["detail"]["operator"] = json!("zzz");
    let err = w.switch.handle(&forged).await.unwrap_err();
    assert!(matches!(err, SwitchError::UnknownOperator(_)), "{err}");
    assert_eq!(Diagnostic::from(err).error_type, "UnknownOperator");
    let command = json!({"command": "force-open", "operator": "zzz", "reason": "test"});
    assert!(w.switch.handle(&command).await.is_err());
    // Nothing was stored for it, and the tick never sees it.
    let zzz = OperatorId::new("zzz").unwrap();
    assert_eq!(w.breakers.load(&zzz).await.unwrap(), None);
    let report = w.switch.handle(&tick()).await.unwrap();
    assert_eq!(report.decisions.len(), 1);
    assert_eq!(report.decisions[0].operator, nordic());
}

/// The switch with timers and the simulated operator as its prober, the
/// operator refusing every call from `start()` for `outage`, probed with the
/// probe its settings name.
fn probing_world(outage: Duration) -> (World, Arc<CircuitSwitch>, Arc<MemoryTimers>) {
    world_probed_with(outage, probed())
}

/// The default settings with a search as every operator's probe.
fn probed() -> Settings {
    let mut settings = Settings::default();
    settings.default.probe = Some(
        serde_json::from_value(json!({"operation": "search",
            "params": {"from": "HEL", "to": "TLL", "date": "today+7", "passengers": "1"}}))
        .unwrap(),
    );
    settings
}

/// A switch over `w`'s nordic, probed on `timers` by `prober`.
fn probed_by(w: &World, timers: &Arc<MemoryTimers>, prober: Answering) -> CircuitSwitch {
    CircuitSwitch {
        settings: probed(),
        timers: Some(timers.clone()),
        prober: Some(Arc::new(prober)),
        ..switch_like(w)
    }
}

fn world_probed_with(
    outage: Duration,
    settings: Settings,
) -> (World, Arc<CircuitSwitch>, Arc<MemoryTimers>) {
    let w = world();
    let timers = Arc::new(MemoryTimers::new());
    let operator = lifeboat_operator::SimulatedOperator::new(
        nordic(),
        lifeboat_operator::SimConfig {
            outages: vec![lifeboat_operator::Outage {
                start: start(),
                end: start() + TimeDelta::from_std(outage).unwrap(),
                mode: lifeboat_operator::OutageMode::Refuse,
            }],
            ..lifeboat_operator::SimConfig::default()
        },
        Arc::new(w.clock.clone()),
    );
    let switch = Arc::new(CircuitSwitch {
        settings,
        timers: Some(timers.clone()),
        prober: Some(Arc::new(operator)),
        ..switch_like(&w)
    });
    (w, switch, timers)
}

fn timer_batch(timers: &[BreakerTimer]) -> Value {
    json!({"Records": timers.iter().enumerate().map(|(i, t)| json!({
        "eventSource": "aws:sqs", "messageId": format!("m{i}"),
        "body": serde_json::to_string(t).unwrap()
    })).collect::<Vec<_>>()})
}

#[tokio::test(start_paused = true)]
async fn probes_close_the_breaker_within_seconds_of_the_operator_coming_back() {
    // Down for 95 s: the open period (30 s, then doubling) would keep the
    // breaker open well past that; one probe per 10 s finds it back.
    let (w, switch, timers) = probing_world(Duration::from_secs(95));
    recovers_within_ten_seconds(w, switch, timers).await;
}

#[tokio::test(start_paused = true)]
async fn with_no_probe_configured_the_last_answered_question_is_the_probe() {
    // The template's defaults: no probe in OPERATOR_SETTINGS. The real
    // consumer kept the last search the operator answered; the switch asks
    // it again, as often as a configured probe.
    let (w, switch, timers) = world_probed_with(Duration::from_secs(95), Settings::default());
    let params = [
        ("from", "HEL"),
        ("to", "TLL"),
        ("date", "2027-01-10"),
        ("passengers", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let question =
        lifeboat_core::probe::ProbeSpec::remembered(Operation::Search, &params, start()).unwrap();
    w.breakers
        .remember_answered(&nordic(), &question, start())
        .await
        .unwrap();
    recovers_within_ten_seconds(w, switch, timers).await;
}

#[tokio::test]
async fn with_no_probe_and_nothing_answered_the_open_period_runs_out() {
    let (w, switch, timers) = world_probed_with(Duration::from_secs(95), Settings::default());
    failing(&w, &[nordic()]).await;
    switch.handle(&trip(0)).await.unwrap();
    let open = state(&w).await;
    assert_eq!(timers.next_due(), open.open_until, "no probe timers");
}

async fn recovers_within_ten_seconds(
    w: World,
    switch: Arc<CircuitSwitch>,
    timers: Arc<MemoryTimers>,
) {
    failing(&w, &[nordic()]).await;
    switch.handle(&trip(0)).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Open);
    let mut probes = Vec::new();
    for _ in 0..30 {
        let Some(due) = timers.next_due() else { break };
        w.clock.set(due);
        let batch = timers.take_due(due);
        assert_eq!(batch.len(), 1, "one timer per breaker at a time");
        let report = switch.handle(&timer_batch(&batch)).await.unwrap();
        if report.probe_calls > 0 {
            probes.push((due, report.probe_calls));
        }
        if state(&w).await.state == BreakerState::Closed {
            break;
        }
    }
    let closed = state(&w).await;
    assert_eq!(closed.state, BreakerState::Closed, "{closed:?}");
    let back = start() + TimeDelta::seconds(95);
    let recovery = (closed.since - back).num_milliseconds() as f64 / 1000.0;
    eprintln!(
        "probes: operator back -> closed {recovery:.1} s; probe calls {} ({} while down, over {:.0} s)",
        probes.iter().map(|(_, n)| n).sum::<u32>(),
        probes.iter().filter(|(at, _)| *at < back).count(),
        (back - start()).num_seconds()
    );
    assert!(
        recovery <= 10.0,
        "closed {recovery} s after the operator came back"
    );
    // While down: at most one probe call per 10 s (the half-open rounds
    // the open period's end starts make one trial call that fails).
    let while_down: Vec<_> = probes.iter().filter(|(at, _)| *at < back).collect();
    for pair in while_down.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 >= TimeDelta::seconds(10),
            "{probes:?}"
        );
    }
    assert!(
        while_down.iter().all(|(_, calls)| *calls == 1),
        "{probes:?}"
    );
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);
    assert_eq!(timers.next_due(), None, "nothing left to wake for");
}

#[tokio::test(start_paused = true)]
async fn a_duplicated_timer_probes_once_and_leaves_one_timer() {
    // Down for ten minutes: every timer is a probe that fails.
    let (w, switch, timers) = probing_world(Duration::from_secs(600));
    failing(&w, &[nordic()]).await;
    switch.handle(&trip(0)).await.unwrap();
    let mut due = timers.next_due().unwrap();
    for _ in 0..5 {
        w.clock.set(due);
        let batch = timers.take_due(due);
        assert_eq!(batch.len(), 1, "one timer per breaker at a time");
        // Delivered twice (SQS delivers at least once): two invocations,
        // and the duplicate a second later.
        let first = switch.handle(&timer_batch(&batch)).await.unwrap();
        w.clock.set(due + TimeDelta::seconds(1));
        let again = switch.handle(&timer_batch(&batch)).await.unwrap();
        assert_eq!((first.probe_calls, again.probe_calls), (1, 0));
        let next = timers.next_due().unwrap();
        assert!(next - due >= TimeDelta::seconds(10), "{next} after {due}");
        assert_eq!(timers.take_due(next).len(), 1, "the duplicate set no timer");
        // Put the one timer back, as SQS would hold it.
        switch.arm(&state(&w).await).await;
        due = timers.next_due().unwrap();
    }
    assert_eq!(state(&w).await.state, BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn the_tick_takes_over_a_lost_probe_timer() {
    // Down for ten minutes, its open period long; the probe timer is lost.
    let (w, switch, timers) = probing_world(Duration::from_secs(600));
    failing(&w, &[nordic()]).await;
    switch.handle(&trip(0)).await.unwrap();
    let first = timers.next_due().unwrap();
    assert_eq!(timers.take_due(first).len(), 1, "the timer, lost");
    // One gap on: not overdue yet, the tick leaves it to its timer.
    w.clock.set(start() + TimeDelta::seconds(15));
    let report = switch.handle(&tick()).await.unwrap();
    assert_eq!(timers.next_due(), None, "{:?}", report.decisions);
    // Two gaps and more: the tick sets the timer again, a gap on.
    w.clock.set(start() + TimeDelta::seconds(25));
    let report = switch.handle(&tick()).await.unwrap();
    assert!(
        report.decisions[0].reason.contains("overdue"),
        "{:?}",
        report.decisions
    );
    let due = timers.next_due().expect("the tick set the timer again");
    assert!(due <= w.clock.now() + TimeDelta::seconds(10), "{due}");
    // The chain goes on from there: the timer probes and sets the next.
    w.clock.set(due);
    let batch = timers.take_due(due);
    let probed = switch.handle(&timer_batch(&batch)).await.unwrap();
    assert_eq!(probed.probe_calls, 1);
    assert!(timers.next_due().is_some(), "the next probe's timer");
    assert_eq!(state(&w).await.state, BreakerState::Open);
}

#[tokio::test]
async fn without_probes_the_timer_ends_the_open_period_to_the_second() {
    let w = world();
    let timers = Arc::new(MemoryTimers::new());
    let switch = CircuitSwitch {
        timers: Some(timers.clone()),
        ..switch_like(&w)
    };
    failing(&w, &[nordic()]).await;
    switch.handle(&trip(0)).await.unwrap();
    let open = state(&w).await;
    let due = timers.next_due().unwrap();
    assert_eq!(Some(due), open.open_until);
    // Early (a duplicate delivered before its delay): set again, no change.
    let early = BreakerTimer {
        operator: nordic(),
        version: open.version,
        due,
    };
    let report = switch
        .handle(&timer_batch(std::slice::from_ref(&early)))
        .await
        .unwrap();
    assert!(report.decisions.is_empty());
    w.clock.set(due);
    timers.take_due(due);
    let report = switch
        .handle(&timer_batch(std::slice::from_ref(&early)))
        .await
        .unwrap();
    assert_eq!(report.decisions[0].to, BreakerState::HalfOpen);
    // The half-open round's own timer, and a stale one that is dropped.
    assert!(timers.next_due().is_some());
    let report = switch.handle(&timer_batch(&[early])).await.unwrap();
    assert!(report.decisions.is_empty());
    // A body that is no timer is dropped, not retried; a timer of an
    // operator not served neither.
    let junk = json!({"Records": [
        {"eventSource": "aws:sqs", "messageId": "j", "body": "hello"},
        {"eventSource": "aws:sqs", "messageId": "z",
         "body": r#"{"operator": "zzz", "version": 1, "due": "2026-12-01T00:00:00Z"}"#}
    ]});
    let report = switch.handle(&junk).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
}

fn switch_like(w: &World) -> CircuitSwitch {
    CircuitSwitch::new(
        SwitchPorts {
            breakers: w.breakers.clone(),
            windows: w.window.clone(),
            events: w.events.clone(),
            lanes: Lanes::shared(SHARED_LANE, vec![nordic()], w.router.clone()),
            clock: Arc::new(w.clock.clone()),
            metrics: w.metrics.clone(),
        },
        Settings::default(),
        vec![nordic()],
    )
    .with_repoint_backoff(Duration::ZERO)
}

#[tokio::test]
async fn bad_payloads_are_clear_errors() {
    let w = world();
    let unknown = alarm_action("ALARM", "2026-11-30T12:00:00.000+0000");
    let mut unknown = unknown;
    unknown["alarmData"]["alarmName"] = json!("someone-elses-alarm");
    let err = w.switch.handle(&unknown).await.unwrap_err();
    assert!(err.to_string().contains("ALARM_OPERATORS"), "{err}");
    assert!(w.switch.handle(&json!({"foo": "bar"})).await.is_err());
    let diagnostic: Diagnostic = w.switch.handle(&json!([1, 2])).await.unwrap_err().into();
    assert_eq!(diagnostic.error_type, "BadInput");
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn every_fixture_payload_is_understood() {
    // Each alarm shape opens a fresh breaker.
    for name in [
        "cloudwatch-alarm-state-change.json",
        "cloudwatch-alarm-lambda-action.json",
    ] {
        let w = world();
        w.clock
            .set(DateTime::from_timestamp(1_796_033_760, 0).unwrap());
        failing(&w, &[nordic()]).await;
        let report = w.switch.handle(&fixture(name)).await.unwrap();
        assert_eq!(report.decisions[0].to, BreakerState::Open, "{name}");
    }
    // A trip, a tick after the open period, trials, and a command, in order.
    let w = world();
    failing(&w, &[nordic()]).await;
    w.switch
        .handle(&fixture("trip-requested.json"))
        .await
        .unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Open);
    w.clock.advance(Duration::from_secs(31));
    w.switch
        .handle(&fixture("schedule-tick.json"))
        .await
        .unwrap();
    let half = state(&w).await;
    assert_eq!(half.state, BreakerState::HalfOpen);
    let mut passed = fixture("trials-passed.json");
    passed["detail"]["observed_version"] = half.version.into();
    w.breakers
        .record_trial(&nordic(), half.version, lifeboat_core::ports::Trial::Passed)
        .await
        .unwrap();
    w.breakers
        .record_trial(&nordic(), half.version, lifeboat_core::ports::Trial::Passed)
        .await
        .unwrap();
    w.switch.handle(&passed).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Closed);
    // The timer of version 1, long stale: dropped, acknowledged.
    let report = w
        .switch
        .handle(&fixture("sqs-breaker-timer.json"))
        .await
        .unwrap();
    assert!(report.decisions.is_empty());
    assert!(report.response.batch_item_failures.is_empty());
    w.switch
        .handle(&fixture("operator-command.json"))
        .await
        .unwrap();
    let forced = state(&w).await;
    assert_eq!(forced.state, BreakerState::ForcedOpen);
    assert!(forced.reason.contains("maintenance window"));
}

/// A mapping that counts the control-plane calls the AWS router would make
/// for it (a read per `point_at`, an update when it moves), and can be
/// broken.
#[derive(Default)]
struct CountedRouter {
    inner: MemoryStreamRouter,
    calls: std::sync::atomic::AtomicU64,
    broken: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl StreamRouter for CountedRouter {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.current().await
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(RouterError::Throttled("TooManyRequestsException".into()));
        }
        let repoint = self.inner.point_at(target).await?;
        if repoint == Repoint::Changed {
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(repoint)
    }

    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(RouterError::Throttled("TooManyRequestsException".into()));
        }
        let set = self.inner.set_parallelization(factor).await?;
        if set == Repoint::Changed {
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(set)
    }
}

fn operators(n: usize) -> Vec<OperatorId> {
    (0..n)
        .map(|i| OperatorId::new(format!("op{i:03}")).unwrap())
        .collect()
}

/// A switch over `n` operators with a lane each.
fn many_lanes(w: &World, n: usize) -> (CircuitSwitch, Vec<Arc<CountedRouter>>) {
    let ops = operators(n);
    let routers: Vec<Arc<CountedRouter>> = (0..n).map(|_| Arc::default()).collect();
    // Open for an hour: no breaker moves by itself while the test ticks.
    let mut settings = Settings::default();
    settings.default.breaker.open_base = Duration::from_secs(3600);
    settings.default.breaker.jitter = 0.0;
    let switch = CircuitSwitch {
        settings,
        lanes: Lanes::per_operator(
            ops.iter()
                .cloned()
                .zip(routers.iter().map(|r| r.clone() as Arc<dyn StreamRouter>)),
        ),
        operators: ops,
        ..switch_like(w)
    };
    (switch, routers)
}

fn calls(routers: &[Arc<CountedRouter>]) -> u64 {
    routers
        .iter()
        .map(|r| r.calls.swap(0, std::sync::atomic::Ordering::Relaxed))
        .sum()
}

fn trip_of(operator: &OperatorId) -> Value {
    let mut event = trip(0);
    event["detail"]["operator"] = json!(operator.as_str());
    event
}

#[tokio::test]
async fn the_tick_touches_only_lanes_that_changed_plus_a_constant_sweep() {
    let w = world();
    let (switch, routers) = many_lanes(&w, 200);
    let ops = operators(200);
    // A quiet gateway: each tick reads ten mappings, in turn, not 200.
    for minute in 0..3 {
        w.clock.set(start() + TimeDelta::minutes(minute));
        let report = switch.handle(&tick()).await.unwrap();
        assert_eq!(calls(&routers), SWEEP_LANES_PER_TICK as u64);
        assert_eq!(report.lanes_left, 200 - SWEEP_LANES_PER_TICK);
    }
    // Three trips: each re-points its own lane (a read and an update) and
    // marks it; the next tick does not look at them again.
    for op in &ops[100..103] {
        failing(&w, std::slice::from_ref(op)).await;
        switch.handle(&trip_of(op)).await.unwrap();
    }
    assert_eq!(calls(&routers), 6);
    w.clock.set(start() + TimeDelta::minutes(3));
    switch.handle(&tick()).await.unwrap();
    assert_eq!(calls(&routers), SWEEP_LANES_PER_TICK as u64);
    // A trip whose re-point failed leaves its lane unmarked: the tick
    // re-points it (and only it, beside the sweep) once the mapping answers.
    routers[150]
        .broken
        .store(true, std::sync::atomic::Ordering::Relaxed);
    failing(&w, std::slice::from_ref(&ops[150])).await;
    assert!(switch.handle(&trip_of(&ops[150])).await.is_err());
    routers[150]
        .broken
        .store(false, std::sync::atomic::Ordering::Relaxed);
    calls(&routers);
    w.clock.set(start() + TimeDelta::minutes(4));
    let report = switch.handle(&tick()).await.unwrap();
    assert_eq!(calls(&routers), SWEEP_LANES_PER_TICK as u64 + 2);
    assert_eq!(
        routers[150].inner.current().await.unwrap(),
        ConsumerTarget::Fallback,
        "{report:?}"
    );
    // A mapping moved by hand is found by the sweep within 200 / 10 ticks.
    routers[7]
        .inner
        .point_at(ConsumerTarget::Fallback)
        .await
        .unwrap();
    for minute in 5..25 {
        w.clock.set(start() + TimeDelta::minutes(minute));
        switch.handle(&tick()).await.unwrap();
    }
    assert_eq!(
        routers[7].inner.current().await.unwrap(),
        ConsumerTarget::Real
    );
}

#[tokio::test]
async fn the_tick_sets_the_lanes_the_settings_size_within_the_reservation() {
    let w = world();
    let (switch, routers) = many_lanes(&w, 200);
    let ops = operators(200);
    let mut settings = switch.settings.clone();
    for (op, factor) in [(&ops[0], 10), (&ops[1], 10), (&ops[2], 6)] {
        let mut own = settings.default.clone();
        own.lane.parallelization = Some(Parallelization::new(factor).unwrap());
        settings.operators.insert(op.clone(), own);
    }
    let capacity = |reserved| LaneCapacity {
        default: Parallelization::new(4).unwrap(),
        reserved,
    };
    // 197 lanes at 4 and 26 for the three: 814 instances.
    let short = CircuitSwitch {
        settings: settings.clone(),
        ..switch
    }
    .with_lane_capacity(capacity(Some(800)));
    let report = short.handle(&tick()).await.unwrap();
    assert!(report.resized.is_empty(), "{report:?}");
    assert!(
        report
            .skipped
            .iter()
            .any(|s| s.error.contains("at least 814")),
        "{:?}",
        report.skipped
    );
    assert_eq!(routers[0].inner.parallelization(), None, "left as it was");
    let (switch, routers) = many_lanes(&w, 200);
    let switch = CircuitSwitch { settings, ..switch }.with_lane_capacity(capacity(Some(814)));
    let report = switch.handle(&tick()).await.unwrap();
    let resized: Vec<(&str, u8)> = report
        .resized
        .iter()
        .map(|r| (r.lane.as_str(), r.parallelization))
        .collect();
    assert_eq!(resized, [("op000", 10), ("op001", 10), ("op002", 6)]);
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    // The sweep's ten reads, and a read and an update for each of three.
    assert_eq!(calls(&routers), SWEEP_LANES_PER_TICK as u64 + 6);
    // Set once: the next ticks cost the sweep alone, until the sweep comes
    // back to them (a read each, nothing to update).
    w.clock.set(start() + TimeDelta::minutes(1));
    let report = switch.handle(&tick()).await.unwrap();
    assert!(report.resized.is_empty());
    assert_eq!(calls(&routers), SWEEP_LANES_PER_TICK as u64);
    // A deploy sets a mapping back to the template's: its sweep finds it.
    routers[1]
        .inner
        .set_parallelization(Parallelization::new(4).unwrap())
        .await
        .unwrap();
    for minute in 2..22 {
        w.clock.set(start() + TimeDelta::minutes(minute));
        switch.handle(&tick()).await.unwrap();
    }
    assert_eq!(
        routers[1].inner.parallelization(),
        Parallelization::new(10).ok()
    );
    // A mapping that refuses is reported and tried again next tick.
    let (fresh, routers) = many_lanes(&w, 3);
    routers[0]
        .broken
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let fresh = CircuitSwitch {
        settings: switch.settings.clone(),
        ..fresh
    }
    .with_lane_capacity(capacity(None));
    let report = fresh.handle(&tick()).await.unwrap();
    // Its re-point check and its sizing, both reported; the others sized.
    assert!(!report.skipped.is_empty());
    assert!(
        report
            .skipped
            .iter()
            .all(|s| s.lane.as_deref() == Some("op000")),
        "{:?}",
        report.skipped
    );
    assert_eq!(report.resized.len(), 2);
    routers[0]
        .broken
        .store(false, std::sync::atomic::Ordering::Relaxed);
    w.clock.set(start() + TimeDelta::minutes(30));
    let report = fresh.handle(&tick()).await.unwrap();
    assert_eq!(report.resized.len(), 1, "{report:?}");
    // Without LANE_PARALLELIZATION nothing is set, and the tick says why.
    let (blind, routers) = many_lanes(&w, 3);
    let blind = CircuitSwitch {
        settings: switch.settings.clone(),
        ..blind
    };
    let report = blind.handle(&tick()).await.unwrap();
    assert!(
        report.skipped[0].error.contains("LANE_PARALLELIZATION"),
        "{:?}",
        report.skipped
    );
    assert_eq!(routers[0].inner.parallelization(), None);
}

#[tokio::test]
async fn a_throttled_mapping_is_tried_again_with_backoff() {
    let w = world();
    let (switch, routers) = many_lanes(&w, 1);
    routers[0]
        .broken
        .store(true, std::sync::atomic::Ordering::Relaxed);
    failing(&w, &operators(1)[..1]).await;
    let err = switch.handle(&trip_of(&operators(1)[0])).await.unwrap_err();
    assert!(
        matches!(err, SwitchError::Router(RouterError::Throttled(_))),
        "{err}"
    );
    assert_eq!(calls(&routers), u64::from(REPOINT_ATTEMPTS));
}

/// A breaker store in which one operator's item cannot be read.
struct OneCorrupt {
    inner: Arc<MemoryBreakerStore>,
    corrupt: OperatorId,
}

impl OneCorrupt {
    fn check(&self, operator: &OperatorId) -> Result<(), StoreError> {
        if operator == &self.corrupt {
            return Err(StoreError::Corrupt(format!(
                "breaker item of {operator}: missing field `version`"
            )));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl BreakerStore for OneCorrupt {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        self.check(operator)?;
        self.inner.load(operator).await
    }
    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        for operator in operators {
            self.check(operator)?;
        }
        self.inner.load_many(operators).await
    }
    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        self.inner.list().await
    }
    async fn save(&self, record: &BreakerRecord, expected: Option<u64>) -> Result<(), StoreError> {
        self.check(&record.operator)?;
        self.inner.save(record, expected).await
    }
    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        self.inner.claim_trial(operator, version, limit).await
    }
    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<chrono::Utc>,
        last_before: DateTime<chrono::Utc>,
    ) -> Result<bool, StoreError> {
        self.inner
            .claim_probe(operator, version, at, last_before)
            .await
    }
    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: lifeboat_core::ports::Trial,
    ) -> Result<Option<lifeboat_core::ports::TrialTally>, StoreError> {
        self.inner.record_trial(operator, version, trial).await
    }
    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.inner.mark_announced(operator, version).await
    }
    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.inner.mark_routed(operator, version).await
    }
    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &lifeboat_core::probe::ProbeSpec,
        at: DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        self.inner.remember_answered(operator, question, at).await
    }
    async fn answered(
        &self,
        operator: &OperatorId,
    ) -> Result<Option<lifeboat_core::probe::ProbeSpec>, StoreError> {
        self.inner.answered(operator).await
    }
}

#[tokio::test]
async fn one_unreadable_breaker_costs_only_its_operator() {
    let w = world();
    let (switch, routers) = many_lanes(&w, 3);
    let ops = operators(3);
    // op000 open before its item went bad; op002 trips afterwards.
    failing(&w, std::slice::from_ref(&ops[0])).await;
    switch.handle(&trip_of(&ops[0])).await.unwrap();
    let switch = CircuitSwitch {
        breakers: Arc::new(OneCorrupt {
            inner: w.breakers.clone(),
            corrupt: ops[1].clone(),
        }),
        ..switch
    };
    failing(&w, std::slice::from_ref(&ops[2])).await;
    switch.handle(&trip_of(&ops[2])).await.unwrap();
    w.clock.set(start() + TimeDelta::minutes(1));
    let report = switch.handle(&tick()).await.unwrap();
    let skipped: Vec<_> = report.skipped.iter().map(|s| s.operator.clone()).collect();
    assert_eq!(skipped, vec![Some(ops[1].clone())], "{report:?}");
    let ticked: Vec<_> = report
        .decisions
        .iter()
        .map(|d| d.operator.clone())
        .collect();
    assert_eq!(ticked, vec![ops[0].clone(), ops[2].clone()]);
    assert_eq!(
        routers[0].inner.current().await.unwrap(),
        ConsumerTarget::Fallback
    );
    assert_eq!(
        routers[2].inner.current().await.unwrap(),
        ConsumerTarget::Fallback
    );
    // Its lane is left where it is: nobody knows where it should point.
    assert_eq!(
        routers[1].inner.current().await.unwrap(),
        ConsumerTarget::Real
    );
}

/// An operator that answers every call the same way: `Crawling`, a
/// brownout at its worst (every answer in time, every one slow), or
/// `Hanging`, down with every call waiting out its whole budget.
#[derive(Clone, Copy)]
enum Answering {
    Crawling,
    Hanging,
}

impl lifeboat_core::ports::OperatorApi for Answering {
    fn knows(&self, _: &OperatorId) -> bool {
        true
    }

    fn call<'a, 'b, 'f>(
        &'a self,
        call: &'b lifeboat_core::request::OperatorCall,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = lifeboat_core::request::CallResult> + Send + 'f>,
    >
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        use lifeboat_core::request::{CallClass, CallResult};
        let result = match self {
            Answering::Crawling => CallResult {
                class: CallClass::Slow,
                elapsed: call.budget.slow_after + Duration::from_millis(100),
                body: Some("{\"sailings\":[]}".into()),
                detail: String::new(),
            },
            Answering::Hanging => CallResult {
                class: CallClass::Timeout,
                elapsed: call.budget.timeout,
                body: None,
                detail: "no answer".into(),
            },
        };
        Box::pin(async move {
            if result.class == CallClass::Timeout {
                tokio::time::sleep(result.elapsed).await;
            }
            result
        })
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_slow_call_trip_slow_answers_neither_close_nor_flap_the_breaker() {
    let (w, _, timers) = probing_world(Duration::ZERO);
    let switch = probed_by(&w, &timers, Answering::Crawling);
    // Opened by the slow-call rule: only quick answers close it.
    let mut slow_trip = trip(0);
    slow_trip["detail"]["reason"]["verdict"] =
        json!({"rule": "slow_calls", "rate": 0.9, "calls": 20});
    in_window(&w, &[nordic()], Health::SlowSuccess, 20).await;
    switch.handle(&slow_trip).await.unwrap();
    assert!(state(&w).await.opened_slow);
    // Ten minutes of timers: probes every 10 s, half-open rounds at the
    // ends of the open periods. Never closed.
    let mut probe_calls = 0;
    while let Some(due) = timers.next_due() {
        if due > start() + TimeDelta::minutes(10) {
            break;
        }
        w.clock.set(due);
        let batch = timers.take_due(due);
        let report = switch.handle(&timer_batch(&batch)).await.unwrap();
        probe_calls += report.probe_calls;
        assert_ne!(state(&w).await.state, BreakerState::Closed, "{report:?}");
    }
    assert!(
        probe_calls > 10,
        "{probe_calls} probes: the test proves nothing"
    );
    let changes = state_changes(&w.events);
    assert!(
        changes.iter().all(|(_, to, _)| *to != BreakerState::Closed),
        "{changes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn after_any_other_trip_a_slow_answer_is_a_pass() {
    // An operator whose healthy answers are often slow recovers as fast as
    // any other from a hang.
    let (w, _, timers) = probing_world(Duration::ZERO);
    let switch = probed_by(&w, &timers, Answering::Crawling);
    failing(&w, &[nordic()]).await;
    switch.handle(&trip(0)).await.unwrap();
    let due = timers.next_due().unwrap();
    w.clock.set(due);
    let batch = timers.take_due(due);
    switch.handle(&timer_batch(&batch)).await.unwrap();
    assert_eq!(state(&w).await.state, BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_timers_probes_side_by_side() {
    // A mass outage: ten operators' probe timers due at once, each probe
    // hanging for its 3 s budget. One after another they took 30 s, three
    // gaps; side by side the batch takes one budget.
    let w = world();
    let (switch, _) = many_lanes(&w, 10);
    let timers = Arc::new(MemoryTimers::new());
    let mut settings = probed();
    settings.default.breaker = switch.settings.default.breaker;
    let switch = CircuitSwitch {
        settings,
        timers: Some(timers.clone()),
        prober: Some(Arc::new(Answering::Hanging)),
        ..switch
    };
    for op in operators(10) {
        failing(&w, std::slice::from_ref(&op)).await;
        switch.handle(&trip_of(&op)).await.unwrap();
    }
    let due = timers.next_due().unwrap();
    w.clock.set(due);
    let batch = timers.take_due(due);
    assert_eq!(batch.len(), 10);
    let began = tokio::time::Instant::now();
    let report = switch.handle(&timer_batch(&batch)).await.unwrap();
    let took = began.elapsed();
    assert_eq!(report.probe_calls, 10);
    assert!(
        took < Duration::from_secs(4),
        "ten probes took {took:?}: one after another"
    );
    assert_eq!(
        timers.take_due(due + TimeDelta::minutes(1)).len(),
        10,
        "each armed again"
    );
}

/// The switch's start-up with its endpoints and settings in the operator
/// config table (in memory): the item's are used, the environment's lose.
#[tokio::test]
async fn the_switch_starts_with_the_operator_config_tables_endpoints_and_settings() {
    use lifeboat_core::memory::MemoryOperatorConfigStore;
    use lifeboat_core::operator_config::{OperatorConfigItem, Source};
    let env = lifeboat_aws::Env::from_pairs([
        ("OPERATORS", "nordic,baltic"),
        ("BREAKER_TABLE", "breakers"),
        ("EVENT_BUS_NAME", "bus"),
        ("REQUESTS_MAPPING_UUID", "uuid"),
        ("REAL_CONSUMER_FUNCTION", "real"),
        ("FALLBACK_CONSUMER_FUNCTION", "fallback"),
        (
            "OPERATOR_SETTINGS",
            r#"{"default": {"breaker": {"open_base": 5000}}}"#,
        ),
    ]);
    let clients = lifeboat_aws::Clients::load_in_function().await;
    // No table, no endpoints: no prober, the environment's settings.
    let alone = lifeboat_aws::operator_config::load_from(&env, None)
        .await
        .unwrap();
    let switch = CircuitSwitch::from_config(&env, &clients, &alone)
        .await
        .unwrap();
    assert!(switch.prober.is_none());
    assert_eq!(
        switch.settings.default.breaker.open_base,
        Duration::from_secs(5)
    );

    let store = MemoryOperatorConfigStore::holding(
        "operator-config",
        OperatorConfigItem {
            endpoints: Some("nordic=https://api.nordic.example,baltic=https://api.baltic.example".into()),
            settings: Some(
                r#"{"operators": {"nordic": {"probe": {"operation": "search", "params": {"from": "a"}}}}}"#.into(),
            ),
            revision: 4,
            updated_at: None,
        },
    );
    let config = lifeboat_aws::operator_config::load_from(&env, Some(&store))
        .await
        .unwrap();
    let switch = CircuitSwitch::from_config(&env, &clients, &config)
        .await
        .unwrap();
    assert!(
        switch.prober.is_some(),
        "probes go to the table's endpoints"
    );
    assert!(switch.settings.for_operator(&nordic()).probe.is_some());
    assert_eq!(
        switch.settings.default.breaker.open_base,
        lifeboat_core::BreakerConfig::default().open_base,
        "the item's settings replace the environment's whole"
    );

    // A malformed item stops the start, naming the table and attribute.
    let broken = MemoryOperatorConfigStore::holding(
        "operator-config",
        OperatorConfigItem {
            endpoints: Some("nordic=ftp://x".into()),
            revision: 5,
            ..OperatorConfigItem::default()
        },
    );
    let config = lifeboat_aws::operator_config::load_from(&env, Some(&broken))
        .await
        .unwrap();
    let err = CircuitSwitch::from_config(&env, &clients, &config)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("operator config table operator-config")
            && err.contains("attribute endpoints"),
        "{err}"
    );
    assert_eq!(
        config.endpoints_from,
        Source::Table {
            table: "operator-config".into(),
            attribute: "endpoints"
        }
    );
}

#[tokio::test]
async fn signals_the_failure_window_does_not_bear_out_leave_the_breaker_closed() {
    let w = world();
    // A healthy operator: a minute of calls, one failure in ninety.
    for second in 0..60 {
        w.clock.set(start() + TimeDelta::seconds(second));
        in_window(&w, &[nordic()], Health::Success, 9).await;
        if second % 10 == 0 {
            in_window(&w, &[nordic()], Health::Failure, 1).await;
        }
    }
    // AWS's alarm action payload, sent by hand, and a trip request claiming
    // a streak of timeouts: neither opens it, and each says why.
    for forged in [
        alarm_action("ALARM", "2026-11-30T12:00:59.000+0000"),
        trip(0),
    ] {
        let report = w.switch.handle(&forged).await.unwrap();
        let decision = &report.decisions[0];
        assert!(!decision.changed, "{forged}");
        assert_eq!(decision.to, BreakerState::Closed);
        assert!(decision.reason.contains("not borne out"), "{decision:?}");
    }
    assert!(state_changes(&w.events).is_empty());
    assert_eq!(w.router.current().await.unwrap(), ConsumerTarget::Real);

    // With no window to read, nothing opens either: the signal's delivery
    // is retried.
    let blind = CircuitSwitch {
        windows: Arc::new(Unreadable),
        ..switch_like(&w)
    };
    let err = blind.handle(&trip(0)).await.unwrap_err();
    assert!(matches!(err, SwitchError::Store(_)), "{err}");

    // The operator then fails every call for two seconds: the same trip
    // opens it.
    for second in 60..62 {
        w.clock.set(start() + TimeDelta::seconds(second));
        failing(&w, &[nordic()]).await;
    }
    let report = w.switch.handle(&trip(0)).await.unwrap();
    assert!(report.decisions[0].changed);
    assert_eq!(state(&w).await.state, BreakerState::Open);
}

/// A window store that cannot be read.
struct Unreadable;

#[async_trait::async_trait]
impl WindowStore for Unreadable {
    async fn add(
        &self,
        _: &OperatorId,
        _: DateTime<chrono::Utc>,
        _: &lifeboat_core::window::CallCounts,
    ) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("test".into()))
    }

    async fn since(
        &self,
        _: &OperatorId,
        _: DateTime<chrono::Utc>,
    ) -> Result<Vec<lifeboat_core::window::Bucket>, StoreError> {
        Err(StoreError::Unavailable("test".into()))
    }
}

/// `OperatorsErrorsAlarm`: one contributor per operator, its contributors
/// in ALARM asked of CloudWatch.
const CONTRIBUTOR_ALARM: &str = "lifeboat-operators-errors";

/// A switch of nordic and baltic on one lane, deciding with `settings`,
/// with the contributor alarm mapped to `*` and its contributors read from
/// the returned store.
fn contributor_world(
    settings: Settings,
) -> (World, Arc<lifeboat_core::memory::MemoryAlarmContributors>) {
    let w = world();
    let contributors = Arc::new(lifeboat_core::memory::MemoryAlarmContributors::new());
    let baltic = OperatorId::new("baltic").unwrap();
    let switch = CircuitSwitch::new(
        SwitchPorts {
            breakers: w.breakers.clone(),
            windows: w.window.clone(),
            events: w.events.clone(),
            lanes: Lanes::shared(
                SHARED_LANE,
                vec![nordic(), baltic.clone()],
                w.router.clone(),
            ),
            clock: Arc::new(w.clock.clone()),
            metrics: w.metrics.clone(),
        },
        settings,
        vec![nordic(), baltic],
    )
    .with_alarms(
        AlarmMap::parse(&format!(
            "lifeboat-nordic-errors=nordic, {CONTRIBUTOR_ALARM}=*"
        ))
        .unwrap(),
    )
    .with_alarm_contributors(contributors.clone())
    .with_repoint_backoff(Duration::ZERO);
    (
        World {
            switch: Arc::new(switch),
            ..w
        },
        contributors,
    )
}

/// The alarm's own Lambda action: the alarm changed, no contributor named.
fn contributor_alarm_action(at: &str) -> Value {
    let mut action = alarm_action("ALARM", at);
    action["alarmData"]["alarmName"] = json!(CONTRIBUTOR_ALARM);
    action
}

/// One contributor's change as EventBridge delivers it, naming its
/// operator in its attributes.
fn contributor_event(operator: &str, at: &str) -> Value {
    json!({"version": "0", "id": "c", "detail-type": "CloudWatch Alarm Contributor State Change",
           "source": "aws.cloudwatch", "account": "123456789012", "time": at, "region": "us-east-1",
           "resources": [format!("arn:aws:cloudwatch:us-east-1:123456789012:alarm:{CONTRIBUTOR_ALARM}")],
           "detail": {"alarmName": CONTRIBUTOR_ALARM,
                      "alarmContributor": {"id": "c1", "attributes": {"Operator": operator}},
                      "state": {"value": "ALARM", "timestamp": at}}})
}

#[tokio::test]
async fn a_contributor_alarm_opens_each_operator_it_has_in_alarm_that_its_window_bears_out() {
    let (w, contributors) = contributor_world(Settings::default());
    let baltic = OperatorId::new("baltic").unwrap();
    let stranger = OperatorId::new("stranger").unwrap();
    // nordic fails every call; baltic is healthy; a stranger is not ours.
    failing(&w, &[nordic()]).await;
    in_window(&w, std::slice::from_ref(&baltic), Health::Success, 20).await;
    contributors.set_operators(CONTRIBUTOR_ALARM, &[&nordic(), &baltic, &stranger], None);

    // The alarm's own change names no contributor: every one is looked at.
    let report = w
        .switch
        .handle(&contributor_alarm_action("2026-11-30T12:00:00.000+0000"))
        .await
        .unwrap();
    let moved: Vec<(&str, BreakerState, bool)> = report
        .decisions
        .iter()
        .map(|d| (d.operator.as_str(), d.to, d.changed))
        .collect();
    assert_eq!(
        moved,
        [
            ("nordic", BreakerState::Open, true),
            ("baltic", BreakerState::Closed, false)
        ],
        "the stranger skipped"
    );
    assert!(
        report.decisions[1].reason.contains("not borne out"),
        "{:?}",
        report.decisions[1]
    );
    assert_eq!(state(&w).await.state, BreakerState::Open);

    // A contributor's own change (EventBridge's shape) is about its
    // operator alone; one that names no operator is skipped.
    let mut listed = vec![lifeboat_core::ports::AlarmContributor {
        attributes: BTreeMap::from([("FunctionName".to_owned(), "x".to_owned())]),
        since: None,
    }];
    listed.extend(
        [&nordic(), &baltic].map(|o| lifeboat_core::ports::AlarmContributor {
            attributes: BTreeMap::from([("Operator".to_owned(), o.to_string())]),
            since: None,
        }),
    );
    contributors.set(CONTRIBUTOR_ALARM, listed);
    let about_baltic = w
        .switch
        .handle(&contributor_event("baltic", "2026-11-30T12:01:00Z"))
        .await
        .unwrap();
    let seen: Vec<&str> = about_baltic
        .decisions
        .iter()
        .map(|d| d.operator.as_str())
        .collect();
    assert_eq!(seen, ["baltic"]);
    assert!(!about_baltic.decisions[0].changed);
    assert_eq!(state_changes(&w.events).len(), 1);
}

/// With the alarm trusted as it comes (`alarm_failed_calls: 0`), a
/// contributor still in ALARM from before its operator's breaker closed
/// does not reopen it when another contributor's change arrives: the
/// alarm is timed when that contributor entered ALARM.
#[tokio::test]
async fn a_contributor_in_alarm_since_before_its_breaker_closed_does_not_reopen_it() {
    let trusted =
        Settings::from_json(r#"{"default": {"breaker": {"alarm_failed_calls": 0}}}"#).unwrap();
    let (w, contributors) = contributor_world(trusted);
    let entered = w.clock.now();
    w.clock.set(entered + TimeDelta::seconds(90));
    // nordic recovered: its breaker closed after it entered ALARM, and
    // before the change that now arrives (12:05).
    let closed = BreakerRecord::initial(nordic(), w.clock.now());
    w.breakers.save(&closed, None).await.unwrap();
    contributors.set_operators(CONTRIBUTOR_ALARM, &[&nordic()], Some(entered));
    let report = w
        .switch
        .handle(&contributor_alarm_action("2026-11-30T12:05:00.000+0000"))
        .await
        .unwrap();
    assert!(!report.decisions[0].changed, "{:?}", report.decisions[0]);
    assert_eq!(
        report.decisions[0].reason,
        "alarm older than the current state"
    );

    // Entering ALARM after the close, the same alarm opens it.
    contributors.set_operators(CONTRIBUTOR_ALARM, &[&nordic()], Some(w.clock.now()));
    let report = w
        .switch
        .handle(&contributor_alarm_action("2026-11-30T12:05:00.000+0000"))
        .await
        .unwrap();
    assert!(report.decisions[0].changed);
    assert_eq!(state(&w).await.state, BreakerState::Open);
}

#[tokio::test]
async fn a_contributor_alarm_that_cannot_be_read_opens_nothing_and_is_retried() {
    let (w, contributors) = contributor_world(Settings::default());
    failing(&w, &[nordic()]).await;
    contributors.set_operators(CONTRIBUTOR_ALARM, &[&nordic()], None);
    contributors.fail(true);
    let err = w
        .switch
        .handle(&contributor_event("nordic", "2026-11-30T12:00:00Z"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SwitchError::Contributors { alarm, .. } if alarm == CONTRIBUTOR_ALARM),
        "{err}"
    );
    assert_eq!(Diagnostic::from(err).error_type, "AlarmContributors");
    assert!(
        w.breakers
            .load(&nordic())
            .await
            .unwrap()
            .is_none_or(|b| b.state == BreakerState::Closed)
    );

    // A switch given no way to read contributors says so.
    let blind = CircuitSwitch {
        alarms: AlarmMap::parse(&format!("{CONTRIBUTOR_ALARM}=*")).unwrap(),
        ..switch_like(&w)
    };
    let err = blind
        .handle(&contributor_event("nordic", "2026-11-30T12:00:00Z"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("cannot read contributors"),
        "{err}"
    );
}

#[test]
fn alarm_maps_name_one_operator_or_every_contributor() {
    let map = AlarmMap::parse("a=nordic, b=* ,c=baltic").unwrap();
    assert_eq!(map.operator_for("a"), Some(&nordic()));
    assert_eq!(map.target("b"), Some(&crate::input::AlarmFor::Contributors));
    assert_eq!(map.operator_for("b"), None);
    assert!(map.has_contributor_alarm());
    let operators: Vec<&str> = map.operators().map(OperatorId::as_str).collect();
    assert_eq!(operators, ["nordic", "baltic"]);
    assert!(!AlarmMap::parse("a=nordic").unwrap().has_contributor_alarm());
    for bad in ["=*", "a", "a=**", "a=Nordic"] {
        assert!(AlarmMap::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_lane_capacity_is_read_from_the_templates_variables() {
    let read = |pairs: &[(&str, &str)]| {
        LaneCapacity::from_env(&lifeboat_aws::Env::from_pairs(pairs.iter().copied()))
    };
    let four = Parallelization::new(4).unwrap();
    assert_eq!(read(&[]).unwrap(), None);
    assert_eq!(
        read(&[(LANE_PARALLELIZATION, "4"), (REAL_CONSUMER_RESERVED, "800")]).unwrap(),
        Some(LaneCapacity {
            default: four,
            reserved: Some(800)
        })
    );
    for unreserved in [vec![(REAL_CONSUMER_RESERVED, "none")], vec![]] {
        let mut pairs = vec![(LANE_PARALLELIZATION, "4")];
        pairs.extend(unreserved);
        assert_eq!(
            read(&pairs).unwrap(),
            Some(LaneCapacity {
                default: four,
                reserved: None
            })
        );
    }
    let bad = read(&[(LANE_PARALLELIZATION, "11")])
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("LANE_PARALLELIZATION") && bad.contains("1 to 10"),
        "{bad}"
    );
    let bad = read(&[
        (LANE_PARALLELIZATION, "4"),
        (REAL_CONSUMER_RESERVED, "lots"),
    ])
    .unwrap_err()
    .to_string();
    assert!(bad.contains("REAL_CONSUMER_RESERVED"), "{bad}");
}
