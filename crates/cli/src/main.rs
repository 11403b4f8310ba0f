//! `lifeboat`: the suite's command line.
//!
//! `lifeboat demo` runs every function's real handler code in one process on
//! in-memory adapters, a simulated operator and virtual time, through a
//! scripted day with an outage, and reports what happened.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use lifeboat_cli::demo::{self, Script};
use lifeboat_operator::OutageMode;

#[derive(Parser)]
#[command(
    name = "lifeboat",
    version,
    about = "Keep selling when a ferry operator's API goes down"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole suite through a scripted day with an operator outage,
    /// on virtual time, without network or AWS.
    Demo {
        /// Print one JSON object with the figures instead of the timeline.
        #[arg(long)]
        json: bool,
        /// How the operator fails: hang, refuse, server_error, slow or garbage.
        #[arg(long, default_value = "hang", value_parser = parse_mode)]
        mode: OutageMode,
        /// Seconds of outage.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(30..=3600))]
        outage_s: u64,
        /// Seed of every random choice.
        #[arg(long)]
        seed: Option<u64>,
    },
}

fn parse_mode(s: &str) -> Result<OutageMode, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        format!("unknown outage mode {s:?}: use hang, refuse, server_error, slow or garbage")
    })
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo {
            json,
            mode,
            outage_s,
            seed,
        } => {
            let defaults = Script::default();
            let script = Script {
                mode,
                outage: std::time::Duration::from_secs(outage_s),
                seed: seed.unwrap_or(defaults.seed),
                ..defaults
            };
            let wall = Instant::now();
            let report = match demo::run_paused(&script) {
                Ok(report) => report,
                Err(e) => {
                    eprintln!("lifeboat demo: could not start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("lifeboat demo: report not written: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", report.render(wall.elapsed()));
            }
            ExitCode::SUCCESS
        }
    }
}
