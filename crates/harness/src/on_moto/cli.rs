//! The `lifeboat local` command line: flags, subcommands and exit codes.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use lifeboat_command::CliError;
use lifeboat_command::runtime::{Threads, runtime};
use lifeboat_command::span::parse_duration;
use lifeboat_core::OperatorId;
use lifeboat_local::alarm::AlarmState;
use lifeboat_local::suite::{Attach, AttachWatch};
use lifeboat_operator::OutageMode;

use super::state::{self, LocalState};
use super::{LocalConfig, run};
use crate::progress::Progress;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LocalArgs {
    #[command(subcommand)]
    pub action: Option<LocalAction>,
    /// The operator the suite sells (its simulated API runs here too).
    #[arg(long, default_value = "nordic")]
    pub operator: OperatorId,
    /// Take the operator down for this long (e.g. 60s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub outage: Option<Duration>,
    /// When the outage begins, after start-up.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub outage_after: Duration,
    /// How the operator fails: hang, refuse, server_error, slow, garbage, rate_limited or brownout.
    #[arg(long, default_value = "hang")]
    pub mode: OutageMode,
    /// Customer searches per second.
    #[arg(long, default_value_t = 2.0, value_parser = parse_rate)]
    pub rate: f64,
    /// End the run once the breaker has closed, the stream is back on the
    /// real consumer and the operator is on sale again (needs --outage).
    #[arg(long, requires = "outage")]
    pub exit_after_recovery: bool,
    /// `OPERATOR_SETTINGS` of every function [default: a 20 s recent cache
    /// and a 15 s first open period; "" for the template's defaults;
    /// `advised` for the probe and hang check the README advises, as
    /// `lifeboat demo --operator-settings advised` gives them].
    #[arg(long)]
    pub settings: Option<String>,
    /// Keep the endpoints and settings in the operator config table's item
    /// instead of OPERATOR_ENDPOINTS and OPERATOR_SETTINGS (left empty), as
    /// a stack of hundreds of operators does (docs/configuration.md).
    #[arg(long)]
    pub config_in_table: bool,
    /// The schedule's period (the template's rule runs every minute; 1 s
    /// by default here, so a short run sees the tick's work).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub tick: Duration,
    /// Print one JSON object with the run's figures at the end instead of
    /// the summary (the run's lines go to stderr when it ends).
    #[arg(long)]
    pub json: bool,
    /// Instances per function under cargo lambda watch.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub concurrency: u32,
    /// Where the running suite's endpoints are written [default:
    /// target/lifeboat-local/local.json in the workspace].
    #[arg(long)]
    pub state_file: Option<PathBuf>,
    /// Use this running moto_server (http://127.0.0.1:PORT) instead of
    /// starting one. The suite's resources are created in it if missing,
    /// used again if there, and left there at the end.
    #[arg(long, value_name = "URL")]
    pub moto: Option<String>,
    /// Use this running `cargo lambda watch` (http://127.0.0.1:PORT) of the
    /// workspace, started with the functions' environment (its --env-file
    /// is written by this command, see --env-file); waits up to
    /// --watch-wait for it to listen. Needs --moto: the functions'
    /// environment names the resources in it, so it must outlive a run.
    #[arg(long, value_name = "URL", requires = "moto")]
    pub watch: Option<String>,
    /// Where the running watch's output goes, for the errors alarm (read
    /// from its end); without it the alarm is not evaluated.
    #[arg(long, requires = "watch", value_name = "FILE")]
    pub watch_log: Option<PathBuf>,
    /// How long to wait for the running watch to listen.
    #[arg(long, default_value = "10m", requires = "watch", value_parser = parse_duration)]
    pub watch_wait: Duration,
    /// Where the functions' environment is written for the running watch
    /// [default: functions.env beside the state file].
    #[arg(long, requires = "watch", value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// The port of the proxy in front of moto that the functions call
    /// [default: a free one; 9571 with --moto or --watch, whose functions
    /// keep it].
    #[arg(long)]
    pub aws_port: Option<u16>,
    /// The simulated operator's port [default: a free one; 9572 with
    /// --moto, whose stack is deployed with it, or --watch].
    #[arg(long)]
    pub operator_port: Option<u16>,
    /// End the run this long after the suite is up (e.g. 5m) and stop what
    /// it started.
    #[arg(long, value_parser = parse_duration)]
    pub run_for: Option<Duration>,
}

