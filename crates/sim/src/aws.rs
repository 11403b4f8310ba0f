//! The world the simulations run in: what AWS charges around the functions
//! (latencies, limits) and the settings the template deploys.
//!
//! Every number a simulation charges is here, named, with where it comes
//! from; docs/aws-model.md is the same table with the figures measured on
//! each world. [`World::Aws`] charges them all and is the default of `demo`,
//! `fleet` and `chaos`; [`World::Ideal`] is the kinder world the simulations
//! ran in before (stores that take no time, a stream polled every 100 ms, a
//! 5 s tick, no concurrency or control-plane limits), kept for comparison.
//!
//! Latencies are log-normal, given by their median and 99th percentile
//! ([`Latency`]): AWS publishes envelopes ("single-digit milliseconds"), not
//! distributions, so each tail is an estimate at the pessimistic end of what
//! those envelopes allow, and docs/aws-model.md says which numbers are AWS's
//! and which are ours.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lifeboat_core::Operation;
use lifeboat_core::probe::ProbeSpec;
use lifeboat_core::settings::{HangCheck, Settings};
use lifeboat_operator::SimRng;
use serde::Serialize;

/// Which world a simulation runs in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum World {
    /// AWS's latencies and limits ([`AwsModel`]) and the template's tick.
    #[default]
    Aws,
    /// Stores that take no time, a stream polled every 100 ms, a 5 s tick,
    /// no concurrency or control-plane limits.
    Ideal,
}

impl World {
    pub fn as_str(self) -> &'static str {
        match self {
            World::Aws => "aws",
            World::Ideal => "ideal",
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A world name that is neither `aws` nor `ideal`.
#[derive(Debug, thiserror::Error)]
#[error("unknown world {0:?}: expected \"aws\" or \"ideal\"")]
pub struct UnknownWorld(String);

impl FromStr for World {
    type Err = UnknownWorld;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "aws" => Ok(World::Aws),
            "ideal" => Ok(World::Ideal),
            other => Err(UnknownWorld(other.to_owned())),
        }
    }
}

/// A log-normal latency, given by its median and 99th percentile. Draws are
/// cut at three times the 99th percentile: a simulated call never takes
/// minutes because a draw fell in the far tail.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub median_ms: f64,
    pub p99_ms: f64,
}

/// The 99th percentile of the standard normal distribution.
const Z99: f64 = 2.326_347_874;

impl Latency {
    pub const fn ms(median_ms: f64, p99_ms: f64) -> Self {
        Self { median_ms, p99_ms }
    }

    /// One draw.
    pub fn draw(&self, rng: &mut SimRng) -> Duration {
        if self.median_ms <= 0.0 {
            return Duration::ZERO;
        }
        let sigma = (self.p99_ms.max(self.median_ms) / self.median_ms).ln() / Z99;
        let ms = (self.median_ms * (sigma * rng.next_normal()).exp()).min(3.0 * self.p99_ms);
        Duration::from_secs_f64(ms.max(0.0) / 1000.0)
    }
}

/// What the template deploys, as the simulations play it (held to
/// template.yaml by a test).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateDefaults {
    /// `HalfOpenScheduleRule`'s `rate(1 minute)`.
    pub tick_every: Duration,
    /// Each lane's mapping: `BatchSize`.
    pub batch_size: usize,
    /// `ParallelizationFactor`.
    pub parallelization: usize,
    /// `MaximumRetryAttempts`.
    pub max_retries: u32,
    /// The consumers' and the switch's `Timeout`.
    pub function_timeout: Duration,
    /// `BreakerTimerQueue`'s `VisibilityTimeout`.
    pub timer_visibility: Duration,
    /// `ReservedConcurrentExecutions`: the real consumer's
    /// (`RealConsumerConcurrency`), shared by every lane.
    pub real_consumer_concurrency: usize,
    /// The fallback consumer's, shared by every lane.
    pub fallback_concurrency: usize,
    /// The circuit switch's, shared by ticks, timers, trips and commands.
    pub switch_concurrency: usize,
    /// `OperatorSettings`' default (`OPERATOR_SETTINGS`): no probe named,
    /// the built-in hang check.
    pub operator_settings: &'static str,
}

