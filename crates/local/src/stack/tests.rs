//! template.yaml deployed into moto, checked against what lifeboat's code
//! expects of it: the variables each function reads, the lanes' and
//! queues' mappings, the rules the circuit switch and the off-sale listener
//! need (the settings in `template.rs`), and the environment the local
//! suite gives the functions from the stack (`suite::function_env`). A copy
//! of the template broken in one place fails the same check.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use lifeboat_aws::clients;
use lifeboat_core::{OperatorId, operator_config, settings};
use serde_json::Value;

use super::wiring::{self, Mapping, Wiring};
use super::*;
use crate::moto::MotoServer;
use crate::suite::{CustomerOptions, SuiteOptions, SuiteResources, function_env, moto_launcher};
use crate::template::{
    self, BOOKING_WORKER, CART, CIRCUIT_SWITCH, FALLBACK_CONSUMER, OFFSALE_LISTENER, REAL_CONSUMER,
    SEARCH,
};

/// The lanes of the stacks here: the suite's operator and a neighbour.
const OPERATORS: [&str; 2] = ["nordic", "baltic"];

fn template_path() -> PathBuf {
    crate::watch::workspace_root().join("template.yaml")
}

fn parameters() -> BTreeMap<String, String> {
    BTreeMap::from([("Operators".to_owned(), OPERATORS.join(","))])
}

/// The variables every function reads from `Globals`.
const GLOBALS: [&str; 4] = [
    clients::REQUESTS_TABLE_PREFIX,
    clients::BREAKER_TABLE,
    clients::EVENT_BUS_NAME,
    settings::OPERATOR_SETTINGS,
];

/// What each function reads from its environment when it starts (its
/// `from_env`), besides [`GLOBALS`]: the template must give it exactly these.
fn function_variables() -> BTreeMap<&'static str, Vec<&'static str>> {
    let config = [
        operator_config::OPERATOR_CONFIG_TABLE,
        operator_config::OPERATOR_CONFIG_REVISION,
    ];
    BTreeMap::from([
        (
            REAL_CONSUMER,
            [
                lifeboat_operator::OPERATOR_ENDPOINTS,
                clients::OPERATOR_CREDENTIALS_PATH,
                "CALL_CONCURRENCY",
                "CALL_LOG_SHARE",
                clients::CACHE_TABLE,
            ]
            .into_iter()
            .chain(config)
            .collect(),
        ),
        (FALLBACK_CONSUMER, vec![]),
        (
            CIRCUIT_SWITCH,
            [
                clients::REAL_CONSUMER_FUNCTION,
                clients::FALLBACK_CONSUMER_FUNCTION,
                "ALARM_OPERATORS",
                settings::OPERATORS,
                "BREAKER_TIMER_QUEUE_URL",
                lifeboat_operator::OPERATOR_ENDPOINTS,
                clients::OPERATOR_CREDENTIALS_PATH,
                "LANE_PARALLELIZATION",
                "REAL_CONSUMER_RESERVED",
            ]
            .into_iter()
            .chain(config)
            .collect(),
        ),
        (
            SEARCH,
            [
                clients::CACHE_TABLE,
                settings::OPERATORS,
                "BREAKER_CACHE_MS",
            ]
            .into_iter()
            .chain(config)
            .collect(),
        ),
        (
            CART,
            [
                clients::CARTS_TABLE,
                clients::ORDERS_TABLE,
                clients::SALE_STATUS_TABLE,
                clients::CACHE_TABLE,
                settings::OPERATORS,
                "CART_SETTINGS",
                "BREAKER_CACHE_MS",
            ]
            .into_iter()
            .chain(config)
            .collect(),
        ),
        (
            OFFSALE_LISTENER,
            vec![
                "SALE_STATUS_STORE",
                clients::SALE_STATUS_TABLE,
                clients::OFFSALE_QUEUE_URL,
                "SALE_SWITCH",
                "SALE_SWITCH_URL",
                "SALE_SWITCH_METHOD",
                "SALE_SWITCH_AUTH_HEADER",
                "SALE_SWITCH_AUTH_VALUE",
                "SALE_SWITCH_AUTH_PARAMETER",
                "SALE_RETRY_MAX_ATTEMPTS",
                "SALE_SWITCH_TIMEOUT_MS",
                "SALE_ON_SALE_AT",
                "SALE_ON_SALE_HOLD_S",
                "SALE_OFF_SALE_HOLD_S",
                settings::OPERATORS,
                "SELF_FAULT_SHARE",
            ],
        ),
        (
            BOOKING_WORKER,
            [
                clients::ORDERS_TABLE,
                settings::OPERATORS,
                "ORDER_SETTINGS",
                "BOOKING_RUN_MS",
            ]
            .into_iter()
            .chain(config)
            .collect(),
        ),
    ])
}

