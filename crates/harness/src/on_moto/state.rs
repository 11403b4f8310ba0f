//! Where a running `lifeboat local` can be reached: written when the suite
//! is up, removed when it stops, read by `lifeboat local alarm` and
//! `lifeboat local env` in another shell.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_local::alarm::{AlarmRule, AlarmState, AlarmTransition, StateRecord};
use lifeboat_local::pump::Invoker;
use lifeboat_local::suite::{CIRCUIT_SWITCH, LocalSuite, shell_quoted};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The default state file: beside the suite's logs in the workspace's
/// target directory.
pub fn default_path() -> PathBuf {
    lifeboat_local::watch::local_dir(&lifeboat_local::watch::workspace_root()).join("local.json")
}

/// Where the functions' environment goes for a watch started by hand:
/// `functions.env` beside the state file.
pub fn env_file_beside(state_file: &Path) -> PathBuf {
    state_file.with_file_name("functions.env")
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "no running `lifeboat local` found at {path} ({source}); start one, or pass --state-file"
    )]
    NotRunning {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a lifeboat local state file: {source}")]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "another lifeboat local (pid {pid}) runs with the state file {path}: stop it, or pass --state-file"
    )]
    Running { path: PathBuf, pid: u32 },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the running suite has no alarm named {name:?}; it evaluates: {known}")]
    UnknownAlarm { name: String, known: String },
    #[error("the alarm event did not reach {function}: {source}")]
    Invoke {
        function: String,
        source: lifeboat_local::pump::InvokeError,
    },
}

/// An alarm the running suite evaluates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmEntry {
    pub name: String,
    pub operator: String,
    pub arn: String,
}

/// The running suite's endpoints and environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalState {
    pub pid: u32,
    pub started_at: DateTime<Utc>,
    pub operator: String,
    /// moto's endpoint (every AWS API the functions call).
    pub moto_endpoint: String,
    /// `cargo lambda watch`'s Lambda Invoke API.
    pub invoke_endpoint: String,
    /// Where `LifeboatHttpApi`'s routes answer.
    pub search_url: String,
    pub cart_url: String,
    /// The simulated operator (and its `/_control` endpoints).
    pub operator_url: String,
    pub alarms: Vec<AlarmEntry>,
    /// Every function's environment.
    pub env: Vec<(String, String)>,
}

impl LocalState {
    /// The state of a started suite whose errors alarm is `alarm` (the
    /// switch takes its events even when the suite cannot evaluate it).
    pub fn of(
        gateway: &LocalSuite,
        operator: &lifeboat_core::OperatorId,
        alarm: Option<&str>,
    ) -> Self {
        let operator = operator.to_string();
        let alarms = alarm
            .map(|name| {
                let rule = AlarmRule::errors_alarm(name, &operator);
                vec![AlarmEntry {
                    name: rule.name.clone(),
                    operator: operator.clone(),
                    arn: rule.arn(),
                }]
            })
            .unwrap_or_default();
        let watch = gateway.watch();
        Self {
            pid: std::process::id(),
            started_at: Utc::now(),
            operator,
            moto_endpoint: gateway.moto().endpoint(),
            invoke_endpoint: watch.invoke_endpoint(),
            search_url: watch.function_url(lifeboat_local::suite::SEARCH, ""),
            cart_url: watch.function_url(lifeboat_local::suite::CART, ""),
            operator_url: gateway.operator().base_url(),
            alarms,
            env: gateway.function_env().to_vec(),
        }
    }

