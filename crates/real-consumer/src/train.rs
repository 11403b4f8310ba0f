//! The hang check's pings, sent while a call to a closed operator is late
//! (lifeboat_core::hang): a task started with the call, ended by the call's
//! answer, and awaited after the batch when the call timed out. One call
//! per operator and batch is watched at a time ([`Slots`]): when the
//! watched call ends before its budget, the next of the batch's calls to
//! the operator to start is watched. A batch's calls start in waves (the
//! consumer's concurrency and the operator's limit), so a hang that begins
//! while a batch runs is watched from its first call, not from the next
//! batch's. When the first ping has
//! not answered by the time the second is due, the train reads the breaker
//! once and stops if it is no longer closed: a trip asked for by the batch
//! before has opened it, and pings to an open operator are calls it need
//! not get.
//!
//! The batch's other calls to the operator are pings too: one answered
//! after the train's first ping went out (while the watched call was late)
//! says the operator is there, as an answered ping does. A hanging
//! operator answers none of them; a busy operator in a slow moment answers
//! most, even when its pings queue behind them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lifeboat_core::BreakerState;
use lifeboat_core::OperatorId;
use lifeboat_core::budget::Budget;
use lifeboat_core::hang::{HangVerdict, HangWatch, PingTrain};
use lifeboat_core::ports::{BreakerStore, Clock, OperatorApi};
use lifeboat_core::request::CallClass;
use lifeboat_core::settings::HangCheck;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

/// The operators of a batch with a call watched now, each with when one
/// of the batch's calls to it last got an answer.
#[derive(Default)]
pub(crate) struct Slots(Mutex<HashMap<OperatorId, watch::Sender<Option<Instant>>>>);

/// When the batch's calls to the watched operator got answers: the latest.
pub(crate) type Answers = watch::Receiver<Option<Instant>>;

impl Slots {
    /// The answers of the batch's other calls to `operator`, if this call
    /// is the batch's watched one.
    pub fn claim(&self, operator: &OperatorId) -> Option<Answers> {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains_key(operator) {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        taken.insert(operator.clone(), tx);
        Some(rx)
    }

    /// The watched call to `operator` ended before its budget: the train
    /// is gone, and the next call to start is watched.
    pub fn release(&self, operator: &OperatorId) {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        taken.remove(operator);
    }

    /// One of the batch's calls to `operator` got an answer now (anything
    /// [`lifeboat_core::hang::answered`] counts).
    pub fn answered(&self, operator: &OperatorId) {
        let taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = taken.get(operator) {
            tx.send_replace(Some(Instant::now()));
        }
    }
}

/// What a train watches, and through what.
pub(crate) struct Watched {
    pub api: Arc<dyn OperatorApi>,
    pub breakers: Arc<dyn BreakerStore>,
    pub clock: Arc<dyn Clock>,
    pub operator: OperatorId,
    /// The batch's other calls to the operator, as they are answered.
    pub answers: Answers,
}

/// A running train. Dropping it stops it: pings not yet sent are not sent.
pub(crate) struct Train {
    task: JoinHandle<HangVerdict>,
    /// Pings the check's timeout is counted in, for the verdict's text.
    pub check_timeout: std::time::Duration,
}

impl Train {
    /// Start the train watching a call of `budget` to `operator` made now.
    pub fn start(watched: Watched, check: HangCheck, budget: std::time::Duration) -> Self {
        let check_timeout = check.timeout;
        let task = tokio::spawn(run(watched, check, budget));
        Self {
            task,
            check_timeout,
        }
    }

    /// The train's verdict (at most the check's timeout after the call's
    /// budget). A train that could not finish says the operator answered:
    /// no trip on a broken check.
    pub async fn verdict(mut self) -> HangVerdict {
        match (&mut self.task).await {
            Ok(verdict) => verdict,
            Err(e) => {
                tracing::warn!(error = %e, "hang check ended without a verdict");
                HangVerdict::Answered
            }
        }
    }
}

impl Drop for Train {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(watched: Watched, check: HangCheck, budget: std::time::Duration) -> HangVerdict {
    let Watched {
        api,
        breakers,
        clock,
        operator,
        mut answers,
    } = watched;
    let start = Instant::now();
    let train = PingTrain::new(&check, budget);
    let mut watch = HangWatch::default();
    let mut out = FuturesUnordered::new();
    let mut due = train.pings.iter().copied().peekable();
    let verdict_at = start + train.verdict_at;
    let first_ping = start + train.pings.first().copied().unwrap_or_default();
    // Until the batch's sender is gone.
    let mut listening = true;
    loop {
        let next = due.peek().copied().filter(|_| watch.keeps_asking());
        tokio::select! {
            biased;
            Some(class) = out.next(), if !out.is_empty() => {
                let class: CallClass = class;
                watch.ended(start.elapsed(), &class);
            }
            changed = answers.changed(), if listening && watch.keeps_asking() => {
                match changed {
                    Err(_) => listening = false,
                    Ok(()) => {
                        let answered = *answers.borrow_and_update();
                        if let Some(at) = answered.filter(|at| *at >= first_ping && watch.pings() > 0) {
                            tracing::debug!(operator = %operator, "hang check: another call of the batch answered while the watched one was late");
                            watch.answered_elsewhere(at.duration_since(start));
                        }
                    }
                }
            }
            () = sleep_until(start + next.unwrap_or_default()), if next.is_some() => {
                let offset = due.next().unwrap_or_default();
                if watch.pings() == 1 && !still_closed(breakers.as_ref(), &operator).await {
                    tracing::info!(operator = %operator, "hang check stopped: the breaker is no longer closed");
                    return HangVerdict::Answered;
                }
                watch.sent();
                let mut call = check.call(&operator, clock.now());
                call.budget = Budget::with_timeout(train.timeout_at(offset));
                let api = api.clone();
                out.push(async move { api.call(&call).await.class });
            }
            () = sleep_until(verdict_at) => {}
        }
        match watch.verdict(start.elapsed(), train.verdict_at) {
            HangVerdict::Pending => {}
            decided => {
                tracing::info!(operator = %operator, pings = watch.pings(), verdict = ?decided, "hang check");
                return decided;
            }
        }
    }
}

/// Whether the breaker is still closed. Unreadable: yes, the check goes on.
async fn still_closed(breakers: &dyn BreakerStore, operator: &OperatorId) -> bool {
    match breakers.load(operator).await {
        Ok(Some(record)) => record.state == BreakerState::Closed,
        Ok(None) => true,
        Err(e) => {
            tracing::warn!(operator = %operator, error = %e, "breaker unreadable; the hang check goes on");
            true
        }
    }
}
