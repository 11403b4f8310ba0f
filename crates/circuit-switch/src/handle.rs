//! One invocation: its payload read ([`crate::input`]) and handed on (the
//! tick, one operator's input, a contributor alarm's operators, a batch of
//! timers), each operator's input decided and written conditionally on the
//! version read (`apply`), borne out by the failure window where it would
//! open a closed breaker, then the follow-ups, the reconcile and the state
//! metric.

use std::collections::HashMap;

use chrono::DateTime;
use lifeboat_core::breaker::TripReason;
use lifeboat_core::breaker::{Decision, Input, decide};
use lifeboat_core::corroborate::{self, NotCorroborated};
use lifeboat_core::metrics::{MetricSet, Unit, names};
use lifeboat_core::ports::StoreError;
use lifeboat_core::{BreakerRecord, BreakerState, OperatorId};
use serde_json::Value;

use crate::input::{self, SwitchInput};
use crate::{CircuitSwitch, OperatorDecision, SwitchError, SwitchReport, WRITE_ATTEMPTS};

impl CircuitSwitch {
    /// A contributor alarm changed: each operator it has in ALARM (only
    /// `only`, when the change named its contributor) gets the alarm as its
    /// input, timed when that contributor entered ALARM, so a breaker that
    /// closed since is not reopened by another contributor's change (and
    /// opened only where its failure window bears it out, as for a
    /// single-operator alarm). Contributors that name no operator of
    /// `OPERATORS` are logged and skipped; one operator's failure does not
    /// stop the others, and the first is returned so the delivery is
    /// retried (the others, applied again, change nothing).
    async fn on_contributors(
        &self,
        alarm: &str,
        at: Option<DateTime<chrono::Utc>>,
        only: Option<&OperatorId>,
        report: &mut SwitchReport,
    ) -> Result<(), SwitchError> {
        let failed = |why: String| SwitchError::Contributors {
            alarm: alarm.to_owned(),
            why,
        };
        let Some(contributors) = &self.contributors else {
            return Err(failed(
                "mapped to * in ALARM_OPERATORS, but the switch cannot read contributors".into(),
            ));
        };
        let in_alarm = contributors
            .in_alarm(alarm)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let changed_at = at.unwrap_or_else(|| self.clock.now());
        let mut first_error = None;
        for contributor in in_alarm {
            let operator = contributor
                .attributes
                .get(names::OPERATOR)
                .and_then(|o| OperatorId::new(o.as_str()).ok());
            let Some(operator) = operator.filter(|o| self.operators.contains(o)) else {
                tracing::warn!(
                    alarm,
                    attributes = ?contributor.attributes,
                    "contributor in ALARM names no operator of OPERATORS: skipped"
                );
                continue;
            };
            if only.is_some_and(|only| *only != operator) {
                continue;
            }
            let input = Input::Alarm {
                alarm: alarm.to_owned(),
                state: lifeboat_core::breaker::AlarmState::Alarm,
                at: contributor.since.unwrap_or(changed_at),
            };
            match self.apply(&operator, &input, None).await {
                Ok(decision) => report.decisions.push(decision),
                Err(e) => {
                    tracing::error!(alarm, operator = %operator, error = %e, "contributor's alarm not applied");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Handle one payload.
    pub async fn handle(&self, payload: &Value) -> Result<SwitchReport, SwitchError> {
        let parsed = input::parse(payload, &self.alarms)?;
        let is_tick = matches!(parsed, SwitchInput::Tick);
        let mut report = SwitchReport::default();
        match parsed {
            SwitchInput::One { operator, input } => {
                if !self.operators.contains(&operator) {
                    tracing::warn!(operator = %operator, "input for an operator not in OPERATORS refused");
                    return Err(SwitchError::UnknownOperator(operator));
                }
                report
                    .decisions
                    .push(self.apply(&operator, &input, None).await?);
            }
            SwitchInput::Tick => self.tick(&mut report).await?,
            SwitchInput::Contributors {
                alarm,
                at,
                operator,
            } => {
                self.on_contributors(&alarm, at, operator.as_ref(), &mut report)
                    .await?;
            }
            SwitchInput::Timers(timers) => {
                // Side by side: in a mass outage each timer's probe may wait
                // out a whole budget, and ten of them one after another
                // would not keep the 10 s cadence.
                let handled = futures::future::join_all(timers.into_iter().map(
                    |(message_id, timer)| async move {
                        let mut own = SwitchReport::default();
                        let failed = match timer {
                            Err(why) => {
                                tracing::warn!(message_id, why, "timer message dropped");
                                false
                            }
                            Ok(timer) if !self.operators.contains(&timer.operator) => {
                                tracing::warn!(operator = %timer.operator, message_id, "timer for an operator not in OPERATORS dropped");
                                false
                            }
                            Ok(timer) => match self.on_timer(&timer, &mut own).await {
                                Ok(()) => false,
                                Err(e) => {
                                    tracing::error!(operator = %timer.operator, version = timer.version, error = %e, "timer not handled; it comes back");
                                    true
                                }
                            },
                        };
                        (message_id, own, failed)
                    },
                ))
                .await;
                for (message_id, own, failed) in handled {
                    report.absorb(own);
                    if failed {
                        report.response.add_failure(message_id);
                    }
                }
            }
        }
        self.follow_up(&mut report).await;
        let tick = is_tick.then(|| {
            u64::try_from(self.clock.now().timestamp().div_euclid(60)).unwrap_or_default()
        });
        let reconciled = self.reconcile(&mut report, tick).await;
        // The tick's failures are its report's `skipped`: one operator or
        // lane that fails must not hide the others' states. Any other
        // input's caller (a command, Lambda's retry of an event) sees the
        // error.
        if tick.is_none() {
            reconciled?;
        }
        // The state after every invocation (the tick included), so the
        // metric draws each operator's state as a continuous line.
        let sets: Vec<MetricSet> = report
            .decisions
            .iter()
            .map(|d| {
                MetricSet::new()
                    .dimension("Operator", d.operator.as_str())
                    .dimension("State", d.to.as_str())
                    .metric(
                        names::BREAKER_STATE,
                        Unit::None,
                        f64::from(d.to.metric_value()),
                    )
            })
            .collect();
        self.metrics.emit(&sets, self.clock.now());
        Ok(report)
    }

    /// The schedule's tick: every configured breaker read in one batched
    /// read, each decided on its own. An operator whose breaker cannot be
    /// read or written is skipped and reported; the others are ticked.
    async fn tick(&self, report: &mut SwitchReport) -> Result<(), SwitchError> {
        let (records, unreadable) = self.load_isolated(&self.operators).await?;
        let mut stored: HashMap<OperatorId, BreakerRecord> = records
            .into_iter()
            .map(|r| (r.operator.clone(), r))
            .collect();
        for (operator, e) in &unreadable {
            report.skip(operator, e);
        }
        for operator in &self.operators {
            if unreadable.iter().any(|(o, _)| o == operator) {
                continue;
            }
            let read = stored.remove(operator);
            if let Some(record) = &read
                && self.timer_owns(record)
            {
                // A probe chain whose timer was lost (a failed
                // SendMessage, an invocation that died between its claim
                // and its timer) is taken over here, not left until the
                // open period ends.
                let reason = if self.probe_overdue(record) {
                    tracing::warn!(operator = %operator, state = %record.state, version = record.version, "probe timer overdue: setting it again");
                    self.arm(record).await;
                    "open: its probe timer was overdue and is set again"
                } else {
                    "open: its probe timer ends the period"
                };
                report.decisions.push(OperatorDecision {
                    operator: operator.clone(),
                    from: record.state,
                    to: record.state,
                    version: record.version,
                    reason: reason.to_owned(),
                    changed: false,
                });
                continue;
            }
            match self.apply(operator, &Input::Tick, Some(read)).await {
                Ok(decision) => report.decisions.push(decision),
                Err(e) => report.skip(operator, &e),
            }
        }
        Ok(())
    }

    /// Decide and persist one input for one operator. `read` is the stored
    /// breaker when the caller has just read it (`Some(None)`: none stored);
    /// otherwise it is read here.
    pub(crate) async fn apply(
        &self,
        operator: &OperatorId,
        input: &Input,
        mut read: Option<Option<BreakerRecord>>,
    ) -> Result<OperatorDecision, SwitchError> {
        let cfg = self.settings.for_operator(operator).breaker;
        for _ in 0..WRITE_ATTEMPTS {
            let stored = match read.take() {
                Some(stored) => stored,
                None => self.breakers.load(operator).await?,
            };
            let expected = stored.as_ref().map(|r| r.version);
            let now = self.clock.now();
            // A breaker never stored has been closed since forever, so any alarm
            // or trip is newer than its state.
            let current = stored
                .unwrap_or_else(|| BreakerRecord::initial(operator.clone(), DateTime::UNIX_EPOCH));
            let decision = decide(&current, input, now, &cfg);
            if matches!(&decision, Decision::Transition(_))
                && current.state == BreakerState::Closed
                && let Err(refused) = self.corroborate(operator, input, &current).await?
            {
                tracing::warn!(operator = %operator, version = current.version, why = %refused, "signal not borne out by the failure window: breaker stays closed");
                return Ok(OperatorDecision {
                    operator: operator.clone(),
                    from: current.state,
                    to: current.state,
                    version: current.version,
                    reason: refused.to_string(),
                    changed: false,
                });
            }
            match decision {
                Decision::Unchanged(why) => {
                    tracing::info!(operator = %operator, state = %current.state, version = current.version, why, "no change");
                    return Ok(OperatorDecision {
                        operator: operator.clone(),
                        from: current.state,
                        to: current.state,
                        version: current.version,
                        reason: why.to_owned(),
                        changed: false,
                    });
                }
                Decision::Transition(next) => match self.breakers.save(&next, expected).await {
                    Ok(()) => {
                        tracing::warn!(
                            operator = %operator,
                            from = %current.state,
                            state = %next.state,
                            version = next.version,
                            reason = %next.reason,
                            open_until = ?next.open_until,
                            "breaker state changed"
                        );
                        return Ok(OperatorDecision {
                            operator: operator.clone(),
                            from: current.state,
                            to: next.state,
                            version: next.version,
                            reason: next.reason,
                            changed: true,
                        });
                    }
                    Err(StoreError::Conflict(why)) => {
                        tracing::info!(operator = %operator, version = current.version, why = %why, "lost a race; deciding again");
                    }
                    Err(e) => return Err(e.into()),
                },
            }
        }
        Err(SwitchError::Contended(operator.clone()))
    }

    /// Whether the failure window bears out `input`, about to open the
    /// closed breaker `current`: a trip request of the window or an ALARM
    /// must be seen in the buckets the consumers wrote; a command, a
    /// trial's failure or the switch's own inputs need nothing.
    async fn corroborate(
        &self,
        operator: &OperatorId,
        input: &Input,
        current: &BreakerRecord,
    ) -> Result<Result<(), NotCorroborated>, SwitchError> {
        let settings = self.settings.for_operator(operator);
        let now = self.clock.now();
        let needs_window = match input {
            Input::Trip {
                reason: TripReason::Window { .. },
                ..
            } => true,
            Input::Alarm { .. } => settings.breaker.alarm_failed_calls > 0,
            _ => false,
        };
        if !needs_window {
            return Ok(Ok(()));
        }
        let since = corroborate::read_since(&settings.window, current.since, now);
        let buckets = self.windows.since(operator, since).await?;
        Ok(match input {
            Input::Trip {
                reason: TripReason::Window { verdict },
                ..
            } => corroborate::trip(verdict, &settings.window, &buckets, current.since, now),
            _ => corroborate::alarm(&settings.breaker, &buckets, current.since, now),
        })
    }
}
