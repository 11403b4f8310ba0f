//! moto_server on a free loopback port: DynamoDB (with streams), EventBridge,
//! SQS, IAM and Lambda's control plane without AWS.
//!
//! [`MotoServer::start`] finds the `moto_server` executable (`$LIFEBOAT_MOTO_SERVER`,
//! else `.venv/bin/moto_server` in the workspace or a folder above the current
//! one, else `moto_server` on `PATH`), starts it on 127.0.0.1 with a free port,
//! waits until `/moto-api/` answers, and kills it on [`MotoServer::stop`] or
//! when dropped. Clients reach it through a small proxy that lets one DynamoDB
//! request through at a time (see below). [`MotoServer::sdk_config`] gives an
//! `SdkConfig` pointed at it, and [`resources`] creates lifeboat's tables, bus
//! and stream mapping in it with the schemas of the SAM template.
//!
//! The server belongs to the tokio runtime that started it (the proxy runs
//! there): start one per test, or one per runtime.
//!
//! # moto 5.2.1, as checked here
//!
//! * One thread per request and no lock around a DynamoDB write: a condition
//!   is checked, then the write applied, and another request's thread can run
//!   in between. Seen here: 20 concurrent conditional outcome writes with two
//!   winners; concurrent `UpdateItem ADD`s that create an item each starting
//!   from nothing, losing counts. DynamoDB applies every single-item write
//!   atomically, so [`MotoServer::endpoint`] is a proxy that serializes
//!   DynamoDB requests (`serial`); [`MotoServer::moto_endpoint`] is moto itself.
//! * `ReturnValuesOnConditionCheckFailure=ALL_OLD` is honoured on `UpdateItem`:
//!   the refused write carries the old item (and none when there is no item).
//! * Every item write produces a stream record, atomic counters included.
//! * `CreateFunction` checks that the execution role exists in IAM (so create
//!   one first) but not the code: any zip bytes do, and nothing runs.
//!   Event source mappings can be created on a DynamoDB stream and re-pointed
//!   with `UpdateEventSourceMapping(FunctionName)`; nothing is delivered.
//! * TTL is stored but nothing ever expires.
//! * SQS `ChangeMessageVisibility` hides a received message for the new
//!   timeout and it comes back after it. A receipt handle that names no
//!   message, or a deleted one, gets `ReceiptHandleIsInvalid`; but a message
//!   that is visible again (not in flight) is accepted instead of
//!   `MessageNotInflight`, and so is an older receipt handle of a message
//!   received again since. More than 43 200 s is `InvalidParameterValue`.
//! * Accounts: everything lives in account 123456789012.

pub mod resources;
mod serial;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;
use tokio::process::{Child, Command};

use crate::alarm::history::AlarmHistoryBook;
use crate::net::{free_port, wait_for_port};
use crate::watch::{local_dir, workspace_root};
pub use serial::InvokeRoutes;
use serial::SerialProxy;

/// Environment variable naming the `moto_server` executable to run.
pub const MOTO_SERVER_ENV: &str = "LIFEBOAT_MOTO_SERVER";
/// The region every client of the fixture uses.
pub const REGION: &str = "us-east-1";
/// moto's default account.
pub const ACCOUNT_ID: &str = "123456789012";

/// How long moto may take to answer after it was started. A cold start
/// imports every backend it serves: a few seconds on a busy machine.
const READY_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    #[error(
        "moto_server not found: set {MOTO_SERVER_ENV}, create .venv with moto[server] at the workspace root, or put moto_server on PATH"
    )]
    NotFound,
    #[error("no free loopback port for moto_server: {0}")]
    Port(#[source] std::io::Error),
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("moto_server exited before it was ready ({status}); its log is {log}")]
    Exited { status: ExitStatus, log: String },
    #[error("moto_server did not answer on port {port} in time: {detail}; its log is {log}")]
    NotReady {
        port: u16,
        detail: String,
        log: String,
    },
    #[error("cannot listen on 127.0.0.1:{port} for the proxy in front of moto_server: {source}")]
    ProxyPort { port: u16, source: std::io::Error },
    #[error("{0}")]
    Endpoint(#[from] crate::net::EndpointError),
    #[error("no moto_server answers at {endpoint}: {detail}")]
    NotRunning { endpoint: String, detail: String },
}

