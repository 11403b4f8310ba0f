//! The HTTP side shared by search and cart: a plain request and reply that
//! the handlers work on (so their tests need no Lambda event), problem
//! replies (RFC 9457 `application/problem+json`) and the conversions from and
//! to `lambda_http`, which accepts API Gateway HTTP API, REST API, ALB and
//! Function URL events alike.

use std::collections::BTreeMap;
use std::time::Duration;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Serialize;
use serde_json::{Value, json};

/// An HTTP request as the handlers see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    /// Every query parameter in order, repeated names included.
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Who the HTTP API's authorizer says is calling.
    pub caller: Caller,
}

/// The caller as API Gateway vouched for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Caller {
    /// No token's claims came with the request: the API checked a SigV4
    /// signature (`ApiAuth=iam`), or the request came from a local run or
    /// a test. Nothing names a person.
    #[default]
    Unnamed,
    /// The JWT authorizer (`ApiAuth=jwt`) validated a token: its subject,
    /// the `sub` claim, `None` when the token names none (or an empty one).
    Token { subject: Option<String> },
}

impl Caller {
    /// A caller with a token of `subject`.
    pub fn subject(subject: &str) -> Self {
        Self::Token {
            subject: Some(subject.to_owned()),
        }
    }
}

impl HttpRequest {
    pub fn get(path: &str, query: &[(&str, &str)]) -> Self {
        Self {
            method: "GET".into(),
            path: path.into(),
            query: query
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: Vec::new(),
            caller: Caller::Unnamed,
        }
    }

    pub fn with_json(method: &str, path: &str, body: &Value) -> Self {
        Self {
            method: method.into(),
            path: path.into(),
            query: Vec::new(),
            body: body.to_string().into_bytes(),
            caller: Caller::Unnamed,
        }
    }

    /// The same request from `caller`.
    pub fn from_caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// The path's segments after its leading `/`, a trailing `/` dropped
    /// (`/carts/c1/` → `carts`, `c1`). An empty segment inside the path
    /// stays one: `/carts//price` (a cart id that came as nothing, or as a
    /// newline URL parsing removes) is a cart `""` and its step, not the
    /// cart `price`.
    pub fn segments(&self) -> Vec<&str> {
        let path = self.path.strip_prefix('/').unwrap_or(&self.path);
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() {
            return Vec::new();
        }
        path.split('/').collect()
    }

    /// The query parameters as a map, checked: only `allowed` names, each at
    /// most once.
    pub fn query_map(&self, allowed: &[&str]) -> Result<BTreeMap<String, String>, Problem> {
        let mut map = BTreeMap::new();
        for (name, value) in &self.query {
            if !allowed.contains(&name.as_str()) {
                return Err(Problem::invalid(
                    name,
                    &format!("unknown parameter; expected one of {}", allowed.join(", ")),
                ));
            }
            if map.insert(name.clone(), value.clone()).is_some() {
                return Err(Problem::invalid(name, "given more than once"));
            }
        }
        Ok(map)
    }
}

/// A reply: status, extra headers and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Self::json(200, body)
    }

    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One parameter that was not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidParam {
    pub name: String,
    pub reason: String,
}

/// The header a problem reply carries besides its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemHeader {
    /// When to ask again (503).
    RetryAfter(Duration),
    /// The method this path takes (405).
    Allow(&'static str),
}

/// The most characters a problem repeats of one piece of the caller's
/// input; longer ones end in `…`.
pub const MAX_ECHO_CHARS: usize = 200;

/// `text`, cut to [`MAX_ECHO_CHARS`] characters.
fn echo(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// An error reply in RFC 9457 form. Details are written for the client and
/// never carry internal errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: u16,
    pub title: &'static str,
    pub detail: String,
    pub invalid_params: Vec<InvalidParam>,
    /// `Retry-After` (503) or `Allow` (405).
    pub header: Option<ProblemHeader>,
    /// Extra members of the problem object.
    pub extra: BTreeMap<&'static str, Value>,
}

