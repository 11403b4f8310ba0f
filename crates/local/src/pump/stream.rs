//! The stream pump: a DynamoDB stream feeding a Lambda through its event
//! source mapping, as Lambda's poller does (what it honours and what it
//! simplifies: docs/local.md, "The stream pump, next to Lambda's poller").

#[cfg(test)]
mod delivery_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    FilterError, Invoker, MappingView, StopSignal, TaskHandle, first_failed, lambda_record, lock,
    read_mapping,
};

/// Where the pump starts reading each shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingPosition {
    /// The oldest record still in the stream.
    TrimHorizon,
    /// Only records written after the pump started.
    Latest,
}

impl StartingPosition {
    fn iterator_type(self) -> ShardIteratorType {
        match self {
            StartingPosition::TrimHorizon => ShardIteratorType::TrimHorizon,
            StartingPosition::Latest => ShardIteratorType::Latest,
        }
    }
}

/// How a [`StreamPump`] runs.
#[derive(Debug, Clone)]
pub struct PumpConfig {
    /// The event source mapping to play.
    pub mapping_uuid: String,
    /// `None`: the mapping's `StartingPosition` (LATEST if it has none).
    pub starting_position: Option<StartingPosition>,
    /// Pause between polls when there is nothing to deliver.
    pub poll_every: Duration,
    /// First pause before a failed batch is retried; doubles per retry, up
    /// to 2 s.
    pub retry_backoff: Duration,
    /// Records per `GetRecords` call.
    pub read_limit: i32,
    /// Every record read, in stream order and in Lambda's shape, before
    /// filtering: for tests and live views.
    pub tap: Option<mpsc::UnboundedSender<Value>>,
    /// The binary under `cargo lambda watch` of each function the mapping
    /// may name, by function name (a stack's functions are named
    /// `<stack>-<LogicalId>-<suffix>`); a name not here is the binary's.
    pub binaries: BTreeMap<String, String>,
}

impl PumpConfig {
    pub fn new(mapping_uuid: impl Into<String>) -> Self {
        Self {
            mapping_uuid: mapping_uuid.into(),
            starting_position: None,
            poll_every: Duration::from_millis(100),
            retry_backoff: Duration::from_millis(200),
            read_limit: 1000,
            tap: None,
            binaries: BTreeMap::new(),
        }
    }

    /// The mapping as the pump plays it: its function named by its binary.
    fn resolve(&self, mut mapping: MappingView) -> MappingView {
        if let Some(binary) = self.binaries.get(&mapping.function) {
            mapping.function.clone_from(binary);
        }
        mapping
    }
}

/// What a [`StreamPump`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PumpStats {
    /// Records read from the stream (before filtering).
    pub records_read: u64,
    /// Records read, by `eventName`.
    pub read_by_event: BTreeMap<String, u64>,
    /// Records the mapping's filters dropped.
    pub filtered_out: u64,
    /// Invocations, by function (retries included).
    pub invocations: BTreeMap<String, u64>,
    /// Records a function took (not reported back as failed), by function.
    pub delivered: BTreeMap<String, u64>,
    /// Invocations answered with `batchItemFailures`.
    pub partial_failures: u64,
    /// Invocations that failed as a whole (function error, transport, bad
    /// answer).
    pub failed_invocations: u64,
    /// Batches (or their remainders) that were sent again.
    pub retried_batches: u64,
    /// Records sent again after a failure.
    pub redelivered_records: u64,
    /// Records given up after `MaximumRetryAttempts`.
    pub discarded_records: u64,
    /// Records older than `MaximumRecordAgeInSeconds`, dropped unsent.
    pub too_old: u64,
    /// Polls skipped because the mapping was not enabled.
    pub paused_polls: u64,
    /// Stream or mapping reads that failed.
    pub errors: u64,
    pub last_error: Option<String>,
    /// The function of the latest invocation.
    pub last_target: Option<String>,
}

impl PumpStats {
    /// Invocations of every function.
    pub fn batches(&self) -> u64 {
        self.invocations.values().sum()
    }

    pub fn delivered_to(&self, function: &str) -> u64 {
        self.delivered.get(function).copied().unwrap_or(0)
    }

