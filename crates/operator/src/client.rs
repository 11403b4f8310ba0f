//! The operator API over HTTP.
//!
//! Call contract (docs/operator-api.json): `GET {base}/{operation}?{params}`
//! (`operation` is `search`, `price` or `ping`, `params` the request's
//! parameters as the query string) with the header `x-request-id: <request
//! id>`. A search answer is a JSON object with a `sailings` array, a price
//! answer a JSON object with a `price` object. A booking is
//! `POST {base}/book` with a JSON body and the `Idempotency-Key` header
//! ([`crate::book`]), its parameters never in the URL; a booking without
//! its key is never sent.
//!
//! Every call is bounded by its budget's `timeout`, body included: a tokio
//! timeout wraps the whole exchange, and reqwest's own per-request timeout
//! and a 1 s connect timeout back it up (with a budget under 1 s the budget
//! bounds the connect too). Redirects are not followed: an operator API that
//! redirects is misconfigured, and its `3xx` counts as a bad payload.

use std::collections::{BTreeMap, HashMap};
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lifeboat_core::budget::Budget;
use lifeboat_core::ports::{OperatorApi, SecretsAt};
use lifeboat_core::request::{CallClass, CallResult, OperatorCall};
use lifeboat_core::{Operation, OperatorId};
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};

use crate::book::{self, IDEMPOTENCY_KEY_HEADER};
use crate::credentials::{Credential, CredentialError, Credentials};
use crate::payload;
use crate::urls::{OperatorUrls, OperatorUrlsError};

