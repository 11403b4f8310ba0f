#![allow(clippy::unwrap_used)]
//! `lifeboat detection`: the alarm's history read from real-shaped
//! `DescribeAlarmHistory` answers (every page, HistoryData as CloudWatch
//! writes it, a malformed item skipped with a warning), and breaker changes
//! made by the real circuit switch, classified by what opened the breaker.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::operation::describe_alarm_history::{
    DescribeAlarmHistoryError, DescribeAlarmHistoryOutput,
};
use aws_sdk_cloudwatch::primitives::DateTime as SmithyTime;
use aws_sdk_cloudwatch::types::error::InvalidNextToken;
use aws_sdk_cloudwatch::types::{AlarmHistoryItem, HistoryItemType, ScanBy};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use circuit_switch::input::AlarmMap;
use circuit_switch::{CircuitSwitch, SwitchPorts};
use lifeboat_aws::breaker::BreakerChange;
use lifeboat_cli::ops::detection::{
    self, DetectionError, DetectionQuery, FirstFailureSource, OpenedBy,
};
use lifeboat_core::lane::Lanes;
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryEventBus, MemoryMetrics, MemoryStreamRouter, MemoryWindowStore,
};
use lifeboat_core::ports::{BreakerStore, WindowStore};
use lifeboat_core::settings::Settings;
use lifeboat_core::window::CallCounts;
use lifeboat_core::{ManualClock, OperatorId};
use serde_json::{Value, json};

const ALARM: &str = "lifeboat-nordic-errors";

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + TimeDelta::seconds(secs)
}

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

/// `2026-12-01T10:00:10.000+0000`, as CloudWatch writes times in HistoryData.
fn cw(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.3f+0000").to_string()
}

/// HistoryData of an evaluated transition of the errors alarm (Sum of
/// FailedOperatorCalls, 10 s periods, threshold 5, 2 of 2), with the two
/// evaluated periods starting at `first` and `first + 10 s`.
fn history_data(from: &str, to: &str, first: DateTime<Utc>, values: [f64; 2]) -> String {
    let second = first + TimeDelta::seconds(10);
    let verb = if to == "ALARM" {
        "were greater than or equal to"
    } else {
        "were not greater than or equal to"
    };
    let reason = format!(
        "Threshold Crossed: 2 out of the last 2 datapoints [{:?} ({}), {:?} ({})] {verb} the \
         threshold (5.0) (minimum 2 datapoints for {from} -> {to} transition).",
        values[1],
        second.format("%d/%m/%y %H:%M:%S"),
        values[0],
        first.format("%d/%m/%y %H:%M:%S"),
    );
    json!({
        "version": "1.0",
        "oldState": {"stateValue": from, "stateReason": "Threshold Crossed: earlier"},
        "newState": {
            "stateValue": to,
            "stateReason": reason,
            "stateReasonData": {
                "version": "1.0",
                "queryDate": cw(second + TimeDelta::milliseconds(22_118)),
                "startDate": cw(first),
                "statistic": "Sum",
                "period": 10,
                "recentDatapoints": values,
                "threshold": 5.0,
                "evaluatedDatapoints": [
                    {"timestamp": cw(second), "sampleCount": values[1] + 2.0, "value": values[1]},
                    {"timestamp": cw(first), "sampleCount": values[0] + 2.0, "value": values[0]}
                ]
            }
        }
    })
    .to_string()
}

fn item(at: DateTime<Utc>, summary: &str, data: &str) -> AlarmHistoryItem {
    AlarmHistoryItem::builder()
        .alarm_name(ALARM)
        .alarm_type(aws_sdk_cloudwatch::types::AlarmType::MetricAlarm)
        .timestamp(SmithyTime::from_millis(at.timestamp_millis()))
        .history_item_type(HistoryItemType::StateUpdate)
        .history_summary(summary)
        .history_data(data)
        .build()
}

