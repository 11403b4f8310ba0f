//! The healthy operator's answer times, and the small seeded generator that
//! draws them.
//!
//! The defaults are calibrated on the incident that started lifeboat: the
//! healthy operator answered in two clusters, about 65 % of calls around 1.3 s
//! and about 30 % around 2.3 s, with a thin tail (about 5 %) stretching to
//! roughly 6 s. Those clusters are also where the default budgets (3 s search,
//! 2.75 s price) come from, so with the defaults a healthy operator mostly
//! answers `ok`, sometimes `slow`, and the tail mostly times out.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A deterministic pseudo-random generator (SplitMix64): the same seed gives
/// the same sequence on every machine, so simulated runs are repeatable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A uniform number in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // The top 53 bits fill an f64 mantissa exactly.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal number (Box–Muller).
    pub fn next_normal(&mut self) -> f64 {
        // 1 - u is in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// SplitMix64's finaliser: spreads the bits of `z` over the whole word.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How long a healthy operator takes to answer, and how often it fails anyway.
///
/// Durations are written in milliseconds in configuration (`fast_median_ms`,
/// …). Every field has a default, so `{}` or `{"scale": 0.1}` is a complete
/// configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyModel {
    /// Share of answers in the fast cluster. Default 0.65.
    pub fast_share: f64,
    /// Centre of the fast cluster. Default 1300 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "fast_median_ms")]
    pub fast_median: Duration,
    /// Standard deviation of the fast cluster. Default 250 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "fast_spread_ms")]
    pub fast_spread: Duration,
    /// Share of answers in the second cluster. Default 0.30.
    pub slow_share: f64,
    /// Centre of the second cluster. Default 2300 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "slow_median_ms")]
    pub slow_median: Duration,
    /// Standard deviation of the second cluster. Default 150 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "slow_spread_ms")]
    pub slow_spread: Duration,
    /// The rest of the answers (`1 - fast_share - slow_share`, default 5 %)
    /// are spread evenly between `tail_from` and `tail_to`. Default 2600 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "tail_from_ms")]
    pub tail_from: Duration,
    /// End of the tail. Default 6000 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "tail_to_ms")]
    pub tail_to: Duration,
    /// No answer comes quicker than this. Default 150 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "floor_ms")]
    pub floor: Duration,
    /// Every drawn time (and the quick failures of an outage) is multiplied
    /// by this: 0.1 makes a local run ten times faster. Default 1.0.
    pub scale: f64,
    /// Share of healthy calls that fail with a 500 anyway. Default 0.01.
    pub error_rate: f64,
}

impl Default for LatencyModel {
    fn default() -> Self {
        Self {
            fast_share: 0.65,
            fast_median: Duration::from_millis(1_300),
            fast_spread: Duration::from_millis(250),
            slow_share: 0.30,
            slow_median: Duration::from_millis(2_300),
            slow_spread: Duration::from_millis(150),
            tail_from: Duration::from_millis(2_600),
            tail_to: Duration::from_millis(6_000),
            floor: Duration::from_millis(150),
            scale: 1.0,
            error_rate: 0.01,
        }
    }
}

/// The longest time any drawn latency is allowed to be, whatever the model says.
const MAX_LATENCY_SECS: f64 = 3_600.0;

impl LatencyModel {
    /// The default model with every time multiplied by `scale`.
    pub fn scaled(scale: f64) -> Self {
        Self {
            scale,
            ..Self::default()
        }
    }

    /// Draw the answer time of one healthy call, already scaled.
    pub fn sample(&self, rng: &mut SimRng) -> Duration {
        let pick = rng.next_f64();
        let secs = if pick < self.fast_share {
            self.fast_median.as_secs_f64() + rng.next_normal() * self.fast_spread.as_secs_f64()
        } else if pick < self.fast_share + self.slow_share {
            self.slow_median.as_secs_f64() + rng.next_normal() * self.slow_spread.as_secs_f64()
        } else {
            let (from, to) = (self.tail_from.as_secs_f64(), self.tail_to.as_secs_f64());
            from + rng.next_f64() * (to - from).max(0.0)
        };
        self.scale_secs(secs.max(self.floor.as_secs_f64()))
    }

