//! lifeboat-operator: the operator's API, for real and simulated.
//!
//! - [`HttpOperatorApi`] calls a real operator over HTTP (reqwest, rustls),
//!   bounding every call by its budget and classifying what happened as a
//!   [`CallClass`](lifeboat_core::request::CallClass); [`OperatorUrls`]
//!   says where each operator's API lives (`OPERATOR_ENDPOINTS`).
//! - [`SimulatedOperator`] plays an operator in-process, on (possibly paused)
//!   tokio time, with answer times calibrated on the real incident
//!   ([`LatencyModel`]) and outages scripted or switched at run time
//!   ([`OutageMode`]).
//! - [`SimServer`] serves the same simulation over HTTP on a local port,
//!   with a small control endpoint, for the local demo and the client's tests.
//! - [`book`]: a booking (`POST /book`, its body and `Idempotency-Key`)
//!   from and to an operator call's parameters; the simulated operator
//!   books at its [`BookingDesk`].

mod answers;
pub mod book;
mod bookings;
mod client;
mod credentials;
mod hesitation;
mod latency;
mod payload;
mod server;
mod sim;
mod urls;

pub use answers::PriceDrift;
pub use book::{BookOrder, IDEMPOTENCY_KEY_HEADER};
pub use bookings::{BookingDesk, BookingRequest, DeskAnswer, SeatModel};
pub use client::{HttpApiError, HttpOperatorApi, REQUEST_ID_HEADER};
pub use credentials::{Credential, CredentialError, Credentials, DEFAULT_REFRESH};
pub use hesitation::Hesitation;
pub use latency::{LatencyModel, SimRng};
pub use payload::{PayloadError, check_payload};
pub use server::SimServer;
pub use sim::{
    ModeCounts, OperationCounts, Outage, OutageMode, SimConfig, SimStats, SimulatedOperator,
    SimulatedOperators,
};
pub use urls::{OPERATOR_ENDPOINTS, OperatorUrls, OperatorUrlsError};
