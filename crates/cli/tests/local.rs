//! `lifeboat local` end to end: the same `run` the command calls, on moto,
//! the seven functions under `cargo lambda watch` and the simulated
//! operator, in real time.
//!
//! Build the functions first, as tools/test does (`CARGO_TARGET_DIR=target/lambda-watch
//! cargo build --bin real-consumer --bin fallback-consumer --bin circuit-switch
//! --bin search --bin cart --bin offsale-listener --bin booking-worker`), or
//! the first start waits for that build.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::time::Duration;

use lifeboat_core::OperatorId;
use lifeboat_core::order::OrderState;
use lifeboat_harness::on_moto::state::LocalState;
use lifeboat_harness::on_moto::{LOCAL_SETTINGS, LocalConfig, LocalReport, run};
use lifeboat_harness::progress::Progress;
use lifeboat_local::alarm::AlarmState;

/// Start-up may have to build the functions if they were not built first.
const LIMIT: Duration = Duration::from_secs(900);

/// One suite at a time: two at once on a small machine would make each
/// other's timings (detection, recovery) meaningless.
static ONE_SUITE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(name: &str) -> LocalConfig {
    let mut config = LocalConfig::new(OperatorId::new("nordic").unwrap());
    config.outage = Some(Duration::from_secs(20));
    config.outage_after = Duration::from_secs(8);
    config.exit_after_recovery = true;
    config.recovery_limit = Duration::from_secs(120);
    config.state_file = state_file(name);
    // Back on sale 5 s after the close rather than the template's 60 s
    // (SaleOnSaleHoldSeconds), which a run with exit_after_recovery would
    // wait out; the off-sale listener's own tests hold the 60 s.
    config.on_sale_hold = ON_SALE_HOLD;
    config
}

const ON_SALE_HOLD: Duration = Duration::from_secs(5);

fn state_file(name: &str) -> PathBuf {
    std::env::temp_dir()
        .join(format!("lifeboat-local-test-{}", std::process::id()))
        .join(format!("{name}.json"))
}

fn secs(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64())
}

fn print(lines: &[String], report: &LocalReport) {
    for line in lines {
        eprintln!("{line}");
    }
    // The orders by their figures: each order's own record is long.
    let mut shown = report.clone();
    let orders = shown.orders.take();
    eprintln!("{shown:?}");
    if let Some(orders) = orders {
        eprintln!("orders: {:?}", orders.figures());
    }
}

