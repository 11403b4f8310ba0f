//! What the local suite is started with and what it creates: options,
//! resource names, the resources, errors.

use std::path::PathBuf;
use std::time::Duration;

use lifeboat_core::OperatorId;
use lifeboat_operator::{LatencyModel, SimConfig, SimServer};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::moto::MotoError;
use crate::moto::resources::ResourceError;
use crate::pump::{PumpError, StreamPump};
use crate::stack::StackError;
use crate::template;
use crate::watch::WatchError;

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error(transparent)]
    Moto(#[from] MotoError),
    #[error("cannot write the moto_server launcher {path}: {source}")]
    Launcher {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("creating resources in moto: {0}")]
    Resource(#[from] ResourceError),
    #[error("the template's stack in moto: {0}")]
    Stack(#[from] StackError),
    #[error(
        "the attached moto already has the stack {stack}, created with other parameters ({differing}): \
         keep the operator, --operator-port, --settings and the other options the same between runs, \
         or restart moto"
    )]
    StackParameters { stack: String, differing: String },
    #[error(
        "the attached moto already has the stack {stack}, deployed from another template than {}: \
         restart moto to deploy this one",
        template.display()
    )]
    StackTemplate { stack: String, template: PathBuf },
    #[error(
        "the stack's functions disagree on {key} ({functions}): one cargo lambda watch runs them all \
         with one environment"
    )]
    Environment { key: String, functions: String },
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
    #[error("writing the operator config table's item: {0}")]
    OperatorConfig(String),
    #[error("operator control endpoint: {0}")]
    Control(#[source] reqwest::Error),
    #[error("warming up {function} over HTTP (its log is {log}): {detail}")]
    WarmUpHttp {
        function: &'static str,
        log: String,
        detail: String,
    },
    #[error("warming up {function} (its log is {log}): {detail}")]
    WarmUpAnswer {
        function: &'static str,
        log: String,
        detail: String,
    },
    #[error("reading {what} from moto: {detail}")]
    Read { what: String, detail: String },
    #[error("the gateway was started without the customer functions (SuiteOptions::customer)")]
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
    #[error("putting {operator}'s credential into moto's SSM under {path}: {detail}")]
    Credential {
        operator: String,
        path: String,
        detail: String,
    },
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

/// The names the stack gave the resources the harness and the tests read
/// directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteNames {
    /// The operator's Requests table is `{requests_table_prefix}{operator}`
    /// (the stack's `RequestsTablePrefix`).
    pub requests_table_prefix: String,
    pub breaker_table: String,
    pub cache_table: String,
    pub bus: String,
    pub carts_table: String,
    /// `OrdersTable`: the cart's held orders.
    pub orders_table: String,
    pub sale_status_table: String,
    /// `OperatorConfigTable`: the operators' endpoints and settings, when
    /// [`SuiteOptions::operator_config_in_table`] puts them there.
    pub operator_config_table: String,
}

/// How to run the gateway.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
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
    /// The stack the template is deployed as (default `lifeboat`).
    pub stack_name: String,
    /// The template (default the workspace's `template.yaml`).
    pub template: PathBuf,
    /// Every stream record the pump reads, in Lambda's shape.
    pub stream_tap: Option<mpsc::UnboundedSender<Value>>,
    /// Also run search, cart, the off-sale listener and the booking worker
    /// (default: not; the gateway alone does not build or start them).
    pub customer: Option<CustomerOptions>,
    /// The errors alarm's name (default `lifeboat-<operator>-errors`, the
    /// template's default for nordic): evaluated by a [`crate::alarm::LocalAlarm`] on the
    /// functions' metrics and mapped to the operator in `ALARM_OPERATORS`.
    /// `None`: no alarm evaluated, the breaker opens by the failure window
    /// alone (the stack's alarm keeps the default name, on the operator).
    pub alarm: Option<String>,
    /// Servers to use instead of starting them, and fixed ports.
    pub attach: Attach,
    /// Healthy operators served beside `operator`, each on a lane of its own
    /// (table, stream, mapping, as the template makes them) with a simulated
    /// operator of its own on a free port. Default none. Not for a watch the
    /// suite attaches to: their ports change from run to run.
    pub neighbours: Vec<OperatorId>,
    /// Put a [`crate::faults::FaultProxy`] seeded with this between the functions and moto
    /// (their `AWS_ENDPOINT_URL`), with `AWS_MAX_ATTEMPTS=1` so that every
    /// fault it injects reaches lifeboat's code; it fails nothing until
    /// [`super::LocalSuite::fault_proxy`]'s rate is raised. Default none. Not for
    /// an attached watch.
    pub aws_faults: Option<u64>,
    /// A credential for `operator`: put into moto's SSM as a SecureString
    /// under its path before any function starts (the functions get
    /// `OPERATOR_CREDENTIALS_PATH`), and required by the simulated operator
    /// on every call, which answers 401 without it. Default none.
    pub operator_credential: Option<OperatorCredential>,
    /// Keep the operators' endpoints and `operator_settings` in the
    /// operator config table's item (written before any function starts)
    /// and leave `OPERATOR_ENDPOINTS` and `OPERATOR_SETTINGS` empty, as a
    /// stack of hundreds of operators does. Default: in the environment
    /// (the table exists, with no item: every function reads it and falls
    /// back to its environment).
    pub operator_config_in_table: bool,
}

/// One operator's credential as docs/configuration.md says to keep it: the
/// parameter `<path>/<operator>` holding `{"header": …, "value": …}`.
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorCredential {
    /// `OPERATOR_CREDENTIALS_PATH`, e.g. `/lifeboat/local/operators`.
    pub path: String,
    /// The header the operator wants, e.g. `x-api-key`.
    pub header: String,
    pub value: String,
}

impl std::fmt::Debug for OperatorCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorCredential")
            .field("path", &self.path)
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// Servers the suite uses instead of starting its own, and the ports of
/// what it starts that the functions call. The default starts everything
/// on free ports.
///
/// A watch that runs before the suite starts must have been given the
/// functions' environment, so that environment must not change from one
/// run to the next: with [`Attach::watch`], keep `moto`, `aws_port` and
/// `operator_port` the same between runs. The stack the suite deploys in
/// an attached moto is left there when it stops, and the next run with the
/// same parameters uses it again (the mappings keep their UUIDs).
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

/// How to run the customer half: settings of search, cart, the off-sale
/// listener and the booking worker. The defaults are the template's.
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
    /// `ORDER_SETTINGS` of the booking worker (empty: the defaults).
    pub order_settings: String,
    /// `BOOKING_RUN_MS` of the booking worker.
    pub booking_run_ms: u32,
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
            order_settings: String::new(),
            booking_run_ms: template::BOOKING_RUN_MS,
        }
    }
}

impl SuiteOptions {
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
            stack_name: super::from_stack::STACK_NAME.to_owned(),
            template: crate::watch::workspace_root().join("template.yaml"),
            stream_tap: None,
            customer: None,
            alarm: Some(format!("lifeboat-{operator}-errors")),
            attach: Attach::default(),
            neighbours: Vec::new(),
            aws_faults: None,
            operator_credential: None,
            operator_config_in_table: false,
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
    pub(super) _pump: StreamPump,
}

/// An HTTP reply of search or cart through [`super::LocalSuite::api`].
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
