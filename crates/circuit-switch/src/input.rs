//! Reading the circuit switch's payloads.
//!
//! These shapes wake the switch:
//!
//! * the EventBridge `CloudWatch Alarm State Change` event (`source:
//!   aws.cloudwatch`, `detail.alarmName`, `detail.state`);
//! * the alarm's direct Lambda-action payload (`source: aws.cloudwatch`,
//!   `alarmData.alarmName`, `alarmData.state`);
//! * either of those, or a `CloudWatch Alarm Contributor State Change`, from
//!   a contributor alarm (`alarm=*` in `ALARM_OPERATORS`): read for its name
//!   (`alarmName`, else the alarm ARN in `resources`) and time alone, since
//!   the operators it has in ALARM are asked of CloudWatch;
//! * lifeboat's own `Trip Requested` and `Trials Passed` events from the bus;
//! * the schedule's `Scheduled Event` (a tick);
//! * an operator command `{"command": "force-open", "operator": "nordic",
//!   "reason": "…"}` (`force-closed`, `release`);
//! * a batch of breaker timers from the timer queue (an SQS event whose
//!   message bodies are [`BreakerTimer`]s).
//!
//! Each is read into a type that names the fields the switch uses: the
//! timers as `aws_lambda_events`' `SqsEvent`; the alarm and EventBridge
//! envelopes as the small types below, whose fields are all optional, so a
//! missing one is a clear error of its own (docs/breaker.md says why not
//! `aws_lambda_events`' `CloudWatchAlarm` or `EventBridgeEvent`). The test
//! `alarms_need_only_a_name_a_state_and_a_time` holds what is accepted.

use std::collections::BTreeMap;

use aws_lambda_events::event::sqs::SqsEvent;
use chrono::{DateTime, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::breaker::{AlarmState, Command, Input};
use lifeboat_core::cloudwatch::parse_time;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::probe::BreakerTimer;
use serde::Deserialize;
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
    /// A contributor alarm changed ([`AlarmFor::Contributors`]): the
    /// operators it has in ALARM are to be asked of CloudWatch, whatever
    /// the change (a contributor going back to OK leaves the others). `at`:
    /// when, if the payload says; `operator`: the contributor the change is
    /// about, if the payload names one (only it is then looked at).
    Contributors {
        alarm: String,
        at: Option<DateTime<Utc>>,
        operator: Option<OperatorId>,
    },
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

/// What an alarm of `ALARM_OPERATORS` speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlarmFor {
    /// One operator, whose metric alone the alarm watches (`alarm=nordic`).
    Operator(OperatorId),
    /// Every operator: a contributor alarm (`alarm=*`), each of whose
    /// contributors in ALARM names its operator in its `Operator` attribute.
    Contributors,
}

/// Alarm names mapped to what they speak for (`ALARM_OPERATORS`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlarmMap(BTreeMap<String, AlarmFor>);

impl AlarmMap {
    /// Parse `alarm-a=nordic,alarm-b=baltic,alarm-c=*` (spaces ignored,
    /// empty allowed).
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let mut map = BTreeMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (alarm, target) = entry.split_once('=').ok_or_else(|| InputError::Invalid {
                field: "ALARM_OPERATORS",
                why: format!("entry {entry:?} is not alarm=operator"),
            })?;
            let alarm = alarm.trim();
            if alarm.is_empty() {
                return Err(InputError::Invalid {
                    field: "ALARM_OPERATORS",
                    why: format!("entry {entry:?} names no alarm"),
                });
            }
            let target = match target.trim() {
                "*" => AlarmFor::Contributors,
                operator => AlarmFor::Operator(OperatorId::new(operator).map_err(|e| {
                    InputError::Invalid {
                        field: "ALARM_OPERATORS",
                        why: e.to_string(),
                    }
                })?),
            };
            map.insert(alarm.to_owned(), target);
        }
        Ok(Self(map))
    }

    /// What `alarm` speaks for, if it is mapped.
    pub fn target(&self, alarm: &str) -> Option<&AlarmFor> {
        self.0.get(alarm)
    }

    /// The operator `alarm` speaks for, if it speaks for one.
    pub fn operator_for(&self, alarm: &str) -> Option<&OperatorId> {
        match self.0.get(alarm) {
            Some(AlarmFor::Operator(operator)) => Some(operator),
            _ => None,
        }
    }

    /// The operators the single-operator alarms speak for.
    pub fn operators(&self) -> impl Iterator<Item = &OperatorId> {
        self.0.values().filter_map(|target| match target {
            AlarmFor::Operator(operator) => Some(operator),
            AlarmFor::Contributors => None,
        })
    }

    /// Whether any alarm is a contributor alarm.
    pub fn has_contributor_alarm(&self) -> bool {
        self.0.values().any(|t| *t == AlarmFor::Contributors)
    }
}