/// The state file of the suite `run` starts, once it is up; fails the test
/// at once if the run ends first.
async fn suite_up(
    path: &std::path::Path,
    run: &mut tokio::task::JoinHandle<Result<LocalReport, lifeboat_harness::on_moto::LocalError>>,
) -> LocalState {
    tokio::time::timeout(LIMIT, async {
        loop {
            if let Ok(state) = LocalState::read(path) {
                return state;
            }
            if run.is_finished() {
                let ended = run.await;
                panic!("the run ended before the suite was up: {ended:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the suite starts")
}

/// The run's report; when it failed, the test fails with the run's own
/// timeline printed first, so a slow or stuck step can be seen.
fn recovered(
    lines: &[String],
    run: Result<LocalReport, lifeboat_harness::on_moto::LocalError>,
) -> LocalReport {
    run.unwrap_or_else(|e| {
        for line in lines {
            eprintln!("{line}");
        }
        panic!("the suite recovers: {e:?}")
    })
}

fn has(lines: &[String], text: &str) -> bool {
    lines.iter().any(|l| l.contains(text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifeboat_local_rides_out_an_outage() {
    let _suite = ONE_SUITE.lock().await;
    let mut config = config("outage");
    // Down for longer than the slowest detection asserted below (15 s) and
    // the off-sale hold (10 s) together, so the operator is taken off sale
    // while it is still down: a breaker that closes within the hold leaves
    // it on sale (that case is the alarm test's, and Milestones' tests).
    config.outage = Some(Duration::from_secs(30));
    // One answered search in two goes on to a cart, so that some are
    // confirmed while the operator cannot book: only questions answered
    // before the outage have a last good answer to buy from.
    config.cart_share = 0.5;
    let path = config.state_file.clone();
    let (progress, lines) = Progress::memory();
    let report = tokio::time::timeout(LIMIT, run(config, &progress))
        .await
        .expect("the run ends");
    let lines = lines.lock().unwrap().clone();
    let report = recovered(&lines, report);
    print(&lines, &report);

    let m = &report.milestones;
    let detection = secs(m.opened) - secs(m.outage_began);
    // The design's 10 s target is held by tests/gateway_e2e.rs under heavier
    // load; here fewer questions miss the cache, so fewer calls time out.
    assert!(
        detection <= 15.0,
        "open within 15 s of the outage: {detection}"
    );
    assert!(secs(m.mapping_fallback) - secs(m.opened) <= 5.0);
    // The off-sale write waits the template's SaleOffSaleHoldSeconds.
    let hold = f64::from(lifeboat_local::template::SALE_OFF_SALE_HOLD_S);
    let off_sale = secs(m.off_sale) - secs(m.opened);
    assert!(
        (hold..=hold + 5.0).contains(&off_sale),
        "off sale {off_sale} s after the open"
    );
    assert!(m.closed.is_some() && m.mapping_real.is_some() && m.on_sale.is_some());
    // Milestones are polled (every 250 ms): a second's leeway.
    let on_sale = secs(m.on_sale) - secs(m.closed);
    assert!(
        on_sale >= ON_SALE_HOLD.as_secs_f64() - 1.0,
        "back on sale no sooner than the hold after the close: {on_sale}"
    );
    // The switch's probes (LOCAL_SETTINGS) close it soon after the operator
    // is back, whatever is left of the open period.
    let recovery = secs(m.closed) - secs(m.outage_ended);
    assert!(
        recovery <= 30.0,
        "closed within 30 s of the operator coming back: {recovery}"
    );
    for text in [
        "lifeboat local: up in",
        "operator nordic: hang (outage begins)",
        "breaker nordic: closed → open",
        "Requests stream → fallback-consumer",
        "sale nordic: off_sale",
        "operator nordic: healthy (outage ends)",
        "Requests stream → real-consumer",
        "sale nordic: on_sale",
        "outage → breaker open",
    ] {
        assert!(has(&lines, text), "printed {text:?}");
    }
    let t = &report.traffic;
    assert!(t.searches >= 40, "{t:?}");
    assert!(t.last_good > 0, "answers from the last good data: {t:?}");
    assert_eq!(t.errors, 0, "no search failed outright: {t:?}");
    assert!(!path.exists(), "the state file is removed at the end");

    // The carts confirmed while the operator could not book held orders,
    // and the booking worker booked each once the operator was back, once.
    let orders = report.orders.as_ref().expect("the orders are read");
    let figures = orders.figures();
    assert!(t.carts_held >= 1, "a confirm held an order: {t:?}");
    assert!(figures.held >= 1, "{orders:#?}");
    assert!(
        orders.orders.iter().any(|o| o.held_at < orders.back),
        "an order held while the operator was down: {orders:#?}"
    );
    for order in &orders.orders {
        let OrderState::Booked { at, .. } = &order.state else {
            panic!("every order held is booked by the end: {order:#?}");
        };
        assert!(*at >= orders.back, "booked after the return: {order:#?}");
    }
    assert_eq!(figures.duplicate_bookings, 0, "{orders:#?}");
    assert_eq!(figures.oversold_sailings, 0, "{orders:#?}");
    assert_eq!(orders.booked_keys.len(), orders.orders.len(), "{orders:#?}");
    assert!(m.orders_settled >= m.closed, "{m:?}");
    let runs = &report.booking_runs;
    assert!(runs.ticks > 0 && runs.failed == 0, "{runs:?}");
    assert!(has(&lines, " booked"), "the orders' moves are printed");
    assert!(has(&lines, "  orders: held "), "and summed up");
}

/// With our own detector made blind, the errors alarm (evaluated on the
/// functions' EMF lines) opens the breaker; `lifeboat local alarm` reaches
/// the same switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_alarm_opens_the_breaker_when_the_detector_does_not() {
    let _suite = ONE_SUITE.lock().await;
    let mut config = config("alarm");
    config.outage = Some(Duration::from_secs(30));
    // The functions log at WARN, and the alarm reads only what Lambda's
    // log-level filter would keep: the metric lines must pass it.
    config.log_level = "WARN".to_owned();
    config.operator_settings = LOCAL_SETTINGS.replace(
        r#""breaker""#,
        r#""window":{"min_calls":100000,"consecutive_timeouts":100000,"consecutive_failures":0,"consecutive_errors":0},"hang_check":null,"breaker""#,
    );
    let path = config.state_file.clone();
    let (progress, lines) = Progress::memory();
    let mut run = tokio::spawn(async move { run(config, &progress).await });

    // While the suite runs, before the outage: the alarm's state by hand
    // reaches the switch (OK while closed changes nothing).
    let state = suite_up(&path, &mut run).await;
    let forced = state
        .force_alarm("lifeboat-nordic-errors", AlarmState::Ok, "a drill")
        .await
        .expect("the switch takes the alarm's event");
    assert_eq!(forced.current.value, AlarmState::Ok);
    assert!(
        state
            .force_alarm("lifeboat-baltic-errors", AlarmState::Alarm, "x")
            .await
            .is_err()
    );

    // While the suite runs: `lifeboat detection` as on call, in the
    // repository (samconfig.toml names the stack) with nothing but AWS's
    // variables, reads the alarm's history and pairs it with the opening.
    let incident = detected(&state, &run).await;

    let report = tokio::time::timeout(LIMIT, run)
        .await
        .expect("the run ends")
        .expect("the run task");
    let lines = lines.lock().unwrap().clone();
    let report = recovered(&lines, report);
    print(&lines, &report);
    eprintln!("lifeboat detection: {incident:#}");
    assert_eq!(incident["operator"], "nordic");
    let opened_by = &incident["breaker"]["opened_by"];
    assert_eq!(opened_by["by"], "alarm", "{incident:#}");
    assert_eq!(opened_by["alarm"], "lifeboat-nordic-errors", "{incident:#}");
    let to_open = incident["alarm_to_open_s"].as_f64().unwrap();
    assert!(
        (0.0..5.0).contains(&to_open),
        "the switch opens on the alarm's event: {to_open}"
    );
    // The first breaching period, from the history's reason data.
    let to_alarm = incident["failure_to_alarm_s"].as_f64().unwrap();
    assert!(
        (10.0..40.0).contains(&to_alarm),
        "two 10 s periods and more: {to_alarm}"
    );
    let m = &report.milestones;
    let reason = m.open_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("lifeboat-nordic-errors"),
        "opened by the alarm: {reason}"
    );
    assert!(m.alarm.is_some() && m.alarm <= m.opened, "{m:?}");
    let detection = secs(m.opened) - secs(m.outage_began);
    // The first timeouts (3 s), two whole 10 s periods after a partial one,
    // and the 2 s grace.
    assert!(
        detection <= 40.0,
        "two 10 s periods and the grace: {detection}"
    );
    assert!(has(&lines, "alarm lifeboat-nordic-errors: OK → ALARM"));
    assert!(report.alarm_transitions >= 2, "{report:?}");
}

/// The first incident `lifeboat detection --json` reports with both the
/// alarm and the opening, asked of the running suite once a second until
/// it has one; the test fails if the run ends first or the command fails.
async fn detected(
    state: &LocalState,
    run: &tokio::task::JoinHandle<Result<LocalReport, lifeboat_harness::on_moto::LocalError>>,
) -> serde_json::Value {
    loop {
        assert!(
            !run.is_finished(),
            "the run ended before lifeboat detection saw the incident"
        );
        let on_call = state.clone();
        let (ok, out, err) = tokio::task::spawn_blocking(move || {
            lifeboat_on_stack(&on_call, &["detection", "--json"])
        })
        .await
        .unwrap();
        assert!(ok, "lifeboat detection on the local stack: {err}");
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["alarm"], "lifeboat-nordic-errors", "{report:#}");
        let both = report["incidents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i.get("alarm").is_some() && i.get("breaker").is_some());
        if let Some(incident) = both {
            return incident.clone();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `lifeboat <args>` with the environment `lifeboat local env` exports.
fn lifeboat(state: &LocalState, args: &[&str]) -> (bool, String, String) {
    lifeboat_with(state, args, |_| true, false)
}

/// `lifeboat <args>` as an on-call shell runs it on the local stack: in the
/// repository, with AWS's variables from `lifeboat local env` (moto's
/// endpoint, region and credentials) and nothing naming a resource or
/// another endpoint.
fn lifeboat_on_stack(state: &LocalState, args: &[&str]) -> (bool, String, String) {
    lifeboat_with(
        state,
        args,
        |key| key.starts_with("AWS_") && key != "AWS_LAMBDA_LOG_LEVEL",
        true,
    )
}

fn lifeboat_with(
    state: &LocalState,
    args: &[&str],
    keep: impl Fn(&str) -> bool,
    clear: bool,
) -> (bool, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lifeboat"));
    command.args(args);
    if clear {
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", std::env::var("HOME").unwrap_or_default())
            // where samconfig.toml is
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    }
    for line in state.env_script().lines() {
        let (key, value) = line
            .strip_prefix("export ")
            .and_then(|l| l.split_once('='))
            .unwrap();
        let value = value
            .strip_prefix('\'')
            .and_then(|v| v.strip_suffix('\''))
            .unwrap_or(value)
            .replace(r"'\''", "'");
        if keep(key) {
            command.env(key, value);
        }
    }
    let out = command.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A moto_server (as `lifeboat local moto` runs it) and a `cargo lambda
/// watch` that outlive `lifeboat local`: the first run deploys the
/// template's stack, writes the functions' environment and waits for the
/// watch, started here with that `--env-file`; customers' requests reach
/// the operator through the stream; `lifeboat breaker` and `lifeboat
/// status` work on the suite with the environment `lifeboat local env`
/// prints, and `lifeboat status --stack lifeboat` with nothing but AWS's
/// endpoint and credentials; a second run finds the stack in place; a run
/// that would deploy it with other parameters is refused; and a
/// moto_server that empties its streams is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifeboat_local_uses_a_running_moto_and_watch() {
    use lifeboat_local::moto::MotoServer;
    use lifeboat_local::net::free_port;
    use lifeboat_local::suite::{Attach, AttachWatch};
    use lifeboat_local::watch::Watch;

    let _suite = ONE_SUITE.lock().await;
    let launcher = lifeboat_local::suite::moto_launcher().unwrap();
    let moto = MotoServer::start_program(&launcher).await.unwrap();
    let watch_port = free_port().unwrap();
    let env_file = state_file("attach").with_file_name("attach-functions.env");
    let _ = std::fs::remove_file(&env_file);
    let mut config = config("attach");
    config.outage = None;
    config.exit_after_recovery = false;
    config.run_for = Some(Duration::from_secs(20));
    config.attach = Attach {
        moto: Some(moto.moto_endpoint()),
        watch: Some(AttachWatch {
            endpoint: format!("http://127.0.0.1:{watch_port}"),
            log: None,
            env_file: env_file.clone(),
            wait: LIMIT,
        }),
        aws_port: free_port().unwrap(),
        operator_port: free_port().unwrap(),
    };
    let path = config.state_file.clone();
    let (progress, lines) = Progress::memory();
    let first = config.clone();
    let mut running = tokio::spawn(async move { run(first, &progress).await });

    // The run waits for the watch; it is started from the file it wrote.
    let watch = tokio::time::timeout(LIMIT, async {
        while !env_file.exists() {
            assert!(!running.is_finished(), "the run waits for the watch");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Watch::for_workspace()
            .port(watch_port)
            .env_file(&env_file)
            .concurrency(4)
            .start()
            .await
            .unwrap()
    })
    .await
    .expect("the environment is written");
    let state = suite_up(&path, &mut running).await;
    assert_eq!(
        state.invoke_endpoint,
        format!("http://127.0.0.1:{watch_port}")
    );

    // Requests go through the stream to the real consumer and the operator.
    let stats = format!("{}/_control/stats", state.operator_url);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let calls: serde_json::Value =
                http.get(&stats).send().await.unwrap().json().await.unwrap();
            if calls["total"].as_u64().unwrap_or(0) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the operator is called");

    // The operator commands on the local suite.
    let (ok, out, err) = lifeboat(
        &state,
        &[
            "breaker",
            "force-open",
            "--operator",
            "nordic",
            "--reason",
            "drill on the local suite",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("forced_open"), "{out}");
    // Who sent it (STS, moto's here) is kept with the reason.
    assert!(
        out.contains("force-open by arn:aws:") && !err.contains("without its caller"),
        "{out}{err}"
    );
    let (ok, out, err) = lifeboat(&state, &["status", "--json"]);
    assert!(ok, "{out}{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    // A lane per operator, as the template deploys: each operator's own.
    assert_eq!(
        status["operators"][0]["stream"]["target"], "fallback",
        "{status}"
    );
    assert_eq!(
        status["operators"][0]["breaker"]["state"], "forced_open",
        "{status}"
    );
    // The same from the stack alone: every table and function found from
    // the stack `lifeboat local` deployed.
    let (ok, out, err) = lifeboat_on_stack(&state, &["status", "--stack", "lifeboat", "--json"]);
    assert!(ok, "{out}{err}");
    let from_stack: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(from_stack["operators"], status["operators"], "{from_stack}");
    tokio::time::timeout(Duration::from_secs(30), async {
        while !has(&lines.lock().unwrap(), "drill on the local suite") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the run prints the command's reason");
    // Released as on call: in the repository, the stack samconfig.toml
    // names, nothing but AWS's variables.
    let (ok, out, err) = lifeboat_on_stack(
        &state,
        &[
            "breaker",
            "release",
            "--operator",
            "nordic",
            "--reason",
            "drill over",
        ],
    );
    assert!(ok, "{out}{err}");

    let report = tokio::time::timeout(LIMIT, running)
        .await
        .expect("the run ends")
        .expect("the run task")
        .expect("the run");
    let lines = lines.lock().unwrap().clone();
    print(&lines, &report);
    assert!(has(&lines, "(moto, already running)"));
    assert!(has(&lines, "(cargo lambda watch, already running)"));
    assert!(has(&lines, "alarm     not evaluated"));

    // Both servers outlive the run; a second one finds everything in place
    // and evaluates the alarm from the watch's log.
    assert!(
        lifeboat_local::net::wait_for_port(watch_port, Duration::ZERO)
            .await
            .is_ok()
    );
    let mut second = config.clone();
    second.run_for = Some(Duration::from_secs(3));
    if let Some(w) = second.attach.watch.as_mut() {
        w.log = watch.log_path().map(ToOwned::to_owned);
        w.wait = Duration::from_secs(5);
    }
    let (progress, lines) = Progress::memory();
    let report = tokio::time::timeout(LIMIT, run(second.clone(), &progress))
        .await
        .expect("the second run ends")
        .expect("the second run attaches at once");
    let lines = lines.lock().unwrap().clone();
    print(&lines, &report);
    assert!(has(&lines, "alarm     lifeboat-nordic-errors"));
    assert!(
        report.alarm_lines_read > 0,
        "the alarm reads the watch's log: {report:?}"
    );

    // Another operator port would deploy the stack with another
    // `OperatorEndpoints`, and give the functions another environment.
    let mut third = second;
    third.attach.operator_port = free_port().unwrap();
    let (progress, _) = Progress::memory();
    let e = run(third, &progress).await.unwrap_err();
    assert!(
        e.to_string().contains("OperatorEndpoints is") && e.to_string().contains("--operator-port"),
        "{e}"
    );

    watch.stop().await;
    moto.stop().await;

    // moto_server as installed delivers stream records itself and drops them.
    let plain = MotoServer::start().await.unwrap();
    let mut refused = config.clone();
    refused.attach = Attach {
        moto: Some(plain.moto_endpoint()),
        ..Attach::default()
    };
    let (progress, _) = Progress::memory();
    let e = run(refused, &progress).await.unwrap_err();
    assert!(e.to_string().contains("lifeboat local moto"), "{e}");
    plain.stop().await;
}
