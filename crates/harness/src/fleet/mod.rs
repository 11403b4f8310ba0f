//! `lifeboat fleet`: a marketplace day on virtual time.
//!
//! Like `lifeboat demo`, the real handlers (search, real and fallback
//! consumers, circuit switch, off-sale listener) run on the in-memory
//! adapters and simulated operators, on tokio's paused clock, deterministic
//! per seed. Unlike the demo it serves many operators with uneven (Zipf)
//! traffic and a scripted mix of overlapping incidents, and measures what
//! each incident did to its own operator and to everyone else's answers.

mod day;
mod incident;
pub mod report;
mod tally;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::capacity::lane_parallelization_for;
use lifeboat_core::memory::OutcomeCondition;
use lifeboat_core::settings::{Parallelization, Settings};
use lifeboat_operator::OutageMode;
use lifeboat_sim::LaneLayout;
use lifeboat_sim::World;
use lifeboat_sim::aws::{TEMPLATE, template_settings};

pub use report::FleetReport;

/// The day to play.
#[derive(Debug, Clone)]
pub struct FleetScript {
    /// Seed of every random choice (customers, latencies).
    pub seed: u64,
    pub operators: usize,
    /// Virtual length of the day.
    pub duration: Duration,
    /// Searches per second over the whole marketplace.
    pub searches_per_s: f64,
    /// Buyers, as a share of the searches, over the same operators: each
    /// takes a sailing it found straight to a confirmed cart.
    pub cart_share: f64,
    /// Exponent of the traffic's Zipf law: operator `k` (from 1) gets a
    /// share proportional to `1 / k^zipf`.
    pub zipf: f64,
    /// How requests flow from the Requests table(s) to the consumers.
    pub lanes: LaneLayout,
    pub start: DateTime<Utc>,
    /// The Requests store's outcome condition: the product's, unless a test
    /// breaks it on purpose to see the report's counts move.
    pub outcome_condition: OutcomeCondition,
    /// The world around the functions: AWS's latencies and limits, or none.
    pub world: World,
    /// The gateway's `OPERATOR_SETTINGS` (by default the template's).
    pub settings: Settings,
    /// The real consumer's reserved concurrency (`RealConsumerConcurrency`);
    /// `None`: the template's default, raised to what the stack's capacity
    /// check asks of this many lanes ([`FleetScript::real_consumer_concurrency`]).
    pub real_consumer_concurrency: Option<usize>,
    /// Batches of one lane that run at once (`LaneParallelization`), the
    /// template's by default.
    pub lane_parallelization: usize,
    /// Whether the busy operators' lanes get a parallelization of their own
    /// (`lane.parallelization` in their settings), as docs/capacity.md
    /// tells an adopter to size them.
    pub lane_sizing: LaneSizing,
}

/// How the day's lanes are sized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LaneSizing {
    /// Every lane at `LaneParallelization`.
    Template,
    /// A lane whose operator's searches/s need more batches at once than
    /// `LaneParallelization` gives
    /// (`lifeboat_core::capacity::lane_parallelization_for`) runs at its own.
    #[default]
    Traffic,
}

impl Default for FleetScript {
    fn default() -> Self {
        Self {
            seed: 0x11FE_B0A7,
            operators: 50,
            duration: Duration::from_secs(2 * 3600),
            searches_per_s: 10.0,
            cart_share: 0.01,
            zipf: 1.0,
            lanes: LaneLayout::PerOperator,
            // 2026-12-01T06:00:00Z
            start: DateTime::from_timestamp(1_796_104_800, 0).unwrap_or_default(),
            outcome_condition: OutcomeCondition::default(),
            world: World::default(),
            settings: template_settings(),
            real_consumer_concurrency: None,
            lane_parallelization: TEMPLATE.parallelization,
            lane_sizing: LaneSizing::default(),
        }
    }
}

/// What goes wrong in an incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncidentKind {
    Hang,
    Refuse,
    RateLimited,
    Brownout,
    /// Down (refusing) 20 s, up 20 s, for the incident's length.
    Flapping,
    /// Fast 5xx from an operator with under 0.2 searches/s.
    Quiet,
    /// Two operators down together, one hanging and one answering 5xx.
    TwoDown(OutageMode),
}

