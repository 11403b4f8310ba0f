//! Reading the circuit switch's payloads.
//!
//! Five shapes wake the switch:
//!
//! * the EventBridge `CloudWatch Alarm State Change` event (`source:
//!   aws.cloudwatch`, `detail.alarmName`, `detail.state`);
//! * the alarm's direct Lambda-action payload (`source: aws.cloudwatch`,
//!   `alarmData.alarmName`, `alarmData.state`);
//! * lifeboat's own `Trip Requested` and `Trials Passed` events from the bus;
//! * the schedule's `Scheduled Event` (a tick);
//! * an operator command `{"command": "force-open", "operator": "nordic",
//!   "reason": "…"}` (`force-closed`, `release`);
//! * a batch of breaker timers from the timer queue (an SQS event whose
//!   message bodies are [`BreakerTimer`]s).
//!
//! The alarm and EventBridge payloads are read field by field rather than as
//! `aws_lambda_events`' `CloudWatchAlarm` or `EventBridgeEvent`: those
//! require fields the switch does without (`configuration`, the state's
//! `reason`, `time`, `detail`, `detail-type`), refuse an unreadable `time`
//! the state's timestamp makes unnecessary, and read a missing state value
//! as OK. The test `alarms_need_only_a_name_a_state_and_a_time` holds what
//! is accepted.

use std::collections::BTreeMap;

use lifeboat_core::OperatorId;
use lifeboat_core::breaker::{AlarmState, Command, Input};
use lifeboat_core::cloudwatch::parse_time;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::probe::BreakerTimer;
use serde_json::Value;

/// A payload the switch understood.
#[derive(Debug, Clone, PartialEq)]
pub enum SwitchInput {
    /// An input for one operator.
    One { operator: OperatorId, input: Input },
    /// A tick: every operator.
    Tick,
    /// Breaker timers from the timer queue, each with its message id; a body
    /// that is not a timer is kept as its reason.
    Timers(Vec<(String, Result<BreakerTimer, String>)>),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InputError {
    #[error("alarm {0:?} is not mapped to an operator: add it to ALARM_OPERATORS")]
    UnknownAlarm(String),
    #[error("unrecognised payload: {0}")]
    Unrecognised(String),
    #[error("invalid {field}: {why}")]
    Invalid { field: &'static str, why: String },
    #[error("lifeboat event not for the circuit switch: {0}")]
    NotForSwitch(String),
}

/// Alarm names mapped to the operator they watch (`ALARM_OPERATORS`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlarmMap(BTreeMap<String, OperatorId>);

impl AlarmMap {
    /// Parse `alarm-a=nordic,alarm-b=baltic` (spaces ignored, empty allowed).
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let mut map = BTreeMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (alarm, operator) = entry.split_once('=').ok_or_else(|| InputError::Invalid {
                field: "ALARM_OPERATORS",
                why: format!("entry {entry:?} is not alarm=operator"),
            })?;
            let operator = OperatorId::new(operator.trim()).map_err(|e| InputError::Invalid {
                field: "ALARM_OPERATORS",
                why: e.to_string(),
            })?;
            map.insert(alarm.trim().to_owned(), operator);
        }
        Ok(Self(map))
    }

    pub fn operator_for(&self, alarm: &str) -> Option<&OperatorId> {
        self.0.get(alarm)
    }

