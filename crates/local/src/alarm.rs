//! The template's errors alarm (`RealConsumerErrorsAlarm`), evaluated on one
//! machine.
//!
//! moto stores alarms but never evaluates them, and the functions publish
//! their metrics as EMF log lines, which only CloudWatch Logs turns into
//! metrics. So [`LocalAlarm`] does CloudWatch's part here: it follows the
//! `cargo lambda watch` log (where every function's stdout lands), reads each
//! EMF line as CloudWatch would ([`lifeboat_core::metrics::extract`]), sums
//! the alarm's metric per period ([`evaluator::AlarmEvaluator`]), and on every state
//! change sends the circuit switch what AWS sends it: the EventBridge
//! "CloudWatch Alarm State Change" event (the `AlarmStateChangeRule` target)
//! for every transition and, for a transition to ALARM, the alarm action's
//! own payload (the alarm's `AlarmActions`).
//!
//! The rule is the template's ([`AlarmRule::errors_alarm`]): Sum of
//! `Lifeboat FailedOperatorCalls` with the dimension `Operator`, 10 s
//! periods, ALARM when 2 of the last 2 periods are ≥ 5, missing data not
//! breaching. A period is evaluated once it has ended and [`AlarmConfig::grace`]
//! has passed (lines written late still count); CloudWatch adds its own
//! ingestion and evaluation delay on top, so detection by the alarm here is a
//! lower bound of detection by the alarm on AWS.
//!
//! [`AlarmTransition::forced`] is `SetAlarmState`: the state is sent to the
//! switch as the alarm would send it, and the next evaluation computes the
//! state from the data again, as CloudWatch does.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::metrics::{self, Datapoint, LogLevel};
use serde_json::{Value, json};

use crate::pump::Invoker;
use crate::pump::task::{StopSignal, TaskHandle};

pub mod evaluator;
pub mod history;

use evaluator::AlarmEvaluator;
use history::{AlarmHistoryBook, HistoryItem};

/// An alarm's state, as CloudWatch spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AlarmState {
    #[serde(rename = "OK")]
    Ok,
    #[serde(rename = "ALARM")]
    Alarm,
    #[serde(rename = "INSUFFICIENT_DATA")]
    InsufficientData,
}

impl AlarmState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmState::Ok => "OK",
            AlarmState::Alarm => "ALARM",
            AlarmState::InsufficientData => "INSUFFICIENT_DATA",
        }
    }
}

impl std::fmt::Display for AlarmState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AlarmState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "OK" => Ok(AlarmState::Ok),
            "ALARM" => Ok(AlarmState::Alarm),
            "INSUFFICIENT_DATA" => Ok(AlarmState::InsufficientData),
            _ => Err(format!(
                "{s:?} is not an alarm state (ALARM, OK or INSUFFICIENT_DATA)"
            )),
        }
    }
}

/// A metric alarm with a static threshold, `GreaterThanOrEqualToThreshold`,
/// statistic Sum and missing data not breaching (the template's alarm).
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmRule {
    pub name: String,
    pub description: String,
    pub namespace: String,
    pub metric: String,
    /// The whole dimension set of the metric.
    pub dimensions: Vec<(String, String)>,
    pub period: Duration,
    pub evaluation_periods: usize,
    pub datapoints_to_alarm: usize,
    pub threshold: f64,
    pub account: String,
    pub region: String,
}

impl AlarmRule {
    /// The template's `RealConsumerErrorsAlarm` named `name`, watching
    /// `operator` (its `AlarmedOperator`).
    pub fn errors_alarm(name: &str, operator: &str) -> Self {
        use crate::template;
        Self {
            name: name.to_owned(),
            description: format!(
                "Operator {operator} is failing the real consumer's calls (Lifeboat FailedOperatorCalls, 10 s periods); asks the circuit switch to open the breaker of the operator AlarmOperators maps this alarm to"
            ),
            namespace: metrics::NAMESPACE.to_owned(),
            metric: metrics::names::FAILED_CALLS.to_owned(),
            dimensions: vec![("Operator".to_owned(), operator.to_owned())],
            period: Duration::from_secs(template::ALARM_PERIOD_S),
            evaluation_periods: template::ALARM_EVALUATION_PERIODS,
            datapoints_to_alarm: template::ALARM_DATAPOINTS,
            threshold: template::ALARM_THRESHOLD,
            account: crate::moto::ACCOUNT_ID.to_owned(),
            region: crate::moto::REGION.to_owned(),
        }
    }

