//! The simulations' commands (`demo`, `chaos`, `fleet`): each runs a
//! simulated day on virtual time and prints its report as JSON or for a
//! terminal; the demo also its carts minute by minute and their picture.

use std::time::Instant;

use lifeboat_command::{CliError, plot};
use lifeboat_sim::World;

use crate::args::{ChaosArgs, DemoArgs, FleetArgs};
use crate::chaos::{self, ChaosScript};
use crate::demo::{self, Script};
use crate::fleet::{self, FleetScript};

impl DemoArgs {
    /// `lifeboat demo`.
    pub fn run(self) -> Result<(), CliError> {
        let DemoArgs {
            json,
            mode,
            outage_s,
            seed,
            absorb_rise_percent,
            carts_minutes,
            plot,
            world,
        } = self;
        let defaults = Script::default();
        let script = Script {
            world: world.world,
            settings: world.operator_settings,
            mode,
            absorb_rise_percent,
            outage: std::time::Duration::from_secs(outage_s),
            seed: seed.unwrap_or(defaults.seed),
            ..defaults
        };
        let wall = Instant::now();
        let report = demo::run_paused(&script);
        if let (Some(path), Ok(report)) = (&plot, &report)
            && let Err(e) = plot::carts_rows(
                path,
                "lifeboat demo: carts minute by minute against the breaker",
                &report.carts_minutes.rows,
            )
        {
            eprintln!("lifeboat demo: no picture: {e}");
        }
        if carts_minutes {
            return print_demo_with_carts_minutes(json, script.world, report, wall);
        }
        print_report("demo", json, script.world, report, |r| {
            r.render(wall.elapsed())
        })
    }
}

impl ChaosArgs {
    /// `lifeboat chaos`.
    pub fn run(self) -> Result<(), CliError> {
        let ChaosArgs {
            json,
            records,
            carts,
            operators,
            off_sale_hold_s,
            seed,
            world,
        } = self;
        let defaults = ChaosScript::default();
        let script = ChaosScript {
            world: world.world,
            settings: world.operator_settings,
            seed: seed.unwrap_or(defaults.seed),
            records,
            carts,
            operators: usize::try_from(operators).unwrap_or(defaults.operators),
            off_sale_hold: std::time::Duration::from_secs(off_sale_hold_s),
            ..defaults
        };
        print_report(
            "chaos",
            json,
            script.world,
            chaos::run_paused(&script),
            |r| r.render(),
        )
    }
}

impl FleetArgs {
    /// `lifeboat fleet`.
    pub fn run(self) -> Result<(), CliError> {
        let FleetArgs {
            json,
            operators,
            hours,
            searches_per_s,
            cart_share,
            lanes,
            seed,
            real_consumer_concurrency,
            lane_parallelization,
            lane_sizing,
            world,
        } = self;
        let defaults = FleetScript::default();
        let script = FleetScript {
            world: world.world,
            settings: world.operator_settings,
            seed: seed.unwrap_or(defaults.seed),
            operators: usize::try_from(operators).unwrap_or(defaults.operators),
            duration: std::time::Duration::from_secs_f64(hours * 3600.0),
            searches_per_s,
            cart_share,
            lanes,
            real_consumer_concurrency: real_consumer_concurrency
                .and_then(|n| usize::try_from(n).ok()),
            lane_parallelization: lane_parallelization
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(defaults.lane_parallelization),
            lane_sizing,
            ..defaults
        };
        print_report(
            "fleet",
            json,
            script.world,
            fleet::run_paused(&script),
            |r| r.render(),
        )
    }
}

/// Print the demo's report with its carts minute by minute: after the
/// summary, or in the JSON object under `carts_minutes`.
fn print_demo_with_carts_minutes(
    json: bool,
    world: World,
    report: std::io::Result<demo::Report>,
    wall: Instant,
) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::new("demo", e);
    let report = report.map_err(|e| fail(&format!("could not start the runtime: {e}")))?;
    if let Some(e) = &report.carts_minutes.error {
        return Err(fail(&format!("carts minute by minute: {e}")));
    }
    if !json {
        println!("{}", world_line(world));
        print!("{}", report.render(wall.elapsed()));
        print!("\n{}", report.carts_minutes.render());
        return Ok(());
    }
    let text = serde_json::to_value(&report).and_then(|mut value| {
        if let Some(object) = value.as_object_mut() {
            object.insert("world".to_owned(), serde_json::to_value(world)?);
            object.insert(
                "carts_minutes".to_owned(),
                serde_json::to_value(&report.carts_minutes.rows)?,
            );
        }
        serde_json::to_string_pretty(&value)
    });
    let text = text.map_err(|e| fail(&format!("report not written: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Print a simulated day's report, as JSON or for a terminal.
fn print_report<T: serde::Serialize>(
    command: &'static str,
    json: bool,
    world: World,
    report: std::io::Result<T>,
    render: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    let report =
        report.map_err(|e| CliError::new(command, format!("could not start the runtime: {e}")))?;
    if json {
        // Which world the figures were measured in, first in the object.
        let text = serde_json::to_string_pretty(&InWorld {
            world,
            report: &report,
        })
        .map_err(|e| CliError::new(command, format!("report not written: {e}")))?;
        println!("{text}");
    } else {
        println!("{}", world_line(world));
        print!("{}", render(&report));
    }
    Ok(())
}

/// A report with the world it was measured in.
#[derive(serde::Serialize)]
struct InWorld<'a, T> {
    world: World,
    #[serde(flatten)]
    report: &'a T,
}

/// The line that opens a report for a terminal: which world it ran in.
fn world_line(world: World) -> String {
    match world {
        World::Aws => {
            "world: aws (AWS's latencies and limits, the template's tick; docs/aws-model.md)"
                .to_owned()
        }
        World::Ideal => {
            "world: ideal (stores that take no time, a 5 s tick, no limits; compare with --aws aws)"
                .to_owned()
        }
    }
}
