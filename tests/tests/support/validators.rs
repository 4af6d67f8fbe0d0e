//! One validator per provider, written from that provider's documented rules and independent of the
//! transforms in `agent_airlock::dialect`: each walks a whole tool definition (as it would go in a request)
//! and returns every rule it breaks, with a JSON pointer. An empty list means the provider accepts it.
//!
//! Sources:
//! - OpenAI: "Structured Outputs — Supported schemas" (function calling with `strict: true`): supported types
//!   (string, number, boolean, integer, object, array, enum, anyOf), supported properties (string `pattern`
//!   and `format` ∈ date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid; number `multipleOf`,
//!   `maximum`, `exclusiveMaximum`, `minimum`, `exclusiveMinimum`; array `minItems`, `maxItems`), root must
//!   be an object and not `anyOf`, all fields required, `additionalProperties: false` always set, `$defs` and
//!   recursion (`#`) supported, up to 5000 properties, 10 levels of nesting, 1000 enum values; unsupported:
//!   `allOf`, `not`, `dependentRequired`, `dependentSchemas`, `if`/`then`/`else`. Function names
//!   `^[a-zA-Z0-9_-]{1,64}$`. A `$ref` must stand alone (the OpenAI SDKs unravel `$ref`s with siblings).
//! - Anthropic: tool `name` `^[a-zA-Z0-9_-]{1,64}$`, `input_schema` a JSON Schema object; the API answers
//!   "input_schema does not support oneOf, allOf, or anyOf at the top level".
//! - Gemini: `FunctionDeclaration` {name, description, parameters}; name starts with a letter or `_`, then
//!   a-z A-Z 0-9 `_` `.` `-`, at most 64; `parameters` is a `Schema` ("a select subset of an OpenAPI 3.0
//!   schema object") with fields type, format, title, description, nullable, enum, maxItems, minItems,
//!   properties, required, minProperties, maxProperties, minLength, maxLength, pattern, example, anyOf,
//!   propertyOrdering, default, items, minimum, maximum; `enum` for strings; formats float/double (NUMBER),
//!   int32/int64 (INTEGER), enum/date-time (STRING, Gemini Developer API); parameter names start with a
//!   letter or `_` and hold a-z A-Z 0-9 `_` (at most 64); the API answers "properties: should be non-empty
//!   for OBJECT type", so a function without parameters leaves `parameters` unset.
//! - MCP (2025-06-18 / 2025-11-25 `Tool`): {name, title?, description?, inputSchema, outputSchema?,
//!   annotations?}; `inputSchema` is a JSON Schema object with `type: "object"`, `properties` an object,
//!   `required` a list of strings; names of 1 to 128 characters from A-Z a-z 0-9 `_` `-` `.`.

use agent_airlock::dialect::Dialect;
use serde_json::{Map, Value};

/// Every rule `definition` breaks in `dialect`.
pub fn violations(dialect: Dialect, definition: &Value) -> Vec<String> {
    let mut v = Violations::default();
    match dialect {
        Dialect::OpenAi => openai(definition, true, &mut v),
        Dialect::OpenAiNonStrict => openai(definition, false, &mut v),
        Dialect::Anthropic => anthropic(definition, &mut v),
        Dialect::Gemini => gemini(definition, &mut v),
        Dialect::Mcp => mcp(definition, &mut v),
        other => v.add("", format!("no validator for {other:?}")),
    }
    v.0
}

#[derive(Default)]
struct Violations(Vec<String>);

impl Violations {
    fn add(&mut self, pointer: &str, rule: impl Into<String>) {
        self.0.push(format!("{}: {}", if pointer.is_empty() { "/" } else { pointer }, rule.into()));
    }
}

fn at(pointer: &str, segment: &str) -> String {
    format!("{pointer}/{}", segment.replace('~', "~0").replace('/', "~1"))
}

fn name_matches(name: &str, max: usize, first: impl Fn(char) -> bool, rest: impl Fn(char) -> bool) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(first) && chars.all(rest) && name.len() <= max
}

