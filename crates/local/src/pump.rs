//! The parts of AWS that moto does not play, played by the harness: a
//! DynamoDB stream feeding a Lambda through its event source mapping
//! ([`StreamPump`]), an EventBridge rule invoking a Lambda ([`BusDrain`]),
//! an SQS queue feeding a Lambda through its event source mapping
//! ([`QueuePump`]), and a schedule ([`Ticker`]). Each runs as a tokio task
//! with a shutdown handle ([`TaskHandle`]) and stops when dropped.
//!
//! The functions themselves run under `cargo lambda watch` and are reached
//! only through Lambda's Invoke API ([`Invoker`]); moto keeps owning what it
//! does own (the stream, the event source mapping, the bus, the queue), so a
//! function that re-points the mapping through moto's Lambda API re-points
//! what the pump delivers to.
//!
//! # The stream pump, next to Lambda's poller
//!
//! Like Lambda, for each batch the pump:
//!
//! * reads the mapping (`GetEventSourceMapping`) and delivers to the function
//!   it names now (the function's name in the ARN is the binary's name under
//!   `cargo lambda watch`), and not at all while it is not `Enabled` (or
//!   `Updating`);
//! * drops the records its `FilterCriteria` do not admit ([`filter`]);
//! * invokes with up to `BatchSize` records, each in the exact shape of a
//!   Lambda DynamoDB event record ([`lambda_record`]);
//! * with `ReportBatchItemFailures`, reads `batchItemFailures` and delivers
//!   again from the first failed sequence number; an identifier that is empty
//!   or not in the batch fails the whole batch;
//! * retries a failed invocation (a function error, which `cargo lambda
//!   watch` answers with HTTP 500) with the same records, halving the batch
//!   each time with `BisectBatchOnFunctionError`, and after
//!   `MaximumRetryAttempts` retries logs the records as discarded and moves
//!   on; records older than `MaximumRecordAgeInSeconds` are discarded unsent.
//!
//! Simplifications: batches go out one at a time over all shards
//! (`ParallelizationFactor` is not honoured), shards are read without regard
//! to parent and child order (moto has one shard), and discarded records are
//! counted and logged but not sent to the `OnFailure` destination.

pub mod bus;
pub mod filter;
pub mod invoke;
pub mod queue;
pub(crate) mod task;
pub mod ticker;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{AttributeValue, Record, ShardIteratorType};
use aws_sdk_lambda::operation::get_event_source_mapping::GetEventSourceMappingOutput;
use aws_sdk_lambda::types::{EventSourcePosition, FunctionResponseType};
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use bus::{BusDrain, BusDrainConfig, DrainStats};
pub use filter::{FilterCriteria, FilterError};
pub use invoke::{InvokeError, Invoker};
pub use queue::{QueuePump, QueuePumpConfig, QueueStats};
pub use task::{StopSignal, TaskHandle};
pub use ticker::{Ticker, TickerConfig, TickerStats, schedule_event};

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
        }
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

/// An event source mapping, as the pump reads it before each batch.
#[derive(Debug, Clone, PartialEq)]
pub struct MappingView {
    pub uuid: String,
    pub stream_arn: String,
    pub function_arn: String,
    /// The function's name: the binary's name under `cargo lambda watch`.
    pub function: String,
    pub state: Option<String>,
    pub batch_size: usize,
    pub filter: FilterCriteria,
    pub report_item_failures: bool,
    /// `None`: retry until the records expire (Lambda's -1).
    pub max_retry_attempts: Option<u32>,
    /// `None`: records never get too old (Lambda's -1).
    pub max_record_age: Option<Duration>,
    pub bisect_on_error: bool,
    pub starting_position: Option<StartingPosition>,
}

