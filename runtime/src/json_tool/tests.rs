//! Unit tests of `json_tool`.

use super::*;
use serde_json::json;

#[test]
fn closes_only_where_closing_narrows() {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "b": {"type": "array", "items": {"properties": {"y": {}}}},
            "c": {"anyOf": [{"type": "object", "properties": {"z": {}}}, {"type": "null"}]},
            "d": {"type": "object", "properties": {"w": {}}, "additionalProperties": true},
            "e": {"$ref": "#/$defs/E", "properties": {"v": {}}},
            "const": {"const": {"properties": {}}}
        },
        "$defs": {"E": {"type": "object", "properties": {"u": {}}}}
    });
    close_unstated(&mut schema);
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["a"]["additionalProperties"], false);
    assert_eq!(schema["properties"]["b"]["items"]["additionalProperties"], false);
    assert_eq!(schema["properties"]["c"]["anyOf"][0]["additionalProperties"], false);
    assert_eq!(schema["properties"]["d"]["additionalProperties"], true);
    assert!(schema["properties"]["e"].get("additionalProperties").is_none());
    // `E` is applied beside `e`'s own properties: closing it would refuse `v`.
    assert!(schema["$defs"]["E"].get("additionalProperties").is_none());
    assert_eq!(schema["properties"]["const"], json!({"const": {"properties": {}}}));

    let mut referenced = json!({
        "type": "object",
        "properties": {"e": {"$ref": "#/$defs/E"}},
        "$defs": {"E": {"type": "object", "properties": {"u": {}}}}
    });
    close_unstated(&mut referenced);
    assert_eq!(referenced["$defs"]["E"]["additionalProperties"], false);

    // A `not` anywhere: definitions may be negated, so they stay as written; inline objects still close.
    let mut negated = json!({
        "type": "object",
        "properties": {"a": {"not": {"$ref": "#/$defs/E"}}, "b": {"properties": {"x": {}}}},
        "$defs": {"E": {"type": "object", "properties": {"u": {}}}}
    });
    close_unstated(&mut negated);
    assert!(negated["$defs"]["E"].get("additionalProperties").is_none());
    assert_eq!(negated["properties"]["b"]["additionalProperties"], false);
}

#[test]
fn paths_name_nested_places() {
    let validator = jsonschema::validator_for(&json!({
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}},
            "required": ["items", "other"]
        }))
        .unwrap();
    let instance = json!({"items": [{"n": 1}, {"n": "2"}, {}]});
    let errors: Vec<ArgumentError> = validator.iter_errors(&instance).map(|e| argument_error(&e)).collect();
    assert!(errors.contains(&ArgumentError::Missing { field: "other".into() }), "{errors:?}");
    assert!(errors.iter().any(|e| matches!(e, ArgumentError::Invalid { field, .. } if field == "items[1].n")));
    assert!(errors.contains(&ArgumentError::Invalid { field: "items[2]".into(), message: "missing field `n`".into() }));
}