/// The proxy port the functions call when they run in a watch started
/// beforehand, or on a moto that keeps the stack: their environment and the
/// stack's parameters must be the same on every run.
pub const ATTACHED_AWS_PORT: u16 = 9571;
/// The simulated operator's port in the same case.
pub const ATTACHED_OPERATOR_PORT: u16 = 9572;

#[derive(Debug, Subcommand)]
pub enum LocalAction {
    /// Set the errors alarm's state by hand on the running suite
    /// (SetAlarmState): the circuit switch gets what the alarm sends.
    Alarm {
        /// The alarm's name (`lifeboat local` prints it).
        name: String,
        /// ALARM, OK or INSUFFICIENT_DATA.
        state: AlarmState,
        /// The state reason.
        #[arg(long, default_value = "Set by lifeboat local alarm")]
        reason: String,
        #[arg(long)]
        state_file: Option<PathBuf>,
    },
    /// Print shell exports that point the AWS SDKs, the AWS CLI and
    /// `lifeboat status` at the running suite: eval "$(lifeboat local env)".
    Env {
        #[arg(long)]
        state_file: Option<PathBuf>,
    },
    /// Run moto_server the way the suite needs it (stream records stay in
    /// the stream for the pump) on 127.0.0.1:PORT, in the foreground, for
    /// `lifeboat local --moto http://127.0.0.1:PORT`.
    Moto {
        #[arg(long, default_value_t = 5000)]
        port: u16,
    },
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.1..=50.0).contains(&r) => Ok(r),
        _ => Err(format!("{text:?}: searches per second from 0.1 to 50")),
    }
}

/// What to attach to, from the flags.
#[allow(clippy::too_many_arguments)]
fn attach(
    moto: Option<String>,
    watch: Option<String>,
    watch_log: Option<PathBuf>,
    watch_wait: Duration,
    env_file: Option<PathBuf>,
    aws_port: Option<u16>,
    operator_port: Option<u16>,
    state_file: &std::path::Path,
) -> Attach {
    // An attached moto keeps the stack, deployed with the operator's
    // endpoint as a parameter, and an attached watch the environment: both
    // need the same ports from run to run.
    let fixed = moto.is_some() || watch.is_some();
    Attach {
        moto,
        watch: watch.map(|endpoint| AttachWatch {
            endpoint,
            log: watch_log,
            env_file: env_file.unwrap_or_else(|| state::env_file_beside(state_file)),
            wait: watch_wait,
        }),
        aws_port: aws_port.unwrap_or(if fixed { ATTACHED_AWS_PORT } else { 0 }),
        operator_port: operator_port.unwrap_or(if fixed { ATTACHED_OPERATOR_PORT } else { 0 }),
    }
}

