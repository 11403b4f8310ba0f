//! What the fuzz targets share: turning the fuzzer's bytes into a JSON
//! payload.
//!
//! Bytes that are JSON text are parsed as they are (serde_json, as the
//! functions parse their payloads). Any other bytes drive a structured
//! generator instead: a JSON tree whose keys and strings are drawn mostly
//! from the target's own vocabulary (the field names and values its reader
//! looks for), so that deep paths such as `/dynamodb/NewImage/operator/S`
//! are reached without the fuzzer having to spell them out, and whose
//! strings may themselves hold JSON text (an SQS message body).

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use serde_json::{Map, Number, Value};

/// The names and values a target's reader looks for.
pub struct Vocabulary {
    pub keys: &'static [&'static str],
    pub strings: &'static [&'static str],
}

/// The deepest tree the generator builds (serde_json refuses text nested
/// deeper than 128, so a parsed payload is never deeper than that either).
const MAX_DEPTH: u32 = 8;

/// The payload `data` stands for: its JSON when it is JSON text, otherwise
/// a tree generated from it with `vocabulary`.
pub fn payload(data: &[u8], vocabulary: &Vocabulary) -> Value {
    if let Ok(value) = serde_json::from_slice(data) {
        return value;
    }
    generated(data, vocabulary)
}

/// A tree generated from `data` with `vocabulary` (`null` when `data` runs out
/// at once).
pub fn generated(data: &[u8], vocabulary: &Vocabulary) -> Value {
    let mut u = Unstructured::new(data);
    value(&mut u, vocabulary, 0).unwrap_or(Value::Null)
}

fn value(u: &mut Unstructured, vocabulary: &Vocabulary, depth: u32) -> Result<Value> {
    let kinds = if depth >= MAX_DEPTH { 6 } else { 8 };
    Ok(match u.choose_index(kinds)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::Number(number(u)?),
        3 | 4 => Value::String(string(u, vocabulary)?),
        // A string holding JSON text, as an SQS body or `reasonData` does.
        5 if depth < MAX_DEPTH => {
            let inner = value(u, vocabulary, depth + 1)?;
            Value::String(inner.to_string())
        }
        5 => Value::String(string(u, vocabulary)?),
        6 => {
            let len = u.int_in_range(0..=4)?;
            let mut items = Vec::with_capacity(len);
            for _ in 0..len {
                items.push(value(u, vocabulary, depth + 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let len = u.int_in_range(0..=6)?;
            let mut map = Map::new();
            for _ in 0..len {
                let key = key(u, vocabulary)?;
                map.insert(key, value(u, vocabulary, depth + 1)?);
            }
            Value::Object(map)
        }
    })
}

fn number(u: &mut Unstructured) -> Result<Number> {
    Ok(match u.choose_index(4)? {
        0 => Number::from(u.int_in_range(0u64..=16)?),
        1 => Number::from(u.arbitrary::<u64>()?),
        2 => Number::from(u.arbitrary::<i64>()?),
        // Not every f64 is a JSON number (NaN, infinities): those become 0.
        _ => Number::from_f64(u.arbitrary()?).unwrap_or_else(|| Number::from(0)),
    })
}

fn key(u: &mut Unstructured, vocabulary: &Vocabulary) -> Result<String> {
    if !vocabulary.keys.is_empty() && u.ratio(7, 8)? {
        Ok((*u.choose(vocabulary.keys)?).to_owned())
    } else {
        u.arbitrary()
    }
}

fn string(u: &mut Unstructured, vocabulary: &Vocabulary) -> Result<String> {
    if !vocabulary.strings.is_empty() && u.ratio(3, 4)? {
        Ok((*u.choose(vocabulary.strings)?).to_owned())
    } else {
        u.arbitrary()
    }
}

/// Field names and values of the lifeboat events, shared by the targets that
/// read them.
pub const EVENT_KEYS: &[&str] = &[
    "source",
    "detail-type",
    "detail",
    "time",
    "id",
    "version",
    "account",
    "region",
    "resources",
    "schema_version",
    "operator",
    "from",
    "to",
    "reason",
    "kind",
    "observed_version",
    "at",
    "due",
];

pub const EVENT_STRINGS: &[&str] = &[
    "lifeboat",
    "Breaker State Changed",
    "Trip Requested",
    "Trials Passed",
    "Operator Request Failed",
    "Sale Switch Write Failed",
    "Self Fault Suspected",
    "nordic",
    "baltic",
    "BAD OP",
    "",
    "closed",
    "open",
    "half_open",
    "forced_open",
    "forced_closed",
    "2026-11-30T10:00:00Z",
    "2026-11-30T10:00:00.000+0000",
    "consecutive_timeouts",
];

/// Run a future that never waits on anything outside it (the in-memory
/// stores answer at once) to its end.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..1_000 {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
    panic!("the future kept waiting: it needs a runtime");
}

/// An event lifeboat writes reads back as itself.
pub fn round_trip(event: &lifeboat_core::events::LifeboatEvent) {
    use lifeboat_core::events::LifeboatEvent;
    let detail: Value = match serde_json::from_str(&event.detail_json()) {
        Ok(detail) => detail,
        Err(e) => panic!("detail of {event:?} is not JSON: {e}"),
    };
    match LifeboatEvent::parse(event.detail_type(), &detail) {
        Ok(back) => assert_eq!(&back, event),
        Err(e) => panic!("{event:?} does not read back: {e}"),
    }
}

/// The customers' side both HTTP targets (query_string, cart_body) check
/// against: two operators sold, nordic's ids in capitals and baltic's in
/// small letters, at the fixtures' now.
pub struct Customers {
    pub operators: std::collections::BTreeSet<lifeboat_core::OperatorId>,
    pub settings: lifeboat_core::settings::Settings,
    pub now: chrono::DateTime<chrono::Utc>,
}

/// 2026-11-30T10:00:00Z, the fixtures' now.
pub const NOW: i64 = 1_796_032_800;

/// The [`Customers`] fixture, made once.
pub fn customers() -> &'static Customers {
    static CUSTOMERS: std::sync::OnceLock<Customers> = std::sync::OnceLock::new();
    CUSTOMERS.get_or_init(|| {
        let operators = ["nordic", "baltic"]
            .into_iter()
            .filter_map(|o| lifeboat_core::OperatorId::new(o).ok())
            .collect();
        let settings = match lifeboat_core::settings::Settings::from_json(
            r#"{"operators": {"nordic": {"ids": "upper"}, "baltic": {"ids": "lower"}}}"#,
        ) {
            Ok(settings) => settings,
            Err(e) => panic!("the fixtures' settings are refused: {e}"),
        };
        let Some(now) = chrono::DateTime::from_timestamp(NOW, 0) else {
            panic!("no clock");
        };
        Customers {
            operators,
            settings,
            now,
        }
    })
}
