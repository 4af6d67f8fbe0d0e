//! The schema tells the truth in every dialect: for every corpus tool and every dialect (the canonical
//! schema, MCP, Anthropic, OpenAI strict, Gemini), arguments generated at random from that dialect's schema
//! (as the provider's SDK holds it: Gemini's stores `minimum`/`maximum` as floats) and sent as a call in
//! that dialect are admitted exactly when an independent JSON Schema validator (the `jsonschema` crate)
//! says they are valid under **that dialect's** schema, and schema-invalid mutations (a wrong type, an
//! integer out of range, an unknown nested key, a repeated set item, a missing required key) are refused, or
//! stripped and reported. One difference is by design and checked as such: OpenAI strict mode lists every
//! property in `required`, and the runtime reads an absent optional argument as its `null`.

use crate::corpus;
use crate::schema_node;

use std::sync::OnceLock;

use agent_airlock::{CallContext, Dispatcher, Status, ToolCall, ToolDefinition, ToolMessage, dialect::Dialect};
use agent_airlock_tests::block_on;
use proptest::prelude::*;
use schema_node::SchemaNode;
use serde_json::{Map, Value, json};

/// A small deterministic generator (SplitMix64): proptest chooses the seed, the schema walk the rest.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }

    /// Uniform in `min..=max`.
    fn between(&mut self, min: i128, max: i128) -> i128 {
        let span = (max - min) as u128 + 1;
        let draw = (u128::from(self.next()) << 64 | u128::from(self.next())) % span;
        min + draw as i128
    }
}

/// A change that makes arguments schema-invalid, applied at the `target`-th place it fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    WrongType,
    OutOfRange,
    UnknownKey,
    DuplicateItem,
    MissingRequired,
}

const MUTATIONS: [Mutation; 5] = [
    Mutation::WrongType,
    Mutation::OutOfRange,
    Mutation::UnknownKey,
    Mutation::DuplicateItem,
    Mutation::MissingRequired,
];

/// The key no corpus type declares.
const GHOST: &str = "zz_ghost";

struct Generator<'a> {
    root: &'a Value,
    rng: Rng,
    mutation: Option<Mutation>,
    /// Places the mutation fits, seen so far; it is applied at the `target`-th.
    seen: usize,
    target: usize,
    applied: bool,
}

