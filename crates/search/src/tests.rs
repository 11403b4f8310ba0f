//! The search handler on the in-memory gateway (real consumers, simulated
//! operator) and paused time.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::ports::{BreakerStore, Clock};
use lifeboat_core::settings::{IdCase, Settings};
use lifeboat_core::{BreakerRecord, BreakerState};
use lifeboat_operator::{SimConfig, SimulatedOperator};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};

use super::*;

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap() // 2026-12-01T08:00:00Z
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

struct World {
    gateway: MemorySuite,
    search: Search,
    sim: SimulatedOperator,
    clock: Arc<TokioClock>,
}

fn world() -> World {
    world_with(Settings::default())
}

fn world_with(settings: Settings) -> World {
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
    let search = search_on(&gateway, clock.clone(), settings, [nordic()]);
    World {
        gateway,
        search,
        sim,
        clock,
    }
}

/// Search on `gateway`'s stores, selling `operators`.
fn search_on<const N: usize>(
    gateway: &MemorySuite,
    clock: Arc<TokioClock>,
    settings: Settings,
    operators: [OperatorId; N],
) -> Search {
    Search {
        lookup: Lookup::new(
            gateway.requests.clone(),
            gateway.cache.clone(),
            gateway.breakers.clone(),
            clock,
            settings,
        )
        .with_metrics(gateway.metrics.clone()),
        operators: BTreeSet::from(operators),
    }
}

const SAILINGS: [(&str, &str); 5] = [
    ("operator", "nordic"),
    ("from", "HEL"),
    ("to", "TLL"),
    ("date", "2026-12-24"),
    ("passengers", "2"),
];

async fn get(w: &mut World, path: &str, query: &[(&str, &str)]) -> Reply {
    let until = w.clock.now() + TimeDelta::seconds(4);
    let request = HttpRequest::get(path, query);
    let (reply, ()) = tokio::join!(w.search.handle(&request), w.gateway.run_until(until));
    reply
}

#[tokio::test(start_paused = true)]
async fn malformed_parameters_get_a_400_that_names_them() {
    let mut w = world();
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![], "operator"),
        (SAILINGS[1..].to_vec(), "operator"),
        (replace("operator", "baltic"), "operator"),
        (replace("operator", "Nordic!"), "operator"),
        (replace("from", "hel"), "from"),
        (replace("to", "HEL"), "to"),
        (replace("date", "24.12.2026"), "date"),
        (replace("date", "2020-01-01"), "date"),
        (replace("passengers", "0"), "passengers"),
        (replace("passengers", "lots"), "passengers"),
        (
            [SAILINGS.to_vec(), vec![("passengers", "3")]].concat(),
            "passengers",
        ),
        (
            [SAILINGS.to_vec(), vec![("sort", "price")]].concat(),
            "sort",
        ),
    ];
    for (query, named) in cases {
        let reply = get(&mut w, "/sailings", &query).await;
        assert_eq!(reply.status, 400, "{query:?}: {}", reply.body);
        assert_eq!(reply.body["invalid_params"][0]["name"], named, "{query:?}");
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
    }
    let price = get(
        &mut w,
        "/price",
        &[("operator", "nordic"), ("passengers", "2")],
    )
    .await;
    assert_eq!(price.body["invalid_params"][0]["name"], "sailing_id");
    assert_eq!(get(&mut w, "/nowhere", &[]).await.status, 404);
    assert_eq!(w.gateway.requests.counts().total, 0, "nothing was asked");
}

