//! lifeboat-local: the pieces that run the wired suite on one machine without
//! AWS or Docker, shared by `lifeboat local` and the end-to-end tests.

pub mod alarm;
pub mod faults;
pub mod moto;
pub mod net;
pub mod pump;
pub mod stack;
pub mod suite;
pub mod template;
pub mod watch;
