//! The demo's carts minute by minute on a short day, and docs/carts.md's
//! Logs Insights queries run on the `cart step` lines the cart function
//! printed during it (Lambda's JSON formatter): their `fields`, `filter` and
//! `stats` stages applied to the lines give the same totals as the rows.
//!
//! The captured lines carry no timestamps, so `bin(1m)` and `datefloor(…)`
//! put every line in one bucket here: this checks what the queries extract
//! and sum, not CloudWatch's binning.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lifeboat_command::carts::MinuteRow;
use lifeboat_core::BreakerState;
use lifeboat_harness::demo::{self, Report, Script};
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/carts.md");

/// Log lines, as Lambda's log stream receives them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A short day: 3 minutes healthy, a 2-minute hang, 3 minutes of recovery.
fn short_day() -> (Report, Vec<Value>) {
    let captured = Captured::default();
    // The subscriber a function sets up with AWS_LAMBDA_LOG_FORMAT=JSON.
    let subscriber = lifeboat_aws::logs::subscriber(
        captured.clone(),
        true,
        lifeboat_aws::logs::filter(Some("INFO"), None),
    );
    let script = Script {
        healthy: Duration::from_secs(180),
        outage: Duration::from_secs(120),
        recovery: Duration::from_secs(180),
        ..Script::default()
    };
    let report =
        tracing::subscriber::with_default(subscriber, || demo::run_paused(&script).unwrap());
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (report, lines)
}

// --- a small Logs Insights: fields, filter, stats and sort stages ----------

/// One record: the log line it came from (none after `stats`) and the
/// fields the query named.
#[derive(Debug, Clone)]
struct Record {
    line: Value,
    named: BTreeMap<String, Value>,
}

