//! One lane of the simulated gateway: a stream of requests, its mapping,
//! its batches in flight and Lambda's redelivery of failed records.

use std::collections::HashMap;
use std::sync::Arc;

use fallback_consumer::FallbackConsumer;
use lifeboat_core::ConsumerTarget;
use lifeboat_core::OperatorId;
use lifeboat_core::lane::Lanes;
use lifeboat_core::memory::{MemoryRequestStore, MemoryStreamRouter};
use lifeboat_core::ports::{Clock, StreamRouter};
use lifeboat_core::request::RequestRecord;
use real_consumer::RealConsumer;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use chrono::{DateTime, Utc};

use crate::aws::AwsRuntime;
use crate::charged::{ChargedMapping, ControlPlane, MappingLag};
use crate::fault::{FaultClass, FaultPlan, Faulty, invocation};
use crate::lambda::{Pools, invoke_overhead};
use crate::meter::{InvocationKind, Ledger, Metered, metered};
use crate::suite::{LaneLayout, MemorySuiteConfig};
use std::sync::atomic::{AtomicU64, Ordering};

/// The switch's view of the gateway's lanes: each mapping's updates fail
/// as `faults` says, and in the AWS world every call goes through Lambda's
/// control plane (`plane`) and an update reaches the pollers later.
pub(crate) fn switch_lanes(
    layout: LaneLayout,
    lanes: &[SimLane],
    faults: &Arc<FaultPlan>,
    plane: Option<&Arc<ControlPlane>>,
    clock: &Arc<dyn Clock>,
) -> Lanes {
    let router = |l: &SimLane| -> Arc<dyn StreamRouter> {
        let mapping: Arc<dyn StreamRouter> = match (plane, &l.lag) {
            (Some(plane), Some(lag)) => Faulty::new(
                ChargedMapping::new(l.router.clone(), plane.clone(), lag.clone(), clock.clone()),
                faults,
            ),
            _ => Faulty::new(l.router.clone(), faults),
        };
        Metered::new(mapping)
    };
    match layout {
        LaneLayout::Shared => lanes
            .first()
            .map(|l| Lanes::shared(l.name.clone(), l.operators.clone(), router(l)))
            .unwrap_or_default(),
        LaneLayout::PerOperator => Lanes::per_operator(
            lanes
                .iter()
                .filter_map(|l| l.operators.first().map(|o| (o.clone(), router(l)))),
        ),
    }
}

/// One stream of requests, its mapping and its batches in flight.
pub(crate) struct SimLane {
    pub(crate) name: String,
    pub(crate) operators: Vec<OperatorId>,
    pub(crate) router: Arc<MemoryStreamRouter>,
    /// Where the next read of the stream starts.
    position: usize,
    /// Records a consumer reported as failed, delivered again first.
    redeliver: Vec<Delivery>,
    pub(crate) in_flight: JoinSet<Vec<Delivery>>,
    /// The records of each batch in flight, delivered again if its task dies.
    in_flight_batches: HashMap<tokio::task::Id, Vec<Delivery>>,
    /// In the AWS world: the function the pollers invoke while a mapping
    /// update takes effect, records read from the stream that have not
    /// reached it yet, and when the pollers read the stream next.
    pub(crate) lag: Option<Arc<MappingLag>>,
    unseen: Vec<Delivery>,
    next_poll: Option<tokio::time::Instant>,
}

impl SimLane {
    /// A lane; `charged`: in the AWS world.
    pub(crate) fn new(name: &str, operators: Vec<OperatorId>, charged: bool) -> Self {
        Self {
            name: name.to_owned(),
            operators,
            router: Arc::new(MemoryStreamRouter::new()),
            position: 0,
            redeliver: Vec::new(),
            in_flight: JoinSet::new(),
            in_flight_batches: HashMap::new(),
            lag: charged.then(|| Arc::new(MappingLag::default())),
            unseen: Vec::new(),
            next_poll: None,
        }
    }

    /// The first stream position this lane may still deliver: its next
    /// read, or an older record it holds to deliver (again).
    pub(crate) fn oldest_needed(&self) -> usize {
        self.redeliver
            .iter()
            .chain(&self.unseen)
            .chain(self.in_flight_batches.values().flatten())
            .map(|d| d.position)
            .fold(self.position, usize::min)
    }

