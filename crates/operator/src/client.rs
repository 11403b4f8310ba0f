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
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lifeboat_core::budget::Budget;
use lifeboat_core::operator::InvalidOperatorId;
use lifeboat_core::ports::{OperatorApi, SecretsAt};
use lifeboat_core::request::{CallClass, CallResult, OperatorCall};
use lifeboat_core::{Operation, OperatorId};
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};

use crate::book::{self, IDEMPOTENCY_KEY_HEADER};
use crate::credentials::{Credential, CredentialError, Credentials};
use crate::payload;

/// The header carrying the request id to the operator.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Why an operator URL list cannot be used. Each names the offending entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorUrlsError {
    /// The entry is not `operator=url`.
    #[error("operator url entry {entry:?} is not operator=url")]
    NotAPair { entry: String },
    /// The part before `=` is not a valid operator id.
    #[error("operator url entry {entry:?}: {source}")]
    BadOperator {
        entry: String,
        #[source]
        source: InvalidOperatorId,
    },
    /// The part after `=` is not a URL.
    #[error("operator url entry {entry:?}: invalid url: {reason}")]
    BadUrl { entry: String, reason: String },
    /// The URL is not `http` or `https`.
    #[error("operator url entry {entry:?}: url must start with http:// or https://")]
    BadScheme { entry: String },
    /// `http://` to a host that is not this machine: prices could be read
    /// and changed on the way, and then confirmed to customers.
    #[error(
        "operator url entry {entry:?}: operator APIs are called over https (http only on loopback)"
    )]
    Insecure { entry: String },
    /// `user:password@` in the URL: it would travel in the stack's parameters
    /// and the functions' environment.
    #[error(
        "operator url entry {entry:?}: no credentials in the url; keep them under OPERATOR_CREDENTIALS_PATH"
    )]
    CredentialsInUrl { entry: String },
    /// The same operator appears twice.
    #[error("operator url entry {entry:?}: operator {operator} is already listed")]
    Duplicate { entry: String, operator: OperatorId },
}

/// Where each operator's API lives: operator id → base URL.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OperatorUrls {
    urls: BTreeMap<OperatorId, Url>,
}

/// Environment variable: each operator's API base URL,
/// `operator=base-url,…` ([`OperatorUrls::parse`]).
pub const OPERATOR_ENDPOINTS: &str = "OPERATOR_ENDPOINTS";

