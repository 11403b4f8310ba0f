//! The run after start-up: the outage script, and the observer that reads
//! the alarm, the breaker, the stream mapping, the sale status and the
//! orders held and prints what changed.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::breaker::BreakerState;
use lifeboat_core::events::SaleStatus;
use lifeboat_core::ports::{BreakerStore, SaleStatusStore};
use lifeboat_local::suite::{FALLBACK_CONSUMER, LocalSuite, REAL_CONSUMER};

use super::orders;
use super::traffic::{Traffic, TrafficCounts};
use super::{LocalConfig, LocalError, LocalReport, Milestones, at};
use crate::progress::Progress;

/// What the observer last saw.
#[derive(Debug, Default)]
struct Seen {
    breaker: Option<(BreakerState, u64)>,
    mapping: Option<String>,
    sale: Option<SaleStatus>,
    /// The run's orders by state, as last printed.
    orders: String,
    /// When the orders were last read.
    orders_read: Option<Duration>,
    alarm_transitions: usize,
    read_errors: u64,
}

/// How often the observer reads the Orders table (a scan): a booking's
/// turn takes seconds.
const ORDERS_EVERY: Duration = Duration::from_secs(1);

/// The run after start-up: the outage script and the observer.
pub(super) async fn watch_run(
    gateway: &LocalSuite,
    config: &LocalConfig,
    traffic: &Traffic,
    progress: &Progress,
    started: Instant,
    report: &mut LocalReport,
) -> Result<(), LocalError> {
    let ready = started.elapsed();
    let started_wall = Utc::now() - ready;
    let outage_at = config.outage.map(|_| ready + config.outage_after);
    let outage_end = config.outage.map(|o| ready + config.outage_after + o);
    let mut seen = Seen::default();
    let mut last_traffic = (started.elapsed(), TrafficCounts::default());
    let operator = &config.operator;
    loop {
        let now = started.elapsed();
        let m = &mut report.milestones;
        if let Some(begin) = outage_at
            && now >= begin
            && m.outage_began.is_none()
        {
            gateway
                .set_operator_mode(Some(config.mode.as_str()))
                .await
                .map_err(LocalError::Operator)?;
            m.outage_began = Some(started.elapsed());
            progress.line(format!(
                "{} operator {operator}: {} (outage begins)",
                at(started.elapsed()),
                config.mode.as_str()
            ));
        }
        if let Some(end) = outage_end
            && now >= end
            && m.outage_ended.is_none()
        {
            gateway
                .set_operator_mode(None)
                .await
                .map_err(LocalError::Operator)?;
            m.outage_ended = Some(started.elapsed());
            progress.line(format!(
                "{} operator {operator}: healthy (outage ends)",
                at(started.elapsed())
            ));
        }
        observe(
            gateway,
            operator,
            progress,
            started,
            started_wall,
            &mut seen,
            m,
        )
        .await;
        if seen
            .orders_read
            .is_none_or(|last| now.saturating_sub(last) >= ORDERS_EVERY)
        {
            seen.orders_read = Some(now);
            observe_orders(gateway, progress, started, started_wall, &mut seen, m).await;
        }
        if now.saturating_sub(last_traffic.0) >= Duration::from_secs(10) {
            let counts = traffic.counts();
            progress.line(format!(
                "{} customers, last 10 s: {}",
                at(now),
                counts.since(&last_traffic.1).summary()
            ));
            last_traffic = (now, counts);
        }
        progress.status(status_line(&seen, m, now));
        if config.exit_after_recovery
            && let Some(end) = m.outage_ended
        {
            if m.opened.is_some() && m.recovered(now) {
                return Ok(());
            }
            if now.saturating_sub(end) > config.recovery_limit {
                return Err(LocalError::NoRecovery {
                    limit: config.recovery_limit,
                    missing: m.missing(now),
                });
            }
        }
        tokio::time::sleep(config.poll_every).await;
    }
}

fn status_line(seen: &Seen, m: &Milestones, now: Duration) -> String {
    let breaker = seen.breaker.map_or("unknown".to_owned(), |(s, v)| {
        format!("{} v{v}", s.as_str())
    });
    let sale = seen.sale.map_or("on_sale", sale_str);
    let phase = match (m.outage_began, m.outage_ended) {
        (Some(_), None) => "outage",
        (Some(_), Some(_)) => "after the outage",
        _ => "healthy",
    };
    format!(
        "{phase} · breaker {breaker} · stream → {} · {sale} · {:.0} s",
        seen.mapping.as_deref().unwrap_or("?"),
        now.as_secs_f64()
    )
}

