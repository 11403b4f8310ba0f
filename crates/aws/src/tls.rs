//! One TLS stack for a function: rustls on ring, for the SDK's clients and
//! for reqwest (the operator client, the sale switch). aws-lc, the SDK's
//! default, would add about 0.5 MB to every function (docs/binaries.md).

use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// The SDK's HTTPS client: hyper 1 and rustls on ring, the system's roots.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// Make ring the process's rustls provider, which reqwest's clients use
/// (reqwest is built without one of its own); a provider installed before
/// is kept. Called by the constructors of lifeboat's reqwest clients.
pub fn install_default_provider() {
    // Err: a provider is installed already, and it stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
