#![allow(clippy::unwrap_used)]
//! The operator commands: `status` gathered over the core ports on the
//! in-memory adapters (with the real circuit switch moving the breakers), its
//! table and JSON, and `breaker` against real-shaped Lambda Invoke responses.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_lambda::Client;
use aws_sdk_lambda::config::http::HttpResponse;
use aws_sdk_lambda::primitives::SdkBody;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use chrono::{DateTime, TimeZone, Utc};
use circuit_switch::{CircuitSwitch, SwitchPorts};
use lifeboat_cli::ops::breaker::{self, BreakerCommand, BreakerError};
use lifeboat_cli::ops::status::{self, Lookup, Sources, StatusReport, StreamSource};
use lifeboat_core::breaker::Command;
use lifeboat_core::events::SaleStatus;
use lifeboat_core::lane::Lanes;
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryEventBus, MemoryMetrics, MemorySaleStatusStore, MemoryStreamRouter,
    MemoryWindowStore,
};
use lifeboat_core::ports::{
    BreakerStore, Repoint, RouterError, SaleStatusStore, StoreError, StreamRouter,
};
use lifeboat_core::sale::{PendingWrite, SaleRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerRecord, BreakerState, ConsumerTarget, ManualClock, OperatorId};
use serde_json::{Value, json};

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + chrono::TimeDelta::seconds(secs)
}

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

/// The real circuit switch on in-memory adapters, at `clock`.
struct Suite {
    breakers: Arc<MemoryBreakerStore>,
    router: Arc<MemoryStreamRouter>,
    sales: MemorySaleStatusStore,
    clock: ManualClock,
    switch: CircuitSwitch,
}

impl Suite {
    /// The suite of a stack selling nordic alone.
    fn new() -> Self {
        Self::selling(&["nordic"])
    }

    /// The suite of a stack selling `operators` (its OPERATORS).
    fn selling(operators: &[&str]) -> Self {
        let breakers = Arc::new(MemoryBreakerStore::new());
        let router = Arc::new(MemoryStreamRouter::new());
        let clock = ManualClock::new(t(0));
        let switch = CircuitSwitch::new(
            SwitchPorts {
                breakers: breakers.clone(),
                windows: Arc::new(MemoryWindowStore::new()),
                events: Arc::new(MemoryEventBus::new()),
                lanes: Lanes::shared(
                    "requests",
                    operators.iter().map(|o| op(o)).collect(),
                    router.clone(),
                ),
                clock: Arc::new(clock.clone()),
                metrics: Arc::new(MemoryMetrics::new()),
            },
            Settings::default(),
            operators.iter().map(|o| op(o)).collect(),
        )
        .with_repoint_backoff(Duration::from_millis(1));
        Self {
            breakers,
            router,
            sales: MemorySaleStatusStore::new(),
            clock,
            switch,
        }
    }

    async fn command(&self, command: &str, operator: &str, reason: &str) -> Value {
        let report = self
            .switch
            .handle(&json!({"command": command, "operator": operator, "reason": reason}))
            .await
            .unwrap();
        serde_json::to_value(report).unwrap()
    }

    fn sources(&self) -> Sources<'_> {
        Sources {
            breakers: self.breakers.as_ref(),
            sales: Ok(&self.sales),
            streams: Ok(StreamSource::Shared(self.router.as_ref())),
        }
    }
}

/// nordic forced open at t(0) with its off-sale write applied; baltic closed
/// since t(-3600) and on sale, with a pending off-sale write retrying.
async fn outage() -> Suite {
    let suite = Suite::selling(&["nordic", "baltic"]);
    suite
        .breakers
        .save(&BreakerRecord::initial(op("baltic"), t(-3600)), None)
        .await
        .unwrap();
    suite.command("force-open", "nordic", "maintenance").await;
    let mut nordic = SaleRecord::new(op("nordic"));
    nordic.applied_status = SaleStatus::OffSale;
    nordic.applied_version = 1;
    nordic.applied_at = Some(t(2));
    nordic.revision = 1;
    suite.sales.save(&nordic, None).await.unwrap();
    let mut baltic = SaleRecord::new(op("baltic"));
    baltic.revision = 1;
    baltic.pending = Some(PendingWrite {
        version: 7,
        status: SaleStatus::OffSale,
        attempts: 2,
        next_attempt_at: t(130),
        last_error: Some("sale switch answered 503 Service Unavailable".into()),
        since: t(100),
        gave_up_at: None,
        fault_published: false,
    });
    suite.sales.save(&baltic, None).await.unwrap();
    suite.clock.set(t(125));
    suite
}