    /// Records of the stream the pollers see now, up to `room`: in the AWS
    /// world a poll at most every `poll`, of records written at least a
    /// propagation delay ago (the rest wait, in order, for a later poll).
    fn read(
        &mut self,
        requests: &MemoryRequestStore,
        room: usize,
        poll: std::time::Duration,
        aws: Option<(&AwsRuntime, DateTime<Utc>)>,
    ) -> Vec<Delivery> {
        let operators = &self.operators;
        let read = |position: usize, room: usize| {
            let (records, next) =
                requests.read_stream_where(position, room, |r| operators.contains(&r.operator));
            let read: Vec<Delivery> = records
                .into_iter()
                .map(|(position, record)| Delivery {
                    position,
                    record,
                    attempts: 0,
                })
                .collect();
            (read, next)
        };
        let Some((aws, now)) = aws else {
            let (records, next) = read(self.position, room);
            self.position = next;
            return records;
        };
        let tokio_now = tokio::time::Instant::now();
        if self.next_poll.is_some_and(|at| tokio_now < at) {
            return Vec::new();
        }
        self.next_poll = Some(tokio_now + poll);
        let cutoff = now
            - chrono::TimeDelta::from_std(aws.draw(aws.model.stream_propagation))
                .unwrap_or_default();
        let (records, next) = read(self.position, room.saturating_sub(self.unseen.len()));
        self.position = next;
        self.unseen.extend(records);
        let visible = self
            .unseen
            .iter()
            .take(room)
            .take_while(|d| d.record.created_at <= cutoff)
            .count();
        self.unseen.drain(..visible).collect()
    }

    pub(crate) fn settle(
        &mut self,
        done: Result<(tokio::task::Id, Vec<Delivery>), tokio::task::JoinError>,
        max_retries: u32,
        discarded: &mut Vec<RequestRecord>,
    ) {
        let failed = match done {
            Ok((id, failed)) => {
                self.in_flight_batches.remove(&id);
                failed
            }
            Err(e) => {
                // The consumer's task died: Lambda delivers the whole batch again.
                tracing::error!(lane = %self.name, error = %e, "a stream batch task failed");
                self.in_flight_batches.remove(&e.id()).unwrap_or_default()
            }
        };
        for mut delivery in failed {
            delivery.attempts += 1;
            if delivery.attempts > max_retries {
                tracing::error!(request_id = %delivery.record.request_id, "record given up on after {max_retries} retries");
                discarded.push(delivery.record);
            } else {
                self.redeliver.push(delivery);
            }
        }
    }

    /// One batch of this lane's stream to the consumer its mapping points
    /// at, if fewer than `parallelization` batches are in flight. Records
    /// reported as failed come back before new ones, with their own sequence
    /// numbers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn deliver(
        &mut self,
        config: &MemorySuiteConfig,
        (faults, lambda_errors): (&Arc<FaultPlan>, &Arc<AtomicU64>),
        requests: &MemoryRequestStore,
        (real, fallback): (&Arc<RealConsumer>, &Arc<FallbackConsumer>),
        (aws, pools, clock): (&Option<Arc<AwsRuntime>>, &Pools, &Arc<dyn Clock>),
        ledger: &Arc<Ledger>,
        discarded: &mut Vec<RequestRecord>,
    ) -> bool {
        while let Some(done) = self.in_flight.try_join_next_with_id() {
            self.settle(done, config.max_retries, discarded);
        }
        // The mapping's own factor once the switch set one, else the
        // template's.
        let parallelization = self
            .router
            .parallelization()
            .map_or(config.parallelization, |p| usize::from(p.get()));
        if self.in_flight.len() >= parallelization.max(1) {
            return false;
        }
        let now = clock.now();
        let target = match &self.lag {
            Some(lag) => lag.serving(now),
            None => self.router.current().await.unwrap_or(ConsumerTarget::Real),
        };
        // Within the function's reserved concurrency, or the poller is
        // throttled and tries again at its next poll.
        let environment = match aws {
            Some(_) => {
                let pool = match target {
                    ConsumerTarget::Real => &pools.real,
                    ConsumerTarget::Fallback => &pools.fallback,
                };
                match pool.try_start() {
                    Some(environment) => Some(environment),
                    None => return false,
                }
            }
            None => None,
        };
        let mut batch: Vec<Delivery> = std::mem::take(&mut self.redeliver);
        if batch.len() > config.batch_size {
            self.redeliver = batch.split_off(config.batch_size);
        }
        let room = config.batch_size.saturating_sub(batch.len());
        if room > 0 {
            let charged = aws.as_deref().map(|aws| (aws, now));
            batch.extend(self.read(requests, room, config.poll, charged));
        }
        if batch.is_empty() {
            return false;
        }
        let payload = json!({
            "Records": batch.iter().map(|d| stream_record(&d.record, d.position)).collect::<Vec<_>>()
        });
        let aws = aws.clone();
        let (real, fallback, ledger) = (real.clone(), fallback.clone(), ledger.clone());
        let records = batch.clone();
        // A consumer killed after k of its calls (store and operator).
        let dies_after = faults.death(
            FaultClass::ConsumerKill,
            u32::try_from(batch.len() * 2).unwrap_or(u32::MAX),
        );
        let (timeout, errors) = (config.function_timeout, lambda_errors.clone());
        let handle = self.in_flight.spawn(async move {
            let size = batch.len() as u64;
            if let (Some(aws), Some(environment)) = (&aws, &environment) {
                invoke_overhead(aws, environment).await;
            }
            let run = invocation(dies_after, async {
                match target {
                    ConsumerTarget::Real => {
                        let (handled, calls) = metered(real.handle(&payload)).await;
                        ledger.note(InvocationKind::RealBatch, size, calls);
                        handled
                            .map(|r| r.response.batch_item_failures)
                            .map_err(|e| e.to_string())
                    }
                    ConsumerTarget::Fallback => {
                        let (handled, calls) = metered(fallback.handle(&payload)).await;
                        ledger.note(InvocationKind::FallbackBatch, size, calls);
                        handled
                            .map(|r| r.response.batch_item_failures)
                            .map_err(|e| e.to_string())
                    }
                }
            });
            let failures = match tokio::time::timeout(timeout, run).await {
                Ok(failures) => failures,
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    Err("the invocation timed out".to_owned())
                }
            };
            drop(environment);
            match failures {
                Ok(failures) => failed_from(batch, &failures),
                Err(e) => {
                    tracing::error!(error = %e, "consumer failed the batch");
                    batch
                }
            }
        });
        self.in_flight_batches.insert(handle.id(), records);
        true
    }
}

