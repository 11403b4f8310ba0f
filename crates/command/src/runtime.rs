//! The tokio runtime a command's work runs on. The commands that talk to
//! AWS run on one thread; `lifeboat local`, which serves the functions'
//! proxies and pumps beside its customers, on a thread per core. The
//! simulations (demo, chaos, fleet) build their own paused runtime.

use std::future::Future;

use tokio::runtime::{Builder, Runtime};

use crate::CliError;

/// How many threads a command's runtime runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// The current thread alone.
    One,
    /// A thread per core.
    PerCore,
}

/// A runtime for `command`, or the error it ends with.
pub fn runtime(command: &'static str, threads: Threads) -> Result<Runtime, CliError> {
    let mut builder = match threads {
        Threads::One => Builder::new_current_thread(),
        Threads::PerCore => Builder::new_multi_thread(),
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| CliError::new(command, format!("could not start the runtime: {e}")))
}

/// Run `command`'s `work` to its end on the current thread.
pub fn block_on<T>(
    command: &'static str,
    work: impl Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    runtime(command, Threads::One)?.block_on(work)
}
