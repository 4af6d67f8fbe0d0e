//! What every dialect needs: JSON pointers for error locations, `$ref` resolution, nullability, tuples, and
//! the keywords no dialect can drop without changing which values are valid.

use serde_json::{Map, Value, json};

use super::Inexpressible;

/// Why a schema cannot be expressed, and where in the canonical schema.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) pointer: String,
    pub(super) kind: Inexpressible,
    pub(super) detail: String,
}

impl Failure {
    pub(super) fn new(pointer: &str, kind: Inexpressible, detail: impl Into<String>) -> Self {
        Failure { pointer: pointer.to_owned(), kind, detail: detail.into() }
    }
}

/// The JSON pointer of `segment` under `parent` (RFC 6901 escaping).
pub(super) fn child(parent: &str, segment: &str) -> String {
    let mut pointer = String::with_capacity(parent.len() + segment.len() + 1);
    pointer.push_str(parent);
    pointer.push('/');
    for c in segment.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
    pointer
}

/// Composition and conditional keywords: they narrow the valid values in ways the providers' subsets cannot
/// say, and dropping them would silently change the meaning of the schema, so a dialect that lacks them
/// refuses the schema instead.
pub(super) const CONDITIONAL_KEYWORDS: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "$dynamicRef",
    "$recursiveRef",
];

/// The first conditional keyword in `map`, as a failure.
pub(super) fn refuse_conditionals(map: &Map<String, Value>, pointer: &str, dialect: &str) -> Result<(), Failure> {
    match CONDITIONAL_KEYWORDS.iter().find(|k| map.contains_key(**k)) {
        Some(keyword) => Err(Failure::new(
            &child(pointer, keyword),
            Inexpressible::Keyword { keyword: (*keyword).to_owned() },
            format!(
                "`{keyword}` is not part of the JSON Schema subset {dialect} accepts, and dropping it would accept values the tool rejects"
            ),
        )),
        None => Ok(()),
    }
}

/// The root must be an object schema: `type: "object"`. `combinators` lists the keywords the dialect refuses
/// at the root as well.
pub(super) fn root_object<'a>(
    root: &'a Value,
    dialect: &str,
    combinators: &[&str],
) -> Result<&'a Map<String, Value>, Failure> {
    let Some(map) = root.as_object() else {
        return Err(Failure::new(
            "",
            Inexpressible::RootNotObject,
            format!("{dialect} needs the arguments schema to be a JSON object with `type: \"object\"`, found `{root}`"),
        ));
    };
    if map.get("type").and_then(Value::as_str) != Some("object") {
        let found = map.get("type").map_or_else(|| "no `type`".to_owned(), |t| format!("`type: {t}`"));
        return Err(Failure::new(
            "",
            Inexpressible::RootNotObject,
            format!("{dialect} needs the arguments schema to have `type: \"object\"` at the root, found {found}"),
        ));
    }
    if let Some(keyword) = combinators.iter().find(|k| map.contains_key(**k)) {
        return Err(Failure::new(
            &child("", keyword),
            Inexpressible::RootCombinator { keyword: (*keyword).to_owned() },
            format!(
                "{dialect} does not accept `{keyword}` at the root of the arguments schema; make the alternatives a property of the arguments object"
            ),
        ));
    }
    Ok(map)
}

