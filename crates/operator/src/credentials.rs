//! Operator credentials: the header each operator's API wants on every call,
//! kept out of parameters, environment variables and logs.
//!
//! Each operator's secret is an SSM SecureString parameter named after it
//! under one path (`OPERATOR_CREDENTIALS_PATH`, e.g.
//! `/lifeboat/prod/operators` holding `/lifeboat/prod/operators/nordic`),
//! whose value is JSON:
//!
//! ```json
//! {"header": "x-api-key", "value": "…"}
//! {"bearer": "…"}
//! ```
//!
//! (`bearer` sends `Authorization: Bearer …`). An operator with no parameter
//! is called without a credential. The whole path is read when an instance
//! starts (a secret that cannot be used stops it, naming the operator, never
//! the value) and again once [`Credentials::refresh_every`] has passed, so a
//! rotated secret is in use within that time; a refresh that fails keeps the
//! credentials already read and is tried again on the next call. Values are
//! marked sensitive (never printed by `Debug`, kept out of HTTP/2 header
//! compression tables).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lifeboat_core::OperatorId;
use lifeboat_core::ports::{SecretStore, StoreError};
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde::Deserialize;
use tokio::time::Instant;

/// How long credentials are used before the path is read again.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);

/// Why credentials cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The path is not an SSM path (`/` and segments of letters, digits,
    /// `_`, `.`, `-`).
    #[error("OPERATOR_CREDENTIALS_PATH {0:?} is not a parameter path such as /lifeboat/operators")]
    BadPath(String),
    /// The secret store could not be read.
    #[error("operator credentials under {path} not read: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: StoreError,
    },
    /// A secret is not `{"header": …, "value": …}` or `{"bearer": …}`, or
    /// names a header that is not one. The value is never repeated.
    #[error("operator credential {name} under {path}: {reason}")]
    Invalid {
        path: String,
        name: String,
        reason: String,
    },
}

/// One operator's credential: a header and its value.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub header: HeaderName,
    pub value: HeaderValue,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// A secret's value as kept.
#[derive(Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum Secret {
    Header { header: String, value: String },
    Bearer { bearer: String },
}

