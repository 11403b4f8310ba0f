//! Per-operator settings: timeout budgets, failure window, breaker timings,
//! cache ages and how the operator's ids compare.
//!
//! Given to the functions as JSON in `OPERATOR_SETTINGS`, for example
//!
//! ```json
//! {"default": {"breaker": {"open_base": 20000}},
//!  "operators": {"nordic": {"budgets": {"search": {"timeout": 2500, "slow_after": 2000}}}}}
//! ```
//!
//! Every field is optional. Durations are milliseconds. An operator's own
//! block falls back to `default` field by field (within `budgets`, `window`,
//! `breaker` and `cache` too; a `probe` or `hang_check` it gives replaces
//! `default`'s whole), and both to the built-in defaults; `default` applies
//! to operators without a block of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::BreakerConfig;
use crate::budget::{Budget, Budgets};
use crate::cache::CachePolicy;
use crate::operator::{Operation, OperatorId, Route};
use crate::probe::ProbeSpec;
use crate::request::{FailureStatuses, OperatorCall};
use crate::window::WindowConfig;

/// Environment variable: the per-operator settings (JSON).
pub const OPERATOR_SETTINGS: &str = "OPERATOR_SETTINGS";
/// The operators a deployment serves (comma-separated), read by every
/// function that serves some and not others.
pub const OPERATORS: &str = "OPERATORS";

/// Everything tunable about one operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OperatorSettings {
    pub budgets: Budgets,
    pub window: WindowConfig,
    pub breaker: BreakerConfig,
    /// How old a cached answer may be to skip the operator, and to show as
    /// the last good answer.
    pub cache: CachePolicy,
    /// 4xx statuses that count as the operator failing (408 and 429 by
    /// default); every other 4xx is neutral.
    pub failure_statuses: FailureStatuses,
    /// The call the circuit switch probes an open breaker with; no probes
    /// without one ([`crate::probe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSpec>,
    /// The quick call the real consumer confirms a timeout with
    /// ([`HangCheck`]): `GET /ping` unless set; `null` for none, and then
    /// the failure window judges timeouts alone.
    pub hang_check: Option<HangCheck>,
    /// How the operator compares the ids customers send back (sailing ids):
    /// the case they are put in before they reach a cache key, a request
    /// and the operator.
    pub ids: IdCase,
    /// The routes the operator sails, when they are known: a search for any
    /// other is refused (404, `unknown_route`) without asking the operator.
    /// `None` (the default): every route is asked, and the operator's own
    /// "no such route" is what the negative cache keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<BTreeSet<Route>>,
    /// How the operator's lane runs ([`LaneSettings`]).
    pub lane: LaneSettings,
}

impl OperatorSettings {
    /// Whether a search from `from` to `to` may be asked of this operator:
    /// always without `routes`, else only a route it lists.
    pub fn sails(&self, from: &str, to: &str) -> bool {
        self.routes.as_ref().is_none_or(|routes| {
            routes.contains(&Route {
                from: from.to_owned(),
                to: to.to_owned(),
            })
        })
    }
}

impl Default for OperatorSettings {
    fn default() -> Self {
        Self {
            budgets: Budgets::default(),
            window: WindowConfig::default(),
            breaker: BreakerConfig::default(),
            cache: CachePolicy::default(),
            failure_statuses: FailureStatuses::default(),
            probe: None,
            hang_check: Some(HangCheck::default()),
            ids: IdCase::default(),
            routes: None,
            lane: LaneSettings::default(),
        }
    }
}

/// How an operator compares ids, and so the one spelling lifeboat asks it
/// with: with `upper` or `lower`, the case variants of an id are one
/// question (one request, one operator call, one cache item); with `exact`
/// (the default) every spelling is the operator's to tell apart, as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdCase {
    /// Case-insensitive; asked in capitals (`HEL-TLL-20261224-0615`).
    Upper,
    /// Case-insensitive; asked in small letters.
    Lower,
    /// Case-sensitive: asked exactly as sent.
    #[default]
    Exact,
}

impl IdCase {
    /// The spelling of `id` the operator is asked with. ASCII only: ids are
    /// checked to be ASCII letters, digits and '-' before they get here.
    pub fn normalise(self, id: &str) -> String {
        match self {
            IdCase::Upper => id.to_ascii_uppercase(),
            IdCase::Lower => id.to_ascii_lowercase(),
            IdCase::Exact => id.to_owned(),
        }
    }