    pub fn arn(&self) -> String {
        format!(
            "arn:aws:cloudwatch:{}:{}:alarm:{}",
            self.region, self.account, self.name
        )
    }

    /// Whether CloudWatch would count `point` in this alarm's metric.
    pub fn counts(&self, point: &Datapoint) -> bool {
        let dimensions: Vec<(&str, &str)> = self
            .dimensions
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        point.namespace == self.namespace
            && point.name == self.metric
            && point.has_dimensions(&dimensions)
    }

    fn period_ms(&self) -> i64 {
        i64::try_from(self.period.as_millis())
            .unwrap_or(i64::MAX)
            .max(1)
    }
}

/// An alarm state with what CloudWatch records beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct StateRecord {
    pub value: AlarmState,
    pub reason: String,
    /// The `reasonData` JSON (sent as a string, as CloudWatch does).
    pub reason_data: Value,
    pub timestamp: DateTime<Utc>,
}

/// A change of state: what goes to the circuit switch.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmTransition {
    pub previous: StateRecord,
    pub current: StateRecord,
}

/// CloudWatch's timestamp format in alarm events: `2026-11-30T10:15:42.185+0000`.
fn cw_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3f%z").to_string()
}

/// The format of datapoint times in a reason: `30/11/26 10:15:30`.
fn reason_time(t: DateTime<Utc>) -> String {
    t.format("%d/%m/%y %H:%M:%S").to_string()
}

fn state_json(record: &StateRecord) -> Value {
    json!({
        "value": record.value.as_str(),
        "reason": record.reason,
        "reasonData": record.reason_data.to_string(),
        "timestamp": cw_time(record.timestamp),
    })
}

impl AlarmTransition {
    /// `SetAlarmState`: `value` set by hand at `now`, from `previous`.
    pub fn forced(
        previous: StateRecord,
        value: AlarmState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            previous,
            current: StateRecord {
                value,
                reason: reason.to_owned(),
                reason_data: json!({}),
                timestamp: now,
            },
        }
    }

    fn configuration(rule: &AlarmRule) -> Value {
        let dimensions: serde_json::Map<String, Value> = rule
            .dimensions
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "description": rule.description,
            "metrics": [{
                "id": format!("{}-m1", rule.name),
                "metricStat": {
                    "metric": {
                        "namespace": rule.namespace,
                        "name": rule.metric,
                        "dimensions": dimensions,
                    },
                    "period": rule.period.as_secs(),
                    "stat": "Sum",
                },
                "returnData": true,
            }],
        })
    }

    /// The "CloudWatch Alarm State Change" event EventBridge delivers to the
    /// `AlarmStateChangeRule`'s target
    /// (tests/events/cloudwatch-alarm-state-change.json).
    pub fn state_change_event(&self, rule: &AlarmRule) -> Value {
        json!({
            "version": "0",
            "id": uuid::Uuid::new_v4().to_string(),
            "detail-type": "CloudWatch Alarm State Change",
            "source": "aws.cloudwatch",
            "account": rule.account,
            "time": self.current.timestamp.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "region": rule.region,
            "resources": [rule.arn()],
            "detail": {
                "alarmName": rule.name,
                "state": state_json(&self.current),
                "previousState": state_json(&self.previous),
                "configuration": Self::configuration(rule),
            },
        })
    }

    /// The payload of the alarm's Lambda action
    /// (tests/events/cloudwatch-alarm-lambda-action.json); the template
    /// has an action for ALARM only.
    pub fn alarm_action_event(&self, rule: &AlarmRule) -> Value {
        json!({
            "source": "aws.cloudwatch",
            "alarmArn": rule.arn(),
            "accountId": rule.account,
            "time": cw_time(self.current.timestamp),
            "region": rule.region,
            "alarmData": {
                "alarmName": rule.name,
                "state": state_json(&self.current),
                "previousState": state_json(&self.previous),
                "configuration": Self::configuration(rule),
            },
        })
    }

    /// What reaches the circuit switch for this transition, as on AWS: the
    /// rule's event always, the action's payload on a change to ALARM.
    pub fn events(&self, rule: &AlarmRule) -> Vec<Value> {
        let mut events = vec![self.state_change_event(rule)];
        if self.current.value == AlarmState::Alarm {
            events.push(self.alarm_action_event(rule));
        }
        events
    }
}

