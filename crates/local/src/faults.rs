//! A fault-injecting proxy between the functions and moto, for a fault
//! campaign on the local suite (docs/chaos.md, "On moto").
//!
//! Every AWS call a function makes passes through it. While its fault rate
//! is above zero it fails that share of the calls lifeboat's own code makes
//! to its tables, bus, stream mappings and timer queue, drawn from a seeded
//! generator, the way AWS fails them: DynamoDB throttling or a 500, PutEvents
//! entries rejected one by one (the rest accepted), a stream mapping busy
//! (400 ResourceInUse) or throttled (429), an SQS 500. Everything else, and every call
//! while the rate is zero, goes to moto unchanged. The harness itself talks
//! to moto directly.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lifeboat_operator::SimRng;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The largest request body the proxy reads (a DynamoDB item is 400 KB).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// A call the proxy may fail, by the class it counts it in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A DynamoDB item or query operation on one of lifeboat's tables.
    Table {
        table: String,
        operation: String,
    },
    PutEvents,
    SqsSend,
    MappingUpdate,
}

impl Target {
    /// What a call is, from its `X-Amz-Target`, method and path; `None` for
    /// calls the campaign leaves alone (table descriptions, listings, …).
    fn of(target: Option<&str>, method: &hyper::Method, path: &str, body: &[u8]) -> Option<Self> {
        if method == hyper::Method::PUT && path.starts_with("/2015-03-31/event-source-mappings/") {
            return Some(Target::MappingUpdate);
        }
        let target = target?;
        if let Some(operation) = target.strip_prefix("DynamoDB_20120810.") {
            const ITEM_OPERATIONS: [&str; 7] = [
                "GetItem",
                "PutItem",
                "UpdateItem",
                "DeleteItem",
                "Query",
                "BatchGetItem",
                "BatchWriteItem",
            ];
            if !ITEM_OPERATIONS.contains(&operation) {
                return None;
            }
            let body: Value = serde_json::from_slice(body).ok()?;
            let table = match body.get("TableName").and_then(Value::as_str) {
                Some(table) => table.to_owned(),
                None => body
                    .get("RequestItems")
                    .and_then(Value::as_object)
                    .and_then(|items| items.keys().next().cloned())?,
            };
            return Some(Target::Table {
                table,
                operation: operation.to_owned(),
            });
        }
        match target {
            "AWSEvents.PutEvents" => Some(Target::PutEvents),
            "AmazonSQS.SendMessage" => Some(Target::SqsSend),
            _ => None,
        }
    }

    /// The class a fault of this call is counted in: `table:<name>`,
    /// `events.put`, `sqs.send` or `mapping.update`.
    fn class(&self) -> String {
        match self {
            Target::Table { table, .. } => format!("table:{table}"),
            Target::PutEvents => "events.put".to_owned(),
            Target::SqsSend => "sqs.send".to_owned(),
            Target::MappingUpdate => "mapping.update".to_owned(),
        }
    }
}

/// What the proxy has done, for the campaign's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Calls passed to moto (a PutEvents with some entries failed counts).
    pub forwarded: u64,
    /// Faults injected, by class (`table:<name>`, `events.put` per entry,
    /// `sqs.send`, `mapping.update`).
    pub injected: BTreeMap<String, u64>,
}

impl ProxyStats {
    pub fn injected_total(&self) -> u64 {
        self.injected.values().sum()
    }
}

struct State {
    rng: SimRng,
    rate: f64,
    spared_tables: Vec<String>,
    stats: ProxyStats,
}

#[derive(Clone)]
struct Shared {
    state: Arc<Mutex<State>>,
    upstream: String,
    http: reqwest::Client,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this call fails, counted if it does.
    fn strike(&self, target: &Target) -> bool {
        let mut state = self.lock();
        if let Target::Table { table, .. } = target
            && state.spared_tables.iter().any(|t| t == table)
        {
            return false;
        }
        let hit = state.rate > 0.0 && state.rng.next_f64() < state.rate;
        if hit {
            *state.stats.injected.entry(target.class()).or_default() += 1;
        }
        hit
    }
}

