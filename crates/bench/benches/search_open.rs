//! The search handler end to end with the operator's breaker open, on the
//! in-memory stores: HTTP request in (`GET /sailings`), reply out, through
//! parameter checks, the cache read, the breaker read (kept a second by the
//! lookup's breaker cache) and the reply's JSON.
//!
//! Two parts:
//!
//! 1. a measured loop (printed first): 10,000 answers per scenario after
//!    1,000 warm-up answers, each timed with `Instant`, p50/p99/max, and the
//!    store reads per answer counted by a wrapper around the cache and
//!    breaker stores (the same traits, so the handler cannot tell); each
//!    scenario's figures also as a line `lifeboat-bench: {json}`, which
//!    tools/figures reads for docs/benchmarks.md;
//! 2. criterion's group `search_open` for the mean and its spread.
//!
//! Scenarios:
//!
//! * `last_good/busy`: a cached route, an answer every millisecond of the
//!   (manual) clock, so the breaker cache holds the state and the Breaker
//!   table is read once a second;
//! * `last_good/cold`: the clock moves a second per answer: every answer
//!   reads the breaker again (the worst case for reads);
//! * `unavailable/cold`: a route never cached: 503 with `Retry-After`.
//!
//! Metrics go to a sink that builds each EMF line and drops it (no stdout
//! write); no tracing subscriber is installed, so the handler's log line
//! costs nothing here (on Lambda it is a JSON line on stdout).

#![allow(clippy::unwrap_used)] // bench setup: a failed unwrap is a broken bench

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, criterion_group};
use lifeboat_bench::start;
use lifeboat_core::breaker::BreakerRecord;
use lifeboat_core::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use lifeboat_core::memory::{MemoryBreakerStore, MemoryCacheStore, MemoryRequestStore};
use lifeboat_core::metrics::MetricSet;
use lifeboat_core::ports::{
    BreakerStore, CacheStore, CacheWrite, Clock, MetricsSink, StoreError, Trial, TrialTally,
};
use lifeboat_core::probe::ProbeSpec;
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerState, ManualClock, Operation, OperatorId};
use lifeboat_lookup::Lookup;
use lifeboat_lookup::http::HttpRequest;
use lifeboat_lookup::params::search_params;
use search::Search;

/// Reads of the cache and the Breaker table, counted.
#[derive(Default)]
struct Reads(AtomicU64);

impl Reads {
    fn count(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A store port that counts every read and passes it on.
struct Counting<S> {
    inner: S,
    reads: Arc<Reads>,
}

#[async_trait]
impl<S: CacheStore> CacheStore for Counting<S> {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        self.reads.count();
        self.inner.get(key).await
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.inner.put(answer, expires_at).await
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.inner.put_refusal(refusal, expires_at).await
    }
}

#[async_trait]
impl<S: BreakerStore> BreakerStore for Counting<S> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        self.reads.count();
        self.inner.load(operator).await
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        self.reads.count();
        self.inner.load_many(operators).await
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        self.reads.count();
        self.inner.list().await
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        self.inner.save(record, expected_version).await
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
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner
            .claim_probe(operator, version, at, last_before)
            .await
    }

    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError> {
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
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.inner.remember_answered(operator, question, at).await
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        self.inner.answered(operator).await
    }
}

/// Builds each EMF line as stdout metrics would, then drops it.
struct DiscardMetrics;

impl MetricsSink for DiscardMetrics {
    fn emit(&self, sets: &[MetricSet], at: DateTime<Utc>) {
        for set in sets {
            black_box(set.to_emf(at));
        }
    }
}

const PORTS: [&str; 10] = [
    "HEL", "TLL", "STO", "RIX", "TKU", "VIS", "MHQ", "GDN", "KEL", "OSL",
];
const DATES: [&str; 10] = [
    "2026-12-05",
    "2026-12-06",
    "2026-12-07",
    "2026-12-08",
    "2026-12-09",
    "2026-12-10",
    "2026-12-11",
    "2026-12-12",
    "2026-12-13",
    "2026-12-14",
];

