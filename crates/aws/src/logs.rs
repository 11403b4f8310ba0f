//! A function's log lines: what lambda_runtime's default subscriber writes
//! (no target, no timestamp: Lambda adds one; JSON objects when the function's
//! log format is JSON), filtered without a regular-expression engine.

use std::str::FromStr;

use lifeboat_core::metrics::{AWS_LAMBDA_LOG_FORMAT, AWS_LAMBDA_LOG_LEVEL, LogLevel};
use tracing::Subscriber;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

/// Per-target levels, `info,aws_smithy_runtime=debug`, when the level alone
/// is not enough.
pub const RUST_LOG: &str = "RUST_LOG";

/// Which events are written, from the two variables' values.
///
/// `RUST_LOG` is a comma-separated list of `level` and `target=level`
/// directives; a directive that does not parse is skipped. The default
/// level is `AWS_LAMBDA_LOG_LEVEL` when set (Lambda's `FATAL` is `error`
/// here), else the bare level of `RUST_LOG`, else `INFO`. Span and field
/// filters (`target[span{field=value}]`) are not read.
pub fn filter(lambda_level: Option<&str>, rust_log: Option<&str>) -> Targets {
    let directives = rust_log.unwrap_or_default();
    let targets = directives
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .filter_map(|d| Targets::from_str(d.trim()).ok())
        .fold(Targets::new(), |all, one| {
            let default = one.default_level();
            let all = all.with_targets(one);
            match default {
                Some(level) => all.with_default(level),
                None => all,
            }
        });
    match lambda_level.and_then(level) {
        Some(default) => targets.with_default(default),
        None if targets.default_level().is_some() => targets,
        None => targets.with_default(LevelFilter::INFO),
    }
}

/// `TRACE` … `FATAL`, any case ([`LogLevel::parse`]); `FATAL` is `ERROR`.
fn level(name: &str) -> Option<LevelFilter> {
    Some(match LogLevel::parse(name)? {
        LogLevel::Trace => LevelFilter::TRACE,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error | LogLevel::Fatal => LevelFilter::ERROR,
    })
}

/// The subscriber a function writes its lines with: JSON objects when
/// `json` (Lambda's log format `JSON`), else text; no target, no timestamp.
pub fn subscriber<W>(writer: W, json: bool, filter: Targets) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time()
        .with_writer(writer);
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        Box::new(registry.with(fmt.json()))
    } else {
        Box::new(registry.with(fmt))
    }
}

/// Install the process's subscriber on standard output, from
/// `AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL` and `RUST_LOG`. Once, at
/// the top of `main`; a second call leaves the first subscriber in place.
pub fn init() {
    let var = |name| std::env::var(name).ok();
    let filter = filter(
        var(AWS_LAMBDA_LOG_LEVEL).as_deref(),
        var(RUST_LOG).as_deref(),
    );
    let json = var(AWS_LAMBDA_LOG_FORMAT).is_some_and(|f| f.eq_ignore_ascii_case("json"));
    // Err: a subscriber is set already, and it stays.
    let _ = tracing::subscriber::set_global_default(subscriber(std::io::stdout, json, filter));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn lets(filter: &Targets, target: &str, level: Level) -> bool {
        filter.would_enable(target, &level)
    }

    #[test]
    fn info_by_default() {
        let f = filter(None, None);
        assert!(lets(&f, "offsale_listener", Level::INFO));
        assert!(!lets(&f, "offsale_listener", Level::DEBUG));
    }

    #[test]
    fn the_lambda_level_is_the_default_and_fatal_is_error() {
        let f = filter(Some("debug"), None);
        assert!(lets(&f, "search", Level::DEBUG));
        assert!(!lets(&f, "search", Level::TRACE));
        let f = filter(Some("FATAL"), None);
        assert!(lets(&f, "search", Level::ERROR));
        assert!(!lets(&f, "search", Level::WARN));
    }

    #[test]
    fn rust_log_sets_targets_and_a_bad_directive_is_skipped() {
        let f = filter(
            None,
            Some("warn, aws_smithy_runtime=debug,=nonsense=,cart=loud"),
        );
        assert!(lets(&f, "aws_smithy_runtime::client", Level::DEBUG));
        assert!(!lets(&f, "search", Level::INFO));
        assert!(lets(&f, "search", Level::WARN));
        // AWS_LAMBDA_LOG_LEVEL wins over RUST_LOG's bare level.
        let f = filter(Some("INFO"), Some("warn,aws_smithy_runtime=debug"));
        assert!(lets(&f, "search", Level::INFO));
        assert!(lets(&f, "aws_smithy_runtime", Level::DEBUG));
    }
}
