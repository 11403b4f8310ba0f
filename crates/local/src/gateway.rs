//! The gateway breaker wired on one machine: moto for the AWS APIs, the three
//! gateway functions under `cargo lambda watch`, a simulated operator, and the
//! harness's [`StreamPump`], [`BusDrain`] and [`Ticker`] for what moto does not
//! run. With [`GatewayOptions::customer`] also the customer half: search,
//! cart and the off-sale listener, reached over HTTP and through the
//! [`QueuePump`] (see "The customer functions" below).
//!
//! [`LocalGateway::start`]:
//!
//! 1. starts moto (through [`moto_launcher`]: without moto's own attempt at
//!    delivering the stream, which wipes it) and creates, with the
//!    template's settings, the Requests
//!    table (stream NEW_AND_OLD_IMAGES), the Breaker table, the Cache table
//!    (the real consumer refreshes it after every answered call), the event bus, the
//!    mapping's failure queue, an execution role, the three functions (names =
//!    binary names, no code that runs), and the Requests stream's event
//!    source mapping to `real-consumer` (filter, batch size 50,
//!    ReportBatchItemFailures, bisect, 3 retries, 60 s record age);
//! 2. gives the `TripRequestedRule` (`Trip Requested` / `Trials Passed` from
//!    `lifeboat`) an SQS queue as its target, since moto cannot target a
//!    Lambda;
//! 3. starts the simulated operator on a free port;
//! 4. starts `cargo lambda watch` with the functions' environment (see
//!    [`LocalGateway::function_env`]): every AWS API at moto, so the circuit
//!    switch re-points the mapping that moto owns;
//! 5. invokes each function once, so the first real invocation does not wait
//!    for `cargo run` to start it;
//! 6. starts the stream pump (LATEST, like the template's mapping: what is
//!    written after `start` returns is delivered), the bus drain into
//!    `circuit-switch`, and the schedule's ticker.
//!
//! Dropping the gateway stops everything it started; [`LocalGateway::stop`]
//! does it gracefully.
//!
//! # The customer functions
//!
//! With [`GatewayOptions::customer`] set, [`LocalGateway::start`] also
//!
//! * creates, as the template does, the Carts table, the SaleStatus table,
//!   `OffsaleDeadLetterQueue`, `OffsaleQueue` (visibility timeout 90 s,
//!   redrive to the dead-letter queue after 30 receives) and
//!   `BreakerStateChangedRule` on the bus with `OffsaleQueue` as its target
//!   (moto delivers a rule's events to an SQS target; the circuit switch's
//!   `Breaker State Changed` events reach the queue the way they do on AWS);
//! * gives every function the customer variables (`CARTS_TABLE`,
//!   `SALE_STATUS_TABLE`, `SALE_STATUS_STORE=dynamodb`, `OFFSALE_QUEUE_URL`,
//!   `SALE_SWITCH=table`, `CART_SETTINGS`, `BREAKER_CACHE_MS`, …), warms up
//!   `search` and `cart` with an HTTP request and `offsale-listener` with an
//!   empty batch, so `cargo lambda watch` starts all six;
//! * plays `OffsaleQueueMapping` (batch size 10, partial batch responses)
//!   with a [`QueuePump`] into `offsale-listener`: moto would run an SQS
//!   mapping's function itself, in Docker, so none is created in moto.
//!
//! `LifeboatHttpApi` is played by [`LocalGateway::api`]: a request goes to
//! the function the template routes its path to ([`api_function`]:
//! `/sailings` and `/price` to search, `/carts…` to cart), as a Function URL
//! request under `cargo lambda watch` ([`Watch::function_url`]), which hands
//! the function an API Gateway HTTP API (payload 2.0) event with the path
//! and query as given.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;

use aws_config::SdkConfig;
use aws_sdk_lambda::types::{
    DestinationConfig, EventSourcePosition, Filter, FunctionResponseType, OnFailure,
};
use lifeboat_aws::{
    DynamoBreakerStore, DynamoCartStore, DynamoRequestStore, DynamoSaleStatusStore, RequestTables,
};
use lifeboat_core::OperatorId;
use lifeboat_core::metrics::LogLevel;
use lifeboat_operator::{LatencyModel, SimConfig, SimServer, SimStats};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::alarm::{AlarmConfig, AlarmRule, LocalAlarm};
use crate::faults::FaultProxy;
use crate::moto::resources::{self, Queue, QueueTarget, ResourceError};
use crate::moto::{MotoError, MotoServer, REGION, find_moto_server};
use crate::pump::{
    BusDrain, BusDrainConfig, DrainStats, Invoker, PumpConfig, PumpError, PumpStats, QueuePump,
    QueuePumpConfig, QueueStats, StreamPump, Ticker, TickerConfig, TickerStats, read_mapping,
};
use crate::watch::{Watch, WatchError};

/// The real consumer's binary (and function) name.
pub const REAL_CONSUMER: &str = "real-consumer";
/// The fallback consumer's binary (and function) name.
pub const FALLBACK_CONSUMER: &str = "fallback-consumer";
/// The circuit switch's binary (and function) name.
pub const CIRCUIT_SWITCH: &str = "circuit-switch";
/// The search function's binary name (`GET /sailings`, `GET /price`).
pub const SEARCH: &str = "search";
/// The cart function's binary name (`/carts…`).
pub const CART: &str = "cart";
/// The off-sale listener's binary name.
pub const OFFSALE_LISTENER: &str = "offsale-listener";

/// The function `LifeboatHttpApi` routes `path` (with or without a query)
/// to, as the template's `HttpApi` events do: `/sailings` and `/price` to
/// search, `/carts` and up to two segments below it to cart. By path only:
/// a method the template has no route for reaches the function, which
/// answers 405, where API Gateway would answer 404 itself.
pub fn api_function(path: &str) -> Option<&'static str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["sailings"] | ["price"] => Some(SEARCH),
        ["carts", ..] if segments.len() <= 3 => Some(CART),
        _ => None,
    }
}