#[tokio::test]
async fn every_page_of_the_alarm_history_is_read_and_bad_items_are_reported() {
    let page_one = mock!(Client::describe_alarm_history)
        .match_requests(|r| r.next_token().is_none())
        .then_compute_output(|r| {
            // What was asked: this alarm's state updates, oldest first, in range.
            assert_eq!(r.alarm_name(), Some(ALARM));
            assert_eq!(r.history_item_type(), Some(&HistoryItemType::StateUpdate));
            assert_eq!(r.scan_by(), Some(&ScanBy::TimestampAscending));
            assert_eq!(
                r.start_date().map(SmithyTime::secs),
                Some(t(-86_400 - 600).timestamp())
            );
            assert_eq!(
                r.end_date().map(SmithyTime::secs),
                Some(t(7_200).timestamp())
            );
            DescribeAlarmHistoryOutput::builder()
                .alarm_history_items(item(
                    t(32),
                    "Alarm updated from OK to ALARM",
                    &history_data("OK", "ALARM", t(0), [7.0, 12.0]),
                ))
                .alarm_history_items(item(
                    t(90),
                    "Alarm updated from ALARM to OK",
                    &history_data("ALARM", "OK", t(70), [1.0, 0.0]),
                ))
                .next_token("page-2")
                .build()
        });
    let page_two = mock!(Client::describe_alarm_history)
        .match_requests(|r| r.next_token() == Some("page-2"))
        .then_output(|| {
            DescribeAlarmHistoryOutput::builder()
                .alarm_history_items(item(
                    t(3_600),
                    "Alarm updated from OK to ALARM",
                    "{\"version\":\"1.0\",\"oldState\":{\"stateValue\":\"OK\"",
                ))
                .alarm_history_items(item(
                    t(3_641),
                    "Alarm updated from OK to ALARM",
                    &history_data("OK", "ALARM", t(3_610), [9.0, 30.0]),
                ))
                .build()
        });
    let client = mock_client!(
        aws_sdk_cloudwatch,
        RuleMode::MatchAny,
        [&page_one, &page_two]
    );

    let history = detection::alarm_history(&client, ALARM, t(-86_400 - 600), t(7_200))
        .await
        .unwrap();
    assert_eq!(history.pages, 2);
    assert_eq!((page_one.num_calls(), page_two.num_calls()), (1, 1));
    let got: Vec<String> = history
        .transitions
        .iter()
        .map(|tr| format!("{} {}->{} {:?}", tr.at, tr.from, tr.to, tr.first_breach))
        .collect();
    assert_eq!(
        got,
        vec![
            format!("{} OK->ALARM {:?}", t(32), Some(t(0))),
            format!("{} ALARM->OK None", t(90)),
            format!("{} OK->ALARM {:?}", t(3_641), Some(t(3_610))),
        ]
    );
    assert_eq!(history.warnings.len(), 1);
    let warning = &history.warnings[0];
    assert!(
        warning.contains("2026-12-01T11:00:00Z (Alarm updated from OK to ALARM)"),
        "{warning}"
    );
    assert!(
        warning.contains("HistoryData is not a state update"),
        "{warning}"
    );

    // The breaker opened 4.9 s after the window's first failure, 27 s before
    // the alarm; the second ALARM found no opening.
    let query = DetectionQuery {
        alarm: ALARM.to_owned(),
        alarm_operator: op("nordic"),
        only: None,
        since: t(-86_400),
        window: Duration::from_secs(600),
        now: t(7_200),
    };
    let opened = BreakerChange {
        operator: op("nordic"),
        version: 1,
        from: Some(lifeboat_core::BreakerState::Closed),
        to: lifeboat_core::BreakerState::Open,
        at: t(5),
        reason: "5 consecutive timeouts".to_owned(),
        open_until: Some(t(35)),
        first_failure_at: Some(t(0) + TimeDelta::milliseconds(100)),
    };
    let report = detection::detect(
        &query,
        &history.transitions,
        &[opened],
        history.warnings.clone(),
    );
    let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(json["incidents"][0]["failure_to_open_s"], 4.9);
    assert_eq!(json["incidents"][0]["failure_to_alarm_s"], 31.9);
    assert_eq!(json["incidents"][0]["alarm_to_open_s"], -27.0);
    assert_eq!(
        json["incidents"][0]["breaker"]["opened_by"]["by"],
        "failure_window"
    );
    assert_eq!(json["incidents"][1]["notes"], json!(["no breaker record"]));
    assert_eq!(json["incidents"][1]["failure_to_alarm_s"], 31.0);
    assert_eq!(json["warnings"].as_array().unwrap().len(), 1);
    let table = detection::render_table(&report);
    assert!(
        table.contains("warning: skipped alarm history item"),
        "{table}"
    );
}