fn replace(name: &str, value: &'static str) -> Vec<(&'static str, &'static str)> {
    SAILINGS
        .iter()
        .map(|(k, v)| if *k == name { (*k, value) } else { (*k, *v) })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn live_then_fresh_then_last_good_while_open() {
    let mut w = world();
    let live = get(&mut w, "/sailings", &SAILINGS).await;
    assert_eq!(live.status, 200, "{}", live.body);
    assert_eq!(live.body["source"], "live");
    assert!(!live.body["sailings"].as_array().unwrap().is_empty());
    assert_eq!(live.body["passengers"], 2);

    let fresh = get(&mut w, "/sailings", &SAILINGS).await;
    assert_eq!(fresh.body["source"], "fresh");
    assert_eq!(fresh.body["sailings"], live.body["sailings"]);
    assert_eq!(fresh.body["as_of"], live.body["as_of"]);

    tokio::time::advance(Duration::from_secs(900)).await;
    let mut open = BreakerRecord::initial(nordic(), w.clock.now());
    open.state = BreakerState::Open;
    open.version = 1;
    open.open_until = Some(w.clock.now() + TimeDelta::seconds(30));
    w.gateway.breakers.save(&open, None).await.unwrap();
    let calls = w.sim.stats().questions();
    let requests = w.gateway.requests.counts().total;

    let last_good = get(&mut w, "/sailings", &SAILINGS).await;
    assert_eq!(last_good.status, 200);
    assert_eq!(last_good.body["source"], "last_good");
    assert!(last_good.body["age_s"].as_u64().unwrap() >= 900);
    assert_eq!(last_good.body["sailings"], live.body["sailings"]);

    // A route never seen: unavailable, not an empty list.
    let unseen = get(&mut w, "/sailings", &replace("to", "STO")).await;
    assert_eq!(unseen.status, 503, "{}", unseen.body);
    assert_eq!(unseen.body["title"], "unavailable right now");
    assert!(unseen.body.get("sailings").is_none());
    let retry: u64 = unseen.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "retry after {retry}");

    assert_eq!(
        w.gateway.requests.counts().total,
        requests,
        "no request record"
    );
    assert_eq!(w.sim.stats().questions(), calls, "no operator call");
    let answers = |source| {
        w.gateway.metrics.sum(
            lifeboat_core::metrics::names::ANSWERS,
            &[("Operator", "nordic"), ("Source", source)],
        )
    };
    assert_eq!(
        (
            answers("live"),
            answers("fresh"),
            answers("last_good"),
            answers("unavailable")
        ),
        (1.0, 1.0, 1.0, 1.0)
    );
}

#[tokio::test(start_paused = true)]
async fn prices_go_through_the_same_gateway() {
    let mut w = world();
    let sailings = get(&mut w, "/sailings", &SAILINGS).await;
    let sailing_id = sailings.body["sailings"][0]["sailing_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let query = [
        ("operator", "nordic"),
        ("sailing_id", sailing_id.as_str()),
        ("passengers", "2"),
    ];
    let price = get(&mut w, "/price", &query).await;
    assert_eq!(price.status, 200, "{}", price.body);
    assert_eq!(price.body["source"], "live");
    assert_eq!(price.body["price"]["sailing_id"], sailing_id.as_str());
    assert_eq!(
        price.body["price"]["amount_cents"],
        sailings.body["sailings"][0]["price_cents"]
    );
    assert_eq!(get(&mut w, "/price", &query).await.body["source"], "fresh");
}

#[tokio::test(start_paused = true)]
async fn an_operator_that_does_not_answer_in_time_is_a_503_not_an_empty_list() {
    let mut w = world();
    w.sim.set_mode(Some(lifeboat_operator::OutageMode::Hang));
    let started = w.clock.now();
    let reply = get(&mut w, "/sailings", &SAILINGS).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(reply.body["reason"], "timeout");
    assert!(reply.header("retry-after").is_some());
    assert!(reply.body.get("sailings").is_none());
    assert_eq!(
        w.gateway.requests.counts().total,
        1,
        "the operator was asked once"
    );
    assert!(w.clock.now() - started >= TimeDelta::seconds(3));
}