impl Generator<'_> {
    /// Whether this place gets the mutation `kind`.
    fn mutate_here(&mut self, kind: Mutation) -> bool {
        if self.applied || self.mutation != Some(kind) {
            return false;
        }
        self.seen += 1;
        self.applied = self.seen > self.target;
        self.applied
    }

    fn value(&mut self, schema: &Value, depth: usize) -> Value {
        let Some(node) = SchemaNode::of(schema, self.root) else {
            return self.any_json(depth);
        };
        let map = node.map;
        // Deep in a recursive type, stop where the schema lets the model stop.
        if node.null_allowed && (self.rng.chance(4) || depth > 5) {
            return Value::Null;
        }
        if let Some(value) = map.get("const") {
            return value.clone();
        }
        if let Some(values) = map.get("enum").and_then(Value::as_array) {
            let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
            return values.get(self.rng.below(values.len())).map_or(Value::Null, |v| (*v).clone());
        }
        let non_null = node.non_null_branches();
        if !non_null.is_empty() {
            let branch = non_null[self.rng.below(non_null.len())];
            return self.value(branch, depth);
        }
        let kind = node.kind();
        if matches!(kind, Some("string" | "integer" | "number" | "boolean")) && self.mutate_here(Mutation::WrongType) {
            return match kind {
                Some("string") => json!(5),
                Some("boolean") => json!("true"),
                _ => json!("5"),
            };
        }
        match kind {
            Some("string") => self.string(map),
            Some("integer") => self.integer(map),
            Some("number") => {
                let choices = [json!(0), json!(3), json!(2.5), json!(-1e6), json!(123456.789), json!(1e-7)];
                choices[self.rng.below(choices.len())].clone()
            }
            Some("boolean") => json!(self.rng.chance(2)),
            Some("array") => self.array(map, depth),
            Some("object") => self.object(map, depth),
            None if map.contains_key("properties") => self.object(map, depth),
            _ => self.any_json(depth),
        }
    }

    fn string(&mut self, map: &Map<String, Value>) -> Value {
        let described = map.get("description").and_then(Value::as_str).unwrap_or_default();
        let format = map.get("format").and_then(Value::as_str).unwrap_or_default();
        if format == "date-time" || described.contains("Format: date-time") || described.contains("RFC 3339") {
            let (month, day, hour) = (1 + self.rng.below(12), 10 + self.rng.below(18), 10 + self.rng.below(13));
            return json!(format!("2024-{month:02}-{day}T{hour}:00:00Z"));
        }
        let min = map.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = map.get("maxLength").and_then(Value::as_u64).map_or(12, |m| m as usize).min(min + 12);
        let length = min + self.rng.below(max - min + 1);
        // The corpus has one pattern, `^[a-z]+$`; any other string may hold anything.
        let alphabet: Vec<char> = if map.contains_key("pattern") {
            ('a'..='z').collect()
        } else {
            "aZ9 _-.\"\\\n\té😀`".chars().collect()
        };
        json!((0..length).map(|_| alphabet[self.rng.below(alphabet.len())]).collect::<String>())
    }

    fn integer(&mut self, map: &Map<String, Value>) -> Value {
        // A bound a float holds (as Gemini's SDK stores it) counts when it is a whole number.
        let bound = |key: &str| {
            map.get(key).and_then(|n| {
                n.as_i64()
                    .map(i128::from)
                    .or(n.as_u64().map(i128::from))
                    .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e30).map(|f| f as i128))
            })
        };
        let (min, max) = (bound("minimum"), bound("maximum"));
        if (min.is_some() || max.is_some()) && self.mutate_here(Mutation::OutOfRange) {
            let below = min.filter(|_| max.is_none() || self.rng.chance(2));
            return match (below, max) {
                // Past what JSON integers hold exactly, a float well beyond the bound (`min - 1` would round
                // back to the bound itself).
                (Some(min), _) => i64::try_from(min - 1).map_or_else(|_| json!(min as f64 * 2.0), Value::from),
                (None, Some(max)) => exact(max + 1).unwrap_or_else(|| json!(max as f64 * 2.0)),
                (None, None) => json!(0),
            };
        }
        // Without bounds, any integer JSON can hold exactly.
        let (min, max) = (min.unwrap_or(i128::from(i64::MIN)), max.unwrap_or(i128::from(u64::MAX)));
        let picked = match self.rng.below(5) {
            0 => min,
            1 => max,
            2 => 0.clamp(min, max),
            _ => self.rng.between(min, max),
        };
        number(picked)
    }

    fn array(&mut self, map: &Map<String, Value>, depth: usize) -> Value {
        if let Some(prefix) = map.get("prefixItems").and_then(Value::as_array) {
            return prefix.iter().map(|p| self.value(p, depth + 1)).collect();
        }
        let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = map.get("maxItems").and_then(Value::as_u64).map_or(3, |m| m as usize).min(min + 3);
        let count = if depth > 4 { min } else { min + self.rng.below(max - min + 1) };
        let items = map.get("items").cloned().unwrap_or(json!({}));
        let unique = map.get("uniqueItems") == Some(&json!(true));
        let mut out: Vec<Value> = Vec::with_capacity(count);
        for _ in 0..count * 4 {
            if out.len() == count {
                break;
            }
            let item = self.value(&items, depth + 1);
            if !(unique && out.contains(&item)) {
                out.push(item);
            }
        }
        if unique && self.mutate_here(Mutation::DuplicateItem) {
            if out.is_empty() {
                out.push(self.value(&items, depth + 1));
            }
            out.push(out[0].clone());
        }
        Value::Array(out)
    }

    fn object(&mut self, map: &Map<String, Value>, depth: usize) -> Value {
        let required: Vec<&str> =
            map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let mut dropped = None;
        if !required.is_empty() && self.mutate_here(Mutation::MissingRequired) {
            dropped = Some(required[self.rng.below(required.len())]);
        }
        let mut out = Map::new();
        if let Some(properties) = map.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                if Some(name.as_str()) == dropped || (!required.contains(&name.as_str()) && self.rng.chance(3)) {
                    continue;
                }
                out.insert(name.clone(), self.value(property, depth + 1));
            }
        }
        if let Some(values) = map.get("additionalProperties").filter(|a| a.is_object()) {
            for i in 0..self.rng.below(3) {
                out.insert(format!("key {i}\n"), self.value(values, depth + 1));
            }
        }
        let closed =
            map.get("additionalProperties") == Some(&json!(false)) || !map.contains_key("additionalProperties");
        if closed && self.mutate_here(Mutation::UnknownKey) {
            out.insert(GHOST.to_owned(), json!(1));
        }
        Value::Object(out)
    }

    fn any_json(&mut self, depth: usize) -> Value {
        match self.rng.below(if depth > 3 { 3 } else { 5 }) {
            0 => Value::Null,
            1 => json!(self.rng.below(100)),
            2 => json!("text"),
            3 => json!([self.any_json(depth + 1)]),
            _ => json!({"k": self.any_json(depth + 1)}),
        }
    }
}

