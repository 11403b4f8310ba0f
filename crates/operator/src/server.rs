//! The simulated operator over HTTP, for the local demo and the client's
//! tests. It speaks the operator API contract of [`crate::HttpOperatorApi`]:
//!
//! - `GET /search?…`, `GET /price?…` and `GET /ping`: the simulated
//!   answers; the `x-request-id` header is recorded.
//! - `POST /book` with the JSON body of [`crate::BookOrder`] and the
//!   `Idempotency-Key` header: a booking at the simulator's desk (a body
//!   that is not one, or no key: `400`).
//! - `POST /_control/mode` with `{"mode": "hang" | "refuse" | "server_error" |
//!   "slow" | "garbage" | null}`: override the outage script (`null`: healthy);
//!   `{"follow_script": true}` hands control back to the script. Answers
//!   `{"mode": …}`, the mode now in force.
//! - `GET /_control/stats`: the call counts ([`crate::SimStats`]) as JSON.
//!
//! Outages over HTTP: `hang` holds the connection open without ever
//! answering, until the client gives up (hyper notices the closed connection
//! and drops the held call) or the server stops; `refuse` closes
//! the connection as soon as the request arrives, without a response, which a
//! client sees as a broken connection (reqwest: "connection closed before
//! message completed"), the closest a live listener can come to a refused
//! connection. `slow` is measured against the configured
//! [`crate::SimConfig::budgets`], since the server cannot know the caller's.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use lifeboat_core::{Operation, OperatorId, SystemClock};
use reqwest::Url;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::book::{self, BookOrder, IDEMPOTENCY_KEY_HEADER};
use crate::client::REQUEST_ID_HEADER;
use crate::sim::{OutageMode, Reply, SimConfig, SimulatedOperator};

/// How long [`SimServer::shutdown`] waits for open connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Largest control request body read, and largest booking body.
const MAX_CONTROL_BODY: usize = 64 * 1024;

/// A running simulated operator on a local port. It stops when
/// [`shutdown`](Self::shutdown) is called or the handle is dropped.
#[derive(Debug)]
pub struct SimServer {
    addr: SocketAddr,
    sim: SimulatedOperator,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    open_calls: Arc<AtomicUsize>,
    required: RequiredHeader,
}