impl OperatorUrls {
    /// Parse a comma-separated list of `operator=base-url` entries, such as
    /// `nordic=https://api.nordic.example,baltic=http://127.0.0.1:8080`.
    /// Whitespace around entries is ignored, and so are empty entries.
    pub fn parse(spec: &str) -> Result<Self, OperatorUrlsError> {
        let mut urls = Self::default();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            // Errors show the entry redacted, whatever is wrong with it: an
            // entry without `=` or with its URL where the operator should
            // be may still hold a key or credentials.
            let Some((operator, url)) = entry.split_once('=') else {
                return Err(OperatorUrlsError::NotAPair {
                    entry: redacted(entry),
                });
            };
            let operator = OperatorId::new(operator.trim()).map_err(|InvalidOperatorId(id)| {
                OperatorUrlsError::BadOperator {
                    entry: redacted(entry),
                    source: InvalidOperatorId(redacted(&id)),
                }
            })?;
            urls.insert_entry(entry, operator, url.trim())?;
        }
        Ok(urls)
    }

    /// Build the list from a map of operator → base URL.
    pub fn from_map(map: HashMap<OperatorId, String>) -> Result<Self, OperatorUrlsError> {
        let mut urls = Self::default();
        let mut entries: Vec<_> = map.into_iter().collect();
        entries.sort();
        for (operator, url) in entries {
            let entry = format!("{operator}={url}");
            urls.insert_entry(&entry, operator, url.trim())?;
        }
        Ok(urls)
    }

    /// The base URL of `operator`, if listed.
    pub fn get(&self, operator: &OperatorId) -> Option<&Url> {
        self.urls.get(operator)
    }

    /// The listed operators, in order.
    pub fn operators(&self) -> impl Iterator<Item = &OperatorId> {
        self.urls.keys()
    }

    /// How many operators are listed.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Whether no operator is listed.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    fn insert_entry(
        &mut self,
        entry: &str,
        operator: OperatorId,
        url: &str,
    ) -> Result<(), OperatorUrlsError> {
        let entry = redacted(entry);
        let mut url = Url::parse(url).map_err(|e| OperatorUrlsError::BadUrl {
            entry: entry.clone(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
            return Err(OperatorUrlsError::BadScheme { entry });
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(OperatorUrlsError::CredentialsInUrl { entry });
        }
        if url.scheme() == "http" && !url.host_str().is_some_and(lifeboat_core::is_loopback_host) {
            return Err(OperatorUrlsError::Insecure { entry });
        }
        url.set_fragment(None);
        if self.urls.contains_key(&operator) {
            return Err(OperatorUrlsError::Duplicate { entry, operator });
        }
        self.urls.insert(operator, url);
        Ok(())
    }
}

/// `entry` as errors and logs may show it: whatever sits between `://` and
/// an `@` (credentials) and everything after a `?` (keys are sent that way
/// too) replaced by `***`.
fn redacted(entry: &str) -> String {
    let mut shown = entry.to_owned();
    if let Some(query) = shown.find('?') {
        shown.replace_range(query + 1.., "***");
    }
    if let Some(scheme_end) = shown.find("://").map(|i| i + 3)
        && let Some(at) = shown[scheme_end..].find('@')
    {
        shown.replace_range(scheme_end..scheme_end + at, "***");
    }
    shown
}

/// Each operator and its base URL, the URL's query (which may carry a key)
/// left out.
impl fmt::Debug for OperatorUrls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.urls.iter().map(|(operator, url)| {
                let mut shown = url.clone();
                if shown.query().is_some() {
                    shown.set_query(Some("***"));
                }
                (operator.to_string(), shown.to_string())
            }))
            .finish()
    }
}

impl FromStr for OperatorUrls {
    type Err = OperatorUrlsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

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
mod tests {
    use std::sync::Arc;

    use lifeboat_core::SystemClock;

    use super::*;
    use crate::server::SimServer;
    use crate::sim::{OutageMode, SimConfig, SimulatedOperator};

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    /// A simulated operator over HTTP answering in tens of milliseconds.
    async fn server() -> SimServer {
        let sim = SimulatedOperator::new(nordic(), SimConfig::quick(), Arc::new(SystemClock));
        SimServer::start(sim, 0).await.unwrap()
    }

    fn api(base: &str) -> HttpOperatorApi {
        HttpOperatorApi::parse(&format!("nordic={base}")).unwrap()
    }

