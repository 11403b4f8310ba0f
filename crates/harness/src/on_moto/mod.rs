//! `lifeboat local`: the whole wired suite on this machine, without Docker
//! or an AWS account, with customers on it and, if asked, an outage.
//!
//! It starts (through [`LocalSuite`], the same code the end-to-end tests
//! run on) moto_server with what template.yaml declares, the seven functions
//! under `cargo lambda watch`, the simulated operator, the Requests stream
//! pump (honouring the mapping's function, `Enabled` and filter), the
//! EventBridge → SQS drains, the schedules (the circuit switch's and the
//! booking worker's) and the errors alarm evaluated on the functions' EMF
//! metrics. Then customers search (and some buy) over HTTP, and every change
//! worth seeing is printed as it happens: the alarm, the breaker, where the
//! stream points, the sale status, the orders held while the operator could
//! not book and how they end, and the customers' answers every 10 s.
//!
//! `--outage 60s` takes the operator down (`--mode`, default hang) after
//! `--outage-after` and brings it back when the time is up;
//! `--exit-after-recovery` ends the run once the breaker has closed, the
//! stream points at the real consumer, the operator is on sale again (or
//! was never taken off: a close within the off-sale hold writes nothing)
//! and no order held before the close waits for a booking any more.
//! Ctrl-C stops everything it started.
//!
//! The module is `on_moto`, not `local`, so that it is not taken for the
//! lifeboat-local crate (crates/local) it runs the suite with.

pub mod cli;
pub mod orders;
pub mod state;
pub mod traffic;

mod observe;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use lifeboat_core::OperatorId;
use lifeboat_local::pump::TickerStats;
use lifeboat_local::suite::{Attach, CustomerOptions, LocalSuite, SuiteError, SuiteOptions};
use lifeboat_operator::OutageMode;

use crate::progress::Progress;
use observe::watch_run;
use orders::RunOrders;
use state::LocalState;
use traffic::{Traffic, TrafficConfig, TrafficCounts};

mod json;
pub use json::LocalJson;

/// `OPERATOR_SETTINGS` of `lifeboat local` unless given: the template's
/// defaults with a 20 s recent cache and 15 s first open period, so a
/// minute's outage shows every state (the template's 5 min cache would
/// answer every question asked before the outage as fresh), and the circuit
/// switch probing an open breaker with a search a week ahead.
pub const LOCAL_SETTINGS: &str = concat!(
    r#"{"default":{"breaker":{"open_base":15000,"open_max":60000},"cache":{"recent":20000},"#,
    r#""probe":{"operation":"search","params":{"from":"HEL","to":"TLL","date":"today+7","passengers":"1"}}}}"#
);

/// How to run the local suite.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub operator: OperatorId,
    /// Searches per second.
    pub rate: f64,
    /// Share of answered searches that go on to a cart (1 in 10 by
    /// default).
    pub cart_share: f64,
    pub outage: Option<Duration>,
    pub outage_after: Duration,
    pub mode: OutageMode,
    pub exit_after_recovery: bool,
    /// Give up waiting for recovery this long after the outage ends.
    pub recovery_limit: Duration,
    pub state_file: PathBuf,
    pub operator_settings: String,
    /// Instances per function under `cargo lambda watch`.
    pub concurrency: u32,
    /// The schedule's period (the template's rule runs every minute).
    pub tick_every: Duration,
    /// How often the breaker, the mapping and the sale status are read.
    pub poll_every: Duration,
    pub seed: u64,
    /// Running servers to use, and fixed ports.
    pub attach: Attach,
    /// End the run this long after the suite is up (Ctrl-C ends it before).
    pub run_for: Option<Duration>,
    /// `AWS_LAMBDA_LOG_LEVEL` of the functions (the template's `LogLevel`).
    pub log_level: String,
    /// Endpoints and settings in the operator config table's item, not the
    /// environment ([`SuiteOptions::operator_config_in_table`]).
    pub operator_config_in_table: bool,
    /// `SALE_ON_SALE_HOLD_S` of the off-sale listener (the template's
    /// `SaleOnSaleHoldSeconds` unless set): how long the breaker stays
    /// closed before the operator is back on sale, which a run with
    /// `exit_after_recovery` waits for.
    pub on_sale_hold: Duration,
}

