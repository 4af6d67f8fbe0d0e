//! Arguments from the model: admission (object, depth, ghost keys, nulls), strict deserialization with
//! every bad field named, and refusal text the model can act on.

use std::fmt::Write as _;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Inject, Invocation};
use crate::tool::{Arguments, GhostPolicy, ToolSpec};

/// How deep an argument object may nest. Deeper input is refused before it is deserialized.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Arguments admitted past the ghost gate.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(crate) arguments: Arguments,
    pub(crate) stripped: Vec<String>,
}

/// Why arguments were not admitted.
#[derive(Debug)]
pub(crate) enum AdmissionError {
    NotAnObject(&'static str),
    TooDeep,
    Ghosts(Vec<String>),
}

/// Checks the shape, strips (or refuses) undeclared keys, and drops `null`s, which count as absent.
pub(crate) fn admit(arguments: Value, spec: &ToolSpec) -> Result<Admitted, AdmissionError> {
    let mut map = match arguments {
        Value::Object(map) => map,
        // Some providers send no arguments at all for a tool without parameters.
        Value::Null => Arguments::new(),
        Value::String(_) => {
            return Err(AdmissionError::NotAnObject("a string (malformed JSON text?)"));
        }
        Value::Array(_) => return Err(AdmissionError::NotAnObject("an array")),
        Value::Bool(_) => return Err(AdmissionError::NotAnObject("a boolean")),
        Value::Number(_) => return Err(AdmissionError::NotAnObject("a number")),
    };
    if exceeds_depth(&map, MAX_ARGUMENT_DEPTH) {
        return Err(AdmissionError::TooDeep);
    }
    let mut ghosts = Vec::new();
    if map.keys().any(|k| spec.param(k).is_none()) {
        map.retain(|key, _| {
            let declared = spec.param(key).is_some();
            if !declared {
                ghosts.push(key.clone());
            }
            declared
        });
        if spec.ghost == GhostPolicy::Block {
            return Err(AdmissionError::Ghosts(ghosts));
        }
    }
    map.retain(|_, value| !value.is_null());
    Ok(Admitted { arguments: map, stripped: ghosts })
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
            errors.push(ArgumentError::Invalid { field, message: err.into_inner().to_string() });
            None
        }
    }
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
                let _ = write!(text, "\n- `{}` is required ({expected})", shorten(field));
                // A misspelt key was stripped as a ghost: say which one was meant.
                match stripped.iter().find(|ghost| strsim::damerau_levenshtein(ghost, field) <= 2) {
                    Some(ghost) => hints.push(format!("rename `{ghost}` to `{field}`; send it as {expected}")),
                    None => hints.push(format!("include `{field}` as {expected}")),
                }
            }
            ArgumentError::Invalid { field, message } => {
                let top = field.split(['.', '[']).next().unwrap_or(field);
                let expected = expected_for(schema, top);
                let _ = write!(text, "\n- `{}`: {}", shorten(field), shorten(message));
                hints.push(format!("send `{top}` as {expected}"));
            }
            ArgumentError::Injection { .. } => {}
        }
    }
    (text, hints)
}

/// Longest fragment of model input echoed in a refusal, in characters: longer ones keep their head and
/// tail around an ellipsis, so a refusal's size does not grow with the input's (a 20 MB string in an
/// integer field is not sent back to the model).
pub(crate) const MAX_ECHO_CHARS: usize = 240;

/// `text`, cut to [`MAX_ECHO_CHARS`] characters with a visible ellipsis. The tail is kept because serde's
/// messages end with what was expected (`…, expected u8`).
pub(crate) fn shorten(text: &str) -> std::borrow::Cow<'_, str> {
    let chars = text.chars().count();
    if chars <= MAX_ECHO_CHARS {
        return std::borrow::Cow::Borrowed(text);
    }
    let head: String = text.chars().take(MAX_ECHO_CHARS * 2 / 3).collect();
    let tail: String = text.chars().skip(chars - MAX_ECHO_CHARS / 3).collect();
    std::borrow::Cow::Owned(format!("{head}…{tail}"))
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
        "integer" => {
            let min = schema.get("minimum").and_then(Value::as_f64);
            if min == Some(0.0) {
                "a non-negative JSON integer such as 5 (no quotes, no decimal point)".to_owned()
            } else {
                "a JSON integer such as 5 (no quotes, no decimal point)".to_owned()
            }
        }
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
        // Dropping a deeply nested value recurses in serde_json; leak it in this test only.
        std::mem::forget(map);
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
    fn describes_expected_shapes() {
        assert!(describe_schema(&json!({"type": "integer", "minimum": 0})).contains("non-negative"));
        assert!(describe_schema(&json!({"type": ["string", "null"]})).contains("string"));
        assert_eq!(describe_schema(&json!({"enum": ["a", "b"]})), "one of \"a\", \"b\"");
        assert!(describe_schema(&json!({"anyOf": [{"type": "boolean"}, {"type": "null"}]})).contains("true"));
    }
}