/// Read the breaker, the mapping, the sale status and the alarm; print what
/// changed and note the milestones.
#[allow(clippy::too_many_arguments)]
async fn observe(
    gateway: &LocalSuite,
    operator: &OperatorId,
    progress: &Progress,
    started: Instant,
    started_wall: DateTime<Utc>,
    seen: &mut Seen,
    m: &mut Milestones,
) {
    let after_outage = m.outage_ended.is_some();
    if let Some(alarm) = gateway.alarm() {
        let stats = alarm.stats();
        for sent in stats.transitions.iter().skip(seen.alarm_transitions) {
            let t = &sent.transition;
            // When the alarm changed, not when it was seen here: the switch
            // may have opened the breaker before the delivery returned.
            if t.current.value == lifeboat_local::alarm::AlarmState::Alarm && m.alarm.is_none() {
                let since_start = (t.current.timestamp - started_wall)
                    .to_std()
                    .unwrap_or_default();
                m.alarm = Some(since_start.min(started.elapsed()));
            }
            progress.line(format!(
                "{} alarm {}: {} → {}{} ({})",
                at(started.elapsed()),
                alarm.rule().name,
                t.previous.value,
                t.current.value,
                if sent.delivered {
                    ""
                } else {
                    ", NOT delivered to the switch"
                },
                t.current.reason
            ));
        }
        seen.alarm_transitions = stats.transitions.len();
    }
    match gateway.breaker_store().load(operator).await {
        Ok(Some(b)) => {
            if seen.breaker != Some((b.state, b.version)) {
                let now = started.elapsed();
                progress.line(format!(
                    "{} breaker {operator}: {} → {} (v{}: {})",
                    at(now),
                    // The state before: as seen here, else as the record
                    // says (a moto that outlived an earlier run keeps it).
                    seen.breaker
                        .map(|(s, _)| s)
                        .or(b.previous)
                        .unwrap_or(BreakerState::Closed)
                        .as_str(),
                    b.state.as_str(),
                    b.version,
                    b.reason
                ));
                if b.state == BreakerState::Open && m.opened.is_none() {
                    m.opened = Some(now);
                    m.open_reason = Some(b.reason.clone());
                }
                seen.breaker = Some((b.state, b.version));
                m.breaker_seen.push((now, b.state));
            }
            if after_outage
                && b.state == BreakerState::Closed
                && m.closed.is_none()
                && m.opened.is_some()
            {
                m.closed = Some(started.elapsed());
            }
        }
        Ok(None) => {}
        Err(e) => read_error(progress, seen, "breaker", &e.to_string()),
    }
    match gateway.mapping_function().await {
        Ok(function) => {
            if seen.mapping.as_deref() != Some(function.as_str()) {
                let now = started.elapsed();
                if seen.mapping.is_some() {
                    progress.line(format!("{} Requests stream → {function}", at(now)));
                }
                if function == FALLBACK_CONSUMER && m.mapping_fallback.is_none() {
                    m.mapping_fallback = Some(now);
                }
                seen.mapping = Some(function.clone());
            }
            if after_outage
                && function == REAL_CONSUMER
                && m.mapping_real.is_none()
                && m.mapping_fallback.is_some()
            {
                m.mapping_real = Some(started.elapsed());
            }
        }
        Err(e) => read_error(progress, seen, "mapping", &e.to_string()),
    }
    let sale = match gateway.sale_status_store() {
        Ok(store) => store.load(operator).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match sale {
        Ok(record) => {
            let status = record.map_or(SaleStatus::OnSale, |r| r.applied_status);
            if seen.sale != Some(status) {
                let now = started.elapsed();
                if seen.sale.is_some() || status != SaleStatus::OnSale {
                    progress.line(format!("{} sale {operator}: {}", at(now), sale_str(status)));
                }
                if status == SaleStatus::OffSale && m.off_sale.is_none() {
                    m.off_sale = Some(now);
                }
                seen.sale = Some(status);
            }
            if after_outage
                && status == SaleStatus::OnSale
                && m.on_sale.is_none()
                && m.off_sale.is_some()
            {
                m.on_sale = Some(started.elapsed());
            }
        }
        Err(e) => read_error(progress, seen, "sale status", &e),
    }
}

/// Read the orders held since the run began; print their states when they
/// change, and note when every order held before the close has left held
/// and booking (orders held after it, while the operator is still off sale,
/// keep coming until it is back on sale).
async fn observe_orders(
    gateway: &LocalSuite,
    progress: &Progress,
    started: Instant,
    started_wall: DateTime<Utc>,
    seen: &mut Seen,
    m: &mut Milestones,
) {
    let mut held = match orders::held_since(gateway, started_wall).await {
        Ok(held) => held,
        Err(e) => return read_error(progress, seen, "orders", &e.to_string()),
    };
    let states = orders::by_state(&held);
    if states != seen.orders {
        progress.line(format!("{} orders: {states}", at(started.elapsed())));
        seen.orders = states;
    }
    if let Some(closed) = m.closed
        && m.orders_settled.is_none()
    {
        let closed_at = started_wall + chrono::Duration::from_std(closed).unwrap_or_default();
        held.retain(|o| o.held_at <= closed_at);
        if orders::waiting(&held) == 0 {
            m.orders_settled = Some(started.elapsed());
        }
    }
}

fn sale_str(status: SaleStatus) -> &'static str {
    match status {
        SaleStatus::OnSale => "on_sale",
        SaleStatus::OffSale => "off_sale",
    }
}

fn read_error(progress: &Progress, seen: &mut Seen, what: &str, error: &str) {
    seen.read_errors += 1;
    // The first and then every 40th (10 s at the default pace).
    if seen.read_errors % 40 == 1 {
        progress.line(format!("cannot read the {what}: {error}"));
    }
}
