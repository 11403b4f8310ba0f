//! The legacy booking system's off-sale switch over HTTP.
//!
//! Contract: `PUT` (or `POST`) to the configured URL, where `{operator}` is
//! replaced by the operator id (`https://legacy.example/operators/{operator}/sale-status`),
//! with the JSON body `{"operator": "nordic", "status": "off_sale", "version": 7}`
//! (`status` is `on_sale` or `off_sale`; `version` is the breaker version that
//! asked, so the legacy side can refuse an older one if it keeps versions) and,
//! when configured, one authentication header. Any `2xx` is success; anything
//! else, redirects included (they are not followed), is an error naming the
//! status. Each write is bounded by the configured timeout, connecting by at
//! most one second of it.

use std::error::Error as StdError;
use std::time::Duration;

use async_trait::async_trait;
use lifeboat_core::OperatorId;
use lifeboat_core::events::SaleStatus;
use lifeboat_core::ports::{SaleSwitch, SaleSwitchError};
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Url};

/// The placeholder in the URL template that is replaced by the operator id.
pub const OPERATOR_PLACEHOLDER: &str = "{operator}";

/// Why an HTTP sale switch cannot be set up. Never echoes the auth value.
#[derive(Debug, thiserror::Error)]
pub enum HttpSwitchError {
    #[error("sale switch url {template:?} is not a valid url: {reason}")]
    BadUrl { template: String, reason: String },
    #[error(
        "sale switch url {0:?} must start with https:// (http:// only to a loopback address: the auth header and the status would cross the network in the clear)"
    )]
    BadScheme(String),
    #[error("sale switch method {0:?} is not supported: use PUT or POST")]
    BadMethod(String),
    #[error("sale switch auth header name {0:?} is not a valid header name")]
    BadHeaderName(String),
    #[error("sale switch auth header value is not a valid header value")]
    BadHeaderValue,
    #[error("cannot build the http client: {0}")]
    Client(#[source] reqwest::Error),
}

/// How to reach the legacy switch.
#[derive(Debug, Clone)]
pub struct HttpSwitchConfig {
    url_template: String,
    method: Method,
    /// Marked sensitive: Debug prints `Sensitive`, never the value.
    auth: Option<(HeaderName, HeaderValue)>,
    timeout: Duration,
}

impl HttpSwitchConfig {
    /// Check and keep the settings: the URL template must give an http(s) URL
    /// for any operator, the method must be `PUT` or `POST` (any case), the
    /// auth header a valid name and value.
    pub fn new(
        url_template: &str,
        method: &str,
        auth: Option<(&str, &str)>,
        timeout: Duration,
    ) -> Result<Self, HttpSwitchError> {
        let url_template = url_template.trim().to_owned();
        let sample = url_template.replace(OPERATOR_PLACEHOLDER, "operator-id");
        let url = Url::parse(&sample).map_err(|e| HttpSwitchError::BadUrl {
            template: url_template.clone(),
            reason: e.to_string(),
        })?;
        let loopback = url.host_str().is_some_and(lifeboat_core::is_loopback_host);
        let secure = url.scheme() == "https" || (url.scheme() == "http" && loopback);
        if !secure || url.cannot_be_a_base() {
            return Err(HttpSwitchError::BadScheme(url_template));
        }
        let method = match method.trim().to_ascii_uppercase().as_str() {
            "PUT" => Method::PUT,
            "POST" => Method::POST,
            _ => return Err(HttpSwitchError::BadMethod(method.to_owned())),
        };
        let auth = match auth {
            None => None,
            Some((name, value)) => {
                let name = HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| HttpSwitchError::BadHeaderName(name.to_owned()))?;
                let mut value =
                    HeaderValue::from_str(value).map_err(|_| HttpSwitchError::BadHeaderValue)?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        Ok(Self {
            url_template,
            method,
            auth,
            timeout,
        })
    }

    /// The same switch, sending header `name` with `value` on every write
    /// (a value read from a secret store at start).
    pub fn with_auth(mut self, name: &str, value: &str) -> Result<Self, HttpSwitchError> {
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| HttpSwitchError::BadHeaderName(name.to_owned()))?;
        let mut value =
            HeaderValue::from_str(value.trim()).map_err(|_| HttpSwitchError::BadHeaderValue)?;
        value.set_sensitive(true);
        self.auth = Some((name, value));
        Ok(self)
    }

