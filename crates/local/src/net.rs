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