impl Problem {
    pub fn new(status: u16, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            title,
            detail: detail.into(),
            invalid_params: Vec::new(),
            header: None,
            extra: BTreeMap::new(),
        }
    }

    /// 400 naming the parameter (or body field) at fault. What it echoes
    /// of the caller's input (a name, a reason quoting a value) is cut to
    /// [`MAX_ECHO_CHARS`] each, so a reply never grows with the input.
    pub fn invalid(name: &str, reason: &str) -> Self {
        let (name, reason) = (echo(name), echo(reason));
        let mut p = Self::new(400, "invalid request", format!("{name}: {reason}"));
        p.invalid_params.push(InvalidParam { name, reason });
        p
    }

    /// 400 for a missing parameter.
    pub fn missing(name: &str) -> Self {
        Self::invalid(name, "is required")
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(404, "not found", detail)
    }

    pub fn method_not_allowed(allowed: &'static str) -> Self {
        let mut p = Self::new(
            405,
            "method not allowed",
            format!("use {allowed} on this path"),
        );
        p.header = Some(ProblemHeader::Allow(allowed));
        p
    }

    /// 503 "unavailable right now" with a Retry-After.
    pub fn unavailable(detail: impl Into<String>, retry_after: Duration) -> Self {
        let mut p = Self::new(503, "unavailable right now", detail);
        p.header = Some(ProblemHeader::RetryAfter(retry_after));
        p
    }

    pub fn with(mut self, name: &'static str, value: Value) -> Self {
        self.extra.insert(name, value);
        self
    }

    pub fn reply(&self) -> Reply {
        let mut body = json!({
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        });
        if !self.invalid_params.is_empty() {
            body["invalid_params"] = json!(self.invalid_params);
        }
        let mut headers = vec![("content-type", "application/problem+json".to_owned())];
        if let Some(ProblemHeader::RetryAfter(after)) = self.header {
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            body["retry_after_s"] = json!(secs);
            headers.push(("retry-after", secs.to_string()));
        }
        if let Some(ProblemHeader::Allow(allow)) = self.header {
            headers.push(("allow", allow.to_owned()));
        }
        for (name, value) in &self.extra {
            body[*name] = value.clone();
        }
        Reply {
            status: self.status,
            headers,
            body,
        }
    }
}

impl From<Problem> for Reply {
    fn from(p: Problem) -> Self {
        p.reply()
    }
}

/// Serve HTTP events with `handler` until the runtime stops: the whole of a
/// lambda_http function's `main` after start-up.
pub async fn serve<H, F>(handler: H) -> Result<(), lambda_http::Error>
where
    H: Fn(HttpRequest) -> F + Sync,
    F: std::future::Future<Output = Reply> + Send,
{
    let handler = &handler;
    lambda_http::run(lambda_http::service_fn(
        move |request: Request| async move {
            Ok::<_, lambda_http::Error>(into_lambda(handler(from_lambda(&request)).await))
        },
    ))
    .await
}