/// The template's defaults.
pub const TEMPLATE: TemplateDefaults = TemplateDefaults {
    tick_every: Duration::from_secs(60),
    batch_size: 50,
    parallelization: 4,
    max_retries: 3,
    function_timeout: Duration::from_secs(15),
    timer_visibility: Duration::from_secs(30),
    real_consumer_concurrency: 100,
    fallback_concurrency: 10,
    switch_concurrency: 20,
    operator_settings: "",
};

/// Every latency and limit the AWS world charges. Sources in the field docs
/// and docs/aws-model.md.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AwsModel {
    /// GetItem / Query from a Lambda in the region, SDK round trip included.
    /// DynamoDB: "single-digit millisecond performance at any scale"
    /// (Developer Guide, What is DynamoDB); the tail is an estimate.
    pub dynamodb_read: Latency,
    /// PutItem / UpdateItem, conditional or not (same envelope).
    pub dynamodb_write: Latency,
    /// BatchGetItem (up to 100 keys).
    pub dynamodb_batch_read: Latency,
    /// TransactWriteItems: two-phase, "about twice" a write's cost
    /// (Developer Guide, transactions); the latency estimate is twice a
    /// write's.
    pub dynamodb_transaction: Latency,
    /// From an item write to its record being readable in the table's
    /// stream ("near-real time", Developer Guide, Change data capture for
    /// DynamoDB Streams); an estimate.
    pub stream_propagation: Latency,
    /// Lambda polls each shard of a DynamoDB stream "at a base rate of 4
    /// times per second" (Lambda Developer Guide, Using Lambda with
    /// DynamoDB): one read of a lane's stream per 250 ms.
    pub stream_poll: Duration,
    /// From a poller or async event having a payload to the handler
    /// starting in a warm execution environment; an estimate.
    pub lambda_invoke: Latency,
    /// A new execution environment: sandbox, runtime start and the
    /// function's own init (docs/binaries.md measures the init natively:
    /// milliseconds; Lambda's sandbox start for `provided.al2023`
    /// dominates); an estimate.
    pub cold_start: Latency,
    /// API Gateway's HTTP API in front of search and cart (integration
    /// overhead); an estimate.
    pub http_api: Latency,
    /// Lambda's control plane (Get/UpdateEventSourceMapping): "15 requests
    /// per second" for control-plane APIs (Lambda quotas, API requests),
    /// shared here by every call the switch makes; over it Lambda answers
    /// 429 TooManyRequestsException.
    pub control_plane_per_s: u32,
    /// One control-plane call's latency; an estimate.
    pub control_plane_call: Latency,
    /// Attempts the SDK's standard retry mode makes on a throttle (3), with
    /// exponential backoff and full jitter from 1 s, capped at 20 s (AWS
    /// SDKs and Tools reference guide, retry behaviour).
    pub sdk_attempts: u32,
    pub sdk_backoff_base: Duration,
    pub sdk_backoff_max: Duration,
    /// From an accepted UpdateEventSourceMapping (state `Updating`) to the
    /// pollers invoking the new function; not documented, an estimate of
    /// seconds.
    pub mapping_update: Latency,
    /// PutEvents' own round trip.
    pub put_events: Latency,
    /// From PutEvents to the rule's target being invoked: EventBridge's
    /// typical latency is about half a second (EventBridge FAQ); the tail is
    /// an estimate.
    pub eventbridge_delivery: Latency,
    /// SendMessage's round trip; `DelaySeconds` is a whole number of seconds
    /// (0-900, SQS API reference), so every timer is due on a whole second
    /// from when it was sent, rounded up.
    pub sqs_send: Latency,
    /// From a message becoming visible to Lambda's SQS poller (long polling)
    /// invoking the function; an estimate.
    pub sqs_receive: Latency,
}

