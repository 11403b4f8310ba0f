//! Showing a [`DetectionReport`]: the table `lifeboat detection` prints
//! (one row per incident, then the warnings) and the JSON it prints with
//! `--json`.

use std::fmt::Write as _;
use std::time::Duration;

use super::{DetectionReport, FirstFailureSource, OpenedBy};
use crate::ops::status::{span, timestamp};

impl DetectionReport {
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
}

impl OpenedBy {
    fn describe(&self) -> String {
        match self {
            OpenedBy::Alarm { alarm } => format!("alarm {alarm}"),
            OpenedBy::FailureWindow { rule } => format!("failure window: {rule}"),
            OpenedBy::Command { reason } => format!("command: {reason}"),
        }
    }
}

fn secs_cell(s: Option<f64>, missing: &str) -> String {
    s.map_or_else(|| missing.to_owned(), |s| format!("{s:.1} s"))
}

/// The report as a table: one row per incident, then the warnings.
pub fn render_table(report: &DetectionReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "alarm {} watches {}; incidents since {}{} (alarm and opening paired within {})",
        report.alarm,
        report.alarm_operator,
        timestamp(report.since),
        report
            .operator
            .as_ref()
            .map_or_else(String::new, |o| format!(" of {o}")),
        span(Duration::from_secs(report.window_s)),
    );
    if report.incidents.is_empty() {
        let _ = writeln!(out, "no incidents");
    } else {
        let _ = writeln!(out);
        let header = [
            "STARTED",
            "OPERATOR",
            "FIRST FAILURE",
            "FAILURE->ALARM",
            "FAILURE->OPEN",
            "ALARM->OPEN",
            "OPENED BY",
        ];
        let rows: Vec<[String; 7]> = report
            .incidents
            .iter()
            .map(|i| {
                let alarm_missing = if i.alarm.is_none() {
                    "no alarm"
                } else {
                    "unknown"
                };
                let open_missing = if i.breaker.is_none() {
                    "no breaker record"
                } else {
                    "unknown"
                };
                [
                    timestamp(i.started),
                    i.operator.to_string(),
                    match (i.first_failure, i.first_failure_source) {
                        (Some(at), Some(FirstFailureSource::FailureWindow)) => {
                            format!("{} (window)", timestamp(at))
                        }
                        (Some(at), _) => format!("{} (alarm)", timestamp(at)),
                        (None, _) => "unknown".to_owned(),
                    },
                    secs_cell(i.failure_to_alarm_s, alarm_missing),
                    secs_cell(i.failure_to_open_s, open_missing),
                    secs_cell(
                        i.alarm_to_open_s,
                        if i.alarm.is_none() {
                            "no alarm"
                        } else {
                            "no breaker record"
                        },
                    ),
                    i.breaker
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |b| b.opened_by.describe()),
                ]
            })
            .collect();
        let columns = crate::ops::table::Columns::fit(&header, &rows);
        columns.line(&mut out, &header);
        for row in &rows {
            columns.row(&mut out, row);
        }
        let _ = writeln!(
            out,
            "\nfirst failure: (window) the failure window's first failing 1 s bucket before the \
             trip; (alarm) the start of the alarm's first breaching period. ALARM->OPEN below \
             zero: the breaker opened first."
        );
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}