    fn call(operation: Operation, timeout_ms: u64) -> OperatorCall {
        OperatorCall {
            request_id: "req-42".into(),
            operator: nordic(),
            operation,
            params: [
                ("from", "HEL"),
                ("to", "Saint Petersburg"),
                ("date", "2025-06-01"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            budget: Budget::with_timeout(Duration::from_millis(timeout_ms)),
        }
    }

    #[test]
    fn operator_urls_parse_and_name_the_bad_entry() {
        let urls = OperatorUrls::parse(
            " nordic=https://api.nordic.example, baltic=http://127.0.0.1:8080/v1/ ,",
        )
        .unwrap();
        assert_eq!(urls.len(), 2);
        let baltic = OperatorId::new("baltic").unwrap();
        assert_eq!(
            urls.get(&baltic).unwrap().as_str(),
            "http://127.0.0.1:8080/v1/"
        );
        assert_eq!(
            urls.operators().map(OperatorId::as_str).collect::<Vec<_>>(),
            ["baltic", "nordic"]
        );
        assert!(OperatorUrls::parse("").unwrap().is_empty());

        let err = OperatorUrls::parse("nordic=https://a.example,baltic").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"operator url entry "baltic" is not operator=url"#
        );
        let err = OperatorUrls::parse("Nordic=https://a.example").unwrap_err();
        assert!(matches!(err, OperatorUrlsError::BadOperator { .. }));
        assert!(
            err.to_string().starts_with(
                r#"operator url entry "Nordic=https://a.example": invalid operator id"#
            )
        );
        let err = OperatorUrls::parse("nordic=not a url").unwrap_err();
        assert!(matches!(err, OperatorUrlsError::BadUrl { .. }), "{err}");
        let err = OperatorUrls::parse("nordic=ftp://a.example").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"operator url entry "nordic=ftp://a.example": url must start with http:// or https://"#
        );
        let err =
            OperatorUrls::parse("nordic=https://a.example,nordic=https://b.example").unwrap_err();
        assert!(matches!(err, OperatorUrlsError::Duplicate { .. }));

        let map = HashMap::from([(nordic(), "https://api.nordic.example".to_owned())]);
        assert_eq!(OperatorUrls::from_map(map).unwrap().len(), 1);
        let bad = HashMap::from([(nordic(), "nope".to_owned())]);
        assert!(
            OperatorUrls::from_map(bad)
                .unwrap_err()
                .to_string()
                .contains("nordic=nope")
        );
    }

    #[test]
    fn operators_are_called_over_https_with_no_secret_in_the_url_or_its_errors() {
        for local in [
            "nordic=http://127.0.0.1:8080",
            "nordic=http://localhost:8080",
            "nordic=http://[::1]:8080",
        ] {
            assert!(OperatorUrls::parse(local).is_ok(), "{local}");
        }
        let err = OperatorUrls::parse("nordic=http://api.nordic.example").unwrap_err();
        assert!(matches!(err, OperatorUrlsError::Insecure { .. }), "{err}");
        let err = OperatorUrls::parse("nordic=https://me:s3cret@api.nordic.example").unwrap_err();
        assert!(
            matches!(err, OperatorUrlsError::CredentialsInUrl { .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("s3cret"), "{err}");
        let err = OperatorUrls::parse("nordic=ftp://me:s3cret@h.example/?key=k3y").unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("s3cret") && !text.contains("k3y"), "{text}");
        // An entry without its operator, or with the URL where the operator
        // goes, is shown redacted too (found by the operator_urls fuzz
        // target, docs/fuzzing.md).
        for entry in [
            "https://me:s3cret@h.example/?key=k3y",
            "https://h.example/?key=k3y",
            "nordic:https://me:s3cret@h.example/?key=k3y",
        ] {
            let err = OperatorUrls::parse(entry).unwrap_err();
            let text = format!("{err} {:?}", std::error::Error::source(&err));
            assert!(!text.contains("s3cret") && !text.contains("k3y"), "{text}");
        }
        let keyed = OperatorUrls::parse("nordic=https://h.example/api?key=k3y").unwrap();
        let shown = format!(
            "{keyed:?} {:?}",
            HttpOperatorApi::new(keyed.clone()).unwrap()
        );
        assert!(!shown.contains("k3y"), "{shown}");
        assert!(shown.contains("https://h.example/api?***"), "{shown}");
    }

    #[tokio::test]
    async fn each_operator_gets_its_own_credential_and_a_rotation_is_followed() {
        use lifeboat_core::memory::MemorySecretStore;
        let server = server().await;
        server.require_header("x-api-key", "one");
        let store = Arc::new(MemorySecretStore::new());
        store.put(
            "/lifeboat/operators/nordic",
            r#"{"header": "x-api-key", "value": "one"}"#,
        );
        // Read again at every call: the rotation below is seen at once.
        let credentials =
            crate::Credentials::load(store.clone(), "/lifeboat/operators", Duration::ZERO)
                .await
                .unwrap();
        let bare = api(&server.base_url());
        let keyed = bare.clone().with_credentials(Arc::new(credentials));
        let refused = bare.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(
            refused.class,
            CallClass::ClientError { status: 401 },
            "{}",
            refused.detail
        );
        let answered = keyed.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(answered.class, CallClass::Ok, "{}", answered.detail);
        // The operator rotates its key; lifeboat follows once it is kept.
        server.require_header("x-api-key", "two");
        let stale = keyed.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(stale.class, CallClass::ClientError { status: 401 });
        store.put(
            "/lifeboat/operators/nordic",
            r#"{"header": "x-api-key", "value": "two"}"#,
        );
        let rotated = keyed.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(rotated.class, CallClass::Ok, "{}", rotated.detail);
        assert!(!format!("{keyed:?}").contains("two\""));
    }

    #[test]
    fn endpoints_append_the_operation_and_the_params() {
        let params: BTreeMap<String, String> = [
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "St P&x".to_owned()),
        ]
        .into();
        for base in ["http://h.example/api", "http://h.example/api/"] {
            let url =
                HttpOperatorApi::endpoint(&Url::parse(base).unwrap(), Operation::Search, &params);
            assert_eq!(
                url.as_str(),
                "http://h.example/api/search?from=HEL&to=St+P%26x"
            );
        }
        let keyed = Url::parse("https://h.example?key=k").unwrap();
        let url = HttpOperatorApi::endpoint(&keyed, Operation::Price, &BTreeMap::new());
        assert_eq!(url.as_str(), "https://h.example/price?key=k");
    }