/// `root` with every local `$ref` the dialects resolve: a reference of another shape that is a JSON pointer into
/// the schema itself (draft-07's `#/definitions/Node`, or zod's `#/properties/edits/items` for a repeated
/// sub-schema) has its target copied into `$defs` under a name of its own and points there; `definitions`
/// goes once nothing points into it. Borrowed when there is nothing to do. The canonical schema, which the
/// runtime checks arguments against, is not changed: this is the same schema, written as the dialects read it.
pub(super) fn hoist_refs(root: &Value) -> std::borrow::Cow<'_, Value> {
    let mut pending = Vec::new();
    foreign_refs(root, &mut pending);
    if pending.is_empty() || !root.is_object() {
        return std::borrow::Cow::Borrowed(root);
    }
    let mut hoisted = root.clone();
    // Pointer → its name in `$defs`; a target hoisted once however often it is named.
    let mut names: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    while let Some(reference) = pending.pop() {
        if names.contains_key(&reference) {
            continue;
        }
        let Some(target) = hoisted.pointer(&reference[1..]).cloned() else { continue };
        let defs = hoisted.as_object_mut().expect("an object root").entry("$defs").or_insert_with(|| json!({}));
        let Some(defs) = defs.as_object_mut() else { return std::borrow::Cow::Borrowed(root) };
        let base: String = reference[2..].replace("~1", "_").replace("~0", "_").replace('/', ".");
        let mut name = base.clone();
        let mut n = 1;
        while defs.contains_key(&name) {
            n += 1;
            name = format!("{base}.{n}");
        }
        foreign_refs(&target, &mut pending);
        defs.insert(name.clone(), target);
        names.insert(reference, name);
    }
    rewrite_refs(&mut hoisted, &names);
    // Every reference into `definitions` that resolves now points into `$defs` (one that does not resolve is
    // refused by the dialect as before, with or without it).
    if let Some(map) = hoisted.as_object_mut() {
        map.remove("definitions");
    }
    std::borrow::Cow::Owned(hoisted)
}

/// The `$ref`s under `schema` that are local JSON pointers but not `#` or `#/$defs/<name>`.
fn foreign_refs(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let plain_def = reference.strip_prefix("#/$defs/").is_some_and(|name| !name.contains('/'));
                if reference.starts_with("#/") && reference != "#" && !plain_def {
                    out.push(reference.clone());
                }
            }
            for (key, value) in map {
                if !matches!(key.as_str(), "enum" | "const" | "default" | "examples" | "example") {
                    foreign_refs(value, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| foreign_refs(item, out)),
        _ => {}
    }
}

fn rewrite_refs(schema: &mut Value, names: &std::collections::BTreeMap<String, String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref")
                && let Some(name) = names.get(reference.as_str())
            {
                *reference = format!("#/$defs/{}", name.replace('~', "~0").replace('/', "~1"));
            }
            for (key, value) in map.iter_mut() {
                if !matches!(key.as_str(), "enum" | "const" | "default" | "examples" | "example") {
                    rewrite_refs(value, names);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rewrite_refs(item, names)),
        _ => {}
    }
}

/// The definition `reference` points to: `#/$defs/<name>` in the root's `$defs` (`None` if it does not
/// resolve). `#` alone, the root itself, is reported as `Some(("#", root))`.
pub(super) fn resolve<'a>(reference: &'a str, root: &'a Value) -> Option<(&'a str, &'a Value)> {
    if reference == "#" {
        return Some(("#", root));
    }
    let name = reference.strip_prefix("#/$defs/")?;
    if name.contains('/') {
        return None;
    }
    let unescaped = name.replace("~1", "/").replace("~0", "~");
    root.get("$defs")?.get(&unescaped).map(|def| (name, def))
}

/// The pointer of a resolved reference's target, for errors inside it.
pub(super) fn target_pointer(name: &str) -> String {
    if name == "#" { String::new() } else { format!("/$defs/{name}") }
}

