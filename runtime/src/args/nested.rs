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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::dialect::Dialect;
use crate::echo;

/// How many `$ref`s may be followed without descending into the value: a cycle of references alone
/// constrains nothing.
const MAX_REFERENCE_HOPS: usize = 32;
/// The most steps finding one schema's alternatives may take (see [`expand`]).
const MAX_EXPANSION_STEPS: usize = 4096;

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

/// A place in a schema (any JSON value where the walk reads a schema), by index into the compiled nodes.
type NodeId = usize;
/// An alternative (a schema object the walk reads keywords from), by index into the compiled leaves.
type LeafId = usize;

/// The root of every compiled schema.
const ROOT: NodeId = 0;

/// A tool's canonical schema compiled once, when the dispatcher is built, for the walk: every place the
/// walk can reach, with what it reads there (the alternatives a place stands for, declared keys sorted for
/// lookup, tags, `uniqueItems`, bounds) as typed data. Screening a call then looks nothing up in the
/// schema's JSON and follows no `$ref`: the answers are the ones the walk over the JSON gave, computed once.
#[derive(Debug)]
pub(crate) struct CompiledSchema {
    nodes: Vec<Node>,
    leaves: Vec<Leaf>,
}

/// One place: the alternatives its schema stands for (`$ref`s followed, `anyOf`/`oneOf` flattened), split
/// by the kinds of value each allows. `None`: some alternative accepts anything here, or the schema says
/// something the walk does not model; nothing below it is screened.
#[derive(Debug)]
struct Node {
    alternatives: Option<Alternatives>,
}

#[derive(Debug, Default)]
struct Alternatives {
    objects: Box<[LeafId]>,
    arrays: Box<[LeafId]>,
    numbers: Box<[LeafId]>,
}

/// The kind of value an alternative is looked up for.
#[derive(Clone, Copy)]
enum Kind {
    Object,
    Array,
    Number,
}

/// What the walk reads from one alternative.
#[derive(Debug)]
struct Leaf {
    /// `properties`, in declaration order: the order a model usually sends them in, and the order "did you
    /// mean" candidates are tried in.
    properties: Box<[Property]>,
    /// Indices into `properties`, sorted by name (binary search).
    sorted: Box<[u32]>,
    /// `additionalProperties: false`.
    closed: bool,
    /// `additionalProperties` as a schema: the values of keys beyond `properties`.
    additional: Option<NodeId>,
    /// `required`, its string entries.
    required: Box<[Box<str>]>,
    /// `uniqueItems: true`.
    unique_items: bool,
    /// `prefixItems`, each position's schema.
    prefix_items: Box<[NodeId]>,
    /// `items` as a schema.
    items: Option<NodeId>,
    /// `minimum` and `maximum` as stated.
    minimum: Option<Value>,
    maximum: Option<Value>,
}

#[derive(Debug)]
struct Property {
    name: Box<str>,
    schema: NodeId,
    /// Its `const` or `enum` (after its `$ref`s): what an alternative's tag must equal to fit.
    tag: Tag,
}

#[derive(Debug)]
enum Tag {
    None,
    Const(Value),
    Enum(Box<[Value]>),
}

impl Leaf {
    /// The property `key`, looked for first at `hint` (where the key was sent: in declaration order, one
    /// comparison finds it), then by binary search.
    fn property(&self, key: &str, hint: usize) -> Option<&Property> {
        if let Some(property) = self.properties.get(hint)
            && *property.name == *key
        {
            return Some(property);
        }
        let at = self.sorted.binary_search_by(|&at| (*self.properties[at as usize].name).cmp(key)).ok()?;
        Some(&self.properties[self.sorted[at] as usize])
    }

    /// Whether `key` (sent at position `hint`) may be sent here: declared, or the object is open.
    fn admits(&self, key: &str, hint: usize) -> bool {
        !self.closed || self.property(key, hint).is_some()
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.properties.iter().map(|p| &*p.name)
    }

    fn item_schema(&self, index: usize) -> Option<NodeId> {
        self.prefix_items.get(index).copied().or(self.items)
    }