impl IncidentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentKind::Hang => "hang",
            IncidentKind::Refuse => "refuse",
            IncidentKind::RateLimited => "rate_limited",
            IncidentKind::Brownout => "brownout",
            IncidentKind::Flapping => "flapping",
            IncidentKind::Quiet => "quiet",
            IncidentKind::TwoDown(_) => "two_down",
        }
    }

    /// The operator's behaviour while down.
    pub fn mode(self) -> OutageMode {
        match self {
            IncidentKind::Hang => OutageMode::Hang,
            IncidentKind::Refuse | IncidentKind::Flapping => OutageMode::Refuse,
            IncidentKind::RateLimited => OutageMode::RateLimited,
            IncidentKind::Brownout => OutageMode::Brownout,
            IncidentKind::Quiet => OutageMode::ServerError,
            IncidentKind::TwoDown(mode) => mode,
        }
    }

    /// Whether the breaker is expected to open: a brownout stays under the
    /// thresholds by design.
    pub fn should_trip(self) -> bool {
        self != IncidentKind::Brownout
    }
}

/// One incident of the day.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    /// Index of the operator by traffic rank (0: the busiest).
    pub rank: usize,
    pub kind: IncidentKind,
    pub start: Duration,
    pub end: Duration,
}

/// How far apart the up and down phases of a flapping operator are.
pub const FLAP: Duration = Duration::from_secs(20);

impl FleetScript {
    /// Operator `rank`'s share of the traffic, in searches per second.
    pub fn rate_of(&self, rank: usize) -> f64 {
        let weight = |k: usize| 1.0 / ((k + 1) as f64).powf(self.zipf);
        let total: f64 = (0..self.operators).map(weight).sum();
        self.searches_per_s * weight(rank) / total
    }

    /// Each operator's share of the traffic, cumulative by rank (the last
    /// 1.0): where a customer (or a buyer) drawn `u` in [0, 1) goes.
    pub fn cumulative_shares(&self) -> Vec<f64> {
        (0..self.operators)
            .scan(0.0, |sum, k| {
                *sum += self.rate_of(k) / self.searches_per_s.max(f64::MIN_POSITIVE);
                Some(*sum)
            })
            .collect()
    }

    /// The gateway's settings with each lane's parallelization, as an
    /// adopter sizes them by their operators' traffic ([`LaneSizing`]): an
    /// operator whose settings name one keeps it.
    pub fn lane_settings(&self) -> Settings {
        let mut settings = self.settings.clone();
        if self.lane_sizing == LaneSizing::Template || self.lanes == LaneLayout::Shared {
            return settings;
        }
        for (rank, name) in self.operator_names().into_iter().enumerate() {
            let Ok(operator) = OperatorId::new(name) else {
                continue;
            };
            let own = settings.for_operator(&operator);
            if own.lane.parallelization.is_some() {
                continue;
            }
            let needed = lane_parallelization_for(
                self.rate_of(rank),
                own.budgets.search.timeout,
                TEMPLATE.batch_size,
            );
            if usize::from(needed) <= self.lane_parallelization {
                continue;
            }
            let mut own = own.clone();
            own.lane.parallelization = Parallelization::new(u64::from(needed)).ok();
            settings.operators.insert(operator, own);
        }
        settings
    }

    /// The lanes that run at a parallelization of their own, by operator.
    pub fn lanes_sized(&self) -> BTreeMap<String, u8> {
        let settings = self.lane_settings();
        self.operator_names()
            .into_iter()
            .filter_map(|name| {
                let operator = OperatorId::new(&name).ok()?;
                let p = settings.for_operator(&operator).lane.parallelization?;
                Some((name, p.get()))
            })
            .collect()
    }

    /// The real consumer's reservation the day runs with: the one given, or
    /// the template's default raised to what the capacity check
    /// (`lifeboat_core::capacity`) accepts for the day's lanes, each at its
    /// parallelization.
    pub fn real_consumer_concurrency(&self) -> usize {
        let needed = match self.lanes {
            LaneLayout::Shared => self.lane_parallelization,
            LaneLayout::PerOperator => {
                let sized = self.lanes_sized();
                (self.operators - sized.len().min(self.operators)) * self.lane_parallelization
                    + sized.values().map(|&p| usize::from(p)).sum::<usize>()
            }
        };
        self.real_consumer_concurrency
            .unwrap_or_else(|| needed.max(TEMPLATE.real_consumer_concurrency))
    }

    /// The operators' names, by traffic rank.
    pub fn operator_names(&self) -> Vec<String> {
        (0..self.operators)
            .map(|k| format!("op{:03}", k + 1))
            .collect()
    }