    /// Whether the operator takes `a` and `b` for the same id.
    pub fn same(self, a: &str, b: &str) -> bool {
        match self {
            IdCase::Upper | IdCase::Lower => a.eq_ignore_ascii_case(b),
            IdCase::Exact => a == b,
        }
    }
}

/// A quick call that tells a hang from a slow answer, from
/// `OPERATOR_SETTINGS`:
///
/// ```json
/// {"hang_check": {"operation": "ping", "timeout": 1000}}
/// ```
///
/// While a call to a closed operator is late (its budget less `timeout`
/// gone, 2 s of a 3 s search), the real consumer sends this call, then
/// another every half `timeout` while none has answered, each allowed until
/// `timeout` after the call's budget ([`crate::hang`]). If the call times
/// out and every one of them (at least two) went unanswered (no answer in
/// time, no connection, a 5xx), a trip is asked for at once; any answer by
/// then, however slow (a 4xx, a 429, an unreadable body too), says the API is
/// there and leaves the call to the window's rules. An operator that
/// answers one operation slowly but the check quickly is not hanging, so a
/// slow outage or a brownout is still the window's to judge, and one slow
/// ping of an operator that hesitates is not a hang. A hang opens within
/// about the search budget plus `timeout` plus the gap to the first call
/// (docs/breaker.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HangCheck {
    /// `ping` (`GET /ping`) by default; a search of a question the operator
    /// keeps cached works as well. Never `book`: refused when settings are
    /// read ([`Operation::read_only`]).
    #[serde(
        default = "HangCheck::default_operation",
        deserialize_with = "hang_check_operation"
    )]
    pub operation: Operation,
    /// Parameters as in [`ProbeSpec`] (`today+N` dates).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Milliseconds; 1,000 by default.
    #[serde(default = "HangCheck::default_timeout", with = "crate::budget::millis")]
    pub timeout: Duration,
}

fn hang_check_operation<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Operation, D::Error> {
    Operation::deserialize_read(d, "a hang check")
}

impl HangCheck {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1_000);

    fn default_operation() -> Operation {
        Operation::Ping
    }

    fn default_timeout() -> Duration {
        Self::DEFAULT_TIMEOUT
    }

    /// The check's call to `operator` at `now`.
    pub fn call(&self, operator: &OperatorId, now: DateTime<Utc>) -> OperatorCall {
        let spec = ProbeSpec {
            operation: self.operation,
            params: self.params.clone(),
        };
        let mut call = spec.call(operator, now, Budget::with_timeout(self.timeout));
        call.request_id = format!("hang-check-{operator}-{}", now.timestamp_millis());
        call
    }
}