/// The Requests stream mapping's settings in template.yaml (each lane's
/// `RequestsMapping&{Operator}`). The local gateway runs one lane for its
/// operator's requests.
pub mod template {
    pub const BATCH_SIZE: i32 = 50;
    pub const MAXIMUM_BATCHING_WINDOW_IN_SECONDS: i32 = 0;
    pub const PARALLELIZATION_FACTOR: i32 = 4;
    pub const MAXIMUM_RETRY_ATTEMPTS: i32 = 3;
    pub const MAXIMUM_RECORD_AGE_IN_SECONDS: i32 = 60;
    pub const BISECT_BATCH_ON_FUNCTION_ERROR: bool = true;
    /// `FilterCriteria`: new request items only.
    pub const FILTER_PATTERN: &str = crate::moto::resources::REQUESTS_FILTER_PATTERN;
    /// `TripRequestedRule`'s event pattern.
    pub const SWITCH_RULE_PATTERN: &str =
        r#"{"source": ["lifeboat"], "detail-type": ["Trip Requested", "Trials Passed"]}"#;
    /// The real consumer's `CALL_CONCURRENCY` (the `CallConcurrency` default).
    pub const CALL_CONCURRENCY: u32 = 50;
    /// The `ErrorsAlarmName` and `AlarmOperators` defaults.
    pub const ALARM_OPERATORS: &str = "lifeboat-nordic-errors=nordic";
    /// The `ErrorsAlarmName` default.
    pub const ERRORS_ALARM_NAME: &str = "lifeboat-nordic-errors";
    /// `RealConsumerErrorsAlarm`'s `Period` (seconds).
    pub const ALARM_PERIOD_S: u64 = 10;
    /// `RealConsumerErrorsAlarm`'s `EvaluationPeriods`.
    pub const ALARM_EVALUATION_PERIODS: usize = 2;
    /// `RealConsumerErrorsAlarm`'s `DatapointsToAlarm`.
    pub const ALARM_DATAPOINTS: usize = 2;
    /// `RealConsumerErrorsAlarm`'s threshold (`Mappings: ErrorsAlarm`).
    pub const ALARM_THRESHOLD: f64 = 5.0;
    /// `BreakerStateChangedRule`'s event pattern.
    pub const OFFSALE_RULE_PATTERN: &str =
        r#"{"source": ["lifeboat"], "detail-type": ["Breaker State Changed"]}"#;
    /// `BreakerStateChangedRule`'s target id.
    pub const OFFSALE_TARGET_ID: &str = "offsale-queue";
    /// `OffsaleQueue`'s `VisibilityTimeout`.
    pub const OFFSALE_VISIBILITY_TIMEOUT: u32 = 90;
    /// `OffsaleQueue`'s `maxReceiveCount`.
    pub const OFFSALE_MAX_RECEIVE_COUNT: u32 = 30;
    /// `OffsaleQueueMapping`'s `BatchSize`.
    pub const OFFSALE_BATCH_SIZE: i32 = 10;
    /// `BreakerTimerQueue`'s `VisibilityTimeout`.
    pub const TIMER_QUEUE_VISIBILITY_S: u32 = 30;
    /// `BreakerTimerQueueMapping`'s `BatchSize`.
    pub const TIMER_BATCH_SIZE: i32 = 1;
    /// `BREAKER_CACHE_MS` of search and cart.
    pub const BREAKER_CACHE_MS: u32 = 1000;
    /// The `SaleRetryMaxAttempts` default.
    pub const SALE_RETRY_MAX_ATTEMPTS: u32 = 8;
    /// The `SaleSwitchTimeoutMs` default.
    pub const SALE_SWITCH_TIMEOUT_MS: u32 = 2000;
    /// The `SaleOnSaleHoldSeconds` default.
    pub const SALE_ON_SALE_HOLD_S: u32 = 60;
    /// The `SaleOffSaleHoldSeconds` default.
    pub const SALE_OFF_SALE_HOLD_S: u32 = 10;
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Moto(#[from] MotoError),
    #[error("cannot write the moto_server launcher {path}: {source}")]
    Launcher {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("creating resources in moto: {0}")]
    Resource(#[from] ResourceError),
    #[error("starting the simulated operator: {0}")]
    Operator(#[source] std::io::Error),
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error("warming up {function} under cargo lambda watch (its log is {log}): {source}")]
    WarmUp {
        function: &'static str,
        log: String,
        source: WatchError,
    },
    #[error(transparent)]
    Pump(#[from] PumpError),
    #[error("starting the fault proxy: {0}")]
    FaultProxy(#[source] std::io::Error),
    #[error("operator control endpoint: {0}")]
    Control(#[source] reqwest::Error),
    #[error("warming up {function} over HTTP (its log is {log}): {detail}")]
    WarmUpHttp {
        function: &'static str,
        log: String,
        detail: String,
    },
    #[error("the gateway was started without the customer functions (GatewayOptions::customer)")]
    NoCustomer,
    #[error("LifeboatHttpApi has no route for {0:?}")]
    NoRoute(String),
    #[error("the functions' environment has {key}, which cannot be written to an env file: {why}")]
    EnvFile { key: String, why: String },
    #[error("cannot write the functions' environment to {file}: {source}")]
    EnvFileWrite {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cargo lambda watch at {endpoint} runs with another environment than this run's ({keys}): \
         stop it, run this again (it writes {file} and waits), then start the watch with --env-file {file}; \
         keep --moto, --aws-port, --operator-port and --settings the same between runs to avoid this"
    )]
    EnvChanged {
        file: PathBuf,
        endpoint: String,
        keys: String,
    },
    #[error("the attached moto_server cannot serve the suite: {detail}")]
    StreamProbe { detail: String },
    #[error("cannot empty {queue} of what an earlier run left: {detail}")]
    Purge { queue: String, detail: String },
    #[error("{method} {url}: {source}")]
    Api {
        method: String,
        url: String,
        source: reqwest::Error,
    },
    #[error("{method} {url} answered HTTP {status} with something that is not JSON: {body:?}")]
    ApiNotJson {
        method: String,
        url: String,
        status: u16,
        body: String,
    },
}

/// Names of the resources (the functions are always named after their
/// binaries, which is how the pump finds them under `cargo lambda watch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayNames {
    /// The operator's Requests table is `{requests_table_prefix}{operator}`
    /// (`REQUESTS_TABLE_PREFIX`), as the template names each lane's table.
    pub requests_table_prefix: String,
    pub breaker_table: String,
    pub cache_table: String,
    pub bus: String,
    pub switch_rule: String,
    pub switch_queue: String,
    pub failed_queue: String,
    pub schedule_rule: String,
    /// `BreakerTimerQueue`: the circuit switch's timers.
    pub timer_queue: String,
    pub role: String,
    /// The customer half's resources (created with
    /// [`GatewayOptions::customer`]).
    pub carts_table: String,
    pub sale_status_table: String,
    pub offsale_queue: String,
    pub offsale_dead_letter_queue: String,
    pub offsale_rule: String,
}

impl GatewayNames {
    pub fn prefixed(prefix: &str) -> Self {
        Self {
            requests_table_prefix: format!("{prefix}requests-"),
            breaker_table: format!("{prefix}Breaker"),
            cache_table: format!("{prefix}Cache"),
            bus: format!("{prefix}lifeboat-events"),
            switch_rule: format!("{prefix}TripRequestedRule"),
            switch_queue: format!("{prefix}TripRequestedRule-circuit-switch"),
            failed_queue: format!("{prefix}RequestsFailedQueue"),
            schedule_rule: format!("{prefix}HalfOpenScheduleRule"),
            timer_queue: format!("{prefix}BreakerTimerQueue"),
            role: format!("{prefix}lifeboat-functions"),
            carts_table: format!("{prefix}Carts"),
            sale_status_table: format!("{prefix}SaleStatus"),
            offsale_queue: format!("{prefix}OffsaleQueue"),
            offsale_dead_letter_queue: format!("{prefix}OffsaleDeadLetterQueue"),
            offsale_rule: format!("{prefix}BreakerStateChangedRule"),
        }
    }
}

impl Default for GatewayNames {
    fn default() -> Self {
        Self::prefixed("")
    }
}

/// How to run the gateway.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The one operator the gateway serves.
    pub operator: OperatorId,
    /// The simulated operator. Default: healthy, answer times × 0.1.
    pub sim: SimConfig,
    /// `OPERATOR_SETTINGS` of every function (empty: the defaults).
    pub operator_settings: String,
    /// The schedule's period (the template's is a minute).
    pub tick_every: Duration,
    /// How often the pump polls an idle stream.
    pub poll_every: Duration,
    /// Instances per function under `cargo lambda watch`.
    pub concurrency: u32,
    /// How long one invocation may take.
    pub invoke_timeout: Duration,
    /// `AWS_LAMBDA_LOG_LEVEL` of the functions.
    pub log_level: String,
    pub names: GatewayNames,
    /// Every stream record the pump reads, in Lambda's shape.
    pub stream_tap: Option<mpsc::UnboundedSender<Value>>,
    /// Also run search, cart and the off-sale listener (default: not; the
    /// gateway alone does not build or start them).
    pub customer: Option<CustomerOptions>,
    /// The errors alarm's name (default `lifeboat-<operator>-errors`, the
    /// template's default for nordic): evaluated by a [`LocalAlarm`] on the
    /// functions' metrics and mapped to the operator in `ALARM_OPERATORS`.
    /// `None`: no alarm, the breaker opens by the failure window alone.
    pub alarm: Option<String>,
    /// Servers to use instead of starting them, and fixed ports.
    pub attach: Attach,
    /// Healthy operators served beside `operator`, each on a lane of its own
    /// (table, stream, mapping, as the template makes them) with a simulated
    /// operator of its own on a free port. Default none. Not for a watch the
    /// suite attaches to: their ports change from run to run.
    pub neighbours: Vec<OperatorId>,
    /// Put a [`FaultProxy`] seeded with this between the functions and moto
    /// (their `AWS_ENDPOINT_URL`), with `AWS_MAX_ATTEMPTS=1` so that every
    /// fault it injects reaches lifeboat's code; it fails nothing until
    /// [`LocalGateway::fault_proxy`]'s rate is raised. Default none. Not for
    /// an attached watch.
    pub aws_faults: Option<u64>,
}

/// Servers the suite uses instead of starting its own, and the ports of
/// what it starts that the functions call. The default starts everything
/// on free ports.
///
/// A watch that runs before the suite starts must have been given the
/// functions' environment, so that environment must not change from one
/// run to the next: with [`Attach::watch`], keep `moto`, `aws_port` and
/// `operator_port` the same between runs. The resources the suite creates
/// in an attached moto are left there when it stops, and the next run uses
/// them again (the Requests stream's mapping keeps its UUID).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attach {
    /// A moto_server already running (`http://127.0.0.1:5000`).
    pub moto: Option<String>,
    /// A `cargo lambda watch` of this workspace already running.
    pub watch: Option<AttachWatch>,
    /// The loopback port of the proxy in front of moto, the
    /// `AWS_ENDPOINT_URL` of the functions (0: a free one).
    pub aws_port: u16,
    /// The simulated operator's loopback port (0: a free one).
    pub operator_port: u16,
}

/// A running `cargo lambda watch` to invoke the functions on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachWatch {
    /// Its Invoke API (`http://127.0.0.1:9000`).
    pub endpoint: String,
    /// Where its output goes, for the errors alarm; `None`: no alarm.
    pub log: Option<PathBuf>,
    /// Where the functions' environment is written, for its `--env-file`.
    pub env_file: PathBuf,
    /// How long to wait for it to listen.
    pub wait: Duration,
}

/// How to run the customer half: settings of search, cart and the off-sale
/// listener. The defaults are the template's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomerOptions {
    /// `CART_SETTINGS` (empty: the defaults).
    pub cart_settings: String,
    /// `BREAKER_CACHE_MS` of search and cart.
    pub breaker_cache_ms: u32,
    /// `SALE_RETRY_MAX_ATTEMPTS` of the off-sale listener.
    pub sale_retry_max_attempts: u32,
    /// `SALE_SWITCH_TIMEOUT_MS` of the off-sale listener.
    pub sale_switch_timeout_ms: u32,
    /// `SALE_ON_SALE_HOLD_S` of the off-sale listener.
    pub sale_on_sale_hold_s: u32,
    /// `SALE_OFF_SALE_HOLD_S` of the off-sale listener.
    pub sale_off_sale_hold_s: u32,
    /// Long-poll wait of each receive from `OffsaleQueue` (Lambda's poller
    /// waits up to 20 s; it answers as soon as a message is there either way).
    pub queue_wait: Duration,
}

impl Default for CustomerOptions {
    fn default() -> Self {
        Self {
            cart_settings: String::new(),
            breaker_cache_ms: template::BREAKER_CACHE_MS,
            sale_retry_max_attempts: template::SALE_RETRY_MAX_ATTEMPTS,
            sale_switch_timeout_ms: template::SALE_SWITCH_TIMEOUT_MS,
            sale_on_sale_hold_s: template::SALE_ON_SALE_HOLD_S,
            sale_off_sale_hold_s: template::SALE_OFF_SALE_HOLD_S,
            queue_wait: Duration::from_secs(1),
        }
    }
}

