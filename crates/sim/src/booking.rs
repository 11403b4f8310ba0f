//! What AWS does around the booking worker, in one process: the schedule
//! rule that invokes it every minute (`BookingScheduleRule`), and its
//! reserved concurrency of one, so an invocation starts only once the last
//! one is done ([`BookingSchedule`]). The worker itself is the product's,
//! on the suite's tables, bus and clock ([`MemorySuite::booking_worker`]).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use booking_worker::{BookingWorker, RunLimits, WorkerReport};
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::ports::OrderStore;
use tokio::task::JoinHandle;

use crate::MemorySuite;

/// The schedule's rate: the template's `BookingScheduleRule`.
pub const EVERY: Duration = Duration::from_secs(60);

impl MemorySuite {
    /// The booking worker as deployed beside this suite: the served
    /// operators and the gateway's settings, booking through the Requests
    /// tables, reading the breakers and publishing on the bus, each call
    /// charged as the world charges it, its orders kept in `orders`.
    pub fn booking_worker(
        &self,
        orders: Arc<dyn OrderStore>,
        order_settings: OrderSettings,
    ) -> BookingWorker {
        BookingWorker {
            orders,
            requests: self.requests_port(),
            breakers: self.breakers_port(),
            events: self.charged(self.bus.clone()),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
            operators: self
                .config()
                .operators
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>(),
            settings: self.config().settings.clone(),
            order_settings,
            limits: RunLimits::default(),
        }
    }
}

/// The worker invoked by its schedule until stopped.
pub struct BookingSchedule {
    task: JoinHandle<()>,
    reports: Arc<Mutex<Vec<WorkerReport>>>,
}

fn lock(reports: &Mutex<Vec<WorkerReport>>) -> MutexGuard<'_, Vec<WorkerReport>> {
    // Reports are pushed whole: a poisoned lock still holds good data.
    reports.lock().unwrap_or_else(|e| e.into_inner())
}

impl BookingSchedule {
    /// Invoke `worker` now and then every [`EVERY`], never two at once (a
    /// run longer than the rate delays the next, as a throttled
    /// invocation waits for the reserved one).
    pub fn start(worker: Arc<BookingWorker>) -> Self {
        let reports = Arc::new(Mutex::new(Vec::new()));
        let kept = reports.clone();
        let task = tokio::spawn(async move {
            let mut next = tokio::time::Instant::now();
            loop {
                let report = worker.run().await;
                lock(&kept).push(report);
                next += EVERY;
                tokio::time::sleep_until(next.max(tokio::time::Instant::now())).await;
            }
        });
        Self { task, reports }
    }

    /// Stop the schedule (a run in progress ends where it is, as an
    /// invocation cut off by its timeout does) and return every finished
    /// run's report.
    pub fn stop(self) -> Vec<WorkerReport> {
        self.task.abort();
        std::mem::take(&mut *lock(&self.reports))
    }
}
