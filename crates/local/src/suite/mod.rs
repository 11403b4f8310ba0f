//! The wired suite on one machine: moto, the functions under `cargo lambda
//! watch`, a simulated operator, and the harness's pumps for what moto does
//! not run; with [`SuiteOptions::customer`] also search, cart, the off-sale
//! listener and the booking worker. What [`LocalSuite::start`] creates and
//! starts, step by step: docs/local.md ("How the harness starts the
//! suite"). Dropping it stops everything it started; [`LocalSuite::stop`]
//! does it gracefully.

mod env;
mod from_stack;
mod in_moto;
mod launcher;
mod options;
mod orders;
#[cfg(test)]
mod tests;

pub use crate::template::{
    self, BOOKING_WORKER, CART, CIRCUIT_SWITCH, FALLBACK_CONSUMER, OFFSALE_LISTENER, REAL_CONSUMER,
    SEARCH, api_function,
};
pub use env::{env_file_text, function_env};
pub use from_stack::{
    CUSTOMER_FUNCTIONS, Lane, QueueMapping, RuleTarget, STACK_NAME, Schedule, SuiteResources,
    stack_parameters, stack_resources,
};
pub(crate) use launcher::moto_python;
pub use launcher::{lambda_target_queue, moto_launcher, shell_quoted};
pub use options::{
    ApiReply, Attach, AttachWatch, CustomerOptions, Neighbour, OperatorCredential, StartupTimes,
    SuiteError, SuiteNames, SuiteOptions,
};

use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use lifeboat_aws::{
    DynamoBreakerStore, DynamoCartStore, DynamoOrderStore, DynamoRequestStore,
    DynamoSaleStatusStore, RequestTables,
};
use lifeboat_core::OperatorId;
use lifeboat_core::metrics::LogLevel;
use lifeboat_operator::{SimConfig, SimServer, SimStats};
use serde_json::{Value, json};

use crate::alarm::{AlarmConfig, AlarmRule, LocalAlarm};
use crate::faults::FaultProxy;
use crate::moto::MotoServer;
use crate::pump::{
    BusDrain, BusDrainConfig, DrainStats, Invoker, PumpConfig, PumpStats, QueuePump,
    QueuePumpConfig, QueueStats, StreamPump, Ticker, TickerConfig, TickerStats, read_mapping,
};
use crate::watch::Watch;
use env::{attach_watch, warm_up, warm_up_customer};
use from_stack::runs;
use in_moto::{check_stream_keeps_records, purge_queues, put_operator_credential};

/// Long-poll wait of the `BreakerTimerQueue` pump: a timer that comes due
/// reaches the switch within it.
const TIMER_QUEUE_WAIT: Duration = Duration::from_secs(1);

/// The wired gateway; see the module docs.
#[derive(Debug)]
pub struct LocalSuite {
    // Field order is drop order: the harness's tasks first, then the
    // functions, the operator, and moto last.
    pump: StreamPump,
    /// A drain per function a rule targets, by its binary.
    drains: Vec<(String, BusDrain)>,
    /// A ticker per scheduled rule, by its function's binary.
    tickers: Vec<(String, Ticker)>,
    alarm: Option<LocalAlarm>,
    /// A pump per queue mapping, by its function's binary.
    queues: Vec<(String, QueuePump)>,
    neighbours: Vec<Neighbour>,
    watch: Watch,
    operator: SimServer,
    moto: MotoServer,
    sdk: SdkConfig,
    resources: SuiteResources,
    env: Vec<(String, String)>,
    http: reqwest::Client,
    /// For [`LocalSuite::api`]: bounded by the invoke timeout.
    api_http: reqwest::Client,
    startup: StartupTimes,
    faults: Option<FaultProxy>,
    /// Whether the customer half runs.
    customer: bool,
}

