//! How long each lifeboat function takes to answer its first invocation, and
//! its second for comparison.
//!
//! ```sh
//! # the seven functions as tools/test builds them for cargo lambda watch
//! CARGO_TARGET_DIR=target/lambda-watch cargo build --bin real-consumer \
//!   --bin fallback-consumer --bin circuit-switch --bin search --bin cart \
//!   --bin offsale-listener --bin booking-worker
//! # optional: the native release binaries for the direct measurement
//! cargo build --release --bin real-consumer --bin fallback-consumer \
//!   --bin circuit-switch --bin search --bin cart --bin offsale-listener \
//!   --bin booking-worker
//! cargo run --release -p lifeboat-local --example startup -- \
//!   [--native-dir target/release] [--runs 5] [--json]
//! ```
//!
//! Everything runs on loopback: moto with the template's tables and queues
//! (as `LocalSuite` creates them), the simulated operator, and
//!
//! 1. **under `cargo lambda watch`**: per function, the time from sending
//!    the first invocation to its answer (the first invocation is what makes
//!    `cargo lambda watch` `cargo run` the binary: cargo's freshness check of
//!    the pre-built dev binary in `target/lambda-watch`, the process start,
//!    the runtime's init and the handler), then the second invocation of the
//!    same instance;
//! 2. **directly** (with `--native-dir DIR`, which holds the binaries named
//!    after the functions, e.g. a native release build): the binary is
//!    started with `AWS_LAMBDA_RUNTIME_API` pointing at a small Lambda
//!    runtime API served here, with one event waiting. Measured: process
//!    start to its first `GET …/invocation/next` (init), process start to
//!    the first answer, and a second event to its answer. Repeated `--runs`
//!    times (default 5); min / median / max are printed.
//!
//! `--json` prints one JSON object instead of the tables (tools/figures
//! writes docs/binaries.md's init table from it): `watch` (per function,
//! `first_ms`, `second_ms`) and `direct` (per function, `size_bytes` and
//! `init_ms`, `first_ms`, `second_ms`, each `{min, median, max}`).
//!
//! The payloads are harmless and need no operator call: an empty batch for
//! the consumers and the off-sale listener, a schedule tick for the circuit
//! switch (it reads the Breaker table and the mapping in moto) and for the
//! booking worker (as `BookingScheduleRule` sends it: the worker reads the
//! Breaker table and its operator's open orders, none, in the Orders table
//! in moto, and books nothing), and an HTTP API request for a path search
//! and cart do not serve (their own 404 problem). The figures are for this machine and these binaries; a deployed
//! arm64 function's cold start adds Lambda's own sandbox and download time.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lifeboat_core::OperatorId;
use lifeboat_local::moto::{MotoServer, REGION};
use lifeboat_local::pump::{TickerConfig, schedule_event};
use lifeboat_local::suite::{
    BOOKING_WORKER, CART, CIRCUIT_SWITCH, CustomerOptions, FALLBACK_CONSUMER, OFFSALE_LISTENER,
    REAL_CONSUMER, SEARCH, SuiteOptions, function_env, moto_launcher, stack_resources,
};
use lifeboat_local::watch::{Watch, watch_target_dir, workspace_root};
use lifeboat_operator::{SimConfig, SimServer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const FUNCTIONS: [&str; 7] = [
    REAL_CONSUMER,
    FALLBACK_CONSUMER,
    CIRCUIT_SWITCH,
    OFFSALE_LISTENER,
    SEARCH,
    CART,
    BOOKING_WORKER,
];

/// How long one invocation may take before the measurement gives up.
const INVOKE_LIMIT: Duration = Duration::from_secs(120);

const HTTP_API_EVENT: &str = include_str!("../../../tests/events/http-api-get-sailings.json");

struct Args {
    native_dir: Option<PathBuf>,
    runs: usize,
    /// Only the direct measurement (`--native-dir`), not cargo lambda watch.
    direct_only: bool,
    /// One JSON object on stdout instead of the tables.
    json: bool,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        native_dir: None,
        runs: 5,
        direct_only: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--native-dir" => {
                args.native_dir = Some(it.next().ok_or("--native-dir needs a directory")?.into())
            }
            "--runs" => args.runs = it.next().ok_or("--runs needs a number")?.parse()?,
            "--direct-only" => args.direct_only = true,
            "--json" => args.json = true,
            "-h" | "--help" => {
                println!("startup [--native-dir DIR [--direct-only]] [--runs N] [--json]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if args.direct_only && args.native_dir.is_none() {
        return Err("--direct-only needs --native-dir".into());
    }
    args.runs = args.runs.max(1);
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let root = workspace_root();
    for function in FUNCTIONS.iter().filter(|_| !args.direct_only) {
        let built = watch_target_dir(&root).join("debug").join(function);
        if !built.is_file() {
            eprintln!(
                "note: {} is not built; its first invocation under cargo lambda watch will include the build",
                built.display()
            );
        }
    }

    let moto = MotoServer::start_program(&moto_launcher()?).await?;
    let sdk = moto.sdk_config().await;
    let operator = OperatorId::new("nordic")?;
    let sim = SimServer::start_with(operator.clone(), SimConfig::default(), 0).await?;
    // Every function's environment exactly as `LocalSuite` gives it with
    // the customer half: the template's stack, deployed in moto.
    let mut options = SuiteOptions::new(operator.clone());
    options.customer = Some(CustomerOptions::default());
    let resources = stack_resources(&sdk, &options, &[(operator.clone(), sim.base_url())]).await?;
    let env = function_env(&moto.endpoint(), &resources, &options)?;

    // The tables, unless `--json` asked for the object instead.
    let say = |line: String| {
        if !args.json {
            println!("{line}");
        }
    };
    let mut report = json!({});
    if !args.direct_only {
        say(
            "under cargo lambda watch (dev binaries in target/lambda-watch), one instance each:"
                .into(),
        );
        say(format!(
            "  {:<18} {:>12} {:>12}",
            "function", "first ms", "second ms"
        ));
        let watch = Watch::for_workspace()
            .envs(env.iter().cloned())
            .invoke_timeout(INVOKE_LIMIT)
            .start()
            .await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(INVOKE_LIMIT)
            .build()?;
        let mut watch_result = Ok(());
        for function in FUNCTIONS {
            let mut times = Vec::new();
            for _ in 0..2 {
                let started = Instant::now();
                if let Err(e) = invoke_under_watch(&watch, &http, function).await {
                    watch_result = Err(format!("{function}: {e}; log {}", watch.log_hint()));
                    break;
                }
                times.push(started.elapsed());
            }
            if watch_result.is_err() {
                break;
            }
            say(format!(
                "  {:<18} {:>12} {:>12}",
                function,
                ms(times[0]),
                ms(times[1])
            ));
            report["watch"][function] =
                json!({ "first_ms": millis(times[0]), "second_ms": millis(times[1]) });
        }
        watch.stop().await;
        watch_result?;
    }

    if let Some(dir) = &args.native_dir {
        say(String::new());
        say(format!(
            "directly, binaries in {} against a local runtime API, {} run(s) each (min / median / max ms):",
            dir.display(),
            args.runs
        ));
        say(format!(
            "  {:<18} {:>10} {:>22} {:>22} {:>22}",
            "function", "size KiB", "start to init done", "start to first answer", "second answer"
        ));
        for function in FUNCTIONS {
            let binary = dir.join(function);
            let Ok(meta) = std::fs::metadata(&binary) else {
                if args.json {
                    return Err(format!("{function}: not found: {}", binary.display()).into());
                }
                say(format!("  {function:<18} not found: {}", binary.display()));
                continue;
            };
            let mut init = Vec::new();
            let mut first = Vec::new();
            let mut second = Vec::new();
            for _ in 0..args.runs {
                let run = run_direct(&binary, function, &env).await?;
                init.push(run.init);
                first.push(run.first);
                second.push(run.second);
            }
            say(format!(
                "  {:<18} {:>10} {:>22} {:>22} {:>22}",
                function,
                meta.len() / 1024,
                spread(&mut init),
                spread(&mut first),
                spread(&mut second)
            ));
            report["direct"][function] = json!({
                "size_bytes": meta.len(),
                "init_ms": spread_json(&mut init),
                "first_ms": spread_json(&mut first),
                "second_ms": spread_json(&mut second),
            });
        }
        report["runs"] = json!(args.runs);
    }
    if args.json {
        println!("{report}");
    }

    sim.shutdown().await;
    moto.stop().await;
    Ok(())
}

/// The payload of a harmless invocation of `function`.
fn event_for(function: &str) -> Result<Value, BoxError> {
    Ok(match function {
        SEARCH | CART => {
            // An HTTP API (payload 2.0) request for a path neither serves.
            let mut event: Value = serde_json::from_str(HTTP_API_EVENT)?;
            event["routeKey"] = json!("$default");
            event["rawPath"] = json!("/");
            event["rawQueryString"] = json!("");
            event["requestContext"]["http"]["path"] = json!("/");
            event["requestContext"]["routeKey"] = json!("$default");
            if let Some(object) = event.as_object_mut() {
                object.remove("queryStringParameters");
            }
            event
        }
        CIRCUIT_SWITCH => schedule_event(
            &TickerConfig::new(CIRCUIT_SWITCH, Duration::from_secs(60), "startup"),
            &uuid::Uuid::new_v4().to_string(),
            chrono::Utc::now(),
        ),
        // The minute tick of `BookingScheduleRule`, as the template's rule
        // sends it (tests/events/schedule-tick.json's shape).
        BOOKING_WORKER => schedule_event(
            &TickerConfig::new(
                BOOKING_WORKER,
                Duration::from_secs(60),
                "BookingScheduleRule",
            ),
            &uuid::Uuid::new_v4().to_string(),
            chrono::Utc::now(),
        ),
        _ => json!({ "Records": [] }),
    })
}

/// One invocation under the watch; search and cart through their Function
/// URL, answered with their own 404 problem.
async fn invoke_under_watch(
    watch: &Watch,
    http: &reqwest::Client,
    function: &str,
) -> Result<(), BoxError> {
    match function {
        SEARCH | CART => {
            let response = http.get(watch.function_url(function, "/")).send().await?;
            let status = response.status().as_u16();
            let body: Value = response.json().await?;
            if status != 404 || body.get("title") != Some(&json!("not found")) {
                return Err(format!(
                    "expected the handler's 404 problem, got HTTP {status}: {body}"
                )
                .into());
            }
        }
        _ => {
            watch.invoke(function, &event_for(function)?).await?;
        }
    }
    Ok(())
}

/// What one direct run measured.
struct DirectRun {
    init: Duration,
    first: Duration,
    second: Duration,
}

/// What the runtime API stub saw, with when.
#[derive(Debug)]
enum Seen {
    Next(Instant),
    Answer(Instant),
    Error(String),
}

/// A minimal Lambda runtime API: hands out queued events on
/// `GET /2018-06-01/runtime/invocation/next` (holding the request until one
/// is queued) and reports responses and errors.
struct RuntimeApi {
    events: Mutex<VecDeque<(String, Value)>>,
    queued: Notify,
    seen: mpsc::UnboundedSender<Seen>,
    function: String,
}

impl RuntimeApi {
    fn queue(&self, id: String, event: Value) {
        if let Ok(mut events) = self.events.lock() {
            events.push_back((id, event));
        }
        self.queued.notify_one();
    }

    async fn next_event(&self) -> (String, Value) {
        loop {
            let notified = self.queued.notified();
            let popped = self.events.lock().ok().and_then(|mut e| e.pop_front());
            if let Some(event) = popped {
                return event;
            }
            notified.await;
        }
    }

    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let path = request.uri().path().to_owned();
        let method = request.method().clone();
        let reply = |status: StatusCode, body: String| {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            *response.status_mut() = status;
            response
        };
        if method == Method::GET && path == "/2018-06-01/runtime/invocation/next" {
            let _ = self.seen.send(Seen::Next(Instant::now()));
            let (id, event) = self.next_event().await;
            let deadline = chrono::Utc::now().timestamp_millis() + 60_000;
            let mut response = reply(StatusCode::OK, event.to_string());
            let headers = response.headers_mut();
            let values = [
                ("lambda-runtime-aws-request-id", id),
                ("lambda-runtime-deadline-ms", deadline.to_string()),
                (
                    "lambda-runtime-invoked-function-arn",
                    format!(
                        "arn:aws:lambda:{REGION}:123456789012:function:{}",
                        self.function
                    ),
                ),
                (
                    "lambda-runtime-trace-id",
                    "Root=1-00000000-000000000000000000000000;Sampled=0".to_owned(),
                ),
                ("content-type", "application/json".to_owned()),
            ];
            for (name, value) in values {
                if let Ok(value) = value.parse() {
                    headers.insert(name, value);
                }
            }
            return Ok(response);
        }
        let body = request.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        let now = Instant::now();
        if method == Method::POST && path.ends_with("/response") {
            let _ = self.seen.send(Seen::Answer(now));
        } else if method == Method::POST && path.ends_with("/error") {
            let _ = self.seen.send(Seen::Error(format!("{path}: {text}")));
        } else {
            return Ok(reply(StatusCode::NOT_FOUND, String::new()));
        }
        Ok(reply(
            StatusCode::ACCEPTED,
            "{\"status\":\"OK\"}".to_owned(),
        ))
    }
}

