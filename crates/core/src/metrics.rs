//! Metrics as CloudWatch Embedded Metric Format (EMF) log lines.
//!
//! A function writes one JSON object per line to stdout; CloudWatch Logs
//! extracts the metrics from it, so no CloudWatch API call sits on the hot
//! path and no extra permission is needed. Each [`MetricSet`] becomes one line:
//!
//! ```json
//! {"_aws": {"Timestamp": 1796104800000,
//!           "CloudWatchMetrics": [{"Namespace": "Lifeboat",
//!                                  "Dimensions": [["Operator", "State"]],
//!                                  "Metrics": [{"Name": "BreakerState", "Unit": "None", "StorageResolution": 1}]}]},
//!  "Operator": "nordic", "State": "open", "BreakerState": 2}
//! ```
//!
//! Every metric is high resolution (`StorageResolution: 1`), so alarms can
//! use 10-second periods. Dimension sets are kept small and fixed, one per
//! metric family, because every distinct set of dimension values is a
//! separate (billed) CloudWatch metric.
//!
//! Each line also carries a `level`: with the JSON log format Lambda filters
//! application logs by that field, and a line without one counts as INFO, so
//! a function configured at WARN would drop every metric (no
//! `FailedOperatorCalls`, an alarm that never fires, blank dashboards). The
//! level written is the one Lambda filters at (INFO at least), so a metric
//! line always passes; [`LogLevel::lets_through`] is Lambda's rule, for tests.
//!
//! Lines go to a [`MetricsSink`], one of the [`ports`](crate::ports):
//! [`StdoutMetrics`] in a function, [`crate::memory::MemoryMetrics`] in the
//! demo and the tests.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::ports::MetricsSink;

/// The namespace of every lifeboat metric.
pub const NAMESPACE: &str = "Lifeboat";

/// Metric names: the dashboards and alarms in template.yaml use these.
pub mod names {
    /// The breaker's state as a number (see `BreakerState::metric_value`),
    /// per operator, with the state's name as a second dimension.
    pub const BREAKER_STATE: &str = "BreakerState";
    /// Operator calls, per operator, operation and outcome class.
    pub const OPERATOR_CALLS: &str = "OperatorCalls";
    /// Operator calls that failed or timed out, per operator: the alarm's metric.
    pub const FAILED_CALLS: &str = "FailedOperatorCalls";
    /// Duration of operator calls, per operator and operation.
    pub const CALL_DURATION: &str = "OperatorCallDuration";
    /// Operator calls made while the breaker was open (should stay 0).
    pub const CALLS_WHILE_OPEN: &str = "OperatorCallsWhileOpen";
    /// Requests failed fast because the breaker was open.
    pub const FAILED_FAST: &str = "RequestsFailedFast";
    /// Answers given, per operator, operation and source (fresh, live,
    /// last_good, unavailable).
    pub const ANSWERS: &str = "Answers";
    /// Sale status changes written, per operator and status.
    pub const SALE_CHANGES: &str = "SaleStatusChanges";
    /// Fault events published (Sale Switch Write Failed, poison messages,
    /// orders parked for a person).
    pub const FAULTS: &str = "FaultEvents";
    /// Held orders moved by the booking worker, per operator and the
    /// state moved to (`booked`, `parked`, …).
    pub const ORDERS_MOVED: &str = "OrdersMoved";
    /// Seconds from an order's hold to its booking, per operator, one
    /// observation per order the booking worker booked.
    pub const ORDER_TIME_TO_BOOK: &str = "OrderTimeToBook";
    /// Off-sale writes held back because most operators were open at once
    /// (lifeboat's own fault suspected), without dimensions.
    pub const SELF_FAULT: &str = "SelfFaultSuspected";
    /// Failed calls to lifeboat's own dependencies (tables, bus, mappings,
    /// timer queue), per `Dependency` and in a dimensionless total.
    pub const DEPENDENCY_ERRORS: &str = "DependencyErrors";
    /// The dimension naming the operator: `OperatorsErrorsAlarm` groups
    /// `FailedOperatorCalls` by it, so its contributors carry it as an
    /// attribute.
    pub const OPERATOR: &str = "Operator";
}