/// The gateway's settings as the template deploys them: its
/// `OperatorSettings` default, parsed as the functions parse
/// `OPERATOR_SETTINGS`.
pub fn template_settings() -> Settings {
    Settings::from_json(TEMPLATE.operator_settings).unwrap_or_default()
}

/// The settings the README advises on top of the template's: every
/// operator probed with a search a week ahead while open (the template
/// probes with the last search the operator answered), and a timeout
/// confirmed with a ping (the hang check, built in since it tells a slow
/// moment from a hang). `--operator-settings advised`.
pub fn advised_settings() -> Settings {
    let mut settings = Settings::default();
    settings.default.probe = Some(ProbeSpec {
        operation: Operation::Search,
        params: [
            ("from", "HEL"),
            ("to", "TLL"),
            ("date", "today+7"),
            ("passengers", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    });
    settings.default.hang_check = Some(HangCheck::default());
    settings
}

/// The AWS world's numbers.
pub const AWS: AwsModel = AwsModel {
    dynamodb_read: Latency::ms(4.0, 15.0),
    dynamodb_write: Latency::ms(6.0, 25.0),
    dynamodb_batch_read: Latency::ms(8.0, 30.0),
    dynamodb_transaction: Latency::ms(12.0, 50.0),
    stream_propagation: Latency::ms(150.0, 700.0),
    stream_poll: Duration::from_millis(250),
    lambda_invoke: Latency::ms(15.0, 60.0),
    cold_start: Latency::ms(150.0, 400.0),
    http_api: Latency::ms(10.0, 40.0),
    control_plane_per_s: 15,
    control_plane_call: Latency::ms(60.0, 250.0),
    sdk_attempts: 3,
    sdk_backoff_base: Duration::from_secs(1),
    sdk_backoff_max: Duration::from_secs(20),
    mapping_update: Latency::ms(2_000.0, 8_000.0),
    put_events: Latency::ms(15.0, 60.0),
    eventbridge_delivery: Latency::ms(500.0, 1_500.0),
    sqs_send: Latency::ms(8.0, 30.0),
    sqs_receive: Latency::ms(100.0, 1_000.0),
};

impl AwsModel {
    /// Every number with where it comes from: the table of
    /// docs/aws-model.md (held to it by a test).
    pub fn rows(&self) -> Vec<(&'static str, String, &'static str)> {
        let l = |l: Latency| format!("median {} ms, p99 {} ms", l.median_ms, l.p99_ms);
        let ms = |d: Duration| format!("{} ms", d.as_millis());
        vec![
            (
                "DynamoDB read (GetItem, Query)",
                l(self.dynamodb_read),
                "DynamoDB Developer Guide: \"single-digit millisecond performance at any scale\"; tail estimated",
            ),
            (
                "DynamoDB write (PutItem, UpdateItem, conditional or not)",
                l(self.dynamodb_write),
                "same envelope; tail estimated",
            ),
            (
                "DynamoDB BatchGetItem (per 100 keys)",
                l(self.dynamodb_batch_read),
                "estimate",
            ),
            (
                "DynamoDB TransactWriteItems (a breaker save)",
                l(self.dynamodb_transaction),
                "Developer Guide: a transaction does the work of two writes; twice a write, estimated",
            ),
            (
                "Stream record propagation (write to readable)",
                l(self.stream_propagation),
                "DynamoDB Streams: \"near-real time\"; estimate",
            ),
            (
                "Lambda's polls of a shard",
                format!("every {}", ms(self.stream_poll)),
                "Lambda Developer Guide, DynamoDB: \"a base rate of 4 times per second\"",
            ),
            ("Lambda invoke, warm", l(self.lambda_invoke), "estimate"),
            (
                "Lambda cold start (sandbox, runtime, init)",
                l(self.cold_start),
                "init measured (docs/binaries.md, \"Init time\"); the sandbox estimated",
            ),
            (
                "API Gateway HTTP API in front of search and cart",
                l(self.http_api),
                "estimate",
            ),
            (
                "Lambda control plane (Get/UpdateEventSourceMapping)",
                format!(
                    "{} requests/s for the account, 429 above",
                    self.control_plane_per_s
                ),
                "Lambda quotas, API requests: control plane 15 requests per second",
            ),
            (
                "One control-plane call",
                l(self.control_plane_call),
                "estimate",
            ),
            (
                "SDK retries of a throttle",
                format!(
                    "{} attempts, full-jitter backoff from {} to {}",
                    self.sdk_attempts,
                    ms(self.sdk_backoff_base),
                    ms(self.sdk_backoff_max)
                ),
                "AWS SDKs and Tools reference guide, standard retry mode",
            ),
            (
                "A mapping update reaching the pollers",
                l(self.mapping_update),
                "not documented (the mapping is Updating meanwhile); estimate",
            ),
            ("PutEvents", l(self.put_events), "estimate"),
            (
                "EventBridge delivery to a rule's target",
                l(self.eventbridge_delivery),
                "EventBridge: typical latency about half a second; tail estimated",
            ),
            ("SQS SendMessage", l(self.sqs_send), "estimate"),
            (
                "SQS delay",
                "whole seconds, rounded up".to_owned(),
                "SQS API reference: DelaySeconds is an integer, 0-900",
            ),
            (
                "SQS pick-up by Lambda's poller",
                l(self.sqs_receive),
                "estimate",
            ),
        ]
    }

    /// [`AwsModel::rows`] as a markdown table.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| what | charged | source |\n|---|---|---|\n");
        for (what, value, source) in self.rows() {
            out.push_str(&format!("| {what} | {value} | {source} |\n"));
        }
        out
    }
}

/// How the ideal world polled a lane's stream and ticked.
pub const IDEAL_POLL: Duration = Duration::from_millis(100);
pub const IDEAL_TICK: Duration = Duration::from_secs(5);

/// The model of a run: its numbers and the seeded generator every draw
/// comes from (one generator, so a paused-clock run is the same run every
/// time).
#[derive(Debug)]
pub struct AwsRuntime {
    pub model: AwsModel,
    rng: Mutex<SimRng>,
}

impl AwsRuntime {
    pub fn new(model: AwsModel, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            model,
            rng: Mutex::new(SimRng::new(seed ^ 0xA5A5_5A5A_0F0F_F0F0)),
        })
    }

    fn rng(&self) -> MutexGuard<'_, SimRng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One draw of `latency`.
    pub fn draw(&self, latency: Latency) -> Duration {
        latency.draw(&mut self.rng())
    }

    /// A uniform draw in `[0, 1)`.
    pub fn uniform(&self) -> f64 {
        self.rng().next_f64()
    }

    /// Wait one draw of `pick(model)` on the runtime's (tokio's) clock.
    pub async fn charge(&self, pick: impl FnOnce(&AwsModel) -> Latency) {
        let wait = self.draw(pick(&self.model));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `Default:` of a template parameter.
    fn parameter_default(template: &str, name: &str) -> String {
        let block = template
            .split(&format!("\n  {name}:\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no parameter {name}"));
        block
            .lines()
            .take_while(|l| l.starts_with("    ") || l.is_empty())
            .find_map(|l| l.trim().strip_prefix("Default: "))
            .unwrap_or_else(|| panic!("no default for {name}"))
            .trim_matches('"')
            .to_owned()
    }

    /// The lines of a resource's block (those indented under its name).
    fn resource(template: &str, name: &str) -> String {
        let mut lines = template
            .lines()
            .skip_while(|l| l.trim() != format!("{name}:"));
        let head = lines.next().unwrap_or_else(|| panic!("no resource {name}"));
        let indent = head.len() - head.trim_start().len();
        lines
            .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn property(block: &str, name: &str) -> String {
        block
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in {block}"))
            .to_owned()
    }

    #[test]
    fn the_simulated_defaults_are_the_templates() {
        let template = include_str!("../../../template.yaml");
        let t = &TEMPLATE;
        let schedule = resource(template, "HalfOpenScheduleRule");
        assert_eq!(property(&schedule, "ScheduleExpression"), "rate(1 minute)");
        assert_eq!(t.tick_every, Duration::from_secs(60));
        assert_eq!(
            property(&resource(template, "BreakerTimerQueueMapping"), "BatchSize"),
            crate::suite::TIMER_BATCH_SIZE.to_string()
        );
        let mapping = resource(template, "RequestsMapping&{Operator}");
        assert_eq!(property(&mapping, "BatchSize"), t.batch_size.to_string());
        assert_eq!(
            property(&mapping, "ParallelizationFactor"),
            "!Ref LaneParallelization"
        );
        assert_eq!(
            parameter_default(template, "LaneParallelization"),
            t.parallelization.to_string()
        );
        assert_eq!(
            property(&mapping, "MaximumRetryAttempts"),
            t.max_retries.to_string()
        );
        for function in [
            "RealConsumerFunction",
            "FallbackConsumerFunction",
            "CircuitSwitchFunction",
        ] {
            assert_eq!(
                property(&resource(template, function), "Timeout"),
                t.function_timeout.as_secs().to_string(),
                "{function}"
            );
        }
        assert_eq!(
            property(
                &resource(template, "BreakerTimerQueue"),
                "VisibilityTimeout"
            ),
            t.timer_visibility.as_secs().to_string()
        );
        assert_eq!(
            parameter_default(template, "RealConsumerConcurrency"),
            t.real_consumer_concurrency.to_string()
        );
        let reserved = |function: &str| {
            property(
                &resource(template, function),
                "ReservedConcurrentExecutions",
            )
        };
        assert_eq!(
            reserved("FallbackConsumerFunction"),
            format!(
                "!If [ReservesConcurrency, {}, !Ref AWS::NoValue]",
                t.fallback_concurrency
            )
        );
        assert_eq!(
            reserved("CircuitSwitchFunction"),
            format!(
                "!If [ReservesConcurrency, {}, !Ref AWS::NoValue]",
                t.switch_concurrency
            )
        );
        assert_eq!(
            parameter_default(template, "ReservedConcurrency"),
            "enabled"
        );
        assert_eq!(
            parameter_default(template, "OperatorSettings"),
            t.operator_settings
        );
        assert_eq!(
            Settings::from_json(t.operator_settings).ok(),
            Some(template_settings())
        );
    }

    #[test]
    fn the_documented_model_is_the_one_charged() {
        let doc = include_str!("../../../docs/aws-model.md");
        assert!(
            doc.contains(&AWS.markdown()),
            "docs/aws-model.md does not hold the model's table; it is:\n{}",
            AWS.markdown()
        );
    }

    #[test]
    fn latencies_have_their_median_and_tail() {
        let mut rng = SimRng::new(7);
        let latency = Latency::ms(10.0, 40.0);
        let mut draws: Vec<f64> = (0..20_000)
            .map(|_| latency.draw(&mut rng).as_secs_f64() * 1000.0)
            .collect();
        draws.sort_by(f64::total_cmp);
        let at = |q: f64| draws[((draws.len() as f64) * q) as usize];
        assert!((9.0..11.0).contains(&at(0.5)), "median {}", at(0.5));
        assert!((34.0..47.0).contains(&at(0.99)), "p99 {}", at(0.99));
        assert!(draws.iter().all(|&d| d <= 120.0 + 1e-9), "cut at 3 x p99");
        assert_eq!(Latency::ms(0.0, 0.0).draw(&mut rng), Duration::ZERO);
    }

    #[test]
    fn worlds_read_and_print_as_their_names() {
        for world in [World::Aws, World::Ideal] {
            assert_eq!(world.as_str().parse::<World>().ok(), Some(world));
        }
        let err = "lambda".parse::<World>().unwrap_err().to_string();
        assert!(err.contains("\"lambda\""), "{err}");
        assert_eq!(World::default(), World::Aws);
    }
}