impl SimServer {
    /// Serve `sim` on `127.0.0.1:port` (`0`: any free port; see
    /// [`addr`](Self::addr)).
    pub async fn start(sim: SimulatedOperator, port: u16) -> io::Result<Self> {
        Self::start_at(sim, SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await
    }

    /// Serve a new simulator playing `operator` with `config` on
    /// `127.0.0.1:port`, on wall-clock time.
    pub async fn start_with(
        operator: OperatorId,
        config: SimConfig,
        port: u16,
    ) -> io::Result<Self> {
        Self::start(
            SimulatedOperator::new(operator, config, Arc::new(SystemClock)),
            port,
        )
        .await
    }

    /// Serve `sim` on `addr`.
    pub async fn start_at(sim: SimulatedOperator, addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let open_calls = Arc::new(AtomicUsize::new(0));
        let required = RequiredHeader::default();
        let serving = Serving {
            sim: sim.clone(),
            stopped,
            open_calls: Arc::clone(&open_calls),
            required: Arc::clone(&required),
        };
        let task = tokio::spawn(serve(listener, serving));
        tracing::debug!(%addr, operator = %sim.operator(), "simulated operator listening");
        Ok(Self {
            addr,
            sim,
            stop,
            task: Some(task),
            open_calls,
            required,
        })
    }

    /// From now on answer `401` to every `/search`, `/price`, `/ping` and `/book`
    /// without header `name` set to `value` (a second call replaces the
    /// first: a key rotated by the operator).
    pub fn require_header(&self, name: &str, value: &str) {
        *self.required.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((name.to_owned(), value.to_owned()));
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the base URL to give the client.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The simulation being served: switch its mode or read its counts
    /// directly, without the control endpoint.
    pub fn operator(&self) -> &SimulatedOperator {
        &self.sim
    }

    /// Operator calls being held right now (hanging or waiting out their
    /// latency). A call is released as soon as its client hangs up.
    pub fn open_calls(&self) -> usize {
        self.open_calls.load(Ordering::Relaxed)
    }

    /// Stop accepting connections, end hanging calls, and wait (up to 5 s)
    /// for open connections to finish.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!(error = %e, "simulated operator task failed");
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// What every connection of a server shares.
#[derive(Clone)]
struct Serving {
    sim: SimulatedOperator,
    stopped: watch::Receiver<bool>,
    open_calls: Arc<AtomicUsize>,
    required: RequiredHeader,
}

/// The header every operation call must carry, as a real operator's API
/// key; `None`: anyone may call.
type RequiredHeader = Arc<std::sync::Mutex<Option<(String, String)>>>;

/// Counts one open call for as long as it lives.
struct OpenCall(Arc<AtomicUsize>);

impl OpenCall {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(count))
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve(listener: TcpListener, serving: Serving) {
    let graceful = GracefulShutdown::new();
    let mut stopped = serving.stopped.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let serving = serving.clone();
                    let service = service_fn(move |req| handle(serving.clone(), req));
                    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!(error = %e, "simulated operator connection ended");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "simulated operator cannot accept");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            // A send or a dropped handle: either way, stop.
            _ = stopped.changed() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("simulated operator connections still open after shutdown");
    }
}

/// Returned by the service to make hyper drop the connection without a response.
#[derive(Debug, thiserror::Error)]
#[error("connection closed without an answer")]
struct CloseConnection;

type Answer = Response<Full<Bytes>>;

async fn handle(serving: Serving, req: Request<Incoming>) -> Result<Answer, CloseConnection> {
    let sim = &serving.sim;
    let read = |operation| (operation, query_params(req.uri()));
    let (operation, params) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/search") => read(Operation::Search),
        (&Method::GET, "/price") => read(Operation::Price),
        (&Method::GET, "/ping") => read(Operation::Ping),
        (&Method::POST, "/book") => {
            let (parts, body) = req.into_parts();
            return match booking_params(&parts.headers, body).await {
                Ok(params) => {
                    self::operation(&serving, Operation::Book, &parts.headers, params).await
                }
                Err(refused) => Ok(refused),
            };
        }
        (&Method::POST, "/_control/mode") => return Ok(control_mode(sim, req).await),
        (&Method::GET, "/_control/stats") => return Ok(json(StatusCode::OK, &sim.stats())),
        (_, "/search" | "/price" | "/ping" | "/book" | "/_control/mode" | "/_control/stats") => {
            return Ok(error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"));
        }
        _ => return Ok(error(StatusCode::NOT_FOUND, "not found")),
    };
    self::operation(&serving, operation, req.headers(), params).await
}

/// A booking's parameters from its key and body, or the `400` refusing it.
async fn booking_params(
    headers: &HeaderMap,
    body: Incoming,
) -> Result<BTreeMap<String, String>, Answer> {
    let Some(key) = headers
        .get(IDEMPOTENCY_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
    else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key is required",
        ));
    };
    let body = match Limited::new(body, MAX_CONTROL_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "cannot read the request body",
            ));
        }
    };
    match serde_json::from_slice::<BookOrder>(&body) {
        Ok(order) => Ok(book::params_of(key, &order)),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("invalid booking: {e}"),
        )),
    }
}

async fn operation(
    serving: &Serving,
    operation: Operation,
    headers: &HeaderMap,
    params: BTreeMap<String, String>,
) -> Result<Answer, CloseConnection> {
    let required = serving
        .required
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some((name, value)) = required
        && headers.get(name.as_str()).and_then(|v| v.to_str().ok()) != Some(value.as_str())
    {
        return Ok(error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong credential",
        ));
    }
    let _open = OpenCall::new(&serving.open_calls);
    let (sim, stopped) = (&serving.sim, serving.stopped.clone());
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let _in_flight = sim.in_flight(operation);
    let budget = sim.config().budgets.for_operation(operation);
    let plan = sim.plan(operation, &params, &budget, request_id);
    match plan.reply {
        Reply::Hang => {
            until_stopped(stopped).await;
            Err(CloseConnection)
        }
        Reply::Close => Err(CloseConnection),
        Reply::Answer {
            status,
            content_type,
            body,
        } => {
            tokio::select! {
                () = tokio::time::sleep(plan.delay) => {
                    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    Ok(response(status, content_type, body))
                }
                () = until_stopped(stopped) => Err(CloseConnection),
            }
        }
    }
}