/// CloudWatch units lifeboat uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    Seconds,
    None,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::Seconds => "Seconds",
            Unit::None => "None",
        }
    }
}

/// Metrics that share one set of dimensions: one EMF line.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSet {
    pub(crate) dimensions: Vec<(&'static str, String)>,
    /// A number, or an array of at most [`MAX_VALUES`] numbers.
    pub(crate) metrics: Vec<(&'static str, Unit, Value)>,
}

/// The most values one metric may carry in one EMF line.
pub const MAX_VALUES: usize = 100;

impl MetricSet {
    pub fn new() -> Self {
        Self {
            dimensions: Vec::new(),
            metrics: Vec::new(),
        }
    }

    /// Add a dimension. Names starting with `_aws` or equal to a metric's
    /// name would make the line unreadable; lifeboat's are fixed strings.
    pub fn dimension(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.dimensions.push((name, value.into()));
        self
    }

    pub fn metric(mut self, name: &'static str, unit: Unit, value: f64) -> Self {
        // CloudWatch rejects NaN and infinities; a metric that cannot be a
        // number is left out rather than poisoning the line.
        if value.is_finite() {
            self.metrics.push((name, unit, json!(value)));
        }
        self
    }

    /// Several observations of one metric (CloudWatch computes percentiles
    /// from them). Non-finite values are dropped; at most [`MAX_VALUES`] are
    /// kept, so callers split longer series with [`MetricSet::series`].
    pub fn values(mut self, name: &'static str, unit: Unit, values: &[f64]) -> Self {
        let kept: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .take(MAX_VALUES)
            .collect();
        if !kept.is_empty() {
            self.metrics.push((name, unit, json!(kept)));
        }
        self
    }

    /// One set per [`MAX_VALUES`] observations, each with `dimensions`.
    pub fn series(
        dimensions: &[(&'static str, String)],
        name: &'static str,
        unit: Unit,
        values: &[f64],
    ) -> Vec<MetricSet> {
        values
            .chunks(MAX_VALUES)
            .map(|chunk| {
                let set = dimensions
                    .iter()
                    .fold(MetricSet::new(), |set, (k, v)| set.dimension(k, v.clone()));
                set.values(name, unit, chunk)
            })
            .collect()
    }

    pub fn count(self, name: &'static str, value: u64) -> Self {
        self.metric(name, Unit::Count, value as f64)
    }

    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }

    /// The EMF object of this set, stamped `at`.
    pub fn to_emf(&self, at: DateTime<Utc>) -> Value {
        let mut line = Map::new();
        line.insert(
            "_aws".into(),
            json!({
                "Timestamp": at.timestamp_millis(),
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [self.dimensions.iter().map(|(n, _)| *n).collect::<Vec<_>>()],
                    "Metrics": self.metrics.iter().map(|(name, unit, _)| json!({
                        "Name": name, "Unit": unit.as_str(), "StorageResolution": 1
                    })).collect::<Vec<_>>(),
                }],
            }),
        );
        for (name, value) in &self.dimensions {
            line.insert((*name).to_owned(), Value::String(value.clone()));
        }
        for (name, _, value) in &self.metrics {
            line.insert((*name).to_owned(), value.clone());
        }
        Value::Object(line)
    }
}

impl Default for MetricSet {
    fn default() -> Self {
        Self::new()
    }
}

/// Lambda's application log levels, least severe first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    #[default]
    Info,
    Warn,
    Error,
    Fatal,
}

/// Lambda's application log level, from the function's `LoggingConfig`
/// (the template's `LogLevel`).
pub const AWS_LAMBDA_LOG_LEVEL: &str = "AWS_LAMBDA_LOG_LEVEL";
/// Lambda's log format, `Text` or `JSON` (the template's `LoggingConfig`).
pub const AWS_LAMBDA_LOG_FORMAT: &str = "AWS_LAMBDA_LOG_FORMAT";

