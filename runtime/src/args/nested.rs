//! Below the top level: the argument value walked together with the tool's canonical schema, so what the
//! schema says about nested values holds at run time too. Serde ignores unknown fields and collapses
//! duplicate set items; the schema closes every object (`additionalProperties: false`) and declares
//! `uniqueItems` for sets. Here unknown keys become ghosts (with their path) and duplicates are found.
//!
//! A call in a dialect (see [`CallContext::with_dialect`](crate::CallContext::with_dialect)) is held to
//! what that dialect's schema says instead: where it cannot say `uniqueItems` a repeated item counts once
//! (the walk removes the repeats), and where its SDK holds bounds as floats an integer beyond the bound
//! the dialect states (the nearest one a float holds, inside the canonical one) is out of range.
//!
//! Alternatives (`anyOf`/`oneOf`, an `Option`, an enum's variants) are narrowed to those the value can
//! match (every required key present, every tag-like `const`/`enum` property equal); a key is a ghost only
//! when no such alternative declares it. Where the schema leaves an object open, or says something this walk
//! does not model (`allOf`, `patternProperties`, properties beside alternatives), nothing is stripped.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::dialect::Dialect;
use crate::echo;

/// How many `$ref`s may be followed without descending into the value: a cycle of references alone
/// constrains nothing.
const MAX_REFERENCE_HOPS: usize = 32;

/// A key no schema alternative at its place declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ghost {
    /// Where: `address.zipcode`, `items[2].zipcode`, or just the key at the top level.
    pub(crate) path: String,
    /// The declared key it most resembles, if one is close (a likely typo).
    pub(crate) closest: Option<String>,
}

/// An array the schema says holds unique items, with an item repeated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    /// The array's path.
    pub(crate) path: String,
    /// The repeated item, as JSON text (capped for display).
    pub(crate) item: String,
}

/// An integer inside the canonical schema's bounds but outside those the call's dialect states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutOfRange {
    /// Where: `count`, `items[2].count`.
    pub(crate) path: String,
    /// The integer as sent.
    pub(crate) value: String,
    /// The bounds the dialect states, as JSON text (`None`: unbounded on that side).
    pub(crate) min: Option<String>,
    pub(crate) max: Option<String>,
}

/// The declared name closest to `ghost`, when it is near enough to be a typo (at most two edits) or one
/// name extends the other (`zipcode` for `zip`).
pub(crate) fn closest<'a>(ghost: &str, declared: impl IntoIterator<Item = &'a str>) -> Option<String> {
    declared
        .into_iter()
        .filter_map(|name| {
            let distance = strsim::damerau_levenshtein(ghost, name);
            let (short, long) = if ghost.len() < name.len() { (ghost, name) } else { (name, ghost) };
            let extends = short.chars().count() >= 3 && long.starts_with(short);
            (distance <= 2 || extends).then_some((distance, name))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.to_owned())
}

/// One walk over the arguments of a call.
pub(crate) struct Walk<'s> {
    root: &'s Value,
    /// Whether ghosts are removed from the value (strip) or only reported (block: the call is refused).
    remove: bool,
    /// Whether a repeated item of a set counts once (removed) instead of being a duplicate: the call's
    /// dialect cannot say `uniqueItems`.
    collapse_repeats: bool,
    /// Whether integers are held to bounds a float holds exactly: the call's dialect's SDK stores bounds
    /// as floats.
    float_bounds: bool,
    pub(crate) ghosts: Vec<Ghost>,
    pub(crate) duplicates: Vec<Duplicate>,
    pub(crate) out_of_range: Vec<OutOfRange>,
}

/// What the schema alternatives at one place say.
enum Candidates<'s> {
    /// Some alternative accepts anything here (or the schema says what this walk does not model).
    Open,
    /// The alternatives, each a schema object.
    Some(Vec<&'s Map<String, Value>>),
}

