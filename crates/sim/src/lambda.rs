//! Lambda around the functions in the AWS world: reserved concurrency as a
//! cap, warm execution environments and cold starts ([`FunctionPool`]),
//! what an invoke costs before a handler runs ([`invoke_overhead`]), the
//! pools of the suite's functions ([`Pools`]) and search and cart behind the
//! HTTP API ([`HttpFunction`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::aws::{AwsRuntime, TEMPLATE};
use crate::charged::ControlPlaneCalls;

/// A function's execution environments: reserved concurrency caps how many
/// run at once, and an environment beyond the most that ever ran is a cold
/// start (the simulations keep environments warm once started).
#[derive(Debug)]
pub struct FunctionPool {
    slots: Option<Arc<Semaphore>>,
    busy: AtomicUsize,
    warm: AtomicUsize,
    cold_starts: AtomicU64,
    throttles: AtomicU64,
}

/// One running invocation's environment; dropping it frees the slot.
#[derive(Debug)]
pub struct Environment {
    pool: Arc<FunctionPool>,
    _slot: Option<OwnedSemaphorePermit>,
    cold: bool,
}

impl Environment {
    /// Whether this invocation started a new environment.
    pub fn cold(&self) -> bool {
        self.cold
    }
}

impl Drop for Environment {
    fn drop(&mut self) {
        self.pool.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A pool's counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolCounts {
    pub cold_starts: u64,
    /// Invocations refused at the cap (the poller backs off and tries again).
    pub throttles: u64,
    /// The most environments that ran at once.
    pub peak: usize,
}

impl FunctionPool {
    /// A pool capped at `reserved` (`None`: unreserved).
    pub fn new(reserved: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            slots: reserved.map(|n| Arc::new(Semaphore::new(n))),
            busy: AtomicUsize::new(0),
            warm: AtomicUsize::new(0),
            cold_starts: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
        })
    }

    fn started(self: &Arc<Self>, slot: Option<OwnedSemaphorePermit>) -> Environment {
        let busy = self.busy.fetch_add(1, Ordering::Relaxed) + 1;
        let cold = self.warm.fetch_max(busy, Ordering::Relaxed) < busy;
        if cold {
            self.cold_starts.fetch_add(1, Ordering::Relaxed);
        }
        Environment {
            pool: self.clone(),
            _slot: slot,
            cold,
        }
    }

    /// An environment now, or `None` when the cap is reached (a stream
    /// poller's invoke is throttled and retried on its next poll).
    pub fn try_start(self: &Arc<Self>) -> Option<Environment> {
        let slot = match &self.slots {
            Some(slots) => match slots.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    self.throttles.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
            None => None,
        };
        Some(self.started(slot))
    }

    /// An environment once one is free (an event or queue invoke that is
    /// throttled is retried by its service until it runs).
    pub async fn start(self: &Arc<Self>) -> Environment {
        let slot = match &self.slots {
            Some(slots) => {
                if slots.available_permits() == 0 {
                    self.throttles.fetch_add(1, Ordering::Relaxed);
                }
                slots.clone().acquire_owned().await.ok()
            }
            None => None,
        };
        self.started(slot)
    }

    pub fn counts(&self) -> PoolCounts {
        PoolCounts {
            cold_starts: self.cold_starts.load(Ordering::Relaxed),
            throttles: self.throttles.load(Ordering::Relaxed),
            peak: self.warm.load(Ordering::Relaxed),
        }
    }
}

/// What Lambda charges before a handler runs: the invoke, and a cold start
/// when the environment is new.
pub async fn invoke_overhead(aws: &AwsRuntime, environment: &Environment) {
    aws.charge(|m| m.lambda_invoke).await;
    if environment.cold() {
        aws.charge(|m| m.cold_start).await;
    }
}

/// The functions' execution environments in the AWS world: the reserved
/// concurrency of the template caps the consumers and the switch; search
/// and cart are unreserved here (their caps, 300 and 100, are not reached
/// at the loads simulated: `peak` says how many ran at once).
#[derive(Debug)]
pub(crate) struct Pools {
    pub(crate) real: Arc<FunctionPool>,
    pub(crate) fallback: Arc<FunctionPool>,
    pub(crate) switch: Arc<FunctionPool>,
    pub(crate) http: Arc<FunctionPool>,
}

impl Pools {
    /// The template's reservations in the AWS world (`charged`), the real
    /// consumer's at `real_consumer` (its `RealConsumerConcurrency`);
    /// nothing capped in the ideal world.
    pub(crate) fn new(charged: bool, real_consumer: usize) -> Self {
        let capped = |reserved: usize| charged.then_some(reserved);
        Self {
            real: FunctionPool::new(capped(real_consumer)),
            fallback: FunctionPool::new(capped(TEMPLATE.fallback_concurrency)),
            switch: FunctionPool::new(capped(TEMPLATE.switch_concurrency)),
            http: FunctionPool::new(None),
        }
    }

    pub(crate) fn counts(&self) -> LambdaCounts {
        LambdaCounts {
            real_consumer: self.real.counts(),
            fallback_consumer: self.fallback.counts(),
            circuit_switch: self.switch.counts(),
            http: self.http.counts(),
        }
    }
}

/// Cold starts, throttles and peaks of every function (all zero in the
/// ideal world).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LambdaCounts {
    pub real_consumer: PoolCounts,
    pub fallback_consumer: PoolCounts,
    pub circuit_switch: PoolCounts,
    /// Search and cart, behind the HTTP API.
    pub http: PoolCounts,
}

/// What the AWS world charged a run, beside its store calls.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AwsCounts {
    pub lambda: LambdaCounts,
    /// Get/UpdateEventSourceMapping calls, and the throttles among them.
    pub control_plane: ControlPlaneCalls,
}

/// A search or cart invocation through the HTTP API: what API Gateway and
/// Lambda charge before the handler runs. Hold the guard while it runs.
#[derive(Clone)]
pub struct HttpFunction {
    pub(crate) aws: Option<Arc<AwsRuntime>>,
    pub(crate) pool: Arc<FunctionPool>,
}

impl HttpFunction {
    /// Wait what the API and Lambda charge; the environment (dropped when
    /// the handler is done).
    async fn enter(&self) -> Option<Environment> {
        let aws = self.aws.as_ref()?;
        let environment = self.pool.start().await;
        aws.charge(|m| m.http_api).await;
        invoke_overhead(aws, &environment).await;
        Some(environment)
    }

    /// Run `handler` as an invocation through the HTTP API.
    pub async fn call<F: std::future::Future>(&self, handler: F) -> F::Output {
        let _environment = self.enter().await;
        handler.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_capped_pool_refuses_past_its_reservation_and_counts_cold_starts() {
        let pool = FunctionPool::new(Some(2));
        let a = pool.try_start();
        let b = pool.try_start();
        assert!(a.as_ref().is_some_and(Environment::cold));
        assert!(b.as_ref().is_some_and(Environment::cold));
        assert!(pool.try_start().is_none(), "the third is throttled");
        drop(a);
        let c = pool.try_start();
        assert!(
            c.as_ref().is_some_and(|c| !c.cold()),
            "a warm environment is reused"
        );
        assert_eq!(
            pool.counts(),
            PoolCounts {
                cold_starts: 2,
                throttles: 1,
                peak: 2
            }
        );
        let unreserved = FunctionPool::new(None);
        let many: Vec<_> = (0..500).filter_map(|_| unreserved.try_start()).collect();
        assert_eq!(many.len(), 500);
    }
}
