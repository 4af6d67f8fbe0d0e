//! Arguments from the model: admission (object, depth, ghost keys, nulls), strict deserialization with
//! every bad field named, and refusal text the model can act on.

use std::fmt::Write as _;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Inject, Invocation};
use crate::echo;
use crate::tool::{Arguments, GhostPolicy, ToolSpec};

mod nested;

pub(crate) use nested::{Duplicate, Ghost};

/// How deep an argument object may nest. Deeper input is refused before it is deserialized.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// How many ghosts a refusal names; the rest are counted.
const MAX_LISTED: usize = 16;

/// Arguments admitted past the ghost gate.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(crate) arguments: Arguments,
    /// The paths of the keys stripped, each capped for display (`address.zipcode`).
    pub(crate) stripped: Vec<String>,
}

/// Why arguments were not admitted.
#[derive(Debug)]
pub(crate) enum AdmissionError {
    NotAnObject(&'static str),
    TooDeep,
    Ghosts(Vec<Ghost>),
    Duplicates(Vec<Duplicate>),
}

/// Checks the shape, strips (or refuses) undeclared keys at every depth the tool's canonical `schema`
/// closes, refuses repeated items where it says `uniqueItems`, and drops top-level `null`s, which count as
/// absent.
pub(crate) fn admit(arguments: Value, spec: &ToolSpec, schema: &Value) -> Result<Admitted, AdmissionError> {
    let mut map = match arguments {
        Value::Object(map) => map,
        // Some providers send no arguments at all for a tool without parameters.
        Value::Null => Arguments::new(),
        Value::String(_) => {
            return Err(AdmissionError::NotAnObject("a string (malformed JSON text?)"));
        }
        Value::Array(items) => {
            discard(Value::Array(items));
            return Err(AdmissionError::NotAnObject("an array"));
        }
        Value::Bool(_) => return Err(AdmissionError::NotAnObject("a boolean")),
        Value::Number(_) => return Err(AdmissionError::NotAnObject("a number")),
    };
    if exceeds_depth(&map, MAX_ARGUMENT_DEPTH) {
        discard(Value::Object(map));
        return Err(AdmissionError::TooDeep);
    }
    let mut ghosts = Vec::new();
    if map.keys().any(|k| spec.param(k).is_none()) {
        map.retain(|key, _| {
            let declared = spec.param(key).is_some();
            if !declared {
                let closest = nested::closest(key, spec.params().iter().map(|p| p.name()));
                ghosts.push(Ghost { path: key.clone(), closest });
            }
            declared
        });
    }
    map.retain(|_, value| !value.is_null());
    let mut walk = nested::Walk::new(schema, spec.ghost() == GhostPolicy::Strip);
    let properties = schema.get("properties");
    for (key, value) in map.iter_mut() {
        if let Some(property) = properties.and_then(|p| p.get(key)) {
            walk.value(value, &[property], &mut key.clone());
        }
    }
    ghosts.append(&mut walk.ghosts);
    if spec.ghost() == GhostPolicy::Block && !ghosts.is_empty() {
        return Err(AdmissionError::Ghosts(ghosts));
    }
    if !walk.duplicates.is_empty() {
        return Err(AdmissionError::Duplicates(walk.duplicates));
    }
    let stripped = ghosts.into_iter().map(|ghost| echo::fragment(&ghost.path).into_owned()).collect();
    Ok(Admitted { arguments: map, stripped })
}

/// Drops `value` without recursion: serde_json's own drop recurses once per level, so a value nested a
/// million levels deep (which a host can build, though no parser would produce it) would overflow the stack.
pub(crate) fn discard(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, child)| child)),
            _ => {}
        }
    }
}

