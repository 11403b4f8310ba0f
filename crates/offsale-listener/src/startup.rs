//! Building the listener once per Lambda instance: from the environment (the
//! status store, the redelivery port, the bus, the Breaker table) or on given
//! ports.

use std::sync::Arc;

use lifeboat_aws::{DynamoSaleStatusStore, SqsRedelivery};
use lifeboat_core::memory::MemorySaleStatusStore;
use lifeboat_core::metrics::StdoutMetrics;
use lifeboat_core::ports::{
    Clock, EventPublisher, MetricsSink, Redelivery, SaleStatusStore, SaleSwitch,
};
use lifeboat_core::sale::{QueueTimeoutRedelivery, StatusTableSwitch};
use lifeboat_core::watched::watch;

use crate::config::{ListenerConfig, OFFSALE_QUEUE_URL, StoreChoice, SwitchTarget};
use crate::http::HttpSaleSwitch;
use crate::{OffsaleListener, StartupError, trust};

/// The decrypted value of SSM SecureString parameter `name`.
async fn read_secure_string(ssm: &aws_sdk_ssm::Client, name: &str) -> Result<String, StartupError> {
    let output = ssm
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| {
            StartupError::Secret(format!(
                "SSM parameter {name} not read: {}",
                aws_sdk_ssm::error::DisplayErrorContext(&e)
            ))
        })?;
    output
        .parameter
        .and_then(|p| p.value)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| StartupError::Secret(format!("SSM parameter {name} has no value")))
}

impl OffsaleListener {
    /// Build the listener from the environment (see docs/offsale.md)
    /// and the bus named by `EVENT_BUS_NAME`, reading the sale switch's auth
    /// value from SSM when `SALE_SWITCH_AUTH_PARAMETER` names it (once, here:
    /// every write of this instance then uses it).
    pub async fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
        ssm: &aws_sdk_ssm::Client,
    ) -> Result<Self, StartupError> {
        let mut config = ListenerConfig::from_env(env)?;
        if let Some(secret) = config.auth_secret.take() {
            let value = read_secure_string(ssm, &secret.parameter).await?;
            if let SwitchTarget::Http(http) = &mut config.switch {
                *http = http.clone().with_auth(&secret.header, &value)?;
            }
        }
        let (store, redelivery) = Self::store_ports(&config.store, clients);
        // Every failed table or bus call counts in DependencyErrors.
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn Clock> = Arc::new(lifeboat_core::SystemClock);
        let mut listener = Self::with_ports(
            &config,
            watch(store, &metrics, &clock),
            redelivery,
            watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            clock.clone(),
        )?;
        match env.optional(lifeboat_aws::clients::BREAKER_TABLE)? {
            Some(table) => {
                listener.trust.breakers = Some(watch(
                    Arc::new(lifeboat_aws::DynamoBreakerStore::new(
                        clients.dynamodb().clone(),
                        table,
                    )),
                    &metrics,
                    &clock,
                ));
            }
            None => tracing::warn!(
                "BREAKER_TABLE is not set: state changes are applied without the Breaker table confirming them"
            ),
        }
        if listener.trust.operators.is_none() {
            tracing::warn!("OPERATORS is not set: changes of any operator are applied");
        }
        Ok(listener)
    }

    /// The sale status store and the redelivery `store` asks for: the
    /// SaleStatus table with `ChangeMessageVisibility` on the off-sale queue
    /// (or the queue's own visibility timeout when its URL is not set, with a
    /// warning), or both in memory.
    fn store_ports(
        store: &StoreChoice,
        clients: &lifeboat_aws::Clients,
    ) -> (Arc<dyn SaleStatusStore>, Arc<dyn Redelivery>) {
        match store {
            StoreChoice::Dynamodb { table, queue_url } => {
                let redelivery: Arc<dyn Redelivery> = match queue_url {
                    Some(url) => Arc::new(SqsRedelivery::new(clients.sqs().clone(), url)),
                    None => {
                        tracing::warn!(
                            "{OFFSALE_QUEUE_URL} is not set: failed writes are retried when the queue's visibility timeout runs out, not on the retry schedule"
                        );
                        Arc::new(QueueTimeoutRedelivery)
                    }
                };
                (
                    Arc::new(DynamoSaleStatusStore::new(
                        clients.dynamodb().clone(),
                        table,
                    )),
                    redelivery,
                )
            }
            StoreChoice::Memory => {
                tracing::warn!(
                    "sale records are kept in memory: they do not survive this instance"
                );
                (
                    Arc::new(MemorySaleStatusStore::new()),
                    Arc::new(QueueTimeoutRedelivery),
                )
            }
        }
    }

    /// Build the listener on the given ports, with the switch and policy
    /// `config` names.
    pub fn with_ports(
        config: &ListenerConfig,
        store: Arc<dyn SaleStatusStore>,
        redelivery: Arc<dyn Redelivery>,
        events: Arc<dyn EventPublisher>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StartupError> {
        let switch: Arc<dyn SaleSwitch> = match &config.switch {
            SwitchTarget::Table => Arc::new(StatusTableSwitch),
            SwitchTarget::Http(http) => Arc::new(HttpSaleSwitch::new(http.clone())?),
        };
        Ok(Self {
            store,
            switch,
            redelivery,
            events,
            clock,
            policy: config.policy,
            on_sale_at: config.on_sale_at,
            metrics: Arc::new(StdoutMetrics::from_env()),
            trust: trust::Trust {
                operators: config.operators.clone(),
                breakers: None,
            },
            self_fault: config.self_fault,
        })
    }
}
