//! `--stack` on moto: a CloudFormation stack with the template's logical ids
//! (its tables, functions and lane mapping), read by the status command's
//! resolution and `gather`, and by the `lifeboat` binary as an on-call
//! shell runs it with nothing but `--stack` (or a samconfig.toml) to go on;
//! and the one-line errors of a stack that is not there, a stack missing a
//! resource, and an endpoint that does not speak CloudWatch's protocol.
//! Each test starts its own moto_server on a free loopback port and stops it.
//!
//! What moto_server 5.2.1 cannot do here, as checked:
//!
//! * its CloudFormation makes no function version or alias (the consumers'
//!   `live` aliases here): moto runs with lifeboat-local's launcher, whose
//!   CloudFormation changes (crates/local/src/suite/moto_cloudformation.py)
//!   make them, as `lifeboat local` and the template's own deploy into moto
//!   do. The stack below has no alarm, so `detection` is given `--alarm`;
//! * it answers CloudWatch's Smithy RPC v2 CBOR calls in a way the SDK cannot
//!   decode, so `lifeboat detection` on moto ends in the error that says so.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Output;

use lifeboat_aws::{Clients, DynamoBreakerStore, DynamoOrderStore, Env};
use lifeboat_cli::ops::aws::{LaneConfig, StatusConfig, StatusFlags};
use lifeboat_cli::ops::stack::{self, Stack};
use lifeboat_cli::ops::status::{self, Lookup};
use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
use lifeboat_core::order::{HeldOrder, HoldReason};
use lifeboat_core::ports::{BreakerStore, Held, OrderStore};
use lifeboat_core::{BreakerRecord, BreakerState, ConsumerTarget, OperatorId};
use lifeboat_local::moto::MotoServer;
use lifeboat_local::suite::moto_launcher;

mod support;

/// The resources `status`, `carts`, `orders` and `config` read, with template.yaml's
/// logical ids (the lane of operator `nordic`: `RequestsTable&{Operator}`
/// stamped as `RequestsTablenordic`), the `AlarmOperators` parameter and the
/// `RequestsTablePrefix` output. The functions are stand-ins: nothing runs
/// in them; the lane's mapping points at the real consumer's alias `live`,
/// as the template's do.
const TEMPLATE: &str = r#"
AWSTemplateFormatVersion: "2010-09-09"
Parameters:
  AlarmOperators:
    Type: String
    Default: lifeboat-nordic-errors=nordic
Resources:
  RequestsTablenordic:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${AWS::StackName}.requests.nordic"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: request_id, AttributeType: S}
      KeySchema:
        - {AttributeName: request_id, KeyType: HASH}
      StreamSpecification:
        StreamViewType: NEW_AND_OLD_IMAGES
  BreakerTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: operator, AttributeType: S}
        - {AttributeName: item, AttributeType: S}
      KeySchema:
        - {AttributeName: operator, KeyType: HASH}
        - {AttributeName: item, KeyType: RANGE}
  CartsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: cart_id, AttributeType: S}
      KeySchema:
        - {AttributeName: cart_id, KeyType: HASH}
  SaleStatusTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: operator, AttributeType: S}
      KeySchema:
        - {AttributeName: operator, KeyType: HASH}
  OrdersTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
  OperatorConfigTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: name, AttributeType: S}
      KeySchema:
        - {AttributeName: name, KeyType: HASH}
  FunctionRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Principal: {Service: lambda.amazonaws.com}
            Action: sts:AssumeRole
  RealConsumerFunction:
    Type: AWS::Lambda::Function
    Properties:
      Runtime: python3.12
      Handler: index.handler
      Role: !GetAtt FunctionRole.Arn
      Code: {ZipFile: "def handler(event, context): pass"}
  FallbackConsumerFunction:
    Type: AWS::Lambda::Function
    Properties:
      Runtime: python3.12
      Handler: index.handler
      Role: !GetAtt FunctionRole.Arn
      Code: {ZipFile: "def handler(event, context): pass"}
  CircuitSwitchFunction:
    Type: AWS::Lambda::Function
    Properties:
      Runtime: python3.12
      Handler: index.handler
      Role: !GetAtt FunctionRole.Arn
      Code: {ZipFile: "def handler(event, context): pass"}
  RealConsumerVersion:
    Type: AWS::Lambda::Version
    Properties:
      FunctionName: !Ref RealConsumerFunction
  RealConsumerAlias:
    Type: AWS::Lambda::Alias
    Properties:
      FunctionName: !Ref RealConsumerFunction
      FunctionVersion: !GetAtt RealConsumerVersion.Version
      Name: live
  FallbackConsumerVersion:
    Type: AWS::Lambda::Version
    Properties:
      FunctionName: !Ref FallbackConsumerFunction
  FallbackConsumerAlias:
    Type: AWS::Lambda::Alias
    Properties:
      FunctionName: !Ref FallbackConsumerFunction
      FunctionVersion: !GetAtt FallbackConsumerVersion.Version
      Name: live
  RequestsMappingnordic:
    Type: AWS::Lambda::EventSourceMapping
    Properties:
      EventSourceArn: !GetAtt RequestsTablenordic.StreamArn
      FunctionName: !Ref RealConsumerAlias
      StartingPosition: LATEST
