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
//!
//! Two kinds of call do not reach moto. CloudWatch's `DescribeAlarmHistory`,
//! which moto does not have, is answered from the alarm history the suite's
//! own alarm evaluation keeps ([`crate::alarm::history`]). A Lambda `Invoke`
//! of one of the stack's functions (by name, alias or ARN), which moto would
//! try to run in Docker, goes to the binary the template builds for it under
//! `cargo lambda watch` once the suite has said where ([`InvokeRoutes`]), as
//! Lambda runs the function on AWS.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, PoisonError, RwLock};

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

use crate::alarm::history::{
    AlarmHistoryBook, DESCRIBE_ALARM_HISTORY_PATH, describe_alarm_history,
};

/// The proxy task; stops when dropped.
#[derive(Debug)]
pub(super) struct SerialProxy {
    port: u16,
    task: JoinHandle<()>,
}

impl SerialProxy {
    /// Listen on loopback `port` (0: a free one) and forward to `upstream`
    /// (`http://127.0.0.1:PORT`); answer `DescribeAlarmHistory` from
    /// `history`, and send the Invokes `invokes` names where it says.
    pub(super) async fn start(
        upstream: String,
        port: u16,
        history: AlarmHistoryBook,
        invokes: InvokeRoutes,
    ) -> std::io::Result<Self> {
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
            history,
            invokes,
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
    history: AlarmHistoryBook,
    invokes: InvokeRoutes,
}

/// Where the proxy sends a Lambda `Invoke` of the stack's functions: the
/// Invoke API that runs them (`cargo lambda watch`'s) and each function's
/// binary by its name. Empty until [`set`](Self::set): every Invoke goes to
/// moto. Clones share the routes.
#[derive(Debug, Clone, Default)]
pub struct InvokeRoutes(Arc<RwLock<Option<Routes>>>);

#[derive(Debug)]
struct Routes {
    endpoint: String,
    binaries: BTreeMap<String, String>,
}

impl InvokeRoutes {
    /// Send an Invoke of a function named in `binaries` (the function's
    /// name → its binary) to `endpoint` (`http://127.0.0.1:PORT`), as an
    /// Invoke of its binary.
    pub fn set(&self, endpoint: &str, binaries: BTreeMap<String, String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(Routes {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            binaries,
        });
    }

