//! Operators and the operations lifeboat performs against them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The name of a ferry operator, as used in configuration, keys and events.
///
/// Lowercase ASCII letters, digits and `-`, 1 to 64 characters, so it is safe in
/// DynamoDB keys, metric dimensions and URLs alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperatorId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid operator id {0:?}: use 1 to 64 lowercase letters, digits or '-'")]
pub struct InvalidOperatorId(pub String);

impl OperatorId {
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidOperatorId> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if valid {
            Ok(Self(id))
        } else {
            Err(InvalidOperatorId(id))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for OperatorId {
    type Error = InvalidOperatorId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<OperatorId> for String {
    fn from(value: OperatorId) -> Self {
        value.0
    }
}

impl FromStr for OperatorId {
    type Err = InvalidOperatorId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `code` is a port code: 3 to 5 capital letters (`HEL`, `TLL`).
pub fn is_port_code(code: &str) -> bool {
    (3..=5).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_uppercase())
}

/// A route an operator sails, one way: from one port to another, written
/// `HEL-TLL` in configuration (`routes` in `OPERATOR_SETTINGS`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Route {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid route {0:?}: write it FROM-TO, two different port codes of 3 to 5 capital letters (\"HEL-TLL\")"
)]
pub struct InvalidRoute(pub String);

impl Route {
    /// The route from `from` to `to`, both port codes and different.
    pub fn new(from: &str, to: &str) -> Result<Self, InvalidRoute> {
        if is_port_code(from) && is_port_code(to) && from != to {
            Ok(Self {
                from: from.to_owned(),
                to: to.to_owned(),
            })
        } else {
            Err(InvalidRoute(format!("{from}-{to}")))
        }
    }
}

impl FromStr for Route {
    type Err = InvalidRoute;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('-') {
            Some((from, to)) => Self::new(from, to).map_err(|_| InvalidRoute(s.to_owned())),
            None => Err(InvalidRoute(s.to_owned())),
        }
    }
}

impl TryFrom<String> for Route {
    type Error = InvalidRoute;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<Route> for String {
    fn from(value: Route) -> Self {
        value.to_string()
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.from, self.to)
    }
}

/// What a request asks the operator for. Every operation of one operator shares
/// that operator's single breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    Search,
    Price,
    /// `GET /ping`: asks nothing, only whether the API answers at all. Never a
    /// customer's question; the real consumer's hang check and the switch's
    /// probes may use it ([`crate::settings::HangCheck`]).
    Ping,
    /// `POST /book`: books a held order, under its idempotency key
    /// (docs/operator-api.json). The only operation that changes anything
    /// at the operator: never a customer's question, never a probe or a
    /// hang check, never answered from the cache.
    Book,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation {0:?}: expected search, price, ping or book")]
pub struct UnknownOperation(pub String);

/// An operation that changes something at the operator where only a read
/// may go: a probe, a hang check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} changes what the operator holds: {what} only reads (search, price or ping)")]
pub struct NotARead {
    pub operation: Operation,
    pub what: &'static str,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::Search,
        Operation::Price,
        Operation::Ping,
        Operation::Book,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Search => "search",
            Operation::Price => "price",
            Operation::Ping => "ping",
            Operation::Book => "book",
        }
    }

    /// Whether the call only reads: asking it twice, or asking it to learn
    /// whether the operator is there, changes nothing. Every operation but
    /// a booking.
    pub fn is_read(self) -> bool {
        !matches!(self, Operation::Book)
    }

    /// This operation, if it only reads; `what` names the caller that may
    /// only read (`"a probe"`) for the error.
    pub fn read_only(self, what: &'static str) -> Result<Self, NotARead> {
        if self.is_read() {
            Ok(self)
        } else {
            Err(NotARead {
                operation: self,
                what,
            })
        }
    }

    /// Serde helper for a field that may only name a read
    /// ([`Operation::read_only`]): a probe's or a hang check's operation.
    pub(crate) fn deserialize_read<'de, D: serde::Deserializer<'de>>(
        d: D,
        what: &'static str,
    ) -> Result<Self, D::Error> {
        Operation::deserialize(d)?
            .read_only(what)
            .map_err(serde::de::Error::custom)
    }
}

impl FromStr for Operation {
    type Err = UnknownOperation;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "search" => Ok(Operation::Search),
            "price" => Ok(Operation::Price),
            "ping" => Ok(Operation::Ping),
            "book" => Ok(Operation::Book),
            other => Err(UnknownOperation(other.to_owned())),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_ids_are_validated() {
        assert!(OperatorId::new("nordic-ferries-2").is_ok());
        assert!(OperatorId::new("").is_err());
        assert!(OperatorId::new("Upper").is_err());
        assert!(OperatorId::new("a b").is_err());
        assert!(OperatorId::new("x".repeat(65)).is_err());
        let parsed: Result<OperatorId, _> = serde_json::from_str("\"BAD\"");
        assert!(parsed.is_err());
    }

    #[test]
    fn operations_parse_and_print() {
        for op in Operation::ALL {
            assert_eq!(op.as_str().parse::<Operation>(), Ok(op));
        }
        assert!("booking".parse::<Operation>().is_err());
        assert!(
            Operation::ALL
                .iter()
                .all(|op| op.is_read() != (*op == Operation::Book))
        );
        let e = Operation::Book.read_only("a probe").unwrap_err();
        assert_eq!(
            e.to_string(),
            "book changes what the operator holds: a probe only reads (search, price or ping)"
        );
        assert_eq!(Operation::Ping.read_only("a probe"), Ok(Operation::Ping));
    }

    #[test]
    fn routes_are_two_different_port_codes() {
        let route: Route = "HEL-TLL".parse().unwrap();
        assert_eq!((route.from.as_str(), route.to.as_str()), ("HEL", "TLL"));
        assert_eq!(route.to_string(), "HEL-TLL");
        assert_eq!(serde_json::to_string(&route).unwrap(), "\"HEL-TLL\"");
        for bad in [
            "HEL",
            "HEL-HEL",
            "hel-TLL",
            "HEL-TLLXXX",
            "HE-TLL",
            "HEL-TLL-STO",
            "-TLL",
            "",
        ] {
            let e = bad.parse::<Route>().unwrap_err();
            assert!(e.to_string().contains("FROM-TO"), "{bad}: {e}");
        }
        assert!(serde_json::from_str::<Route>("\"HEL_TLL\"").is_err());
    }
}
