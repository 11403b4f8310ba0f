//! `lifeboat breaker force-open|force-closed|release`: an operator command
//! sent to the circuit switch function with the Lambda Invoke API.
//!
//! The payload is the one the switch reads (`{"command": "force-open",
//! "operator": "nordic", "reason": "…"}`); the switch answers with its report
//! (the decision, where the stream points now). A function that fails answers
//! 200 with `X-Amz-Function-Error` (`Unhandled`) and `{"errorType",
//! "errorMessage"}` as the payload: that is [`BreakerError::Function`].

use std::fmt::Write as _;

use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::primitives::Blob;
use lifeboat_core::breaker::Command;
use lifeboat_core::{BreakerState, ConsumerTarget, OperatorId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum BreakerError {
    #[error("a reason is required: the switch records it in the breaker and its event")]
    NoReason,
    #[error("command payload not written: {0}")]
    Payload(#[from] serde_json::Error),
    #[error("invoking {function}: {message}")]
    Invoke { function: String, message: String },
    #[error("the circuit switch {function} failed ({kind}): {error_type}: {message}")]
    Function {
        function: String,
        /// `X-Amz-Function-Error`: `Unhandled` or `Handled`.
        kind: String,
        error_type: String,
        message: String,
    },
    #[error(
        "the circuit switch {function} answered something that is not its report: {why}: {answer}"
    )]
    Unreadable {
        function: String,
        why: String,
        answer: String,
    },
}

/// One operator command, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerCommand {
    pub command: Command,
    pub operator: OperatorId,
    pub reason: String,
    /// Who sends it (the caller's ARN, [`caller`]); the switch keeps it
    /// with the reason.
    pub caller: Option<String>,
}

/// The command's payload, exactly as the switch reads it.
#[derive(Debug, Serialize)]
struct Payload<'a> {
    command: Command,
    operator: &'a OperatorId,
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    caller: Option<&'a str>,
}

/// How long `lifeboat breaker` waits for STS to say who is calling before
/// it sends the command without a caller.
const CALLER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The ARN of the principal the SDK's credentials belong to (STS
/// `GetCallerIdentity`, which needs no permission), or why it is unknown.
/// A command is still sent without one: a command in an outage must not
/// wait on STS.
pub async fn caller(sdk: &aws_config::SdkConfig) -> Result<String, String> {
    let sts = aws_sdk_sts::Client::from_conf(
        aws_sdk_sts::config::Builder::from(sdk)
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_timeout(CALLER_TIMEOUT)
                    .build(),
            )
            .build(),
    );
    match sts.get_caller_identity().send().await {
        Ok(identity) => identity
            .arn
            .filter(|arn| !arn.trim().is_empty())
            .ok_or_else(|| "STS named no ARN".to_owned()),
        Err(e) => Err(sdk_message(&e)),
    }
}

impl BreakerCommand {
    /// A command with a non-blank reason (kept trimmed).
    pub fn new(command: Command, operator: OperatorId, reason: &str) -> Result<Self, BreakerError> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(BreakerError::NoReason);
        }
        Ok(Self {
            command,
            operator,
            reason: reason.to_owned(),
            caller: None,
        })
    }

    /// The same command, sent by `caller`.
    pub fn sent_by(self, caller: Option<String>) -> Self {
        Self { caller, ..self }
    }

    /// `{"command": "force-open", "operator": "nordic", "reason": "…"}`.
    pub fn payload(&self) -> Result<Vec<u8>, BreakerError> {
        Ok(serde_json::to_vec(&Payload {
            command: self.command,
            operator: &self.operator,
            reason: &self.reason,
            caller: self.caller.as_deref(),
        })?)
    }
}

/// One decision in the switch's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub operator: String,
    pub from: BreakerState,
    pub to: BreakerState,
    pub version: u64,
    pub reason: String,
    pub changed: bool,
}

/// What the switch answers a direct invocation with (its `SwitchReport`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchReport {
    pub decisions: Vec<Decision>,
    /// Where the streams of the lanes the invocation reconciled point.
    #[serde(default)]
    pub streams: Vec<StreamReport>,
    /// Breaker versions whose state change this invocation published.
    #[serde(default)]
    pub announced: Vec<u64>,
    /// Operators or lanes the invocation could not handle.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
}

/// An operator (or its lane's mapping) the switch could not handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub lane: Option<String>,
    pub error: String,
}

/// Where one lane's stream points after an invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    pub lane: String,
    pub target: ConsumerTarget,
    #[serde(default)]
    pub repointed: bool,
}