fn number(n: i128) -> Value {
    exact(n).unwrap_or_else(|| json!(n as f64))
}

/// `n` as a JSON integer, if it fits one.
fn exact(n: i128) -> Option<Value> {
    i64::try_from(n).map(Value::from).or_else(|_| u64::try_from(n).map(Value::from)).ok()
}

/// The arguments schema inside a definition in `dialect`'s request shape.
pub(crate) fn arguments_schema(definition: &ToolDefinition, dialect: Dialect) -> Option<Value> {
    let converted = definition.to_dialect(dialect).ok()?;
    Some(match dialect {
        Dialect::OpenAi => converted["function"]["parameters"].clone(),
        Dialect::Gemini => sdk_floats(converted.get("parameters").cloned().unwrap_or(json!({"type": "object"}))),
        Dialect::Anthropic => converted["input_schema"].clone(),
        _ => converted["inputSchema"].clone(),
    })
}

/// The schema as Gemini's SDK holds it: `minimum` and `maximum` are floats there (`Schema.minimum:
/// float`), so an integer bound comes back as the nearest `f64` (written as a JSON integer when it is a
/// whole number, so the oracle compares exactly).
fn sdk_floats(schema: Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| match (key.as_str(), value.as_f64()) {
                    ("minimum" | "maximum", Some(float)) => {
                        let whole = (float.fract() == 0.0).then_some(float as i128);
                        (key, whole.and_then(exact).unwrap_or_else(|| json!(float)))
                    }
                    _ => (key, sdk_floats(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(sdk_floats).collect()),
        other => other,
    }
}

/// An OpenAPI 3.0 schema (Gemini's) as the JSON Schema it means, for the oracle: `nullable: true` adds
/// `null` to the `type` (and to the `enum`). Objects stay open where Gemini leaves them so (it has no
/// `additionalProperties`).
pub(crate) fn openapi_to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: Map<String, Value> =
                map.iter().map(|(key, value)| (key.clone(), openapi_to_json_schema(value))).collect();
            if out.remove("nullable") == Some(Value::Bool(true)) {
                if let Some(Value::String(t)) = out.get("type").cloned() {
                    out.insert("type".into(), json!([t, "null"]));
                }
                if let Some(Value::Array(values)) = out.get_mut("enum") {
                    values.push(Value::Null);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(openapi_to_json_schema).collect()),
        other => other.clone(),
    }
}

/// `schema` without `uniqueItems` anywhere.
fn without_unique_items(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, value)| !(key.as_str() == "uniqueItems" && value.is_boolean()))
                .map(|(key, value)| (key.clone(), without_unique_items(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_unique_items).collect()),
        other => other.clone(),
    }
}

/// One dialect's schema of one tool: what the model sees, and the oracle of what it says.
struct Offered {
    /// `None` for the canonical schema, sent as a call without a dialect.
    dialect: Option<Dialect>,
    schema: Value,
    oracle: jsonschema::Validator,
}

impl Offered {
    fn label(&self) -> &'static str {
        self.dialect.map_or("canonical", Dialect::name)
    }
}

