//! Gemini function declarations: `parameters` is a Gemini `Schema`, a select subset of the OpenAPI 3.0
//! schema object.
//!
//! - fields `type` (one type, never a list), `format`, `title`, `description`, `nullable`, `enum` (strings
//!   only), `properties`, `required`, `items`, `minItems`/`maxItems`, `minLength`/`maxLength`, `pattern`,
//!   `minimum`/`maximum` (held as floats by the SDK: an integer bound a float cannot hold is stated as the
//!   nearest one inside it that a float holds), `minProperties`/`maxProperties`, `anyOf`, `example`;
//! - no `$ref`/`$defs` (every reference is inlined, so recursive types cannot be expressed), no
//!   `additionalProperties`, no `const`, no `oneOf`/`allOf`, no tuples;
//! - `nullable: true` instead of `["T", "null"]` or a `null` alternative;
//! - an object must list at least one property; a function without parameters omits `parameters`;
//! - formats: `float`/`double` for numbers, `int32`/`int64` for integers, `date-time` (and `enum`) for
//!   strings.

use serde_json::{Map, Value};

use super::Inexpressible;
use super::shared::{self, Failure, child};

const DIALECT: &str = "Gemini's OpenAPI schema subset";

/// Formats Gemini accepts, per type. Others are dropped: they only narrow values, and the dispatcher still
/// validates every argument against the Rust type.
pub(super) fn format_allowed(schema_type: &str, format: &str) -> bool {
    matches!(
        (schema_type, format),
        ("number", "float" | "double") | ("integer", "int32" | "int64") | ("string", "date-time" | "enum")
    )
}

/// Keywords carried over unchanged (besides the structural ones handled one by one).
const KEPT: &[&str] = &[
    "description",
    "title",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "example",
];

const TYPES: &[&str] = &["string", "number", "integer", "boolean", "object", "array"];

/// The parameters schema, with every reference inlined.
pub(super) fn parameters(root: &Value) -> Result<Value, Failure> {
    let map = shared::root_object(root, DIALECT, &["anyOf", "oneOf", "allOf"])?;
    if let Some(Value::Object(properties)) = map.get("properties") {
        for name in properties.keys() {
            check_parameter_name(name)?;
        }
    }
    let mut cx = Inline { root, stack: Vec::new(), depth: 0, made: 0 };
    cx.schema(root, "", true)
}

/// Gemini's rule for parameter names: a letter or `_` first, then letters, digits and `_`, at most 64.
fn check_parameter_name(name: &str) -> Result<(), Failure> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok && rest_ok && name.len() <= 64 {
        return Ok(());
    }
    Err(Failure::new(
        &child("/properties", name),
        Inexpressible::Name { name: name.to_owned() },
        format!(
            "Gemini parameter names must start with a letter or `_` and contain only ASCII letters, digits and `_` (at most 64), `{name}` does not"
        ),
    ))
}

/// The most schemas one inside the other (a property's, an item's, an alternative's, a definition's where a
/// `$ref` is inlined) a converted schema may nest: the conversion recurses once for each, and a chain of
/// definitions each referring to the next would otherwise run it out of stack.
pub(super) const MAX_INLINED_DEPTH: usize = 32;

/// The most schemas a conversion makes. Inlining copies a definition at every `$ref` to it, so a schema of `n`
/// definitions each referring twice to the next would make 2^n of them (a few kilobytes becoming gigabytes).
pub(super) const MAX_INLINED_SCHEMAS: usize = 10_000;

struct Inline<'a> {
    root: &'a Value,
    /// The definitions being inlined, outermost first: meeting one of them again is recursion.
    stack: Vec<String>,
    /// How many schemas enclose the one being converted.
    depth: usize,
    /// How many schemas were converted so far.
    made: usize,
}