#[tokio::test]
async fn status_reads_breakers_sales_and_the_stream_through_the_ports() {
    let suite = outage().await;
    let report = status::gather(&suite.sources(), None, t(125))
        .await
        .unwrap();

    assert_eq!(
        report.stream,
        Some(Lookup::Ok(status::StreamView {
            target: ConsumerTarget::Real
        }))
    );
    let names: Vec<&str> = report
        .operators
        .iter()
        .map(|o| o.operator.as_str())
        .collect();
    assert_eq!(names, ["baltic", "nordic"]);

    let nordic = &report.operators[1];
    assert!(nordic.breaker.stored);
    assert_eq!(nordic.breaker.state, BreakerState::ForcedOpen);
    assert_eq!(nordic.breaker.version, 1);
    assert_eq!(nordic.breaker.since, Some(t(0)));
    assert_eq!(nordic.breaker.age_s, Some(125));
    assert!(
        nordic.breaker.reason.contains("maintenance"),
        "{}",
        nordic.breaker.reason
    );
    let Lookup::Ok(sale) = &nordic.sale else {
        panic!("{:?}", nordic.sale)
    };
    assert_eq!((sale.status, sale.version), (SaleStatus::OffSale, 1));

    let Lookup::Ok(baltic) = &report.operators[0].sale else {
        panic!()
    };
    let pending = baltic.pending.as_ref().unwrap();
    assert_eq!(
        (pending.status, pending.version, pending.attempts),
        (SaleStatus::OffSale, 7, 2)
    );
    assert!(!report.has_failures());
}

#[tokio::test]
async fn the_stream_follows_the_switch() {
    let suite = Suite::new();
    suite.command("force-open", "nordic", "maintenance").await;
    let report = status::gather(&suite.sources(), None, t(1)).await.unwrap();
    // Every stored breaker open: the switch moved the stream to the fallback.
    assert_eq!(
        report.stream,
        Some(Lookup::Ok(status::StreamView {
            target: ConsumerTarget::Fallback
        }))
    );
    suite.command("release", "nordic", "maintenance done").await;
    let report = status::gather(&suite.sources(), None, t(2)).await.unwrap();
    assert_eq!(
        report.stream,
        Some(Lookup::Ok(status::StreamView {
            target: ConsumerTarget::Real
        }))
    );
    assert_eq!(report.operators[0].breaker.state, BreakerState::HalfOpen);
    assert_eq!(
        report.operators[0].breaker.previous,
        Some(BreakerState::ForcedOpen)
    );
}

#[tokio::test]
async fn one_operator_and_an_operator_never_stored() {
    let suite = outage().await;
    let report = status::gather(&suite.sources(), Some(&op("nordic")), t(125))
        .await
        .unwrap();
    assert_eq!(report.operators.len(), 1);
    assert_eq!(report.operators[0].operator, op("nordic"));

    let report = status::gather(&suite.sources(), Some(&op("gotland")), t(125))
        .await
        .unwrap();
    let gotland = &report.operators[0];
    assert!(!gotland.breaker.stored);
    assert_eq!(
        (gotland.breaker.state, gotland.breaker.version),
        (BreakerState::Closed, 0)
    );
    let Lookup::Ok(sale) = &gotland.sale else {
        panic!()
    };
    assert!(!sale.stored);
    assert_eq!(sale.status, SaleStatus::OnSale);
}

#[tokio::test]
async fn missing_sale_and_mapping_config_are_unknown() {
    let suite = outage().await;
    let sources = Sources {
        breakers: suite.breakers.as_ref(),
        sales: Err(
            "no sale status table: pass --sale-status-table or set SALE_STATUS_TABLE".into(),
        ),
        streams: Err("no requests stream mapping: pass --requests-mapping-uuid".into()),
    };
    let report = status::gather(&sources, None, t(125)).await.unwrap();
    assert!(
        matches!(&report.stream, Some(Lookup::Unknown { why }) if why.contains("--requests-mapping-uuid"))
    );
    assert!(
        report
            .operators
            .iter()
            .all(|o| matches!(o.sale, Lookup::Unknown { .. }))
    );
    assert!(!report.has_failures());

    let table = status::render_table(&report);
    assert!(
        table.starts_with("requests stream: unknown (no requests stream mapping"),
        "{table}"
    );
    assert!(
        table.contains("sale status: unknown (no sale status table"),
        "{table}"
    );
    let nordic_row = table.lines().find(|l| l.starts_with("nordic")).unwrap();
    assert!(nordic_row.contains(" unknown "), "{nordic_row}");

    let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(json["stream"]["lookup"], "unknown");
    assert_eq!(json["operators"][0]["sale"]["lookup"], "unknown");
}