/// Serve `api` on a free loopback port until the task is aborted.
async fn serve_runtime_api(
    api: Arc<RuntimeApi>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), BoxError> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let api = Arc::clone(&api);
            connections.spawn(async move {
                let service = service_fn(move |request| Arc::clone(&api).handle(request));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, task))
}

/// Start `binary` against a fresh runtime API with one event queued, time
/// its init and first answer, then a second event, and stop it.
async fn run_direct(
    binary: &Path,
    function: &str,
    env: &[(String, String)],
) -> Result<DirectRun, BoxError> {
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let api = Arc::new(RuntimeApi {
        events: Mutex::new(VecDeque::new()),
        queued: Notify::new(),
        seen: seen_tx,
        function: function.to_owned(),
    });
    let (addr, server) = serve_runtime_api(Arc::clone(&api)).await?;
    api.queue("startup-1".to_owned(), event_for(function)?);

    let mut command = tokio::process::Command::new(binary);
    command
        .env_clear()
        .envs(
            ["PATH", "HOME"]
                .into_iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_owned(), v))),
        )
        .envs(env.iter().cloned())
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env(lifeboat_core::metrics::AWS_LAMBDA_LOG_FORMAT, "JSON")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = command.spawn()?;

    let result = async {
        let mut init = None;
        let first = loop {
            match tokio::time::timeout(INVOKE_LIMIT, seen.recv()).await? {
                Some(Seen::Next(at)) => {
                    init.get_or_insert(at - started);
                }
                Some(Seen::Answer(at)) => break at - started,
                Some(Seen::Error(e)) => return Err(format!("{function} failed: {e}").into()),
                None => return Err::<DirectRun, BoxError>("runtime API stopped".into()),
            }
        };
        let sent = Instant::now();
        api.queue("startup-2".to_owned(), event_for(function)?);
        let second = loop {
            match tokio::time::timeout(INVOKE_LIMIT, seen.recv()).await? {
                Some(Seen::Next(_)) => {}
                Some(Seen::Answer(at)) => break at - sent,
                Some(Seen::Error(e)) => return Err(format!("{function} failed: {e}").into()),
                None => return Err("runtime API stopped".into()),
            }
        };
        Ok(DirectRun {
            init: init.ok_or("no init seen")?,
            first,
            second,
        })
    }
    .await;

    let _ = child.start_kill();
    let _ = child.wait().await;
    server.abort();
    result
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Milliseconds with a tenth, as the tables print them.
fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Min, median and max of `times` in milliseconds.
fn spread_json(times: &mut [Duration]) -> Value {
    times.sort();
    match (times.first(), times.get(times.len() / 2), times.last()) {
        (Some(min), Some(median), Some(max)) => {
            json!({ "min": millis(*min), "median": millis(*median), "max": millis(*max) })
        }
        _ => Value::Null,
    }
}

fn spread(times: &mut [Duration]) -> String {
    times.sort();
    match (times.first(), times.get(times.len() / 2), times.last()) {
        (Some(min), Some(median), Some(max)) => {
            format!("{} / {} / {}", ms(*min), ms(*median), ms(*max))
        }
        _ => "-".to_owned(),
    }
}