    /// The URL an Invoke at `path` (`/2015-03-31/functions/{id}/invocations`)
    /// goes to instead of moto, if `id` (a name, `name:qualifier` or an
    /// ARN, ':' percent-encoded or not) names one of the functions.
    fn url(&self, path: &str) -> Option<String> {
        let id = path
            .strip_prefix("/2015-03-31/functions/")?
            .strip_suffix("/invocations")?
            .replace("%3A", ":")
            .replace("%3a", ":");
        // arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]
        let name = match id.split_once(":function:") {
            Some((_, rest)) => rest,
            None => id.as_str(),
        };
        let name = name.split(':').next().unwrap_or(name);
        let routes = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let routes = routes.as_ref()?;
        let binary = routes.binaries.get(name)?;
        Some(format!(
            "{}/2015-03-31/functions/{binary}/invocations",
            routes.endpoint
        ))
    }
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
    if parts.method == hyper::Method::POST && parts.uri.path() == DESCRIBE_ALARM_HISTORY_PATH {
        let answer = describe_alarm_history(&shared.history, &body);
        let mut response = Response::new(Full::new(Bytes::from(answer.body)));
        *response.status_mut() =
            StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/cbor"),
        );
        headers.insert(
            HeaderName::from_static("smithy-protocol"),
            header::HeaderValue::from_static("rpc-v2-cbor"),
        );
        return Ok(response);
    }
    let url = shared.invokes.url(parts.uri.path()).unwrap_or_else(|| {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        format!("{}{path}", shared.upstream)
    });
    let mut upstream = shared.http.request(parts.method, url).body(body);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::alarm::history::HistoryItem;
    use aws_sdk_cloudwatch::error::ProvideErrorMetadata as _;
    use aws_sdk_cloudwatch::primitives::DateTime as SmithyTime;
    use aws_sdk_cloudwatch::types::{HistoryItemType, ScanBy};
    use chrono::{DateTime, Utc};

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_796_000_000_000 + secs * 1_000 + 125).unwrap()
    }

    fn item(alarm: &str, secs: i64, to: &str) -> HistoryItem {
        HistoryItem {
            alarm: alarm.to_owned(),
            at: at(secs),
            summary: format!("Alarm updated from OK to {to}"),
            data: format!(r#"{{"version":"1.0","newState":{{"stateValue":"{to}"}}}}"#),
        }
    }

    /// The SDK's own CloudWatch client, at a proxy whose moto is not there:
    /// only the alarm history can answer.
    async fn cloudwatch(book: &AlarmHistoryBook) -> (SerialProxy, aws_sdk_cloudwatch::Client) {
        let nowhere = format!("http://127.0.0.1:{}", crate::net::free_port().unwrap());
        let proxy = SerialProxy::start(nowhere, 0, book.clone(), InvokeRoutes::default())
            .await
            .unwrap();
        let config =
            super::super::sdk_config_for(&format!("http://127.0.0.1:{}", proxy.port())).await;
        (proxy, aws_sdk_cloudwatch::Client::new(&config))
    }

    #[tokio::test]
    async fn the_sdk_reads_the_alarm_history_in_pages() {
        let book = AlarmHistoryBook::default();
        for (secs, to) in [(0, "ALARM"), (40, "OK"), (90, "ALARM")] {
            book.record(item("lifeboat-nordic-errors", secs, to));
        }
        book.record(item("lifeboat-baltic-errors", 10, "ALARM"));
        let (_proxy, cw) = cloudwatch(&book).await;

        let page = |token: Option<String>| {
            cw.describe_alarm_history()
                .alarm_name("lifeboat-nordic-errors")
                .history_item_type(HistoryItemType::StateUpdate)
                .scan_by(ScanBy::TimestampAscending)
                .max_records(2)
                .set_next_token(token)
                .send()
        };
        let first = page(None).await.unwrap();
        let items = first.alarm_history_items();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].alarm_name(), Some("lifeboat-nordic-errors"));
        assert_eq!(
            items[0].timestamp(),
            Some(&SmithyTime::from_millis(at(0).timestamp_millis()))
        );
        assert_eq!(
            items[0].history_item_type(),
            Some(&HistoryItemType::StateUpdate)
        );
        assert_eq!(
            items[0].history_summary(),
            Some("Alarm updated from OK to ALARM")
        );
        assert_eq!(
            items[1].history_data(),
            Some(item("x", 40, "OK").data.as_str())
        );
        let token = first.next_token().map(str::to_owned);
        assert!(token.is_some(), "a page of 2 of 3 has a next");
        let second = page(token).await.unwrap();
        assert_eq!(second.alarm_history_items().len(), 1);
        assert_eq!(
            second.alarm_history_items()[0].timestamp(),
            Some(&SmithyTime::from_millis(at(90).timestamp_millis()))
        );
        assert_eq!(second.next_token(), None);

        // CloudWatch's default order is newest first; the dates bound it.
        let newest = cw
            .describe_alarm_history()
            .alarm_name("lifeboat-nordic-errors")
            .start_date(SmithyTime::from_millis(at(1).timestamp_millis()))
            .send()
            .await
            .unwrap();
        let times: Vec<_> = newest
            .alarm_history_items()
            .iter()
            .map(|i| i.timestamp().unwrap().secs())
            .collect();
        assert_eq!(times, [at(90).timestamp(), at(40).timestamp()]);

        // Every alarm without a name; none of another item type.
        let all = cw.describe_alarm_history().send().await.unwrap();
        assert_eq!(all.alarm_history_items().len(), 4);
        let config = cw
            .describe_alarm_history()
            .history_item_type(HistoryItemType::ConfigurationUpdate)
            .send()
            .await
            .unwrap();
        assert!(config.alarm_history_items().is_empty());
    }

    #[tokio::test]
    async fn a_bad_token_or_parameter_is_cloudwatchs_error() {
        let book = AlarmHistoryBook::default();
        book.record(item("lifeboat-nordic-errors", 0, "ALARM"));
        let (_proxy, cw) = cloudwatch(&book).await;
        let err = cw
            .describe_alarm_history()
            .next_token("not-a-token")
            .send()
            .await
            .unwrap_err();
        assert!(
            err.as_service_error().unwrap().is_invalid_next_token(),
            "{err:?}"
        );
        let err = cw
            .describe_alarm_history()
            .max_records(0)
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("InvalidParameterValue"), "{err:?}");
        assert!(err.message().unwrap().contains("MaxRecords 0"), "{err:?}");
    }
}

#[cfg(test)]
mod invoke_tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A server that answers every request `200 {}` and keeps each one's
    /// request line.
    async fn recorder() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    kept.lock()
                        .unwrap()
                        .push(text.lines().next().unwrap_or("").to_owned());
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                        )
                        .await;
                });
            }
        });
        (endpoint, seen)
    }

    #[tokio::test]
    async fn an_invoke_of_a_stack_function_runs_its_binary() {
        let (moto, at_moto) = recorder().await;
        let (watch, at_watch) = recorder().await;
        let routes = InvokeRoutes::default();
        let proxy = SerialProxy::start(moto, 0, AlarmHistoryBook::default(), routes.clone())
            .await
            .unwrap();
        let config =
            super::super::sdk_config_for(&format!("http://127.0.0.1:{}", proxy.port())).await;
        let lambda = aws_sdk_lambda::Client::new(&config);
        let invoke = |id: &'static str| lambda.invoke().function_name(id).send();

        // Before the suite says where: moto's, as every other call.
        invoke("lifeboat-CircuitSwitchFunction-1A2B").await.unwrap();
        assert_eq!(at_watch.lock().unwrap().len(), 0);

        routes.set(
            &watch,
            BTreeMap::from([(
                "lifeboat-CircuitSwitchFunction-1A2B".to_owned(),
                "circuit-switch".to_owned(),
            )]),
        );
        for id in [
            "lifeboat-CircuitSwitchFunction-1A2B",
            "lifeboat-CircuitSwitchFunction-1A2B:live",
            "arn:aws:lambda:us-east-1:123456789012:function:lifeboat-CircuitSwitchFunction-1A2B:live",
        ] {
            invoke(id).await.unwrap();
        }
        assert_eq!(
            *at_watch.lock().unwrap(),
            vec!["POST /2015-03-31/functions/circuit-switch/invocations HTTP/1.1"; 3]
        );
        // Another function is still moto's.
        invoke("lifeboat-SomethingElse-9Z").await.unwrap();
        let at_moto = at_moto.lock().unwrap();
        assert_eq!(at_moto.len(), 2, "{at_moto:?}");
        assert!(
            at_moto[1].contains("lifeboat-SomethingElse-9Z"),
            "{at_moto:?}"
        );
    }
}
