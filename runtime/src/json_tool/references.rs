//! How deep the validator recurses at one place of a value: each `$ref`, and each applicator that applies at the
//! same place (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`), is one more level of its
//! recursion (and of its compiler's) without descending into the value. A schema of a few hundred kilobytes whose
//! definitions are each a `$ref` to the next ran both out of stack and aborted the process, and one whose
//! references lead back to where they started without descending (`A = anyOf[string, A]`) recurses without end
//! on a value none of it accepts. The walks here are iterative.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::subschemas;

/// The longest chain of schemas applying one inside the other at one place of a value (a property's schema, the
/// definition its `$ref` names, a branch of that definition's `anyOf`, ...). A value nests at most
/// [`MAX_ARGUMENT_DEPTH`](crate::tool::MAX_ARGUMENT_DEPTH) levels, so the validator recurses at most this many
/// times that.
pub const MAX_IN_PLACE_DEPTH: usize = 32;

/// The most references a path through the schema may follow one after another without coming back to where it
/// was (a chain of distinct definitions, each a property or an item of the one before): the validator's
/// compiler took time quadratic in it (10,000: 0.4 s, 100,000: 35 s in a release build).
pub const MAX_REFERENCE_CHAIN: usize = 128;

/// What makes a schema's references unsafe to compile and validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReferenceFault {
    /// A `$ref` (or `$dynamicRef`, `$recursiveRef`) that is not `#` or `#` and a JSON pointer into the schema:
    /// another document, an anchor, or a pointer to nothing. Its target cannot be checked here (and no
    /// dialect can state it).
    Unresolvable {
        /// The reference, as written (cut if long).
        reference: String,
    },
    /// An `$id` below the root: references inside it would resolve against another base.
    NestedId,
    /// References or applicators that lead back to a schema they started from without descending into the
    /// value.
    Cycle,
    /// A chain of schemas applying one inside the other longer than [`MAX_IN_PLACE_DEPTH`].
    TooDeep,
    /// References followed one after another more than [`MAX_REFERENCE_CHAIN`] deep.
    TooLong,
}

impl std::fmt::Display for ReferenceFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReferenceFault::Unresolvable { reference } => {
                write!(f, "the reference `{reference}` does not point into the schema itself (`#` and a JSON pointer)")
            }
            ReferenceFault::NestedId => {
                f.write_str("an `$id` below the schema's root changes how the references inside it resolve")
            }
            ReferenceFault::Cycle => f.write_str(
                "its references and combinators lead back to a schema they started from without descending into \
                 the value (the validator would recurse without end)",
            ),
            ReferenceFault::TooDeep => write!(
                f,
                "more than {MAX_IN_PLACE_DEPTH} schemas apply one inside the other at one place of a value \
                 (references and combinators followed without descending into it)"
            ),
            ReferenceFault::TooLong => {
                write!(f, "its references lead more than {MAX_REFERENCE_CHAIN} deep, one definition after another")
            }
        }
    }
}

/// The longest reference shown in a fault.
const SHOWN: usize = 128;

/// Checks every reference of `root` resolves inside it, that no chain of schemas applying at one place is
/// cyclic or longer than [`MAX_IN_PLACE_DEPTH`], and that no path follows more than [`MAX_REFERENCE_CHAIN`]
/// references.
pub(super) fn check(root: &Value) -> Result<(), ReferenceFault> {
    // Every schema position, each checked once: `$id`s below the root, references resolve.
    let mut pending = vec![root];
    while let Some(schema) = pending.pop() {
        let Value::Object(map) = schema else { continue };
        if !std::ptr::eq(schema, root) && map.contains_key("$id") {
            return Err(ReferenceFault::NestedId);
        }
        for reference in references(map) {
            resolve(reference, root)?;
        }
        pending.extend(subschemas(map));
    }
    longest_in_place(root)?;
    longest_reference_chain(root)
}

/// The reference keywords' values in `map`.
fn references(map: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    ["$ref", "$dynamicRef", "$recursiveRef"].into_iter().filter_map(|keyword| map.get(keyword))
}

/// The schema `reference` names in `root`.
fn resolve<'a>(reference: &Value, root: &'a Value) -> Result<&'a Value, ReferenceFault> {
    let unresolvable = || {
        let text = reference.as_str().map_or_else(|| reference.to_string(), str::to_owned);
        let mut shown: String = text.chars().take(SHOWN).flat_map(char::escape_debug).collect();
        if text.chars().nth(SHOWN).is_some() {
            shown.push('…');
        }
        ReferenceFault::Unresolvable { reference: shown }
    };
    let fragment = reference.as_str().and_then(|r| r.strip_prefix('#')).ok_or_else(unresolvable)?;
    if fragment.is_empty() {
        return Ok(root);
    }
    if !fragment.starts_with('/') {
        return Err(unresolvable());
    }
    // Percent-decoded as a URI fragment; a decoding that is not UTF-8 points nowhere.
    let pointer = percent_encoding::percent_decode_str(fragment).decode_utf8().map_err(|_| unresolvable())?;
    root.pointer(&pointer).ok_or_else(unresolvable)
}

