//! A lane per operator on moto: each operator's requests in a table of its
//! own, each table's stream on a mapping of its own, the circuit switch
//! finding those mappings by their stream's table and re-pointing exactly
//! the operator that tripped.

use std::collections::BTreeMap;

use chrono::DateTime;
use lifeboat_aws::{DynamoRequestStore, RequestTables, discover_lanes};
use lifeboat_core::breaker::ConsumerTarget;
use lifeboat_core::lane::LaneError;
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::ports::{OutcomeWrite, RequestStore};
use lifeboat_core::request::{FailureReason, Outcome, RequestRecord};
use lifeboat_local::moto::MotoServer;
use lifeboat_local::moto::resources;

const PREFIX: &str = "lanes.requests.";

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).expect("valid operator id")
}

fn request(id: &str, operator: &str) -> RequestRecord {
    RequestRecord {
        request_id: id.to_owned(),
        operator: op(operator),
        operation: Operation::Search,
        params: BTreeMap::from([("from".to_owned(), "HEL".to_owned())]),
        created_at: DateTime::from_timestamp(1_796_000_000, 0).expect("time"),
        deadline: DateTime::from_timestamp(1_796_000_003, 0).expect("time"),
    }
}

#[tokio::test]
async fn each_operator_has_its_own_table_and_mapping_and_only_its_own_moves() {
    let moto = MotoServer::start().await.expect("moto_server starts");
    let config = moto.sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let lambda = aws_sdk_lambda::Client::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let role = resources::create_lambda_role(&iam, "lanes-role")
        .await
        .expect("role");
    let real = resources::create_stub_function(&lambda, "lanes-real", &role)
        .await
        .expect("real consumer");
    resources::create_stub_function(&lambda, "lanes-fallback", &role)
        .await
        .expect("fallback consumer");
    let operators = [op("alpha"), op("bravo"), op("charlie-line")];
    let mut mappings = BTreeMap::new();
    for operator in &operators {
        let table = resources::create_requests_table(&dynamodb, &format!("{PREFIX}{operator}"))
            .await
            .expect("lane table");
        let uuid = resources::create_stream_mapping(&lambda, &table.stream_arn, "lanes-real")
            .await
            .expect("lane mapping");
        mappings.insert(operator.clone(), uuid);
    }
    // Another stack's table on the same consumer is not a lane of ours.
    let other = resources::create_requests_table(&dynamodb, "someone-else-requests")
        .await
        .expect("other table");
    resources::create_stream_mapping(&lambda, &other.stream_arn, "lanes-real")
        .await
        .expect("other mapping");

    // Requests go to their operator's table, and are found only there.
    let tables = RequestTables::PerOperator {
        prefix: PREFIX.to_owned(),
    };
    let store = DynamoRequestStore::with_tables(dynamodb.clone(), tables.clone());
    store.put_request(&request("r-a", "alpha")).await.unwrap();
    store.put_request(&request("r-b", "bravo")).await.unwrap();
    let in_table = |table: String, id: &'static str| {
        let dynamodb = dynamodb.clone();
        async move {
            dynamodb
                .get_item()
                .table_name(table)
                .key(
                    "request_id",
                    aws_sdk_dynamodb::types::AttributeValue::S(id.into()),
                )
                .send()
                .await
                .unwrap()
                .item
                .is_some()
        }
    };
    assert!(in_table(format!("{PREFIX}alpha"), "r-a").await);
    assert!(!in_table(format!("{PREFIX}bravo"), "r-a").await);
    assert!(in_table(format!("{PREFIX}bravo"), "r-b").await);
    assert!(store.get(&op("bravo"), "r-a").await.unwrap().is_none());
    let outcome = Outcome::failed(
        FailureReason::BreakerOpen,
        "open",
        DateTime::from_timestamp(1_796_000_001, 0).expect("time"),
        "fallback-consumer",
    );
    assert_eq!(
        store
            .write_outcome(&op("alpha"), "r-a", &outcome)
            .await
            .unwrap(),
        OutcomeWrite::Written
    );
    assert_eq!(
        store
            .get(&op("alpha"), "r-a")
            .await
            .unwrap()
            .and_then(|s| s.outcome),
        Some(outcome)
    );

    // The switch's lanes: one per operator, found by table.
    let lanes = discover_lanes(&lambda, &tables, &real, "lanes-fallback", &operators)
        .await
        .expect("lanes");
    assert_eq!(lanes.len(), 3);
    let alpha = lanes.of(&op("alpha")).expect("alpha's lane");
    alpha
        .router
        .point_at(ConsumerTarget::Fallback)
        .await
        .unwrap();
    for operator in &operators {
        let lane = lanes.of(operator).expect("a lane");
        let expected = if operator == &op("alpha") {
            ConsumerTarget::Fallback
        } else {
            ConsumerTarget::Real
        };
        assert_eq!(lane.router.current().await.unwrap(), expected, "{operator}");
        let function = lambda
            .get_event_source_mapping()
            .uuid(&mappings[operator])
            .send()
            .await
            .unwrap()
            .function_arn
            .unwrap_or_default();
        assert_eq!(
            function.ends_with(":lanes-fallback"),
            expected == ConsumerTarget::Fallback,
            "{operator}: {function}"
        );
    }
    // A lane found on the fallback consumer is still that operator's lane.
    let again = discover_lanes(&lambda, &tables, &real, "lanes-fallback", &operators)
        .await
        .expect("lanes again");
    assert_eq!(again.len(), 3);

    // An operator without a table and mapping is a clear error.
    let missing = discover_lanes(
        &lambda,
        &tables,
        &real,
        "lanes-fallback",
        &[op("alpha"), op("delta")],
    )
    .await;
    assert!(
        matches!(
            missing,
            Err(lifeboat_aws::LaneDiscoveryError::Layout(LaneError::OnNoLane(ref o))) if o == &op("delta")
        ),
        "{missing:?}"
    );
}
