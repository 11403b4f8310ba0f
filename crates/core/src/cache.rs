//! The answer cache: one entry per question (operator, operation, parameters),
//! holding the newest good answer the operator gave and, beside it, the
//! newest refusal.
//!
//! The good answer is both caches of the design, told apart by age only:
//!
//! * **recent** (default 5 minutes): good enough to answer without asking the
//!   operator at all (`source: fresh`);
//! * **last good** (default 7 days): what is shown when the operator cannot be
//!   asked or did not answer (`source: last_good`), with its age.
//!
//! A refusal (the operator's 4xx to the question: 404, no such sailing) is the
//! **negative** cache: for [`CachePolicy::negative`] (default a minute) after
//! it, and while it is newer than the good answer, askers get the refusal
//! without another call. A refusal is kept beside the good answer, never
//! instead of it: an operator that starts refusing every question (a broken
//! deploy, a revoked contract) cannot erase what it answered before, and the
//! last good answer is still there to show once its breaker opens. A good
//! answer given after a refusal clears it.
//!
//! Entries are kept by a [`CacheStore`](crate::ports::CacheStore), one of
//! the [`ports`](crate::ports).
//!
//! The real consumer refreshes an entry after every answered call, so a late
//! answer that nobody waited for still keeps the cache warm. A write never
//! replaces a newer answer (or a newer refusal) with an older one.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::operator::{Operation, OperatorId};

/// The key of one question: `operator#operation#k1=v1&k2=v2`, parameters in
/// key order, so the same question always has the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CacheKey(String);

impl CacheKey {
    pub fn new(
        operator: &OperatorId,
        operation: Operation,
        params: &BTreeMap<String, String>,
    ) -> Self {
        let params: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Self(format!("{operator}#{operation}#{}", params.join("&")))
    }

    /// A key as stored. Keys are only ever made by [`CacheKey::new`]; this
    /// reads one back.
    pub fn from_stored(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An operator's good answer, as cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedAnswer {
    pub key: CacheKey,
    pub operator: OperatorId,
    pub operation: Operation,
    /// The operator's answer, as JSON text.
    pub body: String,
    /// When the operator gave this answer.
    pub as_of: DateTime<Utc>,
}

/// An operator's refusal of a question, as cached: a negative answer,
/// served for [`CachePolicy::negative`] without asking again, never as a
/// last good answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedRefusal {
    pub key: CacheKey,
    pub operator: OperatorId,
    pub operation: Operation,
    /// The operator's 4xx (404: no such sailing).
    pub status: u16,
    /// What the refusal said, as the request's outcome has it.
    pub detail: String,
    /// When the operator refused.
    pub at: DateTime<Utc>,
}

/// Everything the cache holds for one question: the newest good answer and
/// the newest refusal, each kept on its own so that neither erases the
/// other. A store never returns an entry with neither.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    pub answer: Option<CachedAnswer>,
    pub refusal: Option<CachedRefusal>,
}

impl CacheEntry {
    /// An entry holding only `answer`.
    pub fn answered(answer: CachedAnswer) -> Self {
        Self {
            answer: Some(answer),
            refusal: None,
        }
    }

    /// An entry holding only `refusal`.
    pub fn refused(refusal: CachedRefusal) -> Self {
        Self {
            answer: None,
            refusal: Some(refusal),
        }
    }

    /// The refusal that still stands: one given after the good answer (or
    /// with no good answer at all). A refusal older than the good answer
    /// was taken back by it.
    pub fn standing_refusal(&self) -> Option<&CachedRefusal> {
        self.refusal
            .as_ref()
            .filter(|r| self.answer.as_ref().is_none_or(|a| a.as_of < r.at))
    }

    /// The negative answer at `now`: the standing refusal while it is at
    /// most [`CachePolicy::negative`] old (one stamped a little ahead of our
    /// clock counts as brand new).
    pub fn negative(&self, policy: &CachePolicy, now: DateTime<Utc>) -> Option<&CachedRefusal> {
        self.standing_refusal()
            .filter(|r| (now - r.at).to_std().unwrap_or_default() <= policy.negative)
    }