impl SwitchReport {
    /// A few lines for a human.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for d in &self.decisions {
            if d.changed {
                let _ = writeln!(
                    out,
                    "{}: {} -> {} (version {}): {}",
                    d.operator, d.from, d.to, d.version, d.reason
                );
            } else {
                let _ = writeln!(
                    out,
                    "{}: unchanged, {} (version {}): {}",
                    d.operator, d.to, d.version, d.reason
                );
            }
        }
        if self.streams.is_empty() {
            let _ = writeln!(out, "requests stream: not reported");
        }
        for stream in &self.streams {
            let target = match stream.target {
                ConsumerTarget::Real => "real consumer",
                ConsumerTarget::Fallback => "fallback consumer",
            };
            let moved = if stream.repointed {
                " (re-pointed now)"
            } else {
                ""
            };
            let _ = writeln!(out, "{} stream: {target}{moved}", stream.lane);
        }
        for skipped in &self.skipped {
            let what = match (&skipped.lane, &skipped.operator) {
                (Some(lane), _) => format!("{lane} stream"),
                (None, Some(operator)) => operator.clone(),
                (None, None) => "?".to_owned(),
            };
            let _ = writeln!(out, "{what}: not handled: {}", skipped.error);
        }
        if !self.announced.is_empty() {
            let versions: Vec<String> = self.announced.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                "published Breaker State Changed for version {}",
                versions.join(", ")
            );
        }
        out
    }
}

/// What a successful invocation returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Invoked {
    pub report: SwitchReport,
    /// The payload as the switch wrote it.
    pub answer: Value,
}

/// `{"errorType": …, "errorMessage": …}`, as the Lambda runtime reports a
/// function's error.
#[derive(Debug, Deserialize)]
struct FunctionErrorPayload {
    #[serde(rename = "errorType", default)]
    error_type: Option<String>,
    #[serde(rename = "errorMessage", default)]
    error_message: Option<String>,
}

/// `<code>: <message>` of a service error, the error and its sources
/// otherwise, on one line. Any SDK's errors: they share the smithy error
/// types. Never the errors' `Debug` (which `DisplayErrorContext` appends):
/// a person reads this.
pub(crate) fn sdk_message<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            match (e.code(), e.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                _ => error_chain(e),
            }
        }
        other => error_chain(other),
    }
}

/// An error and its sources, `: ` between them, on one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        // The SDK's wrappers repeat their source's text.
        if !out.ends_with(&text) {
            let _ = write!(out, ": {text}");
        }
        source = e.source();
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Send `command` to the circuit switch `function` and read its report.
pub async fn invoke(
    client: &aws_sdk_lambda::Client,
    function: &str,
    command: &BreakerCommand,
) -> Result<Invoked, BreakerError> {
    let output = client
        .invoke()
        .function_name(function)
        .payload(Blob::new(command.payload()?))
        .send()
        .await
        .map_err(|e| BreakerError::Invoke {
            function: function.to_owned(),
            message: sdk_message(&e),
        })?;
    let bytes = output.payload().map(Blob::as_ref).unwrap_or_default();
    let text = String::from_utf8_lossy(bytes);
    if let Some(kind) = output.function_error() {
        let (error_type, message) = match serde_json::from_slice::<FunctionErrorPayload>(bytes) {
            Ok(p) => (
                p.error_type.unwrap_or_else(|| "unknown".to_owned()),
                p.error_message.unwrap_or_else(|| text.to_string()),
            ),
            Err(_) => ("unknown".to_owned(), text.to_string()),
        };
        return Err(BreakerError::Function {
            function: function.to_owned(),
            kind: kind.to_owned(),
            error_type,
            message,
        });
    }
    let unreadable = |why: String| BreakerError::Unreadable {
        function: function.to_owned(),
        why,
        answer: text.to_string(),
    };
    let answer: Value = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
    let report: SwitchReport =
        serde_json::from_value(answer.clone()).map_err(|e| unreadable(e.to_string()))?;
    Ok(Invoked { report, answer })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    #[test]
    fn the_payload_is_what_the_switch_reads() {
        let cmd = BreakerCommand::new(Command::ForceClosed, nordic(), "  false alarm ").unwrap();
        let payload: Value = serde_json::from_slice(&cmd.payload().unwrap()).unwrap();
        assert_eq!(
            payload,
            serde_json::json!({"command": "force-closed", "operator": "nordic", "reason": "false alarm"})
        );
        let signed = cmd.sent_by(Some("arn:aws:iam::123456789012:user/alice".into()));
        let payload: Value = serde_json::from_slice(&signed.payload().unwrap()).unwrap();
        assert_eq!(payload["caller"], "arn:aws:iam::123456789012:user/alice");
    }

    #[test]
    fn a_blank_reason_is_refused() {
        assert!(matches!(
            BreakerCommand::new(Command::Release, nordic(), " \t"),
            Err(BreakerError::NoReason)
        ));
    }

    #[test]
    fn reports_render_decisions_and_the_stream() {
        let report = SwitchReport {
            decisions: vec![Decision {
                operator: "nordic".into(),
                from: BreakerState::Closed,
                to: BreakerState::ForcedOpen,
                version: 4,
                reason: "forced open: maintenance".into(),
                changed: true,
            }],
            streams: vec![StreamReport {
                lane: "requests".into(),
                target: ConsumerTarget::Fallback,
                repointed: true,
            }],
            announced: vec![4],
            skipped: Vec::new(),
        };
        assert_eq!(
            report.render(),
            "nordic: closed -> forced_open (version 4): forced open: maintenance\n\
             requests stream: fallback consumer (re-pointed now)\n\
             published Breaker State Changed for version 4\n"
        );
    }
}