/// Complete lines appended to a file since the last read.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogTail {
    /// Follow `path` from its start.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Follow `path` from its current end (from its start if it is not
    /// there yet).
    pub fn from_end(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len());
        Self {
            path,
            offset,
            partial: Vec::new(),
        }
    }

    /// The complete lines written since the last call (a file not there yet
    /// has none; a file that shrank is read again from its start).
    pub fn read_lines(&mut self) -> std::io::Result<Vec<String>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let Some(last) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Ok(Vec::new());
        };
        let rest = self.partial.split_off(last + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        Ok(String::from_utf8_lossy(&complete)
            .lines()
            .map(str::to_owned)
            .collect())
    }
}

/// The datapoints in a log line, if it is an EMF line; other lines (the
/// functions' JSON or text logs, cargo lambda's own) have none.
pub fn datapoints(line: &str) -> Vec<Datapoint> {
    let line = line.trim();
    if !line.starts_with('{') || !line.contains("\"_aws\"") {
        return Vec::new();
    }
    match serde_json::from_str::<Value>(line) {
        Ok(value) => metrics::extract(&value).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "an EMF line CloudWatch would reject");
            Vec::new()
        }),
        Err(_) => Vec::new(),
    }
}

/// How a [`LocalAlarm`] runs.
#[derive(Debug, Clone)]
pub struct AlarmConfig {
    pub rule: AlarmRule,
    /// The log the functions write to (the watch log).
    pub log: PathBuf,
    /// The function both the alarm action and the rule target.
    pub function: String,
    /// How often the log is read and the alarm evaluated.
    pub every: Duration,
    /// How long after a period ends it is evaluated.
    pub grace: Duration,
    /// Read only what is written from now on: the log of a watch that ran
    /// before holds metrics of earlier runs.
    pub from_end: bool,
    /// The functions' `AWS_LAMBDA_LOG_LEVEL`: lines Lambda's log-level
    /// filter would drop at it never reach CloudWatch, so they are not read.
    pub filter: LogLevel,
    /// Where each transition is recorded as CloudWatch's history item
    /// (the suite's proxy answers `DescribeAlarmHistory` from it).
    pub history: AlarmHistoryBook,
}

impl AlarmConfig {
    pub fn new(rule: AlarmRule, log: impl Into<PathBuf>, function: impl Into<String>) -> Self {
        Self {
            rule,
            log: log.into(),
            function: function.into(),
            every: Duration::from_secs(1),
            grace: Duration::from_secs(2),
            from_end: false,
            filter: LogLevel::Info,
            history: AlarmHistoryBook::default(),
        }
    }
}

/// One transition sent to the switch.
#[derive(Debug, Clone, PartialEq)]
pub struct SentTransition {
    pub transition: AlarmTransition,
    /// Whether every event reached the switch.
    pub delivered: bool,
    pub forced: bool,
}

/// What a [`LocalAlarm`] has done so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlarmStats {
    pub lines_read: u64,
    /// Datapoints of the alarm's metric.
    pub datapoints: u64,
    pub transitions: Vec<SentTransition>,
    pub failed_invocations: u64,
    pub last_error: Option<String>,
}