/// A sale status table that cannot be reached.
struct Unreachable;

#[async_trait]
impl SaleStatusStore for Unreachable {
    async fn load(&self, _: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        Err(StoreError::Unavailable(
            "GetItem SaleStatus: ThrottlingException".into(),
        ))
    }
    async fn save(&self, _: &SaleRecord, _: Option<u64>) -> Result<(), StoreError> {
        unreachable!("status never writes")
    }
}

#[tokio::test]
async fn a_failed_sale_read_is_shown_and_counted() {
    let suite = outage().await;
    let sources = Sources {
        breakers: suite.breakers.as_ref(),
        sales: Ok(&Unreachable),
        streams: Ok(StreamSource::Shared(suite.router.as_ref())),
    };
    let report = status::gather(&sources, None, t(125)).await.unwrap();
    assert!(report.has_failures());
    let table = status::render_table(&report);
    assert!(
        table.contains("  sale status: store unavailable: GetItem SaleStatus: ThrottlingException"),
        "{table}"
    );
}

#[tokio::test]
async fn with_a_lane_per_operator_each_row_shows_its_own_stream() {
    let suite = outage().await;
    let (baltic, nordic) = (
        Arc::new(MemoryStreamRouter::new()),
        Arc::new(MemoryStreamRouter::new()),
    );
    nordic
        .point_at(ConsumerTarget::Fallback)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let routers: [(OperatorId, Arc<dyn StreamRouter>); 2] =
        [(op("baltic"), baltic), (op("nordic"), nordic)];
    let lanes = Lanes::per_operator(routers);
    let sources = Sources {
        breakers: suite.breakers.as_ref(),
        sales: Ok(&suite.sales),
        streams: Ok(StreamSource::PerOperator(&lanes)),
    };
    let report = status::gather(&sources, None, t(125)).await.unwrap();
    let streams: Vec<(String, Lookup<ConsumerTarget>)> = report
        .operators
        .iter()
        .map(|o| {
            let target = match &o.stream {
                Lookup::Ok(view) => Lookup::Ok(view.target),
                Lookup::Unknown { why } => Lookup::Unknown { why: why.clone() },
                Lookup::Failed { error } => Lookup::Failed {
                    error: error.clone(),
                },
            };
            (o.operator.to_string(), target)
        })
        .collect();
    assert_eq!(
        streams,
        vec![
            ("baltic".to_owned(), Lookup::Ok(ConsumerTarget::Real)),
            ("nordic".to_owned(), Lookup::Ok(ConsumerTarget::Fallback)),
        ]
    );
    // No line for a shared stream: each row has its own lane's.
    assert_eq!(report.stream, None);
    let table = status::render_table(&report);
    assert!(table.starts_with("OPERATOR  BREAKER"), "{table}");
    assert!(!table.contains("requests stream"), "{table}");
    assert!(
        table.contains("off_sale v1  fallback consumer  force-open"),
        "{table}"
    );
    let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(json.get("stream"), None);
    assert_eq!(
        json["operators"][1]["stream"],
        json!({"lookup": "ok", "target": "fallback"})
    );
}

/// A lane's mapping that cannot be read.
struct UnreadableMapping;

#[async_trait]
impl StreamRouter for UnreadableMapping {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        Err(RouterError::Throttled(
            "GetEventSourceMapping: TooManyRequestsException".into(),
        ))
    }
    async fn point_at(&self, _: ConsumerTarget) -> Result<Repoint, RouterError> {
        unreachable!("status never re-points")
    }
}