/// What the switch reads of a CloudWatch alarm, in the EventBridge event's
/// `detail` and the Lambda action's `alarmData` alike.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct AlarmData {
    alarm_name: Option<String>,
    state: AlarmStateData,
}

/// The alarm's new state: its value and when it was entered.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AlarmStateData {
    value: Option<String>,
    timestamp: Option<String>,
}

/// The envelope of an EventBridge event (alarm state change, schedule,
/// lifeboat's own events) or of an alarm's Lambda action.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Envelope {
    source: Option<String>,
    #[serde(rename = "detail-type")]
    detail_type: Option<String>,
    time: Option<String>,
    detail: Option<Value>,
    #[serde(rename = "alarmData")]
    alarm_data: Option<Value>,
    /// The ARNs an EventBridge event is about (an alarm's).
    resources: Option<Vec<Value>>,
    /// A hand-made tick: `{"tick": true}`.
    tick: Option<bool>,
}

/// An operator command: `{"command": "force-open", "operator": "nordic",
/// "reason": "…", "caller": "arn:…"}` (`caller` optional: who sent it, as
/// `lifeboat breaker` reads it from STS).
#[derive(Debug, Deserialize)]
struct OperatorCommand {
    command: Value,
    #[serde(default)]
    operator: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    caller: Option<String>,
}

fn typed<'a, T: Deserialize<'a>>(value: &'a Value, what: &'static str) -> Result<T, InputError> {
    T::deserialize(value).map_err(|e| InputError::Invalid {
        field: what,
        why: e.to_string(),
    })
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

/// The alarm named by an event's `resources` (`arn:…:alarm:NAME`).
fn alarm_of_resources(resources: Option<&[Value]>) -> Option<String> {
    resources?
        .iter()
        .filter_map(Value::as_str)
        .find_map(|arn| arn.split_once(":alarm:").map(|(_, name)| name.to_owned()))
}

fn alarm_input(
    alarms: &AlarmMap,
    data: Option<&Value>,
    fallback_time: Option<&str>,
    resources: Option<&[Value]>,
) -> Result<SwitchInput, InputError> {
    let named = data
        .and_then(|d| d.get("alarmName"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| alarm_of_resources(resources));
    // A contributor alarm's payload is read for its name and time alone:
    // who is in ALARM is CloudWatch's to say, asked by the handler.
    if let Some(alarm) = named.as_ref()
        && alarms.target(alarm) == Some(&AlarmFor::Contributors)
    {
        let at = data
            .and_then(|d| d.pointer("/state/timestamp"))
            .and_then(Value::as_str)
            .or(fallback_time)
            .and_then(parse_time);
        // A contributor's own change names it; the alarm's does not.
        let operator = data
            .and_then(|d| d.pointer("/alarmContributor/attributes"))
            .and_then(|a| a.get(lifeboat_core::metrics::names::OPERATOR))
            .and_then(Value::as_str)
            .and_then(|o| OperatorId::new(o).ok());
        return Ok(SwitchInput::Contributors {
            alarm: alarm.clone(),
            at,
            operator,
        });
    }
    let data: AlarmData = match data {
        Some(data) => typed(data, "alarm")?,
        None => AlarmData::default(),
    };
    let name = data
        .alarm_name
        .or(named)
        .ok_or_else(|| InputError::Invalid {
            field: "alarmName",
            why: "missing".into(),
        })?;
    let state = alarm_state(data.state.value.as_deref().unwrap_or_default())?;
    let at = data
        .state
        .timestamp
        .as_deref()
        .or(fallback_time)
        .and_then(parse_time)
        .ok_or_else(|| InputError::Invalid {
            field: "alarm state timestamp",
            why: "missing or unreadable".into(),
        })?;
    let operator = alarms
        .operator_for(&name)
        .ok_or_else(|| InputError::UnknownAlarm(name.clone()))?;
    Ok(SwitchInput::One {
        operator: operator.clone(),
        input: Input::Alarm {
            alarm: name,
            state,
            at,
        },
    })
}

/// An SQS batch of breaker timers, or `None` when `payload` is no batch.
fn timers(payload: &Value) -> Option<Result<SwitchInput, InputError>> {
    payload.get("Records")?;
    let not_sqs = || InputError::Unrecognised("a Records batch that is not from SQS".into());
    let Ok(batch) = SqsEvent::deserialize(payload) else {
        return Some(Err(not_sqs()));
    };
    if !batch
        .records
        .iter()
        .all(|r| r.event_source.as_deref() == Some("aws:sqs"))
    {
        return Some(Err(not_sqs()));
    }
    let timers = batch
        .records
        .into_iter()
        .map(|r| {
            let timer = r.body.ok_or_else(|| "no body".to_owned()).and_then(|b| {
                serde_json::from_str::<BreakerTimer>(&b)
                    .map_err(|e| format!("not a breaker timer: {e}"))
            });
            (r.message_id.unwrap_or_default(), timer)
        })
        .collect();
    Some(Ok(SwitchInput::Timers(timers)))
}

fn command(payload: &Value) -> Result<SwitchInput, InputError> {
    let OperatorCommand {
        command,
        operator,
        reason,
        caller,
    } = typed(payload, "command")?;
    let command = Command::deserialize(&command).map_err(|_| InputError::Invalid {
        field: "command",
        why: format!("{command} is not force-open, force-closed or release"),
    })?;
    let operator = operator.ok_or_else(|| InputError::Invalid {
        field: "operator",
        why: "missing".into(),
    })?;
    let operator = OperatorId::new(&operator).map_err(|e| InputError::Invalid {
        field: "operator",
        why: e.to_string(),
    })?;
    let reason = reason.unwrap_or_default();
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(InputError::Invalid {
            field: "reason",
            why: "a command needs a reason for the record".into(),
        });
    }
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(InputError::Invalid {
            field: "reason",
            why: format!(
                "{chars} characters, at most {MAX_REASON_CHARS}: the reason is kept in the breaker's item, its change and its event"
            ),
        });
    }
    let caller = match caller.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(caller) if caller.chars().count() > MAX_CALLER_CHARS => {
            return Err(InputError::Invalid {
                field: "caller",
                why: format!("more than {MAX_CALLER_CHARS} characters"),
            });
        }
        Some(caller) if caller.chars().any(char::is_control) => {
            return Err(InputError::Invalid {
                field: "caller",
                why: "control characters".into(),
            });
        }
        Some(caller) => Some(caller.to_owned()),
    };
    Ok(SwitchInput::One {
        operator,
        input: Input::Command {
            command,
            reason: reason.to_owned(),
            caller,
        },
    })
}

