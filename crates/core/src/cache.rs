//! The answer cache: one entry per question (operator, operation, parameters),
//! holding the newest answer the operator gave and when it gave it.
//!
//! The same entry is both caches of the design, told apart by age only:
//!
//! * **recent** (default 5 minutes): good enough to answer without asking the
//!   operator at all (`source: fresh`);
//! * **last good** (default 7 days): what is shown when the operator cannot be
//!   asked or did not answer (`source: last_good`), with its age.
//!
//! The real consumer refreshes an entry after every answered call, so a late
//! answer that nobody waited for still keeps the cache warm. A write never
//! replaces a newer answer with an older one.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::operator::{Operation, OperatorId};
use crate::ports::StoreError;

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

/// An operator answer, as cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedAnswer {
    pub key: CacheKey,
    pub operator: OperatorId,
    pub operation: Operation,
    /// The operator's answer, as JSON text.
    pub body: String,
    /// When the operator gave this answer.
    pub as_of: DateTime<Utc>,
    /// A negative answer: the operator refused the question with this 4xx
    /// (404: no such sailing). Served for [`CachePolicy::negative`] without
    /// asking again, never as a last good answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<u16>,
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
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            recent: Duration::from_secs(5 * 60),
            last_good: Duration::from_secs(7 * 24 * 3600),
            negative: Duration::from_secs(60),
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

/// What happened to a cache write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheWrite {
    Written,
    /// The stored answer is as new or newer; it was kept.
    NewerKept,
}

/// The answer cache.
#[async_trait]
pub trait CacheStore: Send + Sync {
    /// The newest answer to `key`, however old (callers judge its age with
    /// [`CachePolicy::freshness`]). An eventually consistent read is enough.
    async fn get(&self, key: &CacheKey) -> Result<Option<CachedAnswer>, StoreError>;

    /// Store `answer` unless the stored one is as new or newer. `expires_at`
    /// is when the store may forget it.
    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError>;
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
}