    pub fn write(&self, path: &Path) -> Result<(), StateError> {
        let err = |source| StateError::Write {
            path: path.to_path_buf(),
            source,
        };
        let text = serde_json::to_string_pretty(self)
            .map_err(std::io::Error::other)
            .map_err(err)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let temp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&temp, text)
            .and_then(|()| std::fs::rename(&temp, path))
            .map_err(err)
    }

    /// Refuse to start while another live process holds the state file at
    /// `path` (a run that died leaves it; that one is ignored).
    pub fn check_free(path: &Path) -> Result<(), StateError> {
        match Self::read(path) {
            Ok(other)
                if other.pid != std::process::id()
                    && Path::new(&format!("/proc/{}", other.pid)).exists() =>
            {
                Err(StateError::Running {
                    path: path.to_path_buf(),
                    pid: other.pid,
                })
            }
            _ => Ok(()),
        }
    }

    pub fn read(path: &Path) -> Result<Self, StateError> {
        let text = std::fs::read_to_string(path).map_err(|source| StateError::NotRunning {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| StateError::Malformed {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Shell lines that point the AWS CLI, the SDKs and `lifeboat status` at
    /// the local suite (`eval "$(lifeboat local env)"`).
    pub fn env_script(&self) -> String {
        let mut out = String::new();
        for (key, value) in &self.env {
            out.push_str(&format!("export {key}={}\n", shell_quoted(value)));
        }
        out.push_str(&format!(
            "export CIRCUIT_SWITCH_FUNCTION={CIRCUIT_SWITCH}\n"
        ));
        out.push_str(&format!(
            "export LIFEBOAT_INVOKE_ENDPOINT_URL={}\n",
            shell_quoted(&self.invoke_endpoint)
        ));
        out
    }

    /// `SetAlarmState` on the running suite: send the circuit switch what
    /// the alarm `name` sends when it enters `value` (the rule's event, and
    /// for ALARM the action's payload too). The running evaluator computes
    /// the state from the metrics again at its next period, as CloudWatch
    /// does after `SetAlarmState`.
    pub async fn force_alarm(
        &self,
        name: &str,
        value: AlarmState,
        reason: &str,
    ) -> Result<AlarmTransition, StateError> {
        let entry = self.alarms.iter().find(|a| a.name == name).ok_or_else(|| {
            StateError::UnknownAlarm {
                name: name.to_owned(),
                known: if self.alarms.is_empty() {
                    "none".to_owned()
                } else {
                    self.alarms
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            }
        })?;
        let rule = AlarmRule::errors_alarm(&entry.name, &entry.operator);
        let now = Utc::now();
        // The state before is the evaluator's, which this process does not
        // know; the switch decides from the new state alone.
        let previous = StateRecord {
            value: match value {
                AlarmState::Alarm => AlarmState::Ok,
                _ => AlarmState::Alarm,
            },
            reason: "Unknown: the state before lifeboat local alarm".to_owned(),
            reason_data: json!({}),
            timestamp: now,
        };
        let transition = AlarmTransition::forced(previous, value, reason, now);
        let invoker = Invoker::for_endpoint(&self.invoke_endpoint, Duration::from_secs(30)).await;
        for event in transition.events(&rule) {
            invoker
                .invoke(CIRCUIT_SWITCH, &event)
                .await
                .map_err(|source| StateError::Invoke {
                    function: CIRCUIT_SWITCH.to_owned(),
                    source,
                })?;
        }
        Ok(transition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> LocalState {
        LocalState {
            pid: 1,
            started_at: Utc::now(),
            operator: "nordic".into(),
            moto_endpoint: "http://127.0.0.1:1".into(),
            invoke_endpoint: "http://127.0.0.1:2".into(),
            search_url: "http://127.0.0.1:2/lambda-url/search/".into(),
            cart_url: "http://127.0.0.1:2/lambda-url/cart/".into(),
            operator_url: "http://127.0.0.1:3".into(),
            alarms: vec![AlarmEntry {
                name: "lifeboat-nordic-errors".into(),
                operator: "nordic".into(),
                arn: "arn".into(),
            }],
            env: vec![(
                "OPERATOR_SETTINGS".into(),
                r#"{"default":{"note":"it's"}}"#.into(),
            )],
        }
    }

    #[test]
    fn the_state_file_round_trips_and_a_missing_one_says_so() {
        let dir = std::env::temp_dir().join(format!("lifeboat-state-{}", std::process::id()));
        let path = dir.join("local.json");
        let s = state();
        s.write(&path).unwrap();
        assert_eq!(LocalState::read(&path).unwrap(), s);
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            LocalState::read(&path),
            Err(StateError::Malformed { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        let e = LocalState::read(&path).unwrap_err();
        assert!(e.to_string().contains("no running `lifeboat local`"), "{e}");
    }

    #[test]
    fn env_lines_quote_for_the_shell() {
        let script = state().env_script();
        assert!(script.contains(r#"export OPERATOR_SETTINGS='{"default":{"note":"it'\''s"}}'"#));
        assert!(script.contains("export CIRCUIT_SWITCH_FUNCTION=circuit-switch"));
        assert!(script.contains("export LIFEBOAT_INVOKE_ENDPOINT_URL='http://127.0.0.1:2'"));
    }

    #[test]
    fn a_state_file_of_a_live_process_is_not_taken_over() {
        let dir = std::env::temp_dir().join(format!("lifeboat-state-live-{}", std::process::id()));
        let path = dir.join("local.json");
        assert!(LocalState::check_free(&path).is_ok(), "no file");
        let mut s = state();
        s.pid = std::process::id();
        s.write(&path).unwrap();
        assert!(LocalState::check_free(&path).is_ok(), "this process's own");
        // pid 1 is always alive.
        s.pid = 1;
        s.write(&path).unwrap();
        let e = LocalState::check_free(&path).unwrap_err();
        assert!(e.to_string().contains("pid 1"), "{e}");
        s.pid = u32::MAX;
        s.write(&path).unwrap();
        assert!(LocalState::check_free(&path).is_ok(), "a dead run's file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_unknown_alarm_names_the_known_ones() {
        let e = state()
            .force_alarm("other", AlarmState::Alarm, "test")
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the running suite has no alarm named \"other\"; it evaluates: lifeboat-nordic-errors"
        );
    }
}
