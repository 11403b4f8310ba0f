//! The circuit switch's input parser: `AlarmMap::parse` (the
//! `ALARM_OPERATORS` setting) and `input::parse` (every payload the switch is
//! invoked with).
//!
//! Input: JSON text is a payload, read with the map of the fixtures
//! (`lifeboat-nordic-errors=nordic, other=baltic, every=*`). Otherwise the first line is an
//! `ALARM_OPERATORS` text and the rest a payload (JSON, or a tree generated
//! from the bytes).
//!
//! Invariants: no panic; every alarm of an accepted map names an operator
//! or every contributor (`*`); an alarm input is for the operator its alarm
//! is mapped to, a contributor alarm's only for an alarm mapped to `*`; a command
//! carries a reason that is neither empty nor padded.
#![no_main]

use circuit_switch::input::{AlarmFor, AlarmMap, SwitchInput, parse};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::breaker::Input;
use lifeboat_fuzz::{Vocabulary, generated};
use serde_json::Value;

const FIXTURE_ALARMS: &str = "lifeboat-nordic-errors=nordic, other=baltic, every=*";

const VOCABULARY: Vocabulary = Vocabulary {
    keys: &[
        "Records",
        "eventSource",
        "messageId",
        "body",
        "command",
        "operator",
        "reason",
        "source",
        "detail-type",
        "detail",
        "time",
        "alarmData",
        "alarmName",
        "alarmContributor",
        "attributes",
        "Operator",
        "resources",
        "state",
        "previousState",
        "value",
        "timestamp",
        "tick",
        "version",
        "due",
        "schema_version",
        "observed_version",
        "successes",
        "from",
        "to",
        "kind",
        "verdict",
        "rule",
        "count",
        "at",
    ],
    strings: &[
        "aws:sqs",
        "aws:dynamodb",
        "aws.cloudwatch",
        "aws.events",
        "aws.scheduler",
        "CloudWatch Alarm State Change",
        "CloudWatch Alarm Contributor State Change",
        "every",
        "*",
        "arn:aws:cloudwatch:us-east-1:123456789012:alarm:every",
        "Scheduled Event",
        "lifeboat",
        "Trip Requested",
        "Trials Passed",
        "Breaker State Changed",
        "force-open",
        "force-closed",
        "release",
        "explode",
        "lifeboat-nordic-errors",
        "other",
        "ALARM",
        "OK",
        "INSUFFICIENT_DATA",
        "nordic",
        "maintenance",
        " ",
        "",
        "window",
        "trial_failed",
        "consecutive_timeouts",
        "2026-11-30T10:00:00.000+0000",
        "2026-11-30T10:00:00Z",
        "2026-12-01T10:00:10Z",
        "{\"operator\": \"nordic\", \"version\": 3, \"due\": \"2026-12-01T10:00:10Z\"}",
    ],
};

fuzz_target!(|data: &[u8]| {
    let fixture = match AlarmMap::parse(FIXTURE_ALARMS) {
        Ok(map) => map,
        Err(e) => panic!("the fixture's alarm map is refused: {e}"),
    };
    if let Ok(payload) = serde_json::from_slice::<Value>(data) {
        check(&payload, &fixture);
        return;
    }
    let (head, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let alarms = match std::str::from_utf8(head).map(AlarmMap::parse) {
        Ok(Ok(map)) => {
            check_map(std::str::from_utf8(head).unwrap_or_default(), &map);
            map
        }
        _ => fixture,
    };
    let payload =
        serde_json::from_slice::<Value>(rest).unwrap_or_else(|_| generated(rest, &VOCABULARY));
    check(&payload, &alarms);
});

fn check_map(text: &str, map: &AlarmMap) {
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((alarm, _)) = entry.split_once('=') else {
            panic!("entry {entry:?} without '=' was accepted");
        };
        assert!(map.target(alarm.trim()).is_some(), "{alarm:?}");
    }
}

fn check(payload: &Value, alarms: &AlarmMap) {
    let Ok(input) = parse(payload, alarms) else {
        return;
    };
    match input {
        SwitchInput::One { operator, input } => match input {
            Input::Alarm { alarm, .. } => {
                assert_eq!(alarms.operator_for(&alarm), Some(&operator));
            }
            Input::Command { reason, .. } => {
                assert!(!reason.is_empty());
                assert_eq!(reason.trim(), reason);
            }
            _ => {}
        },
        SwitchInput::Tick => {}
        // Only an alarm mapped to `*` is read as a contributor alarm.
        SwitchInput::Contributors { alarm, .. } => {
            assert_eq!(alarms.target(&alarm), Some(&AlarmFor::Contributors));
        }
        SwitchInput::Timers(timers) => {
            let records = payload
                .get("Records")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            assert_eq!(timers.len(), records);
        }
    }
}
