//! `lifeboat`: the suite's command line.
//!
//! `lifeboat status`, `lifeboat breaker …`, `lifeboat detection`,
//! `lifeboat carts --minutes` and `lifeboat config put|show` work on a
//! deployed (or local) suite through the AWS APIs, configured like the
//! functions themselves (the same environment variables), with flags
//! overriding them; `advise-timeouts` and `replay` work on recorded calls.
//!
//! `demo`, `chaos`, `fleet` and `local` (the developers' harness,
//! lifeboat-harness) are in the default build only: `--no-default-features`
//! builds the operators' `lifeboat` without them and without their
//! simulator, moto and test-util dependencies (docs/binaries.md).
//!
//! Every command's `run` returns its error; `main` prints it once and exits
//! with its code.

mod args;
mod commands;

use std::process::ExitCode;

use clap::Parser;

use args::Cli;

fn main() -> ExitCode {
    match Cli::parse().command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            e.exit_code()
        }
    }
}
