//! The `lifeboat` command's library: the demo of the whole suite, and the
//! operator commands on a deployed one.

pub mod demo;
pub mod local;
pub mod ops;
pub mod progress;