Outputs:
  RequestsTablePrefix:
    Value: !Sub "${AWS::StackName}.requests."
  RealConsumerAlias:
    Value: !Ref RealConsumerAlias
  FallbackConsumerAlias:
    Value: !Ref FallbackConsumerAlias
"#;

/// A stack with only the Breaker table: what a failed or partial deploy
/// leaves.
const PARTIAL: &str = r#"
AWSTemplateFormatVersion: "2010-09-09"
Resources:
  BreakerTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: operator, AttributeType: S}
        - {AttributeName: item, AttributeType: S}
      KeySchema:
        - {AttributeName: operator, KeyType: HASH}
        - {AttributeName: item, KeyType: RANGE}
"#;

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

/// A cart of nordic's confirmed off sale at `at`, held as its order.
fn held_order(at: chrono::DateTime<chrono::Utc>) -> HeldOrder {
    let sailing = Sailing {
        sailing_id: "s1".into(),
        from: "HEL".into(),
        to: "TLL".into(),
        date: "2026-12-24".into(),
        passengers: 2,
    };
    let mut cart = Cart::open(
        "c1".into(),
        op("nordic"),
        sailing,
        true,
        &CartPolicy::default(),
        at,
    );
    cart.confirmation = Some(Confirmation {
        at,
        amount_cents: 7_800,
        currency: "EUR".into(),
        on_cached_price: true,
        price_as_of: at,
        absorbed_cents: 0,
    });
    HeldOrder::hold(&cart, None, Vec::new(), 0, HoldReason::OffSale, at).unwrap()
}

async fn create_stack(moto: &MotoServer, name: &str, template: &str) {
    let cloudformation = aws_sdk_cloudformation::Client::new(&moto.sdk_config().await);
    cloudformation
        .create_stack()
        .stack_name(name)
        .template_body(template)
        .send()
        .await
        .unwrap();
}

/// moto with stack `lifeboat` deployed and nordic's breaker forced open in
/// its Breaker table; the table's name, which moto makes up.
async fn deployed() -> (MotoServer, String) {
    let moto = MotoServer::start_program(&moto_launcher().unwrap())
        .await
        .expect("moto_server starts");
    create_stack(&moto, "lifeboat", TEMPLATE).await;
    let sdk = moto.sdk_config().await;
    let named = stack::name_stack(Some("lifeboat"), Path::new(".")).unwrap();
    let description = stack::describe(&aws_sdk_cloudformation::Client::new(&sdk), &named)
        .await
        .unwrap();
    let table = description.resources["BreakerTable"].clone();
    let mut record = BreakerRecord::initial(op("nordic"), chrono::Utc::now());
    record.state = BreakerState::ForcedOpen;
    record.version = 1;
    record.reason = "force-open: maintenance".into();
    DynamoBreakerStore::new(Clients::new(&sdk).dynamodb().clone(), &table)
        .save(&record, None)
        .await
        .unwrap();
    (moto, table)
}