impl<'s> Walk<'s> {
    /// A walk against the canonical schema `root` (where `$ref`s resolve).
    pub(crate) fn new(root: &'s Value, remove: bool) -> Self {
        Walk {
            root,
            remove,
            collapse_repeats: false,
            float_bounds: false,
            ghosts: Vec::new(),
            duplicates: Vec::new(),
            out_of_range: Vec::new(),
        }
    }

    /// The walk for a call offered in `dialect`: held to what that dialect's schema says.
    pub(crate) fn in_dialect(mut self, dialect: Option<Dialect>) -> Self {
        if let Some(dialect) = dialect {
            self.collapse_repeats = !dialect.says_unique_items();
            self.float_bounds = dialect.float_bounds();
        }
        self
    }

    /// Walks `value` at `path` against `schemas` (any of which may apply).
    pub(crate) fn value(&mut self, value: &mut Value, schemas: &[&'s Value], path: &mut String) {
        match value {
            Value::Object(map) => self.object(map, schemas, path),
            Value::Array(items) => self.array(items, schemas, path),
            _ => {}
        }
    }

    fn candidates(&self, schemas: &[&'s Value]) -> Candidates<'s> {
        let mut out = Vec::new();
        for schema in schemas {
            if !self.expand(schema, 0, &mut out) {
                return Candidates::Open;
            }
        }
        Candidates::Some(out)
    }

    /// Adds the alternatives `schema` stands for to `out`; `false` when one of them is open.
    fn expand(&self, schema: &'s Value, hops: usize, out: &mut Vec<&'s Map<String, Value>>) -> bool {
        let map = match schema {
            Value::Object(map) => map,
            Value::Bool(accepts) => return !accepts,
            _ => return false,
        };
        if let Some(reference) = map.get("$ref") {
            if hops >= MAX_REFERENCE_HOPS {
                return false;
            }
            let target = reference.as_str().and_then(|r| resolve(r, self.root));
            return target.is_some_and(|target| self.expand(target, hops + 1, out));
        }
        if map.contains_key("allOf") || map.contains_key("patternProperties") {
            return false;
        }
        let alternatives = map.get("anyOf").or_else(|| map.get("oneOf"));
        match alternatives {
            Some(_) if map.contains_key("properties") => false,
            Some(Value::Array(branches)) => branches.iter().all(|branch| self.expand(branch, hops + 1, out)),
            Some(_) => false,
            None => {
                out.push(map);
                true
            }
        }
    }

    /// Walks the object `map` at `path` (empty at the top level) against `schemas`.
    pub(crate) fn object(&mut self, map: &mut Map<String, Value>, schemas: &[&'s Value], path: &mut String) {
        let Candidates::Some(all) = self.candidates(schemas) else { return };
        let objects: Vec<&Map<String, Value>> = all.into_iter().filter(|c| may_be(c, "object")).collect();
        if objects.is_empty() {
            return;
        }
        let matching: Vec<&Map<String, Value>> = objects.iter().copied().filter(|c| self.fits(c, map)).collect();
        let alternatives = if matching.is_empty() { objects } else { matching };
        let mut ghosts = Vec::new();
        for key in map.keys() {
            let declared = alternatives.iter().any(|c| property(c, key).is_some() || !is_closed(c));
            if !declared {
                let names = alternatives.iter().flat_map(|c| property_names(c));
                ghosts.push(key.clone());
                self.ghosts.push(Ghost { path: join_key(path, key), closest: closest(key, names) });
            }
        }
        if self.remove && !ghosts.is_empty() {
            map.retain(|key, _| !ghosts.contains(key));
        }
        self.children(map, &alternatives, path);
    }

    /// Walks each value with the schemas its key has among `alternatives`.
    fn children(&mut self, map: &mut Map<String, Value>, alternatives: &[&'s Map<String, Value>], path: &mut String) {
        for (key, child) in map.iter_mut() {
            let scalar = !matches!(child, Value::Object(_) | Value::Array(_));
            if scalar && !(self.float_bounds && child.is_number()) {
                continue;
            }
            let schemas: Vec<&'s Value> =
                alternatives.iter().filter_map(|c| property(c, key).or_else(|| additional_schema(c))).collect();
            if schemas.is_empty() {
                continue;
            }
            if scalar {
                self.check_bounds(child, &schemas, || join_key(path, key));
                continue;
            }
            let length = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            self.value(child, &schemas, path);
            path.truncate(length);
        }
    }

    /// Whether `value` can be an instance of the alternative `schema`: its required keys are present and its
    /// tags (`const` or one-value `enum` properties) agree.
    fn fits(&self, schema: &Map<String, Value>, value: &Map<String, Value>) -> bool {
        let required = schema.get("required").and_then(Value::as_array);
        if required.into_iter().flatten().filter_map(Value::as_str).any(|key| !value.contains_key(key)) {
            return false;
        }
        value.iter().all(|(key, given)| {
            let Some(declared) = property(schema, key) else { return true };
            let mut resolved = declared;
            for _ in 0..MAX_REFERENCE_HOPS {
                match resolved.get("$ref").and_then(Value::as_str).and_then(|r| resolve(r, self.root)) {
                    Some(target) => resolved = target,
                    None => break,
                }
            }
            match (resolved.get("const"), resolved.get("enum").and_then(Value::as_array)) {
                (Some(constant), _) => constant == given,
                (None, Some(values)) => values.contains(given),
                (None, None) => true,
            }
        })
    }

    fn array(&mut self, items: &mut Vec<Value>, schemas: &[&'s Value], path: &mut String) {
        let Candidates::Some(all) = self.candidates(schemas) else { return };
        let arrays: Vec<&Map<String, Value>> = all.into_iter().filter(|c| may_be(c, "array")).collect();
        if arrays.is_empty() {
            return;
        }
        if arrays.iter().all(|c| c.get("uniqueItems") == Some(&Value::Bool(true))) {
            if self.collapse_repeats {
                collapse_repeats(items);
            } else {
                self.check_unique(items, path);
            }
        }
        for (index, item) in items.iter_mut().enumerate() {
            let scalar = !matches!(item, Value::Object(_) | Value::Array(_));
            if scalar && !(self.float_bounds && item.is_number()) {
                continue;
            }
            let schemas: Vec<&'s Value> = arrays.iter().filter_map(|c| item_schema(c, index)).collect();
            if schemas.is_empty() {
                continue;
            }
            if scalar {
                self.check_bounds(item, &schemas, || format!("{path}[{index}]"));
                continue;
            }
            let length = path.len();
            path.push_str(&format!("[{index}]"));
            self.value(item, &schemas, path);
            path.truncate(length);
        }
    }

    /// Under float bounds: `value` (a number) is out of range when every numeric alternative bounds it more
    /// tightly than its canonical bounds do (the canonical bounds themselves the tool checks anyway).
    fn check_bounds(&mut self, value: &Value, schemas: &[&'s Value], path: impl FnOnce() -> String) {
        let Some(n) = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)) else { return };
        let Candidates::Some(all) = self.candidates(schemas) else { return };
        let numeric: Vec<&Map<String, Value>> =
            all.into_iter().filter(|c| may_be(c, "integer") || may_be(c, "number")).collect();
        let bound = |c: &Map<String, Value>, key: &str| {
            let stated = c.get(key)?;
            Some(crate::dialect::float_exact_bound(stated, key == "maximum").unwrap_or_else(|| stated.clone()))
        };
        let within = |c: &Map<String, Value>| {
            let holds = |key: &str, inside: fn(i128, i128) -> bool| match bound(c, key) {
                Some(b) => match b.as_i64().map(i128::from).or_else(|| b.as_u64().map(i128::from)) {
                    Some(b) => inside(n, b),
                    // A bound that is not an integer (`2.5`): a float already holds it.
                    None => true,
                },
                None => true,
            };
            holds("minimum", |n, b| n >= b) && holds("maximum", |n, b| n <= b)
        };
        if numeric.is_empty() || numeric.iter().any(|c| within(c)) {
            return;
        }
        let first = numeric[0];
        self.out_of_range.push(OutOfRange {
            path: path(),
            value: value.to_string(),
            min: bound(first, "minimum").map(|b| b.to_string()),
            max: bound(first, "maximum").map(|b| b.to_string()),
        });
    }

    /// Finds the first repeated item, comparing canonical JSON (so key order does not matter).
    fn check_unique(&mut self, items: &[Value], path: &str) {
        let mut seen = HashSet::with_capacity(items.len());
        for item in items {
            let text = crate::canonical::to_canonical_string(item).unwrap_or_else(|_| item.to_string());
            if !seen.insert(text.clone()) {
                self.duplicates.push(Duplicate { path: path.to_owned(), item: echo::fragment(&text).into_owned() });
                return;
            }
        }
    }
}

/// Removes every repeat of an earlier item (canonical JSON compared, so key order does not matter): a set
/// holds each item once.
fn collapse_repeats(items: &mut Vec<Value>) {
    let mut seen = HashSet::with_capacity(items.len());
    items.retain(|item| seen.insert(crate::canonical::to_canonical_string(item).unwrap_or_else(|_| item.to_string())));
}

/// A reference within `root`, as a JSON pointer fragment: `#/$defs/<name>` as generated for typed tools, and
/// what schemas written elsewhere use (`#/definitions/<name>`, `#/properties/a/items`, `#` for the root).
/// Anything else (another document, an anchor, percent-encoding) does not resolve, and the walk treats the
/// place as open.
fn resolve<'s>(reference: &str, root: &'s Value) -> Option<&'s Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.contains('%') {
        return None;
    }
    root.pointer(pointer)
}

/// Whether the alternative allows JSON values of `kind` (no `type` allows every kind).
fn may_be(schema: &Map<String, Value>, kind: &str) -> bool {
    match schema.get("type") {
        None => !schema.contains_key("const") && !schema.contains_key("enum"),
        Some(Value::String(t)) => t == kind,
        Some(Value::Array(types)) => types.iter().any(|t| t == kind),
        Some(_) => false,
    }
}

fn property<'s>(schema: &'s Map<String, Value>, key: &str) -> Option<&'s Value> {
    schema.get("properties")?.get(key)
}