impl Inline<'_> {
    /// [`convert`](Self::convert), within [`MAX_INLINED_DEPTH`] and [`MAX_INLINED_SCHEMAS`].
    fn schema(&mut self, schema: &Value, pointer: &str, is_root: bool) -> Result<Value, Failure> {
        self.made += 1;
        if self.made > MAX_INLINED_SCHEMAS {
            return Err(Failure::new(
                pointer,
                Inexpressible::Limit {
                    limit: "schemas once every `$ref` is inlined",
                    max: MAX_INLINED_SCHEMAS,
                    actual: self.made,
                },
                format!(
                    "{DIALECT} has no `$ref`, and inlining every reference of this schema makes more than {MAX_INLINED_SCHEMAS} schemas (a definition is copied at each `$ref` to it); refer to fewer shared definitions, or declare the tool with Gemini's `parametersJsonSchema` (full JSON Schema) instead"
                ),
            ));
        }
        if self.depth >= MAX_INLINED_DEPTH {
            return Err(Failure::new(
                pointer,
                Inexpressible::Limit {
                    limit: "nesting depth once every `$ref` is inlined",
                    max: MAX_INLINED_DEPTH,
                    actual: self.depth + 1,
                },
                format!(
                    "{DIALECT} has no `$ref`, and with every reference inlined this schema nests more than {MAX_INLINED_DEPTH} schemas deep (counting properties, items, alternatives and the definitions references lead to); flatten the arguments, or declare the tool with Gemini's `parametersJsonSchema` (full JSON Schema) instead"
                ),
            ));
        }
        self.depth += 1;
        let converted = self.convert(schema, pointer, is_root);
        self.depth -= 1;
        converted
    }

    fn convert(&mut self, schema: &Value, pointer: &str, is_root: bool) -> Result<Value, Failure> {
        let map = match schema {
            Value::Object(map) => map,
            Value::Bool(true) => return Err(shared::any_value(pointer, DIALECT)),
            Value::Bool(false) => return Err(shared::no_value(pointer)),
            other => return Err(shared::malformed(pointer, other)),
        };
        let mut map = map.clone();
        if let Some(reference) = map.remove("$ref") {
            return self.inline(&reference, map, pointer);
        }
        shared::refuse_conditionals(&map, pointer, DIALECT)?;
        shared::fold_all_of(&mut map, pointer, DIALECT)?;
        shared::one_of_to_any_of(&mut map, pointer, DIALECT)?;
        shared::collapse_tuple(&mut map, pointer, DIALECT)?;
        if shared::is_unconstrained(&map) {
            return Err(shared::any_value(pointer, DIALECT));
        }
        if let Some(value) = map.remove("const") {
            map.insert("enum".into(), Value::Array(vec![value]));
        }

        let mut nullable = false;
        let mut out = Map::new();
        let schema_type = self.single_type(&map, pointer, &mut nullable)?;
        if let Some(values) = map.get("enum") {
            let values = string_enum(values, schema_type.as_deref(), pointer, &mut nullable)?;
            out.insert("type".into(), Value::String("string".into()));
            out.insert("enum".into(), values);
        } else if let Some(t) = &schema_type {
            out.insert("type".into(), Value::String(t.clone()));
        }
        let mut alternatives = None;
        if let Some(any_of) = map.get("anyOf") {
            alternatives = self.any_of(any_of, pointer, &mut nullable)?;
        }

        let mut dropped_format = None;
        for (key, value) in &map {
            match key.as_str() {
                "type" | "enum" | "anyOf" | "required" => {}
                "format" => match (value.as_str(), schema_type.as_deref()) {
                    (Some(format), Some(t)) if format_allowed(t, format) => {
                        out.insert(key.clone(), value.clone());
                    }
                    (Some(format), Some("string")) => dropped_format = Some(format),
                    _ => {}
                },
                "properties" => {
                    let Value::Object(properties) = value else {
                        return Err(shared::malformed(&child(pointer, "properties"), value));
                    };
                    let properties_pointer = child(pointer, "properties");
                    let mut converted = Map::new();
                    for (name, property) in properties {
                        converted
                            .insert(name.clone(), self.schema(property, &child(&properties_pointer, name), false)?);
                    }
                    let required: Vec<Value> = map
                        .get("required")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|name| name.as_str().is_some_and(|n| converted.contains_key(n)))
                        .cloned()
                        .collect();
                    out.insert("properties".into(), Value::Object(converted));
                    if !required.is_empty() {
                        out.insert("required".into(), Value::Array(required));
                    }
                }
                "items" if value != &Value::Bool(false) => {
                    out.insert(key.clone(), self.schema(value, &child(pointer, "items"), false)?);
                }
                // A closed object is what Gemini generates anyway (`false` is dropped); arbitrary keys it
                // cannot say.
                "additionalProperties" if value != &Value::Bool(false) => {
                    return Err(Failure::new(
                        &child(pointer, "additionalProperties"),
                        Inexpressible::Map,
                        format!(
                            "an object with arbitrary keys ({}, e.g. a `HashMap` or a flattened map) cannot be expressed in {DIALECT}, which has no `additionalProperties` and lists every property; use a `Vec` of key/value structs",
                            shared::describe_open(value)
                        ),
                    ));
                }
                // Gemini's SDK holds bounds as floats: an integer bound a float cannot hold (`u64::MAX` would
                // come back as 2^64) is stated as the nearest one inside it, which a call in this dialect is
                // held to (`Walk::in_dialect`).
                "minimum" | "maximum" => {
                    let exact = crate::dialect::float_exact_bound(value, key == "maximum");
                    out.insert(key.clone(), exact.unwrap_or_else(|| value.clone()));
                }
                key if KEPT.contains(&key) => {
                    out.insert(key.to_owned(), value.clone());
                }
                // `$defs` (inlined), `default` (ignored by Gemini), `examples`, `uniqueItems`,
                // `exclusiveMinimum`/`exclusiveMaximum`, `multipleOf`, other formats: dropping them only
                // widens the schema, and the dispatcher still validates the Rust type.
                _ => {}
            }
        }

        if let Some(format) = dropped_format {
            shared::describe_format(&mut out, format);
        }
        shared::describe_unique_items(&map, &mut out);
        if schema_type.as_deref() == Some("object") && !is_root {
            let listed = out.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
            if !listed {
                return Err(Failure::new(
                    pointer,
                    Inexpressible::EmptyObject,
                    "Gemini rejects an object schema without properties (`properties: should be non-empty for OBJECT type`); an empty struct or an open object cannot be a nested value",
                ));
            }
        }
        match alternatives {
            // One alternative besides `null`: it becomes this schema (this schema's description wins).
            Some(Alternatives::One(Value::Object(only))) => {
                for (key, value) in only {
                    out.entry(key).or_insert(value);
                }
            }
            Some(Alternatives::One(_)) | None => {}
            Some(Alternatives::Many(branches)) => {
                out.insert("anyOf".into(), Value::Array(branches));
            }
        }
        if nullable {
            mark_nullable(&mut out);
        }
        Ok(Value::Object(out))
    }

    /// Inlines the definition `reference` points to; `siblings` (a description) override its own.
    fn inline(&mut self, reference: &Value, siblings: Map<String, Value>, pointer: &str) -> Result<Value, Failure> {
        let Some((name, definition)) = reference.as_str().and_then(|r| shared::resolve(r, self.root)) else {
            return Err(shared::unresolved(reference, pointer, DIALECT));
        };
        if name == "#" || self.stack.iter().any(|open| open == name) {
            let shown = reference.as_str().unwrap_or_default().to_owned();
            return Err(Failure::new(
                &child(pointer, "$ref"),
                Inexpressible::Recursion { reference: shown.clone() },
                format!(
                    "a recursive type (`$ref: {shown}` inside its own definition) cannot be expressed in Gemini's `parameters`, which has no `$ref` and must be finite; bound the depth with distinct types, or declare the tool with Gemini's `parametersJsonSchema` (full JSON Schema) instead"
                ),
            ));
        }
        self.stack.push(name.to_owned());
        let inlined = self.schema(definition, &shared::target_pointer(name), false);
        self.stack.pop();
        let mut inlined = inlined?;
        if let (Value::Object(out), Some(description)) = (&mut inlined, siblings.get("description")) {
            out.insert("description".into(), description.clone());
        }
        Ok(inlined)
    }

    /// The one non-null type of the schema, if it names one; `null` in the list sets `nullable`.
    fn single_type(
        &self,
        map: &Map<String, Value>,
        pointer: &str,
        nullable: &mut bool,
    ) -> Result<Option<String>, Failure> {
        let types: Vec<&str> = match map.get("type") {
            None => return Ok(None),
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            Some(other) => return Err(shared::malformed(&child(pointer, "type"), other)),
        };
        let non_null: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
        *nullable |= non_null.len() < types.len();
        match non_null.as_slice() {
            [] if map.contains_key("anyOf") => Ok(None),
            [] => Err(Failure::new(
                pointer,
                Inexpressible::OnlyNull,
                format!(
                    "a value that can only be `null` (such as `()`) cannot be expressed in {DIALECT}, which has no `null` type; remove the parameter"
                ),
            )),
            [t] if TYPES.contains(t) => Ok(Some((*t).to_owned())),
            [t] => Err(shared::malformed(&child(pointer, "type"), &Value::String((*t).to_owned()))),
            several => Err(Failure::new(
                &child(pointer, "type"),
                Inexpressible::TypeUnion,
                format!(
                    "Gemini's `type` names one type, this schema allows {}; use an enum with a variant per type",
                    several.join(", ")
                ),
            )),
        }
    }

    fn any_of(&mut self, any_of: &Value, pointer: &str, nullable: &mut bool) -> Result<Option<Alternatives>, Failure> {
        let branches = any_of.as_array().ok_or_else(|| shared::malformed(&child(pointer, "anyOf"), any_of))?;
        let any_pointer = child(pointer, "anyOf");
        let mut kept = Vec::new();
        for (i, branch) in branches.iter().enumerate() {
            if is_null_schema(branch) {
                *nullable = true;
                continue;
            }
            kept.push(self.schema(branch, &child(&any_pointer, &i.to_string()), false)?);
        }
        Ok(match kept.len() {
            0 => {
                return Err(Failure::new(
                    pointer,
                    Inexpressible::OnlyNull,
                    format!(
                        "a value that can only be `null` cannot be expressed in {DIALECT}, which has no `null` type"
                    ),
                ));
            }
            1 => kept.pop().map(Alternatives::One),
            _ => Some(Alternatives::Many(kept)),
        })
    }
}

