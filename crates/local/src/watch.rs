//! `cargo lambda watch` on a free loopback port: the real function binaries
//! behind Lambda's Invoke API (and the HTTP ones behind Function URLs),
//! without AWS or Docker.
//!
//! [`Watch`] starts `cargo lambda watch` at the workspace root, waits until it
//! listens, hands out the Invoke API base URL ([`Watch::invoke_endpoint`];
//! functions are at `/2015-03-31/functions/<binary-name>/invocations`), and
//! kills everything it started on [`Watch::stop`] or when dropped.
//!
//! What `cargo lambda watch` does and how [`Watch`] uses it (flags, its
//! target directory, environment, Function URLs, errors, stopping):
//! docs/local.md ("What `cargo lambda watch` does").

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::net::{free_port, wait_for_port};

mod process;

use process::{descendants_of, kill_all, signal};

/// Environment variable naming the `cargo-lambda` binary to run.
pub const CARGO_LAMBDA_ENV: &str = "LIFEBOAT_CARGO_LAMBDA";

/// The Lambda Invoke API path of a function, under [`Watch::invoke_endpoint`].
pub fn invocations_path(function: &str) -> String {
    format!("/2015-03-31/functions/{function}/invocations")
}

/// The path of an HTTP request to a function under `cargo lambda watch`:
/// `path_and_query` (e.g. `/sailings?from=HEL`) below `/lambda-url/<function>`.
pub fn function_url_path(function: &str, path_and_query: &str) -> String {
    let rest = path_and_query.trim_start_matches('/');
    format!("/lambda-url/{function}/{rest}")
}

/// Whether `name` is one of the variables cargo sets for the package whose
/// test or binary is running, which a nested `cargo run` must not inherit;
/// see the module docs.
pub fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_")
        || name.starts_with("CARGO_MANIFEST_")
        || [
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .contains(&name)
}

/// Where the functions under a watch of the workspace at `root` are built
/// (`<root>/target/lambda-watch`); see the module docs.
pub fn watch_target_dir(root: &Path) -> PathBuf {
    root.join("target").join("lambda-watch")
}

/// The workspace this crate belongs to (`crates/local/../..`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .unwrap_or(manifest)
        .to_path_buf()
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("no loopback port for cargo lambda watch: {0}")]
    Port(#[source] std::io::Error),
    #[error("cannot open the watch log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("cargo lambda watch exited before listening ({status}); its log is {log}")]
    Exited { status: ExitStatus, log: PathBuf },
    #[error("cargo lambda watch did not listen in time ({source}); its log is {log}")]
    NotListening {
        log: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot build the invoke client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("{0}")]
    Endpoint(#[from] crate::net::EndpointError),
    #[error("no cargo lambda watch listens at {endpoint}: {source}")]
    NotRunning {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("invoking {function} failed: {source}")]
    Invoke {
        function: String,
        source: reqwest::Error,
    },
    #[error("{function} is not a binary of the workspace: {body}")]
    UnknownFunction { function: String, body: String },
    #[error("{function} returned an error (HTTP {status}): {body}")]
    FunctionError {
        function: String,
        status: u16,
        body: String,
    },
    #[error("{function} answered with something that is not JSON: {source}")]
    BadAnswer {
        function: String,
        source: serde_json::Error,
    },
}

/// How to run cargo-lambda: its binary directly, or `cargo lambda`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Program {
    Binary(PathBuf),
    CargoSubcommand,
}

impl Program {
    /// `$LIFEBOAT_CARGO_LAMBDA`, else `<root>/.venv/bin/cargo-lambda`, else
    /// `cargo lambda` from PATH.
    fn find(root: &Path) -> Self {
        if let Some(path) = std::env::var_os(CARGO_LAMBDA_ENV).filter(|p| !p.is_empty()) {
            return Program::Binary(PathBuf::from(path));
        }
        let venv = root.join(".venv").join("bin").join("cargo-lambda");
        if venv.is_file() {
            return Program::Binary(venv);
        }
        Program::CargoSubcommand
    }

    /// Both forms take the same arguments: cargo runs `cargo-lambda lambda …`.
    fn command(&self) -> Command {
        match self {
            Program::Binary(path) => Command::new(path),
            Program::CargoSubcommand => {
                Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Program::Binary(path) => path.display().to_string(),
            Program::CargoSubcommand => "cargo lambda".to_owned(),
        }
    }
}

/// Settings of a [`Watch`] before it starts.
#[derive(Debug, Clone)]
pub struct WatchBuilder {
    root: PathBuf,
    program: Option<Program>,
    env: BTreeMap<String, String>,
    target_dir: PathBuf,
    concurrency: u32,
    listen_limit: Duration,
    invoke_timeout: Duration,
    port: Option<u16>,
    env_file: Option<PathBuf>,
}

impl WatchBuilder {
    /// Serve the Invoke API on this loopback port instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Give the functions the variables of this file too (cargo-lambda's
    /// `--env-file`, KEY=VALUE lines).
    pub fn env_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.env_file = Some(path.into());
        self
    }