#[tokio::test]
async fn a_failed_history_call_is_an_error_naming_the_alarm() {
    let refused = mock!(Client::describe_alarm_history).then_error(|| {
        DescribeAlarmHistoryError::InvalidNextToken(
            InvalidNextToken::builder()
                .message("The service cannot complete the request.")
                .build(),
        )
    });
    let client = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&refused]);
    let err = detection::alarm_history(&client, ALARM, t(0), t(60))
        .await
        .unwrap_err();
    assert!(matches!(err, DetectionError::AlarmHistory { .. }));
    let text = err.to_string();
    assert!(
        text.starts_with("DescribeAlarmHistory lifeboat-nordic-errors: "),
        "{text}"
    );
    assert!(text.contains("cannot complete the request"), "{text}");
}

/// An answer in another protocol than CloudWatch's (Smithy RPC v2 CBOR):
/// moto_server 5.2.1 answers the CBOR call 404 with an HTML page, and an
/// endpoint of another service may answer 200 with XML. Either is one
/// line saying the endpoint did not answer as CloudWatch does, never the
/// decoder's `DeserializeError { … TypeMismatch … }`.
#[tokio::test]
async fn an_answer_that_is_not_cloudwatchs_protocol_says_so() {
    use aws_sdk_cloudwatch::config::http::HttpResponse;
    // The smithy body type every SDK shares; CloudWatch does not re-export it.
    use aws_sdk_lambda::primitives::SdkBody;
    for (status, content_type, body) in [
        (
            404,
            "text/html; charset=utf-8",
            "<!doctype html><title>404 Not Found</title>",
        ),
        (
            200,
            "text/xml",
            "<DescribeAlarmHistoryResponse><DescribeAlarmHistoryResult/></DescribeAlarmHistoryResponse>",
        ),
    ] {
        let answer = mock!(Client::describe_alarm_history).then_http_response(move || {
            let mut response = HttpResponse::new(status.try_into().unwrap(), SdkBody::from(body));
            response
                .headers_mut()
                .insert("Content-Type", content_type.to_owned());
            response
        });
        let client = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&answer]);
        let err = detection::alarm_history(&client, ALARM, t(0), t(60))
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "DescribeAlarmHistory lifeboat-nordic-errors: the endpoint did not answer as \
                 CloudWatch does (HTTP {status}, content-type {content_type}): its answer is \
                 not CloudWatch's protocol (Smithy RPC v2 CBOR); check AWS_ENDPOINT_URL and \
                 AWS_ENDPOINT_URL_CLOUDWATCH"
            )
        );
    }
}

/// The real circuit switch on the in-memory adapters, so the reasons
/// classified below are exactly the ones the breaker records.
struct Switch {
    breakers: Arc<MemoryBreakerStore>,
    window: Arc<MemoryWindowStore>,
    clock: ManualClock,
    switch: CircuitSwitch,
    changes: Vec<BreakerChange>,
}

impl Switch {
    fn new() -> Self {
        let breakers = Arc::new(MemoryBreakerStore::new());
        let clock = ManualClock::new(t(0));
        let window = Arc::new(MemoryWindowStore::new());
        let switch = CircuitSwitch::new(
            SwitchPorts {
                breakers: breakers.clone(),
                windows: window.clone(),
                events: Arc::new(MemoryEventBus::new()),
                lanes: Lanes::shared(
                    "requests",
                    vec![OperatorId::new("nordic").unwrap()],
                    Arc::new(MemoryStreamRouter::new()),
                ),
                clock: Arc::new(clock.clone()),
                metrics: Arc::new(MemoryMetrics::new()),
            },
            Settings::default(),
            vec![OperatorId::new("nordic").unwrap()],
        )
        .with_alarms(AlarmMap::parse("lifeboat-nordic-errors=nordic").unwrap())
        .with_repoint_backoff(Duration::from_millis(1));
        Self {
            breakers,
            window,
            clock,
            switch,
            changes: Vec::new(),
        }
    }

