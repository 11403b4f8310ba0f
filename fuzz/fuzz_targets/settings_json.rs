//! The settings JSON every function starts with: `Settings::from_json`
//! (`OPERATOR_SETTINGS`, or the operator config table's `settings`) and
//! `CartSettings::from_json` (`CART_SETTINGS`), on the same text.
//!
//! Input: JSON text as it is, or a tree generated from the bytes with the
//! settings' field names and values.
//!
//! Invariants: no panic; accepted settings, written as JSON, read back as
//! themselves (fractions to 12 significant digits); an operator's block has `default`'s value of every field it
//! does not give (the blocks inherit field by field); an operator without a
//! block gets `default`; every operator's settings can be used as the
//! functions use them at once: the probe's and the hang check's calls are
//! built (the same operation and parameter names, `today+N` resolved), the
//! open period never exceeds `open_max`, and the failure window can judge
//! an empty window; every route listed is one the operator sails. Accepted cart settings absorb a rise of at most
//! `MAX_ABSORB_RISE_PERCENT`, and read back as themselves too.
#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::OperatorId;
use lifeboat_core::budget::Budget;
use lifeboat_core::cart::{CartSettings, MAX_ABSORB_RISE_PERCENT};
use lifeboat_core::settings::{OperatorSettings, Settings};
use lifeboat_fuzz::{Vocabulary, generated};
use serde_json::Value;

const VOCABULARY: Vocabulary = Vocabulary {
    keys: &[
        "default",
        "operators",
        "nordic",
        "baltic",
        "budgets",
        "search",
        "price",
        "ping",
        "timeout",
        "slow_after",
        "queue",
        "window",
        "length",
        "bucket",
        "min_calls",
        "failure_rate",
        "slow_rate",
        "consecutive_timeouts",
        "consecutive_failures",
        "consecutive_errors",
        "streak_length",
        "refusal_rate",
        "refusal_min_calls",
        "sustained_length",
        "breaker",
        "open_base",
        "open_max",
        "jitter",
        "trial_calls",
        "successes_to_close",
        "slow_successes_to_close",
        "half_open_timeout",
        "probe_every",
        "cache",
        "recent",
        "last_good",
        "negative",
        "failure_statuses",
        "probe",
        "hang_check",
        "operation",
        "params",
        "from",
        "date",
        "ids",
        "routes",
        "default_accommodation",
        "confirm_on_cached_price",
        "max_price_age_s",
        "absorb_rise_percent",
    ],
    strings: &[
        "search",
        "price",
        "ping",
        "upper",
        "lower",
        "exact",
        "HEL",
        "HEL-TLL",
        "TLL-HEL",
        "HEL-HEL",
        "today",
        "today+7",
        "today+99999999999",
        "today+-3",
        "2026-12-24",
        "seat",
        "",
    ],
};

/// 2026-11-30T10:00:00Z, the fixtures' now.
const NOW: i64 = 1_796_032_800;

/// The fields of an operator's block, each inherited from `default` when
/// the block does not give it.
const FIELDS: [&str; 9] = [
    "budgets",
    "window",
    "breaker",
    "cache",
    "failure_statuses",
    "probe",
    "hang_check",
    "ids",
    "routes",
];

fuzz_target!(|data: &[u8]| {
    let text = match std::str::from_utf8(data) {
        Ok(text) if serde_json::from_str::<Value>(text).is_ok() || text.trim().is_empty() => {
            text.to_owned()
        }
        _ => generated(data, &VOCABULARY).to_string(),
    };
    let Some(now) = DateTime::<Utc>::from_timestamp(NOW, 0) else {
        return;
    };
    if let Ok(settings) = Settings::from_json(&text) {
        check(&text, &settings, now);
    }
    if let Ok(cart) = CartSettings::from_json(&text) {
        let policies = std::iter::once(&cart.default).chain(cart.operators.values());
        for policy in policies {
            assert!(policy.absorb_rise_percent <= MAX_ABSORB_RISE_PERCENT);
        }
        let written = to_json(&cart);
        match CartSettings::from_json(&written) {
            Ok(back) => assert_eq!(back, cart, "{written}"),
            Err(e) => panic!("cart settings written as {written} do not read back: {e}"),
        }
    }
});