impl MappingView {
    pub fn from_sdk(uuid: &str, m: &GetEventSourceMappingOutput) -> Result<Self, PumpError> {
        let incomplete = |what| PumpError::Incomplete {
            uuid: uuid.to_owned(),
            what,
        };
        let stream_arn = m
            .event_source_arn()
            .ok_or_else(|| incomplete("EventSourceArn"))?;
        let function_arn = m.function_arn().ok_or_else(|| incomplete("FunctionArn"))?;
        let filter =
            FilterCriteria::from_sdk(m.filter_criteria()).map_err(|source| PumpError::Filter {
                uuid: uuid.to_owned(),
                source,
            })?;
        Ok(Self {
            uuid: uuid.to_owned(),
            stream_arn: stream_arn.to_owned(),
            function_arn: function_arn.to_owned(),
            function: function_name(function_arn).to_owned(),
            state: m.state().map(str::to_owned),
            // Lambda's default for DynamoDB streams.
            batch_size: m
                .batch_size()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(100),
            filter,
            report_item_failures: m
                .function_response_types()
                .contains(&FunctionResponseType::ReportBatchItemFailures),
            max_retry_attempts: m
                .maximum_retry_attempts()
                .and_then(|n| u32::try_from(n).ok()),
            max_record_age: m
                .maximum_record_age_in_seconds()
                .and_then(|n| u64::try_from(n).ok())
                .map(Duration::from_secs),
            bisect_on_error: m.bisect_batch_on_function_error().unwrap_or(false),
            starting_position: match m.starting_position() {
                Some(EventSourcePosition::TrimHorizon) => Some(StartingPosition::TrimHorizon),
                Some(EventSourcePosition::Latest) => Some(StartingPosition::Latest),
                _ => None,
            },
        })
    }

    /// Whether Lambda delivers records in this state.
    pub fn delivers(&self) -> bool {
        matches!(self.state.as_deref(), None | Some("Enabled" | "Updating"))
    }
}

/// The function name in a function ARN
/// (`arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]`); anything
/// else is taken as a name already.
pub fn function_name(function_arn: &str) -> &str {
    match function_arn.split_once(":function:") {
        Some((_, rest)) => rest.split(':').next().unwrap_or(rest),
        None => function_arn,
    }
}

/// Read an event source mapping from the Lambda API.
pub async fn read_mapping(
    lambda: &aws_sdk_lambda::Client,
    uuid: &str,
) -> Result<MappingView, PumpError> {
    let output = lambda
        .get_event_source_mapping()
        .uuid(uuid)
        .send()
        .await
        .map_err(|e| PumpError::Mapping {
            uuid: uuid.to_owned(),
            message: aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
        })?;
    MappingView::from_sdk(uuid, &output)
}

/// A stream record in the shape Lambda gives it to a function.
pub fn lambda_record(record: &Record, stream_arn: &str) -> Result<Value, PumpError> {
    let change = record
        .dynamodb()
        .ok_or_else(|| PumpError::Record("no dynamodb part".into()))?;
    let mut dynamodb = serde_json::Map::new();
    if let Some(at) = change.approximate_creation_date_time() {
        dynamodb.insert("ApproximateCreationDateTime".into(), json!(at.secs()));
    }
    for (name, image) in [
        ("Keys", change.keys()),
        ("NewImage", change.new_image()),
        ("OldImage", change.old_image()),
    ] {
        if let Some(image) = image {
            dynamodb.insert(name.into(), item_json(image)?);
        }
    }
    let sequence = change
        .sequence_number()
        .ok_or_else(|| PumpError::Record("no SequenceNumber".into()))?;
    dynamodb.insert("SequenceNumber".into(), json!(sequence));
    if let Some(size) = change.size_bytes() {
        dynamodb.insert("SizeBytes".into(), json!(size));
    }
    if let Some(view) = change.stream_view_type() {
        dynamodb.insert("StreamViewType".into(), json!(view.as_str()));
    }
    let mut out = json!({
        "eventID": record.event_id().unwrap_or_default(),
        "eventName": record.event_name().map(|n| n.as_str()).unwrap_or_default(),
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "eventSource": record.event_source().unwrap_or("aws:dynamodb"),
        "awsRegion": record.aws_region().unwrap_or(crate::moto::REGION),
        "dynamodb": dynamodb,
        "eventSourceARN": stream_arn,
    });
    if let Some(identity) = record.user_identity() {
        out["userIdentity"] = json!({
            "type": identity.r#type().unwrap_or_default(),
            "principalId": identity.principal_id().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// An attribute map in DynamoDB JSON (`{"name": {"S": "…"}}`).
fn item_json(map: &HashMap<String, AttributeValue>) -> Result<Value, PumpError> {
    let item: HashMap<String, serde_dynamo::AttributeValue> = map
        .iter()
        .map(|(k, v)| Ok((k.clone(), attribute(v)?)))
        .collect::<Result<_, PumpError>>()?;
    serde_json::to_value(serde_dynamo::Item::from(item))
        .map_err(|e| PumpError::Record(e.to_string()))
}

/// serde_dynamo's own conversion panics on a type it does not know; this one
/// refuses it.
fn attribute(value: &AttributeValue) -> Result<serde_dynamo::AttributeValue, PumpError> {
    use serde_dynamo::AttributeValue as Av;
    Ok(match value {
        AttributeValue::S(s) => Av::S(s.clone()),
        AttributeValue::N(n) => Av::N(n.clone()),
        AttributeValue::Bool(b) => Av::Bool(*b),
        AttributeValue::Null(b) => Av::Null(*b),
        AttributeValue::B(b) => Av::B(b.as_ref().to_vec()),
        AttributeValue::Ss(v) => Av::Ss(v.clone()),
        AttributeValue::Ns(v) => Av::Ns(v.clone()),
        AttributeValue::Bs(v) => Av::Bs(v.iter().map(|b| b.as_ref().to_vec()).collect()),
        AttributeValue::L(v) => Av::L(v.iter().map(attribute).collect::<Result<_, _>>()?),
        AttributeValue::M(m) => Av::M(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), attribute(v)?)))
                .collect::<Result<_, PumpError>>()?,
        ),
        other => {
            return Err(PumpError::Record(format!(
                "unknown attribute type {other:?}"
            )));
        }
    })
}

