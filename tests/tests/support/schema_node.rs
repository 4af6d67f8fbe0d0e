//! What a test's instance generator needs to know about one node of a published JSON Schema: the node a
//! `$ref` points to (in `$defs`, or `#` for the root), its types, its `anyOf`/`oneOf` branches, and
//! whether `null` is allowed (by type, by OpenAPI's `nullable`, or by a `null` branch).

use serde_json::{Map, Value, json};

/// One schema node, `$ref`s followed.
pub struct SchemaNode<'a> {
    /// The node's keywords.
    pub map: &'a Map<String, Value>,
    /// Its `type` (one or several).
    pub types: Vec<&'a str>,
    /// Its `anyOf` and `oneOf` branches, `null` ones included.
    pub branches: Vec<&'a Value>,
    /// Whether `null` is a valid instance.
    pub null_allowed: bool,
}

/// Whether a branch is `{"type": "null"}`.
pub fn is_null_branch(branch: &Value) -> bool {
    branch.get("type") == Some(&json!("null"))
}

impl<'a> SchemaNode<'a> {
    /// The node `schema` (within `root`) stands for, following `$ref`s; `None` for a boolean schema.
    pub fn of(mut schema: &'a Value, root: &'a Value) -> Option<Self> {
        // A chain of references longer than the document is a cycle of plain references.
        for _ in 0..64 {
            let map = schema.as_object()?;
            if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                schema = if reference == "#" { root } else { &root["$defs"][reference.trim_start_matches("#/$defs/")] };
                continue;
            }
            let types: Vec<&str> = match map.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let branches: Vec<&Value> =
                ["anyOf", "oneOf"].iter().filter_map(|k| map.get(*k)).filter_map(Value::as_array).flatten().collect();
            let null_allowed = types.contains(&"null")
                || map.get("nullable") == Some(&Value::Bool(true))
                || branches.iter().any(|b| is_null_branch(b));
            return Some(SchemaNode { map, types, branches, null_allowed });
        }
        None
    }

    /// The node's type other than `null`, if it names one.
    pub fn kind(&self) -> Option<&'a str> {
        self.types.iter().copied().find(|t| *t != "null")
    }

    /// The branches other than `null`.
    pub fn non_null_branches(&self) -> Vec<&'a Value> {
        self.branches.iter().copied().filter(|b| !is_null_branch(b)).collect()
    }
}