    #[tokio::test]
    async fn a_healthy_answer_is_ok_and_carries_the_request() {
        let server = server().await;
        let api = api(&server.base_url());
        assert!(api.knows(&nordic()));
        let result = api.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(result.class, CallClass::Ok, "{}", result.detail);
        let body: serde_json::Value =
            serde_json::from_str(result.body.as_deref().unwrap()).unwrap();
        let first = &body["sailings"][0];
        assert_eq!(first["to"], "SAINT PETERSBURG");
        assert!(first["departs"].as_str().unwrap().starts_with("2025-06-01"));
        assert!(
            result.detail.starts_with("answered 200 in "),
            "{}",
            result.detail
        );
        assert_eq!(
            server.operator().last_request_id().as_deref(),
            Some("req-42")
        );

        let price = api.call(&call(Operation::Price, 2_000)).await;
        assert_eq!(price.class, CallClass::Ok, "{}", price.detail);
        assert!(price.body.unwrap().contains("amount_cents"));
        let ping = api.call(&call(Operation::Ping, 1_000)).await;
        assert_eq!(ping.class, CallClass::Ok, "{}", ping.detail);
        let stats = server.operator().stats();
        assert_eq!(
            (
                stats.total,
                stats.by_operation.search,
                stats.by_operation.price,
                stats.by_operation.ping
            ),
            (3, 1, 1, 1)
        );
    }

    #[tokio::test]
    async fn an_answer_after_slow_after_is_slow() {
        let server = server().await;
        let mut slow = call(Operation::Search, 2_000);
        slow.budget.slow_after = Duration::from_millis(1);
        let result = api(&server.base_url()).call(&slow).await;
        assert_eq!(result.class, CallClass::Slow, "{}", result.detail);
        assert!(result.body.is_some());
    }

    #[tokio::test]
    async fn a_hanging_operator_times_out_within_the_budget() {
        let server = server().await;
        server.operator().set_mode(Some(OutageMode::Hang));
        let result = api(&server.base_url())
            .call(&call(Operation::Search, 200))
            .await;
        assert_eq!(result.class, CallClass::Timeout, "{}", result.detail);
        assert!(result.elapsed >= Duration::from_millis(200));
        assert!(
            result.elapsed < Duration::from_millis(1_000),
            "{:?}",
            result.elapsed
        );
        assert_eq!(result.detail, "no answer within 200 ms");
        assert_eq!(server.operator().stats().by_mode.hang, 1);
    }