/// The first failed record of a batch from a function's answer
/// (`{"batchItemFailures": [{"itemIdentifier": SEQ}, …]}`): `Ok(None)` when
/// nothing failed, `Err` when an identifier is empty or not in the batch,
/// which Lambda takes as a failure of the whole batch.
pub fn first_failed(answer: &Value, batch: &[&str]) -> Result<Option<usize>, String> {
    let Some(failures) = answer.get("batchItemFailures") else {
        return Ok(None);
    };
    let failures = match failures {
        Value::Null => return Ok(None),
        Value::Array(items) => items,
        other => return Err(format!("batchItemFailures is not an array: {other}")),
    };
    let mut first: Option<usize> = None;
    for failure in failures {
        let id = failure
            .get("itemIdentifier")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| format!("batch item failure without an itemIdentifier: {failure}"))?;
        let at = batch
            .iter()
            .position(|seq| *seq == id)
            .ok_or_else(|| format!("batch item failure {id} is not in the batch"))?;
        first = Some(first.map_or(at, |f| f.min(at)));
    }
    Ok(first)
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let mapping = read_mapping(&self.lambda, &self.config.mapping_uuid).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodbstreams::primitives::DateTime;
    use aws_sdk_dynamodbstreams::types::{OperationType, StreamRecord, StreamViewType};

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn modify_record() -> Record {
        let change = StreamRecord::builder()
            .approximate_creation_date_time(DateTime::from_secs(1_796_000_000))
            .keys("request_id", s("r-1"))
            .new_image("request_id", s("r-1"))
            .new_image("record_type", s("request"))
            .new_image(
                "outcome",
                AttributeValue::M(HashMap::from([
                    ("status".to_owned(), s("failed")),
                    ("call_ms".to_owned(), AttributeValue::N("12".into())),
                    ("ok".to_owned(), AttributeValue::Bool(false)),
                    ("tags".to_owned(), AttributeValue::L(vec![s("a")])),
                ])),
            )
            .old_image("request_id", s("r-1"))
            .old_image("record_type", s("request"))
            .sequence_number("1100000000017454423010")
            .size_bytes(349)
            .stream_view_type(StreamViewType::NewAndOldImages)
            .build();
        Record::builder()
            .event_id("bf974a4049b24efda74607f6a916c9d0")
            .event_name(OperationType::Modify)
            .event_version("1.1")
            .event_source("aws:dynamodb")
            .aws_region("us-east-1")
            .dynamodb(change)
            .build()
    }

    #[test]
    fn records_take_lambdas_shape() {
        let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/Requests/stream/2026-11-30T04:47:47.443610";
        let json = lambda_record(&modify_record(), arn).unwrap();
        assert_eq!(
            json,
            json!({
                "eventID": "bf974a4049b24efda74607f6a916c9d0",
                "eventName": "MODIFY",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1_796_000_000,
                    "Keys": {"request_id": {"S": "r-1"}},
                    "NewImage": {
                        "request_id": {"S": "r-1"},
                        "record_type": {"S": "request"},
                        "outcome": {"M": {
                            "status": {"S": "failed"},
                            "call_ms": {"N": "12"},
                            "ok": {"BOOL": false},
                            "tags": {"L": [{"S": "a"}]}
                        }}
                    },
                    "OldImage": {"request_id": {"S": "r-1"}, "record_type": {"S": "request"}},
                    "SequenceNumber": "1100000000017454423010",
                    "SizeBytes": 349,
                    "StreamViewType": "NEW_AND_OLD_IMAGES"
                },
                "eventSourceARN": arn
            })
        );
        // What the consumers parse it with.
        let parsed: aws_lambda_events::event::dynamodb::EventRecord =
            serde_json::from_value(json).unwrap();
        assert_eq!(
            parsed.change.sequence_number.as_deref(),
            Some("1100000000017454423010")
        );
        assert_eq!(parsed.event_name, "MODIFY");
    }

    #[test]
    fn function_names_come_from_arns() {
        assert_eq!(
            function_name("arn:aws:lambda:us-east-1:123456789012:function:real-consumer"),
            "real-consumer"
        );
        assert_eq!(
            function_name("arn:aws:lambda:us-east-1:123456789012:function:fallback-consumer:live"),
            "fallback-consumer"
        );
        assert_eq!(function_name("circuit-switch"), "circuit-switch");
    }

    #[test]
    fn redelivery_starts_at_the_first_failed_record() {
        let batch = ["10", "11", "12", "13"];
        assert_eq!(
            first_failed(&json!({"batchItemFailures": []}), &batch),
            Ok(None)
        );
        assert_eq!(first_failed(&Value::Null, &batch), Ok(None));
        assert_eq!(
            first_failed(&json!({"batchItemFailures": null}), &batch),
            Ok(None)
        );
        assert_eq!(
            first_failed(
                &json!({"batchItemFailures": [{"itemIdentifier": "13"}, {"itemIdentifier": "11"}]}),
                &batch
            ),
            Ok(Some(1))
        );
        assert!(
            first_failed(
                &json!({"batchItemFailures": [{"itemIdentifier": ""}]}),
                &batch
            )
            .is_err()
        );
        assert!(
            first_failed(
                &json!({"batchItemFailures": [{"itemIdentifier": "99"}]}),
                &batch
            )
            .is_err()
        );
        assert!(first_failed(&json!({"batchItemFailures": [{}]}), &batch).is_err());
        assert!(first_failed(&json!({"batchItemFailures": "x"}), &batch).is_err());
    }
}