impl LocalConfig {
    pub fn new(operator: OperatorId) -> Self {
        Self {
            operator,
            rate: 2.0,
            cart_share: 0.1,
            outage: None,
            outage_after: Duration::from_secs(15),
            mode: OutageMode::Hang,
            exit_after_recovery: false,
            recovery_limit: Duration::from_secs(300),
            state_file: state::default_path(),
            operator_settings: LOCAL_SETTINGS.to_owned(),
            concurrency: 8,
            tick_every: Duration::from_secs(1),
            poll_every: Duration::from_millis(250),
            seed: 7,
            attach: Attach::default(),
            run_for: None,
            log_level: "INFO".to_owned(),
            operator_config_in_table: false,
            on_sale_hold: Duration::from_secs(u64::from(
                lifeboat_local::template::SALE_ON_SALE_HOLD_S,
            )),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("the suite did not start: {0}")]
    Start(#[source] SuiteError),
    #[error("{0}")]
    State(#[from] state::StateError),
    #[error("the operator's mode could not be set: {0}")]
    Operator(#[source] SuiteError),
    #[error("no recovery within {limit:?} of the outage's end: {missing}")]
    NoRecovery { limit: Duration, missing: String },
}

/// When things happened, from the start of the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Milestones {
    pub ready: Option<Duration>,
    pub outage_began: Option<Duration>,
    pub outage_ended: Option<Duration>,
    /// The alarm's first transition to ALARM.
    pub alarm: Option<Duration>,
    /// The breaker first seen open, and why.
    pub opened: Option<Duration>,
    pub open_reason: Option<String>,
    /// The mapping first seen on the fallback consumer.
    pub mapping_fallback: Option<Duration>,
    pub off_sale: Option<Duration>,
    /// After the outage: closed, mapping on the real consumer, on sale.
    pub closed: Option<Duration>,
    pub mapping_real: Option<Duration>,
    pub on_sale: Option<Duration>,
    /// After the close: no order held before it seen held or booking any
    /// more (each booked, refunded, parked or its customer asked), or none
    /// held.
    pub orders_settled: Option<Duration>,
    /// Every breaker state seen, and when.
    pub breaker_seen: Vec<(Duration, lifeboat_core::breaker::BreakerState)>,
}

/// The template's off-sale hold (`lifeboat local` runs the suite with it).
const OFF_SALE_HOLD: Duration =
    Duration::from_secs(lifeboat_local::template::SALE_OFF_SALE_HOLD_S as u64);

/// How far the open and close seen here, polled every 250 ms, may lag the
/// listener's own view of them: it starts the hold when the open's event
/// reaches it and drops the write when it comes due after the close.
const SEEN_LAG: Duration = Duration::from_secs(3);

/// How long after the close an operator that never went off sale counts as
/// having stayed on sale: the hold and a few seconds for the dropped write's
/// turn.
const STAYED_ON_SALE_AFTER: Duration = OFF_SALE_HOLD.saturating_add(Duration::from_secs(5));

impl Milestones {
    /// Closed, the stream back on the real consumer, on sale (back on sale
    /// after going off, or never off at all), and the orders held before
    /// the close no longer waiting for a booking.
    fn recovered(&self, now: Duration) -> bool {
        self.closed.is_some()
            && self.mapping_real.is_some()
            && (self.on_sale.is_some() || self.stayed_on_sale(now))
            && self.orders_settled.is_some()
    }

    /// The breaker closed within the off-sale hold of its open, so the
    /// operator was never taken off sale, and the hold has passed since.
    fn stayed_on_sale(&self, now: Duration) -> bool {
        self.off_sale.is_none()
            && self.closed_within_the_hold()
            && self
                .closed
                .is_some_and(|closed| now.saturating_sub(closed) >= STAYED_ON_SALE_AFTER)
    }

    fn closed_within_the_hold(&self) -> bool {
        match (self.opened, self.closed) {
            (Some(opened), Some(closed)) => {
                closed.saturating_sub(opened) <= OFF_SALE_HOLD + SEEN_LAG
            }
            _ => false,
        }
    }

    fn missing(&self, now: Duration) -> String {
        let mut missing = Vec::new();
        if self.opened.is_none() {
            missing.push("the breaker never opened");
        }
        if self.closed.is_none() {
            missing.push("not closed");
        }
        if self.mapping_real.is_none() {
            missing.push("the stream is not back on the real consumer");
        }
        if self.off_sale.is_none() {
            if self.closed.is_some() && !self.closed_within_the_hold() {
                missing.push("never taken off sale, though open longer than the off-sale hold");
            } else if self.closed.is_some() && !self.stayed_on_sale(now) {
                missing
                    .push("never off sale, and the off-sale hold has not passed since the close");
            }
        } else if self.on_sale.is_none() {
            missing.push("not back on sale");
        }
        if self.closed.is_some() && self.orders_settled.is_none() {
            missing.push("orders held in the outage still wait for their booking");
        }
        missing.join(", ")
    }
}

/// What a run saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalReport {
    pub milestones: Milestones,
    pub traffic: TrafficCounts,
    /// Alarm transitions sent to the switch.
    pub alarm_transitions: usize,
    /// Log lines the alarm read (0: it saw none of the functions' output).
    pub alarm_lines_read: u64,
    /// Every search the customers asked: when, from the start of the run,
    /// and how long its answer took over HTTP.
    pub search_times: Vec<(Duration, Duration)>,
    /// The orders held during the run and how they ended, read at its end
    /// (`None`: not read, the run ended before the suite was up).
    pub orders: Option<RunOrders>,
    /// Why the orders could not be read at the end, if they could not.
    pub orders_error: Option<String>,
    /// The booking worker's scheduled runs (`BookingScheduleRule`'s ticks)
    /// and how many failed.
    pub booking_runs: TickerStats,
    /// Ended by Ctrl-C.
    pub interrupted: bool,
}

fn at(d: Duration) -> String {
    format!("{:>6.1}s", d.as_secs_f64())
}

fn after(later: Option<Duration>, earlier: Option<Duration>) -> String {
    match (later, earlier) {
        (Some(l), Some(e)) => format!("{:.1} s", l.saturating_sub(e).as_secs_f64()),
        _ => "-".to_owned(),
    }
}

/// The wall-clock time of `started`.
fn wall(started: Instant) -> DateTime<Utc> {
    Utc::now() - chrono::Duration::from_std(started.elapsed()).unwrap_or_default()
}

/// Run the suite until Ctrl-C (or recovery with `exit_after_recovery`).
pub async fn run(config: LocalConfig, progress: &Progress) -> Result<LocalReport, LocalError> {
    let started = Instant::now();
    LocalState::check_free(&config.state_file)?;
    progress.step(starting_step(&config.attach, config.concurrency));
    let mut options = SuiteOptions::new(config.operator.clone());
    options.attach = config.attach.clone();
    let alarm = options.alarm.clone();
    options.customer = Some(CustomerOptions {
        sale_on_sale_hold_s: u32::try_from(config.on_sale_hold.as_secs()).unwrap_or(u32::MAX),
        ..CustomerOptions::default()
    });
    options.operator_settings = config.operator_settings.clone();
    options.concurrency = config.concurrency;
    options.tick_every = config.tick_every;
    options.log_level = config.log_level.clone();
    options.operator_config_in_table = config.operator_config_in_table;
    let start = LocalSuite::start(options);
    let gateway = tokio::select! {
        gateway = start => Arc::new(gateway.map_err(LocalError::Start)?),
        _ = tokio::signal::ctrl_c() => {
            progress.finish();
            progress.line("interrupted while starting; everything started is stopped");
            return Ok(LocalReport { interrupted: true, ..LocalReport::default() });
        }
    };
    let state = LocalState::of(&gateway, &config.operator, alarm.as_deref());
    state.write(&config.state_file)?;
    let startup = gateway.startup_times();
    let mut report = LocalReport::default();
    report.milestones.ready = Some(started.elapsed());
    let up = Instant::now();
    print_endpoints(progress, &state, &config, startup.total);

    let traffic = Traffic::start(
        Arc::clone(&gateway),
        TrafficConfig {
            operator: config.operator.to_string(),
            rate: config.rate,
            cart_share: config.cart_share,
            max_in_flight: 32,
            seed: config.seed,
        },
    );
    let outcome = tokio::select! {
        outcome = watch_run(&gateway, &config, &traffic, progress, started, &mut report) => outcome,
        _ = tokio::signal::ctrl_c() => {
            report.interrupted = true;
            progress.line(format!("{} interrupted (Ctrl-C)", at(started.elapsed())));
            Ok(())
        }
        () = time_up(config.run_for, up) => {
            progress.line(format!("{} the run's time is up", at(started.elapsed())));
            Ok(())
        }
    };
    progress.step(match (&config.attach.moto, &config.attach.watch) {
        (None, None) => "stopping the customers, the functions, the operator and moto_server",
        _ => "stopping the customers, the operator and what else this run started (what it attached to keeps running)",
    });
    let (counts, times) = traffic.stop().await;
    report.traffic = counts;
    // The operator came back at the outage's end (without one, it never
    // left: from the suite being up).
    let started_at = wall(started);
    let back = report
        .milestones
        .outage_ended
        .or(report.milestones.ready)
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .map_or(started_at, |d| started_at + d);
    if config.exit_after_recovery && !report.interrupted && outcome.is_ok() {
        // A cart confirmed just before the end may have held an order the
        // worker has not booked yet: with the customers stopped, give it
        // its turn.
        settle_orders(&gateway, started_at, started, progress).await;
    }
    match orders::read(&gateway, started_at, back).await {
        Ok(orders) => report.orders = Some(orders),
        Err(e) => report.orders_error = Some(e.to_string()),
    }
    report.search_times = times
        .into_iter()
        .map(|t| (t.asked.saturating_duration_since(started), t.took))
        .collect();
    report.booking_runs = gateway.booking_stats();
    if let Some(alarm) = gateway.alarm() {
        let stats = alarm.stats();
        report.alarm_transitions = stats.transitions.len();
        report.alarm_lines_read = stats.lines_read;
    }
    if let Ok(gateway) = Arc::try_unwrap(gateway) {
        gateway.stop().await;
    }
    // Only this run's file: another run may have started since.
    if LocalState::read(&config.state_file).is_ok_and(|s| s.pid == state.pid) {
        let _ = std::fs::remove_file(&config.state_file);
    }
    progress.finish();
    print_summary(progress, &report);
    outcome.map(|()| report)
}

/// The longest the end of a recovered run waits for the orders still held
/// or booking: the worker starts a held order within a tick and books it
/// within seconds of that.
const ORDERS_SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Wait, up to [`ORDERS_SETTLE_LIMIT`], until no order held since
/// `started_at` is held or booking.
async fn settle_orders(
    gateway: &LocalSuite,
    started_at: DateTime<Utc>,
    started: Instant,
    progress: &Progress,
) {
    let limit = Instant::now() + ORDERS_SETTLE_LIMIT;
    let mut said = false;
    loop {
        let waiting = match orders::held_since(gateway, started_at).await {
            Ok(held) => orders::waiting(&held),
            Err(_) => return,
        };
        if waiting == 0 || Instant::now() >= limit {
            return;
        }
        if !said {
            progress.line(format!(
                "{} customers stopped; waiting up to {:.0} s for {waiting} order(s) held or booking",
                at(started.elapsed()),
                ORDERS_SETTLE_LIMIT.as_secs_f64()
            ));
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Resolves `run_for` after `up`; never without one.
async fn time_up(run_for: Option<Duration>, up: Instant) {
    match run_for {
        Some(limit) => match up.checked_add(limit) {
            Some(end) => tokio::time::sleep_until(end.into()).await,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// What start-up does, and for a running watch how to start it.
fn starting_step(attach: &Attach, concurrency: u32) -> String {
    let moto = match &attach.moto {
        Some(endpoint) => format!("using moto_server at {endpoint}"),
        None => "starting moto_server".to_owned(),
    };
    match &attach.watch {
        None => format!(
            "{moto}, starting the simulated operator and seven functions under cargo lambda watch (a first run builds them)"
        ),
        Some(watch) => {
            let port = watch.endpoint.rsplit(':').next().unwrap_or("9000");
            let port = port.trim_end_matches('/');
            format!(
                "{moto}, starting the simulated operator, waiting up to {:.0} s for cargo lambda watch at {} \
                 (if it is not running, start it in the workspace once this run has written the env file: \
                 cargo lambda watch --invoke-address 127.0.0.1 --invoke-port {port} --concurrency {concurrency} \
                 --env-file {} > watch.log 2>&1, and pass --watch-log watch.log for the alarm)",
                watch.wait.as_secs_f64(),
                watch.endpoint,
                watch.env_file.display(),
            )
        }
    }
}

/// `1 in 10` for 0.1: the share of searches that go on to a cart.
fn share(cart_share: f64) -> String {
    if cart_share <= 0.0 {
        return "none".to_owned();
    }
    let one_in = (1.0 / cart_share).round();
    if one_in >= 1.0 && (1.0 / one_in - cart_share).abs() < 1e-9 {
        format!("1 in {one_in:.0}")
    } else {
        format!("{:.0} %", cart_share * 100.0)
    }
}

fn print_endpoints(progress: &Progress, state: &LocalState, config: &LocalConfig, took: Duration) {
    let operator = &state.operator;
    progress.line(format!("lifeboat local: up in {:.1} s", took.as_secs_f64()));
    progress.line(format!(
        "  search    GET  {}sailings?operator={operator}&from=HEL&to=TLL&date=YYYY-MM-DD&passengers=2",
        state.search_url
    ));
    progress.line(format!("            GET  {}price?…", state.search_url));
    progress.line(format!(
        "  cart      POST {}carts  (then /carts/{{id}}/…)",
        state.cart_url
    ));
    progress.line(format!(
        "  operator  {} (POST /_control/mode {{\"mode\": \"hang\"}} to break it)",
        state.operator_url
    ));
    let running = |attached: bool| if attached { ", already running" } else { "" };
    progress.line(format!(
        "  AWS APIs  {} (moto{})",
        state.moto_endpoint,
        running(config.attach.moto.is_some())
    ));
    progress.line(format!(
        "  Invoke    {} (cargo lambda watch{})",
        state.invoke_endpoint,
        running(config.attach.watch.is_some())
    ));
    if let Some(watch) = &config.attach.watch {
        progress.line(format!(
            "  env file  {} (the running watch's --env-file)",
            watch.env_file.display()
        ));
        if watch.log.is_none() {
            progress.line(
                "  alarm     not evaluated: pass --watch-log with the file the running watch writes to",
            );
        }
    }
    for alarm in &state.alarms {
        progress.line(format!(
            "  alarm     {} on FailedOperatorCalls of {} (evaluated here from the functions' EMF lines)",
            alarm.name, alarm.operator
        ));
    }
    progress.line(format!(
        "  operate   eval \"$(lifeboat local env)\"; lifeboat status   ·   lifeboat local alarm {} ALARM",
        state.alarms.first().map_or("NAME", |a| a.name.as_str())
    ));
    progress.line(format!(
        "  customers {:.1} searches/s, {} goes on to a cart; state file {}",
        config.rate,
        share(config.cart_share),
        config.state_file.display()
    ));
    progress.line(format!(
        "  orders    a cart confirmed while the operator cannot book holds one; booking-worker books them every {:.0} s, one run at a time",
        config.tick_every.as_secs_f64()
    ));
    match config.outage {
        Some(outage) => progress.line(format!(
            "  outage    {} for {:.0} s, {:.0} s from now",
            config.mode.as_str(),
            outage.as_secs_f64(),
            config.outage_after.as_secs_f64()
        )),
        None => progress.line("  outage    none scripted (--outage 60s); Ctrl-C stops everything"),
    }
}

fn print_summary(progress: &Progress, report: &LocalReport) {
    let m = &report.milestones;
    progress.line("summary");
    if m.outage_began.is_some() {
        progress.line(format!(
            "  outage → breaker open {} ({})",
            after(m.opened, m.outage_began),
            m.open_reason.as_deref().unwrap_or("never opened")
        ));
        progress.line(format!(
            "  outage → alarm ALARM  {}",
            after(m.alarm, m.outage_began)
        ));
        progress.line(format!(
            "  open → stream on fallback-consumer {}",
            after(m.mapping_fallback, m.opened)
        ));
        progress.line(format!("  open → off sale {}", after(m.off_sale, m.opened)));
        progress.line(format!(
            "  operator back → closed {}, stream on real-consumer {}, on sale {}",
            after(m.closed, m.outage_ended),
            after(m.mapping_real, m.outage_ended),
            if m.off_sale.is_none() && m.closed_within_the_hold() {
                "never off sale (closed within the off-sale hold)".to_owned()
            } else {
                after(m.on_sale, m.outage_ended)
            }
        ));
    }
    progress.line(format!("  customers: {}", report.traffic.summary()));
    match (&report.orders, &report.orders_error) {
        (Some(orders), _) => {
            let figures = orders.figures();
            progress.line(format!(
                "  orders: held {}, booked {}, refunded {}, parked {}, still open {}; duplicate bookings {}{}",
                figures.held,
                orders.booked(),
                figures.refunded.sold_out + figures.refunded.refused + figures.refunded.price,
                figures.parked,
                orders.open(),
                figures.duplicate_bookings,
                match (m.closed, m.orders_settled) {
                    (Some(_), Some(_)) if figures.held > 0 => format!(
                        "; those held before the close booked (or ended) {} after it",
                        after(m.orders_settled, m.closed)
                    ),
                    _ => String::new(),
                }
            ));
        }
        (None, Some(e)) => progress.line(format!("  orders: not read ({e})")),
        (None, None) => {}
    }
    progress.line(format!(
        "  alarm transitions sent to the circuit switch: {}",
        report.alarm_transitions
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Option<Duration> {
        Some(Duration::from_secs(secs))
    }

    fn closed_at(closed: u64) -> Milestones {
        Milestones {
            opened: s(50),
            mapping_fallback: s(50),
            outage_ended: s(55),
            closed: s(closed),
            mapping_real: s(closed),
            orders_settled: s(closed),
            ..Milestones::default()
        }
    }

    #[test]
    fn the_cart_share_reads_as_one_in_n() {
        assert_eq!(share(0.1), "1 in 10");
        assert_eq!(share(0.5), "1 in 2");
        assert_eq!(share(1.0), "1 in 1");
        assert_eq!(share(0.3), "30 %");
        assert_eq!(share(0.0), "none");
    }

    #[test]
    fn orders_still_waiting_for_a_booking_hold_the_recovery_back() {
        let mut m = closed_at(61);
        m.off_sale = s(60);
        m.on_sale = s(121);
        m.orders_settled = None;
        assert!(!m.recovered(Duration::from_secs(130)));
        assert_eq!(
            m.missing(Duration::from_secs(130)),
            "orders held in the outage still wait for their booking"
        );
        m.orders_settled = s(125);
        assert!(m.recovered(Duration::from_secs(130)));
    }

    #[test]
    fn back_on_sale_after_going_off_is_a_recovery() {
        let mut m = closed_at(61);
        m.off_sale = s(60);
        assert!(!m.recovered(Duration::from_secs(200)));
        assert_eq!(m.missing(Duration::from_secs(200)), "not back on sale");
        m.on_sale = s(121);
        assert!(m.recovered(Duration::from_secs(121)));
    }

    #[test]
    fn a_close_within_the_off_sale_hold_stays_on_sale_once_the_hold_has_passed() {
        let m = closed_at(59);
        let settled = Duration::from_secs(59) + STAYED_ON_SALE_AFTER;
        let early = settled - Duration::from_secs(1);
        assert!(!m.recovered(early));
        assert!(
            m.missing(early).contains("has not passed"),
            "{}",
            m.missing(early)
        );
        assert!(m.recovered(settled));
    }

    #[test]
    fn never_off_sale_after_an_open_longer_than_the_hold_is_no_recovery() {
        // Open 50 → closed 120: the off-sale write should have happened.
        let m = closed_at(120);
        let later = Duration::from_secs(500);
        assert!(!m.recovered(later));
        assert!(
            m.missing(later)
                .contains("open longer than the off-sale hold"),
            "{}",
            m.missing(later)
        );
    }

    #[test]
    fn no_recovery_while_open_or_on_the_fallback_consumer() {
        let mut m = closed_at(59);
        m.mapping_real = None;
        assert!(!m.recovered(Duration::from_secs(500)));
        m.mapping_real = s(59);
        m.closed = None;
        assert!(!m.recovered(Duration::from_secs(500)));
    }
}
