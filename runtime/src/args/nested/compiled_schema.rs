//! A tool's canonical schema compiled once, when the dispatcher is built: every place the walk can reach,
//! its alternatives (`$ref`s followed, `anyOf`/`oneOf` flattened) and what the walk reads from each.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

/// How many `$ref`s may be followed without descending into the value: a cycle of references alone
/// constrains nothing.
const MAX_REFERENCE_HOPS: usize = 32;
/// The most steps finding one schema's alternatives may take (see [`expand`]).
const MAX_EXPANSION_STEPS: usize = 4096;

/// A place in a schema (any JSON value where the walk reads a schema), by index into the compiled nodes.
pub(super) type NodeId = usize;
/// An alternative (a schema object the walk reads keywords from), by index into the compiled leaves.
pub(super) type LeafId = usize;

/// The root of every compiled schema.
pub(super) const ROOT: NodeId = 0;

/// A tool's canonical schema compiled once, when the dispatcher is built, for the walk: every place the
/// walk can reach, with what it reads there (the alternatives a place stands for, declared keys sorted for
/// lookup, tags, `uniqueItems`, bounds) as typed data. Screening a call then looks nothing up in the
/// schema's JSON and follows no `$ref`: the answers are the ones the walk over the JSON gave, computed once.
#[derive(Debug)]
pub(crate) struct CompiledSchema {
    nodes: Vec<Node>,
    pub(super) leaves: Vec<Leaf>,
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
pub(super) enum Kind {
    Object,
    Array,
    Number,
}

/// What the walk reads from one alternative.
#[derive(Debug)]
pub(super) struct Leaf {
    /// `properties`, in declaration order: the order a model usually sends them in, and the order "did you
    /// mean" candidates are tried in.
    properties: Box<[Property]>,
    /// Indices into `properties`, sorted by name (binary search).
    sorted: Box<[u32]>,
    /// `additionalProperties: false`.
    pub(super) closed: bool,
    /// `additionalProperties` as a schema: the values of keys beyond `properties`.
    pub(super) additional: Option<NodeId>,
    /// `required`, its string entries.
    required: Box<[Box<str>]>,
    /// `uniqueItems: true`.
    pub(super) unique_items: bool,
    /// `prefixItems`, each position's schema.
    prefix_items: Box<[NodeId]>,
    /// `items` as a schema.
    items: Option<NodeId>,
    /// `minimum` and `maximum` as stated.
    pub(super) minimum: Option<Value>,
    pub(super) maximum: Option<Value>,
}

#[derive(Debug)]
pub(super) struct Property {
    name: Box<str>,
    pub(super) schema: NodeId,
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
    ///
    /// `#[inline]`: the walk calls it for every key it reads, from another module (`walk.rs`), so without
    /// the hint it can land in another codegen unit and be called out of line (+~0.5 k instructions per
    /// allowed call in `scripts/instruction_budget.py`, measured when `nested.rs` was split).
    ///
    /// The key at its hint is compared inline ([`same_name`](crate::args::same_name)), without a call to `memcmp`; only a key sent out
    /// of order is searched for, out of line.
    #[inline(always)]
    pub(super) fn property(&self, key: &str, hint: usize) -> Option<&Property> {
        if let Some(property) = self.properties.get(hint)
            && crate::args::same_name(&property.name, key)
        {
            return Some(property);
        }
        self.search(key)
    }

    /// The property `key`, by binary search over the sorted names.
    #[inline(never)]
    fn search(&self, key: &str) -> Option<&Property> {
        let at = self.sorted.binary_search_by(|&at| (*self.properties[at as usize].name).cmp(key)).ok()?;
        Some(&self.properties[self.sorted[at] as usize])
    }

    /// Whether `key` (sent at position `hint`) may be sent here: declared, or the object is open.
    pub(super) fn admits(&self, key: &str, hint: usize) -> bool {
        !self.closed || self.property(key, hint).is_some()
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.properties.iter().map(|p| &*p.name)
    }

    pub(super) fn item_schema(&self, index: usize) -> Option<NodeId> {
        self.prefix_items.get(index).copied().or(self.items)
    }

    /// Whether `value` can be an instance of this alternative: its required keys are present and its tags
    /// (`const` or `enum` properties) agree.
    pub(super) fn fits(&self, value: &Map<String, Value>) -> bool {
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
    /// them is open. Borrowed for one schema, the common case (answered inline; several are gathered out of
    /// line).
    #[inline]
    pub(super) fn alternatives(&self, schemas: &[NodeId], kind: Kind) -> Option<Cow<'_, [LeafId]>> {
        match schemas {
            [only] => self.of_kind(*only, kind).map(Cow::Borrowed),
            several => self.gathered(several, kind),
        }
    }

    /// The alternatives of `kind` that the place `id` stands for; `None` when one of them is open.
    #[inline(always)]
    fn of_kind(&self, id: NodeId, kind: Kind) -> Option<&[LeafId]> {
        let alternatives = self.nodes[id].alternatives.as_ref()?;
        Some(match kind {
            Kind::Object => &alternatives.objects,
            Kind::Array => &alternatives.arrays,
            Kind::Number => &alternatives.numbers,
        })
    }

    /// [`alternatives`](Self::alternatives) of several places, gathered.
    #[inline(never)]
    fn gathered(&self, schemas: &[NodeId], kind: Kind) -> Option<Cow<'_, [LeafId]>> {
        let mut all = Vec::new();
        for &id in schemas {
            all.extend_from_slice(self.of_kind(id, kind)?);
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
