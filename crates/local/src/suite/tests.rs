use std::collections::BTreeMap;

use super::env::changed_keys;
use super::*;
use crate::moto::resources;

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

const TEMPLATE: &str = include_str!("../../../../template.yaml");

/// The text of one resource of the template.
fn resource(name: &str) -> &'static str {
    let start = TEMPLATE
        .find(&format!("\n  {name}:\n"))
        .unwrap_or_else(|| panic!("{name} is not in template.yaml"));
    let rest = &TEMPLATE[start + 1..];
    let end = rest[name.len() + 4..]
        .find("\n  # ")
        .map_or(rest.len(), |i| i + name.len() + 4);
    &rest[..end]
}

/// The options of the stacks here: `nordic` with a neighbour, `baltic`.
fn stack_options() -> (SuiteOptions, Vec<(OperatorId, String)>) {
    let mut options = SuiteOptions::new(nordic());
    options.neighbours = vec![OperatorId::new("baltic").unwrap()];
    let endpoints = vec![
        (nordic(), "http://127.0.0.1:1".to_owned()),
        (
            OperatorId::new("baltic").unwrap(),
            "http://127.0.0.1:2".to_owned(),
        ),
    ];
    (options, endpoints)
}

/// moto as the suite runs it, and an SDK configuration for it.
async fn launcher_moto() -> (MotoServer, SdkConfig) {
    let moto = MotoServer::start_program(&moto_launcher().unwrap())
        .await
        .unwrap();
    let sdk = moto.sdk_config().await;
    (moto, sdk)
}

/// The template's stack as the suite deploys it, read back.
async fn deployed(
    sdk: &SdkConfig,
    options: &SuiteOptions,
    endpoints: &[(OperatorId, String)],
) -> SuiteResources {
    let parameters = stack_parameters(options, endpoints);
    let (stack, wiring) = from_stack::deploy_stack(sdk, options, &parameters)
        .await
        .unwrap();
    let operators: Vec<OperatorId> = endpoints.iter().map(|(o, _)| o.clone()).collect();
    SuiteResources::from_stack(sdk, stack, wiring, &operators)
        .await
        .unwrap()
}

/// A moto that outlives a run keeps the stack: the next run finds it, with
/// the same names, and refuses it when it would deploy other parameters.
#[tokio::test]
async fn the_stack_in_moto_is_used_again() {
    let (moto, sdk) = launcher_moto().await;
    let (options, endpoints) = stack_options();
    let first = deployed(&sdk, &options, &endpoints).await;
    assert_eq!(first.lanes.len(), 2);
    assert_eq!(first.lane().requests_table, "lifeboat.requests.nordic");
    let second = deployed(&sdk, &options, &endpoints).await;
    assert_eq!(second, first);

    let mut other = endpoints.clone();
    other[0].1 = "http://127.0.0.1:3".to_owned();
    let parameters = stack_parameters(&options, &other);
    let e = from_stack::deploy_stack(&sdk, &options, &parameters)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SuiteError::StackParameters { differing, .. } if differing.contains("OperatorEndpoints")),
        "{e}"
    );

    // Another template under the same name is refused too.
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!("template-again-{}.yaml", std::process::id()));
    let text = std::fs::read_to_string(&options.template).unwrap();
    std::fs::write(
        &copy,
        text.replacen("BatchSize: 50\n", "BatchSize: 25\n", 1),
    )
    .unwrap();
    let mut changed = options.clone();
    changed.template = copy.clone();
    let e = from_stack::deploy_stack(&sdk, &changed, &stack_parameters(&changed, &endpoints))
        .await
        .unwrap_err();
    let _ = std::fs::remove_file(&copy);
    assert!(matches!(&e, SuiteError::StackTemplate { .. }), "{e}");
    moto.stop().await;
}

#[test]
fn a_schedule_ticks_a_tick_period_for_each_minute_of_its_rate() {
    let schedule = |expression: &str| Schedule {
        rule: "SaleSweepRule".to_owned(),
        rule_name: "lifeboat-SaleSweepRule".to_owned(),
        expression: expression.to_owned(),
        function: OFFSALE_LISTENER.to_owned(),
    };
    let tick = Duration::from_secs(2);
    assert_eq!(schedule("rate(1 minute)").period(tick), tick);
    assert_eq!(schedule("rate(5 minutes)").period(tick), tick * 5);
    assert_eq!(schedule("rate(1 hour)").period(tick), tick * 60);
    assert_eq!(schedule("cron(0 * * * ? *)").period(tick), tick);
}