    /// Whether a healthy call fails with a background error.
    pub fn draws_error(&self, rng: &mut SimRng) -> bool {
        rng.next_f64() < self.error_rate
    }

    /// `d` multiplied by the model's scale.
    pub fn scale(&self, d: Duration) -> Duration {
        self.scale_secs(d.as_secs_f64())
    }

    fn scale_secs(&self, secs: f64) -> Duration {
        let scale = if self.scale.is_finite() && self.scale >= 0.0 {
            self.scale
        } else {
            1.0
        };
        let scaled = (secs * scale).clamp(0.0, MAX_LATENCY_SECS);
        Duration::try_from_secs_f64(scaled).unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(model: &LatencyModel, n: usize, seed: u64) -> Vec<Duration> {
        let mut rng = SimRng::new(seed);
        (0..n).map(|_| model.sample(&mut rng)).collect()
    }

    fn share(samples: &[Duration], from_ms: u64, to_ms: u64) -> f64 {
        let hits = samples
            .iter()
            .filter(|d| (from_ms..to_ms).contains(&(d.as_millis() as u64)))
            .count();
        hits as f64 / samples.len() as f64
    }

    #[test]
    fn the_same_seed_draws_the_same_times() {
        let model = LatencyModel::default();
        assert_eq!(draw(&model, 50, 7), draw(&model, 50, 7));
        assert_ne!(draw(&model, 50, 7), draw(&model, 50, 8));
    }

    #[test]
    fn default_times_fall_in_the_incident_clusters() {
        let samples = draw(&LatencyModel::default(), 20_000, 42);
        let fast = share(&samples, 550, 2_050);
        let second = share(&samples, 1_850, 2_750);
        let late = share(&samples, 2_750, 6_001);
        assert!((0.62..0.70).contains(&fast), "fast share {fast}");
        assert!((0.28..0.36).contains(&second), "second share {second}");
        assert!((0.03..0.07).contains(&late), "tail share {late}");
        assert!(samples.iter().all(|d| *d >= Duration::from_millis(150)));
        assert!(samples.iter().all(|d| *d <= Duration::from_millis(6_000)));
        let mut sorted = samples.clone();
        sorted.sort();
        let median = sorted[sorted.len() / 2];
        assert!(
            (Duration::from_millis(1_300)..Duration::from_millis(1_800)).contains(&median),
            "median {median:?}"
        );
    }

    #[test]
    fn scale_shrinks_every_time() {
        let full = draw(&LatencyModel::default(), 100, 3);
        let tenth = draw(&LatencyModel::scaled(0.1), 100, 3);
        for (f, t) in full.iter().zip(&tenth) {
            let diff = (f.as_secs_f64() * 0.1 - t.as_secs_f64()).abs();
            assert!(diff < 1e-6, "{f:?} vs {t:?}");
        }
    }

    #[test]
    fn nonsense_scales_never_panic() {
        for scale in [f64::NAN, -1.0, f64::INFINITY, 1e30] {
            let model = LatencyModel::scaled(scale);
            let d = model.sample(&mut SimRng::new(1));
            assert!(d <= Duration::from_secs(3_600));
        }
    }

    #[test]
    fn background_errors_follow_the_rate() {
        let model = LatencyModel::default();
        let mut rng = SimRng::new(9);
        let errors = (0..100_000).filter(|_| model.draws_error(&mut rng)).count();
        assert!((700..1_300).contains(&errors), "{errors} errors");
        let never = LatencyModel {
            error_rate: 0.0,
            ..LatencyModel::default()
        };
        assert!(!(0..1_000).any(|_| never.draws_error(&mut rng)));
    }

    #[test]
    fn the_model_reads_from_partial_json() {
        let model: LatencyModel =
            serde_json::from_str(r#"{"scale":0.1,"fast_median_ms":1000}"#).unwrap();
        assert_eq!(model.scale, 0.1);
        assert_eq!(model.fast_median, Duration::from_millis(1000));
        assert_eq!(model.slow_median, Duration::from_millis(2300));
        let json = serde_json::to_value(LatencyModel::default()).unwrap();
        assert_eq!(json["tail_to_ms"], 6000);
    }
}
