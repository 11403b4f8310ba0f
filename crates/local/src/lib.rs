//! lifeboat-local: the pieces that run the wired suite on one machine without
//! AWS or Docker, shared by `lifeboat local` and the end-to-end tests.

pub mod alarm;
pub mod faults;
pub mod moto;
pub mod net;
pub mod pump;
pub mod suite;
pub mod template;
pub mod watch;

/// The names before [`suite::LocalSuite`] had its own ("gateway" is the
/// product's request path, see lifeboat-lookup): kept for callers outside
/// this crate (`crates/cli/src/local`) until they follow.
pub mod gateway {
    pub use crate::suite::*;
    pub use crate::suite::{
        LocalSuite as LocalGateway, SuiteError as GatewayError, SuiteNames as GatewayNames,
        SuiteOptions as GatewayOptions, SuiteResources as GatewayResources,
    };
}
