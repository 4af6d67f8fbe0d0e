//! One walk over a call's arguments beside the compiled schema: ghosts found (and stripped), sets checked
//! for repeats, integers held to the bounds the call's dialect states.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::compiled_schema::{CompiledSchema, Kind, Leaf, LeafId, NodeId, ROOT};
use super::findings::{Duplicate, Ghost, OutOfRange, closest};
use super::path::Path;
use crate::args::{MAX_LISTED, unique};
use crate::dialect::Dialect;
use crate::echo;

/// How many ghosts in one object are removed one by one, each by its key (more are removed in one pass).
const FEW_GHOSTS: usize = 4;

/// Up to a few ids without allocating: the schemas one key or item has among the alternatives (one, for
/// every alternative but a union's).
enum Few {
    Zero,
    One([NodeId; 1]),
    Many(Vec<NodeId>),
}

impl Few {
    fn collect(mut ids: impl Iterator<Item = NodeId>) -> Few {
        let Some(first) = ids.next() else { return Few::Zero };
        let Some(second) = ids.next() else { return Few::One([first]) };
        let mut many = vec![first, second];
        many.extend(ids);
        Few::Many(many)
    }

    fn as_slice(&self) -> &[NodeId] {
        match self {
            Few::Zero => &[],
            Few::One(one) => one,
            Few::Many(many) => many,
        }
    }
}

/// One walk over the arguments of a call.
pub(crate) struct Walk<'s> {
    schema: &'s CompiledSchema,
    /// Whether ghosts are removed from the value (strip) or only reported (block: the call is refused,
    /// and its refusal suggests the closest declared key).
    remove: bool,
    /// Whether a repeated item of a set counts once (removed) instead of being a duplicate: the call's
    /// dialect cannot say `uniqueItems`.
    collapse_repeats: bool,
    /// Whether integers are held to bounds a float holds exactly: the call's dialect's SDK stores bounds
    /// as floats.
    float_bounds: bool,
    pub(crate) ghosts: Vec<Ghost>,
    /// The ghosts of the objects being walked past each one's first few, put in place when its walk ends (an
    /// object's own after those of the objects around it, which are still open): each inserted before the
    /// ghosts found below it made a call with many at two levels quadratic (80,000 took 1 s). One buffer for
    /// the walk, so an object without that many costs nothing more.
    more: Vec<Ghost>,
    pub(crate) duplicates: Vec<Duplicate>,
    pub(crate) out_of_range: Vec<OutOfRange>,
}