fn to_json<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_string(value) {
        Ok(json) => json,
        Err(e) => panic!("accepted settings cannot be written: {e}"),
    }
}

/// `value` with every fraction to 12 significant digits: serde_json (built
/// without `float_roundtrip`, as lifeboat's crates use it) may read a
/// number it wrote one unit in the last place off.
fn rounded(value: Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => {
            Value::String(format!("{:.11e}", n.as_f64().unwrap_or(0.0)))
        }
        Value::Array(items) => Value::Array(items.into_iter().map(rounded).collect()),
        Value::Object(fields) => {
            Value::Object(fields.into_iter().map(|(k, v)| (k, rounded(v))).collect())
        }
        other => other,
    }
}

fn check(text: &str, settings: &Settings, now: DateTime<Utc>) {
    let written = to_json(settings);
    match serde_json::from_str::<Settings>(&written) {
        Ok(back) => assert_eq!(
            rounded(serde_json::to_value(&back).unwrap_or(Value::Null)),
            rounded(serde_json::to_value(settings).unwrap_or(Value::Null)),
            "{written}"
        ),
        Err(e) => panic!("settings written as {written} do not read back: {e}"),
    }

    // Field by field inheritance, at the top of each block.
    let given: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let default = serde_json::to_value(&settings.default).unwrap_or(Value::Null);
    for (operator, own) in &settings.operators {
        let block = given
            .get("operators")
            .and_then(|o| o.get(operator.as_str()));
        let own = serde_json::to_value(own).unwrap_or(Value::Null);
        for field in FIELDS {
            if block.is_some_and(|b| b.get(field).is_none()) {
                assert_eq!(
                    own.get(field),
                    default.get(field),
                    "{operator}'s {field} is not default's"
                );
            }
        }
    }
    if let Ok(stranger) = OperatorId::new("not-listed-anywhere")
        && !settings.operators.contains_key(&stranger)
    {
        assert_eq!(settings.for_operator(&stranger), &settings.default);
    }

    let blocks = std::iter::once(("nordic", &settings.default)).chain(
        settings
            .operators
            .iter()
            .map(|(operator, block)| (operator.as_str(), block)),
    );
    for (operator, block) in blocks {
        let Ok(operator) = OperatorId::new(operator) else {
            continue;
        };
        usable(&operator, block, now);
    }
}

fn usable(operator: &OperatorId, settings: &OperatorSettings, now: DateTime<Utc>) {
    if let Some(probe) = &settings.probe {
        let call = probe.call(
            operator,
            now,
            Budget::with_timeout(settings.breaker.half_open_timeout),
        );
        assert_eq!(call.operation, probe.operation);
        assert!(call.params.keys().eq(probe.params.keys()));
        for (name, value) in &probe.params {
            if value == "today"
                || value
                    .strip_prefix("today+")
                    .is_some_and(|n| n.parse::<u16>().is_ok())
            {
                let sent = &call.params[name];
                assert!(
                    chrono::NaiveDate::parse_from_str(sent, "%Y-%m-%d").is_ok(),
                    "{value:?} sent as {sent:?}"
                );
            }
        }
    }
    if let Some(check) = &settings.hang_check {
        let call = check.call(operator, now);
        assert_eq!(call.operation, check.operation);
        assert_eq!(call.budget.timeout, check.timeout);
    }
    for failed_trials in [0, 1, 7, 40] {
        for unit in [0.0, 0.5, 0.999] {
            let period = settings.breaker.open_period(failed_trials, unit);
            assert!(period <= settings.breaker.open_max, "{period:?}");
        }
    }
    for route in settings.routes.iter().flatten() {
        assert!(settings.sails(&route.from, &route.to), "{route}");
        assert_ne!(route.from, route.to);
    }
    let _ = settings.window.bucket_start(now);
    let _ = settings.window.oldest_read(now);
    let _ = settings.window.evaluate(&[], now);
}