/// `$LIFEBOAT_MOTO_SERVER`; else `.venv/bin/moto_server` in the first folder
/// that has one, walking up from `$CARGO_MANIFEST_DIR`, the current folder and
/// this crate's workspace, each up to its workspace root (the folder with
/// `Cargo.lock`); else `moto_server` on `PATH`.
pub fn find_moto_server() -> Result<PathBuf, MotoError> {
    if let Some(path) = std::env::var_os(MOTO_SERVER_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let starts = [
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
        std::env::current_dir().ok(),
        Some(workspace_root()),
    ];
    for start in starts.into_iter().flatten() {
        for dir in start.ancestors() {
            let candidate = dir.join(".venv").join("bin").join("moto_server");
            if candidate.is_file() {
                return Ok(candidate);
            }
            if dir.join("Cargo.lock").is_file() {
                break;
            }
        }
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("moto_server"))
        .find(|candidate| candidate.is_file())
        .ok_or(MotoError::NotFound)
}

/// Where moto's output goes: `<target>/lifeboat-local/moto-PORT.log`.
fn log_path(port: u16) -> PathBuf {
    local_dir(&workspace_root()).join(format!("moto-{port}.log"))
}

/// The last lines of a log, for an error message.
fn log_tail(log: Option<&Path>) -> String {
    let Some(path) = log else {
        return "(no log)".to_owned();
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
    format!("{} [{}]", path.display(), tail)
}

/// A running moto_server.
#[derive(Debug)]
pub struct MotoServer {
    child: Option<Child>,
    /// moto's own port.
    port: u16,
    log: Option<PathBuf>,
    /// Where clients go; `None` only while starting.
    proxy: Option<SerialProxy>,
    /// The alarm history the proxy answers `DescribeAlarmHistory` from.
    alarm_history: AlarmHistoryBook,
    /// Where the proxy sends an Invoke of the stack's functions.
    invokes: InvokeRoutes,
}

impl MotoServer {
    /// Find moto_server and start it; see [`find_moto_server`].
    pub async fn start() -> Result<Self, MotoError> {
        Self::start_program(&find_moto_server()?).await
    }

    /// Start this moto_server executable. A port taken between choosing and
    /// binding it makes moto exit; that is retried on another port.
    pub async fn start_program(program: &Path) -> Result<Self, MotoError> {
        Self::start_program_with(program, 0).await
    }

    /// [`start_program`](Self::start_program), with the serializing proxy
    /// clients use on loopback `proxy_port` (0: a free one).
    pub async fn start_program_with(program: &Path, proxy_port: u16) -> Result<Self, MotoError> {
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(program, proxy_port).await {
                Err(e @ MotoError::Exited { .. }) => last = Some(e),
                other => return other,
            }
        }
        Err(last.unwrap_or(MotoError::NotFound))
    }

    async fn start_once(program: &Path, proxy_port: u16) -> Result<Self, MotoError> {
        let port = free_port().map_err(MotoError::Port)?;
        let log = log_path(port);
        let output = std::fs::create_dir_all(log.parent().unwrap_or(Path::new(".")))
            .and_then(|()| std::fs::File::create(&log))
            .and_then(|out| Ok((out.try_clone()?, out)));
        let (stdout, stderr, log) = match output {
            Ok((out, err)) => (Stdio::from(out), Stdio::from(err), Some(log)),
            Err(_) => (Stdio::null(), Stdio::null(), None),
        };
        let child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| MotoError::Spawn {
                program: program.to_path_buf(),
                source,
            })?;
        let server = MotoServer {
            child: Some(child),
            port,
            log,
            proxy: None,
            alarm_history: AlarmHistoryBook::default(),
            invokes: InvokeRoutes::default(),
        };
        server.ready_behind_proxy(proxy_port).await
    }

    /// Use the moto_server already running at `endpoint`
    /// (`http://127.0.0.1:5000`), behind a serializing proxy on loopback
    /// `proxy_port` (0: a free one). Nothing is started but the proxy, and
    /// [`stop`](Self::stop) leaves the server running.
    pub async fn attach(endpoint: &str, proxy_port: u16) -> Result<Self, MotoError> {
        let endpoint = endpoint.trim_end_matches('/');
        let port = crate::net::loopback_port(endpoint)?;
        let server = MotoServer {
            child: None,
            port,
            log: None,
            proxy: None,
            alarm_history: AlarmHistoryBook::default(),
            invokes: InvokeRoutes::default(),
        };
        server.ready_behind_proxy(proxy_port).await
    }

    /// Once moto answers, put the serializing proxy in front of it on
    /// loopback `proxy_port` (0: a free one).
    async fn ready_behind_proxy(mut self, proxy_port: u16) -> Result<Self, MotoError> {
        self.wait_ready().await?;
        self.proxy = Some(
            SerialProxy::start(
                self.moto_endpoint(),
                proxy_port,
                self.alarm_history.clone(),
                self.invokes.clone(),
            )
            .await
            .map_err(|source| MotoError::ProxyPort {
                port: proxy_port,
                source,
            })?,
        );
        Ok(self)
    }

    /// The alarm history behind [`endpoint`](Self::endpoint)'s
    /// `DescribeAlarmHistory`: a [`LocalAlarm`](crate::alarm::LocalAlarm)
    /// given it (`AlarmConfig::history`) makes its transitions readable
    /// with CloudWatch's API.
    pub fn alarm_history(&self) -> AlarmHistoryBook {
        self.alarm_history.clone()
    }

    /// Send a Lambda Invoke at [`endpoint`](Self::endpoint) of a function
    /// named in `binaries` (name → binary) to `invoke_endpoint`, the Invoke
    /// API that runs the binaries (`cargo lambda watch`'s), instead of
    /// moto, which would look for Docker.
    pub fn route_invokes(&self, invoke_endpoint: &str, binaries: BTreeMap<String, String>) {
        self.invokes.set(invoke_endpoint, binaries);
    }

    /// Whether the server ran before this process attached to it
    /// ([`stop`](Self::stop) and dropping leave it running).
    pub fn is_attached(&self) -> bool {
        self.child.is_none()
    }

    /// Wait until moto listens and its API answers, or it exits.
    async fn wait_ready(&mut self) -> Result<(), MotoError> {
        let port = self.port;
        let not_ready = |detail: String, log: Option<&Path>| MotoError::NotReady {
            port,
            detail,
            log: log_tail(log),
        };
        match self.child.as_mut() {
            Some(child) => tokio::select! {
                listening = wait_for_port(port, READY_LIMIT) => {
                    listening.map_err(|e| not_ready(e.to_string(), self.log.as_deref()))?;
                }
                status = child.wait() => {
                    return Err(match status {
                        Ok(status) => MotoError::Exited { status, log: log_tail(self.log.as_deref()) },
                        Err(e) => not_ready(e.to_string(), self.log.as_deref()),
                    });
                }
            },
            // Attached: it runs already, or it is not there at all.
            None => wait_for_port(port, Duration::from_secs(2))
                .await
                .map_err(|e| MotoError::NotRunning {
                    endpoint: self.moto_endpoint(),
                    detail: e.to_string(),
                })?,
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| not_ready(e.to_string(), self.log.as_deref()))?;
        let url = format!("{}/moto-api/", self.moto_endpoint());
        let deadline = tokio::time::Instant::now() + READY_LIMIT;
        loop {
            let detail = match http.get(&url).send().await {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) => format!("GET {url} answered {}", response.status()),
                Err(e) => format!("GET {url}: {e}"),
            };
            let Some(child) = self.child.as_mut() else {
                return Err(MotoError::NotRunning {
                    endpoint: self.moto_endpoint(),
                    detail,
                });
            };
            if let Ok(Some(status)) = child.try_wait() {
                return Err(MotoError::Exited {
                    status,
                    log: log_tail(self.log.as_deref()),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(not_ready(detail, self.log.as_deref()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The port clients use (the serializing proxy's).
    pub fn port(&self) -> u16 {
        self.proxy.as_ref().map_or(self.port, SerialProxy::port)
    }

    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT_URL` or a client's endpoint:
    /// moto behind the proxy that serializes DynamoDB requests.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// moto itself, without the proxy: DynamoDB writes are not atomic here.
    pub fn moto_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where moto's output goes, if a log file could be opened.
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// An SDK configuration for this server: its endpoint for every service,
    /// region us-east-1, static test credentials.
    pub async fn sdk_config(&self) -> SdkConfig {
        sdk_config_for(&self.endpoint()).await
    }

    /// Forget every resource (`POST /moto-api/reset`).
    pub async fn reset(&self) -> Result<(), reqwest::Error> {
        reqwest::Client::builder()
            .no_proxy()
            .build()?
            .post(format!("{}/moto-api/reset", self.moto_endpoint()))
            .send()
            .await?
            .error_for_status()
            .map(|_| ())
    }

    /// Stop moto and wait until it has exited.
    pub async fn stop(mut self) {
        self.proxy = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.try_wait();
        }
    }
}

/// An SDK configuration for a moto (or other AWS stand-in) at `endpoint`.
pub async fn sdk_config_for(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "lifeboat-moto",
        ))
        .load()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn moto_starts_answers_and_stops() {
        let moto = MotoServer::start().await.unwrap();
        let moto_port = moto.port;
        assert_ne!(moto.port(), moto_port, "clients go through the proxy");
        let config = moto.sdk_config().await;
        let tables = aws_sdk_dynamodb::Client::new(&config)
            .list_tables()
            .send()
            .await
            .unwrap();
        assert!(tables.table_names().is_empty());
        moto.stop().await;
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", moto_port))
                .await
                .is_err()
        );
    }
}