impl LogLevel {
    pub const ALL: [LogLevel; 6] = [
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
        LogLevel::Fatal,
    ];

    /// A level name in any case (`WARNING` for WARN too).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "TRACE" => Some(Self::Trace),
            "DEBUG" => Some(Self::Debug),
            "INFO" => Some(Self::Info),
            "WARN" | "WARNING" => Some(Self::Warn),
            "ERROR" => Some(Self::Error),
            "FATAL" => Some(Self::Fatal),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "TRACE",
            Self::Debug => "DEBUG",
            Self::Info => "INFO",
            Self::Warn => "WARN",
            Self::Error => "ERROR",
            Self::Fatal => "FATAL",
        }
    }

    /// The level Lambda filters application logs at: `AWS_LAMBDA_LOG_LEVEL`,
    /// which Lambda sets from the function's `ApplicationLogLevel`; INFO
    /// (Lambda's default) when unset or unknown.
    pub fn from_lambda_env() -> Self {
        std::env::var(AWS_LAMBDA_LOG_LEVEL)
            .ok()
            .and_then(|v| Self::parse(&v))
            .unwrap_or_default()
    }

    /// Whether Lambda, filtering at `self`, sends `line` to CloudWatch Logs:
    /// a JSON object's `level` (any case), INFO when missing or not a level
    /// (also for a line that is not JSON), kept when at least `self`.
    pub fn lets_through(self, line: &str) -> bool {
        let level = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v.get("level")?.as_str().and_then(Self::parse))
            .unwrap_or_default();
        level >= self
    }
}

/// Standard output, one line per set: what Lambda sends to CloudWatch Logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutMetrics {
    /// The level Lambda filters at: each line is written at it (INFO at
    /// least), so the filter never drops a metric.
    filter: LogLevel,
}

impl StdoutMetrics {
    /// Lines that pass Lambda's filter at [`LogLevel::from_lambda_env`].
    pub fn from_env() -> Self {
        Self::filtered_at(LogLevel::from_lambda_env())
    }

    /// Lines that pass Lambda's filter at `filter`.
    pub fn filtered_at(filter: LogLevel) -> Self {
        Self { filter }
    }

    /// The line written for `set` at `at`.
    pub fn line(&self, set: &MetricSet, at: DateTime<Utc>) -> String {
        let mut emf = set.to_emf(at);
        if let Value::Object(fields) = &mut emf {
            let level = self.filter.max(LogLevel::Info);
            fields.insert("level".into(), Value::String(level.as_str().into()));
        }
        emf.to_string()
    }
}

impl MetricsSink for StdoutMetrics {
    fn emit(&self, sets: &[MetricSet], at: DateTime<Utc>) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for set in sets.iter().filter(|s| !s.is_empty()) {
            // A closed stdout loses the metric, never the invocation.
            let _ = writeln!(out, "{}", self.line(set, at));
        }
    }
}

/// One metric value as CloudWatch extracts it from an EMF line: what an
/// alarm or a dashboard sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Datapoint {
    pub namespace: String,
    pub name: String,
    /// The sum of the line's values (a number, or an array of up to
    /// [`MAX_VALUES`] numbers).
    pub value: f64,
    /// How many values the line held.
    pub count: usize,
    /// The dimension set, in the directive's order.
    pub dimensions: Vec<(String, String)>,
    /// `_aws.Timestamp`, milliseconds since the epoch.
    pub timestamp_ms: i64,
}

impl Datapoint {
    /// Whether the dimension set is exactly `dimensions` (CloudWatch matches
    /// a metric on its whole set, not on a subset).
    pub fn has_dimensions(&self, dimensions: &[(&str, &str)]) -> bool {
        self.dimensions.len() == dimensions.len()
            && dimensions
                .iter()
                .all(|(k, v)| self.dimensions.iter().any(|(dk, dv)| dk == k && dv == v))
    }
}