#[derive(Debug)]
struct Shared {
    evaluator: AlarmEvaluator,
    stats: AlarmStats,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // Every update leaves the state whole: a poisoned lock still holds it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The alarm, evaluated and delivered; see the module docs.
#[derive(Debug)]
pub struct LocalAlarm {
    task: TaskHandle,
    shared: Arc<Mutex<Shared>>,
    invoker: Invoker,
    config: AlarmConfig,
}

impl LocalAlarm {
    pub fn start(invoker: Invoker, config: AlarmConfig) -> Self {
        let shared = Arc::new(Mutex::new(Shared {
            evaluator: AlarmEvaluator::new(config.rule.clone(), Utc::now()),
            stats: AlarmStats::default(),
        }));
        let task = {
            let (invoker, config, shared) = (invoker.clone(), config.clone(), Arc::clone(&shared));
            TaskHandle::spawn(move |stop| run(invoker, config, shared, stop))
        };
        Self {
            task,
            shared,
            invoker,
            config,
        }
    }

    pub fn rule(&self) -> &AlarmRule {
        &self.config.rule
    }

    pub fn state(&self) -> StateRecord {
        lock(&self.shared).evaluator.state().clone()
    }

    pub fn stats(&self) -> AlarmStats {
        lock(&self.shared).stats.clone()
    }

    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// `SetAlarmState`: send `value` to the switch now.
    pub async fn force(&self, value: AlarmState, reason: &str) -> SentTransition {
        let transition = lock(&self.shared)
            .evaluator
            .force(value, reason, Utc::now());
        let sent = deliver(&self.invoker, &self.config, &self.shared, transition, true).await;
        record(&self.config, &self.shared, sent.clone());
        sent
    }