impl Default for HangCheck {
    fn default() -> Self {
        Self {
            operation: Operation::Ping,
            params: BTreeMap::new(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// How an operator's lane runs, from `OPERATOR_SETTINGS`:
///
/// ```json
/// {"operators": {"nordic": {"lane": {"parallelization": 10}}}}
/// ```
///
/// `parallelization`: batches of the lane's stream that run at once, its
/// mapping's `ParallelizationFactor` (1 to 10, Lambda's range). Unset, the
/// lane keeps the template's `LaneParallelization`. The circuit switch sets
/// it on the mapping (docs/capacity.md, "A lane per operator's traffic"),
/// only within the real consumer's reservation; a lane shared by several
/// operators runs at the most any of them asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaneSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelization: Option<Parallelization>,
}

/// A lane mapping's `ParallelizationFactor`: 1 to 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Parallelization(u8);

impl Parallelization {
    /// Lambda's most: batches of one shard run at once.
    pub const MAX: u8 = 10;

    pub fn new(factor: u64) -> Result<Self, String> {
        match u8::try_from(factor) {
            Ok(f @ 1..=Self::MAX) => Ok(Self(f)),
            _ => Err(format!(
                "a lane's parallelization is 1 to {} (a mapping's ParallelizationFactor), not {factor}",
                Self::MAX
            )),
        }
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

impl TryFrom<u64> for Parallelization {
    type Error = String;

    fn try_from(factor: u64) -> Result<Self, String> {
        Self::new(factor)
    }
}

impl From<Parallelization> for u64 {
    fn from(p: Parallelization) -> u64 {
        u64::from(p.0)
    }
}

impl std::fmt::Display for Parallelization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Settings of every operator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub default: OperatorSettings,
    pub operators: BTreeMap<OperatorId, OperatorSettings>,
}

#[derive(Debug, thiserror::Error)]
#[error("OPERATOR_SETTINGS is not valid settings JSON: {0}")]
pub struct SettingsError(#[from] pub serde_json::Error);

impl Settings {
    /// Parse settings JSON; an empty string means all defaults.
    pub fn from_json(json: &str) -> Result<Self, SettingsError> {
        if json.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut value: serde_json::Value = serde_json::from_str(json)?;
        if let Some(settings) = value.as_object_mut()
            && let Some(default) = settings.get("default").cloned()
            && let Some(serde_json::Value::Object(operators)) = settings.get_mut("operators")
        {
            for block in operators.values_mut() {
                let mut merged = default.clone();
                inherit(&mut merged, std::mem::take(block), true);
                *block = merged;
            }
        }
        Ok(serde_json::from_value(value)?)
    }

    pub fn for_operator(&self, operator: &OperatorId) -> &OperatorSettings {
        self.operators.get(operator).unwrap_or(&self.default)
    }
}

/// The fields of an operator's block taken whole, never merged with
/// `default`'s: a call (its operation and parameters go together).
const TAKEN_WHOLE: [&str; 2] = ["probe", "hang_check"];

/// `own` laid over `base` (both JSON): a field `own` gives wins, `null`
/// included; an object of fields (`budgets`, `budgets.search`, `window`, …)
/// is laid over field by field, except the calls of [`TAKEN_WHOLE`] at the
/// top of a block.
fn inherit(base: &mut serde_json::Value, own: serde_json::Value, top: bool) {
    match (base, own) {
        (serde_json::Value::Object(base), serde_json::Value::Object(own)) => {
            for (key, value) in own {
                match base.get_mut(&key) {
                    Some(slot) if !(top && TAKEN_WHOLE.contains(&key.as_str())) => {
                        inherit(slot, value, false)
                    }
                    _ => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (slot, own) => *slot = own,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::operator::Operation;

    #[test]
    fn empty_means_defaults() {
        let s = Settings::from_json("").unwrap();
        let op = OperatorId::new("any").unwrap();
        assert_eq!(
            s.for_operator(&op)
                .budgets
                .for_operation(Operation::Search)
                .timeout,
            Duration::from_secs(3)
        );
    }

    #[test]
    fn per_operator_overrides_inherit_default_field_by_field() {
        let s = Settings::from_json(
            r#"{"default": {"breaker": {"open_base": 20000},
                            "budgets": {"search": {"timeout": 3000, "slow_after": 2400, "queue": 500}},
                            "probe": {"operation": "search", "params": {"from": "HEL"}}},
                "operators": {"nordic": {"budgets": {"search": {"timeout": 2500, "slow_after": 2000}},
                                         "breaker": {"open_max": 120000},
                                         "probe": {"operation": "ping"}}}}"#,
        )
        .unwrap();
        let nordic = s.for_operator(&OperatorId::new("nordic").unwrap());
        assert_eq!(nordic.budgets.search.timeout, Duration::from_millis(2500));
        // From `default`, within the same budget.
        assert_eq!(nordic.budgets.search.queue, Duration::from_millis(500));
        // Built in where neither says.
        assert_eq!(nordic.budgets.price.timeout, Duration::from_millis(2750));
        // `default`'s beside the operator's own, in one block.
        assert_eq!(nordic.breaker.open_base, Duration::from_secs(20));
        assert_eq!(nordic.breaker.open_max, Duration::from_secs(120));
        // A call is taken whole: no `from` left over from `default`'s probe.
        let probe = nordic.probe.clone().unwrap();
        assert_eq!(probe.operation, Operation::Ping);
        assert!(probe.params.is_empty(), "{probe:?}");
        let other = s.for_operator(&OperatorId::new("baltic").unwrap());
        assert_eq!(other.breaker.open_base, Duration::from_secs(20));
        assert_eq!(other.breaker.open_max, Duration::from_secs(600));
        // A block that is not an object is an error, not a default.
        assert!(Settings::from_json(r#"{"operators": {"nordic": 3}}"#).is_err());
    }

    #[test]
    fn a_lane_parallelization_is_within_lambdas_range() {
        let s = Settings::from_json(
            r#"{"default": {"lane": {"parallelization": 4}},
                "operators": {"nordic": {"lane": {"parallelization": 10}}, "baltic": {}}}"#,
        )
        .unwrap();
        let of = |o: &str| {
            s.for_operator(&OperatorId::new(o).unwrap())
                .lane
                .parallelization
                .map(Parallelization::get)
        };
        assert_eq!(of("nordic"), Some(10));
        assert_eq!(of("baltic"), Some(4), "from default");
        assert_eq!(of("other"), Some(4));
        assert_eq!(
            Settings::from_json("{}")
                .unwrap()
                .default
                .lane
                .parallelization,
            None,
            "unset: the template's"
        );
        for bad in ["0", "11", "-1", "2.5", "\"4\""] {
            let json = format!(r#"{{"default": {{"lane": {{"parallelization": {bad}}}}}}}"#);
            let e = Settings::from_json(&json).unwrap_err().to_string();
            assert!(!e.is_empty(), "{bad} refused");
        }
        let e = Settings::from_json(r#"{"default": {"lane": {"parallelization": 12}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 10"), "{e}");
        assert!(
            Settings::from_json(r#"{"default": {"lane": {"factor": 4}}}"#).is_err(),
            "an unknown field is refused"
        );
    }

    #[test]
    fn a_hang_check_defaults_to_a_one_second_ping() {
        let s = Settings::from_json(
            r#"{"default": {"hang_check": null},
                "operators": {"nordic": {"hang_check": {}},
                              "baltic": {"hang_check": {"operation": "search", "timeout": 500,
                                                        "params": {"date": "today+7"}}},
                              "viking": {"ids": "upper"}}}"#,
        )
        .unwrap();
        let check = |op: &str| {
            s.for_operator(&OperatorId::new(op).unwrap())
                .hang_check
                .clone()
        };
        assert_eq!(check("nordic"), Some(HangCheck::default()));
        assert_eq!(check("viking"), None, "turned off in `default`");
        assert_eq!(check("other"), None, "turned off in `default`");
        let built_in =
            Settings::from_json(r#"{"operators": {"viking": {"ids": "upper"}}}"#).unwrap();
        assert_eq!(
            built_in
                .for_operator(&OperatorId::new("viking").unwrap())
                .hang_check,
            Some(HangCheck::default())
        );
        let empty = Settings::from_json("").unwrap();
        assert_eq!(empty.default.hang_check, Some(HangCheck::default()));
        // `null` survives a round trip: it is written, not left out.
        let round: Settings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(round, s);
        let baltic = check("baltic").unwrap();
        let now = DateTime::from_timestamp(1_796_033_700, 0).unwrap();
        let call = baltic.call(&OperatorId::new("baltic").unwrap(), now);
        assert_eq!(call.operation, Operation::Search);
        assert_eq!(call.budget.timeout, Duration::from_millis(500));
        assert_eq!(call.params["date"], "2026-12-07");
        assert!(call.request_id.starts_with("hang-check-baltic-"));
        assert!(Settings::from_json(r#"{"default": {"hang_check": {"budget": 1}}}"#).is_err());
    }

    #[test]
    fn a_booking_has_its_own_budget_and_is_never_a_probe_or_a_hang_check() {
        let s = Settings::from_json(
            r#"{"operators": {"nordic": {"budgets": {"book": {"timeout": 15000, "slow_after": 12000}}}}}"#,
        )
        .unwrap();
        let nordic = s.for_operator(&OperatorId::new("nordic").unwrap());
        let book = nordic.budgets.for_operation(Operation::Book);
        assert_eq!(book.timeout, Duration::from_secs(15));
        assert_eq!(
            s.default.budgets.for_operation(Operation::Book).timeout,
            Duration::from_secs(8)
        );
        for (json, what) in [
            (
                r#"{"default": {"probe": {"operation": "book"}}}"#,
                "a probe",
            ),
            (
                r#"{"operators": {"nordic": {"hang_check": {"operation": "book"}}}}"#,
                "a hang check",
            ),
        ] {
            let e = Settings::from_json(json).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "book changes what the operator holds: {what} only reads"
                )),
                "{json}: {e}"
            );
        }
    }

    #[test]
    fn typos_are_errors() {
        assert!(Settings::from_json(r#"{"operatorz": {}}"#).is_err());
        assert!(Settings::from_json(r#"{"operators": {"BAD ID": {}}}"#).is_err());
    }

    #[test]
    fn ids_are_exact_unless_an_operator_says_otherwise() {
        let s = Settings::from_json(
            r#"{"default": {"ids": "upper"},
                "operators": {"nordic": {"ids": "lower"}, "baltic": {"cache": {"recent": 1000}}}}"#,
        )
        .unwrap();
        let ids = |op: &str| s.for_operator(&OperatorId::new(op).unwrap()).ids;
        assert_eq!(ids("nordic"), IdCase::Lower);
        assert_eq!(ids("baltic"), IdCase::Upper, "from `default`");
        assert_eq!(ids("viking"), IdCase::Upper, "the `default` block");
        assert_eq!(OperatorSettings::default().ids, IdCase::Exact);
        let empty = Settings::from_json("").unwrap();
        assert_eq!(
            empty.for_operator(&OperatorId::new("x").unwrap()).ids,
            IdCase::Exact
        );
        let exact = Settings::from_json(r#"{"default": {"ids": "exact"}}"#).unwrap();
        assert_eq!(exact.default.ids, IdCase::Exact);
        for bad in [r#""Upper""#, r#""upper_case""#, "true", r#""""#] {
            let json = format!(r#"{{"default": {{"ids": {bad}}}}}"#);
            assert!(Settings::from_json(&json).is_err(), "{json}");
        }
        let round: Settings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(round, s);
    }

    #[test]
    fn routes_are_whatever_the_operator_sails_unless_listed() {
        let s = Settings::from_json(
            r#"{"default": {"routes": ["HEL-TLL"]},
                "operators": {"nordic": {"routes": ["HEL-STO", "STO-HEL"]}, "open": {"routes": null}}}"#,
        )
        .unwrap();
        let sails = |op: &str, from, to| {
            s.for_operator(&OperatorId::new(op).unwrap())
                .sails(from, to)
        };
        assert!(sails("nordic", "HEL", "STO"));
        assert!(sails("nordic", "STO", "HEL"));
        assert!(
            !sails("nordic", "HEL", "TLL"),
            "an operator's list replaces default's"
        );
        assert!(!sails("nordic", "STO", "TLL"));
        assert!(sails("viking", "HEL", "TLL"), "the `default` block");
        assert!(!sails("viking", "TLL", "HEL"), "one way");
        assert!(sails("open", "ABC", "XYZ"), "null: every route");
        assert!(Settings::default().default.sails("ABC", "XYZ"));
        for bad in [r#"["HEL"]"#, r#"["HEL-HEL"]"#, r#"["hel-tll"]"#] {
            let json = format!(r#"{{"default": {{"routes": {bad}}}}}"#);
            let e = Settings::from_json(&json).unwrap_err().to_string();
            assert!(
                e.contains("invalid route") && e.contains("FROM-TO"),
                "{bad}: {e}"
            );
        }
        assert!(Settings::from_json(r#"{"default": {"routes": "HEL-TLL"}}"#).is_err());
    }

    #[test]
    fn ids_are_normalised_as_the_operator_compares_them() {
        let id = "Hel-tll-20261224-0615b";
        assert_eq!(IdCase::Upper.normalise(id), "HEL-TLL-20261224-0615B");
        assert_eq!(IdCase::Lower.normalise(id), "hel-tll-20261224-0615b");
        assert_eq!(IdCase::Exact.normalise(id), id);
        for case in [IdCase::Upper, IdCase::Lower, IdCase::Exact] {
            let once = case.normalise(id);
            assert_eq!(case.normalise(&once), once, "{case:?} is idempotent");
            assert!(case.same(id, &once), "{case:?}");
        }
        assert!(IdCase::Upper.same("HEL-TLL-0615", "hel-TLL-0615"));
        assert!(IdCase::Lower.same("HEL-TLL-0615", "hel-tll-0615"));
        assert!(!IdCase::Exact.same("HEL-TLL-0615", "hel-tll-0615"));
        assert!(!IdCase::Upper.same("HEL-TLL-0615", "HEL-TLL-0616"));
    }
}