struct Case {
    definition: ToolDefinition,
    /// The independent validator of the canonical schema.
    oracle: jsonschema::Validator,
    /// The canonical schema as a call in a dialect that cannot say `uniqueItems` is held to: a repeated set
    /// item counts once there.
    without_sets: jsonschema::Validator,
    offered: Vec<Offered>,
}

fn validator(schema: &Value, what: &str) -> jsonschema::Validator {
    jsonschema::draft202012::new(schema).unwrap_or_else(|err| panic!("{what} is not a valid schema: {err}"))
}

fn cases() -> &'static (Dispatcher, Vec<Case>) {
    static CASES: OnceLock<(Dispatcher, Vec<Case>)> = OnceLock::new();
    CASES.get_or_init(|| {
        let cases = corpus::definitions()
            .into_iter()
            .map(|definition| {
                let name = &definition.name;
                let oracle = validator(&definition.input_schema, &format!("`{name}`'s canonical schema"));
                let without_sets =
                    validator(&without_unique_items(&definition.input_schema), &format!("`{name}` without sets"));
                let mut offered = vec![Offered {
                    dialect: None,
                    schema: definition.input_schema.clone(),
                    oracle: validator(&definition.input_schema, name),
                }];
                for dialect in [Dialect::Mcp, Dialect::Anthropic, Dialect::OpenAi, Dialect::Gemini] {
                    let Some(schema) = arguments_schema(&definition, dialect) else { continue };
                    let meaning =
                        if dialect == Dialect::Gemini { openapi_to_json_schema(&schema) } else { schema.clone() };
                    let oracle = validator(&meaning, &format!("`{name}`'s {dialect} schema"));
                    offered.push(Offered { dialect: Some(dialect), schema, oracle });
                }
                Case { definition, oracle, without_sets, offered }
            })
            .collect();
        (corpus::dispatcher(), cases)
    })
}

fn dispatch(dispatcher: &Dispatcher, tool: &str, arguments: Value) -> ToolMessage {
    dispatch_in(dispatcher, None, tool, arguments)
}

/// The call as a host sends it after offering the tool in `dialect` (none: the canonical schema).
fn dispatch_in(dispatcher: &Dispatcher, dialect: Option<Dialect>, tool: &str, arguments: Value) -> ToolMessage {
    let context = match dialect {
        Some(dialect) => CallContext::new().with_dialect(dialect),
        None => CallContext::new(),
    };
    block_on(dispatcher.dispatch(ToolCall::new("call", tool, arguments), &context)).expect_message()
}