    /// The incidents, placed at fixed shares of the day on operators chosen
    /// by traffic rank: overlapping hang and refuse, a 429 storm, a brownout
    /// of the busiest operator, flapping, a quiet operator's outage, and two
    /// operators down at once.
    pub fn incidents(&self) -> Vec<Incident> {
        let day = self.duration.as_secs_f64();
        let at = |share: f64| Duration::from_secs_f64(day * share);
        let minutes = |m: u64| Duration::from_secs(60 * m);
        let n = self.operators;
        // The busiest operator with under 0.2 searches/s and no other
        // incident (ranks 0 to 6 have one).
        let quiet = (7..n).find(|&k| self.rate_of(k) < 0.2);
        let plan: Vec<(usize, IncidentKind, Duration, Duration)> = vec![
            (1, IncidentKind::Hang, at(0.10), minutes(5)),
            (4, IncidentKind::Refuse, at(0.12), minutes(5)),
            (2, IncidentKind::RateLimited, at(0.30), minutes(5)),
            (0, IncidentKind::Brownout, at(0.42), minutes(10)),
            (3, IncidentKind::Flapping, at(0.55), minutes(5)),
            (
                quiet.unwrap_or(usize::MAX),
                IncidentKind::Quiet,
                at(0.65),
                minutes(15),
            ),
            (
                5,
                IncidentKind::TwoDown(OutageMode::Hang),
                at(0.80),
                minutes(5),
            ),
            (
                6,
                IncidentKind::TwoDown(OutageMode::ServerError),
                at(0.80),
                minutes(5),
            ),
        ];
        plan.into_iter()
            .filter(|(rank, ..)| *rank < n)
            .map(|(rank, kind, start, length)| Incident {
                rank,
                kind,
                start,
                end: (start + length).min(self.duration),
            })
            .collect()
    }
}

/// Play the day on a fresh single-threaded runtime with a paused clock.
pub fn run_paused(script: &FleetScript) -> std::io::Result<FleetReport> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(runtime.block_on(day::Day::new(script).run()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_lanes_are_sized_by_their_traffic_and_reserved_for() {
        let priced = FleetScript {
            operators: 200,
            searches_per_s: 2000.0,
            ..FleetScript::default()
        };
        let sized: Vec<(String, u8)> = priced.lanes_sized().into_iter().collect();
        let expected: Vec<(String, u8)> = [
            ("op001", 10),
            ("op002", 10),
            ("op003", 7),
            ("op004", 6),
            ("op005", 5),
        ]
        .iter()
        .map(|(o, p)| (o.to_string(), *p))
        .collect();
        assert_eq!(sized, expected);
        assert_eq!(priced.real_consumer_concurrency(), 195 * 4 + 38);
        let template = FleetScript {
            lane_sizing: LaneSizing::Template,
            ..priced.clone()
        };
        assert!(template.lanes_sized().is_empty());
        assert_eq!(template.real_consumer_concurrency(), 800);
        // An operator's own setting wins over the sizing.
        let mut settings = priced.settings.clone();
        let op001 = OperatorId::new("op001").unwrap();
        let mut own = settings.for_operator(&op001).clone();
        own.lane.parallelization = Parallelization::new(3).ok();
        settings.operators.insert(op001, own);
        let own = FleetScript { settings, ..priced };
        assert_eq!(own.lanes_sized().get("op001"), Some(&3));
        // The ordinary day's lanes all fit the template's 4.
        assert!(FleetScript::default().lanes_sized().is_empty());
    }

    #[test]
    fn traffic_is_uneven_and_sums_to_the_total() {
        let script = FleetScript::default();
        let total: f64 = (0..script.operators).map(|k| script.rate_of(k)).sum();
        assert!((total - script.searches_per_s).abs() < 1e-9);
        assert!(script.rate_of(0) > 2.0, "{}", script.rate_of(0));
        assert!(script.rate_of(49) < 0.05, "{}", script.rate_of(49));
    }

    #[test]
    fn the_day_has_every_kind_of_incident_some_overlapping() {
        let script = FleetScript::default();
        let incidents = script.incidents();
        let kinds: Vec<&str> = incidents.iter().map(|i| i.kind.as_str()).collect();
        for kind in [
            "hang",
            "refuse",
            "rate_limited",
            "brownout",
            "flapping",
            "quiet",
            "two_down",
        ] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
        let quiet = incidents
            .iter()
            .find(|i| i.kind == IncidentKind::Quiet)
            .unwrap_or_else(|| panic!("no quiet incident"));
        assert!(script.rate_of(quiet.rank) < 0.2);
        let overlapping = incidents.iter().any(|a| {
            incidents
                .iter()
                .any(|b| a.rank != b.rank && a.start < b.end && b.start < a.end)
        });
        assert!(overlapping);
    }
}