#[tokio::test]
async fn a_lane_that_cannot_be_read_is_shown_under_its_row_and_counted() {
    let suite = outage().await;
    let routers: [(OperatorId, Arc<dyn StreamRouter>); 2] = [
        (op("baltic"), Arc::new(MemoryStreamRouter::new())),
        (op("nordic"), Arc::new(UnreadableMapping)),
    ];
    let lanes = Lanes::per_operator(routers);
    let sources = Sources {
        breakers: suite.breakers.as_ref(),
        sales: Ok(&suite.sales),
        streams: Ok(StreamSource::PerOperator(&lanes)),
    };
    let report = status::gather(&sources, None, t(125)).await.unwrap();
    assert!(report.has_failures());
    let table = status::render_table(&report);
    let nordic = table.split("\nnordic").nth(1).unwrap();
    assert!(
        nordic.contains(
            "\n  stream: Lambda control plane throttled the call, try again: \
             GetEventSourceMapping: TooManyRequestsException"
        ),
        "{table}"
    );
    assert!(!table.contains("requests stream"), "{table}");
}

#[tokio::test]
async fn the_table_shows_one_row_per_operator() {
    let suite = outage().await;
    let report = status::gather(&suite.sources(), None, t(125))
        .await
        .unwrap();
    assert_eq!(
        status::render_table(&report),
        "\
requests stream: real consumer

OPERATOR  BREAKER      VERSION  SINCE                              OPEN UNTIL  SALE         STREAM         REASON
baltic    closed       0        2026-12-01T09:00:00Z (1h 02m ago)  -           on_sale v0   real consumer  initial
  sale write pending: off_sale v7, 2 attempts, next attempt 2026-12-01T10:02:10Z (in 5s), \
last error: sale switch answered 503 Service Unavailable
nordic    forced_open  1        2026-12-01T10:00:00Z (2m 05s ago)  -           off_sale v1  real consumer  force-open: maintenance
"
    );
}

#[tokio::test]
async fn an_open_breaker_shows_when_it_may_try_again() {
    let suite = Suite::new();
    let mut record = BreakerRecord::initial(op("nordic"), t(0));
    record.state = BreakerState::Open;
    record.version = 3;
    record.reason = "5 consecutive timeouts".into();
    record.open_until = Some(t(30));
    suite.breakers.save(&record, None).await.unwrap();
    let report = status::gather(&suite.sources(), None, t(12)).await.unwrap();
    let table = status::render_table(&report);
    assert!(table.contains("2026-12-01T10:00:30Z (in 18s)"), "{table}");
    let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(
        json["operators"][0]["breaker"]["open_until"],
        "2026-12-01T10:00:30Z"
    );
}

#[tokio::test]
async fn the_json_has_every_column() {
    let suite = outage().await;
    let report: StatusReport = status::gather(&suite.sources(), None, t(125))
        .await
        .unwrap();
    let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(json["at"], "2026-12-01T10:02:05Z");
    assert_eq!(json["stream"], json!({"lookup": "ok", "target": "real"}));
    let nordic = &json["operators"][1];
    assert_eq!(nordic["operator"], "nordic");
    assert_eq!(nordic["breaker"]["state"], "forced_open");
    assert_eq!(nordic["breaker"]["version"], 1);
    assert_eq!(nordic["breaker"]["since"], "2026-12-01T10:00:00Z");
    assert_eq!(nordic["breaker"]["age_s"], 125);
    assert_eq!(nordic["sale"]["lookup"], "ok");
    assert_eq!(nordic["sale"]["status"], "off_sale");
    assert_eq!(nordic["sale"]["version"], 1);
    let pending = &json["operators"][0]["sale"]["pending"];
    assert_eq!(pending["attempts"], 2);
    assert_eq!(pending["next_attempt_at"], "2026-12-01T10:02:10Z");
    assert_eq!(
        pending["last_error"],
        "sale switch answered 503 Service Unavailable"
    );
}

#[tokio::test]
async fn an_empty_breaker_table_says_so() {
    let suite = Suite::new();
    let report = status::gather(&suite.sources(), None, t(0)).await.unwrap();
    assert_eq!(
        status::render_table(&report),
        "requests stream: real consumer\nno breakers stored\n"
    );
}

// ---- breaker commands over the Lambda Invoke API ----

fn http(status: u16, function_error: Option<&str>, body: String) -> HttpResponse {
    let mut response = HttpResponse::new(status.try_into().unwrap(), SdkBody::from(body));
    response
        .headers_mut()
        .insert("Content-Type", "application/json");
    response
        .headers_mut()
        .insert("X-Amz-Executed-Version", "$LATEST");
    if let Some(kind) = function_error {
        response
            .headers_mut()
            .insert("X-Amz-Function-Error", kind.to_owned());
    }
    response
}