/// Fails unless every `$ref` under `schema` resolves within `root`.
pub(super) fn check_refs(schema: &Value, root: &Value, pointer: &str, dialect: &str) -> Result<(), Failure> {
    match schema {
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref") {
                let resolved = reference.as_str().and_then(|r| resolve(r, root));
                if resolved.is_none() {
                    return Err(unresolved(reference, pointer, dialect));
                }
            }
            for (key, value) in map {
                if matches!(key.as_str(), "properties" | "$defs" | "patternProperties" | "dependentSchemas") {
                    if let Value::Object(named) = value {
                        for (name, sub) in named {
                            check_refs(sub, root, &child(&child(pointer, key), name), dialect)?;
                        }
                    }
                } else if !matches!(key.as_str(), "enum" | "const" | "default" | "examples" | "example" | "required") {
                    check_refs(value, root, &child(pointer, key), dialect)?;
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_refs(item, root, &child(pointer, &i.to_string()), dialect)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

pub(super) fn unresolved(reference: &Value, pointer: &str, dialect: &str) -> Failure {
    let shown = reference.as_str().map_or_else(|| reference.to_string(), str::to_owned);
    Failure::new(
        &child(pointer, "$ref"),
        Inexpressible::UnresolvedReference { reference: shown.clone() },
        format!(
            "`$ref: {shown}` does not point into the schema's own `$defs`, and {dialect} cannot fetch other documents"
        ),
    )
}

/// Whether `null` validates against `schema`, following `$ref`s within `root`.
pub(super) fn accepts_null(schema: &Value, root: &Value) -> bool {
    accepts_null_inner(schema, root, 0)
}

fn accepts_null_inner(schema: &Value, root: &Value, depth: usize) -> bool {
    // References are followed a bounded number of times: a cycle of references alone accepts nothing.
    if depth > 32 {
        return false;
    }
    let map = match schema {
        Value::Bool(accepts) => return *accepts,
        Value::Object(map) => map,
        _ => return false,
    };
    let typed = match map.get("type") {
        None => true,
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        Some(_) => false,
    };
    let enumerated = match (map.get("enum"), map.get("const")) {
        (Some(Value::Array(values)), _) => values.iter().any(Value::is_null),
        (_, Some(value)) => value.is_null(),
        _ => true,
    };
    let any_of = ["anyOf", "oneOf"].iter().all(|k| match map.get(*k) {
        Some(Value::Array(branches)) => branches.iter().any(|b| accepts_null_inner(b, root, depth + 1)),
        _ => true,
    });
    let all_of = match map.get("allOf") {
        Some(Value::Array(parts)) => parts.iter().all(|p| accepts_null_inner(p, root, depth + 1)),
        _ => true,
    };
    let referenced = match map.get("$ref").and_then(Value::as_str) {
        Some(reference) => resolve(reference, root).is_some_and(|(_, def)| accepts_null_inner(def, root, depth + 1)),
        None => true,
    };
    typed && enumerated && any_of && all_of && referenced
}

/// Whether the schema's `type` is, or includes, `name`.
pub(super) fn has_type(map: &Map<String, Value>, name: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == name,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == name),
        _ => false,
    }
}

/// Tuples (`prefixItems`): a tuple whose positions all have the same schema is an array of that schema
/// with a fixed length, which is exact; a tuple of different types has no equivalent without `prefixItems`.
pub(super) fn collapse_tuple(map: &mut Map<String, Value>, pointer: &str, dialect: &str) -> Result<(), Failure> {
    let Some(prefix) = map.remove("prefixItems") else {
        return Ok(());
    };
    let positions = prefix.as_array().map(Vec::as_slice).unwrap_or_default();
    let trailing_allowed = !matches!(map.get("items"), None | Some(Value::Bool(false)));
    match positions.split_first() {
        Some((first, rest)) if rest.iter().all(|p| p == first) && !trailing_allowed => {
            map.insert("items".into(), first.clone());
            Ok(())
        }
        _ => Err(Failure::new(
            &child(pointer, "prefixItems"),
            Inexpressible::Tuple,
            format!(
                "{dialect} has no `prefixItems`, so a tuple whose positions have different types cannot be expressed; use a struct with named fields"
            ),
        )),
    }
}

/// Folds a one-element `allOf` into the schema around it; longer ones cannot be expressed.
pub(super) fn fold_all_of(map: &mut Map<String, Value>, pointer: &str, dialect: &str) -> Result<(), Failure> {
    let Some(all_of) = map.remove("allOf") else {
        return Ok(());
    };
    if let Some([Value::Object(only)]) = all_of.as_array().map(Vec::as_slice)
        && only.keys().all(|k| !map.contains_key(k) || k == "description")
    {
        for (key, value) in only {
            map.entry(key.clone()).or_insert_with(|| value.clone());
        }
        return Ok(());
    }
    Err(Failure::new(
        &child(pointer, "allOf"),
        Inexpressible::Keyword { keyword: "allOf".into() },
        format!("{dialect} does not accept `allOf`, and these schemas cannot be merged into one"),
    ))
}

/// `oneOf` → `anyOf`. The `oneOf`s schemars emits are serde enums whose alternatives are told apart by
/// their tag (a distinct string or a distinct required key), so at most one alternative matches any value
/// and `anyOf` accepts exactly the same values.
pub(super) fn one_of_to_any_of(map: &mut Map<String, Value>, pointer: &str, dialect: &str) -> Result<(), Failure> {
    let Some(one_of) = map.remove("oneOf") else {
        return Ok(());
    };
    if map.contains_key("anyOf") {
        return Err(Failure::new(
            &child(pointer, "oneOf"),
            Inexpressible::Keyword { keyword: "oneOf".into() },
            format!("{dialect} has no `oneOf`, and this schema already has an `anyOf` to merge it with"),
        ));
    }
    map.insert("anyOf".into(), one_of);
    Ok(())
}

/// A schema that says nothing about its values (no type, enum, const, reference or alternatives).
pub(super) fn is_unconstrained(map: &Map<String, Value>) -> bool {
    !["type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "properties", "items", "prefixItems"]
        .iter()
        .any(|k| map.contains_key(*k))
}

/// A string `format` the dialect lacks still tells the model what to send: it moves into the description.
/// (Numeric formats such as `uint32` are not kept: `minimum`/`maximum` already say the range.)
pub(super) fn describe_format(schema: &mut Map<String, Value>, format: &str) {
    let note = format!("Format: {format}.");
    let description = match schema.get("description").and_then(Value::as_str) {
        Some(text) if !text.is_empty() => format!("{text} {note}"),
        _ => note,
    };
    schema.insert("description".into(), Value::String(description));
}

/// `uniqueItems: true`, which neither OpenAI strict mode nor Gemini has, still tells the model what a set
/// means: it moves into the description (a call in such a dialect has a repeated item counted once, as its
/// schema admits the repeat).
pub(super) fn describe_unique_items(source: &Map<String, Value>, schema: &mut Map<String, Value>) {
    if source.get("uniqueItems") != Some(&Value::Bool(true)) {
        return;
    }
    let note = "Items must be unique.";
    let description = match schema.get("description").and_then(Value::as_str) {
        Some(text) if !text.is_empty() => format!("{text} {note}"),
        _ => note.to_owned(),
    };
    schema.insert("description".into(), Value::String(description));
}

/// How an open object's `additionalProperties` reads in an error.
pub(super) fn describe_open(additional: &Value) -> &'static str {
    match additional {
        Value::Bool(true) => "`additionalProperties: true`",
        _ => "`additionalProperties` with a schema",
    }
}

pub(super) fn any_value(pointer: &str, dialect: &str) -> Failure {
    Failure::new(
        pointer,
        Inexpressible::AnyValue,
        format!(
            "a schema that accepts any JSON value (such as `serde_json::Value`) cannot be expressed in {dialect}, which needs a type for every value; use a concrete type"
        ),
    )
}

pub(super) fn no_value(pointer: &str) -> Failure {
    Failure::new(pointer, Inexpressible::NoValue, "the schema `false` accepts no value, so no call could ever be valid")
}

pub(super) fn malformed(pointer: &str, value: &Value) -> Failure {
    Failure::new(pointer, Inexpressible::Malformed, format!("`{value}` is not a JSON schema (an object or a boolean)"))
}