fn only_keys(map: &Map<String, Value>, allowed: &[&str], pointer: &str, what: &str, v: &mut Violations) {
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            v.add(&at(pointer, key), format!("`{key}` is not allowed in {what}"));
        }
    }
}

fn types_of(map: &Map<String, Value>) -> Vec<&str> {
    match map.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn matches_json_type(value: &Value, schema_type: &str) -> bool {
    match schema_type {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------------------
// OpenAI

const OPENAI_FORMATS: &[&str] = &["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"];
const OPENAI_TYPES: &[&str] = &["string", "number", "integer", "boolean", "object", "array", "null"];
const OPENAI_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "enum",
    "$ref",
    "pattern",
    "format",
    "minLength",
    "maxLength",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "maxItems",
];

fn openai(definition: &Value, strict: bool, v: &mut Violations) {
    let Some(tool) = definition.as_object() else {
        return v.add("", "a tool is a JSON object");
    };
    only_keys(tool, &["type", "function"], "", "an OpenAI tool", v);
    if tool.get("type") != Some(&Value::String("function".into())) {
        v.add("/type", "must be \"function\"");
    }
    let Some(function) = tool.get("function").and_then(Value::as_object) else {
        return v.add("/function", "missing");
    };
    only_keys(function, &["name", "description", "parameters", "strict"], "/function", "a function", v);
    let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !name_matches(name, 64, plain, plain) {
        v.add("/function/name", format!("`{name}` does not match ^[a-zA-Z0-9_-]{{1,64}}$"));
    }
    if !function.get("description").is_none_or(Value::is_string) {
        v.add("/function/description", "must be a string");
    }
    if function.get("strict") != Some(&Value::Bool(strict)) {
        v.add("/function/strict", format!("must be {strict}"));
    }
    let Some(parameters) = function.get("parameters") else {
        return v.add("/function/parameters", "missing");
    };
    let pointer = "/function/parameters";
    let Some(root) = parameters.as_object() else {
        return v.add(pointer, "must be a JSON object");
    };
    if root.get("type") != Some(&Value::String("object".into())) {
        v.add(&at(pointer, "type"), "the root must be `type: \"object\"`");
    }
    for keyword in ["anyOf", "oneOf", "allOf"] {
        if root.contains_key(keyword) {
            v.add(&at(pointer, keyword), "the root must not be a combinator");
        }
    }
    check_refs(parameters, parameters, pointer, v);
    if !strict {
        return;
    }
    let mut cx = StrictWalk { properties: 0, enum_values: 0, v };
    cx.walk(parameters, pointer, 1, true);
    if let Some(defs) = root.get("$defs") {
        match defs.as_object() {
            Some(defs) => {
                for (name, def) in defs {
                    cx.walk(def, &at(&at(pointer, "$defs"), name), 2, false);
                }
            }
            None => cx.v.add(&at(pointer, "$defs"), "must be an object"),
        }
    }
    let (properties, enum_values) = (cx.properties, cx.enum_values);
    if properties > 5000 {
        v.add(pointer, format!("{properties} properties, at most 5000"));
    }
    if enum_values > 1000 {
        v.add(pointer, format!("{enum_values} enum values, at most 1000"));
    }
}

struct StrictWalk<'v> {
    properties: usize,
    enum_values: usize,
    v: &'v mut Violations,
}

impl StrictWalk<'_> {
    fn walk(&mut self, schema: &Value, pointer: &str, depth: usize, is_root: bool) {
        let Some(map) = schema.as_object() else {
            return self.v.add(pointer, "a schema must be an object (no `true`/`false` schemas)");
        };
        for key in map.keys() {
            let allowed = OPENAI_KEYWORDS.contains(&key.as_str()) || (is_root && key == "$defs");
            if !allowed {
                self.v.add(&at(pointer, key), format!("`{key}` is not supported in strict mode"));
            }
        }
        if map.contains_key("$ref") {
            if map.len() != 1 {
                self.v.add(pointer, "a `$ref` must stand alone");
            }
            return;
        }
        let types = types_of(map);
        match map.get("type") {
            None => {}
            Some(Value::String(t)) if OPENAI_TYPES.contains(&t.as_str()) => {}
            Some(Value::Array(ts))
                if !ts.is_empty() && ts.iter().all(|t| t.as_str().is_some_and(|t| OPENAI_TYPES.contains(&t))) => {}
            Some(other) => self.v.add(&at(pointer, "type"), format!("`{other}` is not a supported type")),
        }
        if types.is_empty() && !map.contains_key("anyOf") && !map.contains_key("enum") {
            self.v.add(pointer, "every schema needs a `type`, an `enum`, an `anyOf` or a `$ref`");
        }
        if let Some(values) = map.get("enum") {
            match values.as_array() {
                Some(values) if !values.is_empty() => {
                    self.enum_values += values.len();
                    for value in values {
                        if !types.is_empty() && !types.iter().any(|t| matches_json_type(value, t)) {
                            self.v.add(&at(pointer, "enum"), format!("`{value}` is not of type {types:?}"));
                        }
                    }
                }
                _ => self.v.add(&at(pointer, "enum"), "must be a non-empty list"),
            }
        }
        let is = |t: &str| types.contains(&t);
        for (keyword, for_type) in [
            ("pattern", "string"),
            ("format", "string"),
            ("minLength", "string"),
            ("maxLength", "string"),
            ("items", "array"),
            ("minItems", "array"),
            ("maxItems", "array"),
        ] {
            if map.contains_key(keyword) && !is(for_type) {
                self.v.add(&at(pointer, keyword), format!("`{keyword}` applies to {for_type}s only"));
            }
        }
        for keyword in ["multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"] {
            if map.contains_key(keyword) && !is("number") && !is("integer") {
                self.v.add(&at(pointer, keyword), format!("`{keyword}` applies to numbers only"));
            }
        }
        if let Some(format) = map.get("format")
            && !format.as_str().is_some_and(|f| OPENAI_FORMATS.contains(&f))
        {
            self.v.add(&at(pointer, "format"), format!("format {format} is not supported"));
        }
        if let Some(any_of) = map.get("anyOf") {
            match any_of.as_array() {
                Some(branches) if !branches.is_empty() => {
                    for (i, branch) in branches.iter().enumerate() {
                        self.walk(branch, &at(&at(pointer, "anyOf"), &i.to_string()), depth, false);
                    }
                }
                _ => self.v.add(&at(pointer, "anyOf"), "must be a non-empty list"),
            }
        }
        if let Some(items) = map.get("items") {
            self.walk(items, &at(pointer, "items"), depth, false);
        }
        if is("object") || map.contains_key("properties") {
            self.object(map, pointer, depth);
        } else if map.contains_key("additionalProperties") || map.contains_key("required") {
            self.v.add(pointer, "`additionalProperties`/`required` on a schema that is not an object");
        }
    }

    fn object(&mut self, map: &Map<String, Value>, pointer: &str, depth: usize) {
        if depth > 10 {
            self.v.add(pointer, format!("object nested {depth} levels deep, at most 10"));
        }
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            self.v.add(&at(pointer, "additionalProperties"), "every object must set `additionalProperties: false`");
        }
        let Some(properties) = map.get("properties").and_then(Value::as_object) else {
            return self.v.add(&at(pointer, "properties"), "an object lists its properties");
        };
        let required: Vec<&str> =
            map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        for name in properties.keys() {
            if !required.contains(&name.as_str()) {
                self.v.add(&at(pointer, "required"), format!("property `{name}` must be required"));
            }
        }
        for name in &required {
            if !properties.contains_key(*name) {
                self.v.add(&at(pointer, "required"), format!("`{name}` is required but not a property"));
            }
        }
        for (name, property) in properties {
            self.properties += 1;
            self.walk(property, &at(&at(pointer, "properties"), name), depth + 1, false);
        }
    }
}

