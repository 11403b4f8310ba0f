//! The developers' harness: the `lifeboat` commands that run the whole
//! suite rather than operate a deployed one. The `lifeboat` binary
//! (lifeboat-cli) lists them in its default build (feature `harness`);
//! the operators' build links none of this (docs/binaries.md).
//!
//! * [`demo`]: a scripted day with an operator outage, on virtual time;
//! * [`chaos`]: the fault campaign, lifeboat's own dependencies failing
//!   under customer traffic, on virtual time;
//! * [`fleet`]: a marketplace day of many operators, on virtual time;
//! * [`on_moto`]: `lifeboat local`, the wired suite on this machine
//!   (moto_server and cargo lambda watch);
//! * [`buyers`]: the carts confirmed in `chaos` and `fleet`, and what
//!   became of their orders;
//! * `marketplace`: what they share, the routes customers search and the
//!   sale desk of the in-memory suite;
//! * [`args`] and [`commands`]: the simulations' flags and their `run`;
//!   `lifeboat local`'s are [`on_moto::cli`];
//! * [`progress`]: what a long command is doing, on a terminal or not;
//! * [`aws_model_table`]: the AWS world the simulations charge.

pub mod args;
pub mod buyers;
pub mod chaos;
pub mod commands;
pub mod demo;
pub mod fleet;
mod marketplace;
pub mod on_moto;
pub mod progress;

pub use args::{ChaosArgs, DemoArgs, FleetArgs};
pub use on_moto::cli::LocalArgs;

/// What the simulations (`demo`, `chaos`, `fleet` with `--aws aws`) charge
/// for each AWS call and limit, as docs/aws-model.md's markdown table
/// (`lifeboat aws-model`; tools/figures writes it there).
pub fn aws_model_table() -> String {
    lifeboat_sim::aws::AWS.markdown()
}