    pub fn url_template(&self) -> &str {
        &self.url_template
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The auth header's name, if one is sent.
    pub fn auth_header(&self) -> Option<&HeaderName> {
        self.auth.as_ref().map(|(name, _)| name)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The legacy off-sale switch: one reqwest client for every write.
#[derive(Debug, Clone)]
pub struct HttpSaleSwitch {
    config: HttpSwitchConfig,
    client: reqwest::Client,
}

impl HttpSaleSwitch {
    /// The longest a connection attempt may take, timeout permitting.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

    pub fn new(config: HttpSwitchConfig) -> Result<Self, HttpSwitchError> {
        lifeboat_aws::tls::install_default_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Self::CONNECT_TIMEOUT.min(config.timeout))
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("lifeboat/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(HttpSwitchError::Client)?;
        Ok(Self { config, client })
    }

    pub fn config(&self) -> &HttpSwitchConfig {
        &self.config
    }

    /// The URL the writes for `operator` go to.
    pub fn url_for(&self, operator: &OperatorId) -> Result<Url, SaleSwitchError> {
        // Operator ids are lowercase letters, digits and '-': safe in a URL.
        Url::parse(
            &self
                .config
                .url_template
                .replace(OPERATOR_PLACEHOLDER, operator.as_str()),
        )
        .map_err(|_| SaleSwitchError::Unreachable("sale switch url is invalid".into()))
    }

    fn failure(&self, err: &reqwest::Error) -> SaleSwitchError {
        if err.is_timeout() {
            return SaleSwitchError::Timeout(self.config.timeout);
        }
        // The innermost causes, never the URL (it may carry a token).
        let mut causes = Vec::new();
        let mut source: Option<&(dyn StdError + 'static)> = err.source();
        while let Some(e) = source {
            causes.push(e.to_string());
            source = e.source();
        }
        let cause = causes
            .iter()
            .rev()
            .take(2)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join(": ");
        let what = if err.is_connect() {
            "cannot connect"
        } else if err.is_body() || err.is_decode() {
            "connection broke"
        } else {
            "no answer"
        };
        SaleSwitchError::Unreachable(if cause.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {cause}")
        })
    }
}

#[async_trait]
impl SaleSwitch for HttpSaleSwitch {
    async fn set(
        &self,
        operator: &OperatorId,
        status: SaleStatus,
        version: u64,
    ) -> Result<(), SaleSwitchError> {
        let body = serde_json::json!({
            "operator": operator,
            "status": status,
            "version": version,
        });
        let mut request = self
            .client
            .request(self.config.method.clone(), self.url_for(operator)?)
            .json(&body);
        if let Some((name, value)) = &self.config.auth {
            request = request.header(name.clone(), value.clone());
        }
        let response = request.send().await.map_err(|e| self.failure(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(SaleSwitchError::Rejected {
            status: status.as_u16(),
            reason: status
                .canonical_reason()
                .unwrap_or("unknown status")
                .to_owned(),
        })
    }
}

/// A stand-in legacy booking system on 127.0.0.1 for tests: records every
/// request and answers with the statuses it is given (204 when none is
/// queued; 0 means never answer).
#[cfg(test)]
pub(crate) mod legacy {
    use std::collections::{BTreeMap, VecDeque};
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    #[derive(Debug, Clone)]
    pub struct Seen {
        pub method: String,
        pub path: String,
        pub headers: BTreeMap<String, String>,
        pub body: serde_json::Value,
    }

    #[derive(Default)]
    struct Shared {
        seen: Mutex<Vec<Seen>>,
        answers: Mutex<VecDeque<u16>>,
    }

    pub struct Legacy {
        pub addr: SocketAddr,
        shared: Arc<Shared>,
        task: JoinHandle<()>,
    }

    impl Drop for Legacy {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl Legacy {
        pub async fn start() -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let shared = Arc::new(Shared::default());
            let serving = shared.clone();
            let task = tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let shared = serving.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req: Request<Incoming>| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(answer(&shared, req).await) }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
            Self { addr, shared, task }
        }

        /// `http://127.0.0.1:<port>` followed by `path`.
        pub fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.addr)
        }

        /// Answer the next requests with these statuses, in order.
        pub fn answer_with(&self, statuses: &[u16]) {
            self.shared
                .answers
                .lock()
                .unwrap()
                .extend(statuses.iter().copied());
        }

        pub fn seen(&self) -> Vec<Seen> {
            self.shared.seen.lock().unwrap().clone()
        }
    }

    async fn answer(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        shared.seen.lock().unwrap().push(Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                .collect(),
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        });
        let status = shared.answers.lock().unwrap().pop_front().unwrap_or(204);
        if status == 0 {
            std::future::pending::<()>().await;
        }
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        if (300..400).contains(&status) {
            response.headers_mut().insert(
                hyper::header::LOCATION,
                hyper::header::HeaderValue::from_static("http://127.0.0.1:9/elsewhere"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::legacy::Legacy;
    use super::*;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn switch(
        url: &str,
        method: &str,
        auth: Option<(&str, &str)>,
        timeout_ms: u64,
    ) -> HttpSaleSwitch {
        HttpSaleSwitch::new(
            HttpSwitchConfig::new(url, method, auth, Duration::from_millis(timeout_ms)).unwrap(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_write_puts_the_documented_body_with_the_auth_header() {
        let legacy = Legacy::start().await;
        let http = switch(
            &legacy.url("/operators/{operator}/sale-status"),
            "put",
            Some(("X-Api-Key", "s3cret")),
            2000,
        );
        http.set(&nordic(), SaleStatus::OffSale, 7).await.unwrap();
        let seen = legacy.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, "PUT");
        assert_eq!(seen[0].path, "/operators/nordic/sale-status");
        assert_eq!(seen[0].headers["x-api-key"], "s3cret");
        assert_eq!(seen[0].headers["content-type"], "application/json");
        assert_eq!(
            seen[0].body,
            serde_json::json!({"operator": "nordic", "status": "off_sale", "version": 7})
        );
        // The secret never shows in Debug output.
        assert!(!format!("{http:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn anything_but_2xx_is_an_error_naming_the_status() {
        let legacy = Legacy::start().await;
        let http = switch(&legacy.url("/sale-status"), "POST", None, 2000);
        legacy.answer_with(&[503, 302, 200]);
        let err = http
            .set(&nordic(), SaleStatus::OnSale, 8)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sale switch answered 503 Service Unavailable"
        );
        // Redirects are not followed.
        assert!(matches!(
            http.set(&nordic(), SaleStatus::OnSale, 8).await,
            Err(SaleSwitchError::Rejected { status: 302, .. })
        ));
        http.set(&nordic(), SaleStatus::OnSale, 8).await.unwrap();
        let seen = legacy.seen();
        assert_eq!(seen.len(), 3);
        assert!(
            seen.iter()
                .all(|s| s.method == "POST" && s.path == "/sale-status")
        );
        assert_eq!(seen[2].body["status"], "on_sale");
        assert!(!seen[0].headers.contains_key("x-api-key"));
    }

    #[tokio::test]
    async fn a_silent_switch_times_out() {
        let legacy = Legacy::start().await;
        legacy.answer_with(&[0]);
        let http = switch(&legacy.url("/{operator}"), "PUT", None, 150);
        let err = http
            .set(&nordic(), SaleStatus::OffSale, 1)
            .await
            .unwrap_err();
        assert_eq!(err, SaleSwitchError::Timeout(Duration::from_millis(150)));
        assert_eq!(err.to_string(), "sale switch did not answer within 150 ms");
    }

    #[tokio::test]
    async fn an_unreachable_switch_says_so_without_the_url() {
        // A port that was free a moment ago: nothing listens there.
        let port = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().port()
        };
        let http = switch(
            &format!("http://127.0.0.1:{port}/{{operator}}?token=abc"),
            "PUT",
            None,
            2000,
        );
        let err = http
            .set(&nordic(), SaleStatus::OffSale, 1)
            .await
            .unwrap_err();
        let SaleSwitchError::Unreachable(why) = &err else {
            panic!("expected unreachable, got {err}");
        };
        assert!(why.starts_with("cannot connect"), "{why}");
        assert!(!why.contains("token"), "{why}");
    }

    #[test]
    fn bad_settings_are_refused_at_start() {
        let t = Duration::from_secs(1);
        let cases = [
            HttpSwitchConfig::new("legacy.example/{operator}", "PUT", None, t),
            HttpSwitchConfig::new("ftp://legacy.example/{operator}", "PUT", None, t),
            HttpSwitchConfig::new("https://legacy.example/{operator}", "GET", None, t),
            HttpSwitchConfig::new("https://legacy.example", "PUT", Some(("bad name", "v")), t),
            HttpSwitchConfig::new("https://legacy.example", "PUT", Some(("x-key", "a\nb")), t),
            HttpSwitchConfig::new("http://legacy.example/{operator}", "PUT", None, t),
            HttpSwitchConfig::new("http://10.0.0.7/{operator}", "PUT", None, t),
        ];
        let errors: Vec<String> = cases
            .into_iter()
            .map(|c| c.unwrap_err().to_string())
            .collect();
        assert!(errors[0].contains("not a valid url"), "{}", errors[0]);
        assert!(errors[1].contains("http://"), "{}", errors[1]);
        assert!(errors[2].contains("PUT or POST"), "{}", errors[2]);
        assert!(errors[3].contains("header name"), "{}", errors[3]);
        assert!(!errors[4].contains("a\nb"), "{}", errors[4]);
        assert!(errors[5].contains("https://"), "{}", errors[5]);
        assert!(errors[6].contains("loopback"), "{}", errors[6]);
        for local in [
            "http://127.0.0.1:8080/{operator}",
            "http://[::1]/x",
            "http://localhost/x",
        ] {
            assert!(
                HttpSwitchConfig::new(local, "PUT", None, t).is_ok(),
                "{local}"
            );
        }
        let ok = HttpSwitchConfig::new(" https://legacy.example/ops/{operator} ", "post", None, t)
            .unwrap();
        assert_eq!(ok.method(), Method::POST);
        assert_eq!(
            HttpSaleSwitch::new(ok)
                .unwrap()
                .url_for(&nordic())
                .unwrap()
                .as_str(),
            "https://legacy.example/ops/nordic"
        );
    }
}