/// The proxy: listening on 127.0.0.1, forwarding to `upstream`.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Shared,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listen on a free loopback port and forward to `upstream` (moto's
    /// endpoint), failing nothing until [`set_rate`](Self::set_rate).
    pub async fn start(upstream: &str, seed: u64) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
        let addr = listener.local_addr()?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(io::Error::other)?;
        let shared = Shared {
            state: Arc::new(Mutex::new(State {
                rng: SimRng::new(seed),
                rate: 0.0,
                spared_tables: Vec::new(),
                stats: ProxyStats::default(),
            })),
            upstream: upstream.trim_end_matches('/').to_owned(),
            http,
        };
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(listener, shared.clone(), stopped));
        Ok(Self {
            addr,
            shared,
            stop,
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT`: the functions' `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Fail this share (0–1) of the calls it may fail; 0 stops the faults.
    pub fn set_rate(&self, rate: f64) {
        self.shared.lock().rate = rate.clamp(0.0, 1.0);
    }

    /// Never fail calls on these tables (to keep a table out of a run).
    pub fn spare_tables(&self, tables: impl IntoIterator<Item = String>) {
        self.shared.lock().spared_tables.extend(tables);
    }

    pub fn stats(&self) -> ProxyStats {
        self.shared.lock().stats.clone()
    }

    /// Stop listening and wait for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!(error = %e, "fault proxy task failed");
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

async fn serve(listener: TcpListener, shared: Shared, mut stopped: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    let service = service_fn(move |req| handle(shared.clone(), req));
                    tokio::spawn(async move {
                        if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                            tracing::debug!(error = %e, "fault proxy connection ended");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "fault proxy cannot accept");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            _ = stopped.changed() => break,
        }
    }
}

type Reply = Response<Full<Bytes>>;

async fn handle(shared: Shared, req: Request<Incoming>) -> Result<Reply, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return Ok(reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                &[],
                json!({"message": e.to_string()}),
            ));
        }
    };
    let amz_target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok());
    let target = Target::of(amz_target, &parts.method, parts.uri.path(), &body);
    let answer = match target {
        Some(Target::PutEvents) => put_events(&shared, &parts, body).await,
        Some(target) if shared.strike(&target) => {
            let draw = shared.lock().rng.next_f64();
            return Ok(fault(&target, draw));
        }
        _ => forward(&shared, &parts, body).await,
    };
    Ok(answer.unwrap_or_else(|e| {
        reply(
            StatusCode::BAD_GATEWAY,
            &[],
            json!({"message": format!("fault proxy: moto unreachable: {e}")}),
        )
    }))
}

/// The error AWS would answer for a failed call; `draw` in [0, 1) picks
/// between the two ways each service fails.
fn fault(target: &Target, draw: f64) -> Reply {
    let amz_json = [("content-type", "application/x-amz-json-1.0")];
    match target {
        Target::Table { .. } if draw < 0.5 => reply(
            StatusCode::BAD_REQUEST,
            &amz_json,
            json!({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                   "message": "Rate of requests exceeds the allowed throughput."}),
        ),
        Target::Table { .. } => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            &amz_json,
            json!({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
                   "message": "Internal server error"}),
        ),
        Target::SqsSend | Target::PutEvents => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            &amz_json,
            json!({"__type": "InternalFailure", "message": "internal failure"}),
        ),
        Target::MappingUpdate if draw < 0.5 => reply(
            StatusCode::BAD_REQUEST,
            &[("x-amzn-errortype", "ResourceInUseException")],
            json!({"Type": "User", "Message": "The resource is in use: an update is in progress"}),
        ),
        Target::MappingUpdate => reply(
            StatusCode::TOO_MANY_REQUESTS,
            &[("x-amzn-errortype", "TooManyRequestsException")],
            json!({"Type": "User", "Reason": "CallerRateLimitExceeded", "Message": "Rate exceeded"}),
        ),
    }
}

