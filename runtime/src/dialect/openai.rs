//! OpenAI function calling with `strict: true` (Structured Outputs): the documented JSON Schema subset.
//!
//! - types `string`, `number`, `integer`, `boolean`, `object`, `array`, `null` (in unions), `enum`, `anyOf`;
//! - every object lists all its properties in `required` and sets `additionalProperties: false`;
//! - `$defs` with `$ref` (`#/$defs/...` or `#`) for recursion; the root is an object, not an `anyOf`;
//! - string `pattern` and the string `format`s below, number `minimum`/`maximum`/`exclusive*`/`multipleOf`,
//!   array `minItems`/`maxItems` (no `uniqueItems`: a call in this dialect counts a repeated set item
//!   once); composition (`allOf`, `not`, `if`/`then`/`else`, `dependent*`) is refused;
//! - at most 5000 properties, 10 levels of object nesting, 1000 enum values and 120,000 characters of names
//!   and enum values in one schema.

use serde_json::{Map, Value};

use super::Inexpressible;
use super::shared::{self, Failure, child};

const DIALECT: &str = "OpenAI strict mode";

/// The string formats OpenAI's strict mode accepts. Other formats are dropped: they only narrow strings, and
/// the dispatcher still validates every argument against the Rust type.
pub(super) const STRING_FORMATS: &[&str] =
    &["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"];

/// Keywords carried over unchanged (besides the structural ones handled one by one).
const KEPT: &[&str] = &[
    "description",
    "pattern",
    "minLength",
    "maxLength",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
];

pub(super) const MAX_PROPERTIES: usize = 5000;
pub(super) const MAX_NESTING: usize = 10;
pub(super) const MAX_ENUM_VALUES: usize = 1000;
pub(super) const MAX_STRING_LENGTH: usize = 120_000;
/// One string enum with more than [`LARGE_ENUM`] values may hold at most this many characters.
pub(super) const MAX_LARGE_ENUM_LENGTH: usize = 15_000;
pub(super) const LARGE_ENUM: usize = 250;

/// The canonical schema as OpenAI accepts it with `strict: false`: the root checks only.
pub(super) fn non_strict(root: &Value) -> Result<Value, Failure> {
    const LOOSE: &str = "OpenAI function calling";
    shared::root_object(root, LOOSE, &["anyOf", "oneOf", "allOf"])?;
    shared::check_refs(root, root, "", LOOSE)?;
    Ok(root.clone())
}

/// The canonical schema in OpenAI's strict subset.
pub(super) fn strict(root: &Value) -> Result<Value, Failure> {
    let root_map = shared::root_object(root, DIALECT, &["anyOf", "oneOf", "allOf"])?;
    let mut cx = Strict { root, properties: 0, enum_values: 0, string_length: 0 };
    let mut out = cx.schema(root, "", Place::Root, 1)?;
    if let Some(defs) = root_map.get("$defs") {
        let Value::Object(defs) = defs else {
            return Err(shared::malformed("/$defs", defs));
        };
        let mut converted = Map::new();
        for (name, def) in defs {
            cx.string_length += name.len();
            let pointer = child("/$defs", name);
            // A definition is only ever reached from inside the root, so it is at least one level down.
            converted.insert(name.clone(), cx.schema(def, &pointer, Place::Nested, 2)?);
        }
        if let Value::Object(out) = &mut out {
            out.insert("$defs".into(), Value::Object(converted));
        }
    }
    cx.check_totals()?;
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The arguments object: the dispatcher treats a `null` argument as absent, so any optional argument
    /// can be made nullable.
    Root,
    /// Anything below: only a schema that already accepts `null` may receive one, because serde rejects
    /// `null` for a field that is optional only through `#[serde(default)]`.
    Nested,
}

struct Strict<'a> {
    root: &'a Value,
    properties: usize,
    enum_values: usize,
    string_length: usize,
}

