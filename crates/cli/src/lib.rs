//! The `lifeboat` command's library: the operators' commands on a deployed
//! (or local) suite ([`ops`]) and the replay of recorded operator calls
//! ([`replay`]). The developers' harness (demo, chaos, fleet, local) is
//! lifeboat-harness; what both print and share (the command error, spans of
//! time, carts minute by minute, the charts) is lifeboat-command.

pub mod ops;
pub mod replay;