impl GatewayOptions {
    pub fn new(operator: OperatorId) -> Self {
        Self {
            sim: SimConfig {
                latency: LatencyModel::scaled(0.1),
                ..SimConfig::default()
            },
            operator_settings: String::new(),
            tick_every: Duration::from_secs(60),
            poll_every: Duration::from_millis(100),
            concurrency: 1,
            invoke_timeout: Duration::from_secs(60),
            log_level: "INFO".to_owned(),
            names: GatewayNames::default(),
            stream_tap: None,
            customer: None,
            alarm: Some(format!("lifeboat-{operator}-errors")),
            attach: Attach::default(),
            neighbours: Vec::new(),
            aws_faults: None,
            operator,
        }
    }
}

/// One neighbour's lane and simulated operator.
#[derive(Debug)]
pub struct Neighbour {
    pub operator: OperatorId,
    pub requests_table: String,
    pub mapping_uuid: String,
    pub sim: SimServer,
    /// Held for its drop, which stops the lane's pump.
    _pump: StreamPump,
}

/// What was created in moto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayResources {
    pub names: GatewayNames,
    /// The operator's lane: its Requests table and that table's stream.
    pub requests_table: String,
    pub stream_arn: String,
    pub bus_arn: String,
    /// The `TripRequestedRule`'s stand-in target.
    pub switch_queue: QueueTarget,
    pub failed_queue_url: String,
    pub failed_queue_arn: String,
    /// `BreakerTimerQueue`, drained into the circuit switch.
    pub timer_queue: Queue,
    pub real_function_arn: String,
    pub fallback_function_arn: String,
    pub switch_function_arn: String,
    /// The Requests stream's mapping.
    pub mapping_uuid: String,
    /// The customer half's resources, if it runs.
    pub customer: Option<CustomerResources>,
}

/// The customer half's resources in moto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomerResources {
    pub offsale_queue: Queue,
    pub offsale_dead_letter_queue: Queue,
    /// `BreakerStateChangedRule`.
    pub offsale_rule_arn: String,
}

/// An HTTP reply of search or cart through [`LocalGateway::api`].
#[derive(Debug, Clone, PartialEq)]
pub struct ApiReply {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`null` when empty).
    pub body: Value,
    /// From sending the request to the whole reply.
    pub elapsed: Duration,
}

impl ApiReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How long start-up took, step by step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupTimes {
    pub moto_and_resources: Duration,
    pub watch: Duration,
    pub warm_up: Duration,
    pub total: Duration,
}

/// Long-poll wait of the `BreakerTimerQueue` pump: a timer that comes due
/// reaches the switch within it.
const TIMER_QUEUE_WAIT: Duration = Duration::from_secs(1);

/// The wired gateway; see the module docs.
#[derive(Debug)]
pub struct LocalGateway {
    // Field order is drop order: the harness's tasks first, then the
    // functions, the operator, and moto last.
    pump: StreamPump,
    drain: BusDrain,
    ticker: Ticker,
    alarm: Option<LocalAlarm>,
    offsale: Option<QueuePump>,
    timers: QueuePump,
    neighbours: Vec<Neighbour>,
    watch: Watch,
    operator: SimServer,
    moto: MotoServer,
    sdk: SdkConfig,
    resources: GatewayResources,
    env: Vec<(String, String)>,
    http: reqwest::Client,
    /// For [`LocalGateway::api`]: bounded by the invoke timeout.
    api_http: reqwest::Client,
    startup: StartupTimes,
    faults: Option<FaultProxy>,
}

impl LocalGateway {
    /// Start everything; see the module docs.
    pub async fn start(options: GatewayOptions) -> Result<Self, GatewayError> {
        let started = Instant::now();
        let attach = &options.attach;
        let moto = match &attach.moto {
            Some(endpoint) => MotoServer::attach(endpoint, attach.aws_port).await?,
            None => MotoServer::start_program_with(&moto_launcher()?, attach.aws_port).await?,
        };
        let sdk = moto.sdk_config().await;
        let mut resources = create_resources(&sdk, &options.names, &options.operator).await?;
        if options.customer.is_some() {
            resources.customer = Some(create_customer_resources(&sdk, &options.names).await?);
        }
        if moto.is_attached() {
            check_stream_keeps_records(&sdk, &resources).await?;
            purge_queues(&sdk, &resources).await?;
        }
        let moto_and_resources = started.elapsed();

        let operator = SimServer::start_with(
            options.operator.clone(),
            options.sim.clone(),
            attach.operator_port,
        )
        .await
        .map_err(GatewayError::Operator)?;
        // The neighbours' lanes exist before the switch starts: it finds
        // every operator's mapping when it starts.
        let mut lanes = Vec::new();
        for (n, neighbour) in options.neighbours.iter().enumerate() {
            let lane = create_lane(
                &sdk,
                &resources.names,
                neighbour,
                &resources.failed_queue_arn,
            )
            .await?;
            let sim = SimServer::start_with(
                neighbour.clone(),
                SimConfig {
                    seed: options.sim.seed ^ (n as u64 + 1),
                    outages: Vec::new(),
                    ..options.sim.clone()
                },
                0,
            )
            .await
            .map_err(GatewayError::Operator)?;
            lanes.push((
                neighbour.clone(),
                lane.requests_table,
                lane.mapping_uuid,
                sim,
            ));
        }
        let endpoints: Vec<(OperatorId, String)> =
            std::iter::once((options.operator.clone(), operator.base_url()))
                .chain(
                    lanes
                        .iter()
                        .map(|(o, _, _, sim)| (o.clone(), sim.base_url())),
                )
                .collect();
        let mut env = function_env(&moto, &resources, &options, &endpoints);
        let faults = match options.aws_faults {
            Some(seed) => {
                let proxy = FaultProxy::start(&moto.endpoint(), seed)
                    .await
                    .map_err(GatewayError::FaultProxy)?;
                env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
                env.push(("AWS_ENDPOINT_URL".to_owned(), proxy.endpoint()));
                env.push(("AWS_MAX_ATTEMPTS".to_owned(), "1".to_owned()));
                Some(proxy)
            }
            None => None,
        };
        let watch_started = Instant::now();
        let watch = match &attach.watch {
            Some(running) => attach_watch(running, &env, options.invoke_timeout).await?,
            None => {
                Watch::for_workspace()
                    .envs(env.iter().cloned())
                    .concurrency(options.concurrency)
                    .start()
                    .await?
            }
        };
        let watch_time = watch_started.elapsed();

        let warm_started = Instant::now();
        warm_up(&watch).await?;
        if options.customer.is_some() {
            warm_up_customer(&watch).await?;
        }
        let warm_up_time = warm_started.elapsed();

        let invoker = Invoker::for_endpoint(&watch.invoke_endpoint(), options.invoke_timeout).await;
        let mut pump_config = PumpConfig::new(&resources.mapping_uuid);
        pump_config.poll_every = options.poll_every;
        pump_config.tap = options.stream_tap.clone();
        let pump = StreamPump::start(
            aws_sdk_dynamodbstreams::Client::new(&sdk),
            aws_sdk_lambda::Client::new(&sdk),
            invoker.clone(),
            pump_config,
        )
        .await?;
        let mut neighbours = Vec::new();
        for (operator, requests_table, mapping_uuid, sim) in lanes {
            let mut config = PumpConfig::new(&mapping_uuid);
            config.poll_every = options.poll_every;
            let pump = StreamPump::start(
                aws_sdk_dynamodbstreams::Client::new(&sdk),
                aws_sdk_lambda::Client::new(&sdk),
                invoker.clone(),
                config,
            )
            .await?;
            neighbours.push(Neighbour {
                operator,
                requests_table,
                mapping_uuid,
                sim,
                _pump: pump,
            });
        }
        let drain = BusDrain::start(
            aws_sdk_sqs::Client::new(&sdk),
            invoker.clone(),
            BusDrainConfig::new(&resources.switch_queue.queue_url, CIRCUIT_SWITCH),
        );
        let mut timer_config = QueuePumpConfig::new(
            &resources.timer_queue.url,
            &resources.timer_queue.arn,
            CIRCUIT_SWITCH,
        );
        timer_config.batch_size = template::TIMER_BATCH_SIZE;
        timer_config.wait = TIMER_QUEUE_WAIT;
        let timers = QueuePump::start(
            aws_sdk_sqs::Client::new(&sdk),
            invoker.clone(),
            timer_config,
        );
        let offsale = match (&options.customer, &resources.customer) {
            (Some(customer), Some(created)) => {
                let mut config = QueuePumpConfig::new(
                    &created.offsale_queue.url,
                    &created.offsale_queue.arn,
                    OFFSALE_LISTENER,
                );
                config.batch_size = template::OFFSALE_BATCH_SIZE;
                config.wait = customer.queue_wait;
                Some(QueuePump::start(
                    aws_sdk_sqs::Client::new(&sdk),
                    invoker.clone(),
                    config,
                ))
            }
            _ => None,
        };
        let alarm = options
            .alarm
            .as_ref()
            .zip(watch.log_path())
            .map(|(name, log)| {
                let mut config = AlarmConfig::new(
                    AlarmRule::errors_alarm(name, options.operator.as_str()),
                    log,
                    CIRCUIT_SWITCH,
                );
                config.from_end = watch.is_attached();
                config.filter = LogLevel::parse(&options.log_level).unwrap_or_default();
                LocalAlarm::start(invoker.clone(), config)
            });
        let ticker = Ticker::start(
            invoker,
            TickerConfig::new(
                CIRCUIT_SWITCH,
                options.tick_every,
                &resources.names.schedule_rule,
            ),
        );
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(GatewayError::Control)?;
        let api_http = reqwest::Client::builder()
            .no_proxy()
            .timeout(options.invoke_timeout)
            .build()
            .map_err(GatewayError::Control)?;
        Ok(Self {
            pump,
            drain,
            ticker,
            alarm,
            offsale,
            timers,
            neighbours,
            watch,
            operator,
            moto,
            sdk,
            resources,
            env,
            http,
            api_http,
            startup: StartupTimes {
                moto_and_resources,
                watch: watch_time,
                warm_up: warm_up_time,
                total: started.elapsed(),
            },
            faults,
        })
    }

