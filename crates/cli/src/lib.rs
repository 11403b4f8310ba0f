//! The `lifeboat` command's library: the demo of the whole suite, the
//! fleet's day of many operators, and the operator commands on a deployed one.

pub mod chaos;
pub mod demo;
pub mod fleet;
pub mod local;
pub mod ops;
pub mod plot;
pub mod progress;
pub mod replay;
pub mod span;
