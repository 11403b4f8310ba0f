//! `lifeboat`: the suite's command line.
//!
//! `lifeboat demo` runs every function's real handler code in one process on
//! in-memory adapters, a simulated operator and virtual time, through a
//! scripted day with an outage, and reports what happened.
//!
//! `lifeboat status`, `lifeboat breaker …`, `lifeboat detection`,
//! `lifeboat carts --minutes` and `lifeboat config put|show` work on a
//! deployed (or local) suite through the AWS APIs, configured like the
//! functions themselves (the same environment variables), with flags
//! overriding them.
//!
//! `demo`, `chaos`, `fleet` and `local` (the developers' harness) are in the
//! default build only: `--no-default-features` builds the operators'
//! `lifeboat` without them and without their simulator, moto and test-util
//! dependencies (docs/binaries.md).

mod args;
mod commands;
#[cfg(feature = "harness")]
mod harness;

use std::process::ExitCode;

use clap::Parser;
use lifeboat_core::breaker::Command as SwitchCommand;

use args::{BreakerAction, Cli, Command};
use commands::{breaker_command, detection_command, status};

/// A runtime for the commands that talk to AWS.
fn block_on<F: std::future::Future<Output = ExitCode>>(what: &str, future: F) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(future),
        Err(e) => {
            eprintln!("lifeboat {what}: could not start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Detection(args) => block_on("detection", detection_command(args)),
        #[cfg(feature = "harness")]
        Command::Local(args) => lifeboat_cli::local::cli::main(args),
        Command::AdviseTimeouts(args) => lifeboat_cli::ops::advise_cmd::main(args),
        Command::Replay(args) => lifeboat_cli::replay::main(args),
        Command::Carts(args) => block_on("carts", lifeboat_cli::ops::carts_cmd::run(args)),
        Command::Config { action } => {
            block_on("config", lifeboat_cli::ops::operator_config::run(action))
        }
        Command::Status(args) => block_on("status", status(args)),
        Command::Breaker { action } => {
            let (command, args) = match action {
                BreakerAction::ForceOpen(args) => (SwitchCommand::ForceOpen, args),
                BreakerAction::ForceClosed(args) => (SwitchCommand::ForceClosed, args),
                BreakerAction::Release(args) => (SwitchCommand::Release, args),
            };
            block_on("breaker", breaker_command(command, args))
        }
        #[cfg(feature = "harness")]
        Command::Chaos(args) => harness::chaos(args),
        #[cfg(feature = "harness")]
        Command::Fleet(args) => harness::fleet(args),
        #[cfg(feature = "harness")]
        Command::Demo(args) => harness::demo(args),
    }
}
