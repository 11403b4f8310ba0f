//! `lifeboat status`: each operator's breaker, its sale status and where the
//! Requests stream points.
//!
//! [`gather`] reads through the core ports only ([`BreakerStore`],
//! [`SaleStatusStore`], [`StreamRouter`]), so it runs unchanged on DynamoDB and
//! Lambda or on the in-memory adapters. A source that is not configured is
//! [`Lookup::Unknown`] and a source that failed is [`Lookup::Failed`]; only the
//! breakers themselves are required.

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::lane::Lanes;
use lifeboat_core::ports::{BreakerStore, SaleStatusStore, StoreError, StreamRouter};
use lifeboat_core::sale::{SaleRecord, status_str};
use lifeboat_core::{BreakerRecord, BreakerState, ConsumerTarget, OperatorId};
use serde::Serialize;

/// The status command could not read the breakers.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("breaker table: {0}")]
    Breakers(#[from] StoreError),
}

/// What was learnt about one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "lookup", rename_all = "snake_case")]
pub enum Lookup<T> {
    /// Read.
    Ok(T),
    /// Not configured: nothing was asked.
    Unknown { why: String },
    /// Asked, but the read failed.
    Failed { error: String },
}

impl<T> Lookup<T> {
    pub fn is_failed(&self) -> bool {
        matches!(self, Lookup::Failed { .. })
    }
}

/// Where the Requests stream's mapping delivers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamView {
    pub target: ConsumerTarget,
}

/// One operator's breaker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerView {
    /// False: no breaker is stored, which the switch reads as closed since
    /// forever.
    pub stored: bool,
    pub state: BreakerState,
    pub version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Seconds in `state` at the report's time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_s: Option<i64>,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<BreakerState>,
    /// Open only: when the half-open trial may start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_until: Option<DateTime<Utc>>,
    /// Failed half-open rounds in a row.
    pub failed_trials: u32,
}

impl BreakerView {
    fn stored(record: &BreakerRecord, now: DateTime<Utc>) -> Self {
        Self {
            stored: true,
            state: record.state,
            version: record.version,
            since: Some(record.since),
            age_s: Some((now - record.since).num_seconds()),
            reason: record.reason.clone(),
            previous: record.previous,
            open_until: record.open_until,
            failed_trials: record.failed_trials,
        }
    }

    fn never_stored() -> Self {
        Self {
            stored: false,
            state: BreakerState::Closed,
            version: 0,
            since: None,
            age_s: None,
            reason: "no breaker stored: closed, never moved".to_owned(),
            previous: None,
            open_until: None,
            failed_trials: 0,
        }
    }
}

/// A write the off-sale listener still owes the sale switch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingView {
    pub status: SaleStatus,
    pub version: u64,
    pub attempts: u32,
    pub next_attempt_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub since: DateTime<Utc>,
    /// Every attempt failed; the listener stopped trying this version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gave_up_at: Option<DateTime<Utc>>,
}

/// One operator's sale status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SaleView {
    /// False: nothing was ever written, so the operator is on sale.
    pub stored: bool,
    pub status: SaleStatus,
    /// The breaker version whose status the switch holds (0: none).
    pub version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingView>,
    /// An unconfirmed attempt may have changed the switch: `status` is what
    /// it held last known, and the pending write is made whatever it is.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub switch_unknown: bool,
}

impl SaleView {
    fn of(record: Option<SaleRecord>) -> Self {
        let Some(record) = record else {
            return Self::never_written();
        };
        Self {
            stored: true,
            switch_unknown: record.switch_unknown,
            status: record.status(),
            version: record.applied_version,
            applied_at: record.applied_at,
            pending: record.pending.map(|p| PendingView {
                status: p.status,
                version: p.version,
                attempts: p.attempts,
                next_attempt_at: p.next_attempt_at,
                last_error: p.last_error,
                since: p.since,
                gave_up_at: p.gave_up_at,
            }),
        }
    }

    fn never_written() -> Self {
        Self {
            stored: false,
            status: SaleStatus::OnSale,
            version: 0,
            applied_at: None,
            pending: None,
            switch_unknown: false,
        }
    }
}

/// One operator's line of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperatorStatus {
    pub operator: OperatorId,
    pub breaker: BreakerView,
    pub sale: Lookup<SaleView>,
    /// Where the operator's requests go: its lane's consumer.
    pub stream: Lookup<StreamView>,
}