/// Variables whose value names one of the stack's resources, and which.
const RESOURCE_VARIABLES: [(&str, &str); 9] = [
    (clients::BREAKER_TABLE, "BreakerTable"),
    (clients::CACHE_TABLE, "CacheTable"),
    (clients::CARTS_TABLE, "CartsTable"),
    (clients::ORDERS_TABLE, "OrdersTable"),
    (clients::SALE_STATUS_TABLE, "SaleStatusTable"),
    (
        operator_config::OPERATOR_CONFIG_TABLE,
        "OperatorConfigTable",
    ),
    (clients::EVENT_BUS_NAME, "EventBus"),
    (clients::OFFSALE_QUEUE_URL, "OffsaleQueue"),
    ("BREAKER_TIMER_QUEUE_URL", "BreakerTimerQueue"),
];

/// The settings the local suite's defaults stand for (`template.rs`,
/// `CustomerOptions::default`): a stack deployed with the template's
/// defaults must give the functions these values.
fn default_settings() -> BTreeMap<&'static str, String> {
    let customer = CustomerOptions::default();
    BTreeMap::from([
        ("CALL_CONCURRENCY", template::CALL_CONCURRENCY.to_string()),
        ("BREAKER_CACHE_MS", customer.breaker_cache_ms.to_string()),
        (
            "SALE_RETRY_MAX_ATTEMPTS",
            customer.sale_retry_max_attempts.to_string(),
        ),
        (
            "SALE_SWITCH_TIMEOUT_MS",
            customer.sale_switch_timeout_ms.to_string(),
        ),
        (
            "SALE_ON_SALE_HOLD_S",
            customer.sale_on_sale_hold_s.to_string(),
        ),
        (
            "SALE_OFF_SALE_HOLD_S",
            customer.sale_off_sale_hold_s.to_string(),
        ),
        ("SALE_STATUS_STORE", "dynamodb".to_owned()),
        ("SALE_SWITCH", "table".to_owned()),
        ("ORDER_SETTINGS", customer.order_settings),
        ("BOOKING_RUN_MS", customer.booking_run_ms.to_string()),
        (settings::OPERATORS, OPERATORS.join(",")),
        (settings::OPERATOR_SETTINGS, String::new()),
    ])
}

/// The environment the local suite gives the functions when it runs
/// `deployed` (with the customer half).
async fn suite_env(
    moto: &MotoServer,
    sdk: &SdkConfig,
    deployed: &Deployed,
    wiring: &Wiring,
) -> BTreeMap<String, String> {
    let mut options = SuiteOptions::new(OperatorId::new(OPERATORS[0]).unwrap());
    options.customer = Some(CustomerOptions::default());
    let operators: Vec<OperatorId> = OPERATORS
        .iter()
        .map(|o| OperatorId::new(*o).unwrap())
        .collect();
    let resources = SuiteResources::from_stack(sdk, deployed.clone(), wiring.clone(), &operators)
        .await
        .unwrap();
    function_env(&moto.endpoint(), &resources, &options)
        .unwrap()
        .into_iter()
        .collect()
}

/// A lane's Requests mapping as lifeboat's code and simulations assume it
/// (the settings in `template.rs`).
fn lane_mapping(operator: &str) -> Mapping {
    Mapping {
        source: format!("RequestsTable{}", operator.replace('-', "")),
        function: REAL_CONSUMER.to_owned(),
        starting_position: Some("LATEST".to_owned()),
        batch_size: Some(template::BATCH_SIZE),
        maximum_batching_window_in_seconds: Some(template::MAXIMUM_BATCHING_WINDOW_IN_SECONDS),
        parallelization_factor: Some(template::PARALLELIZATION_FACTOR),
        bisect_batch_on_function_error: Some(template::BISECT_BATCH_ON_FUNCTION_ERROR),
        maximum_retry_attempts: Some(template::MAXIMUM_RETRY_ATTEMPTS),
        maximum_record_age_in_seconds: Some(template::MAXIMUM_RECORD_AGE_IN_SECONDS),
        filter_patterns: vec![serde_json::from_str(template::FILTER_PATTERN).unwrap()],
        on_failure: Some("RequestsFailedQueue".to_owned()),
        function_response_types: vec!["ReportBatchItemFailures".to_owned()],
        maximum_concurrency: None,
    }
}