    /// The good answer to give without asking the operator at `now`: a
    /// recent one the operator has not refused since. Once it refused the
    /// question, the operator is asked again when the negative answer runs
    /// out, not answered for from before the refusal.
    pub fn fresh(&self, policy: &CachePolicy, now: DateTime<Utc>) -> Option<&CachedAnswer> {
        if self.standing_refusal().is_some() {
            return None;
        }
        self.answer
            .as_ref()
            .filter(|a| policy.freshness(a.as_of, now) == Freshness::Recent)
    }

    /// The answer a re-price at `now` takes as the operator's price: one
    /// at most `policy.reprice` old that the operator has not refused since.
    pub fn repriced(&self, policy: &CachePolicy, now: DateTime<Utc>) -> Option<&CachedAnswer> {
        if self.standing_refusal().is_some() {
            return None;
        }
        self.answer.as_ref().filter(|a| {
            policy.freshness(a.as_of, now) != Freshness::Expired
                && (now - a.as_of).to_std().unwrap_or(Duration::ZERO) <= policy.reprice
        })
    }

    /// The last good answer at `now`, whatever refusal came after it: what
    /// is shown when the operator cannot be asked or did not answer.
    pub fn last_good(&self, policy: &CachePolicy, now: DateTime<Utc>) -> Option<&CachedAnswer> {
        self.answer
            .as_ref()
            .filter(|a| policy.freshness(a.as_of, now) != Freshness::Expired)
    }

    /// The entry with `answer` written into it, unless it holds a good
    /// answer as new or newer. The refusals it outdates (given at or before
    /// it) are cleared; a newer one stays.
    pub fn with_answer(&self, answer: &CachedAnswer) -> Option<CacheEntry> {
        if self
            .answer
            .as_ref()
            .is_some_and(|a| a.as_of >= answer.as_of)
        {
            return None;
        }
        Some(CacheEntry {
            answer: Some(answer.clone()),
            refusal: self.refusal.clone().filter(|r| r.at > answer.as_of),
        })
    }

    /// The entry with `refusal` written into it, unless it holds a refusal
    /// or a good answer as new or newer. The good answer always stays.
    pub fn with_refusal(&self, refusal: &CachedRefusal) -> Option<CacheEntry> {
        let newer_refusal = self.refusal.as_ref().is_some_and(|r| r.at >= refusal.at);
        let newer_answer = self.answer.as_ref().is_some_and(|a| a.as_of >= refusal.at);
        if newer_refusal || newer_answer {
            return None;
        }
        Some(CacheEntry {
            answer: self.answer.clone(),
            refusal: Some(refusal.clone()),
        })
    }
}

/// How old a cached answer may be, per use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CachePolicy {
    /// Answer from the cache without asking the operator while the entry is
    /// at most this old.
    #[serde(with = "crate::budget::millis")]
    pub recent: Duration,
    /// Show the entry as the last good answer while it is at most this old;
    /// the store may forget it after that.
    #[serde(with = "crate::budget::millis")]
    pub last_good: Duration,
    /// Answer an operator's refusal (a 4xx) from the cache for this long:
    /// a question nobody can answer costs one operator call a minute, not
    /// one per asker.
    #[serde(with = "crate::budget::millis")]
    pub negative: Duration,
    /// A re-price (the cart's payment) takes an operator answer at most
    /// this old as the operator's price instead of asking again: a cart
    /// confirmed in a loop, or a sailing many carts pay for at once, costs
    /// the operator one call per question in this time. 0 asks every time.
    #[serde(with = "crate::budget::millis")]
    pub reprice: Duration,
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            recent: Duration::from_secs(5 * 60),
            last_good: Duration::from_secs(7 * 24 * 3600),
            negative: Duration::from_secs(60),
            reprice: Duration::from_secs(10),
        }
    }
}

/// Where an answer came from. These names are part of the HTTP replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The recent cache.
    Fresh,
    /// The operator, through the gateway, just now.
    Live,
    /// The last good answer, because the operator could not answer.
    LastGood,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Fresh => "fresh",
            Source::Live => "live",
            Source::LastGood => "last_good",
        }
    }
}