impl LocalSuite {
    /// Start everything; see the module docs.
    pub async fn start(options: SuiteOptions) -> Result<Self, SuiteError> {
        let started = Instant::now();
        let attach = &options.attach;
        let moto = match &attach.moto {
            Some(endpoint) => MotoServer::attach(endpoint, attach.aws_port).await?,
            None => MotoServer::start_program_with(&moto_launcher()?, attach.aws_port).await?,
        };
        let sdk = moto.sdk_config().await;

        // The operators first: the stack's parameters say where each is
        // served.
        let operator = SimServer::start_with(
            options.operator.clone(),
            options.sim.clone(),
            attach.operator_port,
        )
        .await
        .map_err(SuiteError::Operator)?;
        if let Some(credential) = &options.operator_credential {
            operator.require_header(&credential.header, &credential.value);
        }
        let mut sims = Vec::new();
        for (n, neighbour) in options.neighbours.iter().enumerate() {
            let sim = SimServer::start_with(
                neighbour.clone(),
                SimConfig {
                    seed: options.sim.seed ^ (n as u64 + 1),
                    outages: Vec::new(),
                    ..options.sim.clone()
                },
                0,
            )
            .await
            .map_err(SuiteError::Operator)?;
            sims.push((neighbour.clone(), sim));
        }
        let endpoints: Vec<(OperatorId, String)> =
            std::iter::once((options.operator.clone(), operator.base_url()))
                .chain(sims.iter().map(|(o, sim)| (o.clone(), sim.base_url())))
                .collect();

        let resources = match stack_resources(&sdk, &options, &endpoints).await {
            Err(SuiteError::Stack(e)) if moto.is_attached() => {
                return Err(SuiteError::StreamProbe {
                    detail: format!(
                        "it cannot create the template's stack ({e}); start it with `lifeboat local moto`"
                    ),
                });
            }
            resources => resources?,
        };
        let targets = resources.create_target_queues(&sdk).await?;
        if let Some(credential) = &options.operator_credential {
            put_operator_credential(&sdk, &options.operator, credential).await?;
        }
        if moto.is_attached() {
            check_stream_keeps_records(&sdk, &resources).await?;
            let drained: Vec<String> = targets
                .iter()
                .map(|(_, queue)| queue.url.clone())
                .chain(resources.queue_mappings.iter().map(|m| m.queue.url.clone()))
                .collect();
            purge_queues(&sdk, &drained).await?;
        }
        env::put_operator_config(&sdk, &resources, &options, &endpoints).await?;
        let moto_and_resources = started.elapsed();

        let mut env = function_env(&moto.endpoint(), &resources, &options)?;
        let faults = match options.aws_faults {
            Some(seed) => {
                let proxy = FaultProxy::start(&moto.endpoint(), seed)
                    .await
                    .map_err(SuiteError::FaultProxy)?;
                env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
                env.push(("AWS_ENDPOINT_URL".to_owned(), proxy.endpoint()));
                env.push(("AWS_MAX_ATTEMPTS".to_owned(), "1".to_owned()));
                Some(proxy)
            }
            None => None,
        };
        let watch_started = Instant::now();
        let watch = match &attach.watch {
            Some(running) => attach_watch(running, &env, options.invoke_timeout).await?,
            None => {
                Watch::for_workspace()
                    .envs(env.iter().cloned())
                    .concurrency(options.concurrency)
                    .start()
                    .await?
            }
        };
        let watch_time = watch_started.elapsed();

        let warm_started = Instant::now();
        warm_up(&watch).await?;
        if options.customer.is_some() {
            warm_up_customer(&watch).await?;
        }
        let warm_up_time = warm_started.elapsed();

        // As on AWS, an Invoke of a stack function by its name runs it.
        moto.route_invokes(&watch.invoke_endpoint(), resources.binaries.clone());
        let invoker = Invoker::for_endpoint(&watch.invoke_endpoint(), options.invoke_timeout).await;
        let lane_pump = |uuid: &str| {
            let mut config = PumpConfig::new(uuid);
            config.poll_every = options.poll_every;
            config.binaries.clone_from(&resources.binaries);
            config
        };
        let mut pump_config = lane_pump(&resources.lane().mapping_uuid);
        pump_config.tap = options.stream_tap.clone();
        let pump = StreamPump::start(
            aws_sdk_dynamodbstreams::Client::new(&sdk),
            aws_sdk_lambda::Client::new(&sdk),
            invoker.clone(),
            pump_config,
        )
        .await?;
        let mut neighbours = Vec::new();
        for ((operator, sim), lane) in sims.into_iter().zip(resources.lanes.iter().skip(1)) {
            let pump = StreamPump::start(
                aws_sdk_dynamodbstreams::Client::new(&sdk),
                aws_sdk_lambda::Client::new(&sdk),
                invoker.clone(),
                lane_pump(&lane.mapping_uuid),
            )
            .await?;
            neighbours.push(Neighbour {
                operator,
                requests_table: lane.requests_table.clone(),
                mapping_uuid: lane.mapping_uuid.clone(),
                sim,
                _pump: pump,
            });
        }
        let drains = targets
            .into_iter()
            .filter(|(target, _)| runs(&options, &target.function))
            .map(|(target, queue)| {
                let drain = BusDrain::start(
                    aws_sdk_sqs::Client::new(&sdk),
                    invoker.clone(),
                    BusDrainConfig::new(&queue.url, &target.function),
                );
                (target.function, drain)
            })
            .collect();
        let queues = resources
            .queue_mappings
            .iter()
            .filter(|m| runs(&options, &m.function))
            .map(|m| {
                let mut config = QueuePumpConfig::new(&m.queue.url, &m.queue.arn, &m.function);
                config.batch_size = m.batch_size;
                config.wait = match &options.customer {
                    Some(customer) if m.function == OFFSALE_LISTENER => customer.queue_wait,
                    _ => TIMER_QUEUE_WAIT,
                };
                let pump =
                    QueuePump::start(aws_sdk_sqs::Client::new(&sdk), invoker.clone(), config);
                (m.function.clone(), pump)
            })
            .collect();
        let alarm = options
            .alarm
            .as_ref()
            .zip(watch.log_path())
            .map(|(name, log)| {
                let mut config = AlarmConfig::new(
                    AlarmRule::errors_alarm(name, options.operator.as_str()),
                    log,
                    CIRCUIT_SWITCH,
                );
                config.from_end = watch.is_attached();
                config.filter = LogLevel::parse(&options.log_level).unwrap_or_default();
                config.history = moto.alarm_history();
                LocalAlarm::start(invoker.clone(), config)
            });
        // A minute of a schedule's rate is `tick_every` here. A ticker invokes once at a time, as the booking worker's
        // reserved concurrency of one runs it: a tick due while a run goes
        // on waits for its end.
        let tickers = resources
            .schedules
            .iter()
            .filter(|schedule| runs(&options, &schedule.function))
            .map(|schedule| {
                let ticker = Ticker::start(
                    invoker.clone(),
                    TickerConfig::new(
                        &schedule.function,
                        schedule.period(options.tick_every),
                        &schedule.rule_name,
                    ),
                );
                (schedule.function.clone(), ticker)
            })
            .collect();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(SuiteError::Control)?;
        let api_http = reqwest::Client::builder()
            .no_proxy()
            .timeout(options.invoke_timeout)
            .build()
            .map_err(SuiteError::Control)?;
        Ok(Self {
            pump,
            drains,
            tickers,
            alarm,
            queues,
            neighbours,
            watch,
            operator,
            moto,
            sdk,
            resources,
            env,
            http,
            api_http,
            startup: StartupTimes {
                moto_and_resources,
                watch: watch_time,
                warm_up: warm_up_time,
                total: started.elapsed(),
            },
            faults,
            customer: options.customer.is_some(),
        })
    }