/// One line in `found` when `stack` and `suite` differ.
fn differ<T: PartialEq + std::fmt::Debug>(
    found: &mut Vec<String>,
    what: String,
    stack: &T,
    suite: &T,
) {
    if stack != suite {
        found.push(format!(
            "{what}: the stack has {stack:?}, the local suite {suite:?}"
        ));
    }
}

/// Where the deployed stack differs from what the local suite runs on, one
/// line each; empty when they agree.
fn differences(
    deployed: &Deployed,
    wiring: &Wiring,
    suite_env: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut found = Vec::new();

    // Every function's environment: the variables it reads, each one in the
    // suite's too, resources naming the stack's, the consumers their
    // functions, settings with the suite's defaults.
    let expected_functions: BTreeSet<&str> = function_variables().keys().copied().collect();
    let deployed_functions: BTreeSet<&str> =
        wiring.environments.keys().map(String::as_str).collect();
    differ(
        &mut found,
        "functions".to_owned(),
        &deployed_functions,
        &expected_functions,
    );
    for (binary, own) in function_variables() {
        let Some(env) = wiring.environments.get(binary) else {
            continue;
        };
        let reads: BTreeSet<&str> = GLOBALS.iter().chain(&own).copied().collect();
        let given: BTreeSet<&str> = env.keys().map(String::as_str).collect();
        differ(&mut found, format!("{binary}'s variables"), &given, &reads);
        for name in &given {
            if !suite_env.contains_key(*name) {
                found.push(format!(
                    "{binary}: the stack sets {name}, the local suite does not"
                ));
            }
        }
        for (name, logical_id) in RESOURCE_VARIABLES {
            if let Some(value) = env.get(name) {
                differ(
                    &mut found,
                    format!("{binary}'s {name}"),
                    &Some(value.as_str()),
                    &deployed.physical_id(logical_id),
                );
            }
        }
        for (name, consumer) in [
            (clients::REAL_CONSUMER_FUNCTION, REAL_CONSUMER),
            (clients::FALLBACK_CONSUMER_FUNCTION, FALLBACK_CONSUMER),
        ] {
            if let Some(arn) = env.get(name) {
                differ(
                    &mut found,
                    format!("{binary}'s {name}"),
                    &deployed.name_of_arn(arn),
                    &consumer.to_owned(),
                );
            }
        }
        for (name, default) in default_settings() {
            if let Some(value) = env.get(name) {
                differ(&mut found, format!("{binary}'s {name}"), value, &default);
            }
        }
        if let Some(prefix) = env.get(clients::REQUESTS_TABLE_PREFIX) {
            differ(
                &mut found,
                format!("{binary}'s {}", clients::REQUESTS_TABLE_PREFIX),
                &Some(prefix.as_str()),
                &deployed
                    .outputs
                    .get("RequestsTablePrefix")
                    .map(String::as_str),
            );
        }
    }

    // A lane per operator: its table, named after the prefix, and its
    // mapping with the settings the suite's lanes have.
    let prefix = deployed
        .outputs
        .get("RequestsTablePrefix")
        .cloned()
        .unwrap_or_default();
    for operator in OPERATORS {
        let id = operator.replace('-', "");
        differ(
            &mut found,
            format!("RequestsTable{id}'s name"),
            &deployed.physical_id(&format!("RequestsTable{id}")),
            &Some(format!("{prefix}{operator}").as_str()),
        );
        differ(
            &mut found,
            format!("RequestsMapping{id}"),
            &wiring.mappings.get(&format!("RequestsMapping{id}")),
            &Some(&lane_mapping(operator)),
        );
    }
    // The queue mappings the suite's queue pumps play.
    for (id, source, function, batch_size) in [
        (
            "OffsaleQueueMapping",
            "OffsaleQueue",
            OFFSALE_LISTENER,
            template::OFFSALE_BATCH_SIZE,
        ),
        (
            "BreakerTimerQueueMapping",
            "BreakerTimerQueue",
            CIRCUIT_SWITCH,
            template::TIMER_BATCH_SIZE,
        ),
    ] {
        let mapping = wiring.mappings.get(id);
        differ(
            &mut found,
            id.to_owned(),
            &mapping.map(|m| {
                (
                    m.source.as_str(),
                    m.function.as_str(),
                    m.batch_size,
                    m.function_response_types.clone(),
                )
            }),
            &Some((
                source,
                function,
                Some(batch_size),
                vec!["ReportBatchItemFailures".to_owned()],
            )),
        );
    }

    // The rules the suite creates (and drains), and the tick it plays.
    let pattern = |text: &str| serde_json::from_str::<Value>(text).unwrap();
    let rule = |id: &str| {
        wiring.rules.get(id).map(|r| {
            (
                r.bus.as_str(),
                r.pattern.clone(),
                r.schedule.clone(),
                r.targets.clone(),
            )
        })
    };
    differ(
        &mut found,
        "TripRequestedRule".to_owned(),
        &rule("TripRequestedRule"),
        &Some((
            "EventBus",
            Some(pattern(template::SWITCH_RULE_PATTERN)),
            None::<String>,
            BTreeMap::from([(CIRCUIT_SWITCH.to_owned(), CIRCUIT_SWITCH.to_owned())]),
        )),
    );
    differ(
        &mut found,
        "BreakerStateChangedRule".to_owned(),
        &rule("BreakerStateChangedRule"),
        &Some((
            "EventBus",
            Some(pattern(template::OFFSALE_RULE_PATTERN)),
            None::<String>,
            BTreeMap::from([(
                template::OFFSALE_TARGET_ID.to_owned(),
                "OffsaleQueue".to_owned(),
            )]),
        )),
    );
    // Both schedules are played by a ticker at the suite's period.
    let tick = SuiteOptions::new(OperatorId::new(OPERATORS[0]).unwrap()).tick_every;
    for (id, function) in [
        ("HalfOpenScheduleRule", CIRCUIT_SWITCH),
        ("BookingScheduleRule", BOOKING_WORKER),
    ] {
        differ(
            &mut found,
            id.to_owned(),
            &rule(id).map(|(_, _, schedule, targets)| (schedule, targets)),
            &Some((
                Some(format!("rate({} minute)", tick.as_secs() / 60)),
                BTreeMap::from([(function.to_owned(), function.to_owned())]),
            )),
        );
    }

    // The queues the suite creates with settings.
    let queue = |id: &str| wiring.queues.get(id).cloned().unwrap_or_default();
    differ(
        &mut found,
        "OffsaleQueue".to_owned(),
        &queue("OffsaleQueue"),
        &wiring::Queue {
            visibility_timeout_s: Some(template::OFFSALE_VISIBILITY_TIMEOUT),
            dead_letter: Some((
                "OffsaleDeadLetterQueue".to_owned(),
                template::OFFSALE_MAX_RECEIVE_COUNT,
            )),
        },
    );
    differ(
        &mut found,
        "BreakerTimerQueue's visibility timeout".to_owned(),
        &queue("BreakerTimerQueue").visibility_timeout_s,
        &Some(template::TIMER_QUEUE_VISIBILITY_S),
    );
    found
}

