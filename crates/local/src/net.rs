//! Loopback ports: find a free one, wait for a server to listen on one.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Wait until something accepts TCP connections on 127.0.0.1:`port`, polling
/// every 100 ms, for at most `limit`.
pub async fn wait_for_port(port: u16, limit: Duration) -> std::io::Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("nothing listens on {addr} after {limit:?}: {e}"),
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// An endpoint of a server to attach to that is not on this machine's
/// loopback.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{endpoint:?} is not a loopback endpoint: give http://127.0.0.1:PORT (or http://localhost:PORT) of a server on this machine"
)]
pub struct EndpointError {
    pub endpoint: String,
}

/// The port of `http://127.0.0.1:PORT` (or `localhost`), the only endpoints
/// the local suite attaches to: everything it starts listens on 127.0.0.1.
pub fn loopback_port(endpoint: &str) -> Result<u16, EndpointError> {
    let bad = || EndpointError {
        endpoint: endpoint.to_owned(),
    };
    let url = reqwest::Url::parse(endpoint).map_err(|_| bad())?;
    let loopback = matches!(url.host_str(), Some("127.0.0.1" | "localhost"));
    let bare = matches!(url.path(), "" | "/") && url.query().is_none();
    if url.scheme() != "http" || !loopback || !bare {
        return Err(bad());
    }
    url.port_or_known_default().ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_endpoints_with_a_port_are_attached_to() {
        assert_eq!(loopback_port("http://127.0.0.1:5000"), Ok(5000));
        assert_eq!(loopback_port("http://localhost:9000/"), Ok(9000));
        assert_eq!(loopback_port("http://127.0.0.1"), Ok(80));
        for bad in [
            "http://10.0.0.2:5000",
            "https://127.0.0.1:5000",
            "http://10.0.0.2",
            "127.0.0.1:5000",
            "http://127.0.0.1:5000/moto-api",
        ] {
            let e = loopback_port(bad).unwrap_err();
            assert!(
                e.to_string().contains("not a loopback endpoint"),
                "{bad}: {e}"
            );
        }
    }
}
