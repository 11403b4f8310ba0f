//! The `lifeboat` command's library: the demo of the whole suite, the
//! fleet's day of many operators, and the operator commands on a deployed one.

#[cfg(feature = "harness")]
pub mod chaos;
#[cfg(feature = "harness")]
pub mod demo;
#[cfg(feature = "harness")]
pub mod fleet;
#[cfg(feature = "harness")]
pub mod local;
pub mod ops;
pub mod plot;
#[cfg(feature = "harness")]
pub mod progress;
pub mod replay;
pub mod span;
