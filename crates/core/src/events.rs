//! The events lifeboat publishes on its EventBridge bus.
//!
//! Every event has source [`SOURCE`], a detail-type naming it, and a JSON detail
//! with a `schema_version`. Consumers accept every version up to
//! [`SCHEMA_VERSION`] and reject newer ones with a clear error; new optional
//! fields do not bump the version, anything else does. The schemas are described
//! in `docs/events.md`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::{BreakerState, TripReason};
use crate::operator::{Operation, OperatorId};
use crate::order::{HeldOrder, StateName};
use crate::request::FailureReason;

/// The EventBridge `source` of every lifeboat event.
pub const SOURCE: &str = "lifeboat";
/// The newest detail schema version this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

pub const BREAKER_STATE_CHANGED: &str = "Breaker State Changed";
pub const OPERATOR_REQUEST_FAILED: &str = "Operator Request Failed";
pub const TRIP_REQUESTED: &str = "Trip Requested";
pub const TRIALS_PASSED: &str = "Trials Passed";
pub const SALE_SWITCH_WRITE_FAILED: &str = "Sale Switch Write Failed";
pub const SELF_FAULT_SUSPECTED: &str = "Self Fault Suspected";

fn schema_version() -> u32 {
    SCHEMA_VERSION
}

/// A breaker moved from one state to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerStateChanged {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub operator: OperatorId,
    pub from: BreakerState,
    pub to: BreakerState,
    pub version: u64,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// A request ended without an answer from the operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorRequestFailed {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    /// Absent only for a record so malformed that it has no readable id.
    pub request_id: Option<String>,
    /// The operator as written in the record; not validated, because a
    /// malformed record may carry anything.
    pub operator: Option<String>,
    /// The operation asked for (`search`, `price`), when known.
    pub kind: Option<Operation>,
    pub reason: FailureReason,
    pub detail: String,
    pub at: DateTime<Utc>,
}

/// The real consumer's failure window asks the circuit switch to open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TripRequested {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub operator: OperatorId,
    /// The breaker version the consumer saw; a request for an older version is
    /// ignored.
    pub observed_version: u64,
    pub reason: TripReason,
    pub at: DateTime<Utc>,
}

/// Enough half-open trials succeeded: the circuit switch may close.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialsPassed {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub operator: OperatorId,
    pub observed_version: u64,
    pub successes: u32,
    pub at: DateTime<Utc>,
}

/// Whether an operator is on sale in the booking system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleStatus {
    OnSale,
    OffSale,
}

impl SaleStatus {
    /// The sale status a breaker state asks for.
    pub fn for_breaker(state: BreakerState) -> Self {
        if state.is_open() {
            SaleStatus::OffSale
        } else {
            SaleStatus::OnSale
        }
    }
}

/// A fault: the sale switch could not be written after every retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaleSwitchWriteFailed {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub operator: OperatorId,
    pub wanted: SaleStatus,
    pub version: u64,
    pub attempts: u32,
    pub last_error: String,
    pub at: DateTime<Utc>,
}

/// Most operators are open at once: more likely lifeboat's own egress (DNS,
/// NAT, TLS roots, a credential) than that many operators down together. The
/// off-sale listener keeps `operator` on sale rather than take the
/// marketplace off sale on a fault of ours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfFaultSuspected {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    /// The operator whose off-sale write was held back.
    pub operator: OperatorId,
    /// The breaker version of that change.
    pub version: u64,
    /// Operators whose breakers were open (or forced open).
    pub open: usize,
    /// Operators served.
    pub of: usize,
    pub at: DateTime<Utc>,
}

/// A held order moved (docs/orders.md): its detail-type names the state it
/// moved to (`Order Booked`, `Order Parked`, …, [`StateName::detail_type`]).
/// `Order Parked` is a fault: a person decides what becomes of the order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderMoved {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    /// The order's id, its idempotency key (`lb-<cart id>`).
    pub order_id: String,
    pub operator: OperatorId,
    pub sailing_id: String,
    pub passengers: u8,
    /// The state the order moved to.
    pub to: StateName,
    /// Booking calls made so far.
    pub attempts: u32,
    /// What the customer paid, and in what.
    pub paid_cents: i64,
    pub currency: String,
    /// The move's line in the order's history, for people.
    pub detail: String,
    pub at: DateTime<Utc>,
}

impl OrderMoved {
    /// The event of `order`'s newest move, if it has one.
    pub fn of(order: &HeldOrder) -> Option<Self> {
        let last = order.last_event()?;
        Some(Self {
            schema_version: SCHEMA_VERSION,
            order_id: order.order_id.clone(),
            operator: order.operator.clone(),
            sailing_id: order.sailing.sailing_id.clone(),
            passengers: order.sailing.passengers,
            to: last.to,
            attempts: order.attempts,
            paid_cents: order.paid_cents,
            currency: order.currency.clone(),
            detail: last.detail.clone(),
            at: last.at,
        })
    }
}

