//! lifeboat-sim: the whole suite in one process ([`MemorySuite`]), on the in-memory adapters and
//! virtual time.
//!
//! The real handler code of the real consumer, the fallback consumer and the
//! circuit switch runs unchanged; this crate plays the parts AWS plays around
//! them: the Requests streams (one per lane, shared by every operator or one
//! per operator; batches delivered to whichever consumer the lane's mapping
//! points at, a failed record re-delivered from its position), the EventBridge rules that carry `Trip Requested` and `Trials
//! Passed` to the switch, and the schedule's tick. Under
//! `tokio::time::pause()` a day passes in well under a second. [`offsale`]
//! plays the rule and the SQS mapping around the off-sale listener,
//! [`booking`] the schedule around the booking worker.
//!
//! In the AWS world ([`aws`], the default of the simulations) every store
//! call, stream read, invocation, control-plane call, event and timer waits
//! what AWS charges ([`charged`], [`lambda`]); the ideal world charges none.

pub mod aws;
pub mod booking;
pub mod charged;
pub mod clock;
mod config;
pub mod fault;
pub mod lambda;
mod lane;
pub mod meter;
pub mod offsale;
pub mod suite;

pub use aws::World;
pub use clock::TokioClock;
pub use lambda::{AwsCounts, HttpFunction, LambdaCounts};
pub use suite::{LaneLayout, MemorySuite, MemorySuiteConfig, Transition};