impl Credential {
    /// The credential a secret's text describes; `Err` says why, without
    /// the value.
    pub fn parse(text: &str) -> Result<Self, String> {
        let secret: Secret = serde_json::from_str(text).map_err(|_| {
            r#"not {"header": "<name>", "value": "<value>"} or {"bearer": "<token>"}"#.to_owned()
        })?;
        let (header, value) = match secret {
            Secret::Header { header, value } => (
                HeaderName::from_bytes(header.trim().as_bytes())
                    .map_err(|_| format!("{header:?} is not a header name"))?,
                value,
            ),
            Secret::Bearer { bearer } => (AUTHORIZATION, format!("Bearer {}", bearer.trim())),
        };
        if value.trim().is_empty() {
            return Err("the value is empty".to_owned());
        }
        let mut value = HeaderValue::from_str(value.trim())
            .map_err(|_| "the value is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        Ok(Self { header, value })
    }
}

/// Every operator's credential, read from one path of a [`SecretStore`] and
/// read again when stale.
pub struct Credentials {
    store: Arc<dyn SecretStore>,
    path: String,
    refresh_every: Duration,
    loaded: Mutex<Loaded>,
    /// Held by the one caller reading the store again; the others go on with
    /// what is loaded.
    refreshing: tokio::sync::Mutex<()>,
}

struct Loaded {
    at: Instant,
    by_operator: HashMap<OperatorId, Credential>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("path", &self.path)
            .field("refresh_every", &self.refresh_every)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Read every operator's credential under `path` now: an unreadable
    /// store or an unusable secret is an error, so an instance never starts
    /// half configured.
    pub async fn load(
        store: Arc<dyn SecretStore>,
        path: &str,
        refresh_every: Duration,
    ) -> Result<Self, CredentialError> {
        let path = checked_path(path)?;
        let by_operator = read(store.as_ref(), &path).await?;
        tracing::info!(
            path,
            operators = by_operator.len(),
            "operator credentials read"
        );
        Ok(Self {
            store,
            path,
            refresh_every,
            loaded: Mutex::new(Loaded {
                at: Instant::now(),
                by_operator,
            }),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// How long credentials are used before the path is read again.
    pub fn refresh_every(&self) -> Duration {
        self.refresh_every
    }

    /// The credential to send to `operator` (`None`: it needs none), read
    /// again first when stale. A failed read keeps what was loaded (logged;
    /// the next call tries again): an operator that rotated its secret
    /// answers 401 until the store can be read, which never trips a breaker.
    pub async fn for_operator(&self, operator: &OperatorId) -> Option<Credential> {
        if self.stale()
            && let Ok(_refreshing) = self.refreshing.try_lock()
            && self.stale()
        {
            match read(self.store.as_ref(), &self.path).await {
                Ok(by_operator) => {
                    *self.lock() = Loaded {
                        at: Instant::now(),
                        by_operator,
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "operator credentials not read again; the ones read before are kept");
                }
            }
        }
        self.lock().by_operator.get(operator).cloned()
    }

    fn stale(&self) -> bool {
        self.lock().at.elapsed() >= self.refresh_every
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.loaded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `path` without its trailing `/`, if it is a parameter path.
fn checked_path(path: &str) -> Result<String, CredentialError> {
    let trimmed = path.trim().trim_end_matches('/');
    let valid = trimmed.starts_with('/')
        && trimmed[1..].split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        });
    if valid {
        Ok(trimmed.to_owned())
    } else {
        Err(CredentialError::BadPath(path.to_owned()))
    }
}

async fn read(
    store: &dyn SecretStore,
    path: &str,
) -> Result<HashMap<OperatorId, Credential>, CredentialError> {
    let secrets =
        store
            .secrets_under(path)
            .await
            .map_err(|source| CredentialError::Unreadable {
                path: path.to_owned(),
                source,
            })?;
    let invalid = |name: &str, reason: String| CredentialError::Invalid {
        path: path.to_owned(),
        name: name.to_owned(),
        reason,
    };
    let mut by_operator = HashMap::new();
    for (name, text) in secrets {
        let operator = OperatorId::new(&name)
            .map_err(|e| invalid(&name, format!("the name is no operator id: {e}")))?;
        let credential = Credential::parse(&text).map_err(|reason| invalid(&name, reason))?;
        by_operator.insert(operator, credential);
    }
    Ok(by_operator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::memory::MemorySecretStore;

    const PATH: &str = "/lifeboat/operators";

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    #[test]
    fn secrets_are_headers_or_bearer_tokens_and_never_printed() {
        let keyed = Credential::parse(r#"{"header": "x-api-key", "value": "s3cret"}"#).unwrap();
        assert_eq!(keyed.header.as_str(), "x-api-key");
        assert_eq!(keyed.value, "s3cret");
        assert!(keyed.value.is_sensitive());
        assert!(!format!("{keyed:?}").contains("s3cret"));
        let bearer = Credential::parse(r#"{"bearer": "t0ken"}"#).unwrap();
        assert_eq!(bearer.header, AUTHORIZATION);
        assert_eq!(bearer.value, "Bearer t0ken");
        for bad in [
            "s3cret",
            r#"{"header": "x-api-key"}"#,
            r#"{"header": "bad header", "value": "s3cret"}"#,
            r#"{"header": "x-api-key", "value": " "}"#,
            r#"{"header": "x-api-key", "value": "s3c\u0001ret"}"#,
            r#"{"bearer": "t0ken", "extra": 1}"#,
        ] {
            let reason = Credential::parse(bad).unwrap_err();
            assert!(!reason.contains("s3cret"), "{bad}: {reason}");
        }
    }

    #[tokio::test]
    async fn a_bad_secret_or_path_stops_the_start_naming_the_operator_not_the_value() {
        let store = Arc::new(MemorySecretStore::new());
        store.put("/lifeboat/operators/nordic", "s3cret");
        let err = Credentials::load(store.clone(), PATH, DEFAULT_REFRESH)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("nordic") && !text.contains("s3cret"),
            "{text}"
        );
        for path in ["lifeboat", "/", "/a//b", "/a b"] {
            assert!(matches!(
                Credentials::load(store.clone(), path, DEFAULT_REFRESH).await,
                Err(CredentialError::BadPath(_))
            ));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_secret_is_used_once_the_refresh_time_has_passed() {
        let store = Arc::new(MemorySecretStore::new());
        store.put("/lifeboat/operators/nordic", r#"{"bearer": "one"}"#);
        store.put("/lifeboat/operators/below/baltic", r#"{"bearer": "no"}"#);
        let credentials = Credentials::load(store.clone(), "/lifeboat/operators/", DEFAULT_REFRESH)
            .await
            .unwrap();
        let value = |c: Option<Credential>| c.map(|c| c.value.to_str().unwrap().to_owned());
        assert_eq!(
            value(credentials.for_operator(&nordic()).await).as_deref(),
            Some("Bearer one")
        );
        assert_eq!(
            credentials
                .for_operator(&OperatorId::new("baltic").unwrap())
                .await,
            None
        );
        store.put("/lifeboat/operators/nordic", r#"{"bearer": "two"}"#);
        tokio::time::advance(DEFAULT_REFRESH / 2).await;
        assert_eq!(
            value(credentials.for_operator(&nordic()).await).as_deref(),
            Some("Bearer one")
        );
        tokio::time::advance(DEFAULT_REFRESH / 2).await;
        assert_eq!(
            value(credentials.for_operator(&nordic()).await).as_deref(),
            Some("Bearer two")
        );
        // A secret broken by hand: the last good ones stay in use.
        store.put("/lifeboat/operators/nordic", "oops");
        tokio::time::advance(DEFAULT_REFRESH).await;
        assert_eq!(
            value(credentials.for_operator(&nordic()).await).as_deref(),
            Some("Bearer two")
        );
    }
}
