//! The `lifeboat` command's library: the demo of the whole suite.

pub mod demo;
