//! [`strict`]: the tools' input schemas in the plain form strict clients
//! accept.
//!
//! The schemas derived from the parameter types say "optional" the way Rust
//! does: a `null` in a union type with `"default": null`, a `$ref` into
//! `$defs` for an enum, and `format`s (`uint64`, `double`) that no JSON Schema
//! validator knows. Clients that check schemas strictly (and models' tool
//! APIs with a strict mode) refuse some of these. The strict form says the
//! same with plain keywords: an optional argument is one left out of
//! `required`, an enum is written in place, numbers keep their bounds but not
//! the unknown formats, and an object names every argument it takes
//! (`additionalProperties: false`).

use serde_json::{Map, Value};

/// Formats JSON Schema defines; any other is dropped.
const KNOWN_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "uuid",
    "regex",
];

/// The header clients mirror a tool's `session_id` argument into
/// (`Mcp-Param-Session-Id`), so a proxy can route a call to the replica that
/// holds its sandbox without reading the body.
pub const SESSION_ID_HEADER: &str = "Session-Id";

/// Marks the `session_id` property of an input schema for header mirroring
/// (the `x-mcp-header` annotation of the 2026-07-28 protocol); clients that
/// speak it send the value as `Mcp-Param-Session-Id` too, and the HTTP
/// transport refuses a request whose header disagrees with its body.
pub fn mirror_session_id(schema: &mut Map<String, Value>) {
    if let Some(Value::Object(property)) = schema
        .get_mut("properties")
        .and_then(|properties| properties.get_mut("session_id"))
    {
        property.insert("x-mcp-header".into(), SESSION_ID_HEADER.into());
    }
}

/// The strict form of a tool's input schema.
pub fn strict(schema: &Map<String, Value>) -> Map<String, Value> {
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = schema.clone();
    out.remove("$defs");
    out.remove("$schema");
    let mut value = Value::Object(out);
    tidy(&mut value, &defs);
    match value {
        Value::Object(map) => map,
        _ => unreachable!("an object stays an object"),
    }
}

/// Rewrites one schema node (and its children) in the strict form.
fn tidy(node: &mut Value, defs: &Map<String, Value>) {
    let Value::Object(map) = node else {
        return;
    };
    inline_reference(map, defs);
    drop_null_option(map);
    if let Some(Value::String(format)) = map.get("format")
        && !KNOWN_FORMATS.contains(&format.as_str())
    {
        map.remove("format");
    }
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
    if let Some(variants) = map.get("oneOf").and_then(Value::as_array)
        && let Some(values) = constants(variants)
    {
        map.remove("oneOf");
        map.insert("type".into(), "string".into());
        map.insert("enum".into(), Value::Array(values));
    }
    if map.get("type") == Some(&Value::String("object".into())) && map.contains_key("properties") {
        map.entry("additionalProperties").or_insert(false.into());
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for property in properties.values_mut() {
            tidy(property, defs);
        }
    }
    if let Some(items) = map.get_mut("items") {
        tidy(items, defs);
    }
}

/// `{"anyOf": [{"$ref": X}, {"type": "null"}]}` (or a bare `$ref`) becomes X's
/// definition, keeping the node's own description.
fn inline_reference(map: &mut Map<String, Value>, defs: &Map<String, Value>) {
    let target = match (map.get("$ref"), map.get("anyOf")) {
        (Some(Value::String(reference)), _) => Some(reference.clone()),
        (None, Some(Value::Array(options))) => {
            let mut non_null = options.iter().filter(|o| !is_null_type(o));
            match (non_null.next(), non_null.next()) {
                (Some(Value::Object(only)), None) => {
                    only.get("$ref").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            }
        }
        _ => None,
    };
    let Some(reference) = target else {
        return;
    };
    let Some(Value::Object(definition)) = reference
        .strip_prefix("#/$defs/")
        .and_then(|name| defs.get(name))
    else {
        return;
    };
    map.remove("$ref");
    map.remove("anyOf");
    for (key, value) in definition {
        if key != "description" || !map.contains_key("description") {
            map.insert(key.clone(), value.clone());
        }
    }
}

/// `"type": ["string", "null"]` becomes `"type": "string"`: leaving the
/// argument out is how it is not given.
fn drop_null_option(map: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = map.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        let single = match kept.as_slice() {
            [one] => one.clone(),
            _ => Value::Array(kept),
        };
        map.insert("type".into(), single);
    }
}

fn is_null_type(option: &Value) -> bool {
    option.get("type") == Some(&Value::String("null".into()))
}

/// The values of a `oneOf` made only of string constants.
fn constants(variants: &[Value]) -> Option<Vec<Value>> {
    variants
        .iter()
        .map(|v| match v.get("const") {
            Some(Value::String(s)) => Some(Value::String(s.clone())),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strict_of(schema: Value) -> Value {
        Value::Object(strict(schema.as_object().unwrap()))
    }

    #[test]
    fn optional_arguments_lose_their_null_and_unknown_formats() {
        let schema = strict_of(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "n": {"type": ["integer", "null"], "format": "uint64", "minimum": 0, "default": null},
                "path": {"type": "string", "default": "/"},
            },
            "required": ["path"],
        }));
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0},
                    "path": {"type": "string", "default": "/"},
                },
                "required": ["path"],
                "additionalProperties": false,
            })
        );
    }

    #[test]
    fn enums_behind_references_are_written_in_place() {
        let schema = strict_of(json!({
            "$defs": {"Encoding": {"description": "How.", "oneOf": [
                {"const": "utf-8", "type": "string"}, {"const": "base64", "type": "string"}
            ]}},
            "type": "object",
            "properties": {
                "encoding": {"anyOf": [{"$ref": "#/$defs/Encoding"}, {"type": "null"}],
                             "default": null, "description": "Which."},
            },
        }));
        assert_eq!(
            schema["properties"]["encoding"],
            json!({"description": "Which.", "type": "string", "enum": ["utf-8", "base64"]})
        );
        assert!(schema.get("$defs").is_none());
    }
}