impl Record {
    fn get(&self, name: &str) -> Value {
        if let Some(v) = self.named.get(name) {
            return v.clone();
        }
        name.split('.')
            .try_fold(&self.line, |v, key| v.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// `expr as name` or `expr`.
fn named(item: &str) -> (String, String) {
    match item.split_once(" as ") {
        Some((expr, name)) => (expr.trim().to_owned(), name.trim().to_owned()),
        None => (item.trim().to_owned(), item.trim().to_owned()),
    }
}

/// Split on commas outside parentheses.
fn items(list: &str) -> Vec<String> {
    let (mut out, mut depth, mut current) = (Vec::new(), 0, String::new());
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out.into_iter().map(|s| s.trim().to_owned()).collect()
}

fn literal(text: &str) -> Value {
    let text = text.trim();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(s) => Value::String(s.to_owned()),
        None => serde_json::from_str(text).unwrap_or_else(|_| panic!("literal {text}")),
    }
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn run(query: &str, lines: &[Value]) -> Vec<Record> {
    let mut records: Vec<Record> = lines
        .iter()
        .map(|line| Record {
            line: line.clone(),
            named: BTreeMap::new(),
        })
        .collect();
    for stage in query.split("\n|").map(str::trim) {
        let (command, rest) = stage.split_once(' ').unwrap();
        match command {
            "fields" => {
                for record in &mut records {
                    for (expr, name) in items(rest).iter().map(|i| named(i)) {
                        let value = record.get(&expr);
                        record.named.insert(name, value);
                    }
                }
            }
            "filter" => {
                let (field, value) = rest.split_once(" = ").unwrap();
                let value = literal(value);
                records.retain(|r| number_or_same(&r.get(field.trim()), &value));
            }
            "stats" => records = stats(rest, &records),
            "sort" => {}
            other => panic!("a stage this test does not run: {other}"),
        }
    }
    records
}

fn number_or_same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn stats(clause: &str, records: &[Record]) -> Vec<Record> {
    let (aggregations, by) = clause.split_once(" by ").unwrap();
    let keys: Vec<(String, String)> = items(by).iter().map(|i| named(i)).collect();
    let aggregations: Vec<(String, String)> =
        items(aggregations).iter().map(|i| named(i)).collect();
    let mut groups: BTreeMap<Vec<String>, Vec<&Record>> = BTreeMap::new();
    for record in records {
        let key = keys
            .iter()
            .map(|(expr, _)| {
                if expr.starts_with("bin(") || expr.starts_with("datefloor(") {
                    // No timestamps here: one bucket.
                    "all".to_owned()
                } else {
                    record.get(expr).to_string()
                }
            })
            .collect();
        groups.entry(key).or_default().push(record);
    }
    groups
        .into_iter()
        .map(|(key, members)| {
            let mut named: BTreeMap<String, Value> = keys
                .iter()
                .zip(key)
                .map(|((_, name), value)| {
                    (
                        name.clone(),
                        serde_json::from_str(&value).unwrap_or(Value::String(value)),
                    )
                })
                .collect();
            for (expr, name) in &aggregations {
                let (function, argument) = expr.trim_end_matches(')').split_once('(').unwrap();
                let value = match (function, argument) {
                    ("count", "*") => Value::from(members.len()),
                    ("sum", field) => {
                        Value::from(members.iter().map(|r| number(&r.get(field))).sum::<f64>())
                    }
                    // No timestamps here.
                    ("max", "@timestamp") => Value::from(0),
                    other => panic!("an aggregation this test does not run: {other:?}"),
                };
                named.insert(name.clone(), value);
            }
            Record {
                line: Value::Null,
                named,
            }
        })
        .collect()
}

/// The documented query whose first stage starts with `start`.
fn documented(start: &str) -> &'static str {
    DOC.split("```")
        .skip(1)
        .step_by(2)
        .map(str::trim)
        .find(|b| b.starts_with(start))
        .unwrap_or_else(|| panic!("docs/carts.md has no query starting {start}"))
}

fn total(rows: &[MinuteRow], column: &str) -> f64 {
    rows.iter()
        .map(|r| number(&serde_json::to_value(r).unwrap()[column]))
        .sum()
}

#[test]
fn the_demo_counts_its_carts_minute_by_minute_and_the_queries_agree() {
    let (report, lines) = short_day();
    let rows = &report.carts_minutes.rows;
    assert!(report.carts_minutes.error.is_none());

    // Every minute of the day has a row, in order (the report's length of
    // the day is rounded to a tenth of a second, so the minute it ends in is
    // known to that precision).
    let minutes = |s: f64| (s / 60.0).ceil() as usize;
    let (fewest, most) = (
        minutes(report.virtual_s - 0.05),
        minutes(report.virtual_s + 0.05),
    );
    assert!(
        (fewest..=most).contains(&rows.len()),
        "one operator, every minute: {} rows for {} s",
        rows.len(),
        report.virtual_s
    );
    let start = report.script.start;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!((row.minute - start).num_minutes(), i as i64);
    }

    // The breaker opens in the minute the switch opened it.
    let opened = report
        .breaker
        .iter()
        .find(|t| t.to == BreakerState::Open)
        .unwrap();
    let open_minute = &rows[(opened.at_s / 60.0) as usize];
    assert!(
        open_minute.breaker.starts_with("closed→open"),
        "{open_minute:?}"
    );
    // Carts kept moving in the minutes that began with the breaker open.
    let open: Vec<&MinuteRow> = rows
        .iter()
        .filter(|r| r.breaker.starts_with("open"))
        .collect();
    assert!(open.len() >= 2, "{rows:#?}");
    assert!(open.iter().all(|r| r.steps > 0), "{open:?}");
    assert!(open.iter().all(|r| r.reached_payment > 0), "{open:?}");

    // The rows from the Carts table match what the customers saw.
    let carts = &report.carts;
    assert_eq!(total(rows, "carts_started"), carts.started as f64);
    assert_eq!(total(rows, "reached_payment"), carts.reached_payment as f64);
    assert_eq!(
        total(rows, "price_changes_shown"),
        f64::from(carts.price_changes_shown)
    );
    assert_eq!(
        total(rows, "stopped"),
        (carts.started - carts.reached_payment) as f64,
        "every customer has left: every cart not paid has stopped"
    );
    assert!(total(rows, "steps") >= 4.0 * carts.started as f64);

    // The cart lines name carts by a fingerprint only.
    let steps: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "cart step")
        .collect();
    assert_eq!(steps.len() as f64, total(rows, "steps"));
    assert!(steps.iter().all(|l| {
        l["fields"]["cart"]
            .as_str()
            .is_some_and(|c| c.len() == 12 && c.chars().all(|x| x.is_ascii_hexdigit()))
    }));

    // The per-minute query, on those lines: the same totals.
    let query = documented("fields fields.operator as operator, fields.started");
    let result = run(query, &lines);
    assert_eq!(result.len(), 1, "one operator, one bucket: {result:?}");
    assert_eq!(result[0].get("operator"), "nordic");
    for column in [
        "carts_started",
        "steps",
        "reached_payment",
        "price_changes_shown",
    ] {
        assert_eq!(
            number(&result[0].get(column)),
            total(rows, column),
            "{column}"
        );
    }

    // The stopped query: its first stages give one record per cart, the
    // paid ones with a payment; the whole query counts the stopped.
    let stopped = documented("fields fields.cart as cart");
    let per_cart: String = stopped.split("\n|").take(3).collect::<Vec<_>>().join("\n|");
    let carts_seen = run(&per_cart, &lines);
    assert_eq!(carts_seen.len(), carts.started);
    assert_eq!(
        carts_seen
            .iter()
            .filter(|r| number(&r.get("payments")) == 1.0)
            .count(),
        carts.reached_payment
    );
    let counted: f64 = run(stopped, &lines)
        .iter()
        .map(|r| number(&r.get("stopped")))
        .sum();
    assert_eq!(counted, total(rows, "stopped"));
}