/// Why a line is not read as metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmfError {
    #[error("not an EMF line: no _aws object")]
    NotEmf,
    #[error("_aws.Timestamp is not a whole number of milliseconds")]
    Timestamp,
    #[error("_aws.CloudWatchMetrics is not an array of directives")]
    Directives,
    #[error("metric {0} has no numeric value at the top level")]
    Value(String),
    #[error("dimension {0} is not a string at the top level")]
    Dimension(String),
}

/// Read an EMF line as CloudWatch Logs does: every metric a directive names
/// becomes one datapoint per dimension set, with the value (or the sum of
/// the values) found under its name at the top level and the dimension
/// values found under theirs. A line CloudWatch would reject is an error.
pub fn extract(line: &Value) -> Result<Vec<Datapoint>, EmfError> {
    let aws = line
        .get("_aws")
        .filter(|a| a.is_object())
        .ok_or(EmfError::NotEmf)?;
    let timestamp_ms = aws
        .get("Timestamp")
        .and_then(Value::as_i64)
        .ok_or(EmfError::Timestamp)?;
    let directives = aws
        .get("CloudWatchMetrics")
        .and_then(Value::as_array)
        .ok_or(EmfError::Directives)?;
    let mut out = Vec::new();
    for directive in directives {
        let namespace = directive
            .get("Namespace")
            .and_then(Value::as_str)
            .ok_or(EmfError::Directives)?;
        let sets = directive
            .get("Dimensions")
            .and_then(Value::as_array)
            .ok_or(EmfError::Directives)?;
        let metrics = directive
            .get("Metrics")
            .and_then(Value::as_array)
            .ok_or(EmfError::Directives)?;
        for metric in metrics {
            let name = metric
                .get("Name")
                .and_then(Value::as_str)
                .ok_or(EmfError::Directives)?;
            let (value, count) = match line.get(name) {
                Some(Value::Array(values)) if values.len() <= MAX_VALUES => values
                    .iter()
                    .map(|v| v.as_f64().ok_or_else(|| EmfError::Value(name.to_owned())))
                    .try_fold((0.0, 0), |(sum, n), v| v.map(|v| (sum + v, n + 1)))?,
                Some(v) => (
                    v.as_f64().ok_or_else(|| EmfError::Value(name.to_owned()))?,
                    1,
                ),
                None => return Err(EmfError::Value(name.to_owned())),
            };
            for set in sets {
                let keys = set.as_array().ok_or(EmfError::Directives)?;
                let dimensions = keys
                    .iter()
                    .map(|k| {
                        let k = k.as_str().ok_or(EmfError::Directives)?;
                        line.get(k)
                            .and_then(Value::as_str)
                            .map(|v| (k.to_owned(), v.to_owned()))
                            .ok_or_else(|| EmfError::Dimension(k.to_owned()))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                out.push(Datapoint {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    value,
                    count,
                    dimensions,
                    timestamp_ms,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryMetrics;

    #[test]
    fn metric_lines_pass_lambdas_log_level_filter_at_every_level() {
        let at = DateTime::from_timestamp(1_796_104_800, 0).unwrap();
        let set = MetricSet::new()
            .dimension("Operator", "nordic".to_owned())
            .count(names::FAILED_CALLS, 3);
        for filter in LogLevel::ALL {
            let line = StdoutMetrics::filtered_at(filter).line(&set, at);
            assert!(filter.lets_through(&line), "{filter:?} dropped {line}");
            // Still the same EMF: the level is one more property.
            let mut emf: Value = serde_json::from_str(&line).unwrap();
            emf.as_object_mut().unwrap().remove("level");
            assert_eq!(emf, set.to_emf(at));
        }
        // Without a level, Lambda's WARN filter would drop it (the bug).
        let bare = set.to_emf(at).to_string();
        assert!(LogLevel::Info.lets_through(&bare));
        assert!(!LogLevel::Warn.lets_through(&bare));
        assert!(!LogLevel::Warn.lets_through("not json"));
        assert!(LogLevel::Warn.lets_through(r#"{"level": "error"}"#));
        assert!(!LogLevel::Warn.lets_through(r#"{"level": "loud"}"#));
        assert_eq!(
            StdoutMetrics::filtered_at(LogLevel::Debug).line(&set, at),
            StdoutMetrics::default().line(&set, at)
        );
    }

    /// A metric as CloudWatch extracts it: name, value (the sum of a
    /// series), dimension names and values.
    type Extracted = (String, f64, Vec<(String, String)>);

    /// Read a line as CloudWatch does ([`extract`]), after checking what
    /// lifeboat promises on top: its namespace and high resolution.
    fn extracted(line: &Value) -> Vec<Extracted> {
        for directive in line["_aws"]["CloudWatchMetrics"]
            .as_array()
            .unwrap_or(&Vec::new())
        {
            assert_eq!(directive["Namespace"], NAMESPACE);
            assert!(directive["Dimensions"].as_array().map_or(0, Vec::len) <= 30);
            for metric in directive["Metrics"].as_array().cloned().unwrap_or_default() {
                assert_eq!(metric["StorageResolution"], 1);
            }
        }
        match extract(line) {
            Ok(points) => points
                .into_iter()
                .map(|d| (d.name, d.value, d.dimensions))
                .collect(),
            Err(e) => panic!("CloudWatch would reject {line}: {e}"),
        }
    }

    #[test]
    fn lines_cloudwatch_would_reject_are_errors() {
        let good = MetricSet::new()
            .dimension("Operator", "nordic")
            .values(names::CALL_DURATION, Unit::Milliseconds, &[1.0, 2.5])
            .to_emf(DateTime::from_timestamp(1_796_104_800, 0).unwrap_or_default());
        let points = extract(&good).unwrap_or_default();
        assert_eq!(points.len(), 1);
        assert_eq!((points[0].value, points[0].count), (3.5, 2));
        assert!(points[0].has_dimensions(&[("Operator", "nordic")]));
        assert!(!points[0].has_dimensions(&[]));
        assert_eq!(points[0].timestamp_ms, 1_796_104_800_000);

        assert_eq!(extract(&json!({"level": "INFO"})), Err(EmfError::NotEmf));
        let mut no_dimension = good.clone();
        no_dimension["Operator"] = json!(3);
        assert_eq!(
            extract(&no_dimension),
            Err(EmfError::Dimension("Operator".into()))
        );
        let mut no_value = good.clone();
        no_value[names::CALL_DURATION] = json!("fast");
        assert_eq!(
            extract(&no_value),
            Err(EmfError::Value(names::CALL_DURATION.into()))
        );
        let mut no_time = good;
        no_time["_aws"]["Timestamp"] = json!("now");
        assert_eq!(extract(&no_time), Err(EmfError::Timestamp));
    }

    #[test]
    fn lines_read_back_as_cloudwatch_reads_them() {
        let at = DateTime::from_timestamp(1_796_104_800, 0).unwrap_or_default();
        let set = MetricSet::new()
            .dimension("Operator", "nordic")
            .dimension("State", "open")
            .metric(names::BREAKER_STATE, Unit::None, 2.0)
            .metric("Broken", Unit::None, f64::NAN);
        let line = set.to_emf(at);
        assert_eq!(line["_aws"]["Timestamp"], 1_796_104_800_000_i64);
        let metrics = extracted(&line);
        assert_eq!(
            metrics,
            vec![(
                "BreakerState".to_owned(),
                2.0,
                vec![
                    ("Operator".to_owned(), "nordic".to_owned()),
                    ("State".to_owned(), "open".to_owned())
                ]
            )]
        );
        assert!(line.get("Broken").is_none());

        let sink = MemoryMetrics::new();
        sink.emit(
            &[set.clone(), MetricSet::new().dimension("Operator", "x")],
            at,
        );
        sink.emit(&[set], at);
        assert_eq!(sink.lines().len(), 2, "empty sets are not written");
        assert_eq!(
            sink.sum(names::BREAKER_STATE, &[("Operator", "nordic")]),
            4.0
        );
        assert_eq!(
            sink.sum(names::BREAKER_STATE, &[("Operator", "baltic")]),
            0.0
        );
    }
}
