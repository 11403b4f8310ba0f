//! What lifeboat's code and simulations assume template.yaml says: the
//! functions' binaries, `LifeboatHttpApi`'s routes, and the settings of the
//! mappings, rules, queues and alarm. The local suite runs the template
//! itself (`crate::suite::SuiteResources::from_stack`); `crate::stack`'s
//! tests deploy it into moto and hold the settings here to what the stack
//! wires.

/// The real consumer's binary (and function) name.
pub const REAL_CONSUMER: &str = "real-consumer";
/// The fallback consumer's binary (and function) name.
pub const FALLBACK_CONSUMER: &str = "fallback-consumer";
/// The circuit switch's binary (and function) name.
pub const CIRCUIT_SWITCH: &str = "circuit-switch";
/// The search function's binary name (`GET /sailings`, `GET /price`).
pub const SEARCH: &str = "search";
/// The cart function's binary name (`/carts…`).
pub const CART: &str = "cart";
/// The off-sale listener's binary name.
pub const OFFSALE_LISTENER: &str = "offsale-listener";
/// The booking worker's binary name (run with the customer half).
pub const BOOKING_WORKER: &str = "booking-worker";

/// The function `LifeboatHttpApi` routes `path` (with or without a query)
/// to, as the template's `HttpApi` events do: `/sailings` and `/price` to
/// search, `/carts` and up to two segments below it to cart. By path only:
/// a method the template has no route for reaches the function, which
/// answers 405, where API Gateway would answer 404 itself.
pub fn api_function(path: &str) -> Option<&'static str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["sailings"] | ["price"] => Some(SEARCH),
        ["carts", ..] if segments.len() <= 3 => Some(CART),
        _ => None,
    }
}

// The Requests stream mapping's settings in template.yaml (each lane's
// `RequestsMapping&{Operator}`). Then the rules', queues' and alarm's.
pub const BATCH_SIZE: i32 = 50;
pub const MAXIMUM_BATCHING_WINDOW_IN_SECONDS: i32 = 0;
pub const PARALLELIZATION_FACTOR: i32 = 4;
pub const MAXIMUM_RETRY_ATTEMPTS: i32 = 3;
pub const MAXIMUM_RECORD_AGE_IN_SECONDS: i32 = 60;
pub const BISECT_BATCH_ON_FUNCTION_ERROR: bool = true;
/// `FilterCriteria`: new request items only.
pub const FILTER_PATTERN: &str = crate::moto::resources::REQUESTS_FILTER_PATTERN;
/// `TripRequestedRule`'s event pattern.
pub const SWITCH_RULE_PATTERN: &str =
    r#"{"source": ["lifeboat"], "detail-type": ["Trip Requested", "Trials Passed"]}"#;
/// The real consumer's `CALL_CONCURRENCY` (the `CallConcurrency` default).
pub const CALL_CONCURRENCY: u32 = 50;
/// The `ErrorsAlarmName` and `AlarmOperators` defaults.
pub const ALARM_OPERATORS: &str = "lifeboat-nordic-errors=nordic";
/// The `ErrorsAlarmName` default.
pub const ERRORS_ALARM_NAME: &str = "lifeboat-nordic-errors";
/// `RealConsumerErrorsAlarm`'s `Period` (seconds).
pub const ALARM_PERIOD_S: u64 = 10;
/// `RealConsumerErrorsAlarm`'s `EvaluationPeriods`.
pub const ALARM_EVALUATION_PERIODS: usize = 2;
/// `RealConsumerErrorsAlarm`'s `DatapointsToAlarm`.
pub const ALARM_DATAPOINTS: usize = 2;
/// `RealConsumerErrorsAlarm`'s threshold (`Mappings: ErrorsAlarm`).
pub const ALARM_THRESHOLD: f64 = 5.0;
/// `BreakerStateChangedRule`'s event pattern.
pub const OFFSALE_RULE_PATTERN: &str =
    r#"{"source": ["lifeboat"], "detail-type": ["Breaker State Changed"]}"#;
/// `BreakerStateChangedRule`'s target id.
pub const OFFSALE_TARGET_ID: &str = "offsale-queue";
/// `OffsaleQueue`'s `VisibilityTimeout`.
pub const OFFSALE_VISIBILITY_TIMEOUT: u32 = 90;
/// `OffsaleQueue`'s `maxReceiveCount`.
pub const OFFSALE_MAX_RECEIVE_COUNT: u32 = 30;
/// `OffsaleQueueMapping`'s `BatchSize`.
pub const OFFSALE_BATCH_SIZE: i32 = 10;
/// `BreakerTimerQueue`'s `VisibilityTimeout`.
pub const TIMER_QUEUE_VISIBILITY_S: u32 = 30;
/// `BreakerTimerQueueMapping`'s `BatchSize`.
pub const TIMER_BATCH_SIZE: i32 = 10;
/// `BREAKER_CACHE_MS` of search and cart.
pub const BREAKER_CACHE_MS: u32 = 1000;
/// The `SaleRetryMaxAttempts` default.
pub const SALE_RETRY_MAX_ATTEMPTS: u32 = 8;
/// The `SaleSwitchTimeoutMs` default.
pub const SALE_SWITCH_TIMEOUT_MS: u32 = 2000;
/// The `SaleOnSaleHoldSeconds` default.
pub const SALE_ON_SALE_HOLD_S: u32 = 60;
/// The `SaleOffSaleHoldSeconds` default.
pub const SALE_OFF_SALE_HOLD_S: u32 = 10;
/// The `BookingRunMs` default: the longest one run of the booking worker.
pub const BOOKING_RUN_MS: u32 = 50_000;