/// Every `$ref` is `#` or `#/$defs/<name>` with that definition present.
fn check_refs(schema: &Value, root: &Value, pointer: &str, v: &mut Violations) {
    match schema {
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref") {
                let resolves = match reference.as_str() {
                    Some("#") => true,
                    Some(r) => r
                        .strip_prefix("#/$defs/")
                        .is_some_and(|name| root.get("$defs").and_then(|d| d.get(name)).is_some()),
                    None => false,
                };
                if !resolves {
                    v.add(&at(pointer, "$ref"), format!("{reference} does not resolve in `$defs`"));
                }
            }
            for (key, value) in map {
                if !matches!(key.as_str(), "enum" | "const" | "default" | "example" | "examples") {
                    check_refs(value, root, &at(pointer, key), v);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_refs(item, root, &at(pointer, &i.to_string()), v);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------------------
// Anthropic

fn anthropic(definition: &Value, v: &mut Violations) {
    let Some(tool) = definition.as_object() else {
        return v.add("", "a tool is a JSON object");
    };
    only_keys(tool, &["name", "description", "input_schema"], "", "an Anthropic tool", v);
    let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !name_matches(name, 64, plain, plain) {
        v.add("/name", format!("`{name}` does not match ^[a-zA-Z0-9_-]{{1,64}}$"));
    }
    let Some(schema) = tool.get("input_schema") else {
        return v.add("/input_schema", "missing");
    };
    let Some(root) = schema.as_object() else {
        return v.add("/input_schema", "must be a JSON object");
    };
    if root.get("type") != Some(&Value::String("object".into())) {
        v.add("/input_schema/type", "must be \"object\"");
    }
    for keyword in ["oneOf", "allOf", "anyOf"] {
        if root.contains_key(keyword) {
            v.add(
                &at("/input_schema", keyword),
                "input_schema does not support oneOf, allOf, or anyOf at the top level",
            );
        }
    }
    check_refs(schema, schema, "/input_schema", v);
}

// ---------------------------------------------------------------------------------------------------------
// Gemini

const GEMINI_FIELDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];
const GEMINI_TYPES: &[&str] = &["string", "number", "integer", "boolean", "array", "object"];

fn gemini(definition: &Value, v: &mut Violations) {
    let Some(declaration) = definition.as_object() else {
        return v.add("", "a function declaration is a JSON object");
    };
    only_keys(declaration, &["name", "description", "parameters"], "", "a function declaration", v);
    let name = declaration.get("name").and_then(Value::as_str).unwrap_or_default();
    let first = |c: char| c.is_ascii_alphabetic() || c == '_';
    let rest = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if !name_matches(name, 64, first, rest) {
        v.add("/name", format!("`{name}`: a letter or `_` first, then a-z A-Z 0-9 _ . -, at most 64"));
    }
    let Some(parameters) = declaration.get("parameters") else {
        return;
    };
    let pointer = "/parameters";
    let Some(root) = parameters.as_object() else {
        return v.add(pointer, "must be a Schema object");
    };
    if root.get("type").and_then(Value::as_str).map(str::to_ascii_lowercase).as_deref() != Some("object") {
        v.add(&at(pointer, "type"), "parameters must be an OBJECT schema");
    }
    if let Some(properties) = root.get("properties").and_then(Value::as_object) {
        let param_first = |c: char| c.is_ascii_alphabetic() || c == '_';
        let param_rest = |c: char| c.is_ascii_alphanumeric() || c == '_';
        for name in properties.keys() {
            if !name_matches(name, 64, param_first, param_rest) {
                v.add(
                    &at(&at(pointer, "properties"), name),
                    "parameter names: a letter or `_` first, then a-z A-Z 0-9 _",
                );
            }
        }
    }
    gemini_schema(parameters, pointer, v);
}

fn gemini_schema(schema: &Value, pointer: &str, v: &mut Violations) {
    let Some(map) = schema.as_object() else {
        return v.add(pointer, "a Schema is an object");
    };
    only_keys(map, GEMINI_FIELDS, pointer, "a Gemini Schema", v);
    let schema_type = match map.get("type") {
        Some(Value::String(t)) if GEMINI_TYPES.contains(&t.to_ascii_lowercase().as_str()) => {
            Some(t.to_ascii_lowercase())
        }
        Some(other) => {
            v.add(&at(pointer, "type"), format!("`{other}` is not one Gemini Type"));
            None
        }
        None => None,
    };
    if schema_type.is_none() && !map.contains_key("anyOf") {
        v.add(pointer, "a Schema needs a `type` (or `anyOf`)");
    }
    if map.get("nullable").is_some_and(|nullable| !nullable.is_boolean()) {
        v.add(&at(pointer, "nullable"), "must be a boolean");
    }
    if let Some(values) = map.get("enum") {
        let strings = values.as_array().is_some_and(|vs| !vs.is_empty() && vs.iter().all(Value::is_string));
        if !strings || schema_type.as_deref() != Some("string") {
            v.add(&at(pointer, "enum"), "enums are non-empty lists of strings on a STRING schema");
        }
    }
    if let (Some(format), Some(t)) = (map.get("format"), schema_type.as_deref()) {
        let ok = matches!(
            (t, format.as_str().unwrap_or_default()),
            ("number", "float" | "double") | ("integer", "int32" | "int64") | ("string", "enum" | "date-time")
        );
        if !ok {
            v.add(&at(pointer, "format"), format!("format {format} is not supported for {t}"));
        }
    }
    if schema_type.as_deref() == Some("object") {
        match map.get("properties").and_then(Value::as_object) {
            Some(properties) if !properties.is_empty() => {
                let required: Vec<&Value> =
                    map.get("required").and_then(Value::as_array).into_iter().flatten().collect();
                for name in required {
                    if !name.as_str().is_some_and(|n| properties.contains_key(n)) {
                        v.add(&at(pointer, "required"), format!("{name} is not a property"));
                    }
                }
                for (name, property) in properties {
                    gemini_schema(property, &at(&at(pointer, "properties"), name), v);
                }
            }
            _ => v.add(&at(pointer, "properties"), "should be non-empty for OBJECT type"),
        }
    }
    if schema_type.as_deref() == Some("array") {
        match map.get("items") {
            Some(items) => gemini_schema(items, &at(pointer, "items"), v),
            None => v.add(&at(pointer, "items"), "an ARRAY schema needs `items`"),
        }
    }
    if let Some(any_of) = map.get("anyOf") {
        match any_of.as_array() {
            Some(branches) if !branches.is_empty() => {
                for (i, branch) in branches.iter().enumerate() {
                    gemini_schema(branch, &at(&at(pointer, "anyOf"), &i.to_string()), v);
                }
            }
            _ => v.add(&at(pointer, "anyOf"), "must be a non-empty list"),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// MCP

fn mcp(definition: &Value, v: &mut Violations) {
    let Some(tool) = definition.as_object() else {
        return v.add("", "a tool is a JSON object");
    };
    only_keys(
        tool,
        &["name", "title", "description", "inputSchema", "outputSchema", "annotations"],
        "",
        "an MCP tool",
        v,
    );
    let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if !name_matches(name, 128, allowed, allowed) {
        v.add("/name", format!("`{name}`: 1 to 128 of A-Z a-z 0-9 _ - ."));
    }
    let Some(schema) = tool.get("inputSchema") else {
        return v.add("/inputSchema", "missing");
    };
    let Some(root) = schema.as_object() else {
        return v.add("/inputSchema", "must be a JSON object");
    };
    if root.get("type") != Some(&Value::String("object".into())) {
        v.add("/inputSchema/type", "must be \"object\"");
    }
    if !root.get("properties").is_none_or(Value::is_object) {
        v.add("/inputSchema/properties", "must be an object");
    }
    match root.get("required") {
        None => {}
        Some(Value::Array(names)) if names.iter().all(Value::is_string) => {}
        Some(_) => v.add("/inputSchema/required", "must be a list of strings"),
    }
    check_refs(schema, schema, "/inputSchema", v);
}
