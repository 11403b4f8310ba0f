//! The operators' endpoints: `OperatorUrls::parse` of lifeboat-operator,
//! which reads `OPERATOR_ENDPOINTS` (and the operator config table's
//! `endpoints`) when a function starts and `lifeboat config put` checks.
//!
//! Input: UTF-8 text is the list as it is (`operator=url,…`). Other bytes
//! pick the list's pieces from the vocabulary below, so the fuzzer writes
//! lists with schemes, credentials, queries and loopback hosts in them.
//!
//! Invariants: no panic; an accepted list has one operator per non-empty
//! entry, each with a base URL that is `https`, or `http` on a loopback
//! host, without credentials or a fragment; the list built from those URLs
//! (`OperatorUrls::from_map`) is the same list; the list as logs show it
//! (`Debug`) hides every query; a refused list's error shows the entry (and
//! an invalid operator id) with whatever sits between `://` and an `@` and
//! everything after a `?` replaced by `***`.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use lifeboat_operator::{OperatorUrls, OperatorUrlsError};

/// Pieces of endpoint lists: operators, separators, schemes, hosts, ports,
/// credentials, paths, queries and fragments.
const PIECES: &[&str] = &[
    "nordic",
    "baltic",
    "NORDIC",
    "bad op",
    "=",
    ",",
    " ",
    "https://",
    "http://",
    "ftp://",
    "mailto:",
    "data:text/plain,",
    "//",
    "api.nordic.example",
    "127.0.0.1",
    "127.1.2.3",
    "localhost",
    "LOCALHOST",
    "localhost.",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "0x7f.1",
    "2130706433",
    "xn--nrdic-fua.example",
    "nördic.example",
    ":8080",
    ":0",
    ":65536",
    "user:secret@",
    "key@",
    "@",
    "/v1",
    "/v1/",
    "/%2e%2e/",
    "?key=SECRET",
    "?",
    "#fragment",
    "\\",
    "%00",
    "\t",
];

fuzz_target!(|data: &[u8]| {
    let spec = match std::str::from_utf8(data) {
        Ok(text) => text.to_owned(),
        Err(_) => pieces(data),
    };
    match OperatorUrls::parse(&spec) {
        Ok(urls) => accepted(&spec, &urls),
        Err(error) => refused(&error),
    }
});

/// A list put together from [`PIECES`] as `data` chooses.
fn pieces(data: &[u8]) -> String {
    let mut u = Unstructured::new(data);
    let mut spec = String::new();
    while !u.is_empty() && spec.len() <= 512 {
        match u.choose(PIECES) {
            Ok(piece) => spec.push_str(piece),
            Err(_) => break,
        }
    }
    spec
}

fn accepted(spec: &str, urls: &OperatorUrls) {
    let entries = spec
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .count();
    assert_eq!(urls.len(), entries, "{spec:?}");
    let mut map = HashMap::new();
    for operator in urls.operators() {
        let Some(url) = urls.get(operator) else {
            panic!("{operator} is listed without a url");
        };
        match url.scheme() {
            "https" => {}
            "http" => assert!(
                url.host_str().is_some_and(lifeboat_core::is_loopback_host),
                "http to {url}"
            ),
            other => panic!("scheme {other} accepted: {url}"),
        }
        assert!(!url.cannot_be_a_base(), "{url}");
        assert!(
            url.username().is_empty() && url.password().is_none(),
            "{url}"
        );
        assert!(url.fragment().is_none(), "{url}");
        map.insert(operator.clone(), url.to_string());
    }
    match OperatorUrls::from_map(map) {
        Ok(again) => assert!(&again == urls, "{spec:?} built again is {again:?}"),
        Err(e) => panic!("the urls of {spec:?} are refused when built again: {e}"),
    }
    let shown = format!("{urls:?}");
    for operator in urls.operators() {
        if let Some(query) = urls.get(operator).and_then(|u| u.query())
            && !query.is_empty()
            && !"***".starts_with(query)
        {
            assert!(!shown.contains(&format!("?{query}")), "{shown}");
        }
    }
}

fn refused(error: &OperatorUrlsError) {
    let entry = match error {
        OperatorUrlsError::NotAPair { entry }
        | OperatorUrlsError::BadOperator { entry, .. }
        | OperatorUrlsError::BadUrl { entry, .. }
        | OperatorUrlsError::BadScheme { entry }
        | OperatorUrlsError::Insecure { entry }
        | OperatorUrlsError::CredentialsInUrl { entry }
        | OperatorUrlsError::Duplicate { entry, .. } => entry,
    };
    let mut shown = vec![entry.as_str()];
    if let OperatorUrlsError::BadOperator { source, .. } = error {
        shown.push(&source.0);
    }
    for text in shown {
        if let Some(query) = text.find('?') {
            assert_eq!(&text[query + 1..], "***", "{error}");
        }
        if let Some(scheme_end) = text.find("://").map(|i| i + 3)
            && let Some(at) = text[scheme_end..].find('@')
        {
            assert_eq!(&text[scheme_end..scheme_end + at], "***", "{error}");
        }
    }
    assert!(!error.to_string().is_empty());
}
