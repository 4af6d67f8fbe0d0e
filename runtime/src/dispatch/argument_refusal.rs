//! What an argument refusal says: every bad field named with what its schema expects, stripped keys that
//! look like misspellings of a missing one, repeated set items. Every echoed fragment goes through
//! [`echo`](crate::echo), so model input never comes back unbounded.

use std::fmt::Write as _;

use serde_json::Value;

use crate::args::{Duplicate, Ghost, MAX_LISTED, OutOfRange, nested};
use crate::echo;
use crate::tool::{ArgumentError, ArgumentErrors, ToolSpec};

/// The refusal text and hints for undeclared keys under `ghost = "block"`.
pub(super) fn describe_ghosts(tool: &str, spec: &ToolSpec, ghosts: &[Ghost]) -> (String, Vec<String>) {
    let shown = listed(ghosts.iter().map(|g| format!("`{}`", echo::fragment(&g.path))), ghosts.len());
    // Declared names, which an upstream's schema may make long or strange: shown as fragments.
    let declared = listed_up_to(
        spec.params().iter().map(|p| format!("`{}`", echo::fragment(p.name()))),
        spec.params().len(),
        MAX_DECLARED,
    );
    let text = format!("`{tool}` does not take {shown}; its parameters are: {declared}");
    let mut hints: Vec<String> = ghosts
        .iter()
        .take(MAX_LISTED)
        .filter_map(|ghost| {
            let closest = echo::fragment(ghost.closest.as_deref()?);
            let path = echo::fragment(&ghost.path);
            let renamed = match ghost.path.rsplit_once('.') {
                Some((parent, _)) => format!("{}.{closest}", echo::fragment(parent)),
                None => closest.into_owned(),
            };
            Some(format!("did you mean `{renamed}`? rename `{path}` to `{renamed}`"))
        })
        .collect();
    hints.push(format!("remove {shown} and call again"));
    (text, hints)
}

/// The refusal text and hints for repeated items in sets.
pub(super) fn describe_duplicates(tool: &str, duplicates: &[Duplicate]) -> (String, Vec<String>) {
    let mut text = format!("the arguments for `{tool}` are invalid:");
    let mut hints = Vec::new();
    for duplicate in duplicates {
        let path = echo::fragment(&duplicate.path);
        let _ = write!(text, "\n- `{path}` holds `{}` more than once; its items must be unique", duplicate.item);
        hints.push(format!("send each item of `{path}` once"));
    }
    (text, hints)
}

/// The refusal text and hints for integers beyond the bounds the call's dialect states.
pub(super) fn describe_out_of_range(tool: &str, out_of_range: &[OutOfRange]) -> (String, Vec<String>) {
    let mut text = format!("the arguments for `{tool}` are invalid:");
    let mut hints = Vec::new();
    for item in out_of_range.iter().take(MAX_LISTED) {
        let path = echo::fragment(&item.path);
        let value = echo::fragment(&item.value);
        let range = match (&item.min, &item.max) {
            (Some(min), Some(max)) => format!("an integer from {min} to {max}"),
            (Some(min), None) => format!("an integer of at least {min}"),
            (None, Some(max)) => format!("an integer of at most {max}"),
            (None, None) => "an integer".to_owned(),
        };
        let _ = write!(text, "\n- `{path}`: `{value}` is out of range: expected {range}");
        hints.push(format!("send `{path}` as {range}"));
    }
    (text, hints)
}

/// At most [`MAX_LISTED`] of `items`, comma-separated, then how many more there are.
fn listed(items: impl Iterator<Item = String>, total: usize) -> String {
    listed_up_to(items, total, MAX_LISTED)
}

/// The most parameters a ghost refusal names: all of any tool written by hand, a bounded part of one defined
/// by an upstream's schema with thousands (whose refusal named them all: 149 KB for 16,000).
const MAX_DECLARED: usize = 64;

