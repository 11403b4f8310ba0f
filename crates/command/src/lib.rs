//! What every `lifeboat` command shares, whether it is one of the
//! operators' commands (lifeboat-cli) or the developers' harness
//! (lifeboat-harness):
//!
//! * [`error`]: [`CliError`], a failed command's message and exit code,
//!   printed once by `main`;
//! * [`runtime`]: the tokio runtime a command's work runs on, built in one
//!   place;
//! * [`span`]: how every flag reads a span of time;
//! * [`carts`]: carts minute by minute against the breaker, counted and
//!   tabled the same for `lifeboat carts --minutes` and
//!   `lifeboat demo --carts-minutes`;
//! * [`orders`]: held orders, where they stand and how they moved per
//!   minute, for `lifeboat orders`;
//! * [`plot`]: the SVG charts of `--plot FILE`.

pub mod carts;
pub mod error;
pub mod orders;
pub mod plot;
pub mod runtime;
pub mod span;

pub use error::CliError;
