//! `lifeboat demo`: the whole suite in one process, through a scripted day.
//!
//! The real handler code of all seven functions (search, cart, real
//! consumer, fallback consumer, circuit switch, off-sale listener, booking
//! worker) runs on the
//! in-memory adapters of lifeboat-core and the simulated operator, on tokio's
//! paused clock: time jumps ahead whenever every task is waiting, so half an
//! hour of traffic takes seconds and needs no network, AWS or moto.
//!
//! The script: healthy traffic; an outage at twice the normal rate; recovery.
//! Customers search, and some open a cart on a sailing they found and take it
//! to payment; a cart confirmed while the operator cannot book holds an
//! order, which the booking worker books once the operator is back, and
//! whose customer follows it and answers when its price rose past the
//! tolerance (the day lasts until the last of them is done). Every
//! figure of the report is counted from what the handlers answered and what
//! the stores hold, never taken from the script.

mod customer;
mod keys;
pub mod report;
mod suite;

use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::memory::OutcomeCondition;
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::order::seats::SeatGuard;
use lifeboat_core::settings::Settings;
use lifeboat_operator::{OutageMode, SeatModel};
use lifeboat_sim::World;
use lifeboat_sim::aws::template_settings;
use serde::Serialize;

pub use customer::Replies;
pub use keys::BookingKey;
pub(crate) use keys::Keys;
pub use report::Report;

/// The scripted day.
#[derive(Debug, Clone, Serialize)]
pub struct Script {
    /// Seed of every random choice (customers, latencies).
    pub seed: u64,
    /// When the day starts (virtual).
    pub start: DateTime<Utc>,
    /// Healthy traffic before the outage.
    #[serde(with = "secs")]
    pub healthy: Duration,
    /// How long the operator is down.
    #[serde(with = "secs")]
    pub outage: Duration,
    /// Traffic after the operator is back.
    #[serde(with = "secs")]
    pub recovery: Duration,
    /// Customer searches per second while healthy.
    pub searches_per_s: f64,
    /// Traffic during the outage, as a multiple of the normal rate.
    pub outage_traffic: f64,
    /// How the operator fails.
    pub mode: OutageMode,
    /// The share of searches that go on to a cart.
    pub cart_share: f64,
    /// The rise at payment (percent of the price shown) the marketplace
    /// absorbs: the cart policy's `absorb_rise_percent`.
    pub absorb_rise_percent: u32,
    /// The Requests store's outcome condition: the product's, unless a test
    /// breaks it on purpose to see the report's counts move.
    #[serde(skip)]
    pub outcome_condition: OutcomeCondition,
    /// The world around the functions: AWS's latencies and limits, or none.
    pub world: World,
    /// The gateway's `OPERATOR_SETTINGS` (by default the template's: no
    /// probe, no hang check).
    #[serde(skip)]
    pub settings: Settings,
    /// The held orders' `ORDER_SETTINGS` the booking worker runs with.
    #[serde(skip)]
    pub order_settings: OrderSettings,
    /// The cart's seat guard (`seats` of its `CART_SETTINGS`).
    #[serde(skip)]
    pub seat_guard: SeatGuard,
    /// The simulated operator's seats and their sale through other
    /// channels.
    #[serde(skip)]
    pub seat_model: SeatModel,
    /// The key booking calls carry: the product's, unless a test breaks it
    /// on purpose to see `orders.duplicate_bookings` move.
    #[serde(skip)]
    pub booking_key: BookingKey,
    /// Whether customers answer their order's new price: the product's
    /// day, unless a test breaks it on purpose to see orders left open.
    #[serde(skip)]
    pub replies: Replies,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            seed: 0x11FE_B0A7,
            // 2026-12-01T06:00:00Z
            start: DateTime::from_timestamp(1_796_104_800, 0).unwrap_or_default(),
            healthy: Duration::from_secs(600),
            outage: Duration::from_secs(300),
            recovery: Duration::from_secs(600),
            searches_per_s: 3.0,
            outage_traffic: 2.0,
            mode: OutageMode::Hang,
            cart_share: 0.15,
            absorb_rise_percent: 2,
            outcome_condition: OutcomeCondition::default(),
            world: World::default(),
            settings: template_settings(),
            order_settings: OrderSettings::default(),
            seat_guard: SeatGuard::default(),
            seat_model: SeatModel::default(),
            booking_key: BookingKey::default(),
            replies: Replies::default(),
        }
    }
}

impl Script {
    pub fn outage_start(&self) -> Duration {
        self.healthy
    }

    pub fn outage_end(&self) -> Duration {
        self.healthy + self.outage
    }

    pub fn end(&self) -> Duration {
        self.healthy + self.outage + self.recovery
    }
}

/// The phase of the day at `t` since the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Healthy,
    Outage,
    Recovery,
}

impl Phase {
    pub fn at(script: &Script, t: Duration) -> Self {
        if t < script.outage_start() {
            Phase::Healthy
        } else if t < script.outage_end() {
            Phase::Outage
        } else {
            Phase::Recovery
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Healthy => "healthy",
            Phase::Outage => "outage",
            Phase::Recovery => "recovery",
        }
    }
}

/// Run the day on a paused clock and report it. Must run on a runtime whose
/// clock is paused (see [`run_paused`]).
pub async fn run(script: &Script) -> Report {
    suite::Suite::new(script).run().await
}

/// Run the day on a fresh single-threaded runtime with a paused clock.
pub fn run_paused(script: &Script) -> std::io::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(runtime.block_on(run(script)))
}

mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
}
