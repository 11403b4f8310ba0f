//! A command that failed: which command, what went wrong and the exit code.
//! Each command's `run` returns it; `main` prints it once, as
//! `lifeboat {command}: {message}`, and exits with its code.

use std::process::ExitCode;

/// A failed command, as `main` prints it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lifeboat {command}: {message}")]
pub struct CliError {
    command: &'static str,
    message: String,
    code: u8,
}

impl CliError {
    /// `command` (as typed: `status`, `local alarm`, `config put`) failed
    /// with `message`; the exit code is 1.
    pub fn new(command: &'static str, message: impl std::fmt::Display) -> Self {
        Self {
            command,
            message: message.to_string(),
            code: 1,
        }
    }

    /// The same failure with another exit code.
    #[must_use]
    pub fn with_code(self, code: u8) -> Self {
        Self { code, ..self }
    }

    /// The command that failed.
    pub fn command(&self) -> &'static str {
        self.command
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The process's exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_as_the_command_and_its_message() {
        let e = CliError::new("local alarm", "no such alarm");
        assert_eq!(e.to_string(), "lifeboat local alarm: no such alarm");
        assert_eq!(e.exit_code(), ExitCode::FAILURE);
        assert_eq!(e.clone().with_code(2).exit_code(), ExitCode::from(2));
        assert_eq!((e.command(), e.message()), ("local alarm", "no such alarm"));
    }
}