/// Iterative, so a hostile nesting cannot exhaust the stack here.
fn exceeds_depth(map: &Arguments, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = map.values().map(|v| (v, 1)).collect();
    while let Some((value, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    false
}

/// The refusal text and hints for undeclared keys under `ghost = "block"`.
pub(crate) fn describe_ghosts(tool: &str, spec: &ToolSpec, ghosts: &[Ghost]) -> (String, Vec<String>) {
    let shown = listed(ghosts.iter().map(|g| format!("`{}`", echo::fragment(&g.path))), ghosts.len());
    let declared = spec.params().iter().map(|p| format!("`{}`", p.name())).collect::<Vec<_>>().join(", ");
    let text = format!("`{tool}` does not take {shown}; its parameters are: {declared}");
    let mut hints: Vec<String> = ghosts
        .iter()
        .take(MAX_LISTED)
        .filter_map(|ghost| {
            let closest = ghost.closest.as_deref()?;
            let path = echo::fragment(&ghost.path);
            let renamed = match ghost.path.rsplit_once('.') {
                Some((parent, _)) => format!("{}.{closest}", echo::fragment(parent)),
                None => closest.to_owned(),
            };
            Some(format!("did you mean `{renamed}`? rename `{path}` to `{renamed}`"))
        })
        .collect();
    hints.push(format!("remove {shown} and call again"));
    (text, hints)
}

/// The refusal text and hints for repeated items in sets.
pub(crate) fn describe_duplicates(tool: &str, duplicates: &[Duplicate]) -> (String, Vec<String>) {
    let mut text = format!("the arguments for `{tool}` are invalid:");
    let mut hints = Vec::new();
    for duplicate in duplicates {
        let path = echo::fragment(&duplicate.path);
        let _ = write!(text, "\n- `{path}` holds `{}` more than once; its items must be unique", duplicate.item);
        hints.push(format!("send each item of `{path}` once"));
    }
    (text, hints)
}

/// At most [`MAX_LISTED`] of `items`, comma-separated, then how many more there are.
fn listed(items: impl Iterator<Item = String>, total: usize) -> String {
    let mut shown = items.take(MAX_LISTED).collect::<Vec<_>>().join(", ");
    if total > MAX_LISTED {
        let _ = write!(shown, " and {} more", total - MAX_LISTED);
    }
    shown
}

/// Every problem found while preparing a call's arguments and injected values.
#[derive(Debug, Default)]
pub struct ArgumentErrors {
    errors: Vec<ArgumentError>,
}

/// One bad argument or missing injected value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgumentError {
    /// A required argument is absent (or `null`).
    Missing {
        /// The argument's key.
        field: String,
    },
    /// An argument did not deserialize into the declared type.
    Invalid {
        /// The argument's key, with the path inside it where the error is (`address.zip`).
        field: String,
        /// What serde said, e.g. ``invalid type: string "5", expected u32``.
        message: String,
    },
    /// The host did not supply an injected value.
    Injection {
        /// The parameter's name.
        param: String,
        /// What was missing.
        message: String,
    },
}

impl ArgumentErrors {
    /// No errors yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one error.
    pub fn push(&mut self, error: ArgumentError) {
        self.errors.push(error);
    }

    /// The errors, in parameter order.
    pub fn errors(&self) -> &[ArgumentError] {
        &self.errors
    }

    /// Whether any error is the host's, not the model's.
    pub fn is_host_error(&self) -> bool {
        self.errors.iter().any(|e| matches!(e, ArgumentError::Injection { .. }))
    }
}

/// Deserializes one argument strictly (`"5"` is not a number, `5.0` is not an integer). Absent means
/// `null`, which only a type like `Option<T>` accepts.
pub(crate) fn argument<T: DeserializeOwned>(args: &Arguments, key: &str, errors: &mut ArgumentErrors) -> Option<T> {
    let value = args.get(key).unwrap_or(&Value::Null);
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(parsed) => Some(parsed),
        Err(_) if value.is_null() => {
            errors.push(ArgumentError::Missing { field: key.to_owned() });
            None
        }
        Err(err) => {
            let path = err.path().to_string();
            let field = match path.as_str() {
                "." => key.to_owned(),
                nested if nested.starts_with('[') => format!("{key}{nested}"),
                nested => format!("{key}.{nested}"),
            };
            errors.push(ArgumentError::Invalid { field, message: range_message(err.into_inner().to_string()) });
            None
        }
    }
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

/// Serde's text for an integer outside its type's range (``invalid value: integer `2147483648`, expected
/// i32``, or ``invalid type: floating point `1e20`, expected u64`` for one too large to parse as an
/// integer) restated with the range. Any other text is kept.
fn range_message(message: String) -> String {
    let Some((found, type_name)) = message.rsplit_once(", expected ") else { return message };
    let Some((min, max)) = integer_range(type_name) else { return message };
    let number = ["invalid value: integer `", "invalid type: floating point `"]
        .iter()
        .find_map(|prefix| found.strip_prefix(prefix))
        .and_then(|rest| rest.strip_suffix('`'));
    let Some(number) = number else { return message };
    let outside = match number.parse::<i128>() {
        Ok(n) => n < min || n > max,
        // A float: out of range when no integer of the type is that large; otherwise the decimal point
        // (`5.0`) is what serde refused.
        Err(_) => number.parse::<f64>().is_ok_and(|f| f.is_finite() && (f < min as f64 || f > max as f64)),
    };
    if !outside {
        return message;
    }
    // Serde prints large floats in exponent form (`1e+20`); an integral one is shown as the integer sent.
    let integral = number.parse::<f64>().ok().filter(|f| f.fract() == 0.0 && f.abs() < 1e21);
    let shown = match integral {
        Some(f) if number.parse::<i128>().is_err() => format!("{f:.0}"),
        _ => echo::fragment(number).into_owned(),
    };
    format!("`{shown}` is out of range for {type_name}: expected an integer from {min} to {max}")
}

pub(crate) fn inject<T: Inject>(invocation: &Invocation<'_>, param: &str, errors: &mut ArgumentErrors) -> Option<T> {
    match T::inject(invocation) {
        Ok(value) => Some(value),
        Err(err) => {
            errors.push(ArgumentError::Injection { param: param.to_owned(), message: err.to_string() });
            None
        }
    }
}

/// The refusal text and hints for argument errors, using the tool's schema to say what was expected.
pub(crate) fn describe_errors(
    tool: &str,
    errors: &ArgumentErrors,
    schema: &Value,
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
                let expected = expected_for(schema, field);
                let _ = write!(text, "\n- `{field}` is required ({expected})");
                // A misspelt key was stripped as a ghost: say which one was meant.
                hints.push(match misspelt(stripped, "", field) {
                    Some(ghost) => format!("rename `{ghost}` to `{field}`; send it as {expected}"),
                    None => format!("include `{field}` as {expected}"),
                });
            }
            ArgumentError::Invalid { field, message } => {
                let top = field.split(['.', '[']).next().unwrap_or(field);
                let expected = expected_for(schema, top);
                let shown = echo::fragment(field);
                let message = match message.strip_prefix("data did not match any variant of untagged enum") {
                    // Serde names the Rust type only; the schema says what each variant takes.
                    Some(_) => match schema_at(schema, field) {
                        Some(variants) => format!("matches none of the accepted forms: {}", describe_schema(variants)),
                        None => echo::message(message),
                    },
                    None => echo::message(message),
                };
                let _ = write!(text, "\n- `{shown}`: {message}");
                // A nested required key missing while a near one was stripped: name both.
                let missing = message.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`'));
                match missing.and_then(|key| misspelt(stripped, field, key).map(|ghost| (key, ghost))) {
                    Some((key, ghost)) => hints.push(format!("rename `{ghost}` to `{shown}.{key}`")),
                    None => hints.push(format!("send `{top}` as {expected}")),
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

/// A phrase for what a property's schema expects, e.g. "an integer ≥ 0 such as 5 (no quotes)".
fn expected_for(schema: &Value, field: &str) -> String {
    let Some(property) = schema.get("properties").and_then(|p| p.get(field)) else {
        return "the declared type".to_owned();
    };
    describe_schema(property)
}

fn describe_schema(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let shown: Vec<String> = values.iter().take(8).map(Value::to_string).collect();
        return format!("one of {}", shown.join(", "));
    }
    if let Some(value) = schema.get("const") {
        return format!("exactly {value}");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let shown: Vec<String> = options
                .iter()
                .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
                .map(describe_schema)
                .collect();
            return shown.join(" or ");
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
                let keys: Vec<String> = props.keys().map(|k| format!("`{k}`")).collect();
                format!("a JSON object with {}", keys.join(", "))
            }
            _ => "a JSON object".to_owned(),
        },
        other => format!("a JSON {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_is_checked_without_recursion() {
        let mut deep = json!(1);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        let mut map = Arguments::new();
        map.insert("x".into(), deep);
        assert!(exceeds_depth(&map, MAX_ARGUMENT_DEPTH));
        discard(Value::Object(map));
        let mut shallow = Arguments::new();
        shallow.insert("x".into(), json!({"a": [1, {"b": 2}]}));
        assert!(!exceeds_depth(&shallow, MAX_ARGUMENT_DEPTH));
    }

    #[test]
    fn strict_deserialization_names_the_path() {
        let mut errors = ArgumentErrors::new();
        let args: Arguments = serde_json::from_value(json!({"n": "5", "f": 5.0, "v": [1, "x"]})).unwrap();
        assert_eq!(argument::<u32>(&args, "n", &mut errors), None);
        assert_eq!(argument::<u32>(&args, "f", &mut errors), None);
        assert_eq!(argument::<Vec<u32>>(&args, "v", &mut errors), None);
        assert_eq!(argument::<Option<u32>>(&args, "absent", &mut errors), Some(None));
        assert_eq!(argument::<u32>(&args, "absent", &mut errors), None);
        let fields: Vec<String> = errors
            .errors()
            .iter()
            .map(|e| match e {
                ArgumentError::Invalid { field, .. } | ArgumentError::Missing { field } => field.clone(),
                ArgumentError::Injection { param, .. } => param.clone(),
            })
            .collect();
        assert_eq!(fields, ["n", "f", "v[1]", "absent"]);
        assert!(
            matches!(&errors.errors()[0], ArgumentError::Invalid { message, .. } if message.contains("string \"5\""))
        );
    }

    #[test]
    fn a_million_levels_are_dropped_on_a_small_stack() {
        let thread = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            let mut deep = json!(1);
            for _ in 0..1_000_000 {
                deep = Value::Array(vec![deep]);
            }
            discard(deep);
        });
        thread.expect("a thread starts").join().expect("no stack overflow");
    }

    #[test]
    fn out_of_range_integers_are_refused_with_the_range() {
        let mut errors = ArgumentErrors::new();
        let args: Arguments =
            serde_json::from_value(json!({"a": 2147483648_u64, "b": -1, "c": 1e20, "d": 5.0, "e": 1e300})).unwrap();
        assert_eq!(argument::<i32>(&args, "a", &mut errors), None);
        assert_eq!(argument::<u8>(&args, "b", &mut errors), None);
        assert_eq!(argument::<u64>(&args, "c", &mut errors), None);
        assert_eq!(argument::<u32>(&args, "d", &mut errors), None);
        assert_eq!(argument::<i128>(&args, "e", &mut errors), None);
        let messages: Vec<&str> = errors
            .errors()
            .iter()
            .map(|e| match e {
                ArgumentError::Invalid { message, .. } => message.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            messages[0],
            "`2147483648` is out of range for i32: expected an integer from -2147483648 to 2147483647"
        );
        assert_eq!(messages[1], "`-1` is out of range for u8: expected an integer from 0 to 255");
        assert!(messages[2].starts_with("`100000000000000000000` is out of range for u64"), "{}", messages[2]);
        assert!(!messages[2].contains("floating point"), "{}", messages[2]);
        // In range but written with a decimal point: serde's own words stand.
        assert!(messages[3].contains("floating point"), "{}", messages[3]);
        assert!(messages[4].contains("from -9223372036854775808 to 18446744073709551615"), "{}", messages[4]);
    }

    #[test]
    fn describes_expected_shapes() {
        assert!(describe_schema(&json!({"type": "integer", "minimum": 0})).contains("non-negative"));
        assert!(describe_schema(&json!({"type": ["string", "null"]})).contains("string"));
        assert_eq!(describe_schema(&json!({"enum": ["a", "b"]})), "one of \"a\", \"b\"");
        assert!(describe_schema(&json!({"anyOf": [{"type": "boolean"}, {"type": "null"}]})).contains("true"));
    }
}
