//! The answer cache's port: where [`crate::cache`]'s entries are kept.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use crate::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};

/// What happened to a cache write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheWrite {
    Written,
    /// The stored answer (or refusal) is as new or newer; it was kept.
    NewerKept,
}

/// The answer cache.
#[async_trait]
pub trait CacheStore: Send + Sync {
    /// What is cached for `key`, however old (callers judge its age with
    /// [`CacheEntry::negative`], [`CacheEntry::fresh`] and
    /// [`CacheEntry::last_good`]). An eventually consistent read is enough.
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError>;

    /// Store the good answer `answer` unless the stored one is as new or
    /// newer ([`CacheEntry::with_answer`]): a refusal given at or before it
    /// is cleared, a newer one kept. `expires_at` is when the store may
    /// forget the entry.
    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError>;

    /// Store `refusal` beside the good answer, never instead of it, unless
    /// the stored refusal or good answer is as new or newer
    /// ([`CacheEntry::with_refusal`]). `expires_at` is when the store may
    /// forget an entry that has no good answer to keep it.
    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError>;
}