fn property_names(schema: &Map<String, Value>) -> impl Iterator<Item = &str> {
    schema.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.keys().map(String::as_str))
}

/// `additionalProperties: false`: no key beyond `properties`.
fn is_closed(schema: &Map<String, Value>) -> bool {
    schema.get("additionalProperties") == Some(&Value::Bool(false))
}

/// The schema of the values of keys beyond `properties` (a map's values), if one is given.
fn additional_schema(schema: &Map<String, Value>) -> Option<&Value> {
    schema.get("additionalProperties").filter(|a| a.is_object())
}

fn item_schema(schema: &Map<String, Value>, index: usize) -> Option<&Value> {
    if let Some(position) = schema.get("prefixItems").and_then(Value::as_array).and_then(|p| p.get(index)) {
        return Some(position);
    }
    schema.get("items").filter(|items| items.is_object())
}

/// `path.key` (or `key` at the top).
fn join_key(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn walk(schema: Value, mut value: Value) -> (Value, Vec<String>, Vec<(String, String)>) {
        let root = json!({"type": "object", "properties": {"x": schema.clone()}, "$defs": {
            "Node": {"type": "object", "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}, "additionalProperties": false}
        }});
        let property = &root["properties"]["x"];
        let mut w = Walk::new(&root, true);
        w.value(&mut value, &[property], &mut "x".to_owned());
        let ghosts = w.ghosts.iter().map(|g| g.path.clone()).collect();
        let duplicates = w.duplicates.iter().map(|d| (d.path.clone(), d.item.clone())).collect();
        (value, ghosts, duplicates)
    }

    fn closed(properties: Value) -> Value {
        json!({"type": "object", "properties": properties, "additionalProperties": false})
    }

    #[test]
    fn strips_unknown_keys_of_closed_objects_at_any_depth() {
        let address = closed(json!({"street": {"type": "string"}, "zip": {"type": ["string", "null"]}}));
        let schema = closed(json!({"home": address.clone(), "items": {"type": "array", "items": address}}));
        let (value, ghosts, _) = walk(
            schema,
            json!({"home": {"street": "s", "zipcode": "1"}, "items": [{"street": "a"}, {"street": "b", "zipcode": 2}]}),
        );
        assert_eq!(ghosts, ["x.home.zipcode", "x.items[1].zipcode"]);
        assert_eq!(value, json!({"home": {"street": "s"}, "items": [{"street": "a"}, {"street": "b"}]}));
    }

    #[test]
    fn follows_references_and_options() {
        let (_, ghosts, _) = walk(
            json!({"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}),
            json!({"label": "a", "children": [{"label": "b", "children": [], "colour": 1}]}),
        );
        assert_eq!(ghosts, ["x.children[0].colour"]);
    }

    #[test]
    fn keeps_keys_any_fitting_alternative_declares() {
        let tagged = json!({"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "left": {"type": "string"}}, "required": ["kind"], "additionalProperties": false},
            {"type": "object", "properties": {"kind": {"const": "b"}, "right": {"type": "string"}}, "required": ["kind"], "additionalProperties": false}
        ]});
        let (_, ghosts, _) = walk(tagged.clone(), json!({"kind": "a", "left": "l", "right": "r"}));
        assert_eq!(ghosts, ["x.right"]);
        // No alternative fits (an unknown tag): only keys unknown to all of them are stripped.
        let (_, ghosts, _) = walk(tagged, json!({"kind": "c", "left": "l", "right": "r", "other": 1}));
        assert_eq!(ghosts, ["x.other"]);
        // An open alternative declares every key.
        let (_, ghosts, _) = walk(json!({"anyOf": [closed(json!({})), {}]}), json!({"a": 1}));
        assert!(ghosts.is_empty());
    }

    #[test]
    fn walks_map_values_and_leaves_open_objects_alone() {
        let map = json!({"type": "object", "additionalProperties": closed(json!({"n": {"type": "integer"}}))});
        let (_, ghosts, _) = walk(map, json!({"any key": {"n": 1, "m": 2}}));
        assert_eq!(ghosts, ["x.any key.m"]);
        let (_, ghosts, _) = walk(json!({"type": "object"}), json!({"a": {"b": 1}}));
        assert!(ghosts.is_empty());
    }

    #[test]
    fn finds_duplicates_where_items_must_be_unique() {
        let set = json!({"type": "array", "items": {"type": "object"}, "uniqueItems": true});
        let (_, _, duplicates) = walk(set, json!([{"a": 1, "b": 2}, {"c": 3}, {"b": 2, "a": 1}]));
        assert_eq!(duplicates, [("x".to_owned(), r#"{"a":1,"b":2}"#.to_owned())]);
        let (_, _, duplicates) = walk(json!({"type": "array"}), json!([1, 1]));
        assert!(duplicates.is_empty());
    }

    #[test]
    fn suggests_the_closest_declared_key() {
        assert_eq!(closest("zipcode", ["zip", "street"]), Some("zip".to_owned()));
        assert_eq!(closest("stret", ["zip", "street"]), Some("street".to_owned()));
        assert_eq!(closest("colour", ["zip", "street"]), None);
        assert_eq!(closest("q", ["zip"]), None);
    }
}