impl Strict<'_> {
    fn schema(&mut self, schema: &Value, pointer: &str, place: Place, depth: usize) -> Result<Value, Failure> {
        let map = match schema {
            Value::Object(map) => map,
            Value::Bool(true) => return Err(shared::any_value(pointer, DIALECT)),
            Value::Bool(false) => return Err(shared::no_value(pointer)),
            other => return Err(shared::malformed(pointer, other)),
        };
        let mut map = map.clone();
        if place == Place::Nested && map.contains_key("$defs") {
            return Err(Failure::new(
                &child(pointer, "$defs"),
                Inexpressible::Keyword { keyword: "$defs".into() },
                "OpenAI strict mode accepts `$defs` only at the root of the schema",
            ));
        }
        shared::refuse_conditionals(&map, pointer, DIALECT)?;
        shared::fold_all_of(&mut map, pointer, DIALECT)?;
        shared::one_of_to_any_of(&mut map, pointer, DIALECT)?;
        shared::collapse_tuple(&mut map, pointer, DIALECT)?;
        if let Some(value) = map.remove("const") {
            // `const` is not in the documented subset; a one-value `enum` is, and accepts the same value.
            map.insert("enum".into(), Value::Array(vec![value]));
        }

        if let Some(reference) = map.get("$ref") {
            if shared::resolve(reference.as_str().unwrap_or_default(), self.root).is_none() {
                return Err(shared::unresolved(reference, pointer, DIALECT));
            }
            // A `$ref` must stand alone; a description beside it moves to a one-branch `anyOf` around it.
            let reference = Value::Object(Map::from_iter([("$ref".to_owned(), reference.clone())]));
            return Ok(match map.get("description") {
                Some(description) => Value::Object(Map::from_iter([
                    ("anyOf".to_owned(), Value::Array(vec![reference])),
                    ("description".to_owned(), description.clone()),
                ])),
                None => reference,
            });
        }
        if shared::is_unconstrained(&map) {
            return Err(shared::any_value(pointer, DIALECT));
        }

        let is_object = shared::has_type(&map, "object") || map.contains_key("properties");
        let is_string = shared::has_type(&map, "string");
        let mut out = Map::new();
        let mut dropped_format = None;
        for (key, value) in &map {
            match key.as_str() {
                "type" => {
                    check_type(value, pointer)?;
                    out.insert(key.clone(), value.clone());
                }
                "enum" => {
                    self.count_enum(value, pointer)?;
                    out.insert(key.clone(), value.clone());
                }
                "format" if is_string => match value.as_str() {
                    Some(format) if STRING_FORMATS.contains(&format) => {
                        out.insert(key.clone(), value.clone());
                    }
                    Some(format) => dropped_format = Some(format),
                    None => {}
                },
                "anyOf" => {
                    let branches = value
                        .as_array()
                        .filter(|b| !b.is_empty())
                        .ok_or_else(|| shared::malformed(&child(pointer, "anyOf"), value))?;
                    let mut converted = Vec::with_capacity(branches.len());
                    for (i, branch) in branches.iter().enumerate() {
                        let branch_pointer = child(&child(pointer, "anyOf"), &i.to_string());
                        converted.push(self.schema(branch, &branch_pointer, Place::Nested, depth)?);
                    }
                    out.insert(key.clone(), Value::Array(converted));
                }
                "items" if value != &Value::Bool(false) => {
                    let items = self.schema(value, &child(pointer, "items"), Place::Nested, depth)?;
                    out.insert(key.clone(), items);
                }
                "additionalProperties" if value != &Value::Bool(false) => {
                    return Err(map_failure(pointer, value));
                }
                "properties" | "required" => {}
                key if KEPT.contains(&key) => {
                    out.insert(key.to_owned(), value.clone());
                }
                // Annotations (`default`, `examples`, `title`, `deprecated`, ...) and constraints outside the
                // subset (`uniqueItems`, `minProperties`, non-string formats): dropping them only widens the
                // schema, and the dispatcher's strict validation still enforces the Rust type.
                _ => {}
            }
        }
        if let Some(format) = dropped_format {
            shared::describe_format(&mut out, format);
        }
        shared::describe_unique_items(&map, &mut out);
        if is_object {
            self.close_object(&map, &mut out, pointer, place, depth)?;
        }
        Ok(Value::Object(out))
    }

    /// Every property required, optional ones nullable where `null` is valid, `additionalProperties: false`.
    fn close_object(
        &mut self,
        source: &Map<String, Value>,
        out: &mut Map<String, Value>,
        pointer: &str,
        place: Place,
        depth: usize,
    ) -> Result<(), Failure> {
        if depth > MAX_NESTING {
            return Err(Failure::new(
                pointer,
                Inexpressible::Limit { limit: "object nesting depth", max: MAX_NESTING, actual: depth },
                format!(
                    "OpenAI strict mode accepts at most {MAX_NESTING} levels of nested objects, this object is at level {depth}; flatten the arguments"
                ),
            ));
        }
        let empty = Map::new();
        let properties = match source.get("properties") {
            Some(Value::Object(properties)) => properties,
            Some(other) => return Err(shared::malformed(&child(pointer, "properties"), other)),
            None => &empty,
        };
        let required: Vec<&str> = source
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let properties_pointer = child(pointer, "properties");
        let mut converted = Map::new();
        for (name, schema) in properties {
            self.properties += 1;
            self.string_length += name.len();
            let mut property = self.schema(schema, &child(&properties_pointer, name), Place::Nested, depth + 1)?;
            if place == Place::Root && !required.contains(&name.as_str()) && !shared::accepts_null(&property, self.root)
            {
                property = nullable(property);
            }
            converted.insert(name.clone(), property);
        }
        // Every property, in the order the properties are listed (the parameters' declaration order).
        let all: Vec<Value> = converted.keys().map(|name| Value::String(name.clone())).collect();
        out.insert("properties".into(), Value::Object(converted));
        out.insert("required".into(), Value::Array(all));
        out.insert("additionalProperties".into(), Value::Bool(false));
        Ok(())
    }

    fn count_enum(&mut self, values: &Value, pointer: &str) -> Result<(), Failure> {
        let Some(values) = values.as_array() else {
            return Err(shared::malformed(&child(pointer, "enum"), values));
        };
        self.enum_values += values.len();
        let length: usize = values.iter().filter_map(Value::as_str).map(str::len).sum();
        self.string_length += length;
        if values.len() > LARGE_ENUM && length > MAX_LARGE_ENUM_LENGTH {
            return Err(Failure::new(
                &child(pointer, "enum"),
                Inexpressible::Limit {
                    limit: "characters in an enum of more than 250 values",
                    max: MAX_LARGE_ENUM_LENGTH,
                    actual: length,
                },
                format!(
                    "OpenAI strict mode accepts at most {MAX_LARGE_ENUM_LENGTH} characters in an enum of more than {LARGE_ENUM} values, this one has {length}"
                ),
            ));
        }
        Ok(())
    }

    fn check_totals(&self) -> Result<(), Failure> {
        let limits = [
            ("properties", MAX_PROPERTIES, self.properties),
            ("enum values", MAX_ENUM_VALUES, self.enum_values),
            ("characters of property names, definition names and enum values", MAX_STRING_LENGTH, self.string_length),
        ];
        for (limit, max, actual) in limits {
            if actual > max {
                return Err(Failure::new(
                    "",
                    Inexpressible::Limit { limit, max, actual },
                    format!("OpenAI strict mode accepts at most {max} {limit} in one schema, this one has {actual}"),
                ));
            }
        }
        Ok(())
    }
}