/// Generates one argument object for every tool and dialect from `seed`, with `mutation` applied where it
/// fits, and checks the runtime against that dialect's oracle. Returns how many mutations were applied.
fn check_seed(seed: u64, mutation: Option<Mutation>) -> Result<usize, TestCaseError> {
    let (dispatcher, cases) = cases();
    let mut applied = 0;
    for case in cases {
        for (index, offered) in case.offered.iter().enumerate() {
            let schema = &offered.schema;
            let seed = seed ^ (index as u64) << 56;
            let target = Rng(!seed).below(4);
            let mut generator = Generator { root: schema, rng: Rng(seed), mutation, seen: 0, target, applied: false };
            let mut arguments = generator.value(schema, 0);
            if mutation.is_some() && !generator.applied && generator.seen > 0 {
                // Fewer places than the target: the same seed makes the same value up to the place chosen.
                let target = target % generator.seen;
                generator = Generator { root: schema, rng: Rng(seed), mutation, seen: 0, target, applied: false };
                arguments = generator.value(schema, 0);
            }
            if mutation.is_some() && !generator.applied {
                continue;
            }
            applied += usize::from(generator.applied);
            let name = &case.definition.name;
            let dialect = offered.label();
            let valid = offered.oracle.is_valid(&arguments);
            let message = dispatch_in(dispatcher, offered.dialect, name, arguments.clone());
            let admitted = message.status == Status::Success;
            // Keys a schema leaves open (Gemini has no `additionalProperties`) are valid there; the runtime
            // strips and reports them, as it does every key the tool does not declare.
            let stripped_only_ghosts = message.stripped_arguments.iter().all(|path| path.ends_with(GHOST));
            let admitted_as_sent = admitted && message.stripped_arguments.is_empty();
            // OpenAI strict mode requires every property; the runtime reads an absent optional one as `null`
            // (or its default), so such a call is admitted as the canonical schema says, read as this dialect
            // reads sets (arguments generated from a schema without `uniqueItems` may repeat a set item).
            let absent_optional =
                offered.dialect == Some(Dialect::OpenAi) && mutation == Some(Mutation::MissingRequired);
            if valid || (absent_optional && case.without_sets.is_valid(&arguments)) {
                prop_assert!(
                    admitted && stripped_only_ghosts,
                    "`{name}` ({dialect}, {mutation:?}): schema-valid {arguments} was not admitted as sent: {} {:?}",
                    message.content,
                    message.stripped_arguments
                );
            } else {
                let errors: Vec<String> = offered.oracle.iter_errors(&arguments).map(|e| e.to_string()).collect();
                prop_assert!(
                    !admitted_as_sent,
                    "`{name}` ({dialect}, {mutation:?}): schema-invalid {arguments} ({errors:?}) was admitted: {}",
                    message.content
                );
                if mutation == Some(Mutation::UnknownKey) && message.refusal.is_none() {
                    prop_assert!(
                        message.stripped_arguments.iter().any(|path| path.ends_with(GHOST)),
                        "`{name}` ({dialect}): {arguments} stripped {:?}",
                        message.stripped_arguments
                    );
                }
            }
        }
    }
    Ok(applied)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(48)))]

    #[test]
    fn arguments_generated_from_each_dialects_schema_are_admitted(seed in any::<u64>()) {
        check_seed(seed, None)?;
    }

    #[test]
    fn schema_invalid_mutations_are_refused_or_stripped(seed in any::<u64>(), which in 0..MUTATIONS.len()) {
        check_seed(seed, Some(MUTATIONS[which]))?;
    }
}

#[test]
fn every_mutation_finds_places_in_the_corpus() {
    for mutation in MUTATIONS {
        let applied: usize = (0..8).map(|seed| check_seed(seed, Some(mutation)).expect("the property holds")).sum();
        assert!(applied >= 8, "{mutation:?} was applied {applied} times");
    }
}

/// Found by CI: an OpenAI-strict call that repeats a set item (that schema cannot say `uniqueItems`) and
/// leaves out a property with a default (that schema requires every property) is admitted, as the
/// canonical schema read without `uniqueItems` says; the exemption once asked the canonical schema itself.
#[test]
fn an_absent_optional_beside_a_repeated_set_item_is_judged_as_the_dialect_reads_sets() {
    check_seed(17029402214948040831, Some(Mutation::MissingRequired)).expect("the property holds");
}

#[test]
fn the_oracle_agrees_on_known_values() {
    let (dispatcher, cases) = cases();
    let scalars = cases.iter().find(|c| c.definition.name == "scalars").expect("the corpus has `scalars`");
    let base = json!({"text": "t", "flag": true, "ratio": 1.5, "small": 1.0, "tiny": -128, "count": 0,
        "huge": 18446744073709551615_u64, "index": 3, "letter": "x"});
    assert!(scalars.oracle.is_valid(&base));
    assert_eq!(dispatch(dispatcher, "scalars", base.clone()).status, Status::Success);
    let mut out_of_range = base.clone();
    out_of_range["tiny"] = json!(128);
    assert!(!scalars.oracle.is_valid(&out_of_range));
    let message = dispatch(dispatcher, "scalars", out_of_range);
    assert!(message.content.contains("`tiny`: `128` is out of range for i8: expected an integer from -128 to 127"));
}