/// The pump's loop against scripted AWS answers: what it delivers, in which
/// batches, and what it gives up.
#[cfg(test)]
mod delivery_tests {
    use super::*;
    use aws_sdk_dynamodbstreams::Client as Streams;
    use aws_sdk_dynamodbstreams::operation::describe_stream::DescribeStreamOutput;
    use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
    use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput;
    use aws_sdk_dynamodbstreams::primitives::DateTime;
    use aws_sdk_dynamodbstreams::types::{OperationType, Shard, StreamDescription, StreamRecord};
    use aws_sdk_lambda::Client as Lambda;
    use aws_sdk_lambda::operation::invoke::InvokeOutput;
    use aws_sdk_lambda::primitives::Blob;
    use aws_sdk_lambda::types::{Filter, FilterCriteria as SdkFilterCriteria};
    use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};

    const STREAM: &str =
        "arn:aws:dynamodb:us-east-1:123456789012:table/Requests/stream/2026-11-30T00:00:00.000";
    const REAL: &str = "arn:aws:lambda:us-east-1:123456789012:function:real-consumer";

    type Seen = Arc<Mutex<Vec<Vec<String>>>>;

    fn record(seq: u32, event: OperationType) -> Record {
        let id = AttributeValue::S(format!("r-{seq}"));
        let change = StreamRecord::builder()
            .approximate_creation_date_time(DateTime::from_secs(chrono::Utc::now().timestamp()))
            .keys("request_id", id.clone())
            .new_image("request_id", id)
            .new_image("record_type", AttributeValue::S("request".into()))
            .sequence_number(seq.to_string())
            .size_bytes(100)
            .build();
        Record::builder()
            .event_id(format!("e-{seq}"))
            .event_name(event)
            .event_version("1.1")
            .event_source("aws:dynamodb")
            .aws_region("us-east-1")
            .dynamodb(change)
            .build()
    }

    fn inserts(seqs: std::ops::RangeInclusive<u32>) -> Vec<Record> {
        seqs.map(|s| record(s, OperationType::Insert)).collect()
    }

    fn mapping(retries: i32, bisect: bool) -> GetEventSourceMappingOutput {
        GetEventSourceMappingOutput::builder()
            .uuid("m-1")
            .event_source_arn(STREAM)
            .function_arn(REAL)
            .state("Enabled")
            .batch_size(3)
            .function_response_types(FunctionResponseType::ReportBatchItemFailures)
            .maximum_retry_attempts(retries)
            .maximum_record_age_in_seconds(60)
            .bisect_batch_on_function_error(bisect)
            .starting_position(EventSourcePosition::TrimHorizon)
            .build()
    }

    /// A stream of one shard that holds `records`, read in one go.
    fn streams(records: Vec<Record>) -> Streams {
        let describe = mock!(Streams::describe_stream).then_output(|| {
            DescribeStreamOutput::builder()
                .stream_description(
                    StreamDescription::builder()
                        .shards(Shard::builder().shard_id("shard-1").build())
                        .build(),
                )
                .build()
        });
        let iterator = mock!(Streams::get_shard_iterator).then_output(|| {
            GetShardIteratorOutput::builder()
                .shard_iterator("it-0")
                .build()
        });
        let read = mock!(Streams::get_records)
            .sequence()
            .output(move || {
                GetRecordsOutput::builder()
                    .set_records(Some(records.clone()))
                    .next_shard_iterator("it-1")
                    .build()
            })
            .output(|| {
                GetRecordsOutput::builder()
                    .next_shard_iterator("it-1")
                    .build()
            })
            .repeatedly()
            .build();
        mock_client!(
            aws_sdk_dynamodbstreams,
            RuleMode::MatchAny,
            [&describe, &iterator, &read]
        )
    }

    fn control(rule: &Rule) -> Lambda {
        mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [rule])
    }

    fn sequences(payload: &Value) -> Vec<String> {
        payload["Records"]
            .as_array()
            .map(|records| {
                records
                    .iter()
                    .filter_map(|r| r["dynamodb"]["SequenceNumber"].as_str())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A function that answers `answer(batch sequence numbers)`, noting
    /// every batch it gets; `None` is a function error.
    fn function(
        seen: &Seen,
        answer: impl Fn(&[String]) -> Option<Value> + Send + Sync + 'static,
    ) -> Lambda {
        let seen = Arc::clone(seen);
        let rule = mock!(Lambda::invoke).then_compute_response(move |input| {
            let payload: Value = input
                .payload()
                .and_then(|p| serde_json::from_slice(p.as_ref()).ok())
                .unwrap_or(Value::Null);
            let batch = sequences(&payload);
            lock(&seen).push(batch.clone());
            match answer(&batch) {
                Some(body) => aws_smithy_mocks::MockResponse::Output(
                    InvokeOutput::builder()
                        .status_code(200)
                        .payload(Blob::new(body.to_string()))
                        .build(),
                ),
                None => aws_smithy_mocks::MockResponse::Http(
                    aws_sdk_lambda::config::http::HttpResponse::new(
                        500.try_into().expect("a status code"),
                        aws_sdk_lambda::primitives::SdkBody::from(
                            r#"{"errorType": "Boom", "errorMessage": "boom"}"#,
                        ),
                    ),
                ),
            }
        });
        // As Invoker::for_endpoint: no SDK retries.
        mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&rule], |c| c
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled()))
    }

    async fn runner(
        streams: Streams,
        mapping: &Rule,
        invoke: Lambda,
        config: PumpConfig,
    ) -> Runner {
        let mut runner = Runner {
            streams,
            lambda: control(mapping),
            invoker: Invoker::new(invoke),
            config,
            stats: Arc::new(Mutex::new(PumpStats::default())),
            stream_arn: STREAM.to_owned(),
            shards: Vec::new(),
            next_shard: 0,
        };
        runner
            .open_shards(StartingPosition::TrimHorizon)
            .await
            .unwrap();
        runner
    }

    /// Run `n` steps; returns how many delivered a batch.
    async fn steps(runner: &mut Runner, n: usize) -> usize {
        let mut delivered = 0;
        for _ in 0..n {
            if runner.step().await.unwrap() {
                delivered += 1;
            }
        }
        delivered
    }

    /// The batches the function got, by sequence number.
    fn batches(seen: &Seen) -> Vec<Vec<String>> {
        lock(seen).clone()
    }

    fn ok() -> Option<Value> {
        Some(json!({"batchItemFailures": []}))
    }

    #[tokio::test]
    async fn a_reported_failure_comes_back_from_the_first_failed_record() {
        let seen = Seen::default();
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let invoke = function(&seen, move |batch| {
            if batch.iter().any(|s| s == "2")
                && !failed.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                Some(
                    json!({"batchItemFailures": [{"itemIdentifier": "3"}, {"itemIdentifier": "2"}]}),
                )
            } else {
                ok()
            }
        });
        let m = mock!(Lambda::get_event_source_mapping).then_output(|| mapping(3, false));
        let mut pump = runner(streams(inserts(1..=5)), &m, invoke, PumpConfig::new("m-1")).await;
        assert_eq!(steps(&mut pump, 5).await, 3);
        assert_eq!(
            batches(&seen),
            vec![vec!["1", "2", "3"], vec!["2", "3", "4"], vec!["5"]]
        );
        let stats = lock(&pump.stats).clone();
        assert_eq!(stats.delivered_to("real-consumer"), 5);
        assert_eq!(
            (
                stats.partial_failures,
                stats.retried_batches,
                stats.redelivered_records
            ),
            (1, 1, 3)
        );
        assert_eq!(stats.discarded_records, 0);
    }

    #[tokio::test]
    async fn function_errors_are_retried_then_the_records_are_discarded() {
        let seen = Seen::default();
        let invoke = function(&seen, |_| None);
        let m = mock!(Lambda::get_event_source_mapping).then_output(|| mapping(1, false));
        let mut pump = runner(streams(inserts(1..=2)), &m, invoke, PumpConfig::new("m-1")).await;
        assert_eq!(steps(&mut pump, 4).await, 2);
        assert_eq!(batches(&seen), vec![vec!["1", "2"], vec!["1", "2"]]);
        let stats = lock(&pump.stats).clone();
        assert_eq!(
            (
                stats.failed_invocations,
                stats.retried_batches,
                stats.discarded_records
            ),
            (2, 1, 2)
        );
        assert_eq!(stats.delivered_to("real-consumer"), 0);
        let error = stats.last_error.unwrap_or_default();
        assert!(
            error.contains("function error") && error.contains("Boom"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn bisecting_isolates_the_record_that_fails_the_function() {
        let seen = Seen::default();
        let invoke = function(&seen, |batch| {
            (!batch.iter().any(|s| s == "2")).then(ok).flatten()
        });
        let m = mock!(Lambda::get_event_source_mapping).then_output(|| mapping(2, true));
        let mut pump = runner(streams(inserts(1..=4)), &m, invoke, PumpConfig::new("m-1")).await;
        assert_eq!(steps(&mut pump, 9).await, 7);
        assert_eq!(
            batches(&seen),
            vec![
                vec!["1", "2", "3"],
                vec!["1", "2"],
                vec!["1"],
                vec!["2", "3", "4"],
                vec!["2", "3"],
                vec!["2"],
                vec!["3", "4"],
            ]
        );
        let stats = lock(&pump.stats).clone();
        assert_eq!(stats.delivered_to("real-consumer"), 3);
        assert_eq!(stats.discarded_records, 1);
    }

    #[tokio::test]
    async fn filtered_records_are_dropped_and_a_disabled_mapping_delivers_nothing() {
        let seen = Seen::default();
        let invoke = function(&seen, |_| ok());
        let filtered = || {
            let mut m = mapping(3, false);
            m.filter_criteria = Some(
                SdkFilterCriteria::builder()
                    .filters(
                        Filter::builder()
                            .pattern(crate::moto::resources::REQUESTS_FILTER_PATTERN)
                            .build(),
                    )
                    .build(),
            );
            m
        };
        let m = mock!(Lambda::get_event_source_mapping)
            .sequence()
            .output(move || {
                let mut m = filtered();
                m.state = Some("Disabled".into());
                m
            })
            .output(filtered)
            .repeatedly()
            .build();
        let (tap, mut tapped) = mpsc::unbounded_channel();
        let mut config = PumpConfig::new("m-1");
        config.tap = Some(tap);
        let records = vec![
            record(1, OperationType::Insert),
            record(2, OperationType::Modify),
            record(3, OperationType::Insert),
        ];
        let mut pump = runner(streams(records), &m, invoke, config).await;
        assert_eq!(steps(&mut pump, 1).await, 0);
        assert!(lock(&seen).is_empty());
        assert_eq!(steps(&mut pump, 2).await, 1);
        assert_eq!(batches(&seen), vec![vec!["1", "3"]]);
        let stats = lock(&pump.stats).clone();
        assert_eq!(
            (stats.paused_polls, stats.filtered_out, stats.records_read),
            (1, 1, 3)
        );
        let mut names = Vec::new();
        while let Ok(r) = tapped.try_recv() {
            names.push(r["eventName"].as_str().unwrap_or_default().to_owned());
        }
        assert_eq!(names, ["INSERT", "MODIFY", "INSERT"]);
    }
}