    /// The fault proxy, when started with [`SuiteOptions::aws_faults`].
    pub fn fault_proxy(&self) -> Option<&FaultProxy> {
        self.faults.as_ref()
    }

    pub fn resources(&self) -> &SuiteResources {
        &self.resources
    }

    pub fn startup_times(&self) -> StartupTimes {
        self.startup
    }

    /// An SDK configuration for moto.
    pub fn sdk_config(&self) -> &SdkConfig {
        &self.sdk
    }

    pub fn moto(&self) -> &MotoServer {
        &self.moto
    }

    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// The simulated operator.
    pub fn operator(&self) -> &SimServer {
        &self.operator
    }

    /// The healthy operators served beside it, each on its own lane.
    pub fn neighbours(&self) -> &[Neighbour] {
        &self.neighbours
    }

    /// The environment every function runs with.
    pub fn function_env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The Requests tables in moto, as the functions see them.
    pub fn request_store(&self) -> DynamoRequestStore {
        DynamoRequestStore::with_tables(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            RequestTables::PerOperator {
                prefix: self.resources.names.requests_table_prefix.clone(),
            },
        )
    }

    /// The breakers in moto, as the functions see them.
    pub fn breaker_store(&self) -> DynamoBreakerStore {
        DynamoBreakerStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.breaker_table,
        )
    }

    /// The function (its binary) the operator's Requests stream's mapping
    /// delivers to now.
    pub async fn mapping_function(&self) -> Result<String, SuiteError> {
        let mapping = read_mapping(
            &aws_sdk_lambda::Client::new(&self.sdk),
            &self.resources.lane().mapping_uuid,
        )
        .await?;
        Ok(self
            .resources
            .binaries
            .get(&mapping.function)
            .cloned()
            .unwrap_or(mapping.function))
    }

    /// Switch the operator's mode through its control endpoint: `hang`,
    /// `refuse`, `server_error`, `slow`, `garbage`, or `None` for healthy.
    /// Returns the mode now in force.
    pub async fn set_operator_mode(&self, mode: Option<&str>) -> Result<Value, SuiteError> {
        self.http
            .post(format!("{}/_control/mode", self.operator.base_url()))
            .json(&json!({ "mode": mode }))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(SuiteError::Control)?
            .json::<Value>()
            .await
            .map(|answer| answer.get("mode").cloned().unwrap_or(Value::Null))
            .map_err(SuiteError::Control)
    }

    /// The operator's call counts, from its control endpoint.
    pub async fn operator_stats(&self) -> Result<SimStats, SuiteError> {
        self.http
            .get(format!("{}/_control/stats", self.operator.base_url()))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(SuiteError::Control)?
            .json::<SimStats>()
            .await
            .map_err(SuiteError::Control)
    }

    /// [`SuiteError::NoCustomer`] unless the customer half runs.
    pub fn customer_half(&self) -> Result<(), SuiteError> {
        if self.customer {
            Ok(())
        } else {
            Err(SuiteError::NoCustomer)
        }
    }

    /// The SaleStatus table in moto, as the cart and the listener see it.
    pub fn sale_status_store(&self) -> Result<DynamoSaleStatusStore, SuiteError> {
        self.customer_half()?;
        Ok(DynamoSaleStatusStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.sale_status_table,
        ))
    }

    /// The Carts table in moto, as the cart sees it.
    pub fn cart_store(&self) -> Result<DynamoCartStore, SuiteError> {
        self.customer_half()?;
        Ok(DynamoCartStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.carts_table,
        ))
    }

    /// The URL `LifeboatHttpApi` would serve `path_and_query` from: the
    /// function it routes to, under `cargo lambda watch` (see the module
    /// docs).
    pub fn api_url(&self, path_and_query: &str) -> Result<String, SuiteError> {
        self.customer_half()?;
        let function = api_function(path_and_query)
            .ok_or_else(|| SuiteError::NoRoute(path_and_query.to_owned()))?;
        Ok(self.watch.function_url(function, path_and_query))
    }

    /// Send one HTTP request to search or cart as `LifeboatHttpApi` would
    /// route it (`method` e.g. `GET`, `path_and_query` e.g.
    /// `/sailings?operator=nordic&…`, a JSON body for `POST` and `PUT`) and
    /// return the reply. Any status is a reply; a body that is not JSON is
    /// an error.
    pub async fn api(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<ApiReply, SuiteError> {
        self.api_with_headers(method, path_and_query, body, &[])
            .await
    }

    /// [`Self::api`] with request headers besides the body's content type
    /// (a caller's `authorization`, a cookie).
    pub async fn api_with_headers(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<ApiReply, SuiteError> {
        let url = self.api_url(path_and_query)?;
        let api_err = |source| SuiteError::Api {
            method: method.to_owned(),
            url: url.clone(),
            source,
        };
        let verb = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| SuiteError::NoRoute(format!("{method} {path_and_query}")))?;
        let mut request = self.api_http.request(verb, &url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let sent = Instant::now();
        let response = request.send().await.map_err(api_err)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let text = response.text().await.map_err(api_err)?;
        let elapsed = sent.elapsed();
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|_| SuiteError::ApiNotJson {
                method: method.to_owned(),
                url: url.clone(),
                status,
                body: text.chars().take(500).collect(),
            })?
        };
        Ok(ApiReply {
            status,
            headers,
            body,
            elapsed,
        })
    }

    /// What the `OffsaleQueue` pump has done (default stats without the
    /// customer half).
    pub fn offsale_stats(&self) -> QueueStats {
        of_function(&self.queues, OFFSALE_LISTENER)
            .map_or_else(QueueStats::default, QueuePump::stats)
    }

    pub fn pump_stats(&self) -> PumpStats {
        self.pump.stats()
    }

    /// What the drain of the rules targeting the circuit switch
    /// (`TripRequestedRule`, `AlarmStateChangeRule`) has done.
    pub fn drain_stats(&self) -> DrainStats {
        of_function(&self.drains, CIRCUIT_SWITCH).map_or_else(DrainStats::default, BusDrain::stats)
    }

    /// What the circuit switch's schedule (`HalfOpenScheduleRule`) has done.
    pub fn ticker_stats(&self) -> TickerStats {
        of_function(&self.tickers, CIRCUIT_SWITCH).map_or_else(TickerStats::default, Ticker::stats)
    }

    /// What the booking worker's schedule has done (default stats without
    /// the customer half).
    pub fn booking_stats(&self) -> TickerStats {
        of_function(&self.tickers, BOOKING_WORKER).map_or_else(TickerStats::default, Ticker::stats)
    }

    /// The Orders table in moto, as the cart and the booking worker see it.
    pub fn order_store(&self) -> Result<DynamoOrderStore, SuiteError> {
        self.customer_half()?;
        Ok(DynamoOrderStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.names.orders_table,
        ))
    }

    /// The errors alarm, evaluated here (see [`SuiteOptions::alarm`]).
    pub fn alarm(&self) -> Option<&LocalAlarm> {
        self.alarm.as_ref()
    }

    /// Whether every pump, drain, ticker and the alarm are still running.
    pub fn harness_running(&self) -> bool {
        self.pump.is_running()
            && self.drains.iter().all(|(_, d)| d.is_running())
            && self.tickers.iter().all(|(_, t)| t.is_running())
            && self.alarm.as_ref().is_none_or(LocalAlarm::is_running)
            && self.queues.iter().all(|(_, q)| q.is_running())
    }

    /// Stop the harness's tasks (after their invocations in flight), the
    /// functions, the operator and moto.
    pub async fn stop(self) {
        let Self {
            pump,
            drains,
            tickers,
            alarm,
            queues,
            watch,
            operator,
            moto,
            faults,
            ..
        } = self;
        let alarm = async move {
            if let Some(alarm) = alarm {
                alarm.stop().await;
            }
        };
        tokio::join!(
            pump.stop(),
            futures::future::join_all(drains.into_iter().map(|(_, d)| d.stop())),
            futures::future::join_all(tickers.into_iter().map(|(_, t)| t.stop())),
            futures::future::join_all(queues.into_iter().map(|(_, q)| q.stop())),
            alarm,
        );
        watch.stop().await;
        if let Some(faults) = faults {
            faults.shutdown().await;
        }
        operator.shutdown().await;
        moto.stop().await;
    }
}

/// The pump, drain or ticker of `function` (its binary) among `tasks`.
fn of_function<'a, T>(tasks: &'a [(String, T)], function: &str) -> Option<&'a T> {
    tasks
        .iter()
        .find(|(f, _)| f == function)
        .map(|(_, task)| task)
}