/// The sets rule, on known values: where a dialect cannot say `uniqueItems` (OpenAI strict mode, Gemini)
/// its schema admits a repeated item, and so does a call in that dialect, the repeat counted once; where it
/// can (and without a dialect), the repeat is refused as the schema says.
#[test]
fn a_repeated_set_item_is_admitted_exactly_where_the_dialects_schema_admits_it() {
    let (dispatcher, cases) = cases();
    let collections = cases.iter().find(|c| c.definition.name == "collections").expect("the corpus has `collections`");
    let base = json!({"names": [], "addresses": [], "rgb": [0, 1, 2], "point": [0.5, 1.5], "unique": ["a", "a"]});
    for offered in &collections.offered {
        let valid = offered.oracle.is_valid(&base);
        let can_say = offered.dialect.is_none_or(Dialect::says_unique_items);
        assert_eq!(valid, !can_say, "{}: {:?}", offered.label(), offered.oracle.iter_errors(&base).next());
        let message = dispatch_in(dispatcher, offered.dialect, "collections", base.clone());
        assert_eq!(message.status == Status::Success, valid, "{}: {}", offered.label(), message.content);
        if !valid {
            assert!(message.content.contains("`unique` holds `\"a\"` more than once"), "{}", message.content);
        }
    }
}

/// The bounds rule, on known values: Gemini's SDK holds `maximum` as a float, so the Gemini schema states
/// the largest bound a float holds exactly (2^64 - 2048 for `u64`, and for `i128`, whose schema spans what
/// JSON integers hold), and a call in that dialect is held to it; the other dialects state `u64::MAX`,
/// which their SDKs keep.
#[test]
fn integer_bounds_round_trip_through_each_dialects_sdk_and_bind_its_calls() {
    let (dispatcher, cases) = cases();
    let scalars = cases.iter().find(|c| c.definition.name == "scalars").expect("the corpus has `scalars`");
    let gemini = scalars.offered.iter().find(|o| o.dialect == Some(Dialect::Gemini)).expect("Gemini offers `scalars`");
    let (huge, count) = (&gemini.schema["properties"]["huge"], &gemini.schema["properties"]["count"]);
    assert_eq!(huge["maximum"], json!(18_446_744_073_709_549_568_u64), "{huge}");
    assert_eq!(huge["minimum"], json!(i64::MIN), "{huge}");
    assert_eq!(count["maximum"], json!(18_446_744_073_709_549_568_u64), "{count}");
    // What the SDK holds is what was sent: the bound is a float exactly.
    let sent = agent_airlock::ToolDefinition::to_dialect(&scalars.definition, Dialect::Gemini).unwrap();
    let stated = sent["parameters"]["properties"]["count"]["maximum"].as_u64().unwrap();
    assert_eq!(stated as f64 as u64, stated);

    let base = json!({"text": "t", "flag": true, "ratio": 1.5, "small": 1.0, "tiny": 0, "count": 0, "huge": 0,
        "index": 3, "letter": "x"});
    let with = |key: &str, value: Value| {
        let mut arguments = base.clone();
        arguments[key] = value;
        arguments
    };
    let checks = [
        ("count", json!(18_446_744_073_709_549_568_u64), true),
        ("count", json!(18_446_744_073_709_549_569_u64), false),
        ("count", json!(u64::MAX), false),
        ("huge", json!(i64::MAX), true),
        ("huge", json!(u64::MAX - 1), false),
        ("huge", json!(i64::MIN), true),
    ];
    for (key, value, admitted) in checks {
        let arguments = with(key, value.clone());
        assert_eq!(gemini.oracle.is_valid(&arguments), admitted, "Gemini schema, `{key}` = {value}");
        let message = dispatch_in(dispatcher, Some(Dialect::Gemini), "scalars", arguments.clone());
        assert_eq!(message.status == Status::Success, admitted, "`{key}` = {value}: {}", message.content);
        if !admitted {
            assert!(message.content.contains(&format!("`{key}`: `{value}` is out of range: expected an integer")));
        }
        // The canonical schema, and every dialect that keeps it, admits the whole type.
        for offered in scalars.offered.iter().filter(|o| o.dialect != Some(Dialect::Gemini)) {
            assert!(offered.oracle.is_valid(&arguments), "{}: `{key}` = {value}", offered.label());
            let message = dispatch_in(dispatcher, offered.dialect, "scalars", arguments.clone());
            assert_eq!(message.status, Status::Success, "{}: {}", offered.label(), message.content);
        }
    }
}
