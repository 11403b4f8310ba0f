//! Where each operator's API lives: `operator=url,…` (as in
//! `OPERATOR_ENDPOINTS`) read into [`OperatorUrls`], each entry checked
//! (a URL over https, http only on loopback, no credentials in it, no
//! operator twice), and every error naming its entry redacted.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use lifeboat_core::OperatorId;
use lifeboat_core::operator::InvalidOperatorId;
use reqwest::Url;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HttpOperatorApi;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
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
}