/// A sailings answer as the operator gives it: six sailings.
fn body(from: &str, to: &str, date: &str) -> String {
    let compact: String = date.chars().filter(char::is_ascii_digit).collect();
    let sailings: Vec<serde_json::Value> = ["0615", "0930", "1215", "1530", "1845", "2130"]
        .iter()
        .enumerate()
        .map(|(i, hhmm)| {
            serde_json::json!({
                "sailing_id": format!("{from}-{to}-{compact}-{hhmm}"),
                "departs": format!("{date}T{}:{}:00Z", &hhmm[..2], &hhmm[2..]),
                "arrives": format!("{date}T{}:{}:00Z", &hhmm[..2], &hhmm[2..]),
                "from": from,
                "to": to,
                "price_cents": 4_900 + 350 * i,
                "currency": "EUR",
            })
        })
        .collect();
    serde_json::json!({ "sailings": sailings }).to_string()
}

struct World {
    search: Search,
    clock: Arc<ManualClock>,
    cache_reads: Arc<Reads>,
    breaker_reads: Arc<Reads>,
    /// Routes with a last good answer, and routes never cached.
    cached: Vec<HttpRequest>,
    unseen: Vec<HttpRequest>,
}

async fn world() -> World {
    let operator = OperatorId::new("nordic").unwrap();
    let now = start();
    let clock = Arc::new(ManualClock::new(now));
    let cache_reads = Arc::new(Reads::default());
    let breaker_reads = Arc::new(Reads::default());
    let cache = Arc::new(Counting {
        inner: MemoryCacheStore::new(),
        reads: cache_reads.clone(),
    });
    let breakers = Arc::new(Counting {
        inner: MemoryBreakerStore::new(),
        reads: breaker_reads.clone(),
    });

    let mut open = BreakerRecord::initial(operator.clone(), now);
    open.state = BreakerState::Open;
    open.version = 1;
    open.open_until = Some(now + TimeDelta::seconds(30));
    breakers.save(&open, None).await.unwrap();

    // 45 routes x 10 dates answered 15 minutes ago (past the 5 minutes of
    // "recent": a last good answer); the other 45 routes never asked.
    let mut cached = Vec::new();
    let mut unseen = Vec::new();
    for (i, from) in PORTS.iter().enumerate() {
        for (j, to) in PORTS.iter().enumerate().filter(|(j, _)| *j != i) {
            for date in DATES {
                let query = [
                    ("operator", "nordic"),
                    ("from", *from),
                    ("to", *to),
                    ("date", date),
                    ("passengers", "2"),
                ];
                let request = HttpRequest::get("/sailings", &query);
                if i < j {
                    let params = search_params(from, to, date, 2);
                    let answer = CachedAnswer {
                        key: CacheKey::new(&operator, Operation::Search, &params),
                        operator: operator.clone(),
                        operation: Operation::Search,
                        body: body(from, to, date),
                        as_of: now - TimeDelta::minutes(15),
                    };
                    cache.put(&answer, now + TimeDelta::days(7)).await.unwrap();
                    cached.push(request);
                } else {
                    unseen.push(request);
                }
            }
        }
    }

    let search = Search {
        lookup: Lookup::new(
            Arc::new(MemoryRequestStore::new()),
            cache,
            breakers,
            clock.clone(),
            Settings::default(),
        )
        .with_metrics(Arc::new(DiscardMetrics)),
        operators: BTreeSet::from([operator]),
    };
    World {
        search,
        clock,
        cache_reads,
        breaker_reads,
        cached,
        unseen,
    }
}

const WARM_UP: usize = 1_000;
const ANSWERS: usize = 10_000;

struct Measured {
    p50: Duration,
    p99: Duration,
    max: Duration,
    reads: u64,
    reads_per_answer: f64,
    statuses: BTreeSet<u16>,
    sources: BTreeSet<String>,
    /// A problem reply's `reason` (503 `breaker_open`).
    reasons: BTreeSet<String>,
}

