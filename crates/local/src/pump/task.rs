//! Background tasks of the harness with a shutdown handle.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long [`TaskHandle::stop`] lets a task finish what it is doing (an
/// invocation in flight) before aborting it.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Tells a task to stop. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once stop was asked for (or the handle is gone).
    pub async fn stopped(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Sleep for `duration` unless stopped first. Returns true if stopped.
    pub async fn sleep(&mut self, duration: Duration) -> bool {
        tokio::select! {
            () = self.stopped() => true,
            () = tokio::time::sleep(duration) => self.is_stopped(),
        }
    }
}

/// A spawned task; asked to stop by [`TaskHandle::stop`], aborted when dropped.
#[derive(Debug)]
pub struct TaskHandle {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl TaskHandle {
    /// Spawn `body` on the current runtime with a [`StopSignal`].
    pub fn spawn<F, Fut>(body: F) -> Self
    where
        F: FnOnce(StopSignal) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(body(StopSignal(stopped)));
        Self {
            stop,
            task: Some(task),
        }
    }

    /// Ask the task to stop and wait for it; after 30 s it is aborted.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(STOP_GRACE, &mut task).await.is_err()
        {
            task.abort();
        }
    }

    /// Whether the task has ended (by itself or stopped).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