    /// Hand `payload` to the switch at `at` and keep the change it made, as
    /// the breaker store records it. From `first_failure` on, the operator
    /// failed every call, as the consumers wrote in the failure window.
    async fn at(
        &mut self,
        at: DateTime<Utc>,
        payload: Value,
        first_failure: Option<DateTime<Utc>>,
    ) {
        if let Some(mut second) = first_failure {
            let failing = CallCounts {
                calls: 10,
                timeouts: 10,
                ..CallCounts::default()
            };
            while second <= at {
                self.window
                    .add(&op("nordic"), second, &failing)
                    .await
                    .unwrap();
                second += chrono::TimeDelta::seconds(1);
            }
        }
        self.clock.set(at);
        let report = self.switch.handle(&payload).await.unwrap();
        assert!(report.decisions.iter().any(|d| d.changed), "{payload}");
        let record = self.breakers.load(&op("nordic")).await.unwrap().unwrap();
        self.changes.push(BreakerChange::of(&record, first_failure));
    }
}

fn trip() -> Value {
    json!({"detail-type": "Trip Requested", "source": "lifeboat",
           "detail": {"schema_version": 1, "operator": "nordic", "observed_version": 0,
                      "reason": {"kind": "window", "verdict": {"rule": "consecutive_timeouts", "count": 5}},
                      "at": "2026-12-01T10:00:05Z"}})
}

fn alarm_event(at: DateTime<Utc>) -> Value {
    json!({"version": "0", "id": "a", "detail-type": "CloudWatch Alarm State Change", "source": "aws.cloudwatch",
           "account": "123456789012", "time": cw(at), "region": "us-east-1",
           "resources": ["arn:aws:cloudwatch:us-east-1:123456789012:alarm:lifeboat-nordic-errors"],
           "detail": {"alarmName": ALARM, "state": {"value": "ALARM", "timestamp": cw(at)},
                      "previousState": {"value": "OK", "timestamp": cw(at)}}})
}

fn command(command: &str) -> Value {
    json!({"command": command, "operator": "nordic", "reason": "supplier maintenance"})
}

#[tokio::test]
async fn what_opened_the_breaker_is_read_from_the_switchs_own_reasons() {
    let mut s = Switch::new();
    // Incident 1: the failure window trips; the breaker recovers.
    s.at(t(5), trip(), Some(t(1))).await;
    s.at(
        t(40),
        json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}),
        None,
    )
    .await;
    s.at(t(41), command("force-closed"), None).await;
    s.at(t(42), command("release"), None).await;
    // Incident 2: the alarm opens it.
    s.at(t(3_632), alarm_event(t(3_631)), Some(t(3_602))).await;
    s.at(t(7_000), command("force-closed"), None).await;
    // Incident 3: forced open by hand.
    s.at(t(7_100), command("force-open"), None).await;

    let alarms = [detection::parse_history_data(
        t(3_631),
        "at 11:00:31",
        &history_data("OK", "ALARM", t(3_600), [8.0, 11.0]),
    )
    .unwrap()];
    let query = DetectionQuery {
        alarm: ALARM.to_owned(),
        alarm_operator: op("nordic"),
        only: Some(op("nordic")),
        since: t(-3_600),
        window: Duration::from_secs(600),
        now: t(7_200),
    };
    let report = detection::detect(&query, &alarms, &s.changes, Vec::new());
    let by: Vec<&OpenedBy> = report
        .incidents
        .iter()
        .map(|i| &i.breaker.as_ref().unwrap().opened_by)
        .collect();
    assert_eq!(
        by,
        vec![
            &OpenedBy::FailureWindow {
                rule: "5 consecutive timeouts".into()
            },
            &OpenedBy::Alarm {
                alarm: ALARM.into()
            },
            &OpenedBy::Command {
                reason: "force-open: supplier maintenance".into()
            },
        ]
    );
    let second = &report.incidents[1];
    assert_eq!(
        second.first_failure_source,
        Some(FirstFailureSource::FailureWindow)
    );
    assert_eq!(second.failure_to_alarm_s, Some(29.0));
    assert_eq!(second.failure_to_open_s, Some(30.0));
    assert_eq!(second.alarm_to_open_s, Some(1.0));
    assert_eq!(report.incidents[0].notes, vec!["no alarm"]);
    assert_eq!(
        report.incidents[2].notes,
        vec!["no alarm", "first failure unknown"]
    );
}