/// The plain request of a Lambda HTTP event.
pub fn from_lambda(request: &Request) -> HttpRequest {
    let mut query: Vec<(String, String)> = request
        .query_string_parameters_ref()
        .map(|q| {
            q.iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    if query.is_empty() {
        // Events without pre-parsed parameters still carry the URI's query.
        if let Some(raw) = request.uri().query() {
            query = form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
        }
    }
    HttpRequest {
        method: request.method().as_str().to_owned(),
        path: request.uri().path().to_owned(),
        query,
        body: request.body().to_vec(),
        caller: caller_of(request),
    }
}

/// The caller of an HTTP API request: the claims API Gateway's JWT
/// authorizer put in `requestContext.authorizer.jwt` once it had checked
/// the token's signature, issuer, audience and expiry. A request without
/// them (SigV4, a local run, another kind of event) names nobody.
fn caller_of(request: &Request) -> Caller {
    let Some(RequestContext::ApiGatewayV2(context)) = request.request_context_ref() else {
        return Caller::Unnamed;
    };
    match context.authorizer.as_ref().and_then(|a| a.jwt.as_ref()) {
        Some(jwt) => Caller::Token {
            subject: jwt.claims.get("sub").filter(|s| !s.is_empty()).cloned(),
        },
        None => Caller::Unnamed,
    }
}

/// The Lambda HTTP response of a reply.
pub fn into_lambda(reply: Reply) -> Response<Body> {
    let mut builder = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(*name, value.as_str());
    }
    builder
        .body(Body::Text(reply.body.to_string()))
        .unwrap_or_else(|e| {
            // Only a header value of ours could be refused; answer plainly.
            tracing::error!(error = %e, "reply could not be built");
            let mut fallback = Response::new(Body::Text(
                r#"{"title":"internal error","status":500}"#.to_owned(),
            ));
            *fallback.status_mut() = lambda_http::http::StatusCode::INTERNAL_SERVER_ERROR;
            fallback
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_maps_refuse_unknown_and_repeated_names() {
        let ok = HttpRequest::get("/x", &[("a", "1"), ("b", "2")]);
        assert_eq!(ok.query_map(&["a", "b"]).map(|m| m.len()), Ok(2));
        let unknown = HttpRequest::get("/x", &[("c", "1")]).query_map(&["a"]);
        assert_eq!(
            unknown.map_err(|p| p.invalid_params[0].name.clone()),
            Err("c".to_owned())
        );
        let twice = HttpRequest::get("/x", &[("a", "1"), ("a", "2")]).query_map(&["a"]);
        assert!(twice.is_err());
    }

    #[test]
    fn an_empty_segment_inside_a_path_stays_one() {
        let segments = |path: &str| HttpRequest::get(path, &[]).segments().join("|");
        assert_eq!(segments("/carts/c1/"), "carts|c1");
        assert_eq!(segments("/sailings"), "sailings");
        assert_eq!(segments("/"), "");
        // A cart id that came as nothing: not the cart `price`.
        assert_eq!(segments("/carts//price"), "carts||price");
    }

    #[test]
    fn problems_echo_at_most_a_bounded_piece_of_the_input() {
        let long = "é".repeat(3 * 1024 * 1024);
        let problem = Problem::invalid(&long, &format!("unknown field `{long}`"));
        let reply = problem.reply();
        let text = reply.body.to_string();
        assert!(text.len() < 4 * MAX_ECHO_CHARS * 4, "{} bytes", text.len());
        assert!(problem.detail.ends_with('…'));
        let short = Problem::invalid("date", "is not a date");
        assert_eq!(short.detail, "date: is not a date");
    }

    #[test]
    fn unavailable_problems_carry_retry_after() {
        let reply = Problem::unavailable("down", Duration::from_millis(2500)).reply();
        assert_eq!(reply.status, 503);
        assert_eq!(reply.header("Retry-After"), Some("3"));
        assert_eq!(reply.body["retry_after_s"], 3);
        assert_eq!(reply.body["title"], "unavailable right now");
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(
            Problem::method_not_allowed("GET").reply().header("allow"),
            Some("GET")
        );
    }

    /// tests/events/http-api-get-sailings.json with `claims` in the JWT
    /// authorizer's place, as API Gateway adds them (`None`: as it is, the
    /// request of an API without a JWT authorizer).
    fn http_api_event(claims: Option<Value>) -> Request {
        let path = format!(
            "{}/../../tests/events/http-api-get-sailings.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut event: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        if let Some(claims) = claims {
            event["requestContext"]["authorizer"] =
                json!({"jwt": {"claims": claims, "scopes": null}});
        }
        lambda_http::request::from_str(&event.to_string()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_jwt_authorizers_subject_is_the_caller() {
        let claims = json!({
            "iss": "https://id.marketplace.example/",
            "aud": "lifeboat",
            "sub": "customer-7f3a",
            "exp": "1796036400",
        });
        let request = from_lambda(&http_api_event(Some(claims.clone())));
        assert_eq!(request.caller, Caller::subject("customer-7f3a"));
        assert_eq!(request.path, "/sailings", "the rest as before");

        let mut no_subject = claims.clone();
        if let Some(claims) = no_subject.as_object_mut() {
            claims.remove("sub");
        }
        assert_eq!(
            from_lambda(&http_api_event(Some(no_subject))).caller,
            Caller::Token { subject: None }
        );
        let mut empty = claims;
        empty["sub"] = json!("");
        assert_eq!(
            from_lambda(&http_api_event(Some(empty))).caller,
            Caller::Token { subject: None }
        );
        // SigV4 (ApiAuth=iam) and local runs: no claims, nobody named.
        assert_eq!(from_lambda(&http_api_event(None)).caller, Caller::Unnamed);
    }

    #[test]
    fn lambda_requests_keep_their_query() {
        let request = lambda_http::http::Request::builder()
            .method("GET")
            .uri("https://example.test/sailings?from=HEL&to=T%20L")
            .body(Body::Empty)
            .unwrap_or_else(|e| panic!("{e}"));
        let plain = from_lambda(&request);
        assert_eq!(plain.path, "/sailings");
        assert_eq!(
            plain.query,
            vec![
                ("from".to_owned(), "HEL".to_owned()),
                ("to".to_owned(), "T L".to_owned())
            ]
        );
    }
}
