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

/// The targets of lifeboat's own crates: they log at the function's level.
/// Every other target (the Lambda runtime, the AWS SDK, hyper, reqwest,
/// rustls) is a library, capped at [`LIBRARY_CEILING`].
pub const OWN_TARGETS: [&str; 11] = [
    "cart",
    "circuit_switch",
    "fallback_consumer",
    "lifeboat_aws",
    "lifeboat_core",
    "lifeboat_lookup",
    "lifeboat_operator",
    "lifeboat_stream",
    "offsale_listener",
    "real_consumer",
    "search",
];

/// The most a library writes unless `RUST_LOG` names its target: at TRACE
/// the Lambda runtime writes every raw event (`"raw JSON event received
/// from Lambda"`, headers and bodies included) and the HTTP stacks write
/// headers, so a function at TRACE keeps libraries at DEBUG.
pub const LIBRARY_CEILING: LevelFilter = LevelFilter::DEBUG;

/// Which events are written, from the two variables' values.
///
/// `RUST_LOG` is a comma-separated list of `level` and `target=level`
/// directives; a directive that does not parse is skipped. The level is
/// `AWS_LAMBDA_LOG_LEVEL` when set (Lambda's `FATAL` is `error` here), else
/// the bare level of `RUST_LOG`, else `INFO`: lifeboat's own crates
/// ([`OWN_TARGETS`]) log at it, every other target at it but no more than
/// [`LIBRARY_CEILING`]. A target `RUST_LOG` names gets the level it is
/// given, TRACE included: naming it is the explicit choice. Span and field
/// filters (`target[span{field=value}]`) are not read.
pub fn filter(lambda_level: Option<&str>, rust_log: Option<&str>) -> Targets {
    let directives = rust_log.unwrap_or_default();
    let (named, bare) = directives
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .filter_map(|d| Targets::from_str(d.trim()).ok())
        .fold((Targets::new(), None), |(all, bare), one| {
            let bare = one.default_level().or(bare);
            (all.with_targets(one), bare)
        });
    let level = lambda_level
        .and_then(level)
        .or(bare)
        .unwrap_or(LevelFilter::INFO);
    let own = OWN_TARGETS
        .iter()
        .filter(|own| !named.iter().any(|(target, _)| target == **own))
        .fold(named.clone(), |all, own| all.with_target(*own, level));
    own.with_default(level.min(LIBRARY_CEILING))
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

    #[test]
    fn libraries_stop_at_debug_unless_rust_log_names_them() {
        let f = filter(Some("TRACE"), None);
        assert!(lets(&f, "real_consumer::process", Level::TRACE));
        assert!(lets(&f, "lifeboat_operator::client", Level::TRACE));
        // The runtime's raw event, and the HTTP stacks' headers, are TRACE.
        assert!(!lets(
            &f,
            "lambda_runtime::layers::api_response",
            Level::TRACE
        ));
        assert!(lets(
            &f,
            "lambda_runtime::layers::api_response",
            Level::DEBUG
        ));
        assert!(!lets(&f, "hyper_util::client", Level::TRACE));
        // Naming a library is the explicit choice, TRACE included.
        let f = filter(Some("DEBUG"), Some("lambda_runtime=trace"));
        assert!(lets(
            &f,
            "lambda_runtime::layers::api_response",
            Level::TRACE
        ));
        assert!(!lets(&f, "hyper", Level::TRACE));
        // RUST_LOG's bare level is the level when Lambda gives none.
        let f = filter(None, Some("trace"));
        assert!(lets(&f, "search", Level::TRACE));
        assert!(!lets(&f, "aws_smithy_runtime", Level::TRACE));
        // Naming one of lifeboat's crates lowers it like any target.
        let f = filter(Some("DEBUG"), Some("search=warn"));
        assert!(!lets(&f, "search::handler", Level::INFO));
        assert!(lets(&f, "cart", Level::DEBUG));
    }

    #[test]
    fn own_targets_are_the_functions_and_the_crates_they_use() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../");
        for target in OWN_TARGETS {
            let dir = target
                .strip_prefix("lifeboat_")
                .unwrap_or(target)
                .replace('_', "-");
            let path = std::path::Path::new(manifest).join(dir).join("Cargo.toml");
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                text.contains(&format!("name = \"{}\"", target.replace('_', "-"))),
                "{target} is a crate of the workspace ({})",
                path.display()
            );
        }
    }
}
