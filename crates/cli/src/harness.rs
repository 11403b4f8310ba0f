//! The developers' harness commands (`demo`, `chaos`, `fleet`): a simulated
//! day on virtual time, its report printed as JSON or for a terminal, and
//! the demo's carts minute by minute and picture. Default build only.

use std::process::ExitCode;
use std::time::Instant;

use lifeboat_cli::chaos::{self, ChaosScript};
use lifeboat_cli::demo::{self, Script};
use lifeboat_cli::fleet::{self, FleetScript};

use lifeboat_sim::World;

use crate::args::{ChaosArgs, DemoArgs, FleetArgs};

/// `lifeboat demo`.
pub(crate) fn demo(args: DemoArgs) -> ExitCode {
    let DemoArgs {
        json,
        mode,
        outage_s,
        seed,
        absorb_rise_percent,
        carts_minutes,
        plot,
        world,
    } = args;
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
        && let Err(e) = lifeboat_cli::plot::carts_rows(
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

/// `lifeboat chaos`.
pub(crate) fn chaos(args: ChaosArgs) -> ExitCode {
    let ChaosArgs {
        json,
        records,
        operators,
        off_sale_hold_s,
        seed,
        world,
    } = args;
    let defaults = ChaosScript::default();
    let script = ChaosScript {
        world: world.world,
        settings: world.operator_settings,
        seed: seed.unwrap_or(defaults.seed),
        records,
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

/// `lifeboat fleet`.
pub(crate) fn fleet(args: FleetArgs) -> ExitCode {
    let FleetArgs {
        json,
        operators,
        hours,
        searches_per_s,
        lanes,
        seed,
        real_consumer_concurrency,
        world,
    } = args;
    let defaults = FleetScript::default();
    let script = FleetScript {
        world: world.world,
        settings: world.operator_settings,
        seed: seed.unwrap_or(defaults.seed),
        operators: usize::try_from(operators).unwrap_or(defaults.operators),
        duration: std::time::Duration::from_secs_f64(hours * 3600.0),
        searches_per_s,
        lanes,
        real_consumer_concurrency: real_consumer_concurrency.and_then(|n| usize::try_from(n).ok()),
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

/// Print the demo's report with its carts minute by minute: after the
/// summary, or in the JSON object under `carts_minutes`.
fn print_demo_with_carts_minutes(
    json: bool,
    world: World,
    report: std::io::Result<demo::Report>,
    wall: Instant,
) -> ExitCode {
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("lifeboat demo: could not start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(e) = &report.carts_minutes.error {
        eprintln!("lifeboat demo: carts minute by minute: {e}");
        return ExitCode::FAILURE;
    }
    if !json {
        println!("{}", world_line(world));
        print!("{}", report.render(wall.elapsed()));
        print!("\n{}", report.carts_minutes.render());
        return ExitCode::SUCCESS;
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
    match text {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("lifeboat demo: report not written: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Print a simulated day's report, as JSON or for a terminal.
fn print_report<T: serde::Serialize>(
    command: &str,
    json: bool,
    world: World,
    report: std::io::Result<T>,
    render: impl FnOnce(&T) -> String,
) -> ExitCode {
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("lifeboat {command}: could not start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        // Which world the figures were measured in, first in the object.
        let text = serde_json::to_string_pretty(&InWorld {
            world,
            report: &report,
        });
        match text {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("lifeboat {command}: report not written: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        println!("{}", world_line(world));
        print!("{}", render(&report));
    }
    ExitCode::SUCCESS
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