#[test]
fn an_operators_no_is_a_404_or_a_422_not_a_503() {
    let nordic = OperatorId::new("nordic").unwrap();
    let reply = |reason| {
        unavailable_reply(
            &nordic,
            Unavailable {
                reason,
                retry_after: Duration::from_secs(60),
            },
        )
    };
    let not_found = reply(UnavailableReason::NotFound);
    assert_eq!(not_found.status, 404);
    assert_eq!(
        not_found.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(not_found.header("retry-after"), None);
    assert_eq!(not_found.body["reason"], "not_found");
    let refused = reply(UnavailableReason::Rejected);
    assert_eq!(refused.status, 422);
    assert_eq!(refused.body["reason"], "rejected");
    assert_eq!(reply(UnavailableReason::Timeout).status, 503);
}

/// 10,000 questions at once, as a flood would send them: 2,000 that no
/// operator could answer (dates past the horizon or in the past, malformed),
/// 4,000 distinct valid ones, and 4,000 repeats of the 100 most popular.
/// Counts what the flood cost: requests written and operator calls (the
/// in-memory gateway has the template's stream settings, so most of the
/// flood's requests expire in the queue and are never called).
/// `cargo test -p search flood -- --nocapture` prints the figures.
#[tokio::test(start_paused = true)]
async fn a_flood_costs_one_request_and_one_call_per_distinct_valid_question() {
    let w = world();
    let routes = [
        ("HEL", "TLL"),
        ("TLL", "HEL"),
        ("HEL", "STO"),
        ("STO", "HEL"),
    ];
    let day = |n: i64| (base() + TimeDelta::days(n)).format("%Y-%m-%d").to_string();
    let question = |from: &str, to: &str, date: String, passengers: u8| {
        vec![
            ("operator".to_owned(), "nordic".to_owned()),
            ("from".to_owned(), from.to_owned()),
            ("to".to_owned(), to.to_owned()),
            ("date".to_owned(), date),
            ("passengers".to_owned(), passengers.to_string()),
        ]
    };
    let mut distinct = Vec::new();
    for (from, to) in routes {
        for n in 1..=250 {
            for passengers in 1..=4 {
                distinct.push(question(from, to, day(n), passengers));
            }
        }
    }
    let mut flood = distinct.clone();
    for popular in &distinct[..100] {
        flood.extend(std::iter::repeat_n(popular.clone(), 40));
    }
    for i in 0..2_000 {
        let date = match i % 4 {
            0 => day(401 + i64::from(i)),
            1 => "9999-12-31".to_owned(),
            2 => day(-3),
            _ => format!("2027-02-{}", 30 + i % 9),
        };
        flood.push(question("HEL", "TLL", date, 1));
    }
    assert_eq!(flood.len(), 10_000);

    let requests: Vec<HttpRequest> = flood
        .iter()
        .map(|q| {
            let pairs: Vec<(&str, &str)> =
                q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            HttpRequest::get("/sailings", &pairs)
        })
        .collect();
    let mut gateway = w.gateway;
    let until = w.clock.now() + TimeDelta::seconds(120);
    let (replies, ()) = tokio::join!(
        futures::future::join_all(requests.iter().map(|r| w.search.handle(r))),
        gateway.run_until(until)
    );
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for reply in &replies {
        *by_status.entry(reply.status).or_default() += 1;
    }
    let written = gateway.requests.counts().total;
    let calls = w.sim.stats().questions();
    eprintln!(
        "flood: 10,000 questions (4,000 distinct valid, 4,000 repeats of 100, 2,000 refused at the door): {written} requests written, {calls} operator calls, replies by status {by_status:?}"
    );
    assert_eq!(by_status.get(&400), Some(&2_000), "{by_status:?}");
    assert_eq!(written, 4_000, "one request per distinct valid question");
    // The gateway calls a request only before its deadline: what the flood
    // queued past its 3 s is answered `expired` without calling anyone.
    assert!(
        calls <= 4_000,
        "at most one operator call per distinct valid question"
    );
    assert_eq!(
        gateway.requests.counts().with_outcome,
        4_000,
        "every request answered"
    );
}

/// An operator whose routes are configured is asked only those: any other
/// is a 404 that costs no request and no call.
#[tokio::test(start_paused = true)]
async fn a_route_the_operator_does_not_sail_is_refused_unasked() {
    let settings =
        Settings::from_json(r#"{"operators": {"nordic": {"routes": ["HEL-TLL", "TLL-HEL"]}}}"#)
            .unwrap();
    let mut w = world_with(settings);
    let known = get(&mut w, "/sailings", &SAILINGS).await;
    assert_eq!(known.status, 200, "{}", known.body);
    assert_eq!(known.body["source"], "live");
    for (from, to) in [("HEL", "STO"), ("TLL", "STO"), ("STO", "HEL")] {
        let unknown = get(&mut w, "/sailings", &route(from, to)).await;
        assert_eq!(unknown.status, 404, "{from}-{to}: {}", unknown.body);
        assert_eq!(unknown.body["reason"], "unknown_route");
        assert_eq!(
            unknown.body["detail"],
            format!("nordic sails no route from {from} to {to}")
        );
        assert_eq!(
            unknown.header("content-type"),
            Some("application/problem+json")
        );
    }
    // Malformed parameters are still the 400 that names them, before the
    // route is looked at.
    let malformed = get(&mut w, "/sailings", &route("HEL", "tll")).await;
    assert_eq!(malformed.status, 400);
    let mut bad_date = route("HEL", "STO");
    bad_date[3] = ("date", "24.12.2026");
    let bad_date = get(&mut w, "/sailings", &bad_date).await;
    assert_eq!(bad_date.status, 400, "{}", bad_date.body);
    assert_eq!(bad_date.body["invalid_params"][0]["name"], "date");
    assert_eq!(w.gateway.requests.counts().total, 1, "only the known route");
    assert_eq!(w.sim.stats().questions(), 1);
}

fn route(from: &'static str, to: &'static str) -> Vec<(&'static str, &'static str)> {
    SAILINGS
        .iter()
        .map(|&(k, v)| match k {
            "from" => (k, from),
            "to" => (k, to),
            _ => (k, v),
        })
        .collect()
}

/// Settings with nordic's ids compared as `case`.
fn ids(case: IdCase) -> Settings {
    let mut settings = Settings::default();
    settings.default.ids = case;
    settings
}

#[tokio::test(start_paused = true)]
async fn a_sailing_id_is_asked_and_echoed_in_the_operators_case() {
    let mut w = world_with(ids(IdCase::Upper));
    let asked = |id| {
        [
            ("operator", "nordic"),
            ("sailing_id", id),
            ("passengers", "2"),
        ]
    };
    let upper = get(&mut w, "/price", &asked("HEL-TLL-20261224-0615")).await;
    assert_eq!(upper.status, 200, "{}", upper.body);
    assert_eq!(upper.body["source"], "live");
    let lower = get(&mut w, "/price", &asked("hel-tll-20261224-0615")).await;
    assert_eq!(lower.body["source"], "fresh", "{}", lower.body);
    assert_eq!(lower.body["sailing_id"], "HEL-TLL-20261224-0615");
    assert_eq!(lower.body["price"], upper.body["price"]);
    assert_eq!(w.gateway.requests.counts().total, 1);
    assert_eq!(w.sim.stats().questions(), 1);
    // The check stays: what is not an id is refused as before, unasked.
    for bad in ["hel tll", "hel_tll-0615", "h\u{e9}l-tll", ""] {
        let refused = get(&mut w, "/price", &asked(bad)).await;
        assert_eq!(refused.status, 400, "{bad:?}: {}", refused.body);
        assert_eq!(refused.body["invalid_params"][0]["name"], "sailing_id");
        assert_eq!(
            refused.header("content-type"),
            Some("application/problem+json")
        );
    }
    assert_eq!(w.gateway.requests.counts().total, 1);

    // An operator whose ids are case-sensitive is asked exactly as sent.
    let mut w = world_with(ids(IdCase::Exact));
    let lower = get(&mut w, "/price", &asked("hel-tll-20261224-0615")).await;
    assert_eq!(lower.body["sailing_id"], "hel-tll-20261224-0615");
    assert_eq!(lower.body["price"]["sailing_id"], "hel-tll-20261224-0615");
}

/// What a price flood cost: requests written, operator calls, replies by
/// status, and the most distinct replies (status and price) one sailing got.
struct FloodCost {
    written: usize,
    calls: u64,
    by_status: std::collections::BTreeMap<u16, usize>,
    replies_per_sailing: usize,
}

/// 100 sailings, each asked for its price at once in 20 spellings (upper
/// case, lower case and 18 mixtures): 2,000 questions, from an operator
/// whose ids compare as `case`.
async fn price_flood(case: IdCase) -> FloodCost {
    let w = world_with(ids(case));
    let routes = ["HEL-TLL", "TLL-HEL", "HEL-STO", "STO-HEL"];
    let mut sailings = Vec::new();
    for route in routes {
        for n in 1..=25 {
            let day = (base() + TimeDelta::days(n)).format("%Y%m%d");
            sailings.push(format!("{route}-{day}-0615"));
        }
    }
    // Spelling v lowers the id's letters whose bit is set in a mask.
    let spell = |id: &str, v: u32| {
        let mask = [0, 0x3f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x03, 0x05]
            [usize::try_from(v % 10).unwrap()]
            ^ if v >= 10 { 0x2a } else { 0 };
        let mut letter = 0;
        id.chars()
            .map(|c| {
                if !c.is_ascii_alphabetic() {
                    return c;
                }
                letter += 1;
                if mask & (1 << (letter - 1)) == 0 {
                    c
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect::<String>()
    };
    let mut questions = Vec::new();
    for id in &sailings {
        let spellings: BTreeSet<String> = (0..20).map(|v| spell(id, v)).collect();
        assert_eq!(spellings.len(), 20, "{id}: 20 distinct spellings");
        questions.extend(spellings);
    }
    let requests: Vec<HttpRequest> = questions
        .iter()
        .map(|id| {
            HttpRequest::get(
                "/price",
                &[
                    ("operator", "nordic"),
                    ("sailing_id", id),
                    ("passengers", "2"),
                ],
            )
        })
        .collect();
    let mut gateway = w.gateway;
    let until = w.clock.now() + TimeDelta::seconds(120);
    let (replies, ()) = tokio::join!(
        futures::future::join_all(requests.iter().map(|r| w.search.handle(r))),
        gateway.run_until(until)
    );
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    let mut distinct = std::collections::BTreeMap::<String, BTreeSet<String>>::new();
    for (id, reply) in questions.iter().zip(&replies) {
        *by_status.entry(reply.status).or_default() += 1;
        let seen = format!("{} {}", reply.status, reply.body["price"]);
        distinct
            .entry(id.to_ascii_uppercase())
            .or_default()
            .insert(seen);
    }
    FloodCost {
        written: gateway.requests.counts().total,
        calls: w.sim.stats().questions(),
        by_status,
        replies_per_sailing: distinct.values().map(BTreeSet::len).max().unwrap_or(0),
    }
}

/// Case variants of one sailing id as a flood would send them: with the
/// operator's ids `upper` they merge into one question per sailing; `exact`
/// (every id as sent, as before `ids`) pays for every spelling.
/// `cargo test -p search flood -- --nocapture` prints the figures.
#[tokio::test(start_paused = true)]
async fn a_flood_of_case_variants_costs_one_request_and_one_call_per_sailing() {
    let exact = price_flood(IdCase::Exact).await;
    let upper = price_flood(IdCase::Upper).await;
    for (name, cost) in [("exact", &exact), ("upper", &upper)] {
        eprintln!(
            "case-variant flood, ids {name}: 2,000 questions (100 sailings x 20 spellings): {} requests written, {} operator calls, replies by status {:?}, up to {} different replies per sailing",
            cost.written, cost.calls, cost.by_status, cost.replies_per_sailing
        );
    }
    assert_eq!(exact.written, 2_000, "exact: every spelling is a question");
    assert_eq!(upper.written, 100, "upper: one request per sailing");
    assert!(upper.calls <= 100, "at most one operator call per sailing");
    assert!(upper.calls > 0 && exact.calls > upper.calls);
    assert_eq!(
        upper.replies_per_sailing, 1,
        "every spelling gets one reply"
    );
    assert!(exact.replies_per_sailing > 1, "each spelling its own price");
    // The simulated operator's background errors and latency tail fail a
    // few sailings (every spelling alike); the rest are answered.
    let answered = |c: &FloodCost| c.by_status.get(&200).copied().unwrap_or(0);
    assert!(answered(&upper) >= 1_800, "{:?}", upper.by_status);
    assert!(answered(&exact) < answered(&upper), "{:?}", exact.by_status);
}

/// What a minute with (or without) a flood at nordic did.
struct FloodMinute {
    /// nordic's questions asked by the flood, and how many reached it.
    flood_questions: usize,
    nordic_calls: u64,
    /// The most of them nordic held at once.
    nordic_peak: u64,
    /// baltic's customers: each answer's source and how long it took.
    baltic: Vec<(String, Duration)>,
    transitions: usize,
}

/// A minute of the AWS world on the template's defaults, with two
/// operators: baltic's customers ask a search a second (20 questions, so
/// some repeat and come fresh), and for the first 30 s nordic gets
/// `flood_per_s` distinct valid searches a second (four routes, dates up to
/// a year ahead, one to nine passengers: none repeats).
async fn flood_minute(flood_per_s: usize) -> FloodMinute {
    let clock = Arc::new(TokioClock::starting_at(base()));
    let baltic = OperatorId::new("baltic").unwrap();
    let sims: lifeboat_operator::SimulatedOperators = [nordic(), baltic.clone()]
        .into_iter()
        .map(|operator| SimulatedOperator::new(operator, SimConfig::default(), clock.clone()))
        .collect();
    let mut gateway = MemorySuite::new(
        Arc::new(sims.clone()),
        clock.clone(),
        MemorySuiteConfig {
            operators: vec![nordic(), baltic.clone()],
            ..MemorySuiteConfig::in_world(lifeboat_sim::World::Aws, 7)
        },
    );
    let search = search_on(
        &gateway,
        clock.clone(),
        Settings::default(),
        [nordic(), baltic.clone()],
    );
    let day = |n: usize| {
        (base() + TimeDelta::days(1 + i64::try_from(n).unwrap()))
            .format("%Y-%m-%d")
            .to_string()
    };
    let routes = [
        ("HEL", "TLL"),
        ("TLL", "HEL"),
        ("HEL", "STO"),
        ("STO", "HEL"),
    ];
    let mut asked: Vec<(Duration, &str, HttpRequest)> = Vec::new();
    for k in 0..flood_per_s * 30 {
        let (from, to) = routes[k % 4];
        let passengers = (k / 4 % 9 + 1).to_string();
        let date = day(k / 36 % 365);
        let query = [
            ("operator", "nordic"),
            ("from", from),
            ("to", to),
            ("date", date.as_str()),
            ("passengers", passengers.as_str()),
        ];
        let at = Duration::from_secs_f64(k as f64 / flood_per_s as f64);
        asked.push((at, "nordic", HttpRequest::get("/sailings", &query)));
    }
    let flood_questions = asked.len();
    for s in 0..60 {
        let (from, to) = routes[s % 2];
        let date = day(s % 10);
        let query = [
            ("operator", "baltic"),
            ("from", from),
            ("to", to),
            ("date", date.as_str()),
            ("passengers", "2"),
        ];
        let at = Duration::from_secs(u64::try_from(s).unwrap()) + Duration::from_millis(500);
        asked.push((at, "baltic", HttpRequest::get("/sailings", &query)));
    }
    let start = tokio::time::Instant::now();
    let customers = asked.iter().map(|(at, operator, request)| {
        let search = &search;
        async move {
            tokio::time::sleep_until(start + *at).await;
            let asked_at = tokio::time::Instant::now();
            let reply = search.handle(request).await;
            (*operator, reply, asked_at.elapsed())
        }
    });
    let until = clock.now() + TimeDelta::seconds(75);
    let (replies, ()) = tokio::join!(
        futures::future::join_all(customers),
        gateway.run_until(until)
    );
    let nordic_stats = sims.get(&nordic()).unwrap().stats();
    FloodMinute {
        flood_questions,
        nordic_calls: nordic_stats.questions(),
        nordic_peak: nordic_stats.peak_in_flight,
        baltic: replies
            .into_iter()
            .filter(|(operator, ..)| *operator == "baltic")
            .map(|(_, reply, took)| {
                let source = match reply.status {
                    200 => reply.body["source"].as_str().unwrap_or("?").to_owned(),
                    status => status.to_string(),
                };
                (source, took)
            })
            .collect(),
        transitions: gateway.transitions.len(),
    }
}

fn p95(took: &[(String, Duration)]) -> Duration {
    let mut sorted: Vec<Duration> = took.iter().map(|(_, d)| *d).collect();
    sorted.sort();
    sorted[(sorted.len() * 95).div_ceil(100) - 1]
}

/// A flood of distinct valid questions at one operator (400 a second for
/// 30 s, none of them cached) costs that operator at most what its lane
/// can have in flight: the template's 50 calls per batch times its 4
/// batches per shard. What the lane cannot call before its deadline
/// expires unasked (the flood's own customers get a 503, or a cached
/// answer where there is one). Nothing trips, so nothing goes off sale,
/// and another operator's customers get the same answers as on a quiet
/// minute, as fast. `cargo test -p search flood -- --nocapture` prints the
/// figures.
#[tokio::test(start_paused = true)]
async fn a_flood_at_one_operator_is_held_to_its_lanes_calls_and_touches_no_other() {
    let cap = u64::try_from(
        real_consumer::DEFAULT_CONCURRENCY * lifeboat_sim::aws::TEMPLATE.parallelization,
    )
    .unwrap();
    let quiet = flood_minute(0).await;
    let flooded = flood_minute(400).await;
    let sources = |m: &FloodMinute| {
        let mut by = std::collections::BTreeMap::<String, usize>::new();
        for (source, _) in &m.baltic {
            *by.entry(source.clone()).or_default() += 1;
        }
        by
    };
    eprintln!(
        "flood: {} distinct questions at nordic in 30 s: {} calls reached it, at most {} at once (the lane's cap {cap}); \
         breaker transitions {}; baltic's answers {:?}, p95 {:?} (a quiet minute: {:?}, p95 {:?})",
        flooded.flood_questions,
        flooded.nordic_calls,
        flooded.nordic_peak,
        flooded.transitions,
        sources(&flooded),
        p95(&flooded.baltic),
        sources(&quiet),
        p95(&quiet.baltic),
    );
    assert_eq!(quiet.nordic_calls, 0);
    assert!(
        flooded.nordic_peak <= cap && flooded.nordic_peak >= cap * 9 / 10,
        "the flood fills nordic's lane nearly to its cap {cap}, and no further: {}",
        flooded.nordic_peak
    );
    assert!(
        flooded.nordic_calls < flooded.flood_questions as u64,
        "what the lane cannot call in time is never called"
    );
    assert_eq!(flooded.transitions, 0, "no breaker moved: nobody off sale");
    assert_eq!(sources(&flooded), sources(&quiet), "baltic's answers");
    assert!(
        p95(&flooded.baltic) <= p95(&quiet.baltic).mul_f64(1.1),
        "baltic's p95 {:?} against {:?} on a quiet minute",
        p95(&flooded.baltic),
        p95(&quiet.baltic)
    );
}
