//! The canonical, model-visible schema of a tool: one closed JSON object, every subschema inline, with
//! each parameter's doc comment as its description. Provider dialects are transforms of this one.

use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tool::ToolSpec;

/// A tool as offered to a model: name, description, and the JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The registered name.
    pub name: String,
    /// The description the model reads.
    pub description: String,
    /// The canonical JSON schema of the arguments object.
    pub input_schema: Value,
}

fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
}

/// The canonical schema of a tool's arguments: generated from its parameters' types, or, for a tool defined
/// by a schema ([`JsonTool`](crate::json_tool::JsonTool)), the schema it publishes.
pub fn input_schema(spec: &ToolSpec) -> Value {
    if let Some(given) = spec.given_input_schema() {
        return given.clone();
    }
    let mut generator = generator();
    let mut properties = Map::new();
    let mut required = Vec::new();
    for param in spec.params() {
        let mut schema = param.schema(&mut generator).to_value();
        if schema == Value::Bool(true) {
            // `true` and `{}` accept the same values; only the object form can carry a description.
            schema = Value::Object(Map::new());
        }
        if let (Some(doc), Value::Object(map)) = (param.description(), &mut schema) {
            map.insert("description".to_owned(), Value::String(doc.to_owned()));
        }
        properties.insert(param.name().to_owned(), schema);
        if !param.accepts_null() {
            required.push(Value::String(param.name().to_owned()));
        }
    }
    let mut root = Map::new();
    root.insert("type".into(), "object".into());
    root.insert("properties".into(), Value::Object(properties));
    root.insert("required".into(), Value::Array(required));
    root.insert("additionalProperties".into(), Value::Bool(false));
    let defs = generator.take_definitions(true);
    if !defs.is_empty() {
        // Only recursive types keep references; everything else is inline.
        root.insert("$defs".into(), Value::Object(defs));
    }
    let mut root = Value::Object(root);
    normalize(&mut root);
    root
}

/// Drops generator noise (`$schema`, `title`) and closes every object whose extra keys the schema does not
/// mention: structs (with or without fields) and `Option`s of them (`type: ["object", "null"]`, which
/// schemars left open while the same struct outside an `Option` was closed). Maps say `additionalProperties`
/// themselves and stay open.
fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("$schema");
            map.remove("title");
            let is_object = match map.get("type") {
                Some(Value::String(t)) => t == "object",
                Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
                _ => false,
            };
            if is_object && !map.contains_key("additionalProperties") && !map.contains_key("patternProperties") {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            add_integer_range(map);
            for (key, child) in map.iter_mut() {
                // Property *names* may be `title`; only schema keywords are dropped.
                if key == "properties" || key == "$defs" {
                    if let Value::Object(named) = child {
                        named.values_mut().for_each(normalize);
                    }
                } else {
                    normalize(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// Gives a Rust integer type (known by its schemars `format`) the `minimum` and `maximum` the dispatcher
/// enforces, so the schema admits exactly the integers the type does; bounds already given (a
/// `#[schemars(range(...))]`) are kept. For 128-bit types that range is `i64::MIN ..= u64::MAX`: a larger
/// JSON integer cannot be read without losing precision.
fn add_integer_range(map: &mut Map<String, Value>) {
    let is_integer = match map.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(types)) => types.iter().any(|t| t == "integer"),
        _ => false,
    };
    let type_name = match map.get("format").and_then(Value::as_str) {
        Some("int8") => "i8",
        Some("int16") => "i16",
        Some("int32") => "i32",
        Some("int64") => "i64",
        Some("int128") => "i128",
        Some("int") => "isize",
        Some("uint8") => "u8",
        Some("uint16") => "u16",
        Some("uint32") => "u32",
        Some("uint64") => "u64",
        Some("uint128") => "u128",
        Some("uint") => "usize",
        _ => return,
    };
    let Some((min, max)) = integer_range(type_name).filter(|_| is_integer) else { return };
    // Both fit: the ranges are clamped to what JSON integers hold.
    let number = |n: i128| i64::try_from(n).map(Value::from).or_else(|_| u64::try_from(n).map(Value::from)).ok();
    let (Some(min), Some(max)) = (number(min), number(max)) else { return };
    map.entry("minimum").or_insert(min);
    map.entry("maximum").or_insert(max);
}

/// The values an integer type admits from JSON: its own range, within what a JSON number parses to without
/// losing precision (`i64` and `u64`; a larger integer arrives as a floating-point number).
pub(crate) fn integer_range(type_name: &str) -> Option<(i128, i128)> {
    const JSON_MIN: i128 = i64::MIN as i128;
    const JSON_MAX: i128 = u64::MAX as i128;
    let (min, max): (i128, i128) = match type_name {
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        "i64" => (i64::MIN.into(), i64::MAX.into()),
        "isize" => (isize::MIN as i128, isize::MAX as i128),
        "i128" => (i128::MIN, i128::MAX),
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" => (0, u64::MAX.into()),
        "usize" => (0, usize::MAX as i128),
        "u128" => (0, i128::MAX),
        _ => return None,
    };
    Some((min.max(JSON_MIN), max.min(JSON_MAX)))
}