impl<'s> Walk<'s> {
    /// A walk against the compiled canonical schema.
    pub(crate) fn new(schema: &'s CompiledSchema, remove: bool) -> Self {
        Walk {
            schema,
            remove,
            collapse_repeats: false,
            float_bounds: false,
            ghosts: Vec::new(),
            more: Vec::new(),
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

    /// Walks the top-level argument object against the schema's root.
    pub(crate) fn arguments(&mut self, map: &mut Map<String, Value>) {
        self.object(map, &[ROOT], &Path::Root);
    }

    /// Walks `value` at `path` against `schemas` (any of which may apply).
    fn value(&mut self, value: &mut Value, schemas: &[NodeId], path: &Path<'_>) {
        match value {
            Value::Object(map) => self.object(map, schemas, path),
            Value::Array(items) => self.array(items, schemas, path),
            _ => {}
        }
    }

    /// Walks the object `map` at `path` against `schemas`.
    fn object(&mut self, map: &mut Map<String, Value>, schemas: &[NodeId], path: &Path<'_>) {
        let schema = self.schema;
        let Some(objects) = schema.alternatives(schemas, Kind::Object) else { return };
        if objects.is_empty() {
            return;
        }
        // The alternatives the value fits, or all of them when it fits none; one alternative needs no test.
        let alternatives = if objects.len() == 1 {
            objects
        } else {
            let matching: Vec<LeafId> = objects.iter().copied().filter(|&c| schema.leaves[c].fits(map)).collect();
            if matching.is_empty() { objects } else { Cow::Owned(matching) }
        };
        let admitted = |key: &str, at: usize| alternatives.iter().any(|&c| schema.leaves[c].admits(key, at));
        let before = self.ghosts.len();
        // This object's ghosts come before those found below it, in the order sent (the keys and their values
        // are read in one pass: each ghost found here is put after the ones found here before it).
        let mut found_here = 0;
        // Where the ghosts are, for removing them without looking each key up again (the first 64 keys;
        // past those, each is looked up again).
        let mut ghost_at = 0_u64;
        // The first few ghosts' key lengths: each is removed by its key, read off the end of its path.
        let mut key_lengths = [0_usize; FEW_GHOSTS];
        // Where this object's ghosts after the first few start in `self.more`.
        let more_from = self.more.len();
        for (at, (key, child)) in map.iter_mut().enumerate() {
            // Whether the key is a ghost (no alternative admits it), its value walked if not. One alternative
            // (the usual case) answers both from one lookup of the key.
            let ghost = match &*alternatives {
                [only] => {
                    let leaf = &schema.leaves[*only];
                    match leaf.property(key, at) {
                        Some(property) => {
                            self.child(child, &[property.schema], key, path);
                            false
                        }
                        None if leaf.closed => true,
                        None => {
                            self.child(child, leaf.additional.as_slice(), key, path);
                            false
                        }
                    }
                }
                _ if !admitted(key, at) => true,
                _ => {
                    let schemas = Few::collect(alternatives.iter().filter_map(|&c| {
                        let leaf = &schema.leaves[c];
                        leaf.property(key, at).map(|p| p.schema).or(leaf.additional)
                    }));
                    self.child(child, schemas.as_slice(), key, path);
                    false
                }
            };
            // A ghost's value is not walked: no alternative has a schema for it.
            if ghost {
                if at < 64 {
                    ghost_at |= 1 << at;
                }
                if let Some(length) = key_lengths.get_mut(found_here) {
                    *length = key.len();
                }
                // The closest declared key is for a refusal's hint: only a walk that refuses needs it, and only
                // for the ghosts a refusal lists (this one has at least `before + found_here` before it).
                let closest = if self.remove || before + found_here >= MAX_LISTED {
                    None
                } else {
                    closest(key, alternatives.iter().flat_map(|&c| schema.leaves[c].names()))
                };
                let ghost = Ghost { path: Path::Key(path, key).render(), closest };
                if found_here < FEW_GHOSTS {
                    self.ghosts.insert(before + found_here, ghost);
                } else {
                    self.more.push(ghost);
                }
                found_here += 1;
            }
        }
        if self.more.len() > more_from {
            let at = before + FEW_GHOSTS;
            self.ghosts.splice(at..at, self.more.drain(more_from..));
        }
        if !self.remove || found_here == 0 {
            return;
        }
        if found_here <= FEW_GHOSTS {
            // A few ghosts (the usual case) are removed one by one: `retain` would rebuild the map's whole hash
            // table, which costs more in time than the lookups (each removal is linear in the map's size, so
            // many ghosts take the one pass below).
            for (ghost, &length) in self.ghosts[before..before + found_here].iter().zip(&key_lengths) {
                map.shift_remove(&ghost.path[ghost.path.len() - length..]);
            }
        } else {
            let mut at = 0;
            map.retain(|key, _| {
                at += 1;
                if at <= 64 { ghost_at & (1 << (at - 1)) == 0 } else { admitted(key, at - 1) }
            });
        }
    }

    /// Walks the value of `key` (at `path`'s object) against `schemas`: containers, and numbers under float
    /// bounds; any other scalar has nothing to check.
    #[inline(always)]
    fn child(&mut self, child: &mut Value, schemas: &[NodeId], key: &str, path: &Path<'_>) {
        let scalar = !matches!(child, Value::Object(_) | Value::Array(_));
        if (scalar && !(self.float_bounds && child.is_number())) || schemas.is_empty() {
            return;
        }
        let here = Path::Key(path, key);
        if scalar {
            self.check_bounds(child, schemas, &here);
        } else {
            self.value(child, schemas, &here);
        }
    }

    fn array(&mut self, items: &mut Vec<Value>, schemas: &[NodeId], path: &Path<'_>) {
        let schema = self.schema;
        let Some(arrays) = schema.alternatives(schemas, Kind::Array) else { return };
        if arrays.is_empty() {
            return;
        }
        if arrays.iter().all(|&c| schema.leaves[c].unique_items) {
            if self.collapse_repeats {
                unique::remove_repeats(items);
            } else {
                self.check_unique(items, path);
            }
        }
        for (index, item) in items.iter_mut().enumerate() {
            let scalar = !matches!(item, Value::Object(_) | Value::Array(_));
            if scalar && !(self.float_bounds && item.is_number()) {
                continue;
            }
            let schemas = Few::collect(arrays.iter().filter_map(|&c| schema.leaves[c].item_schema(index)));
            if schemas.as_slice().is_empty() {
                continue;
            }
            let here = Path::Index(path, index);
            if scalar {
                self.check_bounds(item, schemas.as_slice(), &here);
            } else {
                self.value(item, schemas.as_slice(), &here);
            }
        }
    }

    /// Under float bounds: `value` (a number) is out of range when every numeric alternative bounds it more
    /// tightly than its canonical bounds do (the canonical bounds themselves the tool checks anyway).
    fn check_bounds(&mut self, value: &Value, schemas: &[NodeId], path: &Path<'_>) {
        let Some(n) = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)) else { return };
        let schema = self.schema;
        let Some(numeric) = schema.alternatives(schemas, Kind::Number) else { return };
        let bound = |c: &Leaf, maximum: bool| {
            let stated = if maximum { c.maximum.as_ref() } else { c.minimum.as_ref() }?;
            Some(crate::dialect::float_exact_bound(stated, maximum).unwrap_or_else(|| stated.clone()))
        };
        let within = |c: &Leaf| {
            let holds = |maximum: bool, inside: fn(i128, i128) -> bool| match bound(c, maximum) {
                Some(b) => match b.as_i64().map(i128::from).or_else(|| b.as_u64().map(i128::from)) {
                    Some(b) => inside(n, b),
                    // A bound that is not an integer (`2.5`): a float already holds it.
                    None => true,
                },
                None => true,
            };
            holds(false, |n, b| n >= b) && holds(true, |n, b| n <= b)
        };
        if numeric.is_empty() || numeric.iter().any(|&c| within(&schema.leaves[c])) {
            return;
        }
        let first = &schema.leaves[numeric[0]];
        self.out_of_range.push(OutOfRange {
            path: path.render(),
            value: value.to_string(),
            min: bound(first, false).map(|b| b.to_string()),
            max: bound(first, true).map(|b| b.to_string()),
        });
    }

    /// Finds the first repeated item ([`unique::first_repeat`]: numbers by value, members in any order).
    fn check_unique(&mut self, items: &[Value], path: &Path<'_>) {
        if let Some((_, again)) = unique::first_repeat(items) {
            let item = &items[again];
            let text = crate::canonical::to_canonical_string(item).unwrap_or_else(|_| item.to_string());
            self.duplicates.push(Duplicate { path: path.render(), item: echo::fragment(&text).into_owned() });
        }
    }
}