/// What `lifeboat status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    /// When it was gathered; ages and waits are counted from here.
    pub at: DateTime<Utc>,
    /// Where the one Requests stream that serves every operator points.
    /// `None` with a lane per operator (the template's layout): each
    /// operator's row has its own lane's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<Lookup<StreamView>>,
    pub operators: Vec<OperatorStatus>,
}

impl StatusReport {
    /// Whether some source failed to answer (as opposed to not configured).
    pub fn has_failures(&self) -> bool {
        self.stream.as_ref().is_some_and(Lookup::is_failed)
            || self
                .operators
                .iter()
                .any(|o| o.sale.is_failed() || o.stream.is_failed())
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
}

/// The sources [`gather`] reads. `Err` holds why a source is not configured.
pub struct Sources<'a> {
    pub breakers: &'a dyn BreakerStore,
    pub sales: Result<&'a dyn SaleStatusStore, String>,
    pub streams: Result<StreamSource<'a>, String>,
}

/// Where the Requests streams' targets are read.
pub enum StreamSource<'a> {
    /// One mapping for every operator.
    Shared(&'a dyn StreamRouter),
    /// A lane per operator (the template's layout).
    PerOperator(&'a Lanes),
}

async fn target(router: &dyn StreamRouter) -> Lookup<StreamView> {
    match router.current().await {
        Ok(target) => Lookup::Ok(StreamView { target }),
        Err(e) => Lookup::Failed {
            error: e.to_string(),
        },
    }
}

/// Read every breaker (or only `only`'s), each operator's sale status and the
/// stream's target, as of `now`.
pub async fn gather(
    sources: &Sources<'_>,
    only: Option<&OperatorId>,
    now: DateTime<Utc>,
) -> Result<StatusReport, StatusError> {
    let mut breakers: Vec<(OperatorId, BreakerView)> = match only {
        Some(operator) => {
            let view = match sources.breakers.load(operator).await? {
                Some(record) => BreakerView::stored(&record, now),
                None => BreakerView::never_stored(),
            };
            vec![(operator.clone(), view)]
        }
        None => sources
            .breakers
            .list()
            .await?
            .iter()
            .map(|r| (r.operator.clone(), BreakerView::stored(r, now)))
            .collect(),
    };
    breakers.sort_by(|a, b| a.0.cmp(&b.0));

    let shared = match &sources.streams {
        Ok(StreamSource::Shared(router)) => Some(target(*router).await),
        Ok(StreamSource::PerOperator(_)) => None,
        Err(why) => Some(Lookup::Unknown { why: why.clone() }),
    };
    let mut operators = Vec::with_capacity(breakers.len());
    for (operator, breaker) in breakers {
        let stream = match (&sources.streams, &shared) {
            (Ok(StreamSource::PerOperator(lanes)), _) => match lanes.of(&operator) {
                Some(lane) => target(lane.router.as_ref()).await,
                None => Lookup::Unknown {
                    why: format!("no stream mapping found for {operator}'s table"),
                },
            },
            (_, Some(shared)) => shared.clone(),
            // `shared` is None only with a lane per operator, above.
            (_, None) => Lookup::Unknown {
                why: "no stream read".to_owned(),
            },
        };
        let sale = match &sources.sales {
            Ok(store) => match store.load(&operator).await {
                Ok(record) => Lookup::Ok(SaleView::of(record)),
                Err(e) => Lookup::Failed {
                    error: e.to_string(),
                },
            },
            Err(why) => Lookup::Unknown { why: why.clone() },
        };
        operators.push(OperatorStatus {
            operator,
            breaker,
            sale,
            stream,
        });
    }

    Ok(StatusReport {
        at: now,
        stream: shared,
        operators,
    })
}

/// `2026-12-01T10:00:05Z`.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A short human length: `42s`, `2m 05s`, `3h 04m`, `2d 03h`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m {:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// `2026-12-01T10:00:05Z (2m 05s ago)` or `… (in 25s)`, relative to `now`.
pub fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let delta = at - now;
    let relative = match delta.to_std() {
        Ok(ahead) if !ahead.is_zero() => format!("in {}", span(ahead)),
        _ => match (-delta).to_std() {
            Ok(ago) if !ago.is_zero() => format!("{} ago", span(ago)),
            _ => "now".to_owned(),
        },
    };
    format!("{} ({relative})", timestamp(at))
}

