//! An event source mapping's `FilterCriteria`, applied as Lambda applies it:
//! to each stream record in the shape Lambda delivers it (`eventName`,
//! `dynamodb.NewImage` in DynamoDB JSON, …). A record is delivered when any
//! filter matches it and dropped otherwise; a mapping without filters
//! delivers everything.
//!
//! The subset of EventBridge patterns implemented is the one lifeboat's
//! template uses: a JSON object whose fields are either nested objects or
//! arrays of allowed values (strings, numbers, booleans or null). A field
//! matches when the record has it and its value equals one of the allowed
//! values (for an array value, when any element does). Content filters
//! (`prefix`, `anything-but`, `exists`, `numeric`, …) are refused with an
//! error rather than silently mismatched.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("filter pattern is not json: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("filter pattern {0} is not a json object")]
    NotAnObject(String),
    #[error("filter pattern field {field}: {why}")]
    Unsupported { field: String, why: String },
}

/// One field of a pattern.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// The field's value must equal one of these scalars.
    OneOf(Vec<Value>),
    /// The field must be an object matching this pattern.
    Nested(Pattern),
}

/// One filter pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    fields: BTreeMap<String, Node>,
}

impl Pattern {
    /// Parse a pattern's JSON text.
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        let value: Value = serde_json::from_str(text).map_err(FilterError::NotJson)?;
        Self::from_value(&value, "")
    }

    fn from_value(value: &Value, path: &str) -> Result<Self, FilterError> {
        let Value::Object(map) = value else {
            return Err(FilterError::NotAnObject(value.to_string()));
        };
        let mut fields = BTreeMap::new();
        for (name, node) in map {
            let field = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            let node = match node {
                Value::Object(_) => Node::Nested(Self::from_value(node, &field)?),
                Value::Array(allowed) => {
                    if let Some(bad) = allowed.iter().find(|v| v.is_object() || v.is_array()) {
                        return Err(FilterError::Unsupported {
                            field,
                            why: format!("content filter {bad} is not supported here"),
                        });
                    }
                    Node::OneOf(allowed.clone())
                }
                other => {
                    return Err(FilterError::Unsupported {
                        field,
                        why: format!("{other} is neither an object nor an array of values"),
                    });
                }
            };
            fields.insert(name.clone(), node);
        }
        Ok(Self { fields })
    }

    /// Whether `record` matches every field of the pattern.
    pub fn matches(&self, record: &Value) -> bool {
        self.fields
            .iter()
            .all(|(name, node)| match (node, record.get(name)) {
                (_, None) => false,
                (Node::Nested(inner), Some(value)) => value.is_object() && inner.matches(value),
                (Node::OneOf(allowed), Some(Value::Array(values))) => {
                    values.iter().any(|v| one_of(allowed, v))
                }
                (Node::OneOf(allowed), Some(value)) => one_of(allowed, value),
            })
    }
}

fn one_of(allowed: &[Value], value: &Value) -> bool {
    allowed.iter().any(|a| match (a, value) {
        (Value::Number(a), Value::Number(v)) => a.as_f64() == v.as_f64(),
        (a, v) => a == v,
    })
}

/// Every filter of a mapping.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FilterCriteria {
    patterns: Vec<Pattern>,
}

impl FilterCriteria {
    /// The filters of a mapping, from their patterns' JSON texts.
    pub fn parse<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Self, FilterError> {
        Ok(Self {
            patterns: patterns
                .into_iter()
                .map(Pattern::parse)
                .collect::<Result<_, _>>()?,
        })
    }

    /// The filters of a mapping as the Lambda API reports them.
    pub fn from_sdk(
        criteria: Option<&aws_sdk_lambda::types::FilterCriteria>,
    ) -> Result<Self, FilterError> {
        Self::parse(
            criteria
                .map(|c| c.filters())
                .unwrap_or_default()
                .iter()
                .filter_map(|f| f.pattern()),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether Lambda delivers `record`: no filters, or any filter matches.
    pub fn admits(&self, record: &Value) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| p.matches(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The template's filter (and the moto resources' copy of it).
    const TEMPLATE: &str = crate::moto::resources::REQUESTS_FILTER_PATTERN;

    fn record(event: &str, record_type: Value) -> Value {
        json!({
            "eventName": event,
            "eventSource": "aws:dynamodb",
            "dynamodb": {
                "Keys": {"request_id": {"S": "r-1"}},
                "NewImage": {"request_id": {"S": "r-1"}, "record_type": record_type},
                "SequenceNumber": "100"
            }
        })
    }

    #[test]
    fn the_template_filter_admits_new_requests_only() {
        let filter = FilterCriteria::parse([TEMPLATE]).unwrap();
        assert!(filter.admits(&record("INSERT", json!({"S": "request"}))));
        assert!(!filter.admits(&record("MODIFY", json!({"S": "request"}))));
        assert!(!filter.admits(&record("REMOVE", json!({"S": "request"}))));
        assert!(!filter.admits(&record("INSERT", json!({"S": "bucket"}))));
        assert!(!filter.admits(&record("INSERT", json!({"N": "1"}))));
        let mut foreign = record("INSERT", Value::Null);
        foreign["dynamodb"]["NewImage"]
            .as_object_mut()
            .unwrap()
            .remove("record_type");
        assert!(!filter.admits(&foreign));
        assert!(!filter.admits(&json!({"eventName": "INSERT"})));
    }

    #[test]
    fn filters_are_alternatives_and_none_admits_all() {
        let none = FilterCriteria::parse([]).unwrap();
        assert!(none.is_empty());
        assert!(none.admits(&json!({"anything": 1})));
        let either = FilterCriteria::parse([
            r#"{"eventName": ["INSERT"]}"#,
            r#"{"eventName": ["REMOVE"]}"#,
        ])
        .unwrap();
        assert!(either.admits(&json!({"eventName": "REMOVE"})));
        assert!(!either.admits(&json!({"eventName": "MODIFY"})));
    }

    #[test]
    fn values_compare_as_json_and_arrays_match_any_element() {
        let p =
            Pattern::parse(r#"{"n": [5], "flag": [true], "tags": ["a"], "gone": [null]}"#).unwrap();
        assert!(p.matches(&json!({"n": 5.0, "flag": true, "tags": ["b", "a"], "gone": null})));
        assert!(!p.matches(&json!({"n": 5, "flag": "true", "tags": ["b"], "gone": null})));
        assert!(!p.matches(&json!({"n": 5, "flag": true, "tags": ["a"]})));
    }

    #[test]
    fn content_filters_and_odd_shapes_are_refused() {
        assert!(matches!(
            Pattern::parse(r#"{"eventName": [{"prefix": "IN"}]}"#),
            Err(FilterError::Unsupported { field, .. }) if field == "eventName"
        ));
        assert!(matches!(
            Pattern::parse(r#"{"dynamodb": {"Keys": "x"}}"#),
            Err(FilterError::Unsupported { field, .. }) if field == "dynamodb.Keys"
        ));
        assert!(matches!(
            Pattern::parse("[1]"),
            Err(FilterError::NotAnObject(_))
        ));
        assert!(matches!(Pattern::parse("{"), Err(FilterError::NotJson(_))));
    }
}