/// An empty directory of this test's own (no samconfig.toml unless written).
fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lifeboat-stack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `lifeboat …` in `dir` against moto, with no resource named in its
/// environment.
async fn lifeboat(moto: &MotoServer, dir: &Path, args: &[&str]) -> Output {
    support::lifeboat(moto, Some(dir), args).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn status_resolves_everything_from_the_stack_and_gathers() {
    let (moto, breaker_table) = deployed().await;
    let sdk = moto.sdk_config().await;
    let dir = workdir("resolve");

    let flags = StatusFlags::default();
    assert!(flags.leave_unnamed(&Env::default()));
    let stack = stack::find(Some("lifeboat"), true, &dir, &sdk)
        .await
        .unwrap();
    let Stack::Read(description) = &stack else {
        panic!("{stack:?}")
    };
    assert_eq!(description.status, "CREATE_COMPLETE");
    let config = StatusConfig::resolve(&flags, &Env::default(), &stack).unwrap();
    assert_eq!(config.breaker_table, breaker_table);
    assert_eq!(
        config.sale_status_table.as_deref().unwrap(),
        description.resources["SaleStatusTable"]
    );
    let mapping = config.mapping.as_ref().unwrap();
    assert_eq!(
        mapping.lanes,
        LaneConfig::PerOperator {
            prefix: "lifeboat.requests.".into()
        }
    );
    // The consumers' aliases, which the lanes' mappings name.
    assert_eq!(
        mapping.real_consumer,
        format!(
            "arn:aws:lambda:us-east-1:123456789012:function:{}:live",
            description.resources["RealConsumerFunction"]
        )
    );
    assert_eq!(
        mapping.fallback_consumer,
        description.outputs["FallbackConsumerAlias"]
    );
    assert!(mapping.fallback_consumer.ends_with(":live"));

    let adapters = config.adapters(&Clients::new(&sdk)).await;
    let report = status::gather(&adapters.sources(), None, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(report.stream, None, "a lane per operator: no shared stream");
    assert_eq!(report.operators.len(), 1);
    let nordic = &report.operators[0];
    assert_eq!(nordic.operator, op("nordic"));
    assert_eq!(nordic.breaker.state, BreakerState::ForcedOpen);
    assert!(
        matches!(&nordic.sale, Lookup::Ok(sale) if !sale.stored),
        "{nordic:?}"
    );
    assert!(
        matches!(&nordic.stream, Lookup::Ok(view) if view.target == ConsumerTarget::Real),
        "{:?}",
        nordic.stream
    );
    assert!(!report.has_failures());
    let _ = std::fs::remove_dir_all(&dir);
    moto.stop().await;
}

#[tokio::test]
async fn the_binary_finds_the_stack_by_flag_or_samconfig_and_says_what_is_wrong() {
    let (moto, _) = deployed().await;
    let dir = workdir("binary");

    // --stack alone.
    let out = lifeboat(&moto, &dir, &["status", "--stack", "lifeboat"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("OPERATOR  BREAKER"), "{stdout}");
    assert!(!stdout.contains("requests stream"), "{stdout}");
    let nordic = stdout.lines().find(|l| l.starts_with("nordic")).unwrap();
    assert!(
        nordic.contains("forced_open") && nordic.contains("real consumer"),
        "{nordic}"
    );

    // Nothing named anywhere: the message says every way to name it.
    let out = lifeboat(&moto, &dir, &["status"]).await;
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "lifeboat status: no breaker table: pass --breaker-table or set BREAKER_TABLE, or \
         name the stack with --stack (environment variable BREAKER_TABLE is not set; no \
         --stack given and no samconfig.toml in the current directory)\n"
    );

    // samconfig.toml's stack, as sam deploy has it.
    std::fs::write(
        dir.join("samconfig.toml"),
        "version = 0.1\n[default.global.parameters]\nstack_name = \"lifeboat\"\n",
    )
    .unwrap();
    let out = lifeboat(&moto, &dir, &["status", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["operators"][0]["operator"], "nordic");
    assert_eq!(json["operators"][0]["breaker"]["state"], "forced_open");
    assert_eq!(json.get("stream"), None);

    // A stack that is not there: one line, naming it and the region.
    let out = lifeboat(&moto, &dir, &["status", "--stack", "nosuch"]).await;
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "lifeboat status: stack nosuch does not exist in us-east-1: check the name, the \
         region (AWS_REGION or the profile's) and the account your credentials are for\n"
    );

    // The other commands read the same stack: carts (both tables from it),
    // orders (an order held in its Orders table a minute ago), config show
    // (its operator config table).
    let out = lifeboat(&moto, &dir, &["carts", "--minutes", "--since", "5m"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sdk = moto.sdk_config().await;
    let named = stack::name_stack(Some("lifeboat"), Path::new(".")).unwrap();
    let description = stack::describe(&aws_sdk_cloudformation::Client::new(&sdk), &named)
        .await
        .unwrap();
    let orders = DynamoOrderStore::new(
        Clients::new(&sdk).dynamodb().clone(),
        &description.resources["OrdersTable"],
    );
    let order = held_order(chrono::Utc::now() - chrono::TimeDelta::minutes(1));
    assert_eq!(orders.hold(&order, None).await.unwrap(), Held::Held);
    let out = lifeboat(&moto, &dir, &["orders", "--json", "--since", "5m"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["now"][0]["operator"], "nordic", "{json}");
    assert_eq!(json["now"][0]["held"], 1, "{json}");
    let held_minutes = json["minutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["held"].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(held_minutes, 1, "{json}");
    let out = lifeboat(&moto, &dir, &["orders", "--operator", "nordic"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("held orders from"), "{stdout}");
    let out = lifeboat(&moto, &dir, &["config", "show"]).await;
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("no operator config table"),
        "the stack names it: {stderr}"
    );

    let _ = std::fs::remove_dir_all(&dir);
    moto.stop().await;
}

#[tokio::test]
async fn a_stack_missing_a_resource_names_it() {
    let moto = MotoServer::start_program(&moto_launcher().unwrap())
        .await
        .expect("moto_server starts");
    create_stack(&moto, "partial", PARTIAL).await;
    let dir = workdir("partial");
    let out = lifeboat(&moto, &dir, &["carts", "--minutes", "--stack", "partial"]).await;
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "lifeboat carts: no carts table: pass --carts-table or set CARTS_TABLE (environment \
         variable CARTS_TABLE is not set; stack partial (CREATE_COMPLETE) has no resource \
         CartsTable)\n"
    );
    // status needs only the breaker table: the rest is unknown, and why.
    let out = lifeboat(&moto, &dir, &["status", "--stack", "partial"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("no breakers stored")
            && stdout.contains("stack partial (CREATE_COMPLETE) has no output RequestsTablePrefix"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    moto.stop().await;
}

/// moto_server itself, not the proxy in front of it (which answers the
/// alarm history from the local suite's alarm): CloudWatch's calls go to it
/// alone.
#[tokio::test]
async fn detection_on_an_endpoint_that_is_not_cloudwatch_says_so() {
    let (moto, _) = deployed().await;
    let dir = workdir("detection");
    let out = support::lifeboat_with(
        &moto,
        Some(&dir),
        &[
            "detection",
            "--stack",
            "lifeboat",
            "--alarm",
            "lifeboat-nordic-errors",
        ],
        &[("AWS_ENDPOINT_URL_CLOUDWATCH", moto.moto_endpoint())],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        stderr.starts_with(
            "lifeboat detection: DescribeAlarmHistory lifeboat-nordic-errors: the endpoint did \
             not answer as CloudWatch does (HTTP "
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        !stderr.contains("DeserializeError") && !stderr.contains("TypeMismatch"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    moto.stop().await;
}
