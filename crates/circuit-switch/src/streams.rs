//! Reconcile: each lane's stream pointed where its stored breakers say, and
//! every state change published.

use lifeboat_core::lane::Lane;

use super::*;

impl CircuitSwitch {
    /// Point the stream of every lane this invocation touched where the
    /// stored states say, and publish each state change of their operators
    /// not yet announced. A lane whose mapping fails is reported and the
    /// others still reconciled and announced; the first such error is
    /// returned at the end.
    ///
    /// Another invocation may change a breaker between our read and our
    /// re-point, and its own re-point may land before ours: the mapping would
    /// then follow our stale read. So after each re-point the lane's breakers
    /// are read again, and the stream re-pointed until a read taken after the
    /// last re-point agrees with where it points. Whoever re-points last has
    /// then checked it against states at least as new as every write before
    /// it, and any later write is followed by its writer's own reconcile.
    pub(crate) async fn reconcile(&self, report: &mut SwitchReport) -> Result<(), SwitchError> {
        let touched: Vec<&Lane> = self
            .lanes
            .iter()
            .filter(|lane| report.decisions.iter().any(|d| lane.serves(&d.operator)))
            .collect();
        if touched.is_empty() {
            return Ok(());
        }
        let operators: Vec<OperatorId> = touched
            .iter()
            .flat_map(|lane| lane.operators.iter().cloned())
            .collect();
        let mut records = self.breakers.load_many(&operators).await?;
        let mut first_error = None;
        for lane in touched {
            match self.reconcile_lane(lane, &mut records).await {
                Ok(stream) => report.streams.push(stream),
                Err(e) => {
                    tracing::error!(lane = %lane.name, error = %e, "lane not re-pointed; the next invocation tries again");
                    first_error.get_or_insert(e);
                }
            }
        }
        self.announce(&records, report).await?;
        first_error.map_or(Ok(()), Err)
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
        let mut attempt = 0;
        loop {
            attempt += 1;
            match lane.router.point_at(target).await {
                Ok(Repoint::Changed) => {
                    tracing::warn!(lane = %lane.name, target = %target, "stream re-pointed");
                    return Ok(Repoint::Changed);
                }
                Ok(Repoint::AlreadyThere) => return Ok(Repoint::AlreadyThere),
                Err(RouterError::Busy(why)) if attempt < REPOINT_ATTEMPTS => {
                    tracing::info!(lane = %lane.name, why = %why, attempt, "stream mapping busy; trying again");
                    tokio::time::sleep(self.repoint_backoff * attempt).await;
                }
                Err(e) => return Err(e.into()),
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
        for (i, record) in unannounced.iter().enumerate() {
            if failed.contains(&i) {
                continue;
            }
            self.breakers
                .mark_announced(&record.operator, record.version)
                .await?;
            tracing::info!(operator = %record.operator, state = %record.state, version = record.version, "state change announced");
            report.announced.push(record.version);
        }
        Ok(())
    }
}
