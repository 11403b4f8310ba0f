//! Reconcile: each lane's stream pointed where its stored breakers say, and
//! every state change published.

use lifeboat_core::events::{BreakerStateChanged, LifeboatEvent, SCHEMA_VERSION};
use lifeboat_core::lane::Lane;
use lifeboat_core::ports::{Repoint, RouterError, StoreError};
use lifeboat_core::{BreakerRecord, BreakerState, ConsumerTarget, OperatorId};

use lifeboat_core::capacity::check_lanes;
use lifeboat_core::settings::Parallelization;

use crate::report::LaneResized;
use crate::{
    CircuitSwitch, REPOINT_ATTEMPTS, REPOINT_ROUNDS, SWEEP_LANES_PER_TICK, Skipped, StreamReport,
    SwitchError, SwitchReport,
};

impl CircuitSwitch {
    /// Point the stream of the lanes this invocation must look at where the
    /// stored states say, mark each lane seen right, and publish each state
    /// change of their operators not yet announced. A lane that fails is
    /// reported (in `report.skipped` and the log) and the others still
    /// reconciled and announced; the first such error is returned at the end.
    ///
    /// Which lanes: for an input about operators, the lanes of the operators
    /// it decided for. For the tick, only lanes that may be wrong, so that
    /// its control-plane calls grow with what changed, not with the lanes
    /// there are: a lane with a breaker whose newest version was never seen
    /// routed (`routed_version` behind `version`: a re-point that failed or
    /// never ran), plus [`SWEEP_LANES_PER_TICK`] lanes in turn, which finds a
    /// mapping changed by hand within `lanes / SWEEP_LANES_PER_TICK` ticks.
    ///
    /// Another invocation may change a breaker between our read and our
    /// re-point, and its own re-point may land before ours: the mapping would
    /// then follow our stale read. So after each re-point the lane's breakers
    /// are read again, and the stream re-pointed until a read taken after the
    /// last re-point agrees with where it points. Whoever re-points last has
    /// then checked it against states at least as new as every write before
    /// it, and any later write is followed by its writer's own reconcile.
    pub(crate) async fn reconcile(
        &self,
        report: &mut SwitchReport,
        tick: Option<u64>,
    ) -> Result<(), SwitchError> {
        let decided: Vec<(OperatorId, bool)> = report
            .decisions
            .iter()
            .map(|d| (d.operator.clone(), d.changed))
            .collect();
        let in_scope = |lane: &Lane| tick.is_some() || decided.iter().any(|(o, _)| lane.serves(o));
        let operators: Vec<OperatorId> = self
            .lanes
            .iter()
            .filter(|lane| in_scope(lane))
            .flat_map(|lane| lane.operators.iter().cloned())
            .collect();
        if operators.is_empty() {
            return Ok(());
        }
        let (mut records, unreadable) = self.load_isolated(&operators).await?;
        let mut first_error = None;
        let mut unknown: Vec<OperatorId> = Vec::new();
        for (operator, e) in unreadable {
            // Where its lane should point is unknown: left as it is.
            report.skip(&operator, &e);
            unknown.push(operator);
            first_error.get_or_insert(e);
        }
        let sweep = tick.map(|n| sweep_slice(n, self.lanes.len()));
        for (index, lane) in self.lanes.iter().enumerate() {
            if !in_scope(lane) || unknown.iter().any(|o| lane.serves(o)) {
                continue;
            }
            let must = match &sweep {
                None => true,
                Some(slice) => {
                    slice.contains(&index)
                        || decided
                            .iter()
                            .any(|(o, changed)| *changed && lane.serves(o))
                        || records
                            .iter()
                            .any(|r| lane.serves(&r.operator) && r.routed_version < r.version)
                }
            };
            if !must {
                report.lanes_left += 1;
                continue;
            }
            match self.reconcile_lane(lane, &mut records).await {
                Ok(stream) => {
                    self.mark_routed(lane, &records).await;
                    report.streams.push(stream);
                }
                Err(e) => {
                    tracing::error!(lane = %lane.name, error = %e, "lane not re-pointed; the next tick tries again");
                    report.skipped.push(Skipped {
                        operator: lane.operators.first().cloned(),
                        lane: Some(lane.name.clone()),
                        error: e.to_string(),
                    });
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.announce(&records, report).await {
            first_error.get_or_insert(e);
        }
        if let Some(n) = tick {
            self.size_lanes(report, n).await;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Set the parallelization of the lanes whose operators' settings ask
    /// one (`lane.parallelization`), if every lane at its own fits in the
    /// real consumer's reservation. The tick's control-plane calls stay
    /// bounded: it sets at most [`SWEEP_LANES_PER_TICK`] lanes, those this
    /// instance has not seen at their factor first, then the sweep's (a
    /// mapping a deploy set back to the template's is found in its turn).
    /// What fails is reported in `skipped` and tried again next tick.
    async fn size_lanes(&self, report: &mut SwitchReport, tick: u64) {
        let asked: Vec<Option<Parallelization>> = self
            .lanes
            .iter()
            .map(|lane| lane.parallelization(&self.settings))
            .collect();
        let wanted: Vec<(usize, &Lane, Parallelization)> = self
            .lanes
            .iter()
            .zip(&asked)
            .enumerate()
            .filter_map(|(i, (lane, p))| p.map(|p| (i, lane, p)))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let Some(capacity) = self.lane_capacity else {
            let why = format!(
                "the operators' settings ask {} lanes for a parallelization of their own, but this switch was not told LANE_PARALLELIZATION (and REAL_CONSUMER_RESERVED), so it cannot check they fit the real consumer's reservation: the lanes keep theirs",
                wanted.len()
            );
            tracing::error!(why, "lanes not sized");
            report.skipped.push(Skipped {
                operator: None,
                lane: None,
                error: why,
            });
            return;
        };
        let default = usize::from(capacity.default.get());
        if let Err(e) = check_lanes(&asked, default, capacity.reserved) {
            tracing::error!(error = %e, "lanes not sized");
            report.skipped.push(Skipped {
                operator: None,
                lane: None,
                error: e.to_string(),
            });
            return;
        }
        let sweep = sweep_slice(tick, self.lanes.len());
        let seen = |lane: &Lane, p: Parallelization| lock(&self.sized).get(&lane.name) == Some(&p);
        let unseen = wanted.iter().filter(|(_, lane, p)| !seen(lane, *p));
        let swept = wanted
            .iter()
            .filter(|(i, lane, p)| sweep.contains(i) && seen(lane, *p));
        let turn: Vec<_> = unseen.chain(swept).take(SWEEP_LANES_PER_TICK).collect();
        for &&(_, lane, factor) in &turn {
            match self.set_factor(lane, factor).await {
                Ok(set) => {
                    lock(&self.sized).insert(lane.name.clone(), factor);
                    if set == Repoint::Changed {
                        tracing::warn!(lane = %lane.name, parallelization = %factor, "lane parallelization set");
                        report.resized.push(LaneResized {
                            lane: lane.name.clone(),
                            parallelization: factor.get(),
                        });
                    }
                }
                Err(e) => {
                    tracing::error!(lane = %lane.name, error = %e, "lane parallelization not set; the next tick tries again");
                    report.skipped.push(Skipped {
                        operator: lane.operators.first().cloned(),
                        lane: Some(lane.name.clone()),
                        error: e.to_string(),
                    });
                }
            }
        }
    }

    /// The stored breakers of `operators` in one batched read; if an item
    /// cannot be read, each operator's on its own, so one corrupt item
    /// costs only its operator (returned beside the others).
    pub(crate) async fn load_isolated(
        &self,
        operators: &[OperatorId],
    ) -> Result<(Vec<BreakerRecord>, Vec<(OperatorId, SwitchError)>), SwitchError> {
        match self.breakers.load_many(operators).await {
            Ok(records) => Ok((records, Vec::new())),
            Err(StoreError::Corrupt(why)) => {
                tracing::error!(
                    why,
                    "a breaker item is unreadable: reading each operator on its own"
                );
                let mut records = Vec::with_capacity(operators.len());
                let mut unreadable = Vec::new();
                for operator in operators {
                    match self.breakers.load(operator).await {
                        Ok(Some(record)) => records.push(record),
                        Ok(None) => {}
                        Err(e) => unreadable.push((operator.clone(), e.into())),
                    }
                }
                Ok((records, unreadable))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Note, on every breaker of `lane` as last read, that the lane was seen
    /// where they want it. A mark not written only costs a look next tick.
    async fn mark_routed(&self, lane: &Lane, records: &[BreakerRecord]) {
        for record in records.iter().filter(|r| lane.serves(&r.operator)) {
            if record.routed_version >= record.version {
                continue;
            }
            if let Err(e) = self
                .breakers
                .mark_routed(&record.operator, record.version)
                .await
            {
                tracing::warn!(operator = %record.operator, version = record.version, error = %e, "lane seen right but not marked; the next tick looks again");
            }
        }
    }

    /// Re-point one lane until a read after the last re-point agrees (at
    /// most [`REPOINT_ROUNDS`] times), refreshing its breakers in `records`.
    async fn reconcile_lane(
        &self,
        lane: &Lane,
        records: &mut Vec<BreakerRecord>,
    ) -> Result<StreamReport, SwitchError> {
        let mut target = lane.wanted(records);
        let mut repointed = false;
        for round in 1..=REPOINT_ROUNDS {
            if self.point(lane, target).await? == Repoint::AlreadyThere {
                break;
            }
            repointed = true;
            let fresh = self.breakers.load_many(&lane.operators).await?;
            records.retain(|r| !lane.serves(&r.operator));
            records.extend(fresh);
            let now_wanted = lane.wanted(records);
            if now_wanted == target || round == REPOINT_ROUNDS {
                break;
            }
            tracing::warn!(lane = %lane.name, pointed = %target, wanted = %now_wanted, "a breaker moved while the stream was re-pointed; pointing again");
            target = now_wanted;
        }
        Ok(StreamReport {
            lane: lane.name.clone(),
            target,
            repointed,
        })
    }

    /// Re-point `lane`'s stream at `target`, trying again while the mapping
    /// is busy.
    async fn point(&self, lane: &Lane, target: ConsumerTarget) -> Result<Repoint, SwitchError> {
        let repoint = self.retrying(lane, || lane.router.point_at(target)).await?;
        if repoint == Repoint::Changed {
            tracing::warn!(lane = %lane.name, target = %target, "stream re-pointed");
        }
        Ok(repoint)
    }

    /// Set `lane`'s parallelization, trying again while the mapping is busy.
    async fn set_factor(
        &self,
        lane: &Lane,
        factor: Parallelization,
    ) -> Result<Repoint, SwitchError> {
        self.retrying(lane, || lane.router.set_parallelization(factor))
            .await
    }

    /// `call` on `lane`'s mapping, again with backoff while the mapping is
    /// busy or the control plane throttles, at most [`REPOINT_ATTEMPTS`]
    /// times.
    async fn retrying<F, Fut>(&self, lane: &Lane, call: F) -> Result<Repoint, SwitchError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Repoint, RouterError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match call().await {
                Err(RouterError::Busy(why) | RouterError::Throttled(why))
                    if attempt < REPOINT_ATTEMPTS =>
                {
                    tracing::info!(lane = %lane.name, why = %why, attempt, "stream mapping busy or control plane throttled; trying again");
                    tokio::time::sleep(self.repoint_backoff * (1 << (attempt - 1))).await;
                }
                other => return Ok(other?),
            }
        }
    }

    /// Publish the state changes of `records` not announced yet, and mark
    /// those the bus took.
    async fn announce(
        &self,
        records: &[BreakerRecord],
        report: &mut SwitchReport,
    ) -> Result<(), SwitchError> {
        let unannounced: Vec<&BreakerRecord> = records
            .iter()
            .filter(|r| r.announced_version < r.version)
            .collect();
        if unannounced.is_empty() {
            return Ok(());
        }
        let events: Vec<LifeboatEvent> = unannounced
            .iter()
            .map(|r| {
                LifeboatEvent::BreakerStateChanged(BreakerStateChanged {
                    schema_version: SCHEMA_VERSION,
                    operator: r.operator.clone(),
                    from: r.previous.unwrap_or(BreakerState::Closed),
                    to: r.state,
                    version: r.version,
                    reason: r.reason.clone(),
                    at: r.since,
                })
            })
            .collect();
        let failed = match self.events.publish(&events).await {
            Ok(()) => Vec::new(),
            Err(e) => {
                tracing::error!(error = %e, "state change not published; the next invocation tries again");
                e.failed_indexes(events.len())
            }
        };
        let mut first_error = None;
        for (i, record) in unannounced.iter().enumerate() {
            if failed.contains(&i) {
                continue;
            }
            // Published either way; a mark not written means the event is
            // published again by a later invocation (consumers of Breaker
            // State Changed take it by version).
            if let Err(e) = self
                .breakers
                .mark_announced(&record.operator, record.version)
                .await
            {
                tracing::error!(operator = %record.operator, version = record.version, error = %e, "state change published but not marked");
                first_error.get_or_insert(SwitchError::from(e));
            }
            tracing::info!(operator = %record.operator, state = %record.state, version = record.version, "state change announced");
            report.announced.push(record.version);
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The lanes (by index among `lanes`) the `n`th tick verifies whatever
/// their marks say: [`SWEEP_LANES_PER_TICK`] of them, in turn.
pub(crate) fn sweep_slice(n: u64, lanes: usize) -> std::ops::Range<usize> {
    let turns = lanes.div_ceil(SWEEP_LANES_PER_TICK).max(1);
    let start = (n as usize % turns) * SWEEP_LANES_PER_TICK;
    start..(start + SWEEP_LANES_PER_TICK).min(lanes)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