    /// Where `cargo run` builds the functions (`CARGO_TARGET_DIR` of the
    /// watch process; default [`watch_target_dir`]). An explicit
    /// `CARGO_TARGET_DIR` given with [`env`](Self::env) wins.
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = dir.into();
        self
    }

    /// Run a specific `cargo-lambda` binary instead of looking for one.
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = Some(Program::Binary(path.into()));
        self
    }

    /// An environment variable for every function.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Environment variables for every function.
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Instances per function (`--concurrency`, default 1).
    pub fn concurrency(mut self, instances: u32) -> Self {
        self.concurrency = instances.max(1);
        self
    }

    /// How long to wait for the invoke port (default 30 s).
    pub fn listen_limit(mut self, limit: Duration) -> Self {
        self.listen_limit = limit;
        self
    }

    /// How long one [`Watch::invoke`] may take, including the build of the
    /// function on its first invocation (default 10 minutes).
    pub fn invoke_timeout(mut self, timeout: Duration) -> Self {
        self.invoke_timeout = timeout;
        self
    }

    /// Start `cargo lambda watch` and wait until it listens. A free port
    /// taken between choosing and binding it makes the process exit; that
    /// is retried on another port (a fixed [`port`](Self::port) is not).
    pub async fn start(self) -> Result<Watch, WatchError> {
        let program = self
            .program
            .clone()
            .unwrap_or_else(|| Program::find(&self.root));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(self.invoke_timeout)
            .build()
            .map_err(WatchError::Client)?;
        if let Some(port) = self.port {
            // A fixed port taken by something else would look like the
            // watch listening: find out before starting.
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))
                .map_err(WatchError::Port)?;
            return self.start_once(&program, http).await;
        }
        let mut last = None;
        for _ in 0..3 {
            match self.start_once(&program, http.clone()).await {
                Err(e @ WatchError::Exited { .. }) => last = Some(e),
                other => return other,
            }
        }
        Err(last.unwrap_or(WatchError::Port(std::io::Error::other("no attempt made"))))
    }

    async fn start_once(
        &self,
        program: &Program,
        http: reqwest::Client,
    ) -> Result<Watch, WatchError> {
        let port = match self.port {
            Some(port) => port,
            None => free_port().map_err(WatchError::Port)?,
        };
        let log = local_dir(&self.root).join(format!("watch-{port}.log"));
        let open_log = |path: &Path| {
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
                .and_then(|()| std::fs::File::create(path))
                .map_err(|source| WatchError::Log {
                    path: path.to_path_buf(),
                    source,
                })
        };
        let stdout = open_log(&log)?;
        let stderr = stdout.try_clone().map_err(|source| WatchError::Log {
            path: log.clone(),
            source,
        })?;

        let mut command = program.command();
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(is_package_variable) {
                command.env_remove(&name);
            }
        }
        command
            .args(["lambda", "watch", "--ignore-changes", "--color", "never"])
            .args(["--invoke-address", "127.0.0.1"])
            .arg("--invoke-port")
            .arg(port.to_string())
            .arg("--concurrency")
            .arg(self.concurrency.to_string())
            .args(
                self.env_file
                    .iter()
                    .flat_map(|file| [OsString::from("--env-file"), file.as_os_str().to_owned()]),
            )
            .current_dir(&self.root)
            .env("CARGO_TARGET_DIR", &self.target_dir)
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| WatchError::Spawn {
            program: program.describe(),
            source,
        })?;
        let pid = child.id();

        let listening = tokio::select! {
            listening = wait_for_port(port, self.listen_limit) => listening,
            status = child.wait() => {
                return Err(match status {
                    Ok(status) => WatchError::Exited { status, log },
                    Err(source) => WatchError::NotListening { log, source },
                });
            }
        };
        let mut watch = Watch {
            child: Some(child),
            pid,
            port,
            log: Some(log.clone()),
            http,
        };
        if let Err(source) = listening {
            watch.kill_now();
            return Err(WatchError::NotListening { log, source });
        }
        Ok(watch)
    }
}

