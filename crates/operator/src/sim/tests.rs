//! The simulated operator in-process: each mode, the script, the counts
//! and the answers, on paused tokio time.

use lifeboat_core::ManualClock;
use lifeboat_core::request::CallClass;

use super::*;
use crate::answers::PriceDrift;
use crate::latency::LatencyModel;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-06-01T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn op() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn quiet() -> SimConfig {
    SimConfig {
        latency: LatencyModel {
            error_rate: 0.0,
            ..LatencyModel::default()
        },
        ..SimConfig::default()
    }
}

fn sim(config: SimConfig) -> (SimulatedOperator, ManualClock) {
    let clock = ManualClock::new(t0());
    (
        SimulatedOperator::new(op(), config, Arc::new(clock.clone())),
        clock,
    )
}

fn call(operation: Operation) -> OperatorCall {
    OperatorCall {
        request_id: "req-1".into(),
        operator: op(),
        operation,
        params: [("from", "HEL"), ("to", "TLL"), ("date", "2025-06-02")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        budget: Budget::with_timeout(Duration::from_secs(3)),
    }
}

/// The peak counts questions held at once: five hung together are five,
/// three one after another one, pings none, and a question whose caller
/// gave up leaves the operator's hand.
#[tokio::test(start_paused = true)]
async fn the_peak_in_flight_counts_the_questions_held_at_once() {
    let (sim, _clock) = sim(quiet());
    sim.set_mode(Some(OutageMode::Hang));
    let (search, price, ping) = (
        call(Operation::Search),
        call(Operation::Price),
        call(Operation::Ping),
    );
    tokio::join!(
        sim.call(&search),
        sim.call(&search),
        sim.call(&search),
        sim.call(&price),
        sim.call(&price),
        sim.call(&ping),
    );
    assert_eq!(sim.stats().peak_in_flight, 5);

    sim.reset_stats();
    assert_eq!(sim.stats().peak_in_flight, 0, "nothing in hand");
    for _ in 0..3 {
        sim.call(&search).await;
    }
    assert_eq!(sim.stats().peak_in_flight, 1);

    sim.reset_stats();
    tokio::join!(sim.call(&ping), sim.call(&ping));
    assert_eq!(sim.stats().peak_in_flight, 0, "pings are not questions");

    let gave_up = tokio::time::timeout(Duration::from_millis(10), sim.call(&search)).await;
    assert!(gave_up.is_err());
    sim.call(&search).await;
    assert_eq!(sim.stats().peak_in_flight, 1, "the abandoned call left");
}

#[tokio::test(start_paused = true)]
async fn a_healthy_operator_mostly_answers_in_time() {
    let (sim, _) = sim(SimConfig::default());
    let mut classes = BTreeMap::<&str, u32>::new();
    for _ in 0..400 {
        let result = sim.call(&call(Operation::Search)).await;
        assert!(result.elapsed <= Duration::from_secs(3));
        if result.class == CallClass::Ok {
            assert!(result.body.as_deref().unwrap().contains("sailings"));
        }
        *classes.entry(result.class.name()).or_default() += 1;
    }
    let count = |name| classes.get(name).copied().unwrap_or(0);
    // 3 s budget, slow after 2.4 s: the fast cluster and most of the
    // 2.3 s cluster are ok, its upper edge is slow, the tail times out.
    assert!((320..370).contains(&count("ok")), "{classes:?}");
    assert!((15..50).contains(&count("slow")), "{classes:?}");
    assert!((8..30).contains(&count("timeout")), "{classes:?}");
    assert!(count("server_error") < 15, "{classes:?}");
    assert_eq!(sim.stats().total, 400);
    assert_eq!(sim.stats().by_mode.healthy, 400);
    assert_eq!(
        sim.stats().background_errors,
        u64::from(count("server_error"))
    );
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_plays_the_same_calls() {
    let run = || async {
        let (sim, _) = sim(SimConfig::default());
        let mut out = Vec::new();
        for _ in 0..30 {
            let r = sim.call(&call(Operation::Price)).await;
            out.push((r.class, r.elapsed));
        }
        out
    };
    assert_eq!(run().await, run().await);
}

#[tokio::test(start_paused = true)]
async fn a_ping_fails_with_the_api_and_not_with_its_answers() {
    let (sim, _) = sim(quiet());
    let expected = [
        (None, CallClass::Ok),
        (Some(OutageMode::Hang), CallClass::Timeout),
        (Some(OutageMode::Refuse), CallClass::Connect),
        (
            Some(OutageMode::ServerError),
            CallClass::ServerError { status: 503 },
        ),
        (
            Some(OutageMode::RateLimited),
            CallClass::ClientError { status: 429 },
        ),
        (Some(OutageMode::Slow), CallClass::Ok),
        (Some(OutageMode::Brownout), CallClass::Ok),
        (Some(OutageMode::Garbage), CallClass::Ok),
        (Some(OutageMode::Oversized), CallClass::Ok),
    ];
    for (mode, class) in expected {
        sim.set_mode(mode);
        let ping = sim.call(&call(Operation::Ping)).await;
        assert_eq!(ping.class, class, "{mode:?}");
        if class == CallClass::Ok {
            assert!(ping.elapsed < Duration::from_millis(100), "{mode:?}");
        }
    }
    assert_eq!(sim.stats().by_operation.ping, 9);
}

#[tokio::test(start_paused = true)]
async fn each_outage_mode_fails_the_way_it_should() {
    let (sim, _) = sim(quiet());
    let started = tokio::time::Instant::now();

    sim.set_mode(Some(OutageMode::Hang));
    let hang = sim.call(&call(Operation::Search)).await;
    assert_eq!(hang.class, CallClass::Timeout);
    assert_eq!(hang.elapsed, Duration::from_secs(3));
    assert_eq!(hang.detail, "no answer within 3000 ms");

    sim.set_mode(Some(OutageMode::Refuse));
    let refuse = sim.call(&call(Operation::Search)).await;
    assert_eq!(refuse.class, CallClass::Connect);
    assert_eq!(refuse.elapsed, Duration::ZERO);

    sim.set_mode(Some(OutageMode::ServerError));
    let down = sim.call(&call(Operation::Price)).await;
    assert_eq!(down.class, CallClass::ServerError { status: 503 });
    assert!(down.elapsed < Duration::from_millis(100));

    sim.set_mode(Some(OutageMode::Slow));
    let slow = sim.call(&call(Operation::Search)).await;
    assert_eq!(slow.class, CallClass::Timeout);
    assert_eq!(slow.elapsed, Duration::from_secs(3));

    sim.set_mode(Some(OutageMode::Garbage));
    let garbage = sim.call(&call(Operation::Search)).await;
    assert_eq!(garbage.class, CallClass::BadPayload);
    assert!(garbage.body.is_none());

    sim.set_mode(Some(OutageMode::RateLimited));
    let limited = sim.call(&call(Operation::Search)).await;
    assert_eq!(limited.class, CallClass::ClientError { status: 429 });
    assert!(limited.elapsed < Duration::from_millis(100));

    sim.set_mode(Some(OutageMode::Brownout));
    let brownout = sim.call(&call(Operation::Search)).await;
    assert!(
        matches!(brownout.class, CallClass::Ok | CallClass::Slow),
        "{brownout:?}"
    );
    assert!(brownout.body.is_some());

    sim.set_mode(Some(OutageMode::Oversized));
    let oversized = sim.call(&call(Operation::Search)).await;
    let body = oversized.body.expect("an answer, only too big");
    assert_eq!(body.len(), 1 << 20);
    assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok());

    sim.set_mode(None);
    let healthy = sim.call(&call(Operation::Search)).await;
    assert!(matches!(
        healthy.class,
        CallClass::Ok | CallClass::Slow | CallClass::Timeout
    ));

    let stats = sim.stats();
    assert_eq!(stats.total, 9);
    assert_eq!(
        stats.by_operation,
        OperationCounts {
            search: 8,
            price: 1,
            ping: 0,
            book: 0
        }
    );
    let one = ModeCounts {
        healthy: 1,
        hang: 1,
        refuse: 1,
        server_error: 1,
        slow: 1,
        garbage: 1,
        rate_limited: 1,
        brownout: 1,
        oversized: 1,
    };
    assert_eq!(stats.by_mode, one);
    assert_eq!(sim.last_request_id().as_deref(), Some("req-1"));
    // Virtual time only: the whole test took a few virtual seconds.
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test(start_paused = true)]
async fn a_brownout_is_slow_for_its_share_of_calls_and_in_time() {
    let (sim, _) = sim(SimConfig {
        seed: 7,
        ..SimConfig::default()
    });
    sim.set_mode(Some(OutageMode::Brownout));
    let mut slow = 0;
    for _ in 0..200 {
        // The rest answer as when healthy, slow tail included.
        let result = sim.call(&call(Operation::Search)).await;
        if result.elapsed == Duration::from_millis(2_850) {
            assert_eq!(result.class, CallClass::Slow);
            slow += 1;
        }
    }
    // 70 % near the budget, give or take the draw.
    assert!((120..=160).contains(&slow), "{slow} of 200 slow");
}

#[tokio::test(start_paused = true)]
async fn a_slow_factor_under_one_answers_slowly_in_time() {
    let (sim, _) = sim(SimConfig {
        slow_factor: 0.9,
        ..quiet()
    });
    sim.set_mode(Some(OutageMode::Slow));
    let result = sim.call(&call(Operation::Search)).await;
    assert_eq!(result.class, CallClass::Slow);
    assert_eq!(result.elapsed, Duration::from_millis(2_700));
    assert!(result.body.is_some());
}

#[tokio::test(start_paused = true)]
async fn the_script_follows_the_injected_clock_until_overridden() {
    let outage = Outage {
        start: t0() + chrono::Duration::minutes(10),
        end: t0() + chrono::Duration::minutes(20),
        mode: OutageMode::Refuse,
    };
    let (sim, clock) = sim(SimConfig {
        outages: vec![outage],
        ..quiet()
    });
    assert_eq!(sim.mode(), None);
    assert_ne!(
        sim.call(&call(Operation::Search)).await.class,
        CallClass::Connect
    );
    clock.advance(Duration::from_secs(10 * 60));
    assert_eq!(sim.mode(), Some(OutageMode::Refuse));
    assert_eq!(
        sim.call(&call(Operation::Search)).await.class,
        CallClass::Connect
    );

    sim.set_mode(None);
    assert_eq!(sim.mode(), None);
    sim.set_mode(Some(OutageMode::ServerError));
    assert_eq!(sim.mode(), Some(OutageMode::ServerError));
    sim.follow_script();
    assert_eq!(sim.mode(), Some(OutageMode::Refuse));

    clock.advance(Duration::from_secs(10 * 60));
    assert_eq!(sim.mode(), None);
    assert_eq!(sim.stats().by_mode.refuse, 1);
    sim.reset_stats();
    assert_eq!(sim.stats(), SimStats::default());
}

#[tokio::test(start_paused = true)]
async fn unknown_operators_and_bad_parameters_are_client_errors() {
    let (sim, _) = sim(quiet());
    let mut stranger = call(Operation::Search);
    stranger.operator = OperatorId::new("baltic").unwrap();
    assert!(!sim.knows(&stranger.operator));
    let result = sim.call(&stranger).await;
    assert_eq!(result.class, CallClass::ClientError { status: 404 });
    assert_eq!(result.detail, "unknown operator baltic");
    assert_eq!(sim.stats().total, 0);

    let mut bad = call(Operation::Search);
    bad.params.insert("passengers".into(), "0".into());
    let result = sim.call(&bad).await;
    assert_eq!(result.class, CallClass::ClientError { status: 400 });
    assert_eq!(sim.stats().rejected, 1);
}

#[tokio::test(start_paused = true)]
async fn drifting_prices_change_over_virtual_time() {
    let (sim, clock) = sim(SimConfig {
        price_drift: Some(PriceDrift {
            start: t0(),
            every: Duration::from_secs(3_600),
            percent: 5.0,
            until: None,
        }),
        latency: LatencyModel {
            error_rate: 0.0,
            tail_to: Duration::from_millis(2_600),
            ..LatencyModel::default()
        },
        ..SimConfig::default()
    });
    let amount = |r: CallResult| {
        let json: serde_json::Value = serde_json::from_str(&r.body.unwrap()).unwrap();
        json["price"]["amount_cents"].as_u64().unwrap()
    };
    let before = amount(sim.call(&call(Operation::Price)).await);
    clock.advance(Duration::from_secs(3_600));
    let after = amount(sim.call(&call(Operation::Price)).await);
    assert_eq!(after, (before as f64 * 1.05).round() as u64);
}
