//! What a simulated operator is told to do: how it fails in an outage
//! ([`OutageMode`]), when ([`Outage`], its script), and everything else it
//! does ([`SimConfig`]).

use std::fmt;

use chrono::{DateTime, Utc};
use lifeboat_core::budget::Budgets;
use serde::{Deserialize, Serialize};

use crate::answers::PriceDrift;
use crate::bookings::SeatModel;
use crate::hesitation::Hesitation;
use crate::latency::LatencyModel;

/// How the operator misbehaves during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutageMode {
    /// Never answers; the caller's budget runs out.
    Hang,
    /// Refuses the connection (over HTTP: closes it without a response).
    Refuse,
    /// Answers a quick `503`.
    ServerError,
    /// Answers, but only after `slow_factor` × the budget.
    Slow,
    /// Answers `200` with an HTML maintenance page instead of JSON.
    Garbage,
    /// Answers a quick `429 Too Many Requests` (a rate-limit storm).
    RateLimited,
    /// Slow but under the thresholds: `brownout_share` of the calls answer
    /// after `brownout_factor` × the budget (in time, counted as slow), the
    /// rest as when healthy.
    Brownout,
    /// Answers in time with a valid JSON answer of `oversized_bytes` (1 MiB
    /// by default): more than lifeboat keeps of an answer.
    Oversized,
}

impl std::str::FromStr for OutageMode {
    type Err = String;

    /// A mode by its name ([`OutageMode::as_str`]), as command lines take it.
    fn from_str(name: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(name.to_owned())).map_err(|_| {
            format!(
                "unknown outage mode {name:?}: use hang, refuse, server_error, slow, garbage, rate_limited, brownout or oversized"
            )
        })
    }
}

impl OutageMode {
    /// The mode's name, as in configuration and the control endpoint.
    pub fn as_str(self) -> &'static str {
        match self {
            OutageMode::Hang => "hang",
            OutageMode::Refuse => "refuse",
            OutageMode::ServerError => "server_error",
            OutageMode::Slow => "slow",
            OutageMode::Garbage => "garbage",
            OutageMode::RateLimited => "rate_limited",
            OutageMode::Brownout => "brownout",
            OutageMode::Oversized => "oversized",
        }
    }
}

impl fmt::Display for OutageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scripted outage: from `start` (inclusive) to `end` (exclusive) the
/// operator behaves as `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub mode: OutageMode,
}

impl Outage {
    /// Whether the outage is on at `now`.
    pub fn covers(&self, now: DateTime<Utc>) -> bool {
        self.start <= now && now < self.end
    }
}

/// Everything a simulated operator does. Every field has a default, so `{}`
/// is a complete configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimConfig {
    /// Seed of the generator behind latencies and background errors. Two
    /// simulators with the same seed and the same calls behave the same.
    pub seed: u64,
    /// Healthy answer times and background error rate.
    pub latency: LatencyModel,
    /// The outage script. Where windows overlap, the first listed wins.
    pub outages: Vec<Outage>,
    /// In `slow` mode an answer takes this many times the budget. Default 2.0
    /// (a timeout); below 1.0 but above the budget's `slow_after` share (0.8
    /// by default) the answer arrives in time and counts as slow.
    pub slow_factor: f64,
    /// Optional price changes over time.
    pub price_drift: Option<PriceDrift>,
    /// In `brownout` mode, the share of calls that are slow. Default 0.7.
    pub brownout_share: f64,
    /// In `brownout` mode, a slow call answers after this many times the
    /// budget. Default 0.95: in time, after `slow_after`.
    pub brownout_factor: f64,
    /// In `oversized` mode, the size of every answer in bytes. Default 1 MiB.
    pub oversized_bytes: usize,
    /// The budgets `slow` mode is measured against when the caller's budget
    /// is not known, that is over HTTP. Default: lifeboat's default budgets.
    pub budgets: Budgets,
    /// How a healthy operator hesitates: a latency tail that grows with its
    /// load and occasional slow moments, the ping included. On by default;
    /// `{"enabled": false}` (or [`Hesitation::off`]) turns it off.
    pub hesitation: Hesitation,
    /// The sailings' seats and how fast other channels sell them, from the
    /// simulator's start ([`BookingDesk`](crate::BookingDesk)).
    pub seats: SeatModel,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 0x5EED_F3EE_B0A7,
            latency: LatencyModel::default(),
            outages: Vec::new(),
            slow_factor: 2.0,
            price_drift: None,
            brownout_share: 0.7,
            brownout_factor: 0.95,
            oversized_bytes: 1 << 20,
            budgets: Budgets::default(),
            hesitation: Hesitation::default(),
            seats: SeatModel::default(),
        }
    }
}

impl SimConfig {
    /// An operator that answers every call, in tens of milliseconds (a
    /// hundredth of the default latency, its tail cut): for tests that
    /// talk to it over HTTP on wall-clock time.
    pub fn quick() -> Self {
        Self {
            latency: LatencyModel {
                error_rate: 0.0,
                tail_to: LatencyModel::default().tail_from,
                ..LatencyModel::scaled(0.01)
            },
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-06-01T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn modes_parse_by_their_names() {
        for mode in [
            OutageMode::Hang,
            OutageMode::Refuse,
            OutageMode::ServerError,
            OutageMode::Slow,
            OutageMode::Garbage,
        ] {
            assert_eq!(mode.as_str().parse::<OutageMode>(), Ok(mode));
        }
        let e = "flaky".parse::<OutageMode>().unwrap_err();
        assert!(e.contains("unknown outage mode \"flaky\""), "{e}");
    }

    #[test]
    fn the_config_reads_from_json_with_defaults() {
        let config: SimConfig = serde_json::from_str(
            r#"{"latency":{"scale":0.1},"outages":[{"start":"2025-06-01T08:00:00Z","end":"2025-06-01T09:00:00Z","mode":"server_error"}]}"#,
        )
        .unwrap();
        assert_eq!(config.latency.scale, 0.1);
        assert_eq!(config.outages[0].mode, OutageMode::ServerError);
        assert!(config.outages[0].covers(t0()));
        assert_eq!(config.slow_factor, 2.0);
        assert_eq!(config.budgets, Budgets::default());
    }
}