    /// The fault proxy, when started with [`GatewayOptions::aws_faults`].
    pub fn fault_proxy(&self) -> Option<&FaultProxy> {
        self.faults.as_ref()
    }

    pub fn resources(&self) -> &GatewayResources {
        &self.resources
    }

    pub fn startup_times(&self) -> StartupTimes {
        self.startup
    }

    /// An SDK configuration for moto.
    pub fn sdk_config(&self) -> &SdkConfig {
        &self.sdk
    }

    pub fn moto(&self) -> &MotoServer {
        &self.moto
    }

    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// The simulated operator.
    pub fn operator(&self) -> &SimServer {
        &self.operator
    }

    /// The healthy operators served beside it, each on its own lane.
    pub fn neighbours(&self) -> &[Neighbour] {
        &self.neighbours
    }

    /// The environment every function runs with.
    pub fn function_env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The Requests tables in moto, as the functions see them.
    pub fn request_store(&self) -> DynamoRequestStore {
        DynamoRequestStore::with_tables(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            RequestTables::PerOperator {
                prefix: self.resources.names.requests_table_prefix.clone(),
            },
        )
    }

    /// The breakers in moto, as the functions see them.
    pub fn breaker_store(&self) -> DynamoBreakerStore {
        DynamoBreakerStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.breaker_table,
        )
    }

    /// The function the Requests stream's mapping delivers to now.
    pub async fn mapping_function(&self) -> Result<String, GatewayError> {
        let mapping = read_mapping(
            &aws_sdk_lambda::Client::new(&self.sdk),
            &self.resources.mapping_uuid,
        )
        .await?;
        Ok(mapping.function)
    }

    /// Switch the operator's mode through its control endpoint: `hang`,
    /// `refuse`, `server_error`, `slow`, `garbage`, or `None` for healthy.
    /// Returns the mode now in force.
    pub async fn set_operator_mode(&self, mode: Option<&str>) -> Result<Value, GatewayError> {
        self.http
            .post(format!("{}/_control/mode", self.operator.base_url()))
            .json(&json!({ "mode": mode }))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(GatewayError::Control)?
            .json::<Value>()
            .await
            .map(|answer| answer.get("mode").cloned().unwrap_or(Value::Null))
            .map_err(GatewayError::Control)
    }

    /// The operator's call counts, from its control endpoint.
    pub async fn operator_stats(&self) -> Result<SimStats, GatewayError> {
        self.http
            .get(format!("{}/_control/stats", self.operator.base_url()))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(GatewayError::Control)?
            .json::<SimStats>()
            .await
            .map_err(GatewayError::Control)
    }

    /// The customer half's resources, or [`GatewayError::NoCustomer`].
    pub fn customer_resources(&self) -> Result<&CustomerResources, GatewayError> {
        self.resources
            .customer
            .as_ref()
            .ok_or(GatewayError::NoCustomer)
    }

    /// The SaleStatus table in moto, as the cart and the listener see it.
    pub fn sale_status_store(&self) -> Result<DynamoSaleStatusStore, GatewayError> {
        self.customer_resources()?;
        Ok(DynamoSaleStatusStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.sale_status_table,
        ))
    }

    /// The Carts table in moto, as the cart sees it.
    pub fn cart_store(&self) -> Result<DynamoCartStore, GatewayError> {
        self.customer_resources()?;
        Ok(DynamoCartStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.carts_table,
        ))
    }

    /// The URL `LifeboatHttpApi` would serve `path_and_query` from: the
    /// function it routes to, under `cargo lambda watch` (see the module
    /// docs).
    pub fn api_url(&self, path_and_query: &str) -> Result<String, GatewayError> {
        self.customer_resources()?;
        let function = api_function(path_and_query)
            .ok_or_else(|| GatewayError::NoRoute(path_and_query.to_owned()))?;
        Ok(self.watch.function_url(function, path_and_query))
    }

    /// Send one HTTP request to search or cart as `LifeboatHttpApi` would
    /// route it (`method` e.g. `GET`, `path_and_query` e.g.
    /// `/sailings?operator=nordic&…`, a JSON body for `POST` and `PUT`) and
    /// return the reply. Any status is a reply; a body that is not JSON is
    /// an error.
    pub async fn api(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<ApiReply, GatewayError> {
        let url = self.api_url(path_and_query)?;
        let api_err = |source| GatewayError::Api {
            method: method.to_owned(),
            url: url.clone(),
            source,
        };
        let verb = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| GatewayError::NoRoute(format!("{method} {path_and_query}")))?;
        let mut request = self.api_http.request(verb, &url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let sent = Instant::now();
        let response = request.send().await.map_err(api_err)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let text = response.text().await.map_err(api_err)?;
        let elapsed = sent.elapsed();
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|_| GatewayError::ApiNotJson {
                method: method.to_owned(),
                url: url.clone(),
                status,
                body: text.chars().take(500).collect(),
            })?
        };
        Ok(ApiReply {
            status,
            headers,
            body,
            elapsed,
        })
    }

    /// What the `OffsaleQueue` pump has done (default stats without the
    /// customer half).
    pub fn offsale_stats(&self) -> QueueStats {
        self.offsale
            .as_ref()
            .map(QueuePump::stats)
            .unwrap_or_default()
    }

    pub fn pump_stats(&self) -> PumpStats {
        self.pump.stats()
    }

    pub fn drain_stats(&self) -> DrainStats {
        self.drain.stats()
    }

    pub fn ticker_stats(&self) -> TickerStats {
        self.ticker.stats()
    }

    /// The errors alarm, evaluated here (see [`GatewayOptions::alarm`]).
    pub fn alarm(&self) -> Option<&LocalAlarm> {
        self.alarm.as_ref()
    }

    /// Whether the pump, the drain, the ticker and (with the customer half)
    /// the `OffsaleQueue` pump are all still running.
    pub fn harness_running(&self) -> bool {
        self.pump.is_running()
            && self.drain.is_running()
            && self.ticker.is_running()
            && self.alarm.as_ref().is_none_or(LocalAlarm::is_running)
            && self.offsale.as_ref().is_none_or(QueuePump::is_running)
            && self.timers.is_running()
    }

    /// Stop the harness's tasks (after their invocations in flight), the
    /// functions, the operator and moto.
    pub async fn stop(self) {
        let Self {
            pump,
            drain,
            ticker,
            alarm,
            offsale,
            timers,
            watch,
            operator,
            moto,
            faults,
            ..
        } = self;
        let offsale = async move {
            if let Some(offsale) = offsale {
                offsale.stop().await;
            }
        };
        let alarm = async move {
            if let Some(alarm) = alarm {
                alarm.stop().await;
            }
        };
        tokio::join!(
            pump.stop(),
            drain.stop(),
            ticker.stop(),
            alarm,
            offsale,
            timers.stop()
        );
        watch.stop().await;
        if let Some(faults) = faults {
            faults.shutdown().await;
        }
        operator.shutdown().await;
        moto.stop().await;
    }
}

/// moto_server with one change: DynamoDB tables forget the event source
/// mappings on their streams.
///
/// moto 5.2.1 registers a mapping created on a table's stream with the
/// table, and on every write to the table it invokes the mapped function in
/// Docker with every stream record not yet handed over. Without Docker that
/// invocation "returns" its error message, which moto takes for success: it
/// empties the stream after every write (the next record even reuses the
/// sequence number), so nothing else can read it, and every write pays for a
/// failed Docker call. The mapping itself (Get / Update / List through the
/// Lambda API) is untouched; delivering the stream is the [`StreamPump`]'s
/// job.
const MOTO_WITHOUT_STREAM_DELIVERY: &str = "import sys
from moto.dynamodb.models.table import Table
Table.lambda_event_source_mappings = property(lambda self: {}, lambda self, value: None)
from moto.server import main
sys.argv[0] = \"moto_server\"
main()";