/// PutEvents with each entry failed on its own: the rest go to moto, and
/// the answer lists every entry in order, as AWS's partial failure does.
async fn put_events(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<Reply, reqwest::Error> {
    let Ok(mut request) = serde_json::from_slice::<Value>(&body) else {
        return forward(shared, parts, body).await;
    };
    let Some(entries) = request.get_mut("Entries").and_then(Value::as_array_mut) else {
        return forward(shared, parts, body).await;
    };
    let failed: Vec<bool> = entries
        .iter()
        .map(|_| shared.strike(&Target::PutEvents))
        .collect();
    if !failed.contains(&true) {
        return forward(shared, parts, body).await;
    }
    let kept: Vec<Value> = entries
        .iter()
        .zip(&failed)
        .filter(|(_, f)| !**f)
        .map(|(e, _)| e.clone())
        .collect();
    let mut accepted = if kept.is_empty() {
        Vec::new()
    } else {
        *entries = kept;
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let answer = forward(shared, parts, body).await?;
        if !answer.status().is_success() {
            // moto refused the rest: its answer, as it gave it.
            return Ok(answer);
        }
        let answer: Value = serde_json::from_slice(
            &answer
                .into_body()
                .collect()
                .await
                .map_or_else(|never| match never {}, |c| c.to_bytes()),
        )
        .unwrap_or(Value::Null);
        answer
            .get("Entries")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
    .into_iter();
    let rejected = json!({"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"});
    let listed: Vec<Value> = failed
        .iter()
        .map(|f| {
            if *f {
                rejected.clone()
            } else {
                accepted.next().unwrap_or_else(|| rejected.clone())
            }
        })
        .collect();
    // Every entry with an error code, the proxy's and moto's own.
    let failed_count = listed
        .iter()
        .filter(|e| e.get("ErrorCode").is_some())
        .count();
    Ok(reply(
        StatusCode::OK,
        &[("content-type", "application/x-amz-json-1.1")],
        json!({"FailedEntryCount": failed_count, "Entries": listed}),
    ))
}

async fn forward(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<Reply, reqwest::Error> {
    shared.lock().stats.forwarded += 1;
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut request = shared
        .http
        .request(parts.method.clone(), format!("{}{path}", shared.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            request = request.header(name, value);
        }
    }
    let answer = request.send().await?;
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await?;
    let mut reply = Response::new(Full::new(bytes));
    *reply.status_mut() = status;
    for (name, value) in &headers {
        if name != hyper::header::CONTENT_LENGTH && name != hyper::header::TRANSFER_ENCODING {
            reply.headers_mut().append(name, value.clone());
        }
    }
    Ok(reply)
}

fn reply(status: StatusCode, headers: &[(&'static str, &'static str)], body: Value) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(body.to_string())));
    *reply.status_mut() = status;
    for (name, value) in headers {
        reply
            .headers_mut()
            .insert(*name, hyper::header::HeaderValue::from_static(value));
    }
    reply
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn calls_are_told_apart_by_target_method_and_path() {
        let get = hyper::Method::GET;
        let post = hyper::Method::POST;
        let put_item = br#"{"TableName": "lifeboat-breaker", "Item": {}}"#;
        assert_eq!(
            Target::of(Some("DynamoDB_20120810.PutItem"), &post, "/", put_item),
            Some(Target::Table {
                table: "lifeboat-breaker".into(),
                operation: "PutItem".into()
            })
        );
        let batch = br#"{"RequestItems": {"lifeboat-cache": {"Keys": []}}}"#;
        assert_eq!(
            Target::of(Some("DynamoDB_20120810.BatchGetItem"), &post, "/", batch)
                .unwrap()
                .class(),
            "table:lifeboat-cache"
        );
        assert_eq!(
            Target::of(
                Some("DynamoDB_20120810.DescribeTable"),
                &post,
                "/",
                put_item
            ),
            None
        );
        assert_eq!(
            Target::of(Some("AWSEvents.PutEvents"), &post, "/", b"{}"),
            Some(Target::PutEvents)
        );
        assert_eq!(
            Target::of(
                None,
                &hyper::Method::PUT,
                "/2015-03-31/event-source-mappings/abc",
                b""
            ),
            Some(Target::MappingUpdate)
        );
        assert_eq!(
            Target::of(None, &get, "/2015-03-31/event-source-mappings/abc", b""),
            None
        );
    }

    #[tokio::test]
    async fn at_rate_zero_nothing_is_failed_and_at_one_everything_is() {
        let proxy = FaultProxy::start("http://127.0.0.1:9", 7).await.unwrap();
        let table = Target::Table {
            table: "t".into(),
            operation: "GetItem".into(),
        };
        assert!(!proxy.shared.strike(&table));
        proxy.set_rate(1.0);
        assert!(proxy.shared.strike(&table));
        assert!(proxy.shared.strike(&Target::MappingUpdate));
        proxy.spare_tables(["t".to_owned()]);
        assert!(!proxy.shared.strike(&table));
        let stats = proxy.stats();
        assert_eq!(stats.injected["table:t"], 1);
        assert_eq!(stats.injected_total(), 2);
        proxy.shutdown().await;
    }
}