/// The stack's functions run with one environment; every variable each
/// sets is there, with the stack's values (the customer half's only with
/// it).
#[tokio::test]
async fn the_functions_run_with_the_stacks_environment() {
    let (moto, sdk) = launcher_moto().await;
    let (mut options, endpoints) = stack_options();
    options.customer = Some(CustomerOptions {
        sale_on_sale_hold_s: 2,
        ..CustomerOptions::default()
    });
    let resources = deployed(&sdk, &options, &endpoints).await;
    let env: BTreeMap<String, String> = function_env(&moto.endpoint(), &resources, &options)
        .unwrap()
        .into_iter()
        .collect();
    for variables in resources.wiring.environments.values() {
        for (key, value) in variables {
            assert_eq!(env.get(key), Some(value), "{key}");
        }
    }
    assert_eq!(env["SALE_ON_SALE_HOLD_S"], "2");
    assert_eq!(
        env["OPERATOR_ENDPOINTS"],
        "nordic=http://127.0.0.1:1,baltic=http://127.0.0.1:2"
    );
    assert!(env["REAL_CONSUMER_FUNCTION"].ends_with(":live"), "{env:?}");
    assert_eq!(env["AWS_ENDPOINT_URL"], moto.endpoint());

    // Without the customer half, none of its functions' own variables.
    options.customer = None;
    let gateway: BTreeMap<String, String> = function_env(&moto.endpoint(), &resources, &options)
        .unwrap()
        .into_iter()
        .collect();
    assert!(!gateway.contains_key("CART_SETTINGS"), "{gateway:?}");
    assert!(gateway.contains_key("BREAKER_TIMER_QUEUE_URL"));
    moto.stop().await;
}