/// What `value` names when it is a `Ref` or a `Fn::GetAtt`: a logical id.
fn named_resource(value: &Value) -> Option<&str> {
    value.get("Ref").and_then(Value::as_str).or_else(|| {
        value
            .get("Fn::GetAtt")
            .and_then(|g| g.get(0))
            .and_then(Value::as_str)
    })
}

/// The `Fn::Sub` strings under `value`.
fn sub_texts<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(text)) = map.get("Fn::Sub") {
                found.push(text);
            }
            map.values().for_each(|v| sub_texts(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| sub_texts(v, found)),
        _ => {}
    }
}

/// Each `${Name}` (or `${Name.Arn}`) placeholder of a `Fn::Sub` string:
/// the name, and the text after the placeholder.
fn placeholders(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split("${").skip(1).filter_map(|rest| {
        let (name, after) = rest.split_once('}')?;
        Some((name.strip_suffix(".Arn").unwrap_or(name), after))
    })
}

/// Where the translated `template` invokes a function by the function
/// itself rather than its `live` alias, one line each: a gradual deploy
/// shifts the alias, so an invocation past it would reach the new code at
/// once and untested by the canary. The places: event source mappings,
/// permissions, rule targets, alarm actions, the HTTP API's integrations
/// and the functions' environment (the circuit switch re-points the lanes
/// to what REAL_CONSUMER_FUNCTION and FALLBACK_CONSUMER_FUNCTION name).
/// CapacityCheck's ServiceToken is the one function ARN allowed (see the
/// template). A function without an alias is named too.
fn invocations_past_the_alias(template: &Value) -> Vec<String> {
    let resources = template["Resources"].as_object().unwrap();
    let of_type = |wanted: &str| -> BTreeSet<&str> {
        resources
            .iter()
            .filter(|(_, r)| r["Type"] == wanted)
            .map(|(id, _)| id.as_str())
            .collect()
    };
    let functions = of_type("AWS::Lambda::Function");
    let aliased: BTreeSet<&str> = resources
        .values()
        .filter(|r| r["Type"] == "AWS::Lambda::Alias")
        .filter_map(|r| named_resource(&r["Properties"]["FunctionName"]))
        .collect();
    let mut found: Vec<String> = functions
        .difference(&aliased)
        .map(|f| format!("{f} has no alias"))
        .collect();
    // A function named in a Fn::Sub string and not followed by `:live`.
    let past_alias_in = |text: &str| -> Option<String> {
        placeholders(text)
            .find(|(name, after)| functions.contains(name) && !after.starts_with(":live"))
            .map(|(name, _)| name.to_owned())
    };
    // A Ref or GetAtt of a function, or a Fn::Sub naming one past its alias.
    let past_alias = |value: &Value| -> Option<String> {
        match named_resource(value) {
            Some(id) => functions.contains(id).then(|| id.to_owned()),
            None => past_alias_in(value.get("Fn::Sub").and_then(Value::as_str)?),
        }
    };
    // Each place an invocation names, with the function it names past its
    // alias, if any.
    let mut places: Vec<(String, Option<String>)> = Vec::new();
    for (id, r) in resources {
        let properties = &r["Properties"];
        let list = |key: &str| properties[key].as_array().cloned().unwrap_or_default();
        match r["Type"].as_str().unwrap_or_default() {
            "AWS::Lambda::EventSourceMapping" | "AWS::Lambda::Permission" => {
                places.push((
                    format!("{id}'s FunctionName"),
                    past_alias(&properties["FunctionName"]),
                ));
            }
            "AWS::Events::Rule" => {
                for target in list("Targets") {
                    places.push((
                        format!("{id}'s target {}", target["Id"]),
                        past_alias(&target["Arn"]),
                    ));
                }
            }
            "AWS::CloudWatch::Alarm" => {
                for action in list("AlarmActions").iter().chain(&list("OKActions")) {
                    places.push((format!("{id}'s action"), past_alias(action)));
                }
            }
            "AWS::Lambda::Function" => {
                let variables = properties["Environment"]["Variables"].as_object();
                for (name, value) in variables.into_iter().flatten() {
                    places.push((format!("{id}'s {name}"), past_alias(value)));
                }
            }
            "AWS::ApiGatewayV2::Api" => {
                let mut texts = Vec::new();
                sub_texts(&properties["Body"], &mut texts);
                for text in texts {
                    places.push((format!("{id}'s integration"), past_alias_in(text)));
                }
            }
            _ => {}
        }
    }
    found.extend(
        places
            .into_iter()
            .filter_map(|(place, id)| Some(format!("{place} names {} itself", id?))),
    );
    found
}

