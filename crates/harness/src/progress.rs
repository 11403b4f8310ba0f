//! What a long command is doing: a spinner on a terminal, plain lines
//! otherwise (CI logs, pipes, files), or lines kept in memory for tests.
//!
//! Two kinds of output: a *step* is what the command is waiting for right
//! now (the spinner's message, or one line to stderr when there is no
//! terminal); a *line* is a result worth keeping (stdout, printed above the
//! spinner).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, Clone)]
enum Sink {
    Spinner(ProgressBar),
    Plain,
    Memory(Arc<Mutex<Vec<String>>>),
}

/// See the module docs. Cheap to clone; clones share the spinner.
#[derive(Debug, Clone)]
pub struct Progress {
    sink: Sink,
}

impl Progress {
    /// A spinner when stderr is a terminal, plain lines otherwise.
    pub fn for_terminal() -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(120));
            Self {
                sink: Sink::Spinner(bar),
            }
        } else {
            Self::plain()
        }
    }

    /// Plain lines: steps to stderr, lines to stdout.
    pub fn plain() -> Self {
        Self { sink: Sink::Plain }
    }

    /// Lines (and steps, prefixed `… `) kept in memory.
    pub fn memory() -> (Self, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        (
            Self {
                sink: Sink::Memory(Arc::clone(&lines)),
            },
            lines,
        )
    }

    /// What the command waits for now.
    pub fn step(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.sink {
            Sink::Spinner(bar) => bar.set_message(message),
            Sink::Plain => eprintln!("… {message}"),
            Sink::Memory(lines) => lock(lines).push(format!("… {message}")),
        }
    }

    /// A running status that changes often (the spinner's message on a
    /// terminal; nothing elsewhere, so logs are not flooded).
    pub fn status(&self, message: impl Into<String>) {
        if let Sink::Spinner(bar) = &self.sink {
            bar.set_message(message.into());
        }
    }

    /// A result worth keeping.
    pub fn line(&self, message: impl AsRef<str>) {
        let message = message.as_ref();
        match &self.sink {
            Sink::Spinner(bar) => bar.println(message),
            Sink::Plain => println!("{message}"),
            Sink::Memory(lines) => lock(lines).push(message.to_owned()),
        }
    }

    /// Take the spinner off the screen.
    pub fn finish(&self) {
        if let Sink::Spinner(bar) = &self.sink {
            bar.finish_and_clear();
        }
    }
}

fn lock(lines: &Mutex<Vec<String>>) -> MutexGuard<'_, Vec<String>> {
    // Lines are pushed whole: a poisoned lock still holds good data.
    lines.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_keeps_steps_and_lines_in_order() {
        let (progress, lines) = Progress::memory();
        progress.step("starting");
        progress.status("12 s");
        progress.line("ready");
        progress.finish();
        assert_eq!(*lock(&lines), vec!["… starting", "ready"]);
    }
}
