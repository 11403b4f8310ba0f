//! The suite's resources are template.yaml's own: the template deployed as a
//! CloudFormation stack in moto ([`crate::stack::deploy`]) with the suite's
//! options as its parameters, and everything the harness runs read back
//! from the stack: the functions' environment, each operator's lane, the
//! queues' and streams' mappings, the rules' targets and schedules. Nothing
//! here repeats a setting of the template: a change to template.yaml changes
//! what the suite runs.
//!
//! The harness's own part is what moto does not play: a queue per function
//! a rule targets (moto's rule delivers there, see
//! [`super::launcher::MOTO_DELIVERY`]), and the pumps, drains and tickers
//! that invoke the functions under `cargo lambda watch`.

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use lifeboat_core::OperatorId;

use crate::moto::resources::{self, Queue};
use crate::moto::{ACCOUNT_ID, REGION};
use crate::pump::read_mapping;
use crate::stack::wiring::{self, Wiring};
use crate::stack::{self, Deployed};
use crate::template::{BOOKING_WORKER, CART, OFFSALE_LISTENER, SEARCH};

use super::launcher::lambda_target_queue;
use super::{OperatorCredential, SuiteError, SuiteNames, SuiteOptions};

/// The stack's name when none is given: `samconfig.toml`'s.
pub const STACK_NAME: &str = "lifeboat";

/// The functions of the customer half: built, started and delivered to only
/// with [`SuiteOptions::customer`].
pub const CUSTOMER_FUNCTIONS: [&str; 4] = [SEARCH, CART, OFFSALE_LISTENER, BOOKING_WORKER];

/// The template's parameters for `options`: the operators and where each
/// is served (`endpoints`, `options.operator` first), the operator
/// settings, the errors alarm's name and operator, the credentials' path
/// and, with the customer half, its settings. What is not given keeps the template's
/// default.
pub fn stack_parameters(
    options: &SuiteOptions,
    endpoints: &[(OperatorId, String)],
) -> BTreeMap<String, String> {
    let operators: Vec<String> = endpoints.iter().map(|(o, _)| o.to_string()).collect();
    let mut parameters = BTreeMap::from([
        ("Operators".to_owned(), operators.join(",")),
        (
            "OperatorEndpoints".to_owned(),
            if options.operator_config_in_table {
                String::new()
            } else {
                super::env::endpoints_text(endpoints)
            },
        ),
        (
            "OperatorSettings".to_owned(),
            if options.operator_config_in_table {
                String::new()
            } else {
                options.operator_settings.clone()
            },
        ),
        ("OperatorConfigRevision".to_owned(), "local".to_owned()),
    ]);
    // The errors alarm the suite evaluates is the stack's
    // `RealConsumerErrorsAlarm`, on the suite's operator. Without one
    // evaluated, it still watches that operator: the circuit switch refuses
    // an `ALARM_OPERATORS` naming an operator it does not serve.
    let alarm = options
        .alarm
        .clone()
        .unwrap_or_else(|| format!("lifeboat-{}-errors", options.operator));
    parameters.insert(
        "AlarmOperators".to_owned(),
        format!("{alarm}={}", options.operator),
    );
    parameters.insert("ErrorsAlarmName".to_owned(), alarm);
    parameters.insert("AlarmedOperator".to_owned(), options.operator.to_string());
    if let Some(OperatorCredential { path, .. }) = &options.operator_credential {
        parameters.insert("OperatorCredentialsPath".to_owned(), path.clone());
    }
    if let Some(customer) = &options.customer {
        for (name, value) in [
            ("CartSettings", customer.cart_settings.clone()),
            ("BreakerCacheMs", customer.breaker_cache_ms.to_string()),
            (
                "SaleRetryMaxAttempts",
                customer.sale_retry_max_attempts.to_string(),
            ),
            (
                "SaleSwitchTimeoutMs",
                customer.sale_switch_timeout_ms.to_string(),
            ),
            (
                "SaleOnSaleHoldSeconds",
                customer.sale_on_sale_hold_s.to_string(),
            ),
            (
                "SaleOffSaleHoldSeconds",
                customer.sale_off_sale_hold_s.to_string(),
            ),
            ("OrderSettings", customer.order_settings.clone()),
            ("BookingRunMs", customer.booking_run_ms.to_string()),
        ] {
            parameters.insert(name.to_owned(), value);
        }
    }
    parameters
}

