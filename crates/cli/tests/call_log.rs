//! docs/timeouts.md's Logs Insights query, run on the lines the real
//! consumer prints: its `fields` and `filter` clauses applied to the JSON
//! lines of Lambda's formatter, and the rows read back by the advisor.

#![allow(clippy::unwrap_used)]

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lifeboat_cli::ops::calls::{self, CallOutcome};
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryCacheStore, MemoryEventBus, MemoryMetrics, MemoryRequestStore,
    MemoryWindowStore,
};
use lifeboat_core::ports::{Clock, OperatorApi, RequestStore};
use lifeboat_core::request::{CallClass, CallResult, OperatorCall, RequestRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::{Operation, OperatorId, SystemClock};
use lifeboat_sim::suite::stream_record;
use real_consumer::{ConsumerPorts, RealConsumer};
use serde_json::{Value, json};

const DOC: &str = include_str!("../../../docs/timeouts.md");

/// Log lines, as Lambda's log stream receives them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Answers by request id: one answer, one timeout, one 500.
struct Scripted;

#[async_trait]
impl OperatorApi for Scripted {
    fn knows(&self, _: &OperatorId) -> bool {
        true
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        let (class, ms, body) = match call.request_id.as_str() {
            "r-answered" => (CallClass::Ok, 1312, Some(r#"{"sailings":[]}"#.to_owned())),
            "r-timeout" => (CallClass::Timeout, 3000, None),
            _ => (CallClass::ServerError { status: 500 }, 40, None),
        };
        CallResult {
            class,
            elapsed: Duration::from_millis(ms),
            body,
            detail: String::new(),
        }
    }
}

/// The query's `fields` (source, name) pairs and its `filter` (path, value).
fn query() -> (Vec<(String, String)>, (String, String)) {
    let block = DOC
        .split("```")
        .find(|b| b.trim_start().starts_with("fields @timestamp"))
        .expect("docs/timeouts.md has the query");
    let fields_line = block.trim().lines().next().unwrap();
    let fields = fields_line
        .trim_start_matches("fields ")
        .split(", ")
        .map(|f| {
            let (source, name) = f.split_once(" as ").expect("every field is named");
            (source.trim().to_owned(), name.trim().to_owned())
        })
        .collect();
    let filter = block
        .lines()
        .find_map(|l| l.trim().strip_prefix("| filter "))
        .expect("the query filters");
    let (path, value) = filter.split_once(" = ").unwrap();
    (
        fields,
        (path.to_owned(), value.trim_matches('"').to_owned()),
    )
}

fn at_path<'a>(line: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(line, |v, key| v.get(key))
}

#[tokio::test]
async fn the_documented_query_exports_what_the_consumer_logs() {
    let captured = Captured::default();
    // The subscriber a function sets up with AWS_LAMBDA_LOG_FORMAT=JSON.
    let subscriber = lifeboat_aws::logs::subscriber(
        captured.clone(),
        true,
        lifeboat_aws::logs::filter(Some("INFO"), None),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

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
            operator: Arc::new(Scripted),
            clock: clock.clone(),
        },
        Settings::default(),
        4,
    )
    .with_call_log_share(1.0);
    let now = clock.now();
    let mut records = Vec::new();
    for (i, id) in ["r-answered", "r-timeout", "r-failed"].iter().enumerate() {
        let request = RequestRecord {
            request_id: (*id).to_owned(),
            operator: nordic.clone(),
            operation: Operation::Search,
            params: Default::default(),
            created_at: now,
            deadline: now + chrono::TimeDelta::seconds(30),
        };
        requests.put_request(&request).await.unwrap();
        records.push(stream_record(&request, i));
    }
    consumer
        .handle(&json!({ "Records": records }))
        .await
        .unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let (fields, (filter_path, filter_value)) = query();
    let header: Vec<&str> = fields.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(header.join(","), calls::HEADER, "the query's columns");
    let mut csv = format!("{}\n", calls::HEADER);
    for line in text.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        if at_path(&line, &filter_path).and_then(Value::as_str) != Some(&filter_value) {
            continue;
        }
        let row: Vec<String> = fields
            .iter()
            .map(|(source, _)| match source.as_str() {
                // CloudWatch's ingestion time, in its CSV export's format.
                "@timestamp" => "2026-11-03 09:00:00.000".to_owned(),
                path => match at_path(&line, path) {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => panic!("{path} missing from {line}"),
                },
            })
            .collect();
        csv.push_str(&row.join(","));
        csv.push('\n');
    }
    let mut rows = calls::read(&csv).unwrap();
    rows.sort_by(|a, b| a.duration_ms.total_cmp(&b.duration_ms));
    let seen: Vec<(f64, CallOutcome)> = rows.iter().map(|r| (r.duration_ms, r.outcome)).collect();
    assert_eq!(
        seen,
        vec![
            (40.0, CallOutcome::Failed),
            (1312.0, CallOutcome::Answered),
            (3000.0, CallOutcome::Timeout)
        ],
        "{csv}"
    );
    assert!(
        rows.iter()
            .all(|r| r.operator == nordic && r.operation == Operation::Search)
    );
}