fn consumer(target: ConsumerTarget) -> &'static str {
    match target {
        ConsumerTarget::Real => "real consumer",
        ConsumerTarget::Fallback => "fallback consumer (fails every request fast)",
    }
}

fn sale_cell(sale: &Lookup<SaleView>) -> String {
    match sale {
        Lookup::Ok(view) if view.stored => format!("{} v{}", status_str(view.status), view.version),
        Lookup::Ok(view) => format!("{} (never written)", status_str(view.status)),
        Lookup::Unknown { .. } => "unknown".to_owned(),
        Lookup::Failed { .. } => "error".to_owned(),
    }
}

/// The report as a table: the shared stream first (with a lane per
/// operator, each row's STREAM column is its lane's), then one row per
/// operator, with a line under a row for a pending sale write or a failed
/// read.
pub fn render_table(report: &StatusReport) -> String {
    let now = report.at;
    let mut out = String::new();
    if let Some(stream) = &report.stream {
        let stream = match stream {
            Lookup::Ok(view) => consumer(view.target).to_owned(),
            Lookup::Unknown { why } => format!("unknown ({why})"),
            Lookup::Failed { error } => format!("error: {error}"),
        };
        let _ = writeln!(out, "requests stream: {stream}");
    }
    if report.operators.is_empty() {
        let _ = writeln!(out, "no breakers stored");
        return out;
    }
    if let Some(Lookup::Unknown { why }) = report
        .operators
        .first()
        .map(|o| &o.sale)
        .filter(|s| matches!(s, Lookup::Unknown { .. }))
    {
        let _ = writeln!(out, "sale status: unknown ({why})");
    }
    if !out.is_empty() {
        let _ = writeln!(out);
    }

    let header = [
        "OPERATOR",
        "BREAKER",
        "VERSION",
        "SINCE",
        "OPEN UNTIL",
        "SALE",
        "STREAM",
        "REASON",
    ];
    let rows: Vec<[String; 8]> = report
        .operators
        .iter()
        .map(|o| {
            let b = &o.breaker;
            [
                o.operator.to_string(),
                b.state.to_string(),
                b.version.to_string(),
                b.since.map_or_else(|| "-".to_owned(), |s| when(s, now)),
                b.open_until
                    .map_or_else(|| "-".to_owned(), |u| when(u, now)),
                sale_cell(&o.sale),
                match &o.stream {
                    Lookup::Ok(view) => match view.target {
                        ConsumerTarget::Real => "real consumer".to_owned(),
                        ConsumerTarget::Fallback => "fallback consumer".to_owned(),
                    },
                    Lookup::Unknown { .. } => "unknown".to_owned(),
                    Lookup::Failed { .. } => "error".to_owned(),
                },
                b.reason.clone(),
            ]
        })
        .collect();
    let columns = super::table::Columns::fit(&header, &rows);
    columns.line(&mut out, &header);
    for (row, o) in rows.iter().zip(&report.operators) {
        columns.row(&mut out, row);
        match &o.sale {
            Lookup::Ok(SaleView {
                pending: Some(p),
                switch_unknown,
                ..
            }) => {
                let mut text = format!(
                    "  sale write pending: {} v{}, {} attempt{}",
                    status_str(p.status),
                    p.version,
                    p.attempts,
                    if p.attempts == 1 { "" } else { "s" }
                );
                match p.gave_up_at {
                    Some(at) => {
                        let _ = write!(text, ", gave up {}", when(at, now));
                    }
                    None => {
                        let _ = write!(text, ", next attempt {}", when(p.next_attempt_at, now));
                    }
                }
                if let Some(e) = &p.last_error {
                    let _ = write!(text, ", last error: {e}");
                }
                if *switch_unknown {
                    text.push_str(" (an earlier attempt may have changed the switch)");
                }
                let _ = writeln!(out, "{text}");
            }
            Lookup::Failed { error } => {
                let _ = writeln!(out, "  sale status: {error}");
            }
            _ => {}
        }
        // A lane's own failed read; a shared stream's is on the first line.
        if let (None, Lookup::Failed { error }) = (&report.stream, &o.stream) {
            let _ = writeln!(out, "  stream: {error}");
        }
    }
    out
}