/// The stack `options.stack_name` in the moto `sdk` points at: created from
/// `options.template` with `parameters`, or, on a moto that already has it
/// (an earlier run's), that one when it was created, whole, from the same
/// template with the same parameters. Returns it with its wiring.
pub async fn deploy_stack(
    sdk: &SdkConfig,
    options: &SuiteOptions,
    parameters: &BTreeMap<String, String>,
) -> Result<(Deployed, Wiring), SuiteError> {
    let deployed = match stack::existing(sdk, &options.stack_name).await? {
        Some(deployed) => {
            let differing: Vec<String> = parameters
                .iter()
                .filter(|(name, value)| deployed.parameters.get(*name) != Some(*value))
                .map(|(name, value)| {
                    format!(
                        "{name} is {:?}, this run's is {value:?}",
                        deployed.parameters.get(name).map_or("", String::as_str)
                    )
                })
                .collect();
            if !differing.is_empty() {
                return Err(SuiteError::StackParameters {
                    stack: options.stack_name.clone(),
                    differing: differing.join("; "),
                });
            }
            let wanted =
                stack::document(&options.template, &options.stack_name, parameters).await?;
            if wanted != deployed.template {
                return Err(SuiteError::StackTemplate {
                    stack: options.stack_name.clone(),
                    template: options.template.clone(),
                });
            }
            deployed
        }
        None => stack::deploy(sdk, &options.stack_name, &options.template, parameters).await?,
    };
    let wiring = wiring::read(sdk, &deployed).await?;
    Ok((deployed, wiring))
}

/// The stack as `options` runs it with the operators served at
/// `endpoints` (`options.operator` first): deployed, or found (see
/// [`deploy_stack`]), and read back.
pub async fn stack_resources(
    sdk: &SdkConfig,
    options: &SuiteOptions,
    endpoints: &[(OperatorId, String)],
) -> Result<SuiteResources, SuiteError> {
    let (deployed, wiring) =
        deploy_stack(sdk, options, &stack_parameters(options, endpoints)).await?;
    let operators: Vec<OperatorId> = endpoints.iter().map(|(o, _)| o.clone()).collect();
    SuiteResources::from_stack(sdk, deployed, wiring, &operators).await
}

/// An operator's lane as the stack made it: its Requests table, that
/// table's stream and the stream's mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub operator: OperatorId,
    pub requests_table: String,
    pub stream_arn: String,
    pub mapping_uuid: String,
}

/// A queue's event source mapping into a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMapping {
    /// The mapping's logical id.
    pub mapping: String,
    pub queue: Queue,
    /// The function's binary.
    pub function: String,
    pub batch_size: i32,
}

/// A function some rule targets: what the rules send it waits in `queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTarget {
    /// The function's binary.
    pub function: String,
    /// The logical ids of the rules with an event pattern targeting it.
    pub rules: Vec<String>,
    /// The queue moto's rules deliver the function's events to.
    pub queue_name: String,
}

/// A scheduled rule targeting a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The rule's logical id.
    pub rule: String,
    /// The rule's name.
    pub rule_name: String,
    /// What the template schedules (`rate(1 minute)`); the suite ticks at
    /// [`SuiteOptions::tick_every`].
    pub expression: String,
    /// The function's binary.
    pub function: String,
}

/// What the suite runs on, read from the stack.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteResources {
    pub stack: Deployed,
    pub wiring: Wiring,
    pub names: SuiteNames,
    /// Every operator's lane: `options.operator`'s first, then the
    /// neighbours' in order.
    pub lanes: Vec<Lane>,
    /// Each function's binary by its name.
    pub binaries: BTreeMap<String, String>,
    pub queue_mappings: Vec<QueueMapping>,
    pub rule_targets: Vec<RuleTarget>,
    pub schedules: Vec<Schedule>,
}

impl SuiteResources {
    /// The suite's operator's lane.
    pub fn lane(&self) -> &Lane {
        &self.lanes[0]
    }