/// How far ahead of our clock an answer may be stamped (clock skew between
/// functions) and still count; anything further is not trusted.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// What an entry is good for at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Within the recent window: no need to ask the operator.
    Recent,
    /// Too old to skip the operator, young enough to show when it fails.
    LastGood,
    /// Too old for anything.
    Expired,
}

impl CachePolicy {
    pub fn freshness(&self, as_of: DateTime<Utc>, now: DateTime<Utc>) -> Freshness {
        // An answer stamped a little in the future (clock skew between
        // functions) counts as brand new; one stamped far in the future is
        // not trusted at all, or it would stay "fresh" until then.
        if let Ok(ahead) = (as_of - now).to_std()
            && ahead > MAX_CLOCK_SKEW
        {
            return Freshness::Expired;
        }
        let age = (now - as_of).to_std().unwrap_or(Duration::ZERO);
        if age <= self.recent {
            Freshness::Recent
        } else if age <= self.last_good {
            Freshness::LastGood
        } else {
            Freshness::Expired
        }
    }

    /// When a store may forget an answer given at `as_of` (DynamoDB TTL).
    pub fn expires_at(&self, as_of: DateTime<Utc>) -> DateTime<Utc> {
        TimeDelta::from_std(self.last_good)
            .ok()
            .and_then(|d| as_of.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// Whole seconds from `as_of` to `now`, never negative.
pub fn age_s(as_of: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    u64::try_from((now - as_of).num_seconds()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    #[test]
    fn keys_do_not_depend_on_parameter_order() {
        let op = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let a = BTreeMap::from([
            ("to".to_owned(), "TLL".to_owned()),
            ("from".to_owned(), "HEL".to_owned()),
        ]);
        let mut b = BTreeMap::new();
        b.insert("from".to_owned(), "HEL".to_owned());
        b.insert("to".to_owned(), "TLL".to_owned());
        let key = CacheKey::new(&op, Operation::Search, &a);
        assert_eq!(key, CacheKey::new(&op, Operation::Search, &b));
        assert_eq!(key.as_str(), "nordic#search#from=HEL&to=TLL");
        assert_ne!(key, CacheKey::new(&op, Operation::Price, &a));
    }

    #[test]
    fn freshness_follows_the_policy() {
        let policy = CachePolicy::default();
        assert_eq!(policy.freshness(at(0), at(300)), Freshness::Recent);
        assert_eq!(policy.freshness(at(0), at(301)), Freshness::LastGood);
        assert_eq!(policy.freshness(at(0), at(7 * 86_400)), Freshness::LastGood);
        assert_eq!(
            policy.freshness(at(0), at(7 * 86_400 + 1)),
            Freshness::Expired
        );
        assert_eq!(policy.freshness(at(10), at(0)), Freshness::Recent);
        assert_eq!(policy.freshness(at(61), at(0)), Freshness::Expired);
        assert_eq!(policy.expires_at(at(0)), at(7 * 86_400));
        assert_eq!(age_s(at(0), at(90)), 90);
        assert_eq!(age_s(at(90), at(0)), 0);
    }

    fn good(as_of: DateTime<Utc>) -> CachedAnswer {
        let operator = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        CachedAnswer {
            key: CacheKey::new(&operator, Operation::Search, &BTreeMap::new()),
            operator,
            operation: Operation::Search,
            body: format!(r#"{{"sailings":[],"at":{}}}"#, as_of.timestamp()),
            as_of,
        }
    }

    fn no(status: u16, at: DateTime<Utc>) -> CachedRefusal {
        let answer = good(at);
        CachedRefusal {
            key: answer.key,
            operator: answer.operator,
            operation: answer.operation,
            status,
            detail: format!("operator answered {status}"),
            at,
        }
    }

    #[test]
    fn a_refusal_is_kept_beside_the_good_answer_never_instead_of_it() {
        let policy = CachePolicy::default();
        let entry = CacheEntry::answered(good(at(0)));
        let refused = entry
            .with_refusal(&no(404, at(10)))
            .unwrap_or_else(|| panic!("a newer refusal is written"));
        // The good answer is still there, untouched.
        assert_eq!(refused.answer, Some(good(at(0))));
        assert_eq!(refused.refusal, Some(no(404, at(10))));
        // Within a minute of the refusal: the negative answer, no fresh one.
        assert_eq!(refused.negative(&policy, at(70)), Some(&no(404, at(10))));
        assert_eq!(refused.fresh(&policy, at(20)), None);
        // After it: not fresh either (the operator is asked again), but the
        // good answer is still the last good one, for a week.
        assert_eq!(refused.negative(&policy, at(71)), None);
        assert_eq!(refused.fresh(&policy, at(71)), None);
        assert_eq!(refused.last_good(&policy, at(20)), Some(&good(at(0))));
        assert_eq!(
            refused.last_good(&policy, at(7 * 86_400)),
            Some(&good(at(0)))
        );
        assert_eq!(refused.last_good(&policy, at(7 * 86_400 + 1)), None);
    }

    #[test]
    fn only_a_refusal_works_as_the_negative_cache() {
        let policy = CachePolicy::default();
        let entry = CacheEntry::refused(no(410, at(0)));
        assert_eq!(entry.negative(&policy, at(60)).map(|r| r.status), Some(410));
        assert_eq!(entry.negative(&policy, at(61)), None);
        assert_eq!(entry.fresh(&policy, at(1)), None);
        assert_eq!(entry.last_good(&policy, at(1)), None);
        // A refusal stamped a little ahead of our clock counts as new.
        assert!(entry.negative(&policy, at(-5)).is_some());
    }

    #[test]
    fn a_newer_good_answer_clears_older_refusals_and_keeps_newer_ones() {
        let policy = CachePolicy::default();
        let refused = CacheEntry::refused(no(404, at(10)));
        let answered = refused
            .with_answer(&good(at(20)))
            .unwrap_or_else(|| panic!("the first good answer is written"));
        assert_eq!(answered.refusal, None);
        assert_eq!(answered.negative(&policy, at(21)), None);
        assert_eq!(answered.fresh(&policy, at(21)), Some(&good(at(20))));
        // A late good answer given before the refusal: stored, the refusal
        // still stands.
        let late = refused
            .with_answer(&good(at(5)))
            .unwrap_or_else(|| panic!("the first good answer is written"));
        assert_eq!(late.refusal, Some(no(404, at(10))));
        assert_eq!(late.negative(&policy, at(30)).map(|r| r.status), Some(404));
        assert_eq!(late.last_good(&policy, at(30)), Some(&good(at(5))));
        // A refusal older than the good answer was taken back by it.
        let stale = CacheEntry {
            answer: Some(good(at(20))),
            refusal: Some(no(404, at(10))),
        };
        assert_eq!(stale.standing_refusal(), None);
        assert_eq!(stale.fresh(&policy, at(21)), Some(&good(at(20))));
    }

    #[test]
    fn older_writes_never_replace_newer_ones() {
        let entry = CacheEntry {
            answer: Some(good(at(10))),
            refusal: Some(no(404, at(20))),
        };
        // Answers as old or older than the stored one.
        assert_eq!(entry.with_answer(&good(at(10))), None);
        assert_eq!(entry.with_answer(&good(at(9))), None);
        // Refusals as old or older than the stored refusal, or than the
        // good answer.
        assert_eq!(entry.with_refusal(&no(400, at(20))), None);
        assert_eq!(entry.with_refusal(&no(400, at(15))), None);
        let answered = CacheEntry::answered(good(at(10)));
        assert_eq!(answered.with_refusal(&no(400, at(10))), None);
        assert_eq!(answered.with_refusal(&no(400, at(5))), None);
        // A newer refusal replaces the older one, and keeps the answer.
        let newer = entry
            .with_refusal(&no(400, at(30)))
            .unwrap_or_else(|| panic!("a newer refusal is written"));
        assert_eq!(newer.refusal.map(|r| r.status), Some(400));
        assert_eq!(newer.answer, Some(good(at(10))));
    }
}