/// The body of `POST /_control/mode`.
#[derive(Debug, Deserialize)]
struct ModeSwitch {
    #[serde(default)]
    mode: Option<OutageMode>,
    #[serde(default)]
    follow_script: bool,
}

#[derive(Debug, Serialize)]
struct ModeNow {
    mode: Option<OutageMode>,
}

async fn control_mode(sim: &SimulatedOperator, req: Request<Incoming>) -> Answer {
    let body = match Limited::new(req.into_body(), MAX_CONTROL_BODY)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return error(StatusCode::BAD_REQUEST, "cannot read the request body"),
    };
    let switch: ModeSwitch = match serde_json::from_slice(&body) {
        Ok(switch) => switch,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("invalid mode switch: {e}"),
            );
        }
    };
    if switch.follow_script {
        sim.follow_script();
    } else {
        sim.set_mode(switch.mode);
    }
    tracing::info!(mode = ?sim.mode(), "simulated operator mode switched");
    json(StatusCode::OK, &ModeNow { mode: sim.mode() })
}

/// The query string as a map; a key given twice keeps its last value.
fn query_params(uri: &Uri) -> BTreeMap<String, String> {
    let Some(query) = uri.query() else {
        return BTreeMap::new();
    };
    match Url::parse(&format!("http://sim.invalid/?{query}")) {
        Ok(url) => url.query_pairs().into_owned().collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// Resolves once the server is stopping (or its handle is gone).
async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    while !*stopped.borrow_and_update() {
        if stopped.changed().await.is_err() {
            return;
        }
    }
}

fn response(status: StatusCode, content_type: &'static str, body: String) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json(status: StatusCode, value: &impl Serialize) -> Answer {
    match serde_json::to_string(value) {
        Ok(body) => response(status, "application/json", body),
        Err(_) => response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "application/json",
            "{}".to_owned(),
        ),
    }
}