/// The Python that runs `moto_server`: its script's `#!` line, else a
/// `python3` beside it, else `python3` from PATH.
fn moto_python(moto_server: &Path) -> PathBuf {
    let shebang = std::fs::read_to_string(moto_server).ok().and_then(|text| {
        let first = text.lines().next()?.strip_prefix("#!")?.trim().to_owned();
        (first.contains("python") && !first.contains(' ')).then(|| PathBuf::from(first))
    });
    shebang
        .or_else(|| {
            let beside = moto_server.parent()?.join("python3");
            beside.is_file().then_some(beside)
        })
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// A word the shell reads back as `text`.
pub fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Write (atomically) an executable that runs `moto_server` as found by
/// [`find_moto_server`] with the change described at
/// [`MOTO_WITHOUT_STREAM_DELIVERY`], for [`MotoServer::start_program`].
pub fn moto_launcher() -> Result<PathBuf, GatewayError> {
    use std::os::unix::fs::PermissionsExt;

    let python = moto_python(&find_moto_server()?);
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    let path = dir.join("moto-server-without-stream-delivery");
    let script = format!(
        "#!/bin/sh\n# moto_server for lifeboat-local: see MOTO_WITHOUT_STREAM_DELIVERY in crates/local/src/gateway.rs\nexec {} -c {} \"$@\"\n",
        shell_quoted(&python.display().to_string()),
        shell_quoted(MOTO_WITHOUT_STREAM_DELIVERY)
    );
    // Unique per call: two suites started at once in one process (two tests
    // of one binary) must not rename each other's temporary file away.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let temp = dir.join(format!(
        "moto-server-without-stream-delivery.{}.{}.tmp",
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&temp, script))
        .and_then(|()| std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755)))
        .and_then(|()| std::fs::rename(&temp, &path))
        .map_err(|source| GatewayError::Launcher {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

/// The environment of every function: AWS at moto, the resources, the
/// operator, and the settings.
/// `endpoints` are every operator's base URL, `options.operator` first.
pub fn function_env(
    moto: &MotoServer,
    resources: &GatewayResources,
    options: &GatewayOptions,
    endpoints: &[(OperatorId, String)],
) -> Vec<(String, String)> {
    let operator = options.operator.as_str();
    let join = |item: &dyn Fn(&(OperatorId, String)) -> String| {
        endpoints.iter().map(item).collect::<Vec<_>>().join(",")
    };
    let names = &resources.names;
    let mut env: Vec<(String, String)> = [
        ("AWS_ENDPOINT_URL", moto.endpoint()),
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_DEFAULT_REGION", REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("AWS_LAMBDA_LOG_LEVEL", options.log_level.clone()),
        ("REQUESTS_TABLE_PREFIX", names.requests_table_prefix.clone()),
        ("BREAKER_TABLE", names.breaker_table.clone()),
        ("CACHE_TABLE", names.cache_table.clone()),
        ("EVENT_BUS_NAME", names.bus.clone()),
        ("REAL_CONSUMER_FUNCTION", REAL_CONSUMER.to_owned()),
        ("FALLBACK_CONSUMER_FUNCTION", FALLBACK_CONSUMER.to_owned()),
        ("OPERATOR_ENDPOINTS", join(&|(o, url)| format!("{o}={url}"))),
        ("OPERATORS", join(&|(o, _)| o.to_string())),
        ("OPERATOR_SETTINGS", options.operator_settings.clone()),
        ("BREAKER_TIMER_QUEUE_URL", resources.timer_queue.url.clone()),
        (
            "ALARM_OPERATORS",
            options
                .alarm
                .as_ref()
                .map(|name| format!("{name}={operator}"))
                .unwrap_or_default(),
        ),
        ("CALL_CONCURRENCY", template::CALL_CONCURRENCY.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    if let (Some(customer), Some(created)) = (&options.customer, &resources.customer) {
        env.extend(
            [
                ("CARTS_TABLE", names.carts_table.clone()),
                ("SALE_STATUS_TABLE", names.sale_status_table.clone()),
                ("SALE_STATUS_STORE", "dynamodb".to_owned()),
                ("OFFSALE_QUEUE_URL", created.offsale_queue.url.clone()),
                ("SALE_SWITCH", "table".to_owned()),
                ("CART_SETTINGS", customer.cart_settings.clone()),
                ("BREAKER_CACHE_MS", customer.breaker_cache_ms.to_string()),
                (
                    "SALE_RETRY_MAX_ATTEMPTS",
                    customer.sale_retry_max_attempts.to_string(),
                ),
                (
                    "SALE_SWITCH_TIMEOUT_MS",
                    customer.sale_switch_timeout_ms.to_string(),
                ),
                (
                    "SALE_ON_SALE_HOLD_S",
                    customer.sale_on_sale_hold_s.to_string(),
                ),
                (
                    "SALE_OFF_SALE_HOLD_S",
                    customer.sale_off_sale_hold_s.to_string(),
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
        );
    }
    env
}

/// moto as `moto_server` runs it delivers a table's stream records to the
/// mapping's function itself and then empties the stream (see
/// [`MOTO_WITHOUT_STREAM_DELIVERY`]): nothing would reach the pump. A moto
/// the suite attaches to must be the launcher's (`lifeboat local moto`);
/// this writes a probe item and reads it back from the stream.
async fn check_stream_keeps_records(
    sdk: &SdkConfig,
    resources: &GatewayResources,
) -> Result<(), GatewayError> {
    let what = |detail: String| GatewayError::StreamProbe { detail };
    let streams = aws_sdk_dynamodbstreams::Client::new(sdk);
    let shards = streams
        .describe_stream()
        .stream_arn(&resources.stream_arn)
        .send()
        .await
        .map_err(|e| what(aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string()))?
        .stream_description
        .and_then(|d| d.shards)
        .unwrap_or_default();
    let mut iterators = Vec::new();
    for shard in shards.iter().filter_map(|s| s.shard_id()) {
        let iterator = streams
            .get_shard_iterator()
            .stream_arn(&resources.stream_arn)
            .shard_id(shard)
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::Latest)
            .send()
            .await
            .map_err(|e| what(aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string()))?
            .shard_iterator;
        iterators.extend(iterator);
    }
    let probe = format!("lifeboat-local-probe-{}", uuid::Uuid::new_v4());
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let key = aws_sdk_dynamodb::types::AttributeValue::S(probe.clone());
    dynamodb
        .put_item()
        .table_name(&resources.requests_table)
        .item("request_id", key.clone())
        .item(
            "record_type",
            aws_sdk_dynamodb::types::AttributeValue::S("probe".into()),
        )
        .send()
        .await
        .map_err(|e| what(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))?;
    let mut found = false;
    for iterator in iterators {
        let records = streams
            .get_records()
            .shard_iterator(iterator)
            .send()
            .await
            .map_err(|e| what(aws_sdk_dynamodbstreams::error::DisplayErrorContext(e).to_string()))?
            .records
            .unwrap_or_default();
        found |= records.iter().any(|r| {
            r.dynamodb()
                .and_then(|d| d.keys())
                .and_then(|k| k.get("request_id"))
                .and_then(|v| v.as_s().ok())
                == Some(&probe)
        });
    }
    let _ = dynamodb
        .delete_item()
        .table_name(&resources.requests_table)
        .key("request_id", key)
        .send()
        .await;
    if found {
        Ok(())
    } else {
        Err(what(
            "a probe item written to the Requests table is not in its stream: this moto_server \
             delivers stream records itself and drops them; start it with `lifeboat local moto`"
                .to_owned(),
        ))
    }
}

/// Empty the queues the harness drains: what an earlier run left there (a
/// Trip Requested, a sale change) belongs to that run.
async fn purge_queues(sdk: &SdkConfig, resources: &GatewayResources) -> Result<(), GatewayError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut queues = vec![
        resources.switch_queue.queue_url.clone(),
        resources.timer_queue.url.clone(),
    ];
    if let Some(customer) = &resources.customer {
        queues.push(customer.offsale_queue.url.clone());
    }
    for url in queues {
        sqs.purge_queue()
            .queue_url(&url)
            .send()
            .await
            .map_err(|e| GatewayError::Purge {
                queue: url.clone(),
                detail: aws_sdk_sqs::error::DisplayErrorContext(e).to_string(),
            })?;
    }
    Ok(())
}

/// The functions' environment as a file for cargo-lambda's `--env-file`:
/// `KEY='value'` lines. cargo-lambda's reader keeps what is between single
/// quotes as it is (JSON settings, `$`) except `\n` and `\'`, so a value
/// with a backslash, a quote or a line break is refused rather than
/// changed on the way.
pub fn env_file_text(env: &[(String, String)]) -> Result<String, GatewayError> {
    let mut text = String::from(
        "# The environment of lifeboat's functions under `lifeboat local`, for\n\
         # cargo lambda watch --env-file. Written by lifeboat local; do not edit.\n",
    );
    for (key, value) in env {
        if value.contains(['\'', '\n', '\\']) {
            return Err(GatewayError::EnvFile {
                key: key.clone(),
                why: "a quote, a backslash or a line break would not reach the functions as it is"
                    .to_owned(),
            });
        }
        text.push_str(&format!("{key}='{value}'\n"));
    }
    Ok(text)
}

/// Write the functions' environment for the running watch and attach to it.
/// A watch already running with another environment (or none) would run the
/// functions against the wrong resources: that is refused.
async fn attach_watch(
    running: &AttachWatch,
    env: &[(String, String)],
    invoke_timeout: Duration,
) -> Result<Watch, GatewayError> {
    let text = env_file_text(env)?;
    let port = crate::net::loopback_port(&running.endpoint).map_err(WatchError::from)?;
    let listening = tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
        .await
        .is_ok();
    let before = std::fs::read_to_string(&running.env_file).unwrap_or_default();
    let same = env_lines(&before) == env_lines(&text);
    if listening && !same {
        return Err(GatewayError::EnvChanged {
            file: running.env_file.clone(),
            endpoint: running.endpoint.clone(),
            keys: changed_keys(&before, &text),
        });
    }
    if !same {
        let temp = running
            .env_file
            .with_extension(format!("{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            if let Some(dir) = running.env_file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&temp, &text)?;
            std::fs::rename(&temp, &running.env_file)
        };
        write().map_err(|source| GatewayError::EnvFileWrite {
            file: running.env_file.clone(),
            source,
        })?;
    }
    Ok(Watch::attach(
        &running.endpoint,
        running.log.clone(),
        running.wait,
        invoke_timeout,
    )
    .await?)
}

/// The KEY=value lines of an env file.
fn env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .collect()
}

/// The keys whose lines differ between two env files.
fn changed_keys(before: &str, after: &str) -> String {
    let (before, after) = (env_lines(before), env_lines(after));
    if before.is_empty() {
        return "no environment file was there".to_owned();
    }
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Invoke each function once with a harmless payload, so `cargo lambda
/// watch` starts it (`cargo run`, a build if it is not built) now.
async fn warm_up(watch: &Watch) -> Result<(), GatewayError> {
    let empty_batch = json!({ "Records": [] });
    let tick = crate::pump::schedule_event(
        &TickerConfig::new(CIRCUIT_SWITCH, Duration::from_secs(60), "warm-up"),
        "00000000-0000-4000-8000-000000000000",
        chrono::Utc::now(),
    );
    for (function, payload) in [
        (REAL_CONSUMER, &empty_batch),
        (FALLBACK_CONSUMER, &empty_batch),
        (CIRCUIT_SWITCH, &tick),
    ] {
        watch
            .invoke(function, payload)
            .await
            .map_err(|source| GatewayError::WarmUp {
                function,
                log: watch.log_hint(),
                source,
            })?;
    }
    Ok(())
}

/// Start the customer functions under `cargo lambda watch`: search and cart
/// with an HTTP request to a path they do not serve (their own 404 problem
/// proves the function answered), the off-sale listener with an empty batch.
async fn warm_up_customer(watch: &Watch) -> Result<(), GatewayError> {
    let log = || watch.log_hint();
    // As long as the first invocation of the gateway functions may take.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(GatewayError::Control)?;
    for function in [SEARCH, CART] {
        let fail = |detail: String| GatewayError::WarmUpHttp {
            function,
            log: log(),
            detail,
        };
        let response = http
            .get(watch.function_url(function, "/"))
            .send()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status().as_u16();
        let body: Value = response
            .json()
            .await
            .map_err(|e| fail(format!("HTTP {status}, not JSON: {e}")))?;
        // The handler's own problem reply, not cargo-lambda's "Missing
        // function" or a function error.
        if status != 404 || body.get("title") != Some(&json!("not found")) {
            return Err(fail(format!("HTTP {status}: {body}")));
        }
    }
    watch
        .invoke(OFFSALE_LISTENER, &json!({ "Records": [] }))
        .await
        .map_err(|source| GatewayError::WarmUp {
            function: OFFSALE_LISTENER,
            log: log(),
            source,
        })?;
    Ok(())
}

/// The customer half's resources in moto, as the template has them: the
/// Carts and SaleStatus tables, `OffsaleDeadLetterQueue`, `OffsaleQueue`
/// with its visibility timeout and redrive policy, and
/// `BreakerStateChangedRule` on the bus (which must exist) targeting it.
pub async fn create_customer_resources(
    sdk: &SdkConfig,
    names: &GatewayNames,
) -> Result<CustomerResources, ResourceError> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let eventbridge = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    resources::create_carts_table(&dynamodb, &names.carts_table).await?;
    resources::create_sale_status_table(&dynamodb, &names.sale_status_table).await?;
    let offsale_dead_letter_queue =
        resources::create_queue(&sqs, &names.offsale_dead_letter_queue, None).await?;
    let offsale_queue = resources::create_queue_with(
        &sqs,
        &names.offsale_queue,
        &[
            (
                QueueAttributeName::VisibilityTimeout,
                template::OFFSALE_VISIBILITY_TIMEOUT.to_string(),
            ),
            (
                QueueAttributeName::RedrivePolicy,
                resources::redrive_policy(
                    &offsale_dead_letter_queue.arn,
                    template::OFFSALE_MAX_RECEIVE_COUNT,
                ),
            ),
        ],
    )
    .await?;
    let offsale_rule_arn = resources::create_rule_to_queue(
        &eventbridge,
        &names.bus,
        &names.offsale_rule,
        template::OFFSALE_RULE_PATTERN,
        template::OFFSALE_TARGET_ID,
        &offsale_queue.arn,
    )
    .await?;
    Ok(CustomerResources {
        offsale_queue,
        offsale_dead_letter_queue,
        offsale_rule_arn,
    })
}

/// Everything in moto; see the module docs.
pub async fn create_resources(
    sdk: &SdkConfig,
    names: &GatewayNames,
    operator: &OperatorId,
) -> Result<GatewayResources, ResourceError> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let eventbridge = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let iam = aws_sdk_iam::Client::new(sdk);
    let lambda = aws_sdk_lambda::Client::new(sdk);

    resources::create_breaker_table(&dynamodb, &names.breaker_table).await?;
    resources::create_cache_table(&dynamodb, &names.cache_table).await?;
    let bus_arn = resources::create_event_bus(&eventbridge, &names.bus).await?;
    let switch_queue = resources::create_queue_target(
        &eventbridge,
        &sqs,
        &names.bus,
        &names.switch_rule,
        &names.switch_queue,
        template::SWITCH_RULE_PATTERN,
    )
    .await?;
    let failed_queue = resources::create_queue(&sqs, &names.failed_queue, None).await?;
    let timer_queue = resources::create_queue(
        &sqs,
        &names.timer_queue,
        Some(template::TIMER_QUEUE_VISIBILITY_S),
    )
    .await?;
    let role = resources::create_lambda_role(&iam, &names.role).await?;
    let real_function_arn = resources::create_stub_function(&lambda, REAL_CONSUMER, &role).await?;
    let fallback_function_arn =
        resources::create_stub_function(&lambda, FALLBACK_CONSUMER, &role).await?;
    let switch_function_arn =
        resources::create_stub_function(&lambda, CIRCUIT_SWITCH, &role).await?;
    let lane = create_lane(sdk, names, operator, &failed_queue.arn).await?;
    Ok(GatewayResources {
        names: names.clone(),
        requests_table: lane.requests_table,
        stream_arn: lane.stream_arn,
        bus_arn,
        switch_queue,
        failed_queue_url: failed_queue.url,
        failed_queue_arn: failed_queue.arn,
        timer_queue,
        real_function_arn,
        fallback_function_arn,
        switch_function_arn,
        mapping_uuid: lane.mapping_uuid,
        customer: None,
    })
}

/// An operator's lane, as the template makes each: its Requests table and
/// the mapping of its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneResources {
    pub requests_table: String,
    pub stream_arn: String,
    pub mapping_uuid: String,
}

/// `operator`'s lane: the table `{requests_table_prefix}{operator}` and its
/// stream's mapping into the real consumer (the consumers must exist).
pub async fn create_lane(
    sdk: &SdkConfig,
    names: &GatewayNames,
    operator: &OperatorId,
    failed_queue_arn: &str,
) -> Result<LaneResources, ResourceError> {
    let requests_table = format!("{}{operator}", names.requests_table_prefix);
    let created =
        resources::create_requests_table(&aws_sdk_dynamodb::Client::new(sdk), &requests_table)
            .await?;
    let mapping_uuid = create_requests_mapping(
        &aws_sdk_lambda::Client::new(sdk),
        &created.stream_arn,
        failed_queue_arn,
    )
    .await?;
    Ok(LaneResources {
        requests_table,
        stream_arn: created.stream_arn,
        mapping_uuid,
    })
}

fn resource_error(what: impl Into<String>, e: impl std::fmt::Display) -> ResourceError {
    ResourceError {
        what: what.into(),
        message: e.to_string(),
    }
}

/// The Requests stream's mapping with every setting of the template's
/// `RequestsStreamMapping` (or the one already on the stream, as a moto the
/// suite attached to keeps it). Returns its UUID.
pub async fn create_requests_mapping(
    lambda: &aws_sdk_lambda::Client,
    stream_arn: &str,
    failed_queue_arn: &str,
) -> Result<String, ResourceError> {
    if let Some(uuid) =
        resources::existing_mapping(lambda, stream_arn, &[REAL_CONSUMER, FALLBACK_CONSUMER]).await?
    {
        return Ok(uuid);
    }
    let what = "CreateEventSourceMapping RequestsStreamMapping";
    let filter = aws_sdk_lambda::types::FilterCriteria::builder()
        .filters(Filter::builder().pattern(template::FILTER_PATTERN).build())
        .build();
    let destination = DestinationConfig::builder()
        .on_failure(OnFailure::builder().destination(failed_queue_arn).build())
        .build();
    lambda
        .create_event_source_mapping()
        .event_source_arn(stream_arn)
        .function_name(REAL_CONSUMER)
        .starting_position(EventSourcePosition::Latest)
        .batch_size(template::BATCH_SIZE)
        .maximum_batching_window_in_seconds(template::MAXIMUM_BATCHING_WINDOW_IN_SECONDS)
        .parallelization_factor(template::PARALLELIZATION_FACTOR)
        .filter_criteria(filter)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .bisect_batch_on_function_error(template::BISECT_BATCH_ON_FUNCTION_ERROR)
        .maximum_retry_attempts(template::MAXIMUM_RETRY_ATTEMPTS)
        .maximum_record_age_in_seconds(template::MAXIMUM_RECORD_AGE_IN_SECONDS)
        .destination_config(destination)
        .send()
        .await
        .map_err(|e| resource_error(what, aws_sdk_lambda::error::DisplayErrorContext(e)))?
        .uuid
        .ok_or_else(|| resource_error(what, "no UUID"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    const TEMPLATE: &str = include_str!("../../../template.yaml");

    /// The text of one resource of the template.
    fn resource(name: &str) -> &'static str {
        let start = TEMPLATE
            .find(&format!("\n  {name}:\n"))
            .unwrap_or_else(|| panic!("{name} is not in template.yaml"));
        let rest = &TEMPLATE[start + 1..];
        let end = rest[name.len() + 4..]
            .find("\n  # ")
            .map_or(rest.len(), |i| i + name.len() + 4);
        &rest[..end]
    }

    /// A moto that outlives a run: the second creation finds every resource
    /// in place, the same mapping and stream, and puts back a lost TTL.
    #[tokio::test]
    async fn resources_already_in_moto_are_used_again() {
        let moto = MotoServer::start_program(&moto_launcher().unwrap())
            .await
            .unwrap();
        let sdk = moto.sdk_config().await;
        let names = GatewayNames::prefixed("again-");
        let first = create_resources(&sdk, &names, &nordic()).await.unwrap();
        let customer = create_customer_resources(&sdk, &names).await.unwrap();
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let spec = aws_sdk_dynamodb::types::TimeToLiveSpecification::builder()
            .attribute_name(resources::TTL_ATTRIBUTE)
            .enabled(false)
            .build()
            .unwrap();
        dynamodb
            .update_time_to_live()
            .table_name(&names.cache_table)
            .time_to_live_specification(spec)
            .send()
            .await
            .unwrap();
        let ttl_status = || async {
            dynamodb
                .describe_time_to_live()
                .table_name(&names.cache_table)
                .send()
                .await
                .unwrap()
                .time_to_live_description
                .and_then(|d| d.time_to_live_status)
        };
        assert_eq!(
            ttl_status().await,
            Some(aws_sdk_dynamodb::types::TimeToLiveStatus::Disabled)
        );

        let second = create_resources(&sdk, &names, &nordic()).await.unwrap();
        assert_eq!(second, first);
        assert_eq!(
            create_customer_resources(&sdk, &names).await.unwrap(),
            customer
        );
        assert_eq!(
            ttl_status().await,
            Some(aws_sdk_dynamodb::types::TimeToLiveStatus::Enabled)
        );
        moto.stop().await;
    }

    /// With moto's own delivery attempt, every write emptied the stream.
    #[tokio::test]
    async fn the_stream_keeps_its_records_with_a_mapping_on_it() {
        let moto = MotoServer::start_program(&moto_launcher().unwrap())
            .await
            .unwrap();
        let sdk = moto.sdk_config().await;
        let resources = create_resources(&sdk, &GatewayNames::prefixed("keep-"), &nordic())
            .await
            .unwrap();
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        for id in ["a", "b", "c"] {
            dynamodb
                .put_item()
                .table_name(&resources.requests_table)
                .item(
                    "request_id",
                    aws_sdk_dynamodb::types::AttributeValue::S(id.into()),
                )
                .send()
                .await
                .unwrap();
        }
        let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
        let shards = streams
            .describe_stream()
            .stream_arn(&resources.stream_arn)
            .send()
            .await
            .unwrap()
            .stream_description
            .unwrap()
            .shards
            .unwrap();
        let iterator = streams
            .get_shard_iterator()
            .stream_arn(&resources.stream_arn)
            .shard_id(shards[0].shard_id().unwrap())
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator
            .unwrap();
        let records = streams
            .get_records()
            .shard_iterator(iterator)
            .send()
            .await
            .unwrap()
            .records
            .unwrap();
        let sequences: std::collections::BTreeSet<&str> = records
            .iter()
            .filter_map(|r| r.dynamodb()?.sequence_number())
            .collect();
        assert_eq!((records.len(), sequences.len()), (3, 3));
        let mapping = read_mapping(&aws_sdk_lambda::Client::new(&sdk), &resources.mapping_uuid)
            .await
            .unwrap();
        assert_eq!(mapping.stream_arn, resources.stream_arn);
        assert_eq!(mapping.function, REAL_CONSUMER);
        assert_eq!(mapping.batch_size, 50);
        assert_eq!(mapping.max_retry_attempts, Some(3));
        assert!(mapping.report_item_failures && mapping.bisect_on_error);
        moto.stop().await;
    }

    /// The stream mapping the template stamps out for each operator's lane
    /// (`RequestsMapping&{Operator}` in `Fn::ForEach::RequestsLanes`).
    fn lane_mapping() -> &'static str {
        let start = TEMPLATE
            .find("\n      RequestsMapping&{Operator}:\n")
            .unwrap_or_else(|| panic!("no lane mapping in template.yaml"))
            + 1;
        let rest = &TEMPLATE[start..];
        &rest[..rest.find("\n\n").unwrap_or(rest.len())]
    }

    #[test]
    fn the_mapping_has_the_templates_settings() {
        let mapping = lane_mapping();
        for line in [
            format!("BatchSize: {}", template::BATCH_SIZE),
            format!(
                "MaximumBatchingWindowInSeconds: {}",
                template::MAXIMUM_BATCHING_WINDOW_IN_SECONDS
            ),
            format!(
                "ParallelizationFactor: {}",
                template::PARALLELIZATION_FACTOR
            ),
            format!("MaximumRetryAttempts: {}", template::MAXIMUM_RETRY_ATTEMPTS),
            format!(
                "MaximumRecordAgeInSeconds: {}",
                template::MAXIMUM_RECORD_AGE_IN_SECONDS
            ),
            format!(
                "BisectBatchOnFunctionError: {}",
                template::BISECT_BATCH_ON_FUNCTION_ERROR
            ),
            "StartingPosition: LATEST".to_owned(),
            "FunctionResponseTypes: [ReportBatchItemFailures]".to_owned(),
            format!("- Pattern: '{}'", template::FILTER_PATTERN),
        ] {
            assert!(mapping.contains(&line), "template mapping lacks {line:?}");
        }
    }

    #[test]
    fn the_customer_tables_have_the_templates_keys() {
        // As resources::create_cache_table, create_carts_table and
        // create_sale_status_table make them.
        for (table, key, ttl) in [
            ("CacheTable", "cache_key", true),
            ("CartsTable", "cart_id", true),
            ("SaleStatusTable", "operator", false),
        ] {
            let text = resource(table);
            assert!(
                text.contains(&format!(
                    "- AttributeName: {key}\n          AttributeType: S"
                )),
                "{table} has no string attribute {key}"
            );
            assert!(
                text.contains(&format!("- AttributeName: {key}\n          KeyType: HASH")),
                "{table} is not keyed by {key}"
            );
            assert!(!text.contains("KeyType: RANGE"), "{table} has a sort key");
            let ttl_line = format!("AttributeName: {}", resources::TTL_ATTRIBUTE);
            assert_eq!(
                text.contains("TimeToLiveSpecification") && text.contains(&ttl_line),
                ttl,
                "{table}'s TTL"
            );
        }
    }

    #[test]
    fn every_table_is_encrypted_and_no_delivery_is_lost_silently() {
        assert_eq!(
            TEMPLATE.matches("Type: AWS::DynamoDB::Table").count(),
            TEMPLATE.matches("SSEEnabled: true").count(),
            "a table without SSESpecification"
        );
        let policy = entry("DeliveryDeadLetterQueuePolicy");
        for rule in [
            "BreakerStateChangedRule",
            "AlarmStateChangeRule",
            "TripRequestedRule",
            "HalfOpenScheduleRule",
            "SaleSweepRule",
        ] {
            assert!(
                entry(rule).contains("Arn: !GetAtt DeliveryDeadLetterQueue.Arn"),
                "{rule} has no dead-letter target"
            );
            assert!(policy.contains(&format!("!GetAtt {rule}.Arn")), "{rule}");
        }
        let switch = entry("CircuitSwitchFunction");
        assert!(switch.contains("Destination: !GetAtt DeliveryDeadLetterQueue.Arn"));
        assert!(entry("DeliveryDeadLetterAlarm").contains("DeliveryDeadLetterQueue.QueueName"));
        assert!(entry("LifeboatHttpApi").contains("DestinationArn: !GetAtt ApiAccessLogGroup.Arn"));
    }

    #[test]
    fn failed_dependency_calls_alarm_and_show_on_the_dashboard() {
        let metric = lifeboat_core::watched::METRIC;
        let alarm = entry("DependencyErrorsAlarm");
        assert!(alarm.contains(&format!("MetricName: {metric}")), "{alarm}");
        assert!(alarm.contains("Namespace: Lifeboat"), "{alarm}");
        assert!(
            entry("LifeboatDashboard").contains(&format!(
                "{{Lifeboat,Dependency}} MetricName=\\\"{metric}\\\""
            )),
            "the dashboard has no DependencyErrors series"
        );
    }

    #[test]
    fn the_public_api_is_authenticated_throttled_and_capped() {
        let api = entry("LifeboatHttpApi");
        assert!(api.contains("ThrottlingRateLimit: !Ref ApiRateLimit"));
        assert!(api.contains("- AWS_IAM"));
        assert!(entry("ApiAuth").contains("Default: iam"));
        for (function, reserved) in [
            ("RealConsumerFunction", "!Ref RealConsumerConcurrency"),
            ("FallbackConsumerFunction", "10"),
            ("CircuitSwitchFunction", "20"),
            ("OffsaleListenerFunction", "5"),
            ("SearchFunction", "!Ref SearchConcurrencyCap"),
            ("CartFunction", "!Ref CartConcurrencyCap"),
        ] {
            assert!(
                entry(function).contains(&format!(
                    "ReservedConcurrentExecutions: !If [ReservesConcurrency, {reserved}, !Ref AWS::NoValue]"
                )),
                "{function}"
            );
        }
    }

    #[test]
    fn only_lifeboats_functions_put_events_and_the_listener_checks_changes() {
        let policy = entry("EventBusPolicy");
        assert!(policy.contains("Effect: Deny") && policy.contains("ArnNotEquals"));
        for function in [
            "RealConsumerFunction",
            "FallbackConsumerFunction",
            "CircuitSwitchFunction",
            "OffsaleListenerFunction",
        ] {
            // Every function allowed to put events is one the policy lets through.
            assert!(entry(function).contains("events:PutEvents"), "{function}");
            assert!(
                policy.contains(&format!("!GetAtt {function}Role.Arn")),
                "{function}"
            );
        }
        for function in ["SearchFunction", "CartFunction"] {
            assert!(!entry(function).contains("events:PutEvents"), "{function}");
        }
        let listener = entry("OffsaleListenerFunction");
        assert!(listener.contains("OPERATORS: !Join"));
        assert!(listener.contains("Resource: !GetAtt BreakerTable.Arn"));
    }

    /// The text of one top-level entry (a parameter or a resource): up to
    /// the next line indented by two spaces only.
    fn entry(name: &str) -> &'static str {
        let start = TEMPLATE
            .find(&format!("\n  {name}:\n"))
            .unwrap_or_else(|| panic!("{name} is not in template.yaml"))
            + 1;
        let rest = &TEMPLATE[start..];
        let end = rest
            .match_indices("\n  ")
            .map(|(i, _)| i)
            .find(|&i| {
                rest[i + 3..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_whitespace())
            })
            .unwrap_or(rest.len());
        &rest[..end]
    }

    #[test]
    fn the_timer_queue_has_the_templates_settings() {
        let queue = entry("BreakerTimerQueue");
        assert!(queue.contains(&format!(
            "VisibilityTimeout: {}",
            template::TIMER_QUEUE_VISIBILITY_S
        )));
        let mapping = entry("BreakerTimerQueueMapping");
        assert!(mapping.contains("EventSourceArn: !GetAtt BreakerTimerQueue.Arn"));
        assert!(mapping.contains("FunctionName: !Ref CircuitSwitchFunction"));
        assert!(mapping.contains(&format!("BatchSize: {}", template::TIMER_BATCH_SIZE)));
        assert!(mapping.contains("FunctionResponseTypes: [ReportBatchItemFailures]"));
        let switch = entry("CircuitSwitchFunction");
        assert!(switch.contains("BREAKER_TIMER_QUEUE_URL: !Ref BreakerTimerQueue"));
        assert!(switch.contains("OPERATOR_ENDPOINTS: !Ref OperatorEndpoints"));
    }

    #[test]
    fn the_offsale_wiring_has_the_templates_settings() {
        let rule = entry("BreakerStateChangedRule");
        assert!(rule.contains("source: [lifeboat]"));
        assert!(rule.contains("detail-type: [Breaker State Changed]"));
        assert!(rule.contains(&format!("- Id: {}", template::OFFSALE_TARGET_ID)));
        assert!(rule.contains("Arn: !GetAtt OffsaleQueue.Arn"));
        let pattern: Value = serde_json::from_str(template::OFFSALE_RULE_PATTERN).unwrap();
        assert_eq!(
            pattern,
            json!({"source": ["lifeboat"], "detail-type": ["Breaker State Changed"]})
        );
        let queue = entry("OffsaleQueue");
        assert!(queue.contains(&format!(
            "VisibilityTimeout: {}",
            template::OFFSALE_VISIBILITY_TIMEOUT
        )));
        assert!(queue.contains(&format!(
            "maxReceiveCount: {}",
            template::OFFSALE_MAX_RECEIVE_COUNT
        )));
        assert!(queue.contains("deadLetterTargetArn: !GetAtt OffsaleDeadLetterQueue.Arn"));
        let mapping = entry("OffsaleQueueMapping");
        assert!(mapping.contains("EventSourceArn: !GetAtt OffsaleQueue.Arn"));
        assert!(mapping.contains(&format!("BatchSize: {}", template::OFFSALE_BATCH_SIZE)));
        assert!(mapping.contains("MaximumBatchingWindowInSeconds: 0"));
        assert!(mapping.contains("FunctionResponseTypes: [ReportBatchItemFailures]"));
        let listener = entry("OffsaleListenerFunction");
        assert!(listener.contains(&format!("Binary: {OFFSALE_LISTENER}")));
        for variable in [
            "SALE_STATUS_STORE: dynamodb",
            "SALE_STATUS_TABLE: !Ref SaleStatusTable",
            "OFFSALE_QUEUE_URL: !Ref OffsaleQueue",
        ] {
            assert!(listener.contains(variable), "{variable}");
        }
        assert!(
            entry("SaleRetryMaxAttempts")
                .contains(&format!("Default: {}", template::SALE_RETRY_MAX_ATTEMPTS))
        );
        assert!(
            entry("SaleSwitchTimeoutMs")
                .contains(&format!("Default: {}", template::SALE_SWITCH_TIMEOUT_MS))
        );
        assert!(
            entry("SaleOnSaleHoldSeconds")
                .contains(&format!("Default: {}", template::SALE_ON_SALE_HOLD_S))
        );
        assert!(listener.contains("SALE_ON_SALE_HOLD_S: !Ref SaleOnSaleHoldSeconds"));
        assert!(
            entry("SaleOffSaleHoldSeconds")
                .contains(&format!("Default: {}", template::SALE_OFF_SALE_HOLD_S))
        );
        assert!(listener.contains("SALE_OFF_SALE_HOLD_S: !Ref SaleOffSaleHoldSeconds"));
        assert!(
            entry("BreakerCacheMs").contains(&format!("Default: {}", template::BREAKER_CACHE_MS))
        );
        for function in ["SearchFunction", "CartFunction"] {
            assert!(
                entry(function).contains("BREAKER_CACHE_MS: !Ref BreakerCacheMs"),
                "{function}"
            );
        }
    }

    #[test]
    fn api_routes_are_the_templates() {
        let mut routes = 0;
        for (resource, binary) in [("SearchFunction", SEARCH), ("CartFunction", CART)] {
            let text = entry(resource);
            assert!(text.contains(&format!("Binary: {binary}")));
            for line in text.lines().map(str::trim) {
                if let Some(path) = line.strip_prefix("Path: ") {
                    let concrete =
                        path.replace("{cart_id}", "0b6f4c1e-3c1f-4a55-9d43-6f0d3a1e2b7c");
                    assert_eq!(api_function(&concrete), Some(binary), "{path}");
                    assert_eq!(
                        api_function(&format!("{concrete}?passengers=2")),
                        Some(binary),
                        "{path} with a query"
                    );
                    routes += 1;
                }
            }
        }
        assert_eq!(routes, 8, "two search routes and six cart routes");
        for unrouted in ["/", "/sailing", "/prices", "/carts/a/b/c", "/other/carts"] {
            assert_eq!(api_function(unrouted), None, "{unrouted}");
        }
    }

    #[test]
    fn the_switch_rule_has_the_templates_pattern() {
        let rule = resource("TripRequestedRule");
        assert!(rule.contains("source: [lifeboat]"));
        assert!(rule.contains("detail-type: [Trip Requested, Trials Passed]"));
        let pattern: Value = serde_json::from_str(template::SWITCH_RULE_PATTERN).unwrap();
        assert_eq!(
            pattern,
            json!({"source": ["lifeboat"], "detail-type": ["Trip Requested", "Trials Passed"]})
        );
        assert!(resource("RealConsumerFunction").contains("CallConcurrency"));
        assert!(TEMPLATE.contains(&format!("Default: {}", template::CALL_CONCURRENCY)));
        assert!(TEMPLATE.contains(&format!("Default: {}", template::ALARM_OPERATORS)));
    }

    #[test]
    fn the_env_file_is_what_cargo_lambda_reads_back() {
        let env = vec![
            ("BREAKER_TABLE".to_owned(), "Breaker".to_owned()),
            (
                "OPERATOR_SETTINGS".to_owned(),
                r#"{"default":{"cache":{"recent":20000}}}"#.to_owned(),
            ),
        ];
        let text = env_file_text(&env).unwrap();
        assert!(text.starts_with("# "), "{text}");
        assert!(text.contains("BREAKER_TABLE='Breaker'\n"));
        assert!(text.contains(r#"OPERATOR_SETTINGS='{"default":{"cache":{"recent":20000}}}'"#));
        let quoted = vec![("CART_SETTINGS".to_owned(), "it's".to_owned())];
        let e = env_file_text(&quoted).unwrap_err();
        assert!(e.to_string().contains("CART_SETTINGS"), "{e}");

        let mut other = env.clone();
        other[1].1 = "{}".to_owned();
        other.push(("NEW".to_owned(), "1".to_owned()));
        let changed = changed_keys(&text, &env_file_text(&other).unwrap());
        assert_eq!(changed, "NEW, OPERATOR_SETTINGS");
    }

    #[test]
    fn the_local_alarm_has_the_templates_rule() {
        let alarm = resource("RealConsumerErrorsAlarm");
        for line in [
            "Namespace: Lifeboat".to_owned(),
            "MetricName: FailedOperatorCalls".to_owned(),
            "- Name: Operator".to_owned(),
            "Statistic: Sum".to_owned(),
            format!("Period: {}", template::ALARM_PERIOD_S),
            format!("EvaluationPeriods: {}", template::ALARM_EVALUATION_PERIODS),
            format!("DatapointsToAlarm: {}", template::ALARM_DATAPOINTS),
            "ComparisonOperator: GreaterThanOrEqualToThreshold".to_owned(),
            "TreatMissingData: notBreaching".to_owned(),
        ] {
            assert!(alarm.contains(&line), "RealConsumerErrorsAlarm has {line}");
        }
        assert!(TEMPLATE.contains(&format!(
            "FailedOperatorCalls:\n      Threshold: \"{}\"",
            template::ALARM_THRESHOLD
        )));
        assert!(TEMPLATE.contains(&format!("Default: {}", template::ERRORS_ALARM_NAME)));
        assert!(
            template::ALARM_OPERATORS.starts_with(&format!("{}=", template::ERRORS_ALARM_NAME))
        );
    }
}
