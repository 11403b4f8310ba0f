//! Lookups against the in-memory gateway (real consumers, simulated operator)
//! on paused time.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use super::*;
use lifeboat_core::ports::BreakerStore;
use lifeboat_operator::{OutageMode, SimConfig, SimulatedOperator};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn route() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("date".to_owned(), "2026-12-24".to_owned()),
        ("from".to_owned(), "HEL".to_owned()),
        ("passengers".to_owned(), "2".to_owned()),
        ("to".to_owned(), "TLL".to_owned()),
    ])
}

struct World {
    gateway: MemorySuite,
    lookup: Lookup,
    sim: SimulatedOperator,
    clock: Arc<TokioClock>,
}

fn world() -> World {
    let clock = Arc::new(TokioClock::starting_at(base()));
    let sim = SimulatedOperator::new(nordic(), SimConfig::default(), clock.clone());
    let gateway = MemorySuite::new(
        Arc::new(sim.clone()),
        clock.clone(),
        MemorySuiteConfig {
            operators: vec![nordic()],
            ..MemorySuiteConfig::default()
        },
    );
    let lookup = Lookup::new(
        gateway.requests.clone(),
        gateway.cache.clone(),
        gateway.breakers.clone(),
        clock.clone(),
        Settings::default(),
    )
    .with_metrics(gateway.metrics.clone());
    World {
        gateway,
        lookup,
        sim,
        clock,
    }
}

/// One lookup while the gateway runs beside it for `for_s` seconds.
async fn ask(w: &mut World, mode: Mode, for_s: i64) -> Looked {
    let until = w.clock.now() + TimeDelta::seconds(for_s);
    let (operator, params) = (nordic(), route());
    let (looked, ()) = tokio::join!(
        w.lookup.answer(&operator, Operation::Search, &params, mode),
        w.gateway.run_until(until)
    );
    looked
}