    /// Whether `value` can be an instance of this alternative: its required keys are present and its tags
    /// (`const` or `enum` properties) agree.
    fn fits(&self, value: &Map<String, Value>) -> bool {
        if self.required.iter().any(|key| !value.contains_key(&**key)) {
            return false;
        }
        value.iter().enumerate().all(|(at, (key, given))| match self.property(key, at).map(|p| &p.tag) {
            None | Some(Tag::None) => true,
            Some(Tag::Const(constant)) => constant == given,
            Some(Tag::Enum(values)) => values.contains(given),
        })
    }
}

impl CompiledSchema {
    /// Compiles the canonical schema `root` (where `$ref`s resolve).
    pub(crate) fn compile(root: &Value) -> CompiledSchema {
        let mut compiler = Compiler {
            root,
            nodes: Vec::new(),
            node_of: HashMap::new(),
            node_queue: Vec::new(),
            leaves: Vec::new(),
            leaf_of: HashMap::new(),
            leaf_queue: Vec::new(),
        };
        let root_id = compiler.node(root);
        debug_assert_eq!(root_id, ROOT);
        loop {
            if let Some((id, schema)) = compiler.node_queue.pop() {
                compiler.nodes[id] = Some(compiler.compile_node(schema));
            } else if let Some((id, schema)) = compiler.leaf_queue.pop() {
                compiler.leaves[id] = Some(compiler.compile_leaf(schema));
            } else {
                break;
            }
        }
        CompiledSchema {
            nodes: compiler.nodes.into_iter().map(|node| node.expect("every queued node is compiled")).collect(),
            leaves: compiler.leaves.into_iter().map(|leaf| leaf.expect("every queued leaf is compiled")).collect(),
        }
    }

    /// The alternatives of `kind` that `schemas` (any of which may apply) stand for; `None` when one of
    /// them is open. Borrowed for one schema, the common case.
    fn alternatives(&self, schemas: &[NodeId], kind: Kind) -> Option<Cow<'_, [LeafId]>> {
        let pick = |id: NodeId| -> Option<&[LeafId]> {
            let alternatives = self.nodes[id].alternatives.as_ref()?;
            Some(match kind {
                Kind::Object => &alternatives.objects,
                Kind::Array => &alternatives.arrays,
                Kind::Number => &alternatives.numbers,
            })
        };
        if let [only] = schemas {
            return pick(*only).map(Cow::Borrowed);
        }
        let mut all = Vec::new();
        for &id in schemas {
            all.extend_from_slice(pick(id)?);
        }
        Some(Cow::Owned(all))
    }
}