    /// Read from `deployed` and its `wiring`: `operators`' lanes (each must
    /// be one of the stack's), the mappings, targets and schedules.
    pub async fn from_stack(
        sdk: &SdkConfig,
        deployed: Deployed,
        wiring: Wiring,
        operators: &[OperatorId],
    ) -> Result<Self, SuiteError> {
        let missing = |what: String| {
            SuiteError::Stack(stack::StackError::Api {
                what: format!("stack {}", deployed.stack_name),
                detail: what,
            })
        };
        let binaries: BTreeMap<String, String> = deployed
            .binaries()
            .into_iter()
            .filter_map(|(id, binary)| Some((deployed.physical_id(&id)?.to_owned(), binary)))
            .collect();
        let output = |key: &str| {
            deployed
                .outputs
                .get(key)
                .cloned()
                .ok_or_else(|| missing(format!("no output {key}")))
        };
        let physical = |id: &str| {
            deployed
                .physical_id(id)
                .map(str::to_owned)
                .ok_or_else(|| missing(format!("no resource {id}")))
        };
        let names = SuiteNames {
            requests_table_prefix: output("RequestsTablePrefix")?,
            breaker_table: physical("BreakerTable")?,
            cache_table: physical("CacheTable")?,
            bus: physical("EventBus")?,
            carts_table: physical("CartsTable")?,
            orders_table: physical("OrdersTable")?,
            sale_status_table: physical("SaleStatusTable")?,
            operator_config_table: physical("OperatorConfigTable")?,
        };

        let lambda = aws_sdk_lambda::Client::new(sdk);
        let mut lanes = Vec::new();
        for operator in operators {
            let table = format!("{}{operator}", names.requests_table_prefix);
            let found = wiring.mappings.iter().find(|(_, m)| {
                deployed.physical_id(&m.source) == Some(table.as_str())
                    && deployed
                        .resources
                        .get(&m.source)
                        .is_some_and(|r| r.resource_type == "AWS::DynamoDB::Table")
            });
            let Some((id, _)) = found else {
                return Err(missing(format!(
                    "no lane for operator {operator}: no mapping on the stream of table {table}"
                )));
            };
            let mapping_uuid = physical(id)?;
            let stream_arn = read_mapping(&lambda, &mapping_uuid).await?.stream_arn;
            lanes.push(Lane {
                operator: operator.clone(),
                requests_table: table,
                stream_arn,
                mapping_uuid,
            });
        }

        let mut queue_mappings = Vec::new();
        for (id, mapping) in &wiring.mappings {
            let is_queue = deployed
                .resources
                .get(&mapping.source)
                .is_some_and(|r| r.resource_type == "AWS::SQS::Queue");
            if !is_queue {
                continue;
            }
            let url = physical(&mapping.source)?;
            let name = url.rsplit('/').next().unwrap_or_default();
            queue_mappings.push(QueueMapping {
                mapping: id.clone(),
                queue: Queue {
                    arn: format!("arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"),
                    url,
                },
                function: mapping.function.clone(),
                batch_size: mapping.batch_size.unwrap_or(10),
            });
        }

        let function_name = |binary: &str| {
            binaries
                .iter()
                .find(|(_, b)| b.as_str() == binary)
                .map(|(name, _)| name.clone())
        };
        let mut rule_targets: Vec<RuleTarget> = Vec::new();
        let mut schedules = Vec::new();
        for (id, rule) in &wiring.rules {
            for function in rule.targets.values() {
                let Some(name) = function_name(function) else {
                    continue;
                };
                match (&rule.schedule, rule.pattern.is_some()) {
                    (Some(expression), _) => schedules.push(Schedule {
                        rule: id.clone(),
                        rule_name: physical(id)?,
                        expression: expression.clone(),
                        function: function.clone(),
                    }),
                    (None, true) => {
                        match rule_targets.iter_mut().find(|t| &t.function == function) {
                            Some(target) => target.rules.push(id.clone()),
                            None => rule_targets.push(RuleTarget {
                                function: function.clone(),
                                rules: vec![id.clone()],
                                queue_name: lambda_target_queue(&name),
                            }),
                        }
                    }
                    (None, false) => {}
                }
            }
        }
        Ok(Self {
            stack: deployed,
            wiring,
            names,
            lanes,
            binaries,
            queue_mappings,
            rule_targets,
            schedules,
        })
    }

    /// Create the queue of each rule target (an earlier run's is kept).
    pub(super) async fn create_target_queues(
        &self,
        sdk: &SdkConfig,
    ) -> Result<Vec<(RuleTarget, Queue)>, SuiteError> {
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let mut created = Vec::new();
        for target in &self.rule_targets {
            let queue = resources::create_queue(&sqs, &target.queue_name, None).await?;
            created.push((target.clone(), queue));
        }
        Ok(created)
    }

    /// The environment every function runs with: the stack's, each
    /// function's variables together (a variable two functions give
    /// different values is an error: one `cargo lambda watch` runs them
    /// all with one environment). Only the functions in `running`.
    pub fn environment(&self, running: &[&str]) -> Result<BTreeMap<String, String>, SuiteError> {
        let mut env: BTreeMap<String, (String, String)> = BTreeMap::new();
        for (binary, variables) in &self.wiring.environments {
            if !running.contains(&binary.as_str()) {
                continue;
            }
            for (key, value) in variables {
                match env.get(key) {
                    Some((other, theirs)) if theirs != value => {
                        return Err(SuiteError::Environment {
                            key: key.clone(),
                            functions: format!("{other} has {theirs:?}, {binary} {value:?}"),
                        });
                    }
                    Some(_) => {}
                    None => {
                        env.insert(key.clone(), (binary.clone(), value.clone()));
                    }
                }
            }
        }
        Ok(env.into_iter().map(|(k, (_, v))| (k, v)).collect())
    }
}

impl Schedule {
    /// How often the suite ticks it: `tick_every` for each minute of its
    /// `rate(…)` (the template's minute ticks at `tick_every`, its
    /// five-minute sweep five times as far apart); `tick_every` for an
    /// expression that is not a rate.
    pub fn period(&self, tick_every: std::time::Duration) -> std::time::Duration {
        let minutes = self
            .expression
            .strip_prefix("rate(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|rate| {
                let (n, unit) = rate.split_once(' ')?;
                let n: u32 = n.parse().ok()?;
                match unit.trim_end_matches('s') {
                    "minute" => Some(n),
                    "hour" => n.checked_mul(60),
                    "day" => n.checked_mul(24 * 60),
                    _ => None,
                }
            })
            .unwrap_or(1);
        tick_every.saturating_mul(minutes.max(1))
    }
}

/// Whether the suite runs `function` (its binary).
pub fn runs(options: &SuiteOptions, function: &str) -> bool {
    options.customer.is_some() || !CUSTOMER_FUNCTIONS.contains(&function)
}