/// The header carrying the request id to the operator.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Why an [`HttpOperatorApi`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpApiError {
    /// The operator URL list is wrong.
    #[error(transparent)]
    Urls(#[from] OperatorUrlsError),
    /// The HTTP client could not be set up (TLS backend, …).
    #[error("cannot build the http client: {0}")]
    Client(#[source] reqwest::Error),
    /// The operators' credentials could not be read or used.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
}

/// The operator API client: one reqwest client, shared by every call, the
/// base URL of each operator and, where it wants one, its credential.
#[derive(Debug, Clone)]
pub struct HttpOperatorApi {
    urls: OperatorUrls,
    client: reqwest::Client,
    max_body_bytes: usize,
    credentials: Option<Arc<Credentials>>,
}

impl HttpOperatorApi {
    /// The longest a connection attempt may take, budget permitting.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Answers larger than this are refused as bad payloads, without reading
    /// the rest: what lifeboat keeps of an answer
    /// ([`lifeboat_core::request::MAX_ANSWER_BYTES`], 256 KiB).
    pub const DEFAULT_MAX_BODY_BYTES: usize = lifeboat_core::request::MAX_ANSWER_BYTES;

    /// A client for the operators in `urls`.
    pub fn new(urls: OperatorUrls) -> Result<Self, HttpApiError> {
        Ok(Self::with_client(
            urls,
            Self::default_client().map_err(HttpApiError::Client)?,
        ))
    }

    /// A client for `operator=url,…` (see [`OperatorUrls::parse`]).
    pub fn parse(spec: &str) -> Result<Self, HttpApiError> {
        Self::new(OperatorUrls::parse(spec)?)
    }

    /// A function's client: the operators of `endpoints` (`operator=url,…`),
    /// and, when `credentials` names a path of a secret store, each
    /// operator's credential kept there (read now, and again every
    /// [`DEFAULT_REFRESH`](crate::DEFAULT_REFRESH)).
    pub async fn configured(
        endpoints: &str,
        credentials: Option<SecretsAt<'_>>,
    ) -> Result<Self, HttpApiError> {
        let api = Self::parse(endpoints)?;
        Ok(match credentials {
            Some((path, store)) => api.with_credentials(Arc::new(
                Credentials::load(store, path, crate::DEFAULT_REFRESH).await?,
            )),
            None => api,
        })
    }

    /// A client for the operators in `map` (operator → base URL).
    pub fn from_map(map: HashMap<OperatorId, String>) -> Result<Self, HttpApiError> {
        Self::new(OperatorUrls::from_map(map)?)
    }

    /// A client that sends through `client` (its settings are used as they
    /// are; every call still carries its own budget timeout).
    pub fn with_client(urls: OperatorUrls, client: reqwest::Client) -> Self {
        Self {
            urls,
            client,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            credentials: None,
        }
    }

    /// Send each operator's credential (if it has one) with every call.
    pub fn with_credentials(mut self, credentials: Arc<Credentials>) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Refuse answers larger than `bytes` as bad payloads.
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The reqwest client [`new`](Self::new) uses: 1 s connect timeout, no
    /// redirects.
    pub fn default_client() -> Result<reqwest::Client, reqwest::Error> {
        // reqwest has no crypto provider of its own in the functions' build:
        // rustls on ring, as the SDK's client (lifeboat_aws::tls). Err: one
        // is installed already, and it stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .connect_timeout(Self::CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("lifeboat/", env!("CARGO_PKG_VERSION")))
            .build()
    }

    /// The operators this client can reach.
    pub fn urls(&self) -> &OperatorUrls {
        &self.urls
    }

    /// The URL one call goes to.
    fn endpoint(base: &Url, operation: Operation, params: &BTreeMap<String, String>) -> Url {
        let mut url = base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().push(operation.as_str());
        }
        if !params.is_empty() {
            url.query_pairs_mut().extend_pairs(params);
        }
        url
    }

    /// Send the request and read the answer (the body only for a 2xx, and
    /// the start of a booking's 4xx): a GET, or with `post` a POST of its
    /// body and key.
    async fn exchange(
        &self,
        url: Url,
        post: Option<Post>,
        request_id: HeaderValue,
        credential: Option<Credential>,
        budget: &Budget,
    ) -> Result<(u16, Vec<u8>), Failure> {
        let refusal_read = post.is_some();
        let request = match post {
            None => self.client.get(url),
            Some(Post { key, body }) => self
                .client
                .post(url)
                .header(HeaderName::from_static(IDEMPOTENCY_KEY_HEADER), key)
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body),
        };
        let mut request = request
            .header(HeaderName::from_static(REQUEST_ID_HEADER), request_id)
            .header(ACCEPT, HeaderValue::from_static("application/json"))
            .timeout(budget.timeout);
        if let Some(credential) = credential {
            request = request.header(credential.header, credential.value);
        }
        let mut response = request.send().await.map_err(Failure::Transport)?;
        let status = response.status().as_u16();
        if refusal_read && response.status().is_client_error() {
            // A booking's refusal says why, for the person who looks at
            // the parked order: its first bytes only.
            let mut body = Vec::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                body.extend_from_slice(&chunk);
                if body.len() >= payload::MAX_REFUSAL_BYTES {
                    break;
                }
            }
            body.truncate(payload::MAX_REFUSAL_BYTES);
            return Ok((status, body));
        }
        if !response.status().is_success() {
            return Ok((status, Vec::new()));
        }
        let too_large = Failure::TooLarge(self.max_body_bytes);
        if response
            .content_length()
            .is_some_and(|len| len > u64::try_from(self.max_body_bytes).unwrap_or(u64::MAX))
        {
            return Err(too_large);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(Failure::Transport)? {
            if body.len().saturating_add(chunk.len()) > self.max_body_bytes {
                return Err(too_large);
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    }
}

/// What a POST sends beside the request id: a booking's key and body.
struct Post {
    key: HeaderValue,
    body: String,
}

impl Post {
    /// A booking's POST from the call's parameters, or why it is not sent.
    fn booking(params: &BTreeMap<String, String>) -> Result<Self, String> {
        let (key, order) = book::request_of(params).map_err(|e| e.to_string())?;
        let key =
            HeaderValue::from_str(&key).map_err(|_| book::BookParamsError::BadKey.to_string())?;
        let body = serde_json::to_string(&order).map_err(|e| e.to_string())?;
        Ok(Self { key, body })
    }
}

/// An exchange that produced no answer to classify by status.
enum Failure {
    Transport(reqwest::Error),
    TooLarge(usize),
}

impl Failure {
    fn into_result(self, elapsed: Duration, budget: &Budget) -> CallResult {
        let err = match self {
            Failure::TooLarge(max) => {
                return CallResult {
                    class: CallClass::BadPayload,
                    elapsed,
                    body: None,
                    detail: format!("answer larger than {max} bytes"),
                };
            }
            Failure::Transport(err) => err,
        };
        if err.is_connect() {
            return payload::connect_failed(
                elapsed,
                format!("cannot connect: {}", Cause::of(&err)),
            );
        }
        if err.is_timeout() {
            return payload::timed_out(elapsed, budget);
        }
        if err.is_builder() {
            return payload::not_sent(400, "request could not be built");
        }
        if err.is_body() || err.is_decode() {
            return payload::connect_failed(
                elapsed,
                format!("connection broke reading the answer: {}", Cause::of(&err)),
            );
        }
        payload::connect_failed(elapsed, format!("no answer: {}", Cause::of(&err)))
    }
}

/// A short, secret-free name for what went wrong on the wire: the kind of
/// the innermost I/O error, or what hyper says of the connection. Never the
/// URL, never a Debug dump.
struct Cause(&'static str);

impl Cause {
    fn of(err: &reqwest::Error) -> Self {
        let mut hint = "connection failed";
        let mut source: Option<&(dyn StdError + 'static)> = err.source();
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return Cause(match io.kind() {
                    io::ErrorKind::ConnectionRefused => "connection refused",
                    io::ErrorKind::ConnectionReset => "connection reset",
                    io::ErrorKind::ConnectionAborted => "connection aborted",
                    io::ErrorKind::TimedOut => "timed out",
                    io::ErrorKind::UnexpectedEof => "connection closed early",
                    io::ErrorKind::AddrNotAvailable | io::ErrorKind::NetworkUnreachable => {
                        "network unreachable"
                    }
                    io::ErrorKind::HostUnreachable => "host unreachable",
                    _ => "i/o error",
                });
            }
            if let Some(h) = e.downcast_ref::<hyper::Error>() {
                if h.is_incomplete_message() {
                    hint = "connection closed without an answer";
                } else if h.is_timeout() {
                    hint = "timed out";
                } else if h.is_parse() {
                    hint = "answer is not http";
                } else if h.is_closed() || h.is_canceled() {
                    hint = "connection closed";
                }
            }
            source = e.source();
        }
        if err.is_connect() && err.is_timeout() {
            hint = "timed out";
        }
        Cause(hint)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

#[async_trait]
impl OperatorApi for HttpOperatorApi {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.urls.get(operator).is_some()
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        let Some(base) = self.urls.get(&call.operator) else {
            return payload::not_sent(404, format!("unknown operator {}", call.operator));
        };
        let Ok(request_id) = HeaderValue::from_str(&call.request_id) else {
            return payload::not_sent(400, "request id is not a valid header value");
        };
        let (url, post) = if call.operation == Operation::Book {
            match Post::booking(&call.params) {
                // Nothing of the order in the URL: the body carries it.
                Ok(post) => (
                    Self::endpoint(base, call.operation, &BTreeMap::new()),
                    Some(post),
                ),
                Err(why) => return payload::not_sent(400, why),
            }
        } else {
            (Self::endpoint(base, call.operation, &call.params), None)
        };
        let budget = call.budget;
        let started = tokio::time::Instant::now();
        let credential = match &self.credentials {
            Some(credentials) => credentials.for_operator(&call.operator).await,
            None => None,
        };
        let result = tokio::time::timeout(
            budget.timeout,
            self.exchange(url, post, request_id, credential, &budget),
        )
        .await;
        let elapsed = started.elapsed();
        let result = match result {
            Err(_) => payload::timed_out(elapsed, &budget),
            Ok(Err(failure)) => failure.into_result(elapsed, &budget),
            Ok(Ok((status, body))) => {
                payload::classify_answer(call.operation, status, body, elapsed, &budget)
            }
        };
        tracing::debug!(
            operator = %call.operator,
            operation = %call.operation,
            request_id = %call.request_id,
            class = result.class.name(),
            elapsed_ms = payload::millis(result.elapsed),
            "operator call"
        );
        result
    }
}

#[cfg(test)]
mod tests;
