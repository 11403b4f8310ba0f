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

pub mod bus;
pub mod filter;
pub mod invoke;
mod mapping;
pub mod queue;
mod record;
mod stream;
pub(crate) mod task;
pub mod ticker;

pub use bus::{BusDrain, BusDrainConfig, DrainStats};
pub use filter::{FilterCriteria, FilterError};
pub use invoke::{InvokeError, Invoker};
pub use mapping::{MappingView, function_name, read_mapping};
pub use queue::{QueuePump, QueuePumpConfig, QueueStats};
pub use record::{first_failed, lambda_record};
pub use stream::{PumpConfig, PumpError, PumpStats, StartingPosition, StreamPump};
pub use task::{StopSignal, TaskHandle};
pub use ticker::{Ticker, TickerConfig, TickerStats, schedule_event};

use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