/// Deploy `template` as `stack` in `moto` and read its wiring.
async fn deploy_and_read(sdk: &SdkConfig, stack: &str, template: &Path) -> (Deployed, Wiring) {
    let deployed = deploy(sdk, stack, template, &parameters())
        .await
        .unwrap_or_else(|e| panic!("deploying {}: {e}", template.display()));
    let wiring = wiring::read(sdk, &deployed).await.unwrap();
    (deployed, wiring)
}

/// The real template deploys whole into moto, and what it wires is what
/// the local suite runs on.
#[tokio::test]
async fn the_template_deploys_into_moto_as_the_local_suite_runs_it() {
    let moto = MotoServer::start_program(&moto_launcher().unwrap())
        .await
        .unwrap();
    let sdk = moto.sdk_config().await;
    let (deployed, wiring) = deploy_and_read(&sdk, "lifeboat", &template_path()).await;

    // Every resource the transform makes, each created.
    let made: Vec<&String> = deployed.template["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r.get("Condition").is_none())
        .map(|(id, _)| id)
        .collect();
    let missing: Vec<&&String> = made
        .iter()
        .filter(|id| !deployed.resources.contains_key(id.as_str()))
        .collect();
    assert!(missing.is_empty(), "not created: {missing:?}");
    assert!(made.len() > 70, "{} resources", made.len());
    for resource_type in [
        "AWS::CloudWatch::Alarm",
        "AWS::SQS::QueuePolicy",
        "AWS::Lambda::Alias",
        "AWS::CodeDeploy::DeploymentGroup",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::ApiGatewayV2::Api",
        "AWS::ApiGatewayV2::Stage",
    ] {
        assert!(
            deployed.of_type(resource_type).next().is_some(),
            "{resource_type}"
        );
    }
    // Only the capacity check waits: nothing runs the circuit switch here.
    assert_eq!(deployed.pending(), vec!["CapacityCheck"]);
    assert_eq!(deployed.physical_id("EventBus"), Some("lifeboat-events"));
    assert_eq!(
        deployed.outputs.get("ErrorsAlarmName").map(String::as_str),
        Some(template::ERRORS_ALARM_NAME)
    );
    let binaries: BTreeSet<String> = deployed.binaries().into_values().collect();
    assert_eq!(
        binaries,
        [
            REAL_CONSUMER,
            FALLBACK_CONSUMER,
            CIRCUIT_SWITCH,
            SEARCH,
            CART,
            OFFSALE_LISTENER,
            BOOKING_WORKER
        ]
        .map(str::to_owned)
        .into()
    );
    // The circuit switch's asynchronous invocations go to the delivery
    // dead-letter queue, as the template's EventInvokeConfig says.
    let config = aws_sdk_lambda::Client::new(&sdk)
        .get_function_event_invoke_config()
        .function_name(deployed.physical_id("CircuitSwitchFunction").unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(config.maximum_retry_attempts(), Some(2));

    let env = suite_env(&moto, &sdk, &deployed, &wiring).await;
    let found = differences(&deployed, &wiring, &env);
    assert!(found.is_empty(), "{found:#?}");

    // Gradual deploys: every function behind its alias, invoked only
    // through it, each alias under a deployment group that the functions'
    // errors alarm rolls back.
    let past = invocations_past_the_alias(&deployed.template);
    assert!(past.is_empty(), "{past:#?}");
    assert_eq!(
        deployed.of_type("AWS::Lambda::Alias").count(),
        binaries.len()
    );
    assert_eq!(
        deployed
            .of_type("AWS::CodeDeploy::DeploymentGroup")
            .filter(|id| {
                let group = &deployed.definition(id).unwrap()["Properties"];
                group["AlarmConfiguration"]["Alarms"][0]["Name"]["Ref"] == "FunctionErrorsAlarm"
            })
            .count(),
        binaries.len()
    );

    // A stack holds 500 resources; the template promises 200 operators at
    // two each (a Requests table and its mapping). Every resource counts,
    // conditional or not.
    let all = deployed.template["Resources"].as_object().unwrap().len();
    let per_stack = all - 2 * OPERATORS.len();
    assert!(
        per_stack + 2 * 200 <= 500,
        "{per_stack} resources besides the lanes: 200 operators no longer fit"
    );
    moto.stop().await;
}

/// A template that invokes a function past its alias, in a lane's mapping
/// or a rule's target, is named by the check above.
#[tokio::test]
async fn an_invocation_past_the_alias_is_named() {
    let original = std::fs::read_to_string(template_path()).unwrap();
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!("template-past-alias-{}.yaml", std::process::id()));
    let mut broken = original.clone();
    for (from, to) in [
        (
            "          FunctionName: !Ref RealConsumerFunction.Alias\n",
            "          FunctionName: !Ref RealConsumerFunction\n",
        ),
        (
            "          Arn: !Ref BookingWorkerFunction.Alias\n",
            "          Arn: !GetAtt BookingWorkerFunction.Arn\n",
        ),
        (
            "FALLBACK_CONSUMER_FUNCTION: !Sub \"${FallbackConsumerFunction.Arn}:live\"",
            "FALLBACK_CONSUMER_FUNCTION: !GetAtt FallbackConsumerFunction.Arn",
        ),
    ] {
        assert_eq!(original.matches(from).count(), 1, "{from:?}");
        broken = broken.replacen(from, to, 1);
    }
    std::fs::write(&copy, broken).unwrap();
    let translated = translate(&copy, &parameters()).await;
    let _ = std::fs::remove_file(&copy);
    let mut found = invocations_past_the_alias(&translated.unwrap());
    found.sort();
    assert_eq!(
        found,
        [
            "BookingScheduleRule's target \"booking-worker\" names BookingWorkerFunction itself",
            "CircuitSwitchFunction's FALLBACK_CONSUMER_FUNCTION names FallbackConsumerFunction itself",
            "RequestsMappingbaltic's FunctionName names RealConsumerFunction itself",
            "RequestsMappingnordic's FunctionName names RealConsumerFunction itself",
        ]
    );
}

/// A copy of template.yaml with one thing changed, each a mistake that
/// passed every test while the suite built its resources by hand: the
/// check names it.
#[tokio::test]
async fn a_broken_template_copy_fails_the_check() {
    let original = std::fs::read_to_string(template_path()).unwrap();
    let breaks: [(&str, &str, &str, &[&str]); 5] = [
        (
            "a lane's batch size",
            "          BatchSize: 50\n          # Callers are waiting",
            "          BatchSize: 25\n          # Callers are waiting",
            &["RequestsMappingnordic", "RequestsMappingbaltic"],
        ),
        (
            "search without its cache table",
            "          CACHE_TABLE: !Ref CacheTable\n          OPERATORS: !Join [\",\", !Ref Operators]\n          # how long",
            "          OPERATORS: !Join [\",\", !Ref Operators]\n          # how long",
            &["search's variables"],
        ),
        (
            "the switch deaf to passed trials",
            "        detail-type: [Trip Requested, Trials Passed]",
            "        detail-type: [Trip Requested]",
            &["TripRequestedRule"],
        ),
        (
            "the off-sale queue's visibility",
            "      VisibilityTimeout: 90\n",
            "      VisibilityTimeout: 60\n",
            &["OffsaleQueue"],
        ),
        (
            "the booking worker ticked every five minutes",
            "booking worker\n      ScheduleExpression: rate(1 minute)",
            "booking worker\n      ScheduleExpression: rate(5 minutes)",
            &["BookingScheduleRule"],
        ),
    ];
    let moto = MotoServer::start_program(&moto_launcher().unwrap())
        .await
        .unwrap();
    let sdk = moto.sdk_config().await;
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    std::fs::create_dir_all(&dir).unwrap();
    for (n, (what, from, to, named)) in breaks.into_iter().enumerate() {
        assert_eq!(original.matches(from).count(), 1, "{what}: {from:?}");
        let copy = dir.join(format!("template-broken-{}-{n}.yaml", std::process::id()));
        std::fs::write(&copy, original.replacen(from, to, 1)).unwrap();
        let (deployed, wiring) = deploy_and_read(&sdk, &format!("broken{n}"), &copy).await;
        let _ = std::fs::remove_file(&copy);
        let env = suite_env(&moto, &sdk, &deployed, &wiring).await;
        let found = differences(&deployed, &wiring, &env);
        assert_eq!(found.len(), named.len(), "{what}: {found:#?}");
        for (line, named) in found.iter().zip(named) {
            assert!(line.starts_with(named), "{what}: {found:#?}");
        }
    }
    moto.stop().await;
}

/// A template the SAM transform refuses is an error naming it, not a stack.
#[tokio::test]
async fn a_template_the_transform_refuses_is_an_error() {
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!("template-refused-{}.yaml", std::process::id()));
    let original = std::fs::read_to_string(template_path()).unwrap();
    let broken = original.replacen(
        "    Handler: bootstrap\n    CodeUri: .\n",
        "    Handler: bootstrap\n    CodeUri: .\n    NoSuchProperty: 1\n",
        1,
    );
    assert_ne!(broken, original);
    std::fs::write(&copy, broken).unwrap();
    let error = tokio::time::timeout(Duration::from_secs(120), translate(&copy, &parameters()))
        .await
        .unwrap()
        .unwrap_err();
    let _ = std::fs::remove_file(&copy);
    assert!(
        matches!(&error, StackError::Translate { detail, .. } if detail.contains("NoSuchProperty")),
        "{error}"
    );
}
