//! Recorded operator calls: the input of `lifeboat advise-timeouts` (and of
//! the replay to come).
//!
//! One row per operator call, as CSV with the header
//! `at,operator,operation,duration_ms,outcome` or as JSON Lines with the same
//! fields: `at` RFC 3339, `operation` `search` or `price`, `duration_ms` a
//! whole or decimal number of milliseconds, `outcome` `answered`, `timeout`
//! or `failed`. docs/timeouts.md has the Logs Insights query that exports it
//! from the real consumer's log lines. An optional sixth column (field)
//! `question` names the question asked (any text without commas, e.g. a hash
//! of the cache key): `lifeboat replay` then knows which answers a cache
//! would have held; without it every call is a question of its own.

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::{Operation, OperatorId};
use lifeboat_operator::{LatencyModel, SimRng};
use serde::{Deserialize, Serialize};

/// The CSV header, in this order.
pub const HEADER: &str = "at,operator,operation,duration_ms,outcome";
/// The CSV header with the optional question column.
pub const HEADER_WITH_QUESTION: &str = "at,operator,operation,duration_ms,outcome,question";

/// What became of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// A useful answer.
    Answered,
    /// No answer within the budget of the time.
    Timeout,
    /// An error answer or a broken connection.
    Failed,
}

impl CallOutcome {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "answered" => Some(Self::Answered),
            "timeout" => Some(Self::Timeout),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
        }
    }
}

/// One operator call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub at: DateTime<Utc>,
    pub operator: OperatorId,
    pub operation: Operation,
    pub duration_ms: f64,
    pub outcome: CallOutcome,
    /// The question asked, where the export knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

impl CallRecord {
    /// The question's key for a cache: its `question`, or the call itself
    /// (time, operator, operation) when none was recorded.
    pub fn question_key(&self) -> String {
        match &self.question {
            Some(q) => format!("{}#{}#{q}", self.operator, self.operation),
            None => format!(
                "{}#{}#{}",
                self.operator,
                self.operation,
                self.at.timestamp_nanos_opt().unwrap_or_default()
            ),
        }
    }
}

/// A row that cannot be read, with its line number (from 1).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct ReadError {
    pub line: usize,
    pub why: String,
}

fn bad(line: usize, why: impl Into<String>) -> ReadError {
    ReadError {
        line,
        why: why.into(),
    }
}

/// Read CSV (first line the header) or JSON Lines (first non-blank
/// character `{`). Blank lines are skipped; any other bad row is an error
/// naming its line.
pub fn read(text: &str) -> Result<Vec<CallRecord>, ReadError> {
    let json = text.trim_start().starts_with('{');
    let mut calls = Vec::new();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    let mut with_question = false;
    if !json {
        match lines.find(|(_, l)| !l.is_empty()) {
            Some((_, header)) if header == HEADER => {}
            Some((_, header)) if header == HEADER_WITH_QUESTION => with_question = true,
            Some((n, header)) => {
                return Err(bad(
                    n,
                    format!("the header must be {HEADER:?}, not {header:?}"),
                ));
            }
            None => return Ok(calls),
        }
    }
    for (n, line) in lines.filter(|(_, l)| !l.is_empty()) {
        let call = if json {
            serde_json::from_str::<CallRecord>(line).map_err(|e| bad(n, e.to_string()))?
        } else {
            csv_row(n, line, with_question)?
        };
        if !matches!(call.operation, Operation::Search | Operation::Price) {
            return Err(bad(n, "operation must be search or price"));
        }
        if !(call.duration_ms.is_finite() && call.duration_ms >= 0.0) {
            return Err(bad(
                n,
                "duration_ms must be a number of milliseconds, 0 or more",
            ));
        }
        calls.push(call);
    }
    Ok(calls)
}

fn csv_row(n: usize, line: &str, with_question: bool) -> Result<CallRecord, ReadError> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let (fields, question) = match (with_question, fields.split_last()) {
        (true, Some((question, rest))) if fields.len() == 6 => {
            (rest, (!question.is_empty()).then(|| (*question).to_owned()))
        }
        (true, _) => {
            return Err(bad(
                n,
                format!(
                    "6 fields expected ({HEADER_WITH_QUESTION}), found {}",
                    fields.len()
                ),
            ));
        }
        (false, _) => (&fields[..], None),
    };
    let [at, operator, operation, duration, outcome] = fields[..] else {
        return Err(bad(
            n,
            format!("5 fields expected ({HEADER}), found {}", fields.len()),
        ));
    };
    Ok(CallRecord {
        at: parse_at(at).ok_or_else(|| {
            bad(
                n,
                format!("at {at:?} is not RFC 3339 (nor Logs Insights' YYYY-MM-DD HH:MM:SS.mmm)"),
            )
        })?,
        operator: OperatorId::new(operator)
            .map_err(|e| bad(n, format!("operator {operator:?}: {e}")))?,
        operation: match operation {
            "search" => Operation::Search,
            "price" => Operation::Price,
            other => {
                return Err(bad(
                    n,
                    format!("operation {other:?} is not search or price"),
                ));
            }
        },
        duration_ms: duration
            .parse::<f64>()
            .map_err(|_| bad(n, format!("duration_ms {duration:?} is not a number")))?,
        outcome: CallOutcome::parse(outcome).ok_or_else(|| {
            bad(
                n,
                format!("outcome {outcome:?} is not answered, timeout or failed"),
            )
        })?,
        question,
    })
}

/// RFC 3339, or the UTC time Logs Insights writes in its CSV export.
fn parse_at(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                .ok()
                .map(|t| t.and_utc())
        })
}