/// The longest caller a command may name, in characters (an IAM role
/// session's ARN is at most about 200).
pub const MAX_CALLER_CHARS: usize = 300;

/// The longest reason a command may give, in characters: it is kept in
/// the breaker's item, the change item and the `Breaker State Changed`
/// event, and printed by `lifeboat status`.
pub const MAX_REASON_CHARS: usize = 500;

/// Read a payload.
pub fn parse(payload: &Value, alarms: &AlarmMap) -> Result<SwitchInput, InputError> {
    if let Some(timers) = timers(payload) {
        return timers;
    }
    if payload.get("command").is_some() {
        return command(payload);
    }
    let envelope: Envelope = if payload.is_object() {
        typed(payload, "event")?
    } else {
        Envelope::default()
    };
    let source = envelope.source.as_deref().unwrap_or_default();
    let detail_type = envelope.detail_type.as_deref().unwrap_or_default();
    let time = envelope.time.as_deref();
    match (source, detail_type) {
        (
            "aws.cloudwatch",
            "CloudWatch Alarm State Change" | "CloudWatch Alarm Contributor State Change",
        ) => alarm_input(
            alarms,
            envelope.detail.as_ref(),
            time,
            envelope.resources.as_deref(),
        ),
        ("aws.cloudwatch", _) if envelope.alarm_data.is_some() => alarm_input(
            alarms,
            envelope.alarm_data.as_ref(),
            time,
            envelope.resources.as_deref(),
        ),
        ("aws.events", "Scheduled Event") | ("aws.scheduler", _) => Ok(SwitchInput::Tick),
        (lifeboat_core::events::SOURCE, _) => {
            let detail = envelope.detail.as_ref().unwrap_or(&Value::Null);
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
        _ if envelope.tick == Some(true) => Ok(SwitchInput::Tick),
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
        let longest = "é".repeat(MAX_REASON_CHARS);
        let command = |reason: &str| {
            parse(
                &json!({"command": "force-open", "operator": "nordic", "reason": reason}),
                &alarms(),
            )
        };
        assert!(command(&longest).is_ok(), "counted in characters");
        let error = command(&format!("{longest}x")).unwrap_err().to_string();
        assert!(error.contains("at most 500"), "{error}");

        let signed = |caller: &str| {
            parse(
                &json!({"command": "force-open", "operator": "nordic", "reason": "x", "caller": caller}),
                &alarms(),
            )
        };
        let caller_of = |parsed: Result<SwitchInput, InputError>| match parsed {
            Ok(SwitchInput::One {
                input: Input::Command { caller, .. },
                ..
            }) => caller,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            caller_of(signed(
                " arn:aws:sts::123456789012:assumed-role/oncall/alice "
            ))
            .as_deref(),
            Some("arn:aws:sts::123456789012:assumed-role/oncall/alice")
        );
        assert_eq!(caller_of(signed("  ")), None);
        assert!(signed("alice\nforce-closed").is_err());
        assert!(signed(&"a".repeat(MAX_CALLER_CHARS + 1)).is_err());
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
