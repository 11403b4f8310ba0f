//! A JSON Schema check for the OpenAPI documents of docs/ (the operator
//! contract and the customer API), for the keywords they use: `$ref` (local),
//! `type` (one or a list), `const`, `enum`, `required`, `properties`,
//! `additionalProperties: false`, `items`, `minItems`, `maxItems`,
//! `uniqueItems`, `minimum`, `maximum`, `pattern`, `format` (`date`,
//! `date-time`, `uuid`), `allOf` and `oneOf`. A keyword it does not know is
//! an error, so the documents cannot outgrow it unnoticed. infra's
//! `check-operator-api` holds the documents to OpenAPI itself.

use serde_json::Value;

/// The keywords [`check`] reads; any other is refused.
const KNOWN: &[&str] = &[
    "$ref",
    "type",
    "const",
    "enum",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minimum",
    "maximum",
    "pattern",
    "format",
    "allOf",
    "oneOf",
    "description",
];

/// The schema `value` stands for in `doc`: itself, or what its `$ref` names.
pub fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local $ref");
            resolve(doc, doc.pointer(pointer).expect("the $ref resolves"))
        }
        None => value,
    }
}

fn type_fits(name: &str, value: &Value) -> Result<bool, String> {
    Ok(match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        other => return Err(format!("type {other} not understood by this check")),
    })
}

fn format_fits(format: &str, text: &str) -> Result<bool, String> {
    Ok(match format {
        "date" => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok() && text.len() == 10,
        "date-time" => chrono::DateTime::parse_from_rfc3339(text).is_ok(),
        "uuid" => {
            text.len() == 36
                && text.char_indices().all(|(i, c)| match i {
                    8 | 13 | 18 | 23 => c == '-',
                    _ => c.is_ascii_hexdigit(),
                })
        }
        other => return Err(format!("format {other} not understood by this check")),
    })
}

/// `value` against `schema` (a schema of `doc`, or a `$ref` into it); the
/// error names where, from `at`.
pub fn check(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    let Some(keywords) = schema.as_object() else {
        return Err(format!("{at}: the schema is not an object"));
    };
    if let Some(unknown) = keywords.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!(
            "{at}: keyword {unknown} not understood by this check"
        ));
    }
    match schema.get("type") {
        Some(Value::String(name)) if !type_fits(name, value)? => {
            return Err(format!("{at}: {value} is not of type {name}"));
        }
        Some(Value::Array(names)) => {
            let mut fits = false;
            for name in names {
                fits |= type_fits(name.as_str().unwrap_or_default(), value)?;
            }
            if !fits {
                return Err(format!("{at}: {value} is none of the types {names:?}"));
            }
        }
        _ => {}
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return Err(format!("{at}: {value} is not {constant}"));
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(n) = value.as_f64() {
        if schema["minimum"].as_f64().is_some_and(|m| n < m) {
            return Err(format!("{at}: {value} under the minimum"));
        }
        if schema["maximum"].as_f64().is_some_and(|m| n > m) {
            return Err(format!("{at}: {value} over the maximum"));
        }
    }
    if let Some(text) = value.as_str() {
        if let Some(pattern) = schema["pattern"].as_str() {
            let re = regex::Regex::new(pattern).map_err(|e| format!("{at}: pattern: {e}"))?;
            if !re.is_match(text) {
                return Err(format!("{at}: {text:?} does not match {pattern}"));
            }
        }
        if let Some(format) = schema["format"].as_str()
            && !format_fits(format, text).map_err(|e| format!("{at}: {e}"))?
        {
            return Err(format!("{at}: {text:?} is not a {format}"));
        }
    }
    if let Some(object) = value.as_object() {
        for field in schema["required"].as_array().into_iter().flatten() {
            let field = field.as_str().unwrap_or_default();
            if !object.contains_key(field) {
                return Err(format!("{at}: {field} is required"));
            }
        }
        let properties = schema["properties"].as_object();
        for (field, v) in object {
            match properties.and_then(|p| p.get(field)) {
                Some(property) => check(doc, property, v, &format!("{at}.{field}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!(
                        "{at}: {field} is not a property the document names"
                    ));
                }
                None => {}
            }
        }
    }
    if let Some(items) = value.as_array() {
        if schema["minItems"]
            .as_u64()
            .is_some_and(|m| (items.len() as u64) < m)
        {
            return Err(format!("{at}: fewer than minItems"));
        }
        if schema["maxItems"]
            .as_u64()
            .is_some_and(|m| items.len() as u64 > m)
        {
            return Err(format!("{at}: more than maxItems"));
        }
        if schema["uniqueItems"].as_bool() == Some(true)
            && items
                .iter()
                .enumerate()
                .any(|(i, v)| items[..i].contains(v))
        {
            return Err(format!("{at}: an item is repeated"));
        }
        if let Some(item) = schema.get("items") {
            for (i, v) in items.iter().enumerate() {
                check(doc, item, v, &format!("{at}[{i}]"))?;
            }
        }
    }
    for (i, part) in schema["allOf"].as_array().into_iter().flatten().enumerate() {
        check(doc, part, value, &format!("{at}(allOf {i})"))?;
    }
    if let Some(choices) = schema["oneOf"].as_array() {
        let fitting = choices
            .iter()
            .filter(|choice| check(doc, choice, value, at).is_ok())
            .count();
        if fitting != 1 {
            return Err(format!(
                "{at}: {value} fits {fitting} of the oneOf choices, not one"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_keyword_refuses_what_it_should() {
        let doc =
            json!({"components": {"schemas": {"Id": {"type": "string", "pattern": "^[a-z]{2}$"}}}});
        let schema = json!({
            "type": "object", "additionalProperties": false, "required": ["id", "n"],
            "properties": {
                "id": {"$ref": "#/components/schemas/Id"},
                "n": {"type": "integer", "minimum": 1, "maximum": 9},
                "at": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "maxItems": 2, "uniqueItems": true, "items": {"enum": ["a", "b", "c"]}},
                "maybe": {"oneOf": [{"type": "null"}, {"type": "boolean"}]}
            }
        });
        let ok = json!({"id": "ab", "n": 3, "at": "2026-12-06T10:00:00Z", "tags": ["a", "b"], "maybe": null});
        assert_eq!(check(&doc, &schema, &ok, "x"), Ok(()));
        for bad in [
            json!({"id": "ab"}),
            json!({"id": "abc", "n": 3}),
            json!({"id": "ab", "n": 10}),
            json!({"id": "ab", "n": 3, "at": "yesterday"}),
            json!({"id": "ab", "n": 3, "tags": ["a", "a"]}),
            json!({"id": "ab", "n": 3, "tags": ["a", "b", "c"]}),
            json!({"id": "ab", "n": 3, "tags": ["d"]}),
            json!({"id": "ab", "n": 3, "maybe": 1}),
            json!({"id": "ab", "n": 3, "extra": 1}),
        ] {
            assert!(check(&doc, &schema, &bad, "x").is_err(), "{bad}");
        }
        let unknown = json!({"type": "string", "maxLength": 3});
        assert!(check(&doc, &unknown, &json!("a"), "x").is_err());
    }
}