    pub async fn stop(self) {
        self.task.stop().await;
    }
}

/// Send a transition's events to the switch; errors are counted.
async fn deliver(
    invoker: &Invoker,
    config: &AlarmConfig,
    shared: &Mutex<Shared>,
    transition: AlarmTransition,
    forced: bool,
) -> SentTransition {
    let mut delivered = true;
    for event in transition.events(&config.rule) {
        if let Err(e) = invoker.invoke(&config.function, &event).await {
            tracing::warn!(alarm = %config.rule.name, error = %e, "alarm event not delivered");
            delivered = false;
            let mut shared = lock(shared);
            shared.stats.failed_invocations += 1;
            shared.stats.last_error = Some(e.to_string());
        }
    }
    SentTransition {
        transition,
        delivered,
        forced,
    }
}

/// A transition made: counted, and kept in the alarm's history whether or
/// not its events reached the switch, as CloudWatch keeps it.
fn record(config: &AlarmConfig, shared: &Mutex<Shared>, sent: SentTransition) {
    config
        .history
        .record(HistoryItem::state_update(&config.rule, &sent.transition));
    lock(shared).stats.transitions.push(sent);
}

async fn run(
    invoker: Invoker,
    config: AlarmConfig,
    shared: Arc<Mutex<Shared>>,
    mut stop: StopSignal,
) {
    let mut tail = if config.from_end {
        LogTail::from_end(&config.log)
    } else {
        LogTail::new(&config.log)
    };
    loop {
        let lines = tail.read_lines().unwrap_or_else(|e| {
            tracing::warn!(log = %config.log.display(), error = %e, "cannot read the functions' log");
            Vec::new()
        });
        let transition = {
            let mut shared = lock(&shared);
            shared.stats.lines_read += lines.len() as u64;
            for line in lines.iter().filter(|l| config.filter.lets_through(l)) {
                for point in datapoints(line) {
                    if shared.evaluator.observe(&point) {
                        shared.stats.datapoints += 1;
                    }
                }
            }
            shared.evaluator.evaluate(Utc::now(), config.grace)
        };
        if let Some(transition) = transition {
            tracing::info!(
                alarm = %config.rule.name,
                from = %transition.previous.value,
                to = %transition.current.value,
                reason = %transition.current.reason,
                "alarm state changed"
            );
            let sent = deliver(&invoker, &config, &shared, transition, false).await;
            record(&config, &shared, sent);
        }
        if stop.sleep(config.every).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::metrics::{MetricSet, names};

    const STATE_CHANGE: &str =
        include_str!("../../../tests/events/cloudwatch-alarm-state-change.json");
    const ACTION: &str = include_str!("../../../tests/events/cloudwatch-alarm-lambda-action.json");

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn failed(operator: &str, n: u64, at: &str) -> String {
        MetricSet::new()
            .dimension("Operator", operator)
            .count(names::FAILED_CALLS, n)
            .count(names::FAILED_FAST, 0)
            .to_emf(t(at))
            .to_string()
    }

    fn evaluator() -> AlarmEvaluator {
        AlarmEvaluator::new(
            AlarmRule::errors_alarm("lifeboat-nordic-errors", "nordic"),
            t("2026-11-30T10:00:00Z"),
        )
    }

    fn feed(e: &mut AlarmEvaluator, line: &str) {
        for p in datapoints(line) {
            e.observe(&p);
        }
    }

    fn keys(v: &Value) -> Vec<String> {
        let mut keys: Vec<String> = v
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn two_breaching_periods_alarm_and_quiet_ones_clear() {
        let mut e = evaluator();
        let grace = Duration::from_secs(2);
        // The first evaluation: no data is not breaching.
        let first = e.evaluate(t("2026-11-30T10:00:05Z"), grace).unwrap();
        assert_eq!(first.current.value, AlarmState::Ok);
        assert!(
            first
                .current
                .reason
                .contains("no datapoints were received for 2 periods")
        );

        // 3 + 3 failures in 10:00:10–20 (one period ≥ 5), then 5 in 20–30.
        feed(&mut e, &failed("nordic", 3, "2026-11-30T10:00:11Z"));
        feed(&mut e, &failed("nordic", 3, "2026-11-30T10:00:19.999Z"));
        // Another operator's and another metric's lines do not count.
        feed(&mut e, &failed("baltic", 50, "2026-11-30T10:00:21Z"));
        assert_eq!(
            e.evaluate(t("2026-11-30T10:00:22Z"), grace),
            None,
            "one period only"
        );
        feed(&mut e, &failed("nordic", 5, "2026-11-30T10:00:25Z"));
        // Period 20–30 has ended but the grace has not passed.
        assert_eq!(e.evaluate(t("2026-11-30T10:00:31Z"), grace), None);
        let alarm = e.evaluate(t("2026-11-30T10:00:32Z"), grace).unwrap();
        assert_eq!(alarm.previous.value, AlarmState::Ok);
        assert_eq!(alarm.current.value, AlarmState::Alarm);
        assert_eq!(
            alarm.current.reason,
            "Threshold Crossed: 2 out of the last 2 datapoints [5.0 (30/11/26 10:00:20), 6.0 (30/11/26 10:00:10)] were greater than or equal to the threshold (5.0) (minimum 2 datapoints for OK -> ALARM transition)."
        );
        let data = &alarm.current.reason_data;
        assert_eq!(data["startDate"], "2026-11-30T10:00:10.000+0000");
        assert_eq!(data["recentDatapoints"], json!([6.0, 5.0]));
        assert_eq!(data["evaluatedDatapoints"][0]["sampleCount"], 2.0);

        // Still failing: no new transition.
        feed(&mut e, &failed("nordic", 9, "2026-11-30T10:00:35Z"));
        assert_eq!(e.evaluate(t("2026-11-30T10:00:42Z"), grace), None);
        // One quiet period is enough to leave ALARM (2 of 2 needed).
        let ok = e.evaluate(t("2026-11-30T10:00:52Z"), grace).unwrap();
        assert_eq!(ok.current.value, AlarmState::Ok);
        assert!(
            ok.current
                .reason
                .contains("1 out of the last 2 datapoints [9.0")
        );
        assert!(
            ok.current.reason.contains("ALARM -> OK"),
            "{}",
            ok.current.reason
        );
    }

    #[test]
    fn a_forced_state_is_sent_and_then_evaluated_again() {
        let mut e = evaluator();
        let forced = e.force(AlarmState::Alarm, "by hand", t("2026-11-30T10:00:03Z"));
        assert_eq!(forced.previous.value, AlarmState::InsufficientData);
        assert_eq!(
            forced.events(e.rule()).len(),
            2,
            "the rule's event and the action"
        );
        let back = e
            .evaluate(t("2026-11-30T10:00:13Z"), Duration::ZERO)
            .unwrap();
        assert_eq!(
            (back.previous.value, back.current.value),
            (AlarmState::Alarm, AlarmState::Ok)
        );
        assert_eq!(back.events(e.rule()).len(), 1, "no action for OK");
    }

    #[test]
    fn events_have_the_shapes_aws_sends() {
        let mut e = evaluator();
        feed(&mut e, &failed("nordic", 7, "2026-11-30T10:00:11Z"));
        feed(&mut e, &failed("nordic", 7, "2026-11-30T10:00:21Z"));
        let _ = e.evaluate(t("2026-11-30T10:00:05Z"), Duration::ZERO);
        let alarm = e
            .evaluate(t("2026-11-30T10:00:30.5Z"), Duration::ZERO)
            .unwrap();
        let rule = e.rule();
        let change = alarm.state_change_event(rule);
        let fixture: Value = serde_json::from_str(STATE_CHANGE).unwrap();
        assert_eq!(keys(&change), keys(&fixture));
        assert_eq!(keys(&change["detail"]), keys(&fixture["detail"]));
        assert_eq!(
            keys(&change["detail"]["state"]),
            keys(&fixture["detail"]["state"])
        );
        assert_eq!(change["detail"]["state"]["value"], "ALARM");
        assert_eq!(
            change["resources"][0],
            "arn:aws:cloudwatch:us-east-1:123456789012:alarm:lifeboat-nordic-errors"
        );
        assert_eq!(
            change["detail"]["state"]["timestamp"],
            "2026-11-30T10:00:30.500+0000"
        );
        let data: Value =
            serde_json::from_str(change["detail"]["state"]["reasonData"].as_str().unwrap())
                .unwrap();
        assert_eq!(data["recentDatapoints"], json!([7.0, 7.0]));
        assert_eq!(
            change["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"],
            json!({"Operator": "nordic"})
        );

        let action = alarm.alarm_action_event(rule);
        let fixture: Value = serde_json::from_str(ACTION).unwrap();
        assert_eq!(keys(&action), keys(&fixture));
        assert_eq!(keys(&action["alarmData"]), keys(&fixture["alarmData"]));
        assert_eq!(action["alarmData"]["state"]["value"], "ALARM");
    }

    #[test]
    fn the_tail_reads_complete_lines_once() {
        let dir = std::env::temp_dir().join(format!("lifeboat-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("watch.log");
        let mut tail = LogTail::new(&path);
        assert!(tail.read_lines().unwrap().is_empty(), "no file yet");
        std::fs::write(&path, "one\ntw").unwrap();
        assert_eq!(tail.read_lines().unwrap(), vec!["one"]);
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        assert_eq!(tail.read_lines().unwrap(), vec!["two", "three"]);
        assert!(tail.read_lines().unwrap().is_empty());
        std::fs::write(&path, "new\n").unwrap();
        assert_eq!(
            tail.read_lines().unwrap(),
            vec!["new"],
            "a shorter file starts again"
        );
        std::fs::write(&path, "earlier run\n").unwrap();
        let mut tail = LogTail::from_end(&path);
        assert!(
            tail.read_lines().unwrap().is_empty(),
            "what was there is skipped"
        );
        std::fs::write(&path, "earlier run\nthis run\n").unwrap();
        assert_eq!(tail.read_lines().unwrap(), vec!["this run"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_emf_lines_have_datapoints() {
        assert!(datapoints(" INFO spawning function instance").is_empty());
        assert!(datapoints(r#"{"level":"INFO","message":"x"}"#).is_empty());
        assert!(datapoints(r#"{"_aws": "broken"#).is_empty());
        assert_eq!(
            datapoints(&failed("nordic", 2, "2026-11-30T10:00:00Z")).len(),
            2
        );
        assert_eq!("alarm".parse::<AlarmState>(), Ok(AlarmState::Alarm));
        assert!("red".parse::<AlarmState>().is_err());
    }
}