    #[tokio::test]
    async fn a_slow_outage_over_http_times_out() {
        let config = SimConfig {
            budgets: lifeboat_core::budget::Budgets {
                search: Budget::with_timeout(Duration::from_millis(150)),
                price: Budget::with_timeout(Duration::from_millis(150)),
                ..Default::default()
            },
            ..SimConfig::default()
        };
        let sim = SimulatedOperator::new(nordic(), config, Arc::new(SystemClock));
        sim.set_mode(Some(OutageMode::Slow));
        let server = SimServer::start(sim, 0).await.unwrap();
        let result = api(&server.base_url())
            .call(&call(Operation::Price, 200))
            .await;
        assert_eq!(result.class, CallClass::Timeout, "{}", result.detail);
    }

    #[tokio::test]
    async fn a_refusing_operator_is_a_connect_failure() {
        let server = server().await;
        server.operator().set_mode(Some(OutageMode::Refuse));
        let api = api(&server.base_url());
        let result = api.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(result.class, CallClass::Connect, "{}", result.detail);
        assert_eq!(
            result.detail,
            "no answer: connection closed without an answer"
        );
        assert!(result.elapsed < Duration::from_millis(1_000));
        // It comes back up: the client recovers on a fresh connection.
        server.operator().set_mode(None);
        assert_eq!(
            api.call(&call(Operation::Search, 2_000)).await.class,
            CallClass::Ok
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connect_failure() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let result = api(&format!("http://{addr}"))
            .call(&call(Operation::Search, 2_000))
            .await;
        assert_eq!(result.class, CallClass::Connect, "{}", result.detail);
        assert_eq!(result.detail, "cannot connect: connection refused");
    }

    #[tokio::test]
    async fn error_statuses_and_bad_payloads_are_classified() {
        let server = server().await;
        let api = api(&server.base_url());

        server.operator().set_mode(Some(OutageMode::ServerError));
        let down = api.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(down.class, CallClass::ServerError { status: 503 });
        assert!(
            down.detail.starts_with("operator answered 503"),
            "{}",
            down.detail
        );

        server.operator().set_mode(Some(OutageMode::Garbage));
        let garbage = api.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(garbage.class, CallClass::BadPayload);
        assert!(
            garbage.detail.starts_with("search answer is not json"),
            "{}",
            garbage.detail
        );

        server.operator().set_mode(None);
        let mut bad = call(Operation::Price, 2_000);
        bad.params.insert("passengers".into(), "0".into());
        assert_eq!(
            api.call(&bad).await.class,
            CallClass::ClientError { status: 400 }
        );

        let wrong_path =
            HttpOperatorApi::parse(&format!("nordic={}/v2", server.base_url())).unwrap();
        let missing = wrong_path.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(missing.class, CallClass::ClientError { status: 404 });

        let small = api.clone().with_max_body_bytes(10);
        let large = small.call(&call(Operation::Search, 2_000)).await;
        assert_eq!(large.class, CallClass::BadPayload);
        assert_eq!(large.detail, "answer larger than 10 bytes");
    }

    fn booking(key: Option<&str>, timeout_ms: u64) -> OperatorCall {
        let mut call = call(Operation::Book, timeout_ms);
        call.params = [
            ("sailing_id", "hel-tll-20991224-0730"),
            ("passengers", "2"),
            ("accommodation", "cabin"),
            ("extras", "breakfast"),
            ("max_price_cents", "100000"),
            ("currency", "EUR"),
        ]
        .into_iter()
        .chain(key.map(|k| ("idempotency_key", k)))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        call
    }

    #[tokio::test]
    async fn a_booking_is_posted_with_its_key_and_read_as_the_operator_meant_it() {
        use lifeboat_core::order::BookingAnswer;
        let server = server().await;
        let api = api(&server.base_url());
        let result = api.call(&booking(Some("lb-cart-1"), 2_000)).await;
        assert_eq!(result.class, CallClass::Ok, "{}", result.detail);
        let BookingAnswer::Booked { price_cents, .. } = BookingAnswer::from_call(&result) else {
            panic!("{result:?}");
        };
        // Priced as the price answer of the same order.
        let mut price = call(Operation::Price, 2_000);
        price.params = booking(None, 0).params;
        let quoted = api.call(&price).await;
        let quoted: serde_json::Value = serde_json::from_str(&quoted.body.unwrap()).unwrap();
        assert_eq!(quoted["price"]["amount_cents"], price_cents);
        // The same key for another order: the operator refuses it itself.
        let mut reused = booking(Some("lb-cart-1"), 2_000);
        reused.params.insert("passengers".into(), "3".into());
        let refused = BookingAnswer::from_call(&api.call(&reused).await);
        let BookingAnswer::Rejected {
            status: 422,
            detail,
        } = refused
        else {
            panic!("{refused:?}");
        };
        assert!(
            detail.ends_with(r#": idempotency key "lb-cart-1" was used for another order"#),
            "{detail}"
        );
        let stats = server.operator().stats();
        assert_eq!((stats.bookings, stats.by_operation.book), (1, 2));
        assert_eq!(
            server.operator().last_request_id().as_deref(),
            Some("req-42")
        );
    }

    #[tokio::test]
    async fn a_booking_without_its_key_is_never_sent() {
        let server = server().await;
        let api = api(&server.base_url());
        let result = api.call(&booking(None, 2_000)).await;
        assert_eq!(result.class, CallClass::ClientError { status: 400 });
        assert_eq!(
            result.detail,
            "a booking is never sent without its idempotency key"
        );
        let result = api.call(&booking(Some("two words"), 2_000)).await;
        assert_eq!(result.class, CallClass::ClientError { status: 400 });
        assert_eq!(server.operator().stats().total, 0, "nothing sent");
    }

    /// The operator books, then answers too late; the gateway's retry with
    /// the same key gets that booking back: one booking, one repeated call.
    #[tokio::test]
    async fn a_retried_booking_books_once() {
        use lifeboat_core::order::BookingAnswer;
        let server = server().await;
        let api = api(&server.base_url());
        server.operator().set_mode(Some(OutageMode::Slow));
        let lost = api.call(&booking(Some("lb-cart-7"), 300)).await;
        assert_eq!(lost.class, CallClass::Timeout, "{}", lost.detail);
        assert!(matches!(
            BookingAnswer::from_call(&lost),
            BookingAnswer::Unavailable { .. }
        ));
        server.operator().set_mode(None);
        let retried = api.call(&booking(Some("lb-cart-7"), 2_000)).await;
        assert!(
            matches!(
                BookingAnswer::from_call(&retried),
                BookingAnswer::Booked { .. }
            ),
            "{retried:?}"
        );
        let stats = server.operator().stats();
        assert_eq!((stats.bookings, stats.repeated_bookings), (1, 1));
    }

    #[tokio::test]
    async fn unknown_operators_and_bad_request_ids_are_not_sent() {
        let api = api("http://127.0.0.1:9");
        let mut stranger = call(Operation::Search, 2_000);
        stranger.operator = OperatorId::new("baltic").unwrap();
        assert!(!api.knows(&stranger.operator));
        let result = api.call(&stranger).await;
        assert_eq!(result.class, CallClass::ClientError { status: 404 });
        assert_eq!(result.detail, "unknown operator baltic");

        let mut bad_id = call(Operation::Search, 2_000);
        bad_id.request_id = "line\nbreak".into();
        assert_eq!(
            api.call(&bad_id).await.class,
            CallClass::ClientError { status: 400 }
        );
    }
}
