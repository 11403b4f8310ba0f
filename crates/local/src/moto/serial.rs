//! A loopback HTTP proxy in front of moto that lets one DynamoDB request
//! through at a time.
//!
//! moto_server answers each request on a thread of its own, and its DynamoDB
//! backend checks a condition and then applies the write without a lock: two
//! concurrent conditional writes can both pass (20 concurrent outcome writers
//! got two winners), and two concurrent `UpdateItem ADD`s that create an item
//! both start from nothing (concurrent adds to a new bucket lost counts).
//! DynamoDB applies every single-item write atomically. Serializing DynamoDB
//! requests gives moto the same guarantee, so conditional writes and counters
//! can be tested with real concurrent callers. Other services (SQS long polls,
//! EventBridge, Lambda) pass through side by side.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderName};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// The proxy task; stops when dropped.
#[derive(Debug)]
pub(super) struct SerialProxy {
    port: u16,
    task: JoinHandle<()>,
}

impl SerialProxy {
    /// Listen on loopback `port` (0: a free one) and forward to `upstream`
    /// (`http://127.0.0.1:PORT`).
    pub(super) async fn start(upstream: String, port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
        let port = listener.local_addr()?.port();
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            upstream,
            http,
            dynamodb: Mutex::new(()),
        });
        let task = tokio::spawn(serve(listener, shared));
        Ok(Self { port, task })
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for SerialProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    /// Held while one DynamoDB request is at moto.
    dynamodb: Mutex<()>,
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "moto proxy: accept failed");
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        // Connections live in the set, so aborting the proxy ends them too.
        connections.spawn(async move {
            let service = service_fn(move |request| forward(Arc::clone(&shared), request));
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "moto proxy: connection ended");
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

fn is_dynamodb(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|target| target.starts_with("DynamoDB_"))
}

/// Headers that belong to one connection, not to the request.
fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ]
    .contains(name)
}

fn bad_gateway(message: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(message)));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

async fn forward(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let serialize = is_dynamodb(&request);
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Ok(bad_gateway(format!("moto proxy: reading the request: {e}"))),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = shared
        .http
        .request(parts.method, format!("{}{path}", shared.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            upstream = upstream.header(name, value);
        }
    }

    let guard = if serialize {
        Some(shared.dynamodb.lock().await)
    } else {
        None
    };
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(e) => return Ok(bad_gateway(format!("moto proxy: {e}"))),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = match answer.bytes().await {
        Ok(bytes) => bytes,
        Err(e) => {
            return Ok(bad_gateway(format!(
                "moto proxy: reading moto's answer: {e}"
            )));
        }
    };
    drop(guard);

    let mut response = Response::new(Full::new(bytes));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !hop_by_hop(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    Ok(response)
}