const TYPES: &[&str] = &["string", "number", "integer", "boolean", "object", "array", "null"];

fn check_type(value: &Value, pointer: &str) -> Result<(), Failure> {
    let ok = match value {
        Value::String(t) => TYPES.contains(&t.as_str()),
        Value::Array(ts) => !ts.is_empty() && ts.iter().all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))),
        _ => false,
    };
    if ok { Ok(()) } else { Err(shared::malformed(&child(pointer, "type"), value)) }
}

fn map_failure(pointer: &str, value: &Value) -> Failure {
    Failure::new(
        &child(pointer, "additionalProperties"),
        Inexpressible::Map,
        format!(
            "an object with arbitrary keys ({}, e.g. a `HashMap` or a flattened map) cannot be expressed in OpenAI strict mode, which requires `additionalProperties: false` on every object; use a `Vec` of key/value structs, or offer this tool with `Dialect::OpenAiNonStrict`",
            shared::describe_open(value)
        ),
    )
}

/// `schema` or `null`. Plain types gain `"null"` in their type list (and in their `enum`); anything else is
/// wrapped in `anyOf` with `{"type": "null"}`.
fn nullable(schema: Value) -> Value {
    let Value::Object(mut map) = schema else {
        return schema;
    };
    let structural = ["anyOf", "$ref", "allOf", "oneOf"].iter().any(|k| map.contains_key(*k));
    if !structural {
        let types = match map.remove("type") {
            Some(Value::String(t)) => Some(vec![Value::String(t)]),
            Some(Value::Array(ts)) => Some(ts),
            Some(other) => {
                map.insert("type".into(), other);
                None
            }
            None => None,
        };
        if let Some(mut types) = types {
            types.push(Value::String("null".into()));
            map.insert("type".into(), Value::Array(types));
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.push(Value::Null);
            }
            return Value::Object(map);
        }
    }
    if let (false, Some(Value::Array(branches))) = (map.contains_key("$ref"), map.get_mut("anyOf")) {
        branches.push(null_schema());
        return Value::Object(map);
    }
    let description = map.remove("description");
    let mut wrapper = Map::new();
    wrapper.insert("anyOf".into(), Value::Array(vec![Value::Object(map), null_schema()]));
    if let Some(description) = description {
        wrapper.insert("description".into(), description);
    }
    Value::Object(wrapper)
}

fn null_schema() -> Value {
    Value::Object(Map::from_iter([("type".to_owned(), Value::String("null".into()))]))
}