/// `lifeboat local moto`: become moto_server (as the suite's launcher runs
/// it), so signals reach it directly.
fn run_moto(port: u16) -> Result<(), CliError> {
    use std::os::unix::process::CommandExt;

    let fail = |e: &dyn std::fmt::Display| CliError::new("local moto", e);
    let launcher = lifeboat_local::suite::moto_launcher().map_err(|e| fail(&e))?;
    eprintln!(
        "lifeboat local moto: moto_server on http://127.0.0.1:{port} (use it with --moto http://127.0.0.1:{port}; Ctrl-C stops it)"
    );
    let e = std::process::Command::new(&launcher)
        .args(["-H", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .exec();
    Err(fail(&format!("cannot run {}: {e}", launcher.display())))
}

/// `--settings`: `advised` is the demo's advised settings as JSON; anything
/// else is passed on as given.
fn operator_settings(text: &str) -> Result<String, String> {
    if text.trim() == "advised" {
        return serde_json::to_string(&lifeboat_sim::aws::advised_settings())
            .map_err(|e| e.to_string());
    }
    Ok(text.to_owned())
}

/// The run with its lines kept until the end (then written to stderr) and
/// its figures printed as JSON.
fn run_json(runtime: &tokio::runtime::Runtime, config: LocalConfig) -> Result<(), CliError> {
    let (progress, lines) = Progress::memory();
    let done = runtime.block_on(run(config.clone(), &progress));
    for line in lines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        eprintln!("{line}");
    }
    let fail = |e: &dyn std::fmt::Display| CliError::new("local", e);
    let report = done.map_err(|e| fail(&e))?;
    let json = serde_json::to_string_pretty(&super::LocalJson::of(&config, &report))
        .map_err(|e| fail(&e))?;
    println!("{json}");
    Ok(())
}

impl LocalArgs {
    /// Run `lifeboat local …`.
    pub fn run(self) -> Result<(), CliError> {
        let runtime = runtime("local", Threads::PerCore)?;
        match self.action {
            Some(LocalAction::Alarm {
                name,
                state,
                reason,
                state_file,
            }) => {
                let fail = |e: &dyn std::fmt::Display| CliError::new("local alarm", e);
                let path = state_file.unwrap_or_else(state::default_path);
                let running = LocalState::read(&path).map_err(|e| fail(&e))?;
                let t = runtime
                    .block_on(running.force_alarm(&name, state, &reason))
                    .map_err(|e| fail(&e))?;
                println!(
                    "alarm set to {} (sent to the circuit switch{})",
                    t.current.value,
                    if t.current.value == AlarmState::Alarm {
                        " as the rule's event and the alarm action"
                    } else {
                        " as the rule's event"
                    }
                );
                Ok(())
            }
            Some(LocalAction::Moto { port }) => run_moto(port),
            Some(LocalAction::Env { state_file }) => {
                let path = state_file.unwrap_or_else(state::default_path);
                let s = LocalState::read(&path).map_err(|e| CliError::new("local env", e))?;
                print!("{}", s.env_script());
                Ok(())
            }
            None => self.run_suite(&runtime),
        }
    }

    /// `lifeboat local` without a subcommand: the suite itself.
    fn run_suite(self, runtime: &tokio::runtime::Runtime) -> Result<(), CliError> {
        let fail = |e: &dyn std::fmt::Display| CliError::new("local", e);
        let mut config = LocalConfig::new(self.operator);
        config.outage = self.outage;
        config.outage_after = self.outage_after;
        config.mode = self.mode;
        config.rate = self.rate;
        config.exit_after_recovery = self.exit_after_recovery;
        config.concurrency = self.concurrency;
        config.run_for = self.run_for;
        config.operator_config_in_table = self.config_in_table;
        if let Some(settings) = self.settings {
            config.operator_settings =
                operator_settings(&settings).map_err(|e| fail(&format!("--settings: {e}")))?;
        }
        if self.tick.is_zero() {
            return Err(fail(&"--tick must be above zero"));
        }
        config.tick_every = self.tick;
        if let Some(path) = self.state_file {
            config.state_file = path;
        }
        config.attach = attach(
            self.moto,
            self.watch,
            self.watch_log,
            self.watch_wait,
            self.env_file,
            self.aws_port,
            self.operator_port,
            &config.state_file,
        );
        if self.json {
            return run_json(runtime, config);
        }
        let progress = Progress::for_terminal();
        runtime
            .block_on(run(config, &progress))
            .map_err(|e| fail(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advised_settings_are_the_demos() {
        let json = operator_settings("advised").unwrap();
        let parsed = lifeboat_core::settings::Settings::from_json(&json).unwrap();
        assert_eq!(parsed, lifeboat_sim::aws::advised_settings());
        assert_eq!(operator_settings("").unwrap(), "");
    }

    #[test]
    fn rates_are_searches_per_second() {
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_rate("2.5"), Ok(2.5));
    }

    #[test]
    fn a_running_watch_gets_fixed_ports_and_the_env_file_beside_the_state() {
        let state = std::path::Path::new("/tmp/suite/local.json");
        let started = attach(None, None, None, Duration::ZERO, None, None, None, state);
        assert_eq!(started, Attach::default(), "everything started, free ports");

        let running = attach(
            Some("http://127.0.0.1:5000".into()),
            Some("http://127.0.0.1:9000".into()),
            None,
            Duration::from_secs(60),
            None,
            None,
            Some(7000),
            state,
        );
        assert_eq!(running.aws_port, ATTACHED_AWS_PORT);
        assert_eq!(running.operator_port, 7000);
        let watch = running.watch.unwrap();
        assert_eq!(
            watch.env_file,
            std::path::Path::new("/tmp/suite/functions.env")
        );
        assert_eq!(watch.log, None);
    }

    #[test]
    fn a_running_watch_needs_a_running_moto() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            local: LocalArgs,
        }
        let e = Cli::try_parse_from(["lifeboat", "--watch", "http://127.0.0.1:9000"])
            .err()
            .unwrap();
        assert!(e.to_string().contains("--moto"), "{e}");
        assert!(
            Cli::try_parse_from([
                "lifeboat",
                "--watch",
                "http://127.0.0.1:9000",
                "--moto",
                "http://127.0.0.1:5000"
            ])
            .is_ok()
        );
    }
}