fn error(status: StatusCode, message: &str) -> Answer {
    json(status, &serde_json::json!({ "error": message }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::LatencyModel;
    use crate::sim::SimStats;

    async fn start() -> SimServer {
        let config = SimConfig {
            latency: LatencyModel {
                error_rate: 0.0,
                ..LatencyModel::scaled(0.01)
            },
            ..SimConfig::default()
        };
        SimServer::start_with(OperatorId::new("nordic").unwrap(), config, 0)
            .await
            .unwrap()
    }

    fn client() -> reqwest::Client {
        reqwest::Client::new()
    }

    #[tokio::test]
    async fn the_control_endpoint_switches_modes_and_reports_counts() {
        let server = start().await;
        let base = server.base_url();
        let http = client();

        let switched: serde_json::Value = http
            .post(format!("{base}/_control/mode"))
            .body(r#"{"mode":"server_error"}"#)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(switched["mode"], "server_error");
        assert_eq!(server.operator().mode(), Some(OutageMode::ServerError));

        let answer = http
            .get(format!("{base}/search?from=HEL"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);

        let healthy: serde_json::Value = http
            .post(format!("{base}/_control/mode"))
            .body(r#"{"mode":null}"#)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(healthy["mode"], serde_json::Value::Null);
        let answer = http.get(format!("{base}/price")).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.headers()[CONTENT_TYPE], "application/json");

        let bad = http
            .post(format!("{base}/_control/mode"))
            .body(r#"{"mode":"sideways"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

        let followed = http
            .post(format!("{base}/_control/mode"))
            .body(r#"{"follow_script":true}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(followed.status(), StatusCode::OK);

        let stats: SimStats = http
            .get(format!("{base}/_control/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stats.total, 2);
        assert_eq!(stats.by_mode.server_error, 1);
        assert_eq!(stats.by_mode.healthy, 1);
        assert_eq!(stats.by_operation.price, 1);
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_are_refused() {
        let server = start().await;
        let http = client();
        let missing = http
            .get(format!("{}/bookings", server.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let get_book = http
            .get(format!("{}/book", server.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(get_book.status(), StatusCode::METHOD_NOT_ALLOWED);
        let wrong = http
            .post(format!("{}/search", server.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(server.operator().stats().total, 0);
    }

    #[tokio::test]
    async fn a_booking_needs_its_key_and_a_body_that_is_one() {
        let server = start().await;
        let url = format!("{}/book", server.base_url());
        let order = r#"{"sailing_id": "hel-tll-20991224-0730", "passengers": 1,
                        "max_price_cents": 100000, "currency": "EUR"}"#;
        let post = |key: Option<&str>, body: &str| {
            let mut request = client().post(&url).body(body.to_owned());
            if let Some(key) = key {
                request = request.header(IDEMPOTENCY_KEY_HEADER, key);
            }
            request.send()
        };
        let keyless = post(None, order).await.unwrap();
        assert_eq!(keyless.status(), StatusCode::BAD_REQUEST);
        for bad in [
            "{}",
            "not json",
            r#"{"sailing_id": "x", "passengers": 1, "max_price_cents": 1, "currency": "EUR", "coupon": "free"}"#,
        ] {
            let refused = post(Some("k1"), bad).await.unwrap();
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{bad}");
        }
        assert_eq!(server.operator().stats().total, 0);
        let booked: serde_json::Value =
            post(Some("k1"), order).await.unwrap().json().await.unwrap();
        assert_eq!(booked["status"], "booked", "{booked}");
        let unknown = order.replace(r#""currency""#, r#""accommodation": "hammock", "currency""#);
        let refused = post(Some("k2"), &unknown).await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let stats = server.operator().stats();
        assert_eq!((stats.bookings, stats.rejected), (1, 1));
    }

    #[tokio::test]
    async fn shutdown_ends_hanging_calls_and_closes_the_port() {
        let server = start().await;
        server.operator().set_mode(Some(OutageMode::Hang));
        let url = format!("{}/search", server.base_url());
        let hanging = tokio::spawn(async move { client().get(url).send().await });
        // Wait (in real time, but only until it arrives) for the call to hang.
        while server.operator().stats().total == 0 {
            tokio::task::yield_now().await;
        }
        let base = server.base_url();
        tokio::time::timeout(Duration::from_secs(3), server.shutdown())
            .await
            .unwrap();
        let ended = hanging.await.unwrap();
        assert!(ended.is_err(), "a hanging call gets no answer");
        assert!(client().get(format!("{base}/search")).send().await.is_err());
    }

    #[tokio::test]
    async fn a_hanging_call_is_released_when_its_client_gives_up() {
        let server = start().await;
        server.operator().set_mode(Some(OutageMode::Hang));
        let gave_up = client()
            .get(format!("{}/search", server.base_url()))
            .timeout(Duration::from_millis(100))
            .send()
            .await;
        assert!(gave_up.unwrap_err().is_timeout());
        // hyper notices the closed connection and drops the held call.
        let released = async {
            while server.open_calls() > 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(2), released)
            .await
            .unwrap();
        assert_eq!(server.operator().stats().by_mode.hang, 1);
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_server() {
        let server = start().await;
        let base = server.base_url();
        drop(server);
        let mut refused = false;
        for _ in 0..100 {
            if client().get(format!("{base}/search")).send().await.is_err() {
                refused = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(refused);
    }

    #[test]
    fn query_strings_are_decoded() {
        let uri: Uri = "/search?from=HEL&to=Saint+Petersburg&date=2025-06-01&x=%26"
            .parse()
            .unwrap();
        let params = query_params(&uri);
        assert_eq!(params["to"], "Saint Petersburg");
        assert_eq!(params["x"], "&");
        assert!(query_params(&"/search".parse().unwrap()).is_empty());
    }
}