/// With moto's own delivery attempts, every write emptied the stream, every
/// message sent to a mapped queue vanished, and an event for a rule with a
/// Lambda target failed PutEvents as a whole. Under the launcher each stays
/// for the harness: the stream keeps its records, the timer queue its
/// message, and a Trip Requested lands in the switch's target queue.
#[tokio::test]
async fn what_moto_would_deliver_itself_waits_for_the_harness() {
    let (moto, sdk) = launcher_moto().await;
    let (options, endpoints) = stack_options();
    let resources = deployed(&sdk, &options, &endpoints).await;
    let lane = resources.lane().clone();
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    for id in ["a", "b", "c"] {
        dynamodb
            .put_item()
            .table_name(&lane.requests_table)
            .item(
                "request_id",
                aws_sdk_dynamodb::types::AttributeValue::S(id.into()),
            )
            .send()
            .await
            .unwrap();
    }
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let shards = streams
        .describe_stream()
        .stream_arn(&lane.stream_arn)
        .send()
        .await
        .unwrap()
        .stream_description
        .unwrap()
        .shards
        .unwrap();
    let iterator = streams
        .get_shard_iterator()
        .stream_arn(&lane.stream_arn)
        .shard_id(shards[0].shard_id().unwrap())
        .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap()
        .shard_iterator
        .unwrap();
    let records = streams
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .unwrap()
        .records
        .unwrap();
    let sequences: std::collections::BTreeSet<&str> = records
        .iter()
        .filter_map(|r| r.dynamodb()?.sequence_number())
        .collect();
    assert_eq!((records.len(), sequences.len()), (3, 3));
    let mapping = read_mapping(&aws_sdk_lambda::Client::new(&sdk), &lane.mapping_uuid)
        .await
        .unwrap();
    assert_eq!(mapping.stream_arn, lane.stream_arn);
    assert_eq!(resources.binaries[&mapping.function], REAL_CONSUMER);
    assert_eq!(mapping.batch_size, 50);
    assert!(mapping.report_item_failures && mapping.bisect_on_error);

    // The timer queue's mapping into the switch leaves its messages alone.
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let timers = resources
        .queue_mappings
        .iter()
        .find(|m| m.function == CIRCUIT_SWITCH)
        .unwrap();
    sqs.send_message()
        .queue_url(&timers.queue.url)
        .message_body("{}")
        .send()
        .await
        .unwrap();
    let kept = sqs
        .receive_message()
        .queue_url(&timers.queue.url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(kept.len(), 1);

    // TripRequestedRule targets the switch's alias: the event waits in
    // the switch's queue.
    let targets = resources.create_target_queues(&sdk).await.unwrap();
    let (target, queue) = targets
        .iter()
        .find(|(t, _)| t.function == CIRCUIT_SWITCH)
        .unwrap();
    assert!(
        target.rules.contains(&"TripRequestedRule".to_owned()),
        "{target:?}"
    );
    let put = aws_sdk_eventbridge::Client::new(&sdk)
        .put_events()
        .entries(
            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .event_bus_name(&resources.names.bus)
                .source("lifeboat")
                .detail_type("Trip Requested")
                .detail(r#"{"operator":"nordic"}"#)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(put.failed_entry_count(), 0);
    let delivered = sqs
        .receive_message()
        .queue_url(&queue.url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(delivered[0].body().unwrap().contains("Trip Requested"));
    moto.stop().await;
}

/// The stream mapping the template stamps out for each operator's lane
/// (`RequestsMapping&{Operator}` in `Fn::ForEach::RequestsLanes`).
fn lane_mapping() -> &'static str {
    let start = TEMPLATE
        .find("\n      RequestsMapping&{Operator}:\n")
        .unwrap_or_else(|| panic!("no lane mapping in template.yaml"))
        + 1;
    let rest = &TEMPLATE[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

#[test]
fn the_mapping_has_the_templates_settings() {
    let mapping = lane_mapping();
    for line in [
        format!("BatchSize: {}", template::BATCH_SIZE),
        format!(
            "MaximumBatchingWindowInSeconds: {}",
            template::MAXIMUM_BATCHING_WINDOW_IN_SECONDS
        ),
        "ParallelizationFactor: !Ref LaneParallelization".to_owned(),
        format!("MaximumRetryAttempts: {}", template::MAXIMUM_RETRY_ATTEMPTS),
        format!(
            "MaximumRecordAgeInSeconds: {}",
            template::MAXIMUM_RECORD_AGE_IN_SECONDS
        ),
        format!(
            "BisectBatchOnFunctionError: {}",
            template::BISECT_BATCH_ON_FUNCTION_ERROR
        ),
        "StartingPosition: LATEST".to_owned(),
        "FunctionResponseTypes: [ReportBatchItemFailures]".to_owned(),
        format!("- Pattern: '{}'", template::FILTER_PATTERN),
    ] {
        assert!(mapping.contains(&line), "template mapping lacks {line:?}");
    }
    // `lifeboat local` provisions the parameter's default.
    assert!(
        entry("LaneParallelization")
            .contains(&format!("Default: {}", template::PARALLELIZATION_FACTOR))
    );
}

#[test]
fn the_customer_tables_have_the_templates_keys() {
    // As resources::create_cache_table, create_carts_table and
    // create_sale_status_table make them.
    for (table, key, ttl) in [
        ("CacheTable", "cache_key", true),
        ("CartsTable", "cart_id", true),
        ("SaleStatusTable", "operator", false),
    ] {
        let text = resource(table);
        assert!(
            text.contains(&format!(
                "- AttributeName: {key}\n          AttributeType: S"
            )),
            "{table} has no string attribute {key}"
        );
        assert!(
            text.contains(&format!("- AttributeName: {key}\n          KeyType: HASH")),
            "{table} is not keyed by {key}"
        );
        assert!(!text.contains("KeyType: RANGE"), "{table} has a sort key");
        let ttl_line = format!("AttributeName: {}", resources::TTL_ATTRIBUTE);
        assert_eq!(
            text.contains("TimeToLiveSpecification") && text.contains(&ttl_line),
            ttl,
            "{table}'s TTL"
        );
    }
}

#[test]
fn the_orders_table_has_the_templates_key_index_and_ttl() {
    // As resources::create_orders_table makes it (docs/orders.md).
    let text = resource("OrdersTable");
    for (attribute, kind) in [("pk", "S"), ("open_operator", "S"), ("open_at", "N")] {
        assert!(
            text.contains(&format!(
                "- AttributeName: {attribute}\n          AttributeType: {kind}"
            )),
            "OrdersTable has no {kind} attribute {attribute}"
        );
    }
    assert!(text.contains("- AttributeName: pk\n          KeyType: HASH"));
    assert!(text.contains(&format!(
        "- IndexName: {}",
        lifeboat_aws::orders::OPEN_BY_OPERATOR
    )));
    assert!(text.contains("- AttributeName: open_operator\n              KeyType: HASH"));
    assert!(text.contains("- AttributeName: open_at\n              KeyType: RANGE"));
    assert!(text.contains("ProjectionType: ALL"));
    assert!(text.contains(&format!("AttributeName: {}", resources::TTL_ATTRIBUTE)));
    assert!(text.contains("BillingMode: PAY_PER_REQUEST"));
    // The cart reaches it, and nothing more of it than it needs.
    let cart = entry("CartFunction");
    assert!(cart.contains("ORDERS_TABLE: !Ref OrdersTable"));
    assert!(cart.contains("- !GetAtt OrdersTable.Arn"));
    assert!(cart.contains("${OrdersTable.Arn}/index/open-by-operator"));
    assert!(!cart.contains("dynamodb:Scan"), "the cart scans nothing");
}

#[test]
fn every_table_is_encrypted_and_no_delivery_is_lost_silently() {
    assert_eq!(
        TEMPLATE.matches("Type: AWS::DynamoDB::Table").count(),
        TEMPLATE.matches("SSEEnabled: true").count(),
        "a table without SSESpecification"
    );
    let policy = entry("DeliveryDeadLetterQueuePolicy");
    for rule in [
        "BreakerStateChangedRule",
        "AlarmStateChangeRule",
        "TripRequestedRule",
        "HalfOpenScheduleRule",
        "SaleSweepRule",
        "BookingScheduleRule",
    ] {
        assert!(
            entry(rule).contains("Arn: !GetAtt DeliveryDeadLetterQueue.Arn"),
            "{rule} has no dead-letter target"
        );
        assert!(policy.contains(&format!("!GetAtt {rule}.Arn")), "{rule}");
    }
    let switch = entry("CircuitSwitchFunction");
    assert!(switch.contains("Destination: !GetAtt DeliveryDeadLetterQueue.Arn"));
    assert!(entry("DeliveryDeadLetterAlarm").contains("DeliveryDeadLetterQueue.QueueName"));
    assert!(entry("LifeboatHttpApi").contains("DestinationArn: !GetAtt ApiAccessLogGroup.Arn"));
}

#[test]
fn failed_dependency_calls_alarm_and_show_on_the_dashboard() {
    let metric = lifeboat_core::watched::METRIC;
    let alarm = entry("DependencyErrorsAlarm");
    assert!(alarm.contains(&format!("MetricName: {metric}")), "{alarm}");
    assert!(alarm.contains("Namespace: Lifeboat"), "{alarm}");
    assert!(
        entry("LifeboatDashboard").contains(&format!(
            "{{Lifeboat,Dependency}} MetricName=\\\"{metric}\\\""
        )),
        "the dashboard has no DependencyErrors series"
    );
}

#[test]
fn the_public_api_is_authenticated_throttled_and_capped() {
    let api = entry("LifeboatHttpApi");
    assert!(api.contains("ThrottlingRateLimit: !Ref ApiRateLimit"));
    // infra/check-api-auth transforms the template in both modes and checks
    // every route; this holds the text it transforms.
    assert!(api.contains("DefaultAuthorizer: !If [ApiJwtAuth, MarketplaceJwt, AWS_IAM]"));
    assert!(entry("ApiAuth").contains("Default: iam"));
    assert!(entry("ApiAuth").contains("AllowedValues: [iam, jwt]"));
    for (function, reserved) in [
        ("RealConsumerFunction", "!Ref RealConsumerConcurrency"),
        ("FallbackConsumerFunction", "10"),
        ("CircuitSwitchFunction", "20"),
        ("OffsaleListenerFunction", "5"),
        ("BookingWorkerFunction", "1"),
        ("SearchFunction", "!Ref SearchConcurrencyCap"),
        ("CartFunction", "!Ref CartConcurrencyCap"),
    ] {
        assert!(
            entry(function).contains(&format!(
                "ReservedConcurrentExecutions: !If [ReservesConcurrency, {reserved}, !Ref AWS::NoValue]"
            )),
            "{function}"
        );
    }
}

#[test]
fn only_lifeboats_functions_put_events_and_the_listener_checks_changes() {
    let policy = bus_statement("OnlyLifeboatFunctionsPutEvents");
    assert!(policy.contains("Effect: Deny") && policy.contains("ArnNotEquals"));
    for function in [
        "RealConsumerFunction",
        "FallbackConsumerFunction",
        "CircuitSwitchFunction",
        "OffsaleListenerFunction",
        "BookingWorkerFunction",
        "CartFunction",
    ] {
        // Every function allowed to put events is one the policy lets through.
        assert!(entry(function).contains("events:PutEvents"), "{function}");
        assert!(
            policy.contains(&format!("!GetAtt {function}Role.Arn")),
            "{function}"
        );
    }
    assert!(
        !entry("SearchFunction").contains("events:PutEvents"),
        "search publishes nothing"
    );
    let listener = entry("OffsaleListenerFunction");
    assert!(listener.contains("OPERATORS: !Join"));
    assert!(listener.contains("Resource: !GetAtt BreakerTable.Arn"));
}

#[test]
fn every_alarm_reaches_a_person_and_has_a_runbook_entry() {
    const RUNBOOK: &str = include_str!("../../../../docs/operating.md");
    let lines: Vec<&str> = TEMPLATE.lines().collect();
    let alarms: Vec<&str> = lines
        .windows(2)
        .filter(|pair| pair[1] == "    Type: AWS::CloudWatch::Alarm")
        .filter_map(|pair| pair[0].strip_prefix("  ")?.strip_suffix(':'))
        .collect();
    assert!(alarms.len() >= 7, "{alarms:?}");
    for alarm in alarms {
        let body: Vec<&str> = entry(alarm).lines().collect();
        for key in ["AlarmActions", "OKActions"] {
            let at = body
                .iter()
                .position(|l| l.starts_with(&format!("      {key}:")))
                .unwrap_or_else(|| panic!("{alarm} has no {key}"));
            // The key's line and the list items under it.
            let actions: Vec<&str> = std::iter::once(body[at])
                .chain(
                    body[at + 1..]
                        .iter()
                        .copied()
                        .take_while(|l| l.starts_with("        ")),
                )
                .collect();
            assert!(
                actions.iter().any(|l| l.contains("!Ref AlarmTopic")),
                "{alarm}: {key} {actions:?}"
            );
        }
        assert!(
            RUNBOOK.contains(&format!("| `{alarm}`")),
            "{alarm} has no entry in docs/operating.md's \"Alarms and queues\""
        );
    }
}

#[test]
fn each_function_puts_only_the_detail_types_it_publishes() {
    use lifeboat_core::events::*;
    let publishes = [
        (
            "RealConsumer",
            vec![TRIP_REQUESTED, TRIALS_PASSED, OPERATOR_REQUEST_FAILED],
        ),
        ("FallbackConsumer", vec![OPERATOR_REQUEST_FAILED]),
        ("CircuitSwitch", vec![BREAKER_STATE_CHANGED]),
        (
            "OffsaleListener",
            vec![
                OPERATOR_REQUEST_FAILED,
                SALE_SWITCH_WRITE_FAILED,
                SELF_FAULT_SUSPECTED,
            ],
        ),
        (
            "BookingWorker",
            lifeboat_core::order::StateName::ALL
                .iter()
                .map(|s| s.detail_type())
                .collect(),
        ),
        // A customer's reply: held again at the price accepted, or refunded.
        (
            "Cart",
            [
                lifeboat_core::order::StateName::Held,
                lifeboat_core::order::StateName::Refunded,
            ]
            .iter()
            .map(|s| s.detail_type())
            .collect(),
        ),
    ];
    let mut covered = Vec::new();
    for (function, types) in &publishes {
        let statement = bus_statement(&format!("{function}PutsOnlyItsOwnEvents"));
        assert!(statement.contains("Effect: Deny"), "{function}");
        assert!(
            statement.contains(&format!(
                "aws:PrincipalArn: !GetAtt {function}FunctionRole.Arn"
            )),
            "{function}"
        );
        let listed: Vec<&str> = statement
            .split_once("events:detail-type:")
            .unwrap_or_else(|| panic!("{function}: no detail-type condition"))
            .1
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("- "))
            .collect();
        assert_eq!(&listed, types, "{function}");
        covered.extend(types.iter().copied());
    }
    // Every event lifeboat defines has a publisher allowed to put it.
    for detail_type in [
        BREAKER_STATE_CHANGED,
        OPERATOR_REQUEST_FAILED,
        TRIP_REQUESTED,
        TRIALS_PASSED,
        SALE_SWITCH_WRITE_FAILED,
        SELF_FAULT_SUSPECTED,
    ]
    .into_iter()
    .chain(
        lifeboat_core::order::StateName::ALL
            .iter()
            .map(|s| s.detail_type()),
    ) {
        assert!(covered.contains(&detail_type), "{detail_type}");
    }
}

/// The statement `sid` of the bus's policy (`EventBus`'s `Policy`): from
/// its `- Sid:` line to the next.
fn bus_statement(sid: &str) -> &'static str {
    let bus = entry("EventBus");
    let start = bus
        .find(&format!("- Sid: {sid}\n"))
        .unwrap_or_else(|| panic!("the bus's policy has no statement {sid}"));
    let rest = &bus[start + 2..];
    rest.find("- Sid: ").map_or(rest, |end| &rest[..end])
}

/// The text of one top-level entry (a parameter or a resource): up to
/// the next line indented by two spaces only.
fn entry(name: &str) -> &'static str {
    let start = TEMPLATE
        .find(&format!("\n  {name}:\n"))
        .unwrap_or_else(|| panic!("{name} is not in template.yaml"))
        + 1;
    let rest = &TEMPLATE[start..];
    let end = rest
        .match_indices("\n  ")
        .map(|(i, _)| i)
        .find(|&i| {
            rest[i + 3..]
                .chars()
                .next()
                .is_some_and(|c| !c.is_whitespace())
        })
        .unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn the_timer_queue_has_the_templates_settings() {
    let queue = entry("BreakerTimerQueue");
    assert!(queue.contains(&format!(
        "VisibilityTimeout: {}",
        template::TIMER_QUEUE_VISIBILITY_S
    )));
    let mapping = entry("BreakerTimerQueueMapping");
    assert!(mapping.contains("EventSourceArn: !GetAtt BreakerTimerQueue.Arn"));
    assert!(mapping.contains("FunctionName: !Ref CircuitSwitchFunction.Alias\n"));
    assert!(mapping.contains(&format!("BatchSize: {}", template::TIMER_BATCH_SIZE)));
    assert!(mapping.contains("FunctionResponseTypes: [ReportBatchItemFailures]"));
    let switch = entry("CircuitSwitchFunction");
    assert!(switch.contains("BREAKER_TIMER_QUEUE_URL: !Ref BreakerTimerQueue"));
    assert!(switch.contains("OPERATOR_ENDPOINTS: !Ref OperatorEndpoints"));
}

#[test]
fn the_offsale_wiring_has_the_templates_settings() {
    let rule = entry("BreakerStateChangedRule");
    assert!(rule.contains("source: [lifeboat]"));
    assert!(rule.contains("detail-type: [Breaker State Changed]"));
    assert!(rule.contains(&format!("- Id: {}", template::OFFSALE_TARGET_ID)));
    assert!(rule.contains("Arn: !GetAtt OffsaleQueue.Arn"));
    let pattern: Value = serde_json::from_str(template::OFFSALE_RULE_PATTERN).unwrap();
    assert_eq!(
        pattern,
        json!({"source": ["lifeboat"], "detail-type": ["Breaker State Changed"]})
    );
    let queue = entry("OffsaleQueue");
    assert!(queue.contains(&format!(
        "VisibilityTimeout: {}",
        template::OFFSALE_VISIBILITY_TIMEOUT
    )));
    assert!(queue.contains(&format!(
        "maxReceiveCount: {}",
        template::OFFSALE_MAX_RECEIVE_COUNT
    )));
    assert!(queue.contains("deadLetterTargetArn: !GetAtt OffsaleDeadLetterQueue.Arn"));
    let mapping = entry("OffsaleQueueMapping");
    assert!(mapping.contains("EventSourceArn: !GetAtt OffsaleQueue.Arn"));
    assert!(mapping.contains(&format!("BatchSize: {}", template::OFFSALE_BATCH_SIZE)));
    assert!(mapping.contains("MaximumBatchingWindowInSeconds: 0"));
    assert!(mapping.contains("FunctionResponseTypes: [ReportBatchItemFailures]"));
    let listener = entry("OffsaleListenerFunction");
    assert!(listener.contains(&format!("Binary: {OFFSALE_LISTENER}")));
    for variable in [
        "SALE_STATUS_STORE: dynamodb",
        "SALE_STATUS_TABLE: !Ref SaleStatusTable",
        "OFFSALE_QUEUE_URL: !Ref OffsaleQueue",
    ] {
        assert!(listener.contains(variable), "{variable}");
    }
    assert!(
        entry("SaleRetryMaxAttempts")
            .contains(&format!("Default: {}", template::SALE_RETRY_MAX_ATTEMPTS))
    );
    assert!(
        entry("SaleSwitchTimeoutMs")
            .contains(&format!("Default: {}", template::SALE_SWITCH_TIMEOUT_MS))
    );
    assert!(
        entry("SaleOnSaleHoldSeconds")
            .contains(&format!("Default: {}", template::SALE_ON_SALE_HOLD_S))
    );
    assert!(listener.contains("SALE_ON_SALE_HOLD_S: !Ref SaleOnSaleHoldSeconds"));
    assert!(
        entry("SaleOffSaleHoldSeconds")
            .contains(&format!("Default: {}", template::SALE_OFF_SALE_HOLD_S))
    );
    assert!(listener.contains("SALE_OFF_SALE_HOLD_S: !Ref SaleOffSaleHoldSeconds"));
    assert!(entry("BreakerCacheMs").contains(&format!("Default: {}", template::BREAKER_CACHE_MS)));
    for function in ["SearchFunction", "CartFunction"] {
        assert!(
            entry(function).contains("BREAKER_CACHE_MS: !Ref BreakerCacheMs"),
            "{function}"
        );
    }
}

/// The booking worker as the local suite runs it: its binary, its run's
/// length, one run at a time, and its schedule's target.
#[test]
fn the_booking_worker_has_the_templates_settings() {
    let worker = entry("BookingWorkerFunction");
    assert!(worker.contains(&format!("Binary: {BOOKING_WORKER}")));
    assert!(worker.contains("ReservedConcurrentExecutions: !If [ReservesConcurrency, 1,"));
    for variable in [
        "ORDERS_TABLE: !Ref OrdersTable",
        "ORDER_SETTINGS: !Ref OrderSettings",
        "BOOKING_RUN_MS: !Ref BookingRunMs",
    ] {
        assert!(worker.contains(variable), "{variable}");
    }
    assert!(entry("BookingRunMs").contains(&format!("Default: {}", template::BOOKING_RUN_MS)));
    assert!(entry("OrderSettings").contains("Default: \"\""));
    let rule = entry("BookingScheduleRule");
    assert!(rule.contains("ScheduleExpression: rate(1 minute)"));
    assert!(rule.contains(&format!("- Id: {BOOKING_WORKER}")));
    assert!(rule.contains("Arn: !Ref BookingWorkerFunction.Alias"));
    let customer = CustomerOptions::default();
    assert_eq!(customer.booking_run_ms, template::BOOKING_RUN_MS);
    assert_eq!(customer.order_settings, "");
}

#[test]
fn api_routes_are_the_templates() {
    let mut routes = 0;
    for (resource, binary) in [("SearchFunction", SEARCH), ("CartFunction", CART)] {
        let text = entry(resource);
        assert!(text.contains(&format!("Binary: {binary}")));
        for line in text.lines().map(str::trim) {
            if let Some(path) = line.strip_prefix("Path: ") {
                let concrete = path.replace("{cart_id}", "0b6f4c1e-3c1f-4a55-9d43-6f0d3a1e2b7c");
                assert_eq!(api_function(&concrete), Some(binary), "{path}");
                assert_eq!(
                    api_function(&format!("{concrete}?passengers=2")),
                    Some(binary),
                    "{path} with a query"
                );
                routes += 1;
            }
        }
    }
    assert_eq!(routes, 9, "two search routes and seven cart routes");
    for unrouted in ["/", "/sailing", "/prices", "/carts/a/b/c", "/other/carts"] {
        assert_eq!(api_function(unrouted), None, "{unrouted}");
    }
}

#[test]
fn the_switch_rule_has_the_templates_pattern() {
    let rule = resource("TripRequestedRule");
    assert!(rule.contains("source: [lifeboat]"));
    assert!(rule.contains("detail-type: [Trip Requested, Trials Passed]"));
    let pattern: Value = serde_json::from_str(template::SWITCH_RULE_PATTERN).unwrap();
    assert_eq!(
        pattern,
        json!({"source": ["lifeboat"], "detail-type": ["Trip Requested", "Trials Passed"]})
    );
    assert!(resource("RealConsumerFunction").contains("CallConcurrency"));
    assert!(TEMPLATE.contains(&format!("Default: {}", template::CALL_CONCURRENCY)));
    assert!(TEMPLATE.contains(&format!("Default: {}", template::ALARM_OPERATORS)));
}

#[test]
fn the_env_file_is_what_cargo_lambda_reads_back() {
    let env = vec![
        ("BREAKER_TABLE".to_owned(), "Breaker".to_owned()),
        (
            "OPERATOR_SETTINGS".to_owned(),
            r#"{"default":{"cache":{"recent":20000}}}"#.to_owned(),
        ),
    ];
    let text = env_file_text(&env).unwrap();
    assert!(text.starts_with("# "), "{text}");
    assert!(text.contains("BREAKER_TABLE='Breaker'\n"));
    assert!(text.contains(r#"OPERATOR_SETTINGS='{"default":{"cache":{"recent":20000}}}'"#));
    let quoted = vec![("CART_SETTINGS".to_owned(), "it's".to_owned())];
    let e = env_file_text(&quoted).unwrap_err();
    assert!(e.to_string().contains("CART_SETTINGS"), "{e}");

    let mut other = env.clone();
    other[1].1 = "{}".to_owned();
    other.push(("NEW".to_owned(), "1".to_owned()));
    let changed = changed_keys(&text, &env_file_text(&other).unwrap());
    assert_eq!(changed, "NEW, OPERATOR_SETTINGS");
}

#[test]
fn the_local_alarm_has_the_templates_rule() {
    let alarm = resource("RealConsumerErrorsAlarm");
    for line in [
        "Namespace: Lifeboat".to_owned(),
        "MetricName: FailedOperatorCalls".to_owned(),
        "- Name: Operator".to_owned(),
        "Statistic: Sum".to_owned(),
        format!("Period: {}", template::ALARM_PERIOD_S),
        format!("EvaluationPeriods: {}", template::ALARM_EVALUATION_PERIODS),
        format!("DatapointsToAlarm: {}", template::ALARM_DATAPOINTS),
        "ComparisonOperator: GreaterThanOrEqualToThreshold".to_owned(),
        "TreatMissingData: notBreaching".to_owned(),
    ] {
        assert!(alarm.contains(&line), "RealConsumerErrorsAlarm has {line}");
    }
    assert!(TEMPLATE.contains(&format!(
        "FailedOperatorCalls:\n      Threshold: \"{}\"",
        template::ALARM_THRESHOLD
    )));
    assert!(TEMPLATE.contains(&format!("Default: {}", template::ERRORS_ALARM_NAME)));
    assert!(template::ALARM_OPERATORS.starts_with(&format!("{}=", template::ERRORS_ALARM_NAME)));
}

/// Every function writes to a log group of its own that keeps its lines
/// `LogRetentionDays`, and no `LogLevel` the template offers makes the Lambda
/// runtime write raw events.
#[test]
fn every_function_logs_to_a_group_with_retention_and_never_at_trace() {
    let lines: Vec<&str> = TEMPLATE.lines().collect();
    let functions: Vec<&str> = lines
        .windows(2)
        .filter(|pair| pair[1].trim() == "Type: AWS::Serverless::Function")
        .filter_map(|pair| pair[0].strip_prefix("  ")?.strip_suffix(':'))
        .collect();
    assert_eq!(functions.len(), 7, "{functions:?}");
    for function in functions {
        let name = function.strip_suffix("Function").unwrap();
        assert!(
            entry(function).contains(&format!(
                "      LoggingConfig:\n        LogGroup: !Ref {name}LogGroup\n"
            )),
            "{function} writes to {name}LogGroup"
        );
        let group = entry(&format!("{name}LogGroup"));
        assert!(
            group.contains("RetentionInDays: !Ref LogRetentionDays"),
            "{group}"
        );
        assert!(
            group.contains(&format!("/aws/lambda/${{AWS::StackName}}/{function}\"")),
            "{group}"
        );
    }
    assert!(entry("ApiAccessLogGroup").contains("RetentionInDays: !Ref LogRetentionDays"));
    let allowed = entry("LogLevel")
        .lines()
        .find_map(|line| line.trim().strip_prefix("AllowedValues: "))
        .unwrap();
    assert_eq!(allowed, "[DEBUG, INFO, WARN, ERROR, FATAL]");
}

/// What the suite runs is what the template says: a copy of template.yaml
/// changed in three places (search and cart's breaker cache, a lane's batch
/// size, the trip rule's target) changes the functions' environment, the
/// mapping the lane's pump reads and the rules the harness drains.
#[tokio::test]
async fn a_changed_template_changes_what_the_suite_runs() {
    let original =
        std::fs::read_to_string(crate::watch::workspace_root().join("template.yaml")).unwrap();
    let changed = original
        .replace(
            "          BREAKER_CACHE_MS: !Ref BreakerCacheMs",
            "          BREAKER_CACHE_MS: \"250\"",
        )
        .replacen("          BatchSize: 50\n", "          BatchSize: 25\n", 1)
        .replacen(
            "detail-type: [Trip Requested, Trials Passed]\n      State: ENABLED\n      Targets:\n        - Id: circuit-switch\n          Arn: !Ref CircuitSwitchFunction.Alias\n",
            "detail-type: [Trip Requested, Trials Passed]\n      State: ENABLED\n      Targets:\n        - Id: circuit-switch\n          Arn: !GetAtt DeliveryDeadLetterQueue.Arn\n",
            1,
        );
    assert_eq!(
        changed.matches("BREAKER_CACHE_MS: \"250\"").count(),
        2,
        "both functions' variable changed"
    );
    assert!(changed.contains("BatchSize: 25\n"));
    assert!(
        changed
            .contains("- Id: circuit-switch\n          Arn: !GetAtt DeliveryDeadLetterQueue.Arn\n")
    );
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!("template-changed-{}.yaml", std::process::id()));
    std::fs::write(&copy, changed).unwrap();

    let (moto, sdk) = launcher_moto().await;
    let (mut options, endpoints) = stack_options();
    options.customer = Some(CustomerOptions::default());
    let original = deployed(&sdk, &options, &endpoints).await;
    options.template = copy.clone();
    options.stack_name = "changed".to_owned();
    let resources = deployed(&sdk, &options, &endpoints).await;
    let _ = std::fs::remove_file(&copy);

    let env = |resources: &SuiteResources| -> BTreeMap<String, String> {
        function_env(&moto.endpoint(), resources, &options)
            .unwrap()
            .into_iter()
            .collect()
    };
    assert_eq!(env(&original)["BREAKER_CACHE_MS"], "1000");
    assert_eq!(env(&resources)["BREAKER_CACHE_MS"], "250");
    let lambda = aws_sdk_lambda::Client::new(&sdk);
    let batch = |resources: &SuiteResources| {
        let uuid = resources.lane().mapping_uuid.clone();
        let lambda = lambda.clone();
        async move { read_mapping(&lambda, &uuid).await.unwrap().batch_size }
    };
    assert_eq!(batch(&original).await, 50);
    assert_eq!(batch(&resources).await, 25);
    let drained = |resources: &SuiteResources| -> Vec<String> {
        resources
            .rule_targets
            .iter()
            .flat_map(|t| t.rules.clone())
            .collect()
    };
    assert!(drained(&original).contains(&"TripRequestedRule".to_owned()));
    assert!(!drained(&resources).contains(&"TripRequestedRule".to_owned()));
    moto.stop().await;
}