/// `cargo lambda watch` serving the workspace's functions on 127.0.0.1.
#[derive(Debug)]
pub struct Watch {
    child: Option<Child>,
    pid: Option<u32>,
    port: u16,
    /// Where its output goes: known when this process started it, or when
    /// the one attached to was said to write there.
    log: Option<PathBuf>,
    http: reqwest::Client,
}

impl Watch {
    /// A watch of the workspace at `root`.
    pub fn builder(root: impl Into<PathBuf>) -> WatchBuilder {
        let root = root.into();
        WatchBuilder {
            target_dir: watch_target_dir(&root),
            root,
            program: None,
            env: BTreeMap::new(),
            concurrency: 1,
            listen_limit: Duration::from_secs(30),
            invoke_timeout: Duration::from_secs(600),
            port: None,
            env_file: None,
        }
    }

    /// A watch of this workspace.
    pub fn for_workspace() -> WatchBuilder {
        Self::builder(workspace_root())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The Lambda Invoke API base URL, e.g. for an `aws-sdk-lambda` client's
    /// endpoint: `http://127.0.0.1:PORT`.
    pub fn invoke_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The invocations URL of one binary.
    pub fn invoke_url(&self, function: &str) -> String {
        format!("{}{}", self.invoke_endpoint(), invocations_path(function))
    }

    /// The URL of an HTTP request to `function` (see the module docs):
    /// `path_and_query` as the function will see it.
    pub fn function_url(&self, function: &str, path_and_query: &str) -> String {
        format!(
            "{}{}",
            self.invoke_endpoint(),
            function_url_path(function, path_and_query)
        )
    }

    /// Where cargo-lambda's and the functions' output goes, if known (a
    /// watch this process did not start writes where its starter said).
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// Where to look for its output, for messages.
    pub fn log_hint(&self) -> String {
        self.log.as_ref().map_or_else(
            || "wherever the running watch writes".to_owned(),
            |p| p.display().to_string(),
        )
    }

    /// Use the `cargo lambda watch` already serving at `endpoint`
    /// (`http://127.0.0.1:9000`), waiting up to `wait` for it to listen;
    /// `log` is where its output goes, if known. [`stop`](Self::stop) and
    /// dropping leave it running.
    pub async fn attach(
        endpoint: &str,
        log: Option<PathBuf>,
        wait: Duration,
        invoke_timeout: Duration,
    ) -> Result<Self, WatchError> {
        let port = crate::net::loopback_port(endpoint)?;
        wait_for_port(port, wait)
            .await
            .map_err(|source| WatchError::NotRunning {
                endpoint: endpoint.to_owned(),
                source,
            })?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(invoke_timeout)
            .build()
            .map_err(WatchError::Client)?;
        Ok(Self {
            child: None,
            pid: None,
            port,
            log,
            http,
        })
    }

    /// Whether the watch ran before this process attached to it (stopping
    /// and dropping leave it running).
    pub fn is_attached(&self) -> bool {
        self.child.is_none()
    }

    /// Invoke a function synchronously and return its JSON answer.
    pub async fn invoke(
        &self,
        function: &str,
        payload: &serde_json::Value,
    ) -> Result<serde_json::Value, WatchError> {
        let invoke_err = |source| WatchError::Invoke {
            function: function.to_owned(),
            source,
        };
        let response = self
            .http
            .post(self.invoke_url(function))
            .json(payload)
            .send()
            .await
            .map_err(invoke_err)?;
        let status = response.status();
        let body = response.text().await.map_err(invoke_err)?;
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(WatchError::UnknownFunction {
                function: function.to_owned(),
                body,
            });
        }
        if !status.is_success() {
            return Err(WatchError::FunctionError {
                function: function.to_owned(),
                status: status.as_u16(),
                body,
            });
        }
        if body.trim().is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_str(&body).map_err(|source| WatchError::BadAnswer {
            function: function.to_owned(),
            source,
        })
    }

