//! The failure window, per batch: what the real consumer does after each
//! stream batch. Count the batch's outcomes into one bucket, add it to the
//! window and evaluate every rule over the last minute of buckets (the
//! failure-rate and slow rules over 10 s, the streak rules back to the
//! last success, up to 60 s).
//!
//! * `window_batch/<traffic>/<n>`: count `n` outcomes (10 or 100) and
//!   evaluate, on a window already holding a minute of that traffic (60
//!   one-second buckets): the pure code over the buckets as a store
//!   returns them (the benches' in-process breaker keeps a
//!   `RollingWindow` instead, which says the same);
//! * `window_batch_store/<traffic>/<n>`: the same through the in-memory
//!   `WindowStore` (`add`, then `since`: a copy of the buckets) as the real
//!   consumer's code calls it, awaited on a current-thread runtime;
//! * `window_evaluate/<traffic>`: `evaluate` alone over the 60 buckets;
//! * `window_oldest_read`: `WindowConfig::oldest_read` alone, which
//!   `evaluate` computes once per evaluation.

use std::hint::black_box;

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lifeboat_bench::{Outcome, sequences, start};
use lifeboat_core::OperatorId;
use lifeboat_core::memory::MemoryWindowStore;
use lifeboat_core::ports::WindowStore;
use lifeboat_core::window::{Bucket, CallCounts, WindowConfig};

/// A minute of one-second buckets of `calls`, 100 calls a bucket, the
/// newest the bucket of `now` (a whole second).
fn history(calls: &[Outcome], now: DateTime<Utc>) -> Vec<Bucket> {
    (0..60)
        .map(|s| {
            let mut counts = CallCounts::default();
            for outcome in calls.iter().skip(s * 100).take(100) {
                counts.record(outcome.health());
            }
            Bucket {
                start: now - TimeDelta::seconds(59 - i64::try_from(s).unwrap_or(0)),
                counts,
            }
        })
        .collect()
}

fn batches(c: &mut Criterion) {
    let cfg = WindowConfig::default();
    let now = start() + TimeDelta::seconds(120);
    let operator = OperatorId::new("nordic").expect("a valid operator id");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    c.bench_function("window_oldest_read", |b| {
        b.iter(|| cfg.oldest_read(black_box(now)));
    });
    // Healthy and brownout traffic: neither trips (the brownout's 30 % is
    // under the 50 % rule, and every bucket holds successes), so every rule
    // is checked, the common case after a batch.
    for seq in sequences().into_iter().take(2) {
        let buckets = history(&seq.calls, now);
        assert_eq!(cfg.evaluate(&buckets, now), None, "{}", seq.name);

        let mut evaluate = c.benchmark_group("window_evaluate");
        evaluate.bench_function(seq.name, |b| {
            b.iter(|| cfg.evaluate(black_box(&buckets), now));
        });
        evaluate.finish();

        let mut group = c.benchmark_group(format!("window_batch/{}", seq.name));
        for n in [10usize, 100] {
            let batch = &seq.calls[6_000..6_000 + n];
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), batch, |b, batch| {
                b.iter_batched_ref(
                    || buckets.clone(),
                    |window| {
                        let mut counts = CallCounts::default();
                        for outcome in batch {
                            counts.record(outcome.health());
                        }
                        let start = cfg.bucket_start(now);
                        match window.last_mut() {
                            Some(last) if last.start == start => last.counts.add(&counts),
                            _ => window.push(Bucket { start, counts }),
                        }
                        cfg.evaluate(window, now)
                    },
                    criterion::BatchSize::SmallInput,
                );
            });
        }
        group.finish();

        let store = MemoryWindowStore::new();
        runtime.block_on(async {
            for bucket in &buckets {
                store
                    .add(&operator, bucket.start, &bucket.counts)
                    .await
                    .expect("the memory store takes every add");
            }
        });
        let mut group = c.benchmark_group(format!("window_batch_store/{}", seq.name));
        for n in [10usize, 100] {
            let batch = &seq.calls[6_000..6_000 + n];
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), batch, |b, batch| {
                b.iter(|| {
                    runtime.block_on(async {
                        let mut counts = CallCounts::default();
                        for outcome in batch {
                            counts.record(outcome.health());
                        }
                        // Every iteration adds to the same newest bucket:
                        // its counts grow, the rules' answers do not change.
                        let _ = store.add(&operator, cfg.bucket_start(now), &counts).await;
                        let read = store
                            .since(&operator, cfg.oldest_read(now))
                            .await
                            .unwrap_or_default();
                        cfg.evaluate(&read, now)
                    })
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, batches);
criterion_main!(benches);
