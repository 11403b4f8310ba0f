//! lifeboat-core: the logic every lifeboat function shares.
//!
//! Nothing here talks to AWS, HTTP or a particular async runtime. Time comes in
//! through [`clock::Clock`], storage and side effects through the traits in
//! [`ports`], and every decision is a plain function that tests can drive.

pub mod breaker;
pub mod budget;
pub mod cache;
pub mod capacity;
pub mod cart;
pub mod clock;
pub mod cloudwatch;
pub mod corroborate;
pub mod events;
pub mod hang;
pub mod invocation;
pub mod lane;
pub mod memory;
pub mod metrics;
pub mod operator;
pub mod operator_config;
pub mod ports;
pub mod price;
pub mod probe;
pub mod request;
pub mod retry;
pub mod sale;
pub mod settings;
pub mod watched;
pub mod window;

pub use breaker::{BreakerConfig, BreakerRecord, BreakerState, ConsumerTarget};
pub use clock::{Clock, ManualClock, SystemClock};
pub use operator::{Operation, OperatorId, Route};

/// Whether `host` (a URL's host, IPv6 in brackets or not) is this machine:
/// `localhost` or a loopback address, the only place lifeboat sends
/// anything over plain http.
pub fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