/// Builds a [`CompiledSchema`]: every schema value reached is compiled once (they are told apart by
/// address, so a `$ref` cycle ends), its alternatives found with the rules the walk always used.
struct Compiler<'s> {
    root: &'s Value,
    nodes: Vec<Option<Node>>,
    node_of: HashMap<*const Value, NodeId>,
    node_queue: Vec<(NodeId, &'s Value)>,
    leaves: Vec<Option<Leaf>>,
    leaf_of: HashMap<*const Map<String, Value>, LeafId>,
    leaf_queue: Vec<(LeafId, &'s Map<String, Value>)>,
}

impl<'s> Compiler<'s> {
    fn node(&mut self, schema: &'s Value) -> NodeId {
        *self.node_of.entry(std::ptr::from_ref(schema)).or_insert_with(|| {
            self.nodes.push(None);
            self.node_queue.push((self.nodes.len() - 1, schema));
            self.nodes.len() - 1
        })
    }

    fn leaf(&mut self, schema: &'s Map<String, Value>) -> LeafId {
        *self.leaf_of.entry(std::ptr::from_ref(schema)).or_insert_with(|| {
            self.leaves.push(None);
            self.leaf_queue.push((self.leaves.len() - 1, schema));
            self.leaves.len() - 1
        })
    }

    fn compile_node(&mut self, schema: &'s Value) -> Node {
        let mut found = Vec::new();
        let mut budget = MAX_EXPANSION_STEPS;
        if !expand(schema, self.root, 0, &mut budget, &mut found) {
            return Node { alternatives: None };
        }
        let mut alternatives = Alternatives::default();
        let mut of_kind = |kind: fn(&Map<String, Value>) -> bool| -> Box<[LeafId]> {
            found.iter().copied().filter(|c| kind(c)).map(|c| self.leaf(c)).collect()
        };
        alternatives.objects = of_kind(|c| may_be(c, "object"));
        alternatives.arrays = of_kind(|c| may_be(c, "array"));
        alternatives.numbers = of_kind(|c| may_be(c, "integer") || may_be(c, "number"));
        Node { alternatives: Some(alternatives) }
    }

    fn compile_leaf(&mut self, schema: &'s Map<String, Value>) -> Leaf {
        let declared_properties = schema.get("properties").and_then(Value::as_object);
        let properties: Box<[Property]> = declared_properties
            .into_iter()
            .flatten()
            .map(|(name, declared)| Property {
                name: name.as_str().into(),
                schema: self.node(declared),
                tag: self.tag(declared),
            })
            .collect();
        let mut sorted: Vec<u32> = (0..u32::try_from(properties.len()).expect("fewer than 2^32 properties")).collect();
        sorted.sort_by(|&a, &b| properties[a as usize].name.cmp(&properties[b as usize].name));
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(Box::from)
            .collect();
        let additional = schema.get("additionalProperties").filter(|a| a.is_object()).map(|a| self.node(a));
        let prefix_items = schema
            .get("prefixItems")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|position| self.node(position))
            .collect();
        let items = schema.get("items").filter(|items| items.is_object()).map(|items| self.node(items));
        Leaf {
            properties,
            sorted: sorted.into(),
            closed: schema.get("additionalProperties") == Some(&Value::Bool(false)),
            additional,
            required,
            unique_items: schema.get("uniqueItems") == Some(&Value::Bool(true)),
            prefix_items,
            items,
            minimum: schema.get("minimum").cloned(),
            maximum: schema.get("maximum").cloned(),
        }
    }

    /// The `const` or `enum` of a declared property, after following its `$ref`s.
    fn tag(&self, declared: &'s Value) -> Tag {
        let mut resolved = declared;
        for _ in 0..MAX_REFERENCE_HOPS {
            match resolved.get("$ref").and_then(Value::as_str).and_then(|r| resolve(r, self.root)) {
                Some(target) => resolved = target,
                None => break,
            }
        }
        match (resolved.get("const"), resolved.get("enum").and_then(Value::as_array)) {
            (Some(constant), _) => Tag::Const(constant.clone()),
            (None, Some(values)) => Tag::Enum(values.clone().into()),
            (None, None) => Tag::None,
        }
    }
}

/// Adds the alternatives `schema` stands for to `out`; `false` when one of them is open, or when finding
/// them takes more than `budget` steps (a schema whose `$ref`s fan out into `anyOf`s of `anyOf`s stands for
/// exponentially many: read as open, its keys are not screened here, and the validator still checks it).
fn expand<'s>(
    schema: &'s Value,
    root: &'s Value,
    hops: usize,
    budget: &mut usize,
    out: &mut Vec<&'s Map<String, Value>>,
) -> bool {
    let Some(left) = budget.checked_sub(1) else { return false };
    *budget = left;
    let map = match schema {
        Value::Object(map) => map,
        Value::Bool(accepts) => return !accepts,
        _ => return false,
    };
    if let Some(reference) = map.get("$ref") {
        if hops >= MAX_REFERENCE_HOPS {
            return false;
        }
        let target = reference.as_str().and_then(|r| resolve(r, root));
        return target.is_some_and(|target| expand(target, root, hops + 1, budget, out));
    }
    if map.contains_key("allOf") || map.contains_key("patternProperties") {
        return false;
    }
    let alternatives = map.get("anyOf").or_else(|| map.get("oneOf"));
    match alternatives {
        Some(_) if map.contains_key("properties") => false,
        Some(Value::Array(branches)) => branches.iter().all(|branch| expand(branch, root, hops + 1, budget, out)),
        Some(_) => false,
        None => {
            out.push(map);
            true
        }
    }
}