fn force_open() -> BreakerCommand {
    BreakerCommand::new(Command::ForceOpen, op("nordic"), "maintenance window").unwrap()
}

#[tokio::test]
async fn a_command_is_invoked_with_the_switch_payload_and_its_report_read() {
    // The switch's own answer to the same command, as it would serialize it.
    let answer = Suite::new()
        .command("force-open", "nordic", "maintenance window")
        .await;
    let body = answer.to_string();
    let invoke = mock!(Client::invoke)
        .match_requests(|input| {
            let payload: Value =
                serde_json::from_slice(input.payload().unwrap().as_ref()).unwrap();
            input.function_name() == Some("lifeboat-CircuitSwitch")
                && payload
                    == json!({"command": "force-open", "operator": "nordic", "reason": "maintenance window"})
        })
        .then_http_response(move || http(200, None, body.clone()));
    let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&invoke]);

    let invoked = breaker::invoke(&client, "lifeboat-CircuitSwitch", &force_open())
        .await
        .unwrap();
    assert_eq!(invoke.num_calls(), 1);
    assert_eq!(invoked.answer, answer);
    let d = &invoked.report.decisions[0];
    assert_eq!(
        (d.from, d.to, d.version, d.changed),
        (BreakerState::Closed, BreakerState::ForcedOpen, 1, true)
    );
    assert_eq!(invoked.report.streams.len(), 1);
    assert_eq!(invoked.report.streams[0].target, ConsumerTarget::Fallback);
    let text = invoked.report.render();
    assert!(
        text.starts_with("nordic: closed -> forced_open (version 1): "),
        "{text}"
    );
    assert!(
        text.contains("requests stream: fallback consumer (re-pointed now)"),
        "{text}"
    );
}

#[tokio::test]
async fn a_function_error_is_the_commands_error() {
    let invoke = mock!(Client::invoke).then_http_response(|| {
        http(
            200,
            Some("Unhandled"),
            json!({"errorType": "StoreError", "errorMessage": "breaker store: store unavailable: Scan Breaker: ProvisionedThroughputExceededException"}).to_string(),
        )
    });
    let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&invoke]);
    let err = breaker::invoke(&client, "lifeboat-CircuitSwitch", &force_open())
        .await
        .unwrap_err();
    match &err {
        BreakerError::Function {
            kind,
            error_type,
            message,
            ..
        } => {
            assert_eq!(kind, "Unhandled");
            assert_eq!(error_type, "StoreError");
            assert!(message.contains("ProvisionedThroughputExceededException"));
        }
        other => panic!("expected a function error, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "the circuit switch lifeboat-CircuitSwitch failed (Unhandled): StoreError: breaker store: store unavailable: Scan Breaker: ProvisionedThroughputExceededException"
    );
}

#[tokio::test]
async fn a_function_error_without_the_usual_payload_still_fails() {
    let invoke = mock!(Client::invoke).then_http_response(|| {
        http(
            200,
            Some("Unhandled"),
            "Task timed out after 10.01 seconds".into(),
        )
    });
    let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&invoke]);
    let err = breaker::invoke(&client, "switch", &force_open())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BreakerError::Function { message, .. } if message.contains("Task timed out")),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_function_names_it() {
    // Lambda's 404 as it comes over the wire.
    let invoke = mock!(Client::invoke).then_http_response(|| {
        let mut response = http(
            404,
            None,
            json!({"Type": "User", "Message": "Function not found: arn:aws:lambda:eu-north-1:123456789012:function:nope"}).to_string(),
        );
        response
            .headers_mut()
            .insert("X-Amzn-Errortype", "ResourceNotFoundException");
        response
    });
    let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&invoke]);
    let err = breaker::invoke(&client, "nope", &force_open())
        .await
        .unwrap_err();
    assert!(matches!(err, BreakerError::Invoke { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "invoking nope: ResourceNotFoundException: Function not found: arn:aws:lambda:eu-north-1:123456789012:function:nope"
    );
}

#[tokio::test]
async fn an_answer_that_is_not_a_report_is_an_error() {
    let invoke = mock!(Client::invoke).then_http_response(|| http(200, None, "null".into()));
    let client = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&invoke]);
    let err = breaker::invoke(&client, "switch", &force_open())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BreakerError::Unreadable { answer, .. } if answer == "null"),
        "{err}"
    );
}
