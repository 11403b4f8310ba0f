//! Memory of the real consumer under 50 concurrent maximal answers.
//!
//! One batch of 50 requests, all called at once (the consumer's call
//! concurrency) through the real HTTP operator client against a local server
//! whose answers are: exactly the largest lifeboat keeps
//! (`MAX_ANSWER_BYTES`, 256 KiB), 1 MiB announced by `Content-Length`
//! (refused before the body is read), and 1 MiB streamed without a length (cut
//! at the cap). The heap is counted by dhat; the figure is the batch's peak
//! heap over what was allocated before it. Printed with
//! `cargo test -p lifeboat-e2e --test bounded_answers -- --nocapture`.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use chrono::TimeDelta;
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryCacheStore, MemoryEventBus, MemoryMetrics, MemoryRequestStore,
    MemoryWindowStore,
};
use lifeboat_core::ports::{Clock, RequestStore};
use lifeboat_core::request::{MAX_ANSWER_BYTES, OutcomeKind, RequestRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::{Operation, OperatorId, SystemClock};
use lifeboat_operator::HttpOperatorApi;
use real_consumer::{ConsumerPorts, RealConsumer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[global_allocator]
static HEAP: dhat::Alloc = dhat::Alloc;

const CALLS: usize = 50;

/// How the local operator answers.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// `bytes` with a `Content-Length`.
    Sized(usize),
    /// `bytes` without a length, the connection closed after it.
    Streamed(usize),
    /// `bytes` with a `Content-Length`, made of small sailings: the answer
    /// whose parse holds the most beside its text.
    Sailings(usize),
}

/// A valid search answer of exactly `bytes` bytes.
fn search_answer(bytes: usize) -> Vec<u8> {
    let head = br#"{"sailings":[],"notes":""#;
    let tail = br#""}"#;
    let mut body = Vec::with_capacity(bytes);
    body.extend_from_slice(head);
    body.resize(bytes - tail.len(), b'x');
    body.extend_from_slice(tail);
    body
}

/// A valid search answer of exactly `bytes` bytes: as many sailings as fit,
/// as an operator lists them, then padding.
fn sailings_answer(bytes: usize) -> Vec<u8> {
    let sailing = |i: usize| {
        format!(
            r#"{{"sailing_id":"HEL-TLL-20261224-{i:06}","departs":"2026-12-24T07:30:00Z","arrives":"2026-12-24T09:30:00Z","from":"HEL","to":"TLL","price_cents":5800,"currency":"EUR"}}"#
        )
    };
    let tail = br#"],"notes":""}"#;
    let mut body = br#"{"sailings":["#.to_vec();
    let mut i = 0;
    loop {
        let next = sailing(i);
        if body.len() + 1 + next.len() + tail.len() > bytes {
            break;
        }
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(next.as_bytes());
        i += 1;
    }
    let notes = body.len() + tail.len();
    body.extend_from_slice(&tail[..tail.len() - 2]);
    body.resize(bytes - 2, b'x');
    body.extend_from_slice(&tail[tail.len() - 2..]);
    assert_eq!(body.len(), bytes, "{notes}");
    body
}

/// Serve `answer` to every connection on a free loopback port.
async fn serve(answer: Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let body = Arc::new(match answer {
        Answer::Sized(n) | Answer::Streamed(n) => search_answer(n),
        Answer::Sailings(n) => sailings_answer(n),
    });
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let length = match answer {
                    Answer::Sized(n) | Answer::Sailings(n) => format!("content-length: {n}\r\n"),
                    Answer::Streamed(_) => String::new(),
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}connection: close\r\n\r\n"
                );
                // The client may stop reading at its cap: a failed write is
                // what it looks like.
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    url
}

struct Run {
    peak_over_baseline: usize,
    answered: usize,
    failed: usize,
}