/// `nullable` applies to the `type` beside it, so a schema of alternatives without a type of its own passes
/// it on to each alternative.
fn mark_nullable(schema: &mut Map<String, Value>) {
    if !schema.contains_key("type")
        && let Some(Value::Array(branches)) = schema.get_mut("anyOf")
    {
        for branch in branches.iter_mut().filter_map(Value::as_object_mut) {
            mark_nullable(branch);
        }
        return;
    }
    schema.insert("nullable".into(), Value::Bool(true));
}

enum Alternatives {
    One(Value),
    Many(Vec<Value>),
}

/// `{"type": "null"}` (with at most a description): the `null` half of an `Option`.
fn is_null_schema(schema: &Value) -> bool {
    schema.as_object().is_some_and(|m| {
        m.get("type").is_some_and(|t| t == "null") && m.keys().all(|k| k == "type" || k == "description")
    })
}

/// The enum's values without `null` (which sets `nullable`); Gemini enums are strings.
fn string_enum(
    values: &Value,
    schema_type: Option<&str>,
    pointer: &str,
    nullable: &mut bool,
) -> Result<Value, Failure> {
    let values = values.as_array().ok_or_else(|| shared::malformed(&child(pointer, "enum"), values))?;
    *nullable |= values.iter().any(Value::is_null);
    let kept: Vec<Value> = values.iter().filter(|v| !v.is_null()).cloned().collect();
    let all_strings = kept.iter().all(Value::is_string) && matches!(schema_type, None | Some("string"));
    if !all_strings {
        let shown: Vec<String> = kept.iter().take(4).map(Value::to_string).collect();
        return Err(Failure::new(
            &child(pointer, "enum"),
            Inexpressible::NonStringEnum,
            format!(
                "Gemini enums hold strings only, this one holds {}; use a unit enum serialized as strings",
                shown.join(", ")
            ),
        ));
    }
    if kept.is_empty() {
        return Err(Failure::new(
            pointer,
            Inexpressible::OnlyNull,
            format!("an enum whose only value is `null` cannot be expressed in {DIALECT}"),
        ));
    }
    Ok(Value::Array(kept))
}
