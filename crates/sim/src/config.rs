//! How the in-memory suite is set up: its functions' settings, the
//! mapping's batching and retries, the schedule, the lanes' layout, the
//! faults and the world ([`MemorySuiteConfig::in_world`]).

use std::sync::Arc;
use std::time::Duration;

use lifeboat_core::OperatorId;
use lifeboat_core::settings::Settings;

use crate::aws::{AWS, AwsModel, IDEAL_POLL, IDEAL_TICK, TEMPLATE, World};
use crate::fault::FaultPlan;

/// How the in-memory AWS behaves.
#[derive(Debug, Clone)]
pub struct MemorySuiteConfig {
    pub settings: Settings,
    /// Records per stream batch (the mapping's BatchSize).
    pub batch_size: usize,
    /// Operator calls in flight per batch.
    pub concurrency: usize,
    /// Batches of the stream in flight at once (the mapping's
    /// ParallelizationFactor; the template sets 4).
    pub parallelization: usize,
    /// How often the stream is polled when it has nothing.
    pub poll: Duration,
    /// The schedule's period.
    pub tick_every: Duration,
    /// Deliveries of a failing record before it is given up on (the
    /// mapping's MaximumRetryAttempts; the template sets 3).
    pub max_retries: u32,
    pub operators: Vec<OperatorId>,
    /// How the operators' requests are laid out in streams.
    pub lanes: LaneLayout,
    /// Faults injected into the functions' dependencies (none by default).
    pub faults: Option<Arc<FaultPlan>>,
    /// How long an invocation may run before Lambda stops it (the
    /// template's 15 s for the consumers and the switch).
    pub function_timeout: Duration,
    /// AWS's latencies and limits ([`World::Aws`]), or none at all
    /// ([`World::Ideal`]).
    pub aws: Option<AwsModel>,
    /// Seeds the AWS model's draws.
    pub aws_seed: u64,
    /// How long the Requests store keeps a request after its creation
    /// (`None`: for the whole run). The table's TTL keeps one a day past its
    /// deadline; a long simulated day at a marketplace's load cannot keep
    /// them all in memory, and nothing reads a request minutes after its
    /// customer was answered. A request a lane has yet to deliver is kept
    /// whatever its age.
    pub retain_requests: Option<Duration>,
    /// The real consumer's reserved concurrency in the AWS world (the
    /// template's `RealConsumerConcurrency`; shared by every lane).
    pub real_consumer_concurrency: usize,
}

/// How requests flow from the Requests table(s) to the consumers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LaneLayout {
    /// One stream and mapping for every operator.
    Shared,
    /// A stream and mapping per operator, as the template deploys them.
    #[default]
    PerOperator,
}

impl Default for MemorySuiteConfig {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            batch_size: 50,
            concurrency: real_consumer::DEFAULT_CONCURRENCY,
            parallelization: 4,
            poll: IDEAL_POLL,
            tick_every: IDEAL_TICK,
            max_retries: 3,
            operators: Vec::new(),
            lanes: LaneLayout::default(),
            faults: None,
            function_timeout: Duration::from_secs(15),
            aws: None,
            aws_seed: 0,
            retain_requests: None,
            real_consumer_concurrency: TEMPLATE.real_consumer_concurrency,
        }
    }
}

impl MemorySuiteConfig {
    /// The suite as `world` runs it: in the AWS world, the template's
    /// mapping, schedule and timeouts ([`TEMPLATE`]) and AWS's latencies and
    /// limits ([`AWS`]), its draws seeded by `seed`; in the ideal world,
    /// [`MemorySuiteConfig::default`] (a stream polled every 100 ms, a 5 s
    /// tick, nothing charged).
    pub fn in_world(world: World, seed: u64) -> Self {
        let ideal = Self::default();
        match world {
            World::Ideal => ideal,
            World::Aws => Self {
                batch_size: TEMPLATE.batch_size,
                parallelization: TEMPLATE.parallelization,
                poll: AWS.stream_poll,
                tick_every: TEMPLATE.tick_every,
                max_retries: TEMPLATE.max_retries,
                function_timeout: TEMPLATE.function_timeout,
                aws: Some(AWS),
                aws_seed: seed,
                ..ideal
            },
        }
    }

    /// The world this configuration runs in.
    pub fn world(&self) -> World {
        if self.aws.is_some() {
            World::Aws
        } else {
            World::Ideal
        }
    }
}