async fn batch_against(answer: Answer) -> Run {
    let url = serve(answer).await;
    let nordic = OperatorId::new("nordic").unwrap();
    let requests = Arc::new(MemoryRequestStore::new());
    let clock = Arc::new(SystemClock);
    let consumer = RealConsumer::new(
        ConsumerPorts {
            requests: requests.clone(),
            breakers: Arc::new(MemoryBreakerStore::new()),
            window: Arc::new(MemoryWindowStore::new()),
            events: Arc::new(MemoryEventBus::new()),
            cache: Arc::new(MemoryCacheStore::new()),
            metrics: Arc::new(MemoryMetrics::new()),
            operator: Arc::new(HttpOperatorApi::parse(&format!("nordic={url}")).unwrap()),
            clock: clock.clone(),
        },
        // What is measured is memory: a search budget no busy machine's
        // parse of 50 answers at once can run out of.
        Settings::from_json(
            r#"{"default": {"budgets": {"search": {"timeout": 60000, "slow_after": 50000}}}}"#,
        )
        .unwrap(),
        CALLS,
    )
    .with_call_log_share(0.0);
    let now = clock.now();
    let mut records = Vec::new();
    for i in 0..CALLS {
        let request = RequestRecord {
            request_id: format!("r-{i}"),
            operator: nordic.clone(),
            operation: Operation::Search,
            // A question each: 50 cache entries, not one.
            params: [("from".to_owned(), format!("P{i:02}"))].into(),
            created_at: now,
            deadline: now + TimeDelta::seconds(10),
        };
        requests.put_request(&request).await.unwrap();
        records.push(lifeboat_sim::suite::stream_record(&request, i));
    }
    let payload: Value = json!({ "Records": records });

    let baseline = dhat::HeapStats::get().curr_bytes;
    let report = consumer.handle(&payload).await.unwrap();
    let peak = dhat::HeapStats::get().max_bytes;
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(report.outcomes_written, CALLS);
    let (mut answered, mut failed) = (0, 0);
    for stored in requests.all() {
        match stored.outcome.map(|o| o.kind) {
            Some(OutcomeKind::Answered { .. }) => answered += 1,
            Some(OutcomeKind::Failed { .. }) => failed += 1,
            None => panic!("a request without an outcome"),
        }
    }
    Run {
        peak_over_baseline: peak.saturating_sub(baseline),
        answered,
        failed,
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_maximal_answers_at_once_stay_within_a_small_share_of_the_functions_memory() {
    let _heap = dhat::Profiler::builder().testing().build();
    // In rising order of what they hold, so each peak is its own (dhat
    // keeps the run's maximum).
    let refused = batch_against(Answer::Sized(1 << 20)).await;
    let cut = batch_against(Answer::Streamed(1 << 20)).await;
    let kept = batch_against(Answer::Sized(MAX_ANSWER_BYTES)).await;
    let listed = batch_against(Answer::Sailings(MAX_ANSWER_BYTES)).await;
    for (name, run) in [
        ("1 MiB announced", &refused),
        ("1 MiB streamed", &cut),
        ("256 KiB (the largest kept)", &kept),
        ("256 KiB of sailings", &listed),
    ] {
        eprintln!(
            "bounded answers: {CALLS} concurrent answers of {name}: peak heap +{:.1} MiB over the batch's start; {} answered, {} failed",
            mib(run.peak_over_baseline),
            run.answered,
            run.failed
        );
    }
    assert_eq!((refused.answered, refused.failed), (0, CALLS));
    assert_eq!((cut.answered, cut.failed), (0, CALLS));
    assert_eq!((kept.answered, kept.failed), (CALLS, 0));
    assert_eq!((listed.answered, listed.failed), (CALLS, 0));
    // The real consumer has 256 MB (template.yaml): a full batch of the
    // largest answers must stay well inside it, copies included.
    let limit = 64 << 20;
    for run in [&refused, &cut, &kept, &listed] {
        assert!(
            run.peak_over_baseline < limit,
            "{:.1} MiB",
            mib(run.peak_over_baseline)
        );
    }
}