/// Answer `ANSWERS` questions in turn, the clock moving `step` after each.
async fn measure(w: &World, questions: &[HttpRequest], step: Duration) -> Measured {
    let mut statuses = BTreeSet::new();
    let mut sources = BTreeSet::new();
    let mut reasons = BTreeSet::new();
    for request in questions.iter().cycle().take(WARM_UP) {
        black_box(w.search.handle(request).await);
        w.clock.advance(step);
    }
    let reads_before = w.cache_reads.get() + w.breaker_reads.get();
    let mut times = Vec::with_capacity(ANSWERS);
    for request in questions.iter().cycle().take(ANSWERS) {
        let started = Instant::now();
        let reply = w.search.handle(request).await;
        times.push(started.elapsed());
        statuses.insert(reply.status);
        if let Some(source) = reply.body.get("source").and_then(|s| s.as_str()) {
            sources.insert(source.to_owned());
        }
        if let Some(reason) = reply.body.get("reason").and_then(|s| s.as_str()) {
            reasons.insert(reason.to_owned());
        }
        w.clock.advance(step);
    }
    let reads = w.cache_reads.get() + w.breaker_reads.get() - reads_before;
    times.sort_unstable();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    Measured {
        p50: at(0.50),
        p99: at(0.99),
        max: times[times.len() - 1],
        reads,
        reads_per_answer: reads as f64 / ANSWERS as f64,
        statuses,
        sources,
        reasons,
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn percentiles(runtime: &tokio::runtime::Runtime) {
    let scenarios: [(&str, bool, Duration); 3] = [
        ("last_good/busy", true, Duration::from_millis(1)),
        ("last_good/cold", true, Duration::from_secs(1)),
        ("unavailable/cold", false, Duration::from_secs(1)),
    ];
    println!("search_open: {ANSWERS} answers per scenario after {WARM_UP} warm-up, breaker open");
    for (name, cached, step) in scenarios {
        // A world per scenario: each starts with an empty breaker cache.
        let w = runtime.block_on(world());
        let questions = if cached { &w.cached } else { &w.unseen };
        let m = runtime.block_on(measure(&w, questions, step));
        let p99_ok = m.p99 <= Duration::from_millis(1);
        let reads_ok = m.reads_per_answer <= 2.0;
        println!(
            "search_open/{name}: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs, {:.3} store reads per answer; status {:?}, source {:?}; target p99 <= 1 ms {}, <= 2 reads {}",
            m.p50.as_secs_f64() * 1e6,
            m.p99.as_secs_f64() * 1e6,
            m.max.as_secs_f64() * 1e6,
            m.reads_per_answer,
            m.statuses,
            m.sources,
            if p99_ok { "met" } else { "MISSED" },
            if reads_ok { "met" } else { "MISSED" },
        );
        // The same, for tools/figures (docs/benchmarks.md).
        let line = serde_json::json!({
            "bench": "search_open",
            "scenario": name,
            "answers": ANSWERS,
            "warm_up": WARM_UP,
            "p50_ns": nanos(m.p50),
            "p99_ns": nanos(m.p99),
            "max_ns": nanos(m.max),
            "store_reads": m.reads,
            "statuses": m.statuses,
            "sources": m.sources,
            "reasons": m.reasons,
        });
        println!("lifeboat-bench: {line}");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn criterion_search(c: &mut Criterion) {
    let runtime = runtime();
    let w = runtime.block_on(world());
    let mut group = c.benchmark_group("search_open");
    let mut i = 0usize;
    group.bench_function("last_good", |b| {
        b.iter(|| {
            i = (i + 1) % w.cached.len();
            runtime.block_on(w.search.handle(&w.cached[i]))
        });
    });
    group.bench_function("unavailable", |b| {
        b.iter(|| {
            i = (i + 1) % w.unseen.len();
            runtime.block_on(w.search.handle(&w.unseen[i]))
        });
    });
    group.finish();
    // Still open, still answered from the cache.
    let reply = runtime.block_on(w.search.handle(&w.cached[0]));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["source"], "last_good");
    assert!(w.clock.now() >= start());
}

criterion_group!(benches, criterion_search);

fn main() {
    // `cargo bench -- <filter>`: the measured loop runs unless the filter
    // names another bench.
    const WITH_VALUE: [&str; 14] = [
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--save-baseline",
        "--baseline",
        "--load-baseline",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--nresamples",
        "--output-format",
        "--color",
        "--profile-time",
        "--format",
    ];
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            filters.push(arg);
        }
    }
    let listing = std::env::args().any(|a| a == "--list" || a == "--test");
    if !listing && (filters.is_empty() || filters.iter().any(|f| f.contains("search"))) {
        percentiles(&runtime());
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