async fn open_breaker(w: &World) {
    let mut record = BreakerRecord::initial(nordic(), w.clock.now());
    record.state = BreakerState::Open;
    record.version = 1;
    record.open_until = Some(w.clock.now() + TimeDelta::seconds(30));
    w.gateway.breakers.save(&record, None).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn live_then_fresh_when_healthy() {
    let mut w = world();
    let first = ask(&mut w, Mode::AskOperator, 5).await;
    let answer = first.result.unwrap();
    assert_eq!(answer.source, Source::Live);
    assert!(answer.body.contains("sailings"));
    assert!(first.requested);

    let second = ask(&mut w, Mode::AskOperator, 1).await;
    let again = second.result.unwrap();
    assert_eq!(again.source, Source::Fresh);
    assert_eq!(again.body, answer.body);
    assert!(!second.requested);
    assert_eq!(
        w.sim.stats().questions(),
        1,
        "the fresh answer asked nobody"
    );
    assert_eq!(w.gateway.requests.counts().total, 1);
}

#[tokio::test(start_paused = true)]
async fn last_good_without_a_request_while_open() {
    let mut w = world();
    ask(&mut w, Mode::AskOperator, 5).await.result.unwrap();
    // Past the recent window, then the breaker opens.
    tokio::time::advance(Duration::from_secs(3600)).await;
    open_breaker(&w).await;

    let looked = ask(&mut w, Mode::AskOperator, 1).await;
    let answer = looked.result.unwrap();
    assert_eq!(answer.source, Source::LastGood);
    assert!(answer.age_s >= 3600, "age {}", answer.age_s);
    assert!(!looked.requested);
    assert_eq!(looked.breaker, Some(BreakerState::Open));
    assert!(looked.store_reads <= 2, "{} reads", looked.store_reads);
    assert_eq!(w.gateway.requests.counts().total, 1, "no request record");
    assert_eq!(w.sim.stats().questions(), 1, "no operator call");
}

#[tokio::test(start_paused = true)]
async fn nothing_cached_while_open_is_unavailable_with_a_retry_time() {
    let mut w = world();
    open_breaker(&w).await;
    let looked = ask(&mut w, Mode::AskOperator, 1).await;
    let unavailable = looked.result.unwrap_err();
    assert_eq!(unavailable.reason, UnavailableReason::BreakerOpen);
    assert!(unavailable.retry_after >= Duration::from_secs(29));
    assert!(unavailable.retry_after <= Duration::from_secs(30));
    assert!(!looked.requested);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_operator_costs_one_budget_then_last_good() {
    let mut w = world();
    ask(&mut w, Mode::AskOperator, 5).await.result.unwrap();
    tokio::time::advance(Duration::from_secs(600)).await;
    w.sim.set_mode(Some(OutageMode::Hang));

    let start = w.clock.now();
    let (operator, params) = (nordic(), route());
    let looked = w
        .lookup
        .answer(&operator, Operation::Search, &params, Mode::AskOperator);
    let until = start + TimeDelta::seconds(6);
    let (looked, ()) = tokio::join!(
        async {
            let looked = looked.await;
            (looked, w.clock.now())
        },
        w.gateway.run_until(until)
    );
    let (looked, answered_at) = looked;
    let answer = looked.result.unwrap();
    assert_eq!(answer.source, Source::LastGood);
    assert!(looked.requested);
    let waited = (answered_at - start).num_milliseconds();
    assert!((3_000..3_300).contains(&waited), "waited {waited} ms");
}

#[tokio::test(start_paused = true)]
async fn cached_only_never_writes_a_request() {
    let mut w = world();
    let looked = ask(&mut w, Mode::CachedOnly, 1).await;
    assert_eq!(
        looked.result.map_err(|u| u.reason),
        Err(UnavailableReason::BreakerOpen)
    );
    assert!(!looked.requested);
    assert_eq!(looked.store_reads, 1);
    assert_eq!(w.gateway.requests.counts().total, 0);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_is_read_at_most_once_a_second() {
    let w = world();
    let (_, first) = w.lookup.breakers.get(&nordic()).await;
    let (_, second) = w.lookup.breakers.get(&nordic()).await;
    tokio::time::advance(Duration::from_millis(1000)).await;
    let (_, third) = w.lookup.breakers.get(&nordic()).await;
    assert_eq!((first, second, third), (true, false, true));
}

#[tokio::test(start_paused = true)]
async fn reprice_skips_the_recent_cache_but_not_the_operators_last_seconds() {
    let mut w = world();
    ask(&mut w, Mode::AskOperator, 5).await.result.unwrap();
    // Within `cache.reprice` (10 s) of the operator's answer, payment after
    // payment takes it as the operator's price: no call.
    for _ in 0..3 {
        let looked = ask(&mut w, Mode::Reprice, 1).await;
        let answer = looked.result.unwrap();
        assert_eq!(answer.source, Source::Live);
        assert!(answer.age_s <= 10, "{}", answer.age_s);
        assert!(!looked.requested);
    }
    assert_eq!(w.sim.stats().questions(), 1);
    // Past it the operator is asked again, though the answer is recent.
    tokio::time::advance(Duration::from_secs(11)).await;
    let looked = ask(&mut w, Mode::Reprice, 5).await;
    assert_eq!(looked.result.unwrap().source, Source::Live);
    assert!(looked.requested);
    assert_eq!(w.sim.stats().questions(), 2);
}

#[tokio::test(start_paused = true)]
async fn identical_questions_in_flight_share_one_request_and_one_call() {
    let w = world();
    let until = w.clock.now() + TimeDelta::seconds(5);
    let (operator, params) = (nordic(), route());
    let mut other = route();
    other.insert("passengers".to_owned(), "3".to_owned());
    // Five askers of one question and one of another, at once.
    let ask = |p| {
        w.lookup
            .answer(&operator, Operation::Search, p, Mode::AskOperator)
    };
    let mut gateway = w.gateway;
    let (a, b, c, d, e, f, ()) = tokio::join!(
        ask(&params),
        ask(&params),
        ask(&params),
        ask(&params),
        ask(&params),
        ask(&other),
        gateway.run_until(until)
    );
    let looked = [a, b, c, d, e, f];
    for l in &looked {
        assert_eq!(
            l.result.as_ref().map(|a| a.source),
            Ok(Source::Live),
            "{l:?}"
        );
    }
    assert_eq!(looked.iter().filter(|l| l.requested).count(), 2);
    assert_eq!(looked.iter().filter(|l| l.joined).count(), 4);
    assert_eq!(gateway.requests.counts().total, 2, "a request per question");
    assert_eq!(w.sim.stats().questions(), 2, "a call per question");
    let bodies: std::collections::BTreeSet<&str> = looked[..5]
        .iter()
        .map(|l| l.result.as_ref().unwrap().body.as_str())
        .collect();
    assert_eq!(bodies.len(), 1, "every asker got the same answer");
}

#[tokio::test(start_paused = true)]
async fn an_operators_refusal_is_answered_as_such_and_cached_a_minute() {
    let mut w = world();
    // The simulated operator answers 400 to a sailing id it cannot read.
    let bad = BTreeMap::from([
        ("sailing_id".to_owned(), "no such id!".to_owned()),
        ("passengers".to_owned(), "1".to_owned()),
    ]);
    let ask_bad = async |w: &mut World, for_s: i64| {
        let until = w.clock.now() + TimeDelta::seconds(for_s);
        let operator = nordic();
        let (looked, ()) = tokio::join!(
            w.lookup
                .answer(&operator, Operation::Price, &bad, Mode::AskOperator),
            w.gateway.run_until(until)
        );
        looked
    };
    let first = ask_bad(&mut w, 5).await;
    let refused = first.result.unwrap_err();
    assert_eq!(refused.reason, UnavailableReason::Rejected);
    assert!(first.requested);
    // Within the minute: the same refusal, from the cache, no request.
    let again = ask_bad(&mut w, 30).await;
    assert_eq!(
        again.result.unwrap_err().reason,
        UnavailableReason::Rejected
    );
    assert!(!again.requested);
    assert_eq!(w.sim.stats().questions(), 1);
    // After it: asked again.
    tokio::time::advance(Duration::from_secs(40)).await;
    let later = ask_bad(&mut w, 5).await;
    assert!(later.requested);
    assert_eq!(w.sim.stats().questions(), 2);
    // A refusal is never shown as a last good answer, and does not trip.
    assert!(w.gateway.transitions.is_empty());
}

/// The route's good answer an hour old and, after it, the operator's 404
/// `refused_s` seconds ago, in the cache.
async fn refused_after_a_good_answer(w: &World, refused_s: i64) -> CachedAnswer {
    use lifeboat_core::cache::CachedRefusal;
    let now = w.clock.now();
    let key = CacheKey::new(&nordic(), Operation::Search, &route());
    let good = CachedAnswer {
        key: key.clone(),
        operator: nordic(),
        operation: Operation::Search,
        body: r#"{"sailings":[{"id":"HEL-TLL-20261224-0615"}]}"#.into(),
        as_of: now - TimeDelta::hours(1),
    };
    w.gateway
        .cache
        .put(&good, now + TimeDelta::days(6))
        .await
        .unwrap();
    let refusal = CachedRefusal {
        key,
        operator: nordic(),
        operation: Operation::Search,
        status: 404,
        detail: "operator answered 404".into(),
        at: now - TimeDelta::seconds(refused_s),
    };
    w.gateway
        .cache
        .put_refusal(&refusal, now + TimeDelta::days(7))
        .await
        .unwrap();
    good
}

#[tokio::test(start_paused = true)]
async fn a_refusal_answers_for_a_minute_then_the_last_good_answer_shows_while_open() {
    let mut w = world();
    let good = refused_after_a_good_answer(&w, 10).await;
    // Within the negative minute: the refusal, with no request, at
    // payment too.
    for mode in [Mode::AskOperator, Mode::Reprice] {
        let looked = ask(&mut w, mode, 1).await;
        assert_eq!(
            looked.result.unwrap_err().reason,
            UnavailableReason::NotFound
        );
        assert!(!looked.requested);
    }
    // After it, with the breaker open: the good answer from before the
    // refusal, which the refusal did not erase.
    tokio::time::advance(Duration::from_secs(60)).await;
    open_breaker(&w).await;
    for mode in [Mode::AskOperator, Mode::CachedOnly] {
        let looked = ask(&mut w, mode, 1).await;
        let answer = looked.result.unwrap();
        assert_eq!(answer.source, Source::LastGood);
        assert_eq!(answer.body, good.body);
        assert!(!looked.requested);
    }
    assert_eq!(w.sim.stats().questions(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_after_a_refusal_shows_the_last_good_answer() {
    let mut w = world();
    let good = refused_after_a_good_answer(&w, 90).await;
    // The refusal is past its minute and the good answer an hour old: the
    // operator is asked, and fails.
    w.sim.set_mode(Some(OutageMode::ServerError));
    let looked = ask(&mut w, Mode::AskOperator, 5).await;
    assert!(looked.requested);
    let answer = looked.result.unwrap();
    assert_eq!(answer.source, Source::LastGood);
    assert_eq!(answer.body, good.body);
    assert_eq!(w.sim.stats().questions(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_recent_answer_the_operator_refused_since_is_not_fresh() {
    let mut w = world();
    let first = ask(&mut w, Mode::AskOperator, 5).await.result.unwrap();
    assert_eq!(first.source, Source::Live);
    // The operator refuses the question a little later (a 404 cached, as
    // the real consumer caches it), and the minute passes: the answer of
    // two minutes ago is recent but no longer fresh, so the operator is
    // asked again.
    tokio::time::advance(Duration::from_secs(30)).await;
    let key = CacheKey::new(&nordic(), Operation::Search, &route());
    let refusal = lifeboat_core::cache::CachedRefusal {
        key,
        operator: nordic(),
        operation: Operation::Search,
        status: 404,
        detail: "operator answered 404".into(),
        at: w.clock.now(),
    };
    w.gateway
        .cache
        .put_refusal(&refusal, w.clock.now() + TimeDelta::days(7))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(61)).await;
    let again = ask(&mut w, Mode::AskOperator, 5).await;
    assert!(again.requested);
    assert_eq!(again.result.unwrap().source, Source::Live);
    assert_eq!(w.sim.stats().questions(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_request_nobody_answered_is_closed_by_its_asker_not_by_a_joiner() {
    // No consumer runs: the stream lost both askers' request.
    let w = world();
    let (operator, params) = (nordic(), route());
    let (first, joiner) = tokio::join!(
        w.lookup
            .answer(&operator, Operation::Search, &params, Mode::AskOperator),
        w.lookup
            .answer(&operator, Operation::Search, &params, Mode::AskOperator)
    );
    assert!(first.result.is_err() && joiner.result.is_err());
    assert!(first.requested != joiner.requested, "one wrote, one joined");
    let counts = w.gateway.requests.counts();
    assert_eq!((counts.total, counts.with_outcome), (1, 1));
    assert_eq!(counts.refused_outcome_writes, 0, "the joiner wrote nothing");
    let stored = &w.gateway.requests.all()[0];
    let outcome = stored.outcome.as_ref().unwrap();
    assert_eq!(outcome.by, CLOSED_BY);
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Failed {
            reason: FailureReason::Expired,
            ..
        }
    ));
}