/// `calls` as CSV, header first; with the question column when any call
/// has a question.
pub fn to_csv(calls: &[CallRecord]) -> String {
    let mut out = String::with_capacity(64 * (calls.len() + 1));
    let with_question = calls.iter().any(|c| c.question.is_some());
    let header = if with_question {
        HEADER_WITH_QUESTION
    } else {
        HEADER
    };
    let _ = writeln!(out, "{header}");
    for c in calls {
        let _ = write!(
            out,
            "{},{},{},{:.0},{}",
            c.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            c.operator,
            c.operation,
            c.duration_ms,
            c.outcome.as_str()
        );
        if with_question {
            let _ = write!(out, ",{}", c.question.as_deref().unwrap_or_default());
        }
        out.push('\n');
    }
    out
}

/// Calls recorded under budgets `search_budget` and `price_budget`: each
/// answer time drawn from `model` (an answer slower than the budget is a
/// timeout at the budget; a share `model.error_rate` fails at once), `n`
/// per operation, spread evenly over a day from `start`. Deterministic per
/// seed.
pub fn synthetic(
    operator: &OperatorId,
    model: &LatencyModel,
    budgets: [(Operation, Duration); 2],
    n: usize,
    seed: u64,
    start: DateTime<Utc>,
) -> Vec<CallRecord> {
    let mut rng = SimRng::new(seed);
    let mut calls = Vec::with_capacity(2 * n);
    let gap_ms = 86_400_000 / n.max(1) as i64;
    for (operation, budget) in budgets {
        for i in 0..n {
            let at = start + TimeDelta::milliseconds(gap_ms * i as i64);
            let answer = model.sample(&mut rng).as_secs_f64() * 1000.0;
            let budget_ms = budget.as_secs_f64() * 1000.0;
            let (duration_ms, outcome) = if rng.next_f64() < model.error_rate {
                (answer.min(budget_ms) * 0.2, CallOutcome::Failed)
            } else if answer > budget_ms {
                (budget_ms, CallOutcome::Timeout)
            } else {
                (answer, CallOutcome::Answered)
            };
            calls.push(CallRecord {
                at,
                operator: operator.clone(),
                operation,
                duration_ms: duration_ms.round(),
                outcome,
                question: None,
            });
        }
    }
    calls.sort_by_key(|c| c.at);
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn csv_and_json_lines_read_the_same_calls_and_csv_round_trips() {
        let csv = "at,operator,operation,duration_ms,outcome\n\
                   2026-11-03T09:00:00Z,nordic,search,1312,answered\n\
                   \n\
                   2026-11-03 09:00:01.500,nordic,price,7000,timeout\n";
        let calls = read(csv).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].outcome, CallOutcome::Timeout);
        assert_eq!(calls[1].operation, Operation::Price);
        let jsonl = r#"{"at":"2026-11-03T09:00:00Z","operator":"nordic","operation":"search","duration_ms":1312,"outcome":"answered"}
{"at":"2026-11-03T09:00:01.5Z","operator":"nordic","operation":"price","duration_ms":7000,"outcome":"timeout"}"#;
        assert_eq!(read(jsonl).unwrap_or_else(|e| panic!("{e}")), calls);
        assert_eq!(
            read(&to_csv(&calls)).unwrap_or_else(|e| panic!("{e}")),
            calls
        );
    }

    #[test]
    fn bad_rows_name_their_line_and_what_is_wrong() {
        let header = format!("{HEADER}\n");
        let cases = [
            ("at,operator\n", 1, "header"),
            (
                &*format!("{header}2026-11-03,nordic,search,1,answered"),
                2,
                "RFC 3339",
            ),
            (
                &*format!("{header}2026-11-03T09:00:00Z,Nordic,search,1,answered"),
                2,
                "operator",
            ),
            (
                &*format!("{header}2026-11-03T09:00:00Z,nordic,book,1,answered"),
                2,
                "search or price",
            ),
            (
                &*format!("{header}2026-11-03T09:00:00Z,nordic,search,fast,answered"),
                2,
                "number",
            ),
            (
                &*format!("{header}2026-11-03T09:00:00Z,nordic,search,-4,answered"),
                2,
                "0 or more",
            ),
            (
                &*format!("{header}2026-11-03T09:00:00Z,nordic,search,1,ok"),
                2,
                "answered, timeout",
            ),
            (
                &*format!("{header}2026-11-03T09:00:00Z,nordic,search,1"),
                2,
                "5 fields",
            ),
        ];
        for (text, line, says) in cases {
            let e = read(text).expect_err(text);
            assert_eq!(e.line, line, "{text}");
            assert!(e.to_string().contains(says), "{e} should say {says}");
        }
    }

    #[test]
    fn synthetic_calls_follow_the_budgets_and_the_seed() {
        let model = LatencyModel::default();
        let budgets = [
            (Operation::Search, Duration::from_secs(7)),
            (Operation::Price, Duration::from_secs(2)),
        ];
        let calls = synthetic(&nordic(), &model, budgets, 2_000, 1, DateTime::UNIX_EPOCH);
        assert_eq!(calls.len(), 4_000);
        assert!(calls.iter().all(|c| match c.operation {
            Operation::Search => c.duration_ms <= 7_000.0,
            Operation::Price => c.duration_ms <= 2_000.0,
            Operation::Ping | Operation::Book => false,
        }));
        let price_timeouts = calls
            .iter()
            .filter(|c| c.operation == Operation::Price && c.outcome == CallOutcome::Timeout)
            .count();
        // The second cluster (2.3 s) and the tail are past a 2 s budget.
        assert!((500..800).contains(&price_timeouts), "{price_timeouts}");
        let again = synthetic(&nordic(), &model, budgets, 2_000, 1, DateTime::UNIX_EPOCH);
        assert_eq!(calls, again);
    }
}
