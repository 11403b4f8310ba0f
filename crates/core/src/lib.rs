//! lifeboat-core: the logic every lifeboat function shares.
//!
//! Nothing here talks to AWS, HTTP or a particular async runtime. Time,
//! storage and side effects come in through the traits in [`ports`], every
//! one of them there, and every decision is a plain function that tests can
//! drive. The ports:
//!
//! * storage: [`ports::RequestStore`] (the Requests table),
//!   [`ports::BreakerStore`] (the Breaker table), [`ports::WindowStore`] (the
//!   failure window's buckets), [`ports::CacheStore`] (the answer cache),
//!   [`ports::CartStore`] (the Carts table), [`ports::OrderStore`] (the
//!   held orders), [`ports::SaleStatusStore`] (the
//!   sale status table), [`ports::OperatorConfigStore`] (the operators'
//!   configuration item), [`ports::SecretStore`] (the secrets sent to
//!   operators);
//! * side effects: [`ports::EventPublisher`] (the event bus),
//!   [`ports::BreakerTimers`] (the circuit switch's wake-ups),
//!   [`ports::StreamRouter`] (where the Requests stream goes),
//!   [`ports::SaleSwitch`] (where an operator is put on or off sale),
//!   [`ports::Redelivery`] (when a queue message comes back),
//!   [`ports::MetricsSink`] (where metric lines go);
//! * the outside world: [`ports::OperatorApi`] (the operator's API),
//!   [`ports::AlarmContributors`] (who a CloudWatch alarm has in ALARM),
//!   [`ports::Clock`] (the time).
//!
//! Their in-memory adapters are in [`memory`], the AWS ones in
//! `lifeboat-aws`; the clock's are [`SystemClock`] and [`ManualClock`].

pub mod breaker;
pub mod budget;
pub mod cache;
pub mod capacity;
pub mod cart;
mod clock;
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
pub mod order;
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
pub use clock::{ManualClock, SystemClock};
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