    /// Stop gracefully: SIGTERM lets cargo-lambda stop its function
    /// instances; whatever is left after 5 s is killed.
    pub async fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let Some(pid) = self.pid else {
            return;
        };
        let descendants = descendants_of(pid);
        signal("TERM", &[format!("-{pid}")]);
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            signal("KILL", &[format!("-{pid}")]);
            let _ = child.kill().await;
        }
        kill_all(&descendants);
    }

    /// Kill at once: freeze cargo-lambda so it starts nothing new, kill the
    /// process groups of everything below it, then its own group.
    fn kill_now(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = self.pid {
            signal("STOP", &[pid.to_string()]);
            kill_all(&descendants_of(pid));
            signal("KILL", &[format!("-{pid}")]);
        }
        let _ = child.start_kill();
        let _ = child.try_wait();
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Where the local suite keeps its files (logs, the moto launcher, the
/// state and env files): `$CARGO_TARGET_DIR/lifeboat-local`, else
/// `<root>/target/lifeboat-local`.
pub fn local_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("lifeboat-local")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True once `pid` has exited (gone, or a zombie nobody reaped yet).
    fn is_dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .is_none_or(|state| state == "Z" || state == "X"),
        }
    }

    /// Killing is asynchronous in the kernel by a hair: poll briefly.
    async fn wait_dead(pid: u32) -> bool {
        for _ in 0..100 {
            if is_dead(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[test]
    fn package_variables_of_the_running_test_are_not_passed_on() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_EXE_real-consumer",
            "OUT_DIR",
        ] {
            assert!(is_package_variable(name), "{name}");
        }
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "PATH",
            "AWS_REGION",
        ] {
            assert!(!is_package_variable(name), "{name}");
        }
    }

    #[test]
    fn the_invoke_path_is_lambdas() {
        assert_eq!(
            invocations_path("real-consumer"),
            "/2015-03-31/functions/real-consumer/invocations"
        );
    }

    #[test]
    fn function_urls_put_the_path_below_the_function() {
        assert_eq!(
            function_url_path("search", "/sailings?from=HEL&to=TLL"),
            "/lambda-url/search/sailings?from=HEL&to=TLL"
        );
        assert_eq!(
            function_url_path("cart", "carts/c1"),
            "/lambda-url/cart/carts/c1"
        );
        assert_eq!(function_url_path("cart", "/"), "/lambda-url/cart/");
    }

    /// The real cargo-lambda: starts, listens, and is gone after stop. No
    /// function is invoked, so nothing is compiled.
    #[tokio::test]
    async fn cargo_lambda_watch_starts_and_stops() {
        let watch = Watch::for_workspace().start().await.unwrap();
        let port = watch.port();
        assert_eq!(watch.invoke_endpoint(), format!("http://127.0.0.1:{port}"));
        let pid = watch.pid.unwrap();
        watch.stop().await;
        assert!(
            wait_dead(pid).await,
            "cargo lambda watch {pid} survived stop"
        );
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err(),
            "port {port} still open after stop"
        );
    }

    /// A stand-in for cargo-lambda that does what matters here: it starts a
    /// "function" in a session of its own (as watchexec does), then serves
    /// the invoke port. It also proves the environment reaches it.
    const FAKE: &str = r#"#!/bin/sh
port=
while [ $# -gt 0 ]; do
  if [ "$1" = "--invoke-port" ]; then port=$2; fi
  shift
done
setsid sleep 600 &
echo $! > "$FAKE_FUNCTION_PIDFILE"
exec python3 -m http.server --bind 127.0.0.1 "$port"
"#;

    fn fake_program(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("fake-cargo-lambda");
        std::fs::write(&path, FAKE).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    async fn function_pid(pidfile: &Path) -> u32 {
        for _ in 0..250 {
            if let Some(pid) = std::fs::read_to_string(pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the fake never wrote {}", pidfile.display());
    }

    async fn fake_watch(name: &str) -> (Watch, u32) {
        let dir =
            std::env::temp_dir().join(format!("lifeboat-watch-{name}-{}", std::process::id()));
        let pidfile = dir.join("function.pid");
        let _ = std::fs::remove_file(&pidfile);
        let watch = Watch::for_workspace()
            .program(fake_program(&dir))
            .env("FAKE_FUNCTION_PIDFILE", pidfile.display().to_string())
            .start()
            .await
            .unwrap();
        let pid = function_pid(&pidfile).await;
        assert!(!is_dead(pid));
        (watch, pid)
    }

    #[tokio::test]
    async fn stop_kills_functions_in_their_own_sessions() {
        let (watch, function) = fake_watch("stop").await;
        let main = watch.pid.unwrap();
        watch.stop().await;
        assert!(wait_dead(main).await, "watch process {main} survived stop");
        assert!(
            wait_dead(function).await,
            "function {function} survived stop"
        );
    }

    #[tokio::test]
    async fn drop_kills_functions_in_their_own_sessions() {
        let (watch, function) = fake_watch("drop").await;
        let main = watch.pid.unwrap();
        drop(watch);
        assert!(wait_dead(main).await, "watch process {main} survived drop");
        assert!(
            wait_dead(function).await,
            "function {function} survived drop"
        );
    }
}