/// The first `most` of `items` (of `total`), then how many more.
fn listed_up_to(items: impl Iterator<Item = String>, total: usize, most: usize) -> String {
    let mut shown = items.take(most).collect::<Vec<_>>().join(", ");
    if total > most {
        let _ = write!(shown, " and {} more", total - most);
    }
    shown
}

/// What each top-level parameter of a tool expects, phrased once when the dispatcher is built: phrasing it
/// reads the schema by key (`enum`, `const`, `anyOf`, `oneOf`, `type`, `minimum`, …, each a hashed lookup),
/// about 4 k instructions a parameter, which a refusal used to pay for every bad field.
pub(super) struct ExpectedPhrases(Vec<(String, String)>);

impl ExpectedPhrases {
    /// The phrase of each property of `schema`, in its order.
    pub(super) fn of(schema: &Value) -> ExpectedPhrases {
        let properties = schema.get("properties").and_then(Value::as_object);
        ExpectedPhrases(
            properties
                .into_iter()
                .flatten()
                .map(|(name, property)| (name.clone(), echo::phrase(&describe_schema(property)).into_owned()))
                .collect(),
        )
    }

    /// What `field` expects: its property's phrase, or "the declared type" for a field the schema does not
    /// list.
    fn of_field(&self, field: &str) -> &str {
        self.0.iter().find(|(name, _)| name == field).map_or("the declared type", |(_, phrase)| phrase)
    }
}