    pub fn invocations_of(&self, function: &str) -> u64 {
        self.invocations.get(function).copied().unwrap_or(0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error("reading event source mapping {uuid}: {message}")]
    Mapping { uuid: String, message: String },
    #[error("event source mapping {uuid} has no {what}")]
    Incomplete { uuid: String, what: &'static str },
    #[error("event source mapping {uuid}: {source}")]
    Filter { uuid: String, source: FilterError },
    #[error("reading stream {stream}: {message}")]
    Stream { stream: String, message: String },
    #[error("stream record cannot be converted: {0}")]
    Record(String),
}

/// A record read and admitted, waiting for delivery.
#[derive(Debug)]
struct Pending {
    sequence: String,
    /// `ApproximateCreationDateTime`, epoch seconds.
    created: Option<i64>,
    record: Value,
}

#[derive(Debug)]
struct Shard {
    id: String,
    /// `None`: the shard is closed and read to its end.
    iterator: Option<String>,
    last_sequence: Option<String>,
    pending: VecDeque<Pending>,
    /// The first sequence number of the batch that keeps failing, and how
    /// many times it failed.
    failing: Option<(String, u32)>,
    /// A smaller batch after a function error, with bisecting on.
    bisect_limit: Option<usize>,
}

/// The stream pump of one event source mapping; see the module docs.
#[derive(Debug)]
pub struct StreamPump {
    task: TaskHandle,
    stats: Arc<Mutex<PumpStats>>,
    stream_arn: String,
}

impl StreamPump {
    /// Read the mapping, open iterators on the stream's shards (so with
    /// LATEST, everything written after this returns is delivered), and start
    /// pumping. `lambda` is the Lambda API that owns the mapping (moto);
    /// `invoker` reaches the functions (`cargo lambda watch`).
    pub async fn start(
        streams: aws_sdk_dynamodbstreams::Client,
        lambda: aws_sdk_lambda::Client,
        invoker: Invoker,
        config: PumpConfig,
    ) -> Result<Self, PumpError> {
        let mapping = read_mapping(&lambda, &config.mapping_uuid).await?;
        let position = config
            .starting_position
            .or(mapping.starting_position)
            .unwrap_or(StartingPosition::Latest);
        let stats = Arc::new(Mutex::new(PumpStats::default()));
        let mut runner = Runner {
            streams,
            lambda,
            invoker,
            config,
            stats: Arc::clone(&stats),
            stream_arn: mapping.stream_arn.clone(),
            shards: Vec::new(),
            next_shard: 0,
        };
        runner.open_shards(position).await?;
        let task = TaskHandle::spawn(move |stop| runner.run(stop));
        Ok(Self {
            task,
            stats,
            stream_arn: mapping.stream_arn,
        })
    }

    pub fn stats(&self) -> PumpStats {
        lock(&self.stats).clone()
    }

    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stop after the invocation in flight, if any.
    pub async fn stop(self) {
        self.task.stop().await;
    }
}

struct Runner {
    streams: aws_sdk_dynamodbstreams::Client,
    lambda: aws_sdk_lambda::Client,
    invoker: Invoker,
    config: PumpConfig,
    stats: Arc<Mutex<PumpStats>>,
    stream_arn: String,
    shards: Vec<Shard>,
    next_shard: usize,
}

/// How one delivery attempt ended.
enum Delivery {
    /// Every record taken.
    Done,
    /// Records from this index on failed (reported back).
    FailedFrom(usize),
    /// The invocation failed as a whole.
    Failed,
}

impl Runner {
    fn stat(&self, f: impl FnOnce(&mut PumpStats)) {
        f(&mut lock(&self.stats));
    }

    fn error(&self, e: &PumpError) {
        tracing::warn!(error = %e, "stream pump");
        self.stat(|s| {
            s.errors += 1;
            s.last_error = Some(e.to_string());
        });
    }

    fn stream_error(&self, e: impl std::fmt::Display) -> PumpError {
        PumpError::Stream {
            stream: self.stream_arn.clone(),
            message: e.to_string(),
        }
    }

    /// Every shard of the stream (new ones only, when called again).
    async fn open_shards(&mut self, position: StartingPosition) -> Result<(), PumpError> {
        let mut start_after: Option<String> = None;
        loop {
            let output = self
                .streams
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start_after.clone())
                .send()
                .await
                .map_err(|e| self.stream_error(DisplayErrorContext(&e)))?;
            let Some(description) = output.stream_description else {
                return Err(self.stream_error("DescribeStream returned no description"));
            };
            for shard in description.shards() {
                let Some(id) = shard.shard_id() else { continue };
                if self.shards.iter().any(|s| s.id == id) {
                    continue;
                }
                let closed = shard
                    .sequence_number_range()
                    .and_then(|r| r.ending_sequence_number())
                    .is_some();
                if closed && position == StartingPosition::Latest {
                    continue;
                }
                let iterator = self.iterator(id, position.iterator_type(), None).await?;
                self.shards.push(Shard {
                    id: id.to_owned(),
                    iterator: Some(iterator),
                    last_sequence: None,
                    pending: VecDeque::new(),
                    failing: None,
                    bisect_limit: None,
                });
            }
            match description.last_evaluated_shard_id {
                Some(last) => start_after = Some(last),
                None => return Ok(()),
            }
        }
    }

    async fn iterator(
        &self,
        shard: &str,
        kind: ShardIteratorType,
        after: Option<&str>,
    ) -> Result<String, PumpError> {
        self.streams
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(after.map(str::to_owned))
            .send()
            .await
            .map_err(|e| self.stream_error(DisplayErrorContext(&e)))?
            .shard_iterator
            .ok_or_else(|| self.stream_error(format!("no iterator for shard {shard}")))
    }

    async fn run(mut self, mut stop: StopSignal) {
        loop {
            if stop.is_stopped() {
                return;
            }
            let delivered = match self.step().await {
                Ok(delivered) => delivered,
                Err(e) => {
                    self.error(&e);
                    false
                }
            };
            if !delivered && stop.sleep(self.config.poll_every).await {
                return;
            }
            if let Some((shard, attempts)) = self.backoff_due() {
                let pause = self
                    .config
                    .retry_backoff
                    .saturating_mul(1 << attempts.min(4))
                    .min(Duration::from_secs(2));
                tracing::debug!(shard, attempts, ?pause, "retrying a failed batch");
                if stop.sleep(pause).await {
                    return;
                }
            }
        }
    }

    /// A shard whose next batch is a retry, with its failures so far.
    fn backoff_due(&self) -> Option<(String, u32)> {
        self.shards.iter().find_map(|s| {
            let (seq, attempts) = s.failing.as_ref()?;
            let next = s.pending.front()?;
            (next.sequence == *seq).then(|| (s.id.clone(), *attempts))
        })
    }

    /// Read the mapping, read the stream, deliver one batch. Returns whether
    /// a batch was delivered.
    async fn step(&mut self) -> Result<bool, PumpError> {
        let mapping = self
            .config
            .resolve(read_mapping(&self.lambda, &self.config.mapping_uuid).await?);
        if !mapping.delivers() {
            self.stat(|s| s.paused_polls += 1);
            return Ok(false);
        }
        for i in 0..self.shards.len() {
            if self.shards[i].pending.len() < mapping.batch_size
                && let Err(e) = self.read_shard(i, &mapping).await
            {
                self.error(&e);
            }
        }
        if !self.shards.is_empty() && self.shards.iter().all(|s| s.iterator.is_none()) {
            // Every shard ended: the stream went on in new ones.
            self.open_shards(StartingPosition::TrimHorizon).await?;
        }
        self.expire_old(&mapping);
        let count = self.shards.len();
        let Some(i) = (0..count)
            .map(|k| (self.next_shard + k) % count.max(1))
            .find(|&i| !self.shards[i].pending.is_empty())
        else {
            return Ok(false);
        };
        self.next_shard = (i + 1) % count.max(1);
        self.deliver(i, &mapping).await;
        Ok(true)
    }

    async fn read_shard(&mut self, i: usize, mapping: &MappingView) -> Result<(), PumpError> {
        let Some(iterator) = self.shards[i].iterator.clone() else {
            return Ok(());
        };
        let result = self
            .streams
            .get_records()
            .shard_iterator(iterator)
            .limit(self.config.read_limit)
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_expired_iterator_exception()) =>
            {
                let shard = self.shards[i].id.clone();
                let after = self.shards[i].last_sequence.clone();
                let iterator = match after.as_deref() {
                    Some(seq) => {
                        self.iterator(&shard, ShardIteratorType::AfterSequenceNumber, Some(seq))
                            .await?
                    }
                    None => {
                        self.iterator(&shard, ShardIteratorType::TrimHorizon, None)
                            .await?
                    }
                };
                self.shards[i].iterator = Some(iterator);
                return Ok(());
            }
            Err(e) => return Err(self.stream_error(DisplayErrorContext(&e))),
        };
        self.shards[i].iterator = output.next_shard_iterator;
        for record in output.records.unwrap_or_default() {
            let json = match lambda_record(&record, &self.stream_arn) {
                Ok(json) => json,
                Err(e) => {
                    self.error(&e);
                    continue;
                }
            };
            let sequence = record
                .dynamodb()
                .and_then(|d| d.sequence_number())
                .unwrap_or_default()
                .to_owned();
            let event = record
                .event_name()
                .map(|n| n.as_str().to_owned())
                .unwrap_or_default();
            if let Some(tap) = &self.config.tap {
                let _ = tap.send(json.clone());
            }
            let admitted = mapping.filter.admits(&json);
            self.stat(|s| {
                s.records_read += 1;
                *s.read_by_event.entry(event).or_default() += 1;
                if !admitted {
                    s.filtered_out += 1;
                }
            });
            let shard = &mut self.shards[i];
            shard.last_sequence = Some(sequence.clone());
            if admitted {
                shard.pending.push_back(Pending {
                    sequence,
                    created: record
                        .dynamodb()
                        .and_then(|d| d.approximate_creation_date_time())
                        .map(|t| t.secs()),
                    record: json,
                });
            }
        }
        Ok(())
    }

    fn expire_old(&mut self, mapping: &MappingView) {
        let Some(age) = mapping.max_record_age else {
            return;
        };
        let limit = chrono::Utc::now().timestamp() - i64::try_from(age.as_secs()).unwrap_or(0);
        let mut dropped = 0;
        for shard in &mut self.shards {
            while shard
                .pending
                .front()
                .is_some_and(|p| p.created.is_some_and(|c| c < limit))
            {
                if let Some(p) = shard.pending.pop_front() {
                    tracing::warn!(shard = %shard.id, sequence = %p.sequence, "record too old; discarded unsent");
                }
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.stat(|s| s.too_old += dropped);
        }
    }

    /// Deliver one batch of shard `i` and settle what comes back.
    async fn deliver(&mut self, i: usize, mapping: &MappingView) {
        let limit = self.shards[i]
            .bisect_limit
            .unwrap_or(mapping.batch_size)
            .min(mapping.batch_size)
            .max(1);
        let shard = &self.shards[i];
        let size = shard.pending.len().min(limit);
        let sequences: Vec<String> = shard
            .pending
            .iter()
            .take(size)
            .map(|p| p.sequence.clone())
            .collect();
        let payload = json!({
            "Records": shard.pending.iter().take(size).map(|p| &p.record).collect::<Vec<_>>()
        });
        let function = mapping.function.clone();
        let retry = shard
            .failing
            .as_ref()
            .is_some_and(|(seq, _)| sequences.first() == Some(seq));
        self.stat(|s| {
            *s.invocations.entry(function.clone()).or_default() += 1;
            s.last_target = Some(function.clone());
            if retry {
                s.retried_batches += 1;
                s.redelivered_records += size as u64;
            }
        });

        let outcome = match self.invoker.invoke(&function, &payload).await {
            Ok(answer) if mapping.report_item_failures => {
                let ids: Vec<&str> = sequences.iter().map(String::as_str).collect();
                match first_failed(&answer, &ids) {
                    Ok(None) => Delivery::Done,
                    Ok(Some(at)) => Delivery::FailedFrom(at),
                    Err(why) => {
                        tracing::warn!(function = %function, why, "invalid batch item failures; the whole batch failed");
                        Delivery::Failed
                    }
                }
            }
            Ok(_) => Delivery::Done,
            Err(e) => {
                tracing::warn!(function = %function, error = %e, "invocation failed");
                self.stat(|s| {
                    s.failed_invocations += 1;
                    s.last_error = Some(e.to_string());
                });
                Delivery::Failed
            }
        };

        let (taken, failed_from) = match outcome {
            Delivery::Done => (size, None),
            Delivery::FailedFrom(at) => {
                self.stat(|s| s.partial_failures += 1);
                (at, Some(at))
            }
            Delivery::Failed => (0, Some(0)),
        };
        self.stat(|s| *s.delivered.entry(function.clone()).or_default() += taken as u64);
        let stats = Arc::clone(&self.stats);
        let shard = &mut self.shards[i];
        shard.pending.drain(..taken);
        let Some(from) = failed_from else {
            shard.failing = None;
            shard.bisect_limit = None;
            return;
        };
        let Some(first) = shard.pending.front().map(|p| p.sequence.clone()) else {
            return;
        };
        let attempts = match &shard.failing {
            Some((seq, n)) if *seq == first => n + 1,
            _ => 1,
        };
        if matches!(outcome, Delivery::Failed) && mapping.bisect_on_error && size > 1 {
            shard.bisect_limit = Some(size.div_ceil(2));
        }
        if mapping.max_retry_attempts.is_some_and(|max| attempts > max) {
            let rest = size - from;
            let gone: Vec<Pending> = shard
                .pending
                .drain(..rest.min(shard.pending.len()))
                .collect();
            tracing::error!(
                function = %function,
                shard = %shard.id,
                first = gone.first().map(|p| p.sequence.as_str()).unwrap_or("-"),
                last = gone.last().map(|p| p.sequence.as_str()).unwrap_or("-"),
                records = gone.len(),
                attempts,
                "retries exhausted; records discarded"
            );
            shard.failing = None;
            shard.bisect_limit = None;
            lock(&stats).discarded_records += gone.len() as u64;
        } else {
            shard.failing = Some((first, attempts));
        }
    }
}