    /// The operators the alarms speak for.
    pub fn operators(&self) -> impl Iterator<Item = &OperatorId> {
        self.0.values()
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn alarm_state(text: &str) -> Result<AlarmState, InputError> {
    match text {
        "ALARM" => Ok(AlarmState::Alarm),
        "OK" => Ok(AlarmState::Ok),
        "INSUFFICIENT_DATA" => Ok(AlarmState::InsufficientData),
        other => Err(InputError::Invalid {
            field: "alarm state",
            why: format!("{other:?}"),
        }),
    }
}

fn alarm_input(
    alarms: &AlarmMap,
    data: &Value,
    fallback_time: Option<&str>,
) -> Result<SwitchInput, InputError> {
    let name = str_at(data, "/alarmName").ok_or_else(|| InputError::Invalid {
        field: "alarmName",
        why: "missing".into(),
    })?;
    let state = alarm_state(str_at(data, "/state/value").unwrap_or_default())?;
    let at = str_at(data, "/state/timestamp")
        .or(fallback_time)
        .and_then(parse_time)
        .ok_or_else(|| InputError::Invalid {
            field: "alarm state timestamp",
            why: "missing or unreadable".into(),
        })?;
    let operator = alarms
        .operator_for(name)
        .ok_or_else(|| InputError::UnknownAlarm(name.to_owned()))?;
    Ok(SwitchInput::One {
        operator: operator.clone(),
        input: Input::Alarm {
            alarm: name.to_owned(),
            state,
            at,
        },
    })
}

/// An SQS batch of breaker timers, or `None` when `payload` is no SQS batch.
fn timers(payload: &Value) -> Option<Result<SwitchInput, InputError>> {
    let records = payload.get("Records")?.as_array()?;
    let is_sqs = |r: &Value| str_at(r, "/eventSource") == Some("aws:sqs");
    if !records.iter().all(is_sqs) {
        return Some(Err(InputError::Unrecognised(
            "a Records batch that is not from SQS".into(),
        )));
    }
    let timers = records
        .iter()
        .map(|r| {
            let id = str_at(r, "/messageId").unwrap_or_default().to_owned();
            let timer = str_at(r, "/body")
                .ok_or_else(|| "no body".to_owned())
                .and_then(|b| {
                    serde_json::from_str::<BreakerTimer>(b)
                        .map_err(|e| format!("not a breaker timer: {e}"))
                });
            (id, timer)
        })
        .collect();
    Some(Ok(SwitchInput::Timers(timers)))
}

/// Read a payload.
pub fn parse(payload: &Value, alarms: &AlarmMap) -> Result<SwitchInput, InputError> {
    if let Some(timers) = timers(payload) {
        return timers;
    }
    if let Some(command) = payload.get("command") {
        let command: Command =
            serde_json::from_value(command.clone()).map_err(|_| InputError::Invalid {
                field: "command",
                why: format!("{command} is not force-open, force-closed or release"),
            })?;
        let operator = str_at(payload, "/operator").ok_or_else(|| InputError::Invalid {
            field: "operator",
            why: "missing".into(),
        })?;
        let operator = OperatorId::new(operator).map_err(|e| InputError::Invalid {
            field: "operator",
            why: e.to_string(),
        })?;
        let reason = str_at(payload, "/reason").unwrap_or("").trim();
        if reason.is_empty() {
            return Err(InputError::Invalid {
                field: "reason",
                why: "a command needs a reason for the record".into(),
            });
        }
        return Ok(SwitchInput::One {
            operator,
            input: Input::Command {
                command,
                reason: reason.to_owned(),
            },
        });
    }
    let source = str_at(payload, "/source").unwrap_or_default();
    let detail_type = str_at(payload, "/detail-type").unwrap_or_default();
    match (source, detail_type) {
        ("aws.cloudwatch", "CloudWatch Alarm State Change") => {
            let detail = payload.get("detail").unwrap_or(&Value::Null);
            alarm_input(alarms, detail, str_at(payload, "/time"))
        }
        ("aws.cloudwatch", _) if payload.get("alarmData").is_some() => {
            let data = payload.get("alarmData").unwrap_or(&Value::Null);
            alarm_input(alarms, data, str_at(payload, "/time"))
        }
        ("aws.events", "Scheduled Event") | ("aws.scheduler", _) => Ok(SwitchInput::Tick),
        (lifeboat_core::events::SOURCE, _) => {
            let detail = payload.get("detail").unwrap_or(&Value::Null);
            let event =
                LifeboatEvent::parse(detail_type, detail).map_err(|e| InputError::Invalid {
                    field: "detail",
                    why: e.to_string(),
                })?;
            match event {
                LifeboatEvent::TripRequested(t) => Ok(SwitchInput::One {
                    operator: t.operator,
                    input: Input::Trip {
                        reason: t.reason,
                        observed_version: t.observed_version,
                    },
                }),
                LifeboatEvent::TrialsPassed(t) => Ok(SwitchInput::One {
                    operator: t.operator,
                    input: Input::TrialsPassed {
                        observed_version: t.observed_version,
                    },
                }),
                other => Err(InputError::NotForSwitch(other.detail_type().to_owned())),
            }
        }
        _ if payload.get("tick").and_then(Value::as_bool) == Some(true) => Ok(SwitchInput::Tick),
        _ => Err(InputError::Unrecognised(format!(
            "source {source:?}, detail-type {detail_type:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alarms() -> AlarmMap {
        AlarmMap::parse("lifeboat-nordic-errors=nordic, other=baltic").unwrap()
    }

    #[test]
    fn alarm_maps_parse_and_reject_garbage() {
        assert_eq!(
            alarms().operator_for("other").map(OperatorId::as_str),
            Some("baltic")
        );
        assert!(AlarmMap::parse("").unwrap().operator_for("x").is_none());
        assert!(AlarmMap::parse("no-equals").is_err());
        assert!(AlarmMap::parse("a=BAD OP").is_err());
    }

    #[test]
    fn timer_batches_parse_record_by_record() {
        let payload = json!({"Records": [
            {"eventSource": "aws:sqs", "messageId": "m1",
             "body": r#"{"operator": "nordic", "version": 3, "due": "2026-12-01T10:00:10Z"}"#},
            {"eventSource": "aws:sqs", "messageId": "m2", "body": "{}"}
        ]});
        let SwitchInput::Timers(timers) = parse(&payload, &alarms()).unwrap() else {
            panic!("not timers");
        };
        assert_eq!(timers[0].0, "m1");
        assert_eq!(timers[0].1.as_ref().unwrap().version, 3);
        assert!(
            timers[1]
                .1
                .as_ref()
                .unwrap_err()
                .contains("not a breaker timer")
        );
        let stream = json!({"Records": [{"eventSource": "aws:dynamodb"}]});
        assert!(parse(&stream, &alarms()).is_err());
    }

    #[test]
    fn cloudwatch_timestamps_parse() {
        assert!(parse_time("2026-11-30T10:00:00.000+0000").is_some());
        assert!(parse_time("2026-11-30T10:00:00Z").is_some());
        assert!(parse_time("yesterday").is_none());
    }

    #[test]
    fn commands_need_an_operator_and_a_reason() {
        let ok = parse(
            &json!({"command": "force-open", "operator": "nordic", "reason": "maintenance"}),
            &alarms(),
        );
        assert!(matches!(
            ok,
            Ok(SwitchInput::One {
                input: Input::Command {
                    command: Command::ForceOpen,
                    ..
                },
                ..
            })
        ));
        assert!(
            parse(
                &json!({"command": "explode", "operator": "nordic", "reason": "x"}),
                &alarms()
            )
            .is_err()
        );
        assert!(
            parse(
                &json!({"command": "release", "operator": "nordic"}),
                &alarms()
            )
            .is_err()
        );
        assert!(parse(&json!({"command": "release", "reason": "x"}), &alarms()).is_err());
    }

    /// What the switch accepts of an alarm beyond what
    /// `aws_lambda_events`' `CloudWatchAlarm` and `EventBridgeEvent` would:
    /// no `configuration`, no state `reason`, no top-level `time` (the
    /// state's timestamp is enough) or an unreadable one, and no `detail`
    /// on a tick; and what it refuses that they would take: an alarm
    /// without a state value (their default is OK).
    #[test]
    fn alarms_need_only_a_name_a_state_and_a_time() {
        let at = "2026-11-30T10:00:00.000+0000";
        let action = json!({"source": "aws.cloudwatch", "alarmData": {"alarmName": "other",
            "state": {"value": "ALARM", "timestamp": at}}});
        assert!(matches!(
            parse(&action, &alarms()),
            Ok(SwitchInput::One { .. })
        ));
        let event = json!({"source": "aws.cloudwatch", "detail-type": "CloudWatch Alarm State Change",
            "time": "unreadable", "detail": {"alarmName": "other", "state": {"value": "OK", "timestamp": at}}});
        assert!(matches!(
            parse(&event, &alarms()),
            Ok(SwitchInput::One { .. })
        ));
        let late = json!({"source": "aws.cloudwatch", "detail-type": "CloudWatch Alarm State Change",
            "time": at, "detail": {"alarmName": "other", "state": {"value": "OK"}}});
        assert!(matches!(
            parse(&late, &alarms()),
            Ok(SwitchInput::One { .. })
        ));
        let tick = json!({"source": "aws.events", "detail-type": "Scheduled Event"});
        assert_eq!(parse(&tick, &alarms()), Ok(SwitchInput::Tick));
        let no_value = json!({"source": "aws.cloudwatch", "alarmData": {"alarmName": "other",
            "state": {"timestamp": at}}});
        assert!(matches!(
            parse(&no_value, &alarms()),
            Err(InputError::Invalid {
                field: "alarm state",
                ..
            })
        ));
    }

    #[test]
    fn unknown_alarms_and_payloads_are_clear_errors() {
        let payload = json!({"source": "aws.cloudwatch", "alarmData": {"alarmName": "nope", "state": {"value": "ALARM", "timestamp": "2026-11-30T10:00:00.000+0000"}}});
        assert_eq!(
            parse(&payload, &alarms()),
            Err(InputError::UnknownAlarm("nope".into()))
        );
        assert!(matches!(
            parse(&json!({"hello": 1}), &alarms()),
            Err(InputError::Unrecognised(_))
        ));
    }
}