/// The schemas that apply at the same place of a value as `schema` does: the targets of its references, its
/// `allOf`/`anyOf`/`oneOf` branches, `not`, `if`/`then`/`else`, `dependentSchemas` (and draft 7's schema
/// `dependencies`). References are resolved already by [`check`].
fn in_place<'a>(schema: &'a Value, root: &'a Value) -> Vec<&'a Value> {
    let Value::Object(map) = schema else { return Vec::new() };
    let mut found: Vec<&Value> = references(map).filter_map(|reference| resolve(reference, root).ok()).collect();
    for (keyword, value) in map {
        match keyword.as_str() {
            "allOf" | "anyOf" | "oneOf" => found.extend(value.as_array().into_iter().flatten()),
            "not" | "if" | "then" | "else" => found.push(value),
            "dependentSchemas" | "dependencies" => {
                found.extend(value.as_object().into_iter().flat_map(Map::values).filter(|v| !v.is_array()));
            }
            _ => {}
        }
    }
    found
}

/// Where a schema stands in the walk of [`longest`].
enum Seen {
    /// On the walk's path: an edge to it closes a cycle.
    Open,
    /// The longest path starting at it.
    Done(usize),
}

/// A schema on the walk's path, its edges (each to a schema, with a weight), and how many of them are walked.
type Step<'a> = (&'a Value, Vec<(&'a Value, usize)>, usize);

/// The identity of a schema position while `root` is borrowed.
fn key(schema: &Value) -> usize {
    std::ptr::from_ref(schema) as usize
}

/// Fails with `too_deep` if a path from any schema position of `root` along `edges` weighs more than `max`: a
/// path weighs `node` for each schema on it and each edge's weight. An edge back to a schema on the walk's path
/// closes a cycle: a [`ReferenceFault::Cycle`] if `cycles_are_faults`, otherwise passed over. Each schema's
/// longest path is found once, so the walk is linear in the schema.
fn longest<'a>(
    root: &'a Value,
    edges: impl Fn(&'a Value) -> Vec<(&'a Value, usize)>,
    node: usize,
    cycles_are_faults: bool,
    max: usize,
    too_deep: ReferenceFault,
) -> Result<(), ReferenceFault> {
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    let mut starts = vec![root];
    while let Some(start) = starts.pop() {
        if let Value::Object(map) = start {
            starts.extend(subschemas(map));
        }
        if seen.contains_key(&key(start)) {
            continue;
        }
        let mut path: Vec<Step<'_>> = vec![(start, edges(start), 0)];
        seen.insert(key(start), Seen::Open);
        while let Some((schema, children, next)) = path.last_mut() {
            if let Some(&(child, _)) = children.get(*next) {
                *next += 1;
                match seen.get(&key(child)) {
                    Some(Seen::Open) if cycles_are_faults => return Err(ReferenceFault::Cycle),
                    Some(_) => {}
                    None => {
                        seen.insert(key(child), Seen::Open);
                        let under = edges(child);
                        path.push((child, under, 0));
                    }
                }
                continue;
            }
            let after = children
                .iter()
                .filter_map(|(child, weight)| match seen.get(&key(child)) {
                    Some(Seen::Done(length)) => Some(length + weight),
                    // An edge back into the walk's path (a recursive type): passed over.
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            let length = node + after;
            if length > max {
                return Err(too_deep);
            }
            seen.insert(key(schema), Seen::Done(length));
            path.pop();
        }
    }
    Ok(())
}

/// Fails if a chain of in-place schemas from any schema position is cyclic or longer than
/// [`MAX_IN_PLACE_DEPTH`].
fn longest_in_place(root: &Value) -> Result<(), ReferenceFault> {
    let edges = |schema| in_place(schema, root).into_iter().map(|child| (child, 0)).collect();
    longest(root, edges, 1, true, MAX_IN_PLACE_DEPTH, ReferenceFault::TooDeep)
}

/// Fails if references lead more than [`MAX_REFERENCE_CHAIN`] deep, one after another along any path that does
/// not come back to where it was (a recursive type's reference back to itself is passed over).
fn longest_reference_chain(root: &Value) -> Result<(), ReferenceFault> {
    longest(root, |schema| reference_edges(schema, root), 0, false, MAX_REFERENCE_CHAIN, ReferenceFault::TooLong)
}

/// The schemas directly inside `schema` (weighing nothing) and the targets of its references (one each).
fn reference_edges<'a>(schema: &'a Value, root: &'a Value) -> Vec<(&'a Value, usize)> {
    let Value::Object(map) = schema else { return Vec::new() };
    let targets = references(map).filter_map(|reference| resolve(reference, root).ok()).map(|target| (target, 1));
    subschemas(map).map(|child| (child, 0)).chain(targets).collect()
}
