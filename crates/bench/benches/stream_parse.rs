//! Stream record parsing, per record: a DynamoDB stream record of the
//! Requests table read into lifeboat's `RequestRecord` (or skipped or
//! quarantined), as both consumers do for every record of a batch.
//!
//! * `stream_parse/classify/<kind>`: `lifeboat_stream::classify` on a
//!   record already parsed to JSON (the Lambda runtime hands the handler a
//!   parsed payload): `request` is one of our INSERTs (tests/events/
//!   dynamodb-insert-requests.json), `mixed` the six foreign, malformed,
//!   MODIFY and REMOVE records of dynamodb-foreign-and-malformed.json;
//! * `stream_parse/from_text/<n>`: a batch of `n` request records from its
//!   JSON text: parse, `records`, `classify` each; per record.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lifeboat_stream::{StreamItem, classify, records};
use serde_json::Value;

const INSERTS: &str = include_str!("../../../tests/events/dynamodb-insert-requests.json");
const MIXED: &str = include_str!("../../../tests/events/dynamodb-foreign-and-malformed.json");

fn parse(text: &str) -> Vec<Value> {
    let payload: Value = serde_json::from_str(text).expect("a fixture of tests/events");
    records(&payload).expect("a stream batch").to_vec()
}

/// A batch of `n` request records, the fixture's three in turn.
fn batch_text(inserts: &[Value], n: usize) -> String {
    let batch: Vec<Value> = inserts.iter().cycle().take(n).cloned().collect();
    serde_json::json!({ "Records": batch }).to_string()
}

fn stream_parse(c: &mut Criterion) {
    let inserts = parse(INSERTS);
    let mixed = parse(MIXED);
    assert!(
        inserts
            .iter()
            .all(|r| matches!(classify(r), StreamItem::Request { .. }))
    );

    let mut group = c.benchmark_group("stream_parse/classify");
    for (name, recs) in [("request", &inserts), ("mixed", &mixed)] {
        group.throughput(Throughput::Elements(recs.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), recs, |b, recs| {
            b.iter(|| {
                for record in recs {
                    black_box(classify(black_box(record)));
                }
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("stream_parse/from_text");
    for n in [1usize, 10, 100] {
        let text = batch_text(&inserts, n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &text, |b, text| {
            b.iter(|| {
                let payload: Value = serde_json::from_str(black_box(text)).unwrap_or_default();
                let mut requests = 0usize;
                for record in records(&payload).unwrap_or_default() {
                    if let StreamItem::Request { .. } = classify(record) {
                        requests += 1;
                    }
                }
                assert_eq!(requests, n);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, stream_parse);
criterion_main!(benches);