/// Any lifeboat event.
#[derive(Debug, Clone, PartialEq)]
pub enum LifeboatEvent {
    BreakerStateChanged(BreakerStateChanged),
    OperatorRequestFailed(OperatorRequestFailed),
    TripRequested(TripRequested),
    TrialsPassed(TrialsPassed),
    SaleSwitchWriteFailed(SaleSwitchWriteFailed),
    SelfFaultSuspected(SelfFaultSuspected),
    /// Boxed: its strings would make every event twice the size.
    OrderMoved(Box<OrderMoved>),
}

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("unknown detail-type {0:?}")]
    UnknownType(String),
    #[error(
        "{detail_type} schema_version {found} is newer than {SCHEMA_VERSION}, the newest this build reads"
    )]
    NewerSchema { detail_type: String, found: u32 },
    #[error("{detail_type} detail does not match its schema: {source}")]
    BadDetail {
        detail_type: String,
        source: serde_json::Error,
    },
}

impl LifeboatEvent {
    pub fn detail_type(&self) -> &'static str {
        match self {
            LifeboatEvent::BreakerStateChanged(_) => BREAKER_STATE_CHANGED,
            LifeboatEvent::OperatorRequestFailed(_) => OPERATOR_REQUEST_FAILED,
            LifeboatEvent::TripRequested(_) => TRIP_REQUESTED,
            LifeboatEvent::TrialsPassed(_) => TRIALS_PASSED,
            LifeboatEvent::SaleSwitchWriteFailed(_) => SALE_SWITCH_WRITE_FAILED,
            LifeboatEvent::SelfFaultSuspected(_) => SELF_FAULT_SUSPECTED,
            LifeboatEvent::OrderMoved(e) => e.to.detail_type(),
        }
    }

    /// The detail as JSON text, ready for `PutEvents`.
    pub fn detail_json(&self) -> String {
        let value = match self {
            LifeboatEvent::BreakerStateChanged(e) => serde_json::to_string(e),
            LifeboatEvent::OperatorRequestFailed(e) => serde_json::to_string(e),
            LifeboatEvent::TripRequested(e) => serde_json::to_string(e),
            LifeboatEvent::TrialsPassed(e) => serde_json::to_string(e),
            LifeboatEvent::SaleSwitchWriteFailed(e) => serde_json::to_string(e),
            LifeboatEvent::SelfFaultSuspected(e) => serde_json::to_string(e),
            LifeboatEvent::OrderMoved(e) => serde_json::to_string(e),
        };
        // These types hold only strings, numbers and enums: serializing cannot fail.
        value.unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The operator the event is about, if it names a valid one.
    pub fn operator(&self) -> Option<&str> {
        match self {
            LifeboatEvent::BreakerStateChanged(e) => Some(e.operator.as_str()),
            LifeboatEvent::OperatorRequestFailed(e) => e.operator.as_deref(),
            LifeboatEvent::TripRequested(e) => Some(e.operator.as_str()),
            LifeboatEvent::TrialsPassed(e) => Some(e.operator.as_str()),
            LifeboatEvent::SaleSwitchWriteFailed(e) => Some(e.operator.as_str()),
            LifeboatEvent::SelfFaultSuspected(e) => Some(e.operator.as_str()),
            LifeboatEvent::OrderMoved(e) => Some(e.operator.as_str()),
        }
    }

    /// Read an event back from its detail-type and detail.
    pub fn parse(detail_type: &str, detail: &serde_json::Value) -> Result<Self, EventError> {
        let found = detail
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(u64::from(SCHEMA_VERSION));
        if found > u64::from(SCHEMA_VERSION) {
            return Err(EventError::NewerSchema {
                detail_type: detail_type.to_owned(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
        let bad = |source| EventError::BadDetail {
            detail_type: detail_type.to_owned(),
            source,
        };
        let detail = detail.clone();
        Ok(match detail_type {
            BREAKER_STATE_CHANGED => {
                LifeboatEvent::BreakerStateChanged(serde_json::from_value(detail).map_err(bad)?)
            }
            OPERATOR_REQUEST_FAILED => {
                LifeboatEvent::OperatorRequestFailed(serde_json::from_value(detail).map_err(bad)?)
            }
            TRIP_REQUESTED => {
                LifeboatEvent::TripRequested(serde_json::from_value(detail).map_err(bad)?)
            }
            TRIALS_PASSED => {
                LifeboatEvent::TrialsPassed(serde_json::from_value(detail).map_err(bad)?)
            }
            SALE_SWITCH_WRITE_FAILED => {
                LifeboatEvent::SaleSwitchWriteFailed(serde_json::from_value(detail).map_err(bad)?)
            }
            SELF_FAULT_SUSPECTED => {
                LifeboatEvent::SelfFaultSuspected(serde_json::from_value(detail).map_err(bad)?)
            }
            other => match StateName::ALL.iter().find(|s| s.detail_type() == other) {
                Some(state) => {
                    let moved: OrderMoved = serde_json::from_value(detail).map_err(bad)?;
                    if moved.to != *state {
                        return Err(bad(<serde_json::Error as serde::de::Error>::custom(
                            format!("its state {:?} is not the one {other:?} names", moved.to),
                        )));
                    }
                    LifeboatEvent::OrderMoved(Box::new(moved))
                }
                None => return Err(EventError::UnknownType(other.to_owned())),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::WindowVerdict;

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn op() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn samples() -> Vec<LifeboatEvent> {
        vec![
            LifeboatEvent::BreakerStateChanged(BreakerStateChanged {
                schema_version: SCHEMA_VERSION,
                operator: op(),
                from: BreakerState::Closed,
                to: BreakerState::Open,
                version: 7,
                reason: "5 consecutive timeouts".into(),
                at: at(),
            }),
            LifeboatEvent::OperatorRequestFailed(OperatorRequestFailed {
                schema_version: SCHEMA_VERSION,
                request_id: Some("r-1".into()),
                operator: Some("nordic".into()),
                kind: Some(Operation::Search),
                reason: FailureReason::BreakerOpen,
                detail: "breaker open".into(),
                at: at(),
            }),
            LifeboatEvent::TripRequested(TripRequested {
                schema_version: SCHEMA_VERSION,
                operator: op(),
                observed_version: 6,
                reason: TripReason::Window {
                    verdict: WindowVerdict::FailureRate {
                        rate: 0.75,
                        calls: 20,
                        refused: 0,
                    },
                },
                at: at(),
            }),
            LifeboatEvent::TrialsPassed(TrialsPassed {
                schema_version: SCHEMA_VERSION,
                operator: op(),
                observed_version: 8,
                successes: 2,
                at: at(),
            }),
            LifeboatEvent::SaleSwitchWriteFailed(SaleSwitchWriteFailed {
                schema_version: SCHEMA_VERSION,
                operator: op(),
                wanted: SaleStatus::OffSale,
                version: 7,
                attempts: 8,
                last_error: "503 from sale switch".into(),
                at: at(),
            }),
            LifeboatEvent::SelfFaultSuspected(SelfFaultSuspected {
                schema_version: SCHEMA_VERSION,
                operator: op(),
                version: 3,
                open: 31,
                of: 50,
                at: at(),
            }),
            LifeboatEvent::OrderMoved(Box::new(order_moved(StateName::Booked))),
            LifeboatEvent::OrderMoved(Box::new(order_moved(StateName::Parked))),
        ]
    }

    fn order_moved(to: StateName) -> OrderMoved {
        OrderMoved {
            schema_version: SCHEMA_VERSION,
            order_id: "lb-c1".into(),
            operator: op(),
            sailing_id: "hel-tll-20261224-0730".into(),
            passengers: 2,
            to,
            attempts: 1,
            paid_cents: 11_600,
            currency: "EUR".into(),
            detail: "BK000001 at 11600 (paid 11600)".into(),
            at: at(),
        }
    }

    #[test]
    fn an_order_event_is_named_by_its_state_and_must_agree_with_it() {
        let booked = LifeboatEvent::OrderMoved(Box::new(order_moved(StateName::Booked)));
        assert_eq!(booked.detail_type(), "Order Booked");
        let detail: serde_json::Value = serde_json::from_str(&booked.detail_json()).unwrap();
        assert_eq!(detail["to"], "booked");
        assert!(matches!(
            LifeboatEvent::parse("Order Parked", &detail),
            Err(EventError::BadDetail { .. })
        ));
    }

    #[test]
    fn every_event_round_trips() {
        for event in samples() {
            let detail: serde_json::Value = serde_json::from_str(&event.detail_json()).unwrap();
            assert_eq!(detail["schema_version"], 1);
            let back = LifeboatEvent::parse(event.detail_type(), &detail).unwrap();
            assert_eq!(back, event);
        }
    }

    #[test]
    fn the_documented_shape_is_stable() {
        let detail: serde_json::Value = serde_json::from_str(&samples()[0].detail_json()).unwrap();
        assert_eq!(
            detail,
            serde_json::json!({
                "schema_version": 1, "operator": "nordic", "from": "closed", "to": "open",
                "version": 7, "reason": "5 consecutive timeouts", "at": "2023-11-14T22:13:20Z"
            })
        );
    }

    #[test]
    fn newer_schemas_and_unknown_types_are_rejected() {
        let mut detail: serde_json::Value =
            serde_json::from_str(&samples()[0].detail_json()).unwrap();
        detail["schema_version"] = 2.into();
        assert!(matches!(
            LifeboatEvent::parse(BREAKER_STATE_CHANGED, &detail),
            Err(EventError::NewerSchema { found: 2, .. })
        ));
        detail["schema_version"] = 1.into();
        assert!(matches!(
            LifeboatEvent::parse("Something Else", &detail),
            Err(EventError::UnknownType(_))
        ));
        let broken = serde_json::json!({"operator": "nordic"});
        assert!(matches!(
            LifeboatEvent::parse(BREAKER_STATE_CHANGED, &broken),
            Err(EventError::BadDetail { .. })
        ));
    }
}