/// The refusal text and hints for argument errors, using the tool's schema to say what was expected
/// (`expected`: [`ExpectedPhrases::of`] that schema).
pub(super) fn describe_errors(
    tool: &str,
    errors: &ArgumentErrors,
    schema: &Value,
    expected: &ExpectedPhrases,
    stripped: &[String],
) -> (String, Vec<String>) {
    if errors.is_host_error() {
        // The model cannot fix this; say so plainly and keep the host's details out of the model's view.
        return (
            format!("tool `{tool}` cannot run right now because the host is misconfigured; do not retry it"),
            vec!["tell the user this tool is unavailable".to_owned()],
        );
    }
    let mut text = format!("the arguments for `{tool}` are invalid:");
    let mut hints = Vec::new();
    for error in errors.errors() {
        match error {
            ArgumentError::Missing { field } => {
                let expected = expected.of_field(field);
                // A declared name, which an upstream's schema may make long or strange: shown as a fragment.
                let shown = echo::fragment(field);
                let _ = write!(text, "\n- `{shown}` is required ({expected})");
                // A misspelt key was stripped as a ghost: say which one was meant.
                hints.push(match misspelt(stripped, "", field) {
                    Some(ghost) => format!("rename `{ghost}` to `{shown}`; send it as {expected}"),
                    None => format!("include `{shown}` as {expected}"),
                });
            }
            ArgumentError::Invalid { field, message } => {
                let top = field.split(['.', '[']).next().unwrap_or(field);
                let expected = expected.of_field(top);
                let shown = echo::fragment(field);
                let message = match message.strip_prefix("data did not match any variant of untagged enum") {
                    // Serde names the Rust type only; the schema says what each variant takes.
                    Some(_) => match schema_at(schema, field) {
                        Some(variants) => {
                            format!("matches none of the accepted forms: {}", echo::phrase(&describe_schema(variants)))
                        }
                        None => echo::message(message),
                    },
                    None => echo::message(message),
                };
                let _ = write!(text, "\n- `{shown}`: {message}");
                // A nested required key missing while a near one was stripped: name both.
                let missing = message.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`'));
                match missing.and_then(|key| misspelt(stripped, field, key).map(|ghost| (key, ghost))) {
                    Some((key, ghost)) => hints.push(format!("rename `{ghost}` to `{shown}.{}`", echo::fragment(key))),
                    // The first segment of the path the model sent (a key of an open object, say): a fragment.
                    None => hints.push(format!("send `{}` as {expected}", echo::fragment(top))),
                }
            }
            ArgumentError::Injection { .. } => {}
        }
    }
    (text, hints)
}

/// The stripped ghost under `parent` (a path, empty for the top level) that looks like a misspelling of
/// `key`.
fn misspelt<'a>(stripped: &'a [String], parent: &str, key: &str) -> Option<&'a str> {
    stripped.iter().map(String::as_str).find(|ghost| {
        let name = match ghost.rsplit_once('.') {
            Some((ghost_parent, name)) if ghost_parent == parent => name,
            None if parent.is_empty() => ghost,
            _ => return false,
        };
        nested::closest(name, [key]).is_some()
    })
}

/// The schema of the value at `path` (`order.lines[2].sku`), following `$ref`s and the alternatives that
/// declare the next key.
fn schema_at<'s>(root: &'s Value, path: &str) -> Option<&'s Value> {
    let mut schema = root;
    let mut rest = path;
    let mut first = true;
    while !rest.is_empty() {
        schema = dereference(root, schema);
        if let Some(after) = rest.strip_prefix('[') {
            let (_, tail) = after.split_once(']')?;
            schema = schema.get("items").or_else(|| any_branch(root, schema, |s| s.get("items")))?;
            rest = tail;
            continue;
        }
        let segment = if first { rest } else { rest.strip_prefix('.')? };
        let end = segment.find(['.', '[']).unwrap_or(segment.len());
        let key = &segment[..end];
        let property = |s: &'s Value| s.get("properties").and_then(|p| p.get(key));
        schema = property(schema).or_else(|| any_branch(root, schema, property))?;
        rest = &segment[end..];
        first = false;
    }
    Some(dereference(root, schema))
}

fn dereference<'s>(root: &'s Value, mut schema: &'s Value) -> &'s Value {
    for _ in 0..32 {
        let target = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/"));
        match target.and_then(|name| root.get("$defs")?.get(name)) {
            Some(definition) => schema = definition,
            None => break,
        }
    }
    schema
}

fn any_branch<'s>(
    root: &'s Value,
    schema: &'s Value,
    find: impl Fn(&'s Value) -> Option<&'s Value>,
) -> Option<&'s Value> {
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|key| schema.get(*key).and_then(Value::as_array))
        .flatten()
        .find_map(|branch| find(dereference(root, branch)))
}

/// A phrase for what a property's schema expects, e.g. "an integer ≥ 0 such as 5 (no quotes)": the long way
/// of [`ExpectedPhrases`], read from the schema at each call.
#[cfg(test)]
fn expected_for(schema: &Value, field: &str) -> String {
    let Some(property) = schema.get("properties").and_then(|p| p.get(field)) else {
        return "the declared type".to_owned();
    };
    echo::phrase(&describe_schema(property)).into_owned()
}

/// The most enum values, alternatives or object keys a phrase names (a schema an upstream wrote may list
/// thousands); each value and key is shown as an [`echo::fragment`].
const MAX_PHRASED: usize = 8;

fn describe_schema(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let shown = values.iter().map(|value| echo::fragment(&value.to_string()).into_owned());
        return format!("one of {}", listed_up_to(shown, values.len(), MAX_PHRASED));
    }
    if let Some(value) = schema.get("const") {
        return format!("exactly {}", echo::fragment(&value.to_string()));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let forms: Vec<&Value> =
                options.iter().filter(|o| o.get("type").and_then(Value::as_str) != Some("null")).collect();
            let mut shown =
                forms.iter().take(MAX_PHRASED).map(|form| describe_schema(form)).collect::<Vec<_>>().join(" or ");
            if forms.len() > MAX_PHRASED {
                let _ = write!(shown, " or {} more forms", forms.len() - MAX_PHRASED);
            }
            return shown;
        }
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => Vec::new(),
    };
    let Some(kind) = types.first() else {
        return "a JSON value of the declared shape".to_owned();
    };
    match *kind {
        "integer" => match (schema.get("minimum"), schema.get("maximum")) {
            (Some(min), Some(max)) => format!("a JSON integer from {min} to {max} (no quotes, no decimal point)"),
            (Some(min), None) if min.as_f64() == Some(0.0) => {
                "a non-negative JSON integer such as 5 (no quotes, no decimal point)".to_owned()
            }
            _ => "a JSON integer such as 5 (no quotes, no decimal point)".to_owned(),
        },
        "number" => "a JSON number such as 2.5 (no quotes)".to_owned(),
        "boolean" => "`true` or `false` (no quotes)".to_owned(),
        "string" => "a JSON string in double quotes".to_owned(),
        "array" => "a JSON array".to_owned(),
        "object" => match schema.get("properties").and_then(Value::as_object) {
            Some(props) if !props.is_empty() => {
                let keys = props.keys().map(|k| format!("`{}`", echo::fragment(k)));
                format!("a JSON object with {}", listed_up_to(keys, props.len(), MAX_PHRASED))
            }
            _ => "a JSON object".to_owned(),
        },
        other => format!("a JSON {other}"),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// A property schema of any shape `describe_schema` tells apart, nested a level in `anyOf`/`oneOf`.
    fn property_schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({"type": "integer"})),
            Just(json!({"type": "integer", "minimum": 0})),
            (0i64..5, 5i64..100).prop_map(|(min, max)| json!({"type": "integer", "minimum": min, "maximum": max})),
            Just(json!({"type": "number"})),
            Just(json!({"type": ["string", "null"]})),
            Just(json!({"type": "boolean"})),
            Just(json!({"type": "array", "items": {"type": "string"}})),
            Just(json!({"type": "object", "properties": {"id": {"type": "string"}, "tier": {"type": "string"}}})),
            Just(json!({"type": "object"})),
            Just(json!({"type": "null"})),
            Just(json!({"type": "uuid"})),
            Just(json!({})),
            proptest::collection::vec("[a-z]{1,6}", 1..10).prop_map(|values| json!({"enum": values})),
            Just(json!({"const": "fixed"})),
            Just(json!({"$ref": "#/$defs/Customer"})),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            (prop_oneof![Just("anyOf"), Just("oneOf")], proptest::collection::vec(inner, 1..4))
                .prop_map(|(key, options)| json!({ key: options }))
        })
    }

    proptest! {
        /// The phrases made once per tool are the ones read from the schema at each refusal, for every
        /// property and for a field the schema does not list.
        #[test]
        fn phrases_made_once_are_the_phrases_read_each_time(
            properties in proptest::collection::vec(("[a-z_]{1,8}", property_schema()), 0..8),
            unknown in "[a-z_]{1,8}",
        ) {
            let properties: serde_json::Map<String, Value> = properties.into_iter().collect();
            let schema = json!({"type": "object", "properties": properties});
            let phrases = ExpectedPhrases::of(&schema);
            for field in properties.keys().chain([&unknown]) {
                prop_assert_eq!(phrases.of_field(field), expected_for(&schema, field));
            }
        }
    }

    #[test]
    fn a_schema_without_properties_expects_the_declared_type() {
        for schema in [json!({"type": "object"}), json!({}), json!({"properties": 5})] {
            assert_eq!(ExpectedPhrases::of(&schema).of_field("x"), "the declared type");
            assert_eq!(expected_for(&schema, "x"), "the declared type");
        }
    }

    #[test]
    fn describes_expected_shapes() {
        assert!(describe_schema(&json!({"type": "integer", "minimum": 0})).contains("non-negative"));
        assert!(describe_schema(&json!({"type": ["string", "null"]})).contains("string"));
        assert_eq!(describe_schema(&json!({"enum": ["a", "b"]})), "one of \"a\", \"b\"");
        assert!(describe_schema(&json!({"anyOf": [{"type": "boolean"}, {"type": "null"}]})).contains("true"));
    }
}