/// Where a value is in the arguments, built only when a finding names it: each level borrows its key or
/// index from the walk's own stack, so a call that passes builds no path string.
#[derive(Clone, Copy)]
pub(crate) enum Path<'p> {
    /// The top level.
    Root,
    /// The value of `key` in the object at the parent path.
    Key(&'p Path<'p>, &'p str),
    /// Item `index` of the array at the parent path.
    Index(&'p Path<'p>, usize),
}

impl Path<'_> {
    /// `address.zipcode`, `items[2].zipcode`, or just the key at the top level.
    pub(crate) fn render(&self) -> String {
        let mut out = String::with_capacity(self.len());
        self.write(&mut out);
        out
    }

    /// The rendered length in bytes (possibly an overestimate by a dot).
    fn len(&self) -> usize {
        match self {
            Path::Root => 0,
            Path::Key(parent, key) => parent.len() + 1 + key.len(),
            // `[`, up to 20 digits, `]`.
            Path::Index(parent, _) => parent.len() + 22,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, index) => {
                parent.write(out);
                let _ = write!(out, "[{index}]");
            }
        }
    }
}

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
        // Where the ghosts are, for removing them without looking each key up again (the first 64 keys;
        // past those, each is looked up again).
        let mut ghost_at = 0_u64;
        for (at, key) in map.keys().enumerate() {
            if !admitted(key, at) {
                if at < 64 {
                    ghost_at |= 1 << at;
                }
                // The closest declared key is for a refusal's hint: only a walk that refuses needs it.
                let closest = if self.remove {
                    None
                } else {
                    closest(key, alternatives.iter().flat_map(|&c| schema.leaves[c].names()))
                };
                self.ghosts.push(Ghost { path: Path::Key(path, key).render(), closest });
            }
        }
        if self.remove && self.ghosts.len() > before {
            let mut at = 0;
            map.retain(|key, _| {
                at += 1;
                if at <= 64 { ghost_at & (1 << (at - 1)) == 0 } else { admitted(key, at - 1) }
            });
        }
        self.children(map, &alternatives, path);
    }

    /// Walks each value with the schemas its key has among `alternatives`.
    fn children(&mut self, map: &mut Map<String, Value>, alternatives: &[LeafId], path: &Path<'_>) {
        let schema = self.schema;
        for (at, (key, child)) in map.iter_mut().enumerate() {
            let scalar = !matches!(child, Value::Object(_) | Value::Array(_));
            if scalar && !(self.float_bounds && child.is_number()) {
                continue;
            }
            let schemas = Few::collect(alternatives.iter().filter_map(|&c| {
                let leaf = &schema.leaves[c];
                leaf.property(key, at).map(|p| p.schema).or(leaf.additional)
            }));
            if schemas.as_slice().is_empty() {
                continue;
            }
            let here = Path::Key(path, key);
            if scalar {
                self.check_bounds(child, schemas.as_slice(), &here);
            } else {
                self.value(child, schemas.as_slice(), &here);
            }
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

    /// Finds the first repeated item, comparing canonical JSON (so key order does not matter).
    fn check_unique(&mut self, items: &[Value], path: &Path<'_>) {
        let mut seen = HashSet::with_capacity(items.len());
        for item in items {
            let text = crate::canonical::to_canonical_string(item).unwrap_or_else(|_| item.to_string());
            if !seen.insert(text.clone()) {
                self.duplicates.push(Duplicate { path: path.render(), item: echo::fragment(&text).into_owned() });
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn walk(schema: Value, value: Value) -> (Value, Vec<String>, Vec<(String, String)>) {
        let root = json!({"type": "object", "properties": {"x": schema.clone()}, "$defs": {
            "Node": {"type": "object", "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}, "additionalProperties": false}
        }});
        // The value is walked as the top level's `x`: the root leaves other keys open, so only what the
        // schema of `x` says is screened, at paths that start with `x`.
        let compiled = CompiledSchema::compile(&root);
        let mut arguments = Map::new();
        arguments.insert("x".to_owned(), value);
        let mut w = Walk::new(&compiled, true);
        w.arguments(&mut arguments);
        let value = arguments.remove("x").expect("the walk keeps a declared key");
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
    fn a_schema_of_exponentially_many_alternatives_is_compiled_in_bounded_steps_and_read_as_open() {
        // `d0` stands for 2^40 alternatives (each level an `anyOf` of the next, twice): read as open, so
        // its keys are left to the validator, and compiling takes a bounded number of steps.
        let mut defs = serde_json::Map::new();
        for level in 0..40 {
            let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
            defs.insert(format!("d{level}"), json!({"anyOf": [next.clone(), next]}));
        }
        defs.insert("d40".into(), closed(json!({"a": {"type": "integer"}})));
        let root = json!({
            "type": "object",
            "properties": {"fan": {"$ref": "#/$defs/d0"}, "b": {"type": "integer"}},
            "additionalProperties": false,
            "$defs": defs
        });
        let compiled = CompiledSchema::compile(&root);
        let Value::Object(mut arguments) = json!({"fan": {"a": 1, "ghost": 2}, "b": 1, "ghost": 3}) else {
            unreachable!()
        };
        let mut w = Walk::new(&compiled, true);
        w.arguments(&mut arguments);
        let ghosts: Vec<_> = w.ghosts.iter().map(|g| g.path.clone()).collect();
        assert_eq!(ghosts, ["ghost"]);
        let value = Value::Object(arguments);
        assert_eq!(value, json!({"fan": {"a": 1, "ghost": 2}, "b": 1}));
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
    fn keys_out_of_order_and_past_the_64th_are_screened_alike() {
        // 70 declared keys sent in reverse (no key at its declared position), ghosts among the first 64
        // positions and past them.
        let declared: Map<String, Value> = (0..70).map(|i| (format!("p{i}"), json!({"type": "integer"}))).collect();
        let mut sent: Vec<(String, Value)> = (0..70).rev().map(|i| (format!("p{i}"), json!(i))).collect();
        sent.insert(0, ("ghost_first".to_owned(), json!(1)));
        sent.insert(40, ("ghost_middle".to_owned(), json!(2)));
        sent.push(("ghost_last".to_owned(), json!(3)));
        let value = Value::Object(sent.into_iter().collect());
        let (value, ghosts, _) = walk(closed(Value::Object(declared)), value);
        assert_eq!(ghosts, ["x.ghost_first", "x.ghost_middle", "x.ghost_last"]);
        let kept: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        let expected: Vec<String> = (0..70).rev().map(|i| format!("p{i}")).collect();
        assert_eq!(kept, expected, "every declared key is kept, in the order sent");
    }

    #[test]
    fn only_a_refusing_walk_suggests_a_key() {
        let root = closed(
            json!({"zip": {"type": "string"}, "items": {"type": "array", "items": closed(json!({"n": {"type": "integer"}}))}}),
        );
        let compiled = CompiledSchema::compile(&root);
        let arguments = || json!({"zipcode": "1", "items": [{"n": 1}, {"n": 2, "m": 3}]}).as_object().cloned().unwrap();
        let mut blocking = Walk::new(&compiled, false);
        let mut kept = arguments();
        blocking.arguments(&mut kept);
        let found: Vec<(&str, Option<&str>)> =
            blocking.ghosts.iter().map(|g| (g.path.as_str(), g.closest.as_deref())).collect();
        assert_eq!(found, [("zipcode", Some("zip")), ("items[1].m", Some("n"))]);
        assert_eq!(kept, arguments(), "a refusing walk leaves the arguments as sent");
        let mut stripping = Walk::new(&compiled, true);
        let mut stripped = arguments();
        stripping.arguments(&mut stripped);
        let found: Vec<(&str, Option<&str>)> =
            stripping.ghosts.iter().map(|g| (g.path.as_str(), g.closest.as_deref())).collect();
        assert_eq!(found, [("zipcode", None), ("items[1].m", None)]);
        assert_eq!(Value::Object(stripped), json!({"items": [{"n": 1}, {"n": 2}]}));
    }

    #[test]
    fn suggests_the_closest_declared_key() {
        assert_eq!(closest("zipcode", ["zip", "street"]), Some("zip".to_owned()));
        assert_eq!(closest("stret", ["zip", "street"]), Some("street".to_owned()));
        assert_eq!(closest("colour", ["zip", "street"]), None);
        assert_eq!(closest("q", ["zip"]), None);
    }
}