/// One record on its way to a consumer.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// Its place in the stream: its sequence number, on every delivery.
    position: usize,
    record: RequestRecord,
    /// Failed deliveries so far.
    attempts: u32,
}

/// The records Lambda delivers again after a batch answered `failures`: from
/// the first failed record on; an identifier that names no record of the
/// batch fails the whole batch, as Lambda does.
fn failed_from(
    batch: Vec<Delivery>,
    failures: &[aws_lambda_events::event::streams::DynamoDbBatchItemFailure],
) -> Vec<Delivery> {
    let positions: Vec<String> = batch.iter().map(|d| d.position.to_string()).collect();
    let ids: Vec<&str> = positions.iter().map(String::as_str).collect();
    let ids_failed = failures.iter().map(|f| f.item_identifier.as_deref());
    match lifeboat_core::invocation::first_failed(ids_failed, &ids) {
        Ok(Some(i)) => batch.into_iter().skip(i).collect(),
        Ok(None) => Vec::new(),
        Err(_) => batch,
    }
}

/// A Requests-stream record of `request` as Lambda delivers it (the typed
/// `aws_lambda_events` record, as JSON).
pub fn stream_record(request: &RequestRecord, position: usize) -> Value {
    use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord, StreamViewType};
    // The item exactly as the DynamoDB adapter writes it.
    let image = lifeboat_aws::request_to_item(request).unwrap_or_default();
    let mut keys = HashMap::new();
    keys.insert(
        "request_id".to_owned(),
        serde_dynamo::AttributeValue::S(request.request_id.clone()),
    );
    let mut change = StreamRecord::default();
    change.approximate_creation_date_time = request.created_at;
    change.keys = serde_dynamo::Item::from(keys);
    change.new_image = image;
    change.sequence_number = Some(position.to_string());
    change.size_bytes = 256;
    change.stream_view_type = Some(StreamViewType::NewAndOldImages);
    let mut record = EventRecord::default();
    record.aws_region = "us-east-1".into();
    record.change = change;
    record.event_id = position.to_string();
    record.event_name = "INSERT".into();
    record.event_source = Some("aws:dynamodb".into());
    record.event_version = Some("1.1".into());
    record.event_source_arn =
        Some("arn:aws:dynamodb:us-east-1:000000000000:table/Requests/stream/local".into());
    serde_json::to_value(record).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::streams::DynamoDbBatchItemFailure;
    use chrono::DateTime;
    use lifeboat_core::Operation;

    fn batch(positions: &[usize]) -> Vec<Delivery> {
        positions
            .iter()
            .map(|&position| Delivery {
                position,
                record: RequestRecord {
                    request_id: format!("r{position}"),
                    operator: OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}")),
                    operation: Operation::Search,
                    params: Default::default(),
                    created_at: DateTime::UNIX_EPOCH,
                    deadline: DateTime::UNIX_EPOCH,
                },
                attempts: 0,
            })
            .collect()
    }

    fn failure(id: &str) -> DynamoDbBatchItemFailure {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(id.to_owned());
        failure
    }

    fn positions(d: &[Delivery]) -> Vec<usize> {
        d.iter().map(|d| d.position).collect()
    }

    #[test]
    fn failures_send_back_the_batch_from_the_first_failed_record() {
        // Redelivered records keep their own sequence numbers.
        let records = batch(&[7, 3, 4, 5]);
        assert_eq!(
            positions(&failed_from(records.clone(), &[])),
            Vec::<usize>::new()
        );
        assert_eq!(
            positions(&failed_from(records.clone(), &[failure("5"), failure("3")])),
            vec![3, 4, 5]
        );
        assert_eq!(
            positions(&failed_from(records.clone(), &[failure("99")])),
            vec![7, 3, 4, 5],
            "an identifier of no record fails the whole batch"
        );
        assert_eq!(
            positions(&failed_from(records, &[failure("not a number")])),
            vec![7, 3, 4, 5]
        );
    }
}
