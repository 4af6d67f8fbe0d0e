//! Every corpus tool in every dialect: it converts to a definition the provider's validator accepts, or it
//! fails with a clear error saying where and why. The validators (in `support/validators.rs`) encode each
//! provider's documented rules independently of the transforms, and are themselves shown to reject
//! known-bad schemas. Finally, values a model could produce under each converted schema are dispatched to the
//! real tools, which must accept them.

use crate::corpus;
use crate::schema_node;
use crate::validators;

use agent_airlock::{
    CallContext, Dispatcher, Policy, Status, ToolCall, ToolDefinition,
    dialect::{Dialect, DialectError, Inexpressible, definitions_for, offer_in},
    tool,
};
use agent_airlock_tests::block_on;
use schema_node::SchemaNode;
use serde_json::{Value, json};

/// What each corpus tool is expected to do in each dialect: `None` converts, `Some((kind, pointer))` fails.
fn expected(tool: &str, dialect: Dialect) -> Option<(&'static str, &'static str)> {
    let strict_or_gemini = matches!(dialect, Dialect::OpenAi | Dialect::Gemini);
    match (tool, dialect) {
        ("maps", _) if strict_or_gemini => Some(("Map", "/properties/counts/additionalProperties")),
        ("flattened", _) if strict_or_gemini => Some(("Map", "/properties/record/additionalProperties")),
        ("any_value", _) if strict_or_gemini => Some(("AnyValue", "/properties/payload")),
        ("tuples", _) if strict_or_gemini => Some(("Tuple", "/properties/pair/prefixItems")),
        ("recursive", Dialect::Gemini) => Some(("Recursion", "/$defs/Tree/properties/children/items/$ref")),
        ("integer_enum", Dialect::Gemini) => Some(("NonStringEnum", "/properties/level/enum")),
        ("empty_struct", Dialect::Gemini) => Some(("EmptyObject", "/properties/marker")),
        _ => None,
    }
}

fn kind_name(kind: &Inexpressible) -> &'static str {
    match kind {
        Inexpressible::RootNotObject => "RootNotObject",
        Inexpressible::RootCombinator { .. } => "RootCombinator",
        Inexpressible::Map => "Map",
        Inexpressible::EmptyObject => "EmptyObject",
        Inexpressible::AnyValue => "AnyValue",
        Inexpressible::NoValue => "NoValue",
        Inexpressible::OnlyNull => "OnlyNull",
        Inexpressible::Tuple => "Tuple",
        Inexpressible::Recursion { .. } => "Recursion",
        Inexpressible::UnresolvedReference { .. } => "UnresolvedReference",
        Inexpressible::NonStringEnum => "NonStringEnum",
        Inexpressible::TypeUnion => "TypeUnion",
        Inexpressible::Keyword { .. } => "Keyword",
        Inexpressible::Limit { .. } => "Limit",
        Inexpressible::Name { .. } => "Name",
        Inexpressible::Malformed => "Malformed",
        _ => "unknown",
    }
}

/// A JSON pointer resolves in the canonical schema (`$ref` at the end names the keyword itself).
fn pointer_exists(schema: &Value, pointer: &str) -> bool {
    schema.pointer(pointer).is_some()
}

/// An error a person can act on: names the tool and dialect, says where, reads as one lower-case sentence.
fn assert_clear(error: &DialectError, tool: &str, dialect: Dialect) {
    let text = error.to_string();
    assert!(text.starts_with(&format!("tool `{tool}` cannot be offered in the {dialect} dialect: ")), "{text}");
    assert!(!text.ends_with('.'), "no trailing period: {text}");
    assert!(text.contains(&format!("(at `{}`)", error.pointer())) || error.pointer().is_empty(), "{text}");
    let detail = &text[text.find(": ").unwrap() + 2..];
    assert!(detail.len() > 40, "the reason says why, not just what: {text}");
    assert_eq!(error.tool(), Some(tool));
    assert_eq!(error.dialect(), dialect);
}

#[test]
fn every_corpus_tool_converts_to_an_accepted_definition_or_says_why_not() {
    let mut checked = 0;
    for definition in corpus::definitions() {
        for dialect in Dialect::ALL {
            let name = definition.name.as_str();
            match (definition.to_dialect(dialect), expected(name, dialect)) {
                (Ok(converted), None) => {
                    let violations = validators::violations(dialect, &converted);
                    assert!(
                        violations.is_empty(),
                        "`{name}` in {dialect} breaks the provider's rules:\n{}\n{}",
                        violations.join("\n"),
                        serde_json::to_string_pretty(&converted).unwrap()
                    );
                }
                (Err(error), Some((kind, pointer))) => {
                    assert_eq!(kind_name(error.kind()), kind, "{error}");
                    assert_eq!(error.pointer(), pointer, "{error}");
                    assert!(pointer_exists(&definition.input_schema, pointer), "{error}");
                    assert_clear(&error, name, dialect);
                }
                (Ok(converted), Some((kind, _))) => {
                    panic!("`{name}` in {dialect} was expected to fail with {kind}, got {converted}")
                }
                (Err(error), None) => {
                    panic!("`{name}` in {dialect} was expected to convert: {error}")
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 16 * Dialect::ALL.len());
}

#[test]
fn anthropic_and_mcp_carry_the_canonical_schema_unchanged() {
    for definition in corpus::definitions() {
        let anthropic = definition.to_dialect(Dialect::Anthropic).unwrap();
        assert_eq!(
            anthropic,
            json!({
                "name": definition.name, "description": definition.description, "input_schema": definition.input_schema,
            })
        );
        let mcp = definition.to_dialect(Dialect::Mcp).unwrap();
        assert_eq!(mcp["inputSchema"], definition.input_schema);
        let loose = definition.to_dialect(Dialect::OpenAiNonStrict).unwrap();
        assert_eq!(loose["function"]["parameters"], definition.input_schema);
        assert_eq!(loose["function"]["strict"], false);
    }
}

fn definition(name: &str) -> ToolDefinition {
    corpus::definitions().into_iter().find(|d| d.name == name).unwrap()
}

fn openai_parameters(name: &str) -> Value {
    definition(name).to_dialect(Dialect::OpenAi).unwrap()["function"]["parameters"].clone()
}

#[test]
fn openai_strict_requires_everything_and_makes_only_null_safe_fields_nullable() {
    let params = openai_parameters("optionals");
    // Arguments: all required; the dispatcher treats `null` as absent, so optional ones become nullable.
    assert_eq!(params["required"], json!(["nickname", "limit", "address", "colour", "plain", "tags", "shape"]));
    assert_eq!(params["properties"]["nickname"]["type"], json!(["string", "null"]));
    assert_eq!(params["properties"]["plain"]["enum"], json!(["Yes", "No", null]));
    assert_eq!(params["properties"]["colour"]["anyOf"][1], json!({"type": "null"}));

    let order = &openai_parameters("nested")["properties"]["order"];
    assert_eq!(order["required"], json!(["id", "lines", "shipping", "gift", "note"]));
    // `note: Option<String>` takes `null`; `gift` is optional only through `#[serde(default)]`, and serde
    // refuses `null` for a `bool`, so the model must send a value.
    assert_eq!(order["properties"]["note"]["type"], json!(["string", "null"]));
    assert_eq!(order["properties"]["gift"], json!({"type": "boolean", "description": "Wrap it as a present."}));
    let shipping = &order["properties"]["shipping"];
    assert_eq!(shipping["properties"]["country"]["type"], "string");
    assert!(shipping["properties"]["country"].get("default").is_none());
    assert_eq!(shipping["properties"]["floors"], json!({"type": "integer", "minimum": 0, "maximum": 4294967295_u32}));
    assert_eq!(shipping["additionalProperties"], false);
}

#[test]
fn openai_strict_rewrites_what_is_outside_its_subset() {
    let enums = openai_parameters("tagged_enums");
    // `oneOf` → `anyOf`, `const` → one-value `enum`.
    assert!(enums["properties"]["internal"].get("oneOf").is_none());
    assert_eq!(
        enums["properties"]["internal"]["anyOf"][0]["properties"]["kind"],
        json!({"type": "string", "enum": ["login"]})
    );
    // Formats: supported string formats stay, others move into the description, numeric ones go.
    let window = &openai_parameters("timestamps")["properties"]["window"]["properties"];
    assert_eq!(window["request"]["format"], "uuid");
    assert_eq!(window["day"]["format"], "date");
    let scalars = openai_parameters("scalars");
    // Every integer type says its range (OpenAI strict keeps `minimum`/`maximum`).
    assert_eq!(scalars["properties"]["count"], json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}));
    assert_eq!(
        scalars["properties"]["huge"],
        json!({"type": "integer", "minimum": i64::MIN, "maximum": u64::MAX}),
        "an `i128` admits what a JSON integer holds exactly"
    );
    // A homogeneous tuple is an array of fixed length.
    let point = &openai_parameters("collections")["properties"]["point"];
    assert_eq!(point, &json!({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}));
    // Recursion stays as `$defs`/`$ref`, each definition converted too.
    let recursive = openai_parameters("recursive");
    assert_eq!(recursive["$defs"]["LinkedNode"]["required"], json!(["value", "next"]));
    assert_eq!(recursive["properties"]["tree"]["properties"]["children"]["items"], json!({"$ref": "#/$defs/Tree"}));
}

#[test]
fn gemini_inlines_and_uses_nullable() {
    let gemini = definition("optionals").to_dialect(Dialect::Gemini).unwrap();
    let properties = &gemini["parameters"]["properties"];
    assert_eq!(
        properties["nickname"],
        json!({"type": "string", "nullable": true, "description": "What to call the customer."})
    );
    assert_eq!(properties["plain"], json!({"type": "string", "enum": ["Yes", "No"], "nullable": true}));
    assert!(properties["address"].get("additionalProperties").is_none());
    assert_eq!(properties["address"]["nullable"], true);
    // Alternatives without a type of their own pass `nullable` to each alternative.
    for branch in properties["shape"]["anyOf"].as_array().unwrap() {
        assert_eq!(branch["nullable"], true, "{branch}");
    }
    assert_eq!(gemini["parameters"].get("required"), None, "every argument of `optionals` is optional");

    let window = &definition("timestamps").to_dialect(Dialect::Gemini).unwrap()["parameters"]["properties"]["window"];
    assert_eq!(window["properties"]["day"], json!({"type": "string", "description": "Format: date."}));

    let no_params = definition("no_params").to_dialect(Dialect::Gemini).unwrap();
    assert_eq!(no_params, json!({"name": "no_params", "description": "Takes nothing."}));
}

#[test]
fn each_request_shape_is_what_the_provider_documents() {
    let definition = definition("raw_idents");
    let openai = definition.to_dialect(Dialect::OpenAi).unwrap();
    assert_eq!(openai["type"], "function");
    assert_eq!(openai["function"]["name"], "raw_idents");
    assert_eq!(openai["function"]["strict"], true);
    assert_eq!(openai["function"]["parameters"]["properties"]["type"]["description"], "The kind of thing.");
    let keys = |v: &Value| {
        let mut keys = v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        keys.sort();
        keys
    };
    assert_eq!(keys(&openai["function"]), ["description", "name", "parameters", "strict"]);
    assert_eq!(keys(&definition.to_dialect(Dialect::Anthropic).unwrap()), ["description", "input_schema", "name"]);
    assert_eq!(keys(&definition.to_dialect(Dialect::Gemini).unwrap()), ["description", "name", "parameters"]);
    assert_eq!(keys(&definition.to_dialect(Dialect::Mcp).unwrap()), ["description", "inputSchema", "name"]);
}

// -----------------------------------------------------------------------------------------------------------
// Names, hand-built schemas, limits

fn with_schema(name: &str, schema: Value) -> ToolDefinition {
    ToolDefinition { name: name.to_owned(), description: "A tool.".to_owned(), input_schema: schema }
}

fn object(properties: Value) -> Value {
    let required: Vec<String> = properties.as_object().unwrap().keys().cloned().collect();
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn fails(definition: &ToolDefinition, dialect: Dialect) -> DialectError {
    let error = definition.to_dialect(dialect).expect_err("expected the conversion to fail");
    assert_clear(&error, &definition.name, dialect);
    error
}

#[test]
fn tool_names_follow_each_providers_rule() {
    let schema = object(json!({"a": {"type": "string"}}));
    let digit_first = with_schema("9lives", schema.clone());
    assert!(digit_first.to_dialect(Dialect::OpenAi).is_ok());
    assert!(matches!(fails(&digit_first, Dialect::Gemini).kind(), Inexpressible::Name { name } if name == "9lives"));
    let dotted = with_schema("files.read", schema.clone());
    assert!(matches!(fails(&dotted, Dialect::OpenAi).kind(), Inexpressible::Name { .. }));
    assert!(matches!(fails(&dotted, Dialect::Anthropic).kind(), Inexpressible::Name { .. }));
    assert!(dotted.to_dialect(Dialect::Gemini).is_ok());
    assert!(dotted.to_dialect(Dialect::Mcp).is_ok());
    let long = with_schema(&"x".repeat(65), schema.clone());
    assert!(long.to_dialect(Dialect::OpenAi).is_err());
    assert!(long.to_dialect(Dialect::Mcp).is_ok());
    // Gemini's rule for parameter names is stricter than JSON's.
    let param = with_schema("t", object(json!({"first-name": {"type": "string"}})));
    let error = fails(&param, Dialect::Gemini);
    assert_eq!(error.pointer(), "/properties/first-name");
}

#[test]
fn roots_that_are_not_objects_or_are_combinators_are_refused_where_documented() {
    let alternatives = with_schema(
        "t",
        json!({"type": "object", "anyOf": [object(json!({"a": {"type": "string"}})), object(json!({"b": {"type": "string"}}))]}),
    );
    for dialect in [Dialect::OpenAi, Dialect::OpenAiNonStrict, Dialect::Anthropic, Dialect::Gemini] {
        let error = fails(&alternatives, dialect);
        assert!(matches!(error.kind(), Inexpressible::RootCombinator { keyword } if keyword == "anyOf"), "{error}");
        assert_eq!(error.pointer(), "/anyOf");
    }
    assert!(alternatives.to_dialect(Dialect::Mcp).is_ok(), "MCP takes any JSON Schema with an object root");
    let array_root = with_schema("t", json!({"type": "array", "items": {"type": "string"}}));
    for dialect in Dialect::ALL {
        assert_eq!(fails(&array_root, dialect).kind(), &Inexpressible::RootNotObject);
    }
}

#[test]
fn schema_constructs_outside_a_subset_fail_with_the_keyword_and_place() {
    let cases: Vec<(Value, Dialect, &str, &str)> = vec![
        (json!({"not": {"type": "string"}}), Dialect::OpenAi, "Keyword", "/properties/x/not"),
        (json!({"type": "string", "if": {"minLength": 1}, "then": {}}), Dialect::Gemini, "Keyword", "/properties/x/if"),
        (json!({"allOf": [{"type": "string"}, {"minLength": 2}]}), Dialect::OpenAi, "Keyword", "/properties/x/allOf"),
        (json!({"$ref": "#/$defs/Missing"}), Dialect::OpenAi, "UnresolvedReference", "/properties/x/$ref"),
        (json!({"$ref": "#/$defs/Missing"}), Dialect::Gemini, "UnresolvedReference", "/properties/x/$ref"),
        (json!({"$ref": "other.json#/a"}), Dialect::Anthropic, "UnresolvedReference", "/properties/x/$ref"),
        (json!({"$ref": "#/$defs/Missing"}), Dialect::Mcp, "UnresolvedReference", "/properties/x/$ref"),
        (json!({"type": ["string", "integer"]}), Dialect::Gemini, "TypeUnion", "/properties/x/type"),
        (json!({"type": "null"}), Dialect::Gemini, "OnlyNull", "/properties/x"),
        (json!({"const": 3}), Dialect::Gemini, "NonStringEnum", "/properties/x/enum"),
        (json!({"type": "string", "enum": ["a", 1]}), Dialect::Gemini, "NonStringEnum", "/properties/x/enum"),
        (json!(false), Dialect::OpenAi, "NoValue", "/properties/x"),
        (
            json!({"type": "object", "additionalProperties": true}),
            Dialect::OpenAi,
            "Map",
            "/properties/x/additionalProperties",
        ),
        (json!({"description": "anything"}), Dialect::OpenAi, "AnyValue", "/properties/x"),
        (json!(17), Dialect::Gemini, "Malformed", "/properties/x"),
    ];
    for (property, dialect, kind, pointer) in cases {
        let definition = with_schema("t", object(json!({ "x": property })));
        let error = fails(&definition, dialect);
        assert_eq!((kind_name(error.kind()), error.pointer()), (kind, pointer), "{property} in {dialect}: {error}");
    }
}

#[test]
fn what_can_be_rewritten_exactly_is_rewritten_not_refused() {
    // A one-element `allOf` folds into its schema; `const` becomes `enum`; a `$ref` with a description
    // becomes a one-branch `anyOf` (OpenAI) or is inlined with the description (Gemini).
    let schema = json!({
        "type": "object",
        "properties": {
            "a": {"allOf": [{"type": "string", "minLength": 1}], "description": "A."},
            "b": {"const": "fixed"},
            "c": {"$ref": "#/$defs/Leaf", "description": "C."},
        },
        "required": ["a", "b", "c"],
        "additionalProperties": false,
        "$defs": {"Leaf": {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"], "additionalProperties": false}},
    });
    let definition = with_schema("t", schema);
    let openai = definition.to_dialect(Dialect::OpenAi).unwrap();
    assert!(validators::violations(Dialect::OpenAi, &openai).is_empty(), "{openai}");
    let props = &openai["function"]["parameters"]["properties"];
    assert_eq!(props["a"], json!({"type": "string", "minLength": 1, "description": "A."}));
    assert_eq!(props["b"], json!({"enum": ["fixed"]}));
    assert_eq!(props["c"], json!({"anyOf": [{"$ref": "#/$defs/Leaf"}], "description": "C."}));
    let gemini = definition.to_dialect(Dialect::Gemini).unwrap();
    assert!(validators::violations(Dialect::Gemini, &gemini).is_empty(), "{gemini}");
    let props = &gemini["parameters"]["properties"];
    assert_eq!(props["b"], json!({"type": "string", "enum": ["fixed"]}));
    assert_eq!(
        props["c"],
        json!({"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"], "description": "C."})
    );
    assert!(gemini["parameters"].get("$defs").is_none());
}

#[test]
fn openai_size_limits_are_enforced() {
    let mut deep = json!({"type": "string"});
    for _ in 0..11 {
        deep = object(json!({ "inner": deep }));
    }
    // The root and ten objects nested in it: eleven levels.
    let error = fails(&with_schema("t", deep.clone()), Dialect::OpenAi);
    assert!(matches!(error.kind(), Inexpressible::Limit { max: 10, actual: 11, .. }), "{error}");
    assert!(with_schema("t", deep["properties"]["inner"].clone()).to_dialect(Dialect::OpenAi).is_ok());

    let values: Vec<String> = (0..1001).map(|i| format!("v{i}")).collect();
    let error = fails(&with_schema("t", object(json!({"e": {"type": "string", "enum": values}}))), Dialect::OpenAi);
    assert!(matches!(error.kind(), Inexpressible::Limit { max: 1000, actual: 1001, .. }), "{error}");
}

/// Gemini has no `$ref`: every reference is inlined, so the conversion is bounded in depth and in size. A chain
/// of 1,000 definitions each a property of the one before ran a release build out of a 2 MiB stack (100 in a
/// debug build), and 16 definitions each referring twice to the next made 2^17 schemas (5 MB from 2 KB; 30 would
/// be gigabytes). Both are refused with the limit; schemas within it convert as before.
#[test]
fn gemini_inlining_is_bounded_in_depth_and_size() {
    // `n` definitions, each an object whose properties `names` refer to the next; the last a string.
    let linked = |n: usize, names: &[&str]| {
        let mut defs = serde_json::Map::new();
        for i in 0..n {
            let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
            let properties: serde_json::Map<String, Value> =
                names.iter().map(|name| ((*name).to_owned(), next.clone())).collect();
            defs.insert(format!("d{i}"), object(Value::Object(properties)));
        }
        defs.insert(format!("d{n}"), json!({"type": "string"}));
        let mut root = object(json!({"top": {"$ref": "#/$defs/d0"}}));
        root["$defs"] = Value::Object(defs);
        root
    };
    // Depth: the root, then per definition its property and the definition the `$ref` leads to.
    let within = linked(14, &["next"]);
    let gemini = with_schema("t", within).to_dialect(Dialect::Gemini).unwrap();
    let mut inner = &gemini["parameters"]["properties"]["top"];
    for _ in 0..14 {
        inner = &inner["properties"]["next"];
    }
    assert_eq!(inner, &json!({"type": "string"}));
    for n in [16, 1_000, 100_000] {
        let error = fails(&with_schema("t", linked(n, &["next"])), Dialect::Gemini);
        assert!(matches!(error.kind(), Inexpressible::Limit { max: 32, actual: 33, .. }), "{error}");
        assert!(error.to_string().contains("nests more than 32 schemas deep"), "{error}");
    }
    // Size: a fan of two 11 definitions deep makes 8,191 schemas (the root, `top`, and per level each copy's
    // two properties and the copies of the next they lead to), 12 deep 16,383.
    let fan = with_schema("t", linked(11, &["a", "b"])).to_dialect(Dialect::Gemini).unwrap();
    assert!(fan.to_string().len() > 100_000, "a fan within the bound is inlined whole");
    for n in [12, 14] {
        let error = fails(&with_schema("t", linked(n, &["a", "b"])), Dialect::Gemini);
        assert!(matches!(error.kind(), Inexpressible::Limit { max: 10_000, actual: 10_001, .. }), "{error}");
        assert!(error.to_string().contains("makes more than 10000 schemas"), "{error}");
    }
    // The dialects that keep `$ref` convert both, unchanged in size.
    for dialect in [Dialect::Mcp, Dialect::Anthropic, Dialect::OpenAiNonStrict] {
        assert!(with_schema("t", linked(1_000, &["a", "b"])).to_dialect(dialect).is_ok(), "{dialect:?}");
    }
    // A chain of 10,000 definitions each a `$ref` to the next: converted or refused, never out of stack.
    let mut aliases = object(json!({"top": {"$ref": "#/$defs/d0"}}));
    aliases["$defs"] = (0..10_000)
        .map(|i| (format!("d{i}"), json!({"$ref": format!("#/$defs/d{}", i + 1)})))
        .chain([("d10000".to_owned(), json!({"type": "string"}))])
        .collect::<serde_json::Map<_, _>>()
        .into();
    let aliases = with_schema("t", aliases);
    for dialect in [Dialect::Mcp, Dialect::Anthropic, Dialect::OpenAi, Dialect::OpenAiNonStrict] {
        assert!(aliases.to_dialect(dialect).is_ok(), "{dialect:?}");
    }
    assert!(matches!(fails(&aliases, Dialect::Gemini).kind(), Inexpressible::Limit { max: 32, .. }));
}

#[test]
fn schema_alone_converts_without_a_tool() {
    let error = Dialect::OpenAi.schema(&json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}})).unwrap_err();
    assert_eq!(error.tool(), None);
    assert!(error.to_string().starts_with("the schema cannot be expressed in the OpenAI strict dialect: "), "{error}");
    assert_eq!(
        Dialect::Gemini.schema(&definition("no_params").input_schema).unwrap(),
        json!({"type": "object", "properties": {}})
    );
}

// -----------------------------------------------------------------------------------------------------------
// The validators can fail

#[test]
fn the_openai_validator_rejects_what_strict_mode_rejects() {
    let good = |parameters: Value| json!({"type": "function", "function": {"name": "f", "description": "d", "parameters": parameters, "strict": true}});
    // Known-good, from the provider's documentation: optional emulated with a null union, and recursion.
    let weather = json!({
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The location to get the weather for"},
            "unit": {"type": ["string", "null"], "enum": ["F", "C", null]}
        },
        "additionalProperties": false,
        "required": ["location", "unit"]
    });
    assert_eq!(validators::violations(Dialect::OpenAi, &good(weather.clone())), Vec::<String>::new());
    let linked = json!({
        "type": "object",
        "properties": {"linked_list": {"$ref": "#/$defs/node"}},
        "$defs": {"node": {"type": "object", "properties": {"value": {"type": "number"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "additionalProperties": false, "required": ["next", "value"]}},
        "additionalProperties": false,
        "required": ["linked_list"]
    });
    assert_eq!(validators::violations(Dialect::OpenAi, &good(linked)), Vec::<String>::new());

    let bad: Vec<(&str, Value)> = vec![
        (
            "must set `additionalProperties: false`",
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
        ),
        (
            "must be required",
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": [], "additionalProperties": false}),
        ),
        ("format \"uint64\" is not supported", object(json!({"a": {"type": "integer", "format": "uint64"}}))),
        ("`format` applies to strings only", object(json!({"a": {"type": "integer", "format": "uuid"}}))),
        ("`default` is not supported", object(json!({"a": {"type": "string", "default": "x"}}))),
        ("`oneOf` is not supported", object(json!({"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}))),
        ("`const` is not supported", object(json!({"a": {"type": "string", "const": "x"}}))),
        (
            "`prefixItems` is not supported",
            object(json!({"a": {"type": "array", "prefixItems": [{"type": "string"}]}})),
        ),
        ("`allOf` is not supported", object(json!({"a": {"allOf": [{"type": "string"}]}}))),
        ("the root must not be a combinator", json!({"type": "object", "anyOf": [weather.clone()]})),
        ("the root must be `type: \"object\"`", json!({"type": "array", "items": {"type": "string"}})),
        (
            "a `$ref` must stand alone",
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/x", "description": "d"}}, "required": ["a"], "additionalProperties": false, "$defs": {"x": {"type": "string"}}}),
        ),
        ("does not resolve", object(json!({"a": {"$ref": "#/$defs/missing"}}))),
        ("every schema needs a `type`", object(json!({"a": {"description": "anything"}}))),
        ("no `true`/`false` schemas", object(json!({"a": true}))),
        (
            "must set `additionalProperties: false`",
            object(json!({"a": {"type": "object", "additionalProperties": {"type": "string"}}})),
        ),
        ("is not of type", object(json!({"a": {"type": "string", "enum": ["x", null]}}))),
        ("is not a supported type", object(json!({"a": {"type": "date"}}))),
    ];
    for (expected, parameters) in bad {
        let violations = validators::violations(Dialect::OpenAi, &good(parameters.clone()));
        assert!(
            violations.iter().any(|v| v.contains(expected)),
            "expected `{expected}` for {parameters}, got {violations:?}"
        );
    }
    let mut deep = json!({"type": "string"});
    for _ in 0..11 {
        deep = object(json!({ "inner": deep }));
    }
    assert!(validators::violations(Dialect::OpenAi, &good(deep["properties"]["inner"].clone())).is_empty());
    let violations = validators::violations(Dialect::OpenAi, &good(deep));
    assert!(violations.iter().any(|v| v.contains("at most 10")), "{violations:?}");
    let loose = json!({"type": "function", "function": {"name": "f", "parameters": weather, "strict": false}});
    assert!(validators::violations(Dialect::OpenAi, &loose).iter().any(|v| v.contains("must be true")));
    let renamed =
        json!({"type": "function", "function": {"name": "read file", "parameters": object(json!({})), "strict": true}});
    assert!(validators::violations(Dialect::OpenAi, &renamed).iter().any(|v| v.contains("does not match")));
}

#[test]
fn the_gemini_validator_rejects_what_gemini_rejects() {
    let declaration = |parameters: Value| json!({"name": "f", "description": "d", "parameters": parameters});
    // Known-good, from the provider's documentation.
    let weather = json!({
        "type": "object",
        "properties": {"location": {"type": "string", "description": "The city"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "nullable": true}},
        "required": ["location"]
    });
    assert_eq!(validators::violations(Dialect::Gemini, &declaration(weather)), Vec::<String>::new());

    let plain = |property: Value| json!({"type": "object", "properties": {"a": property}});
    let bad: Vec<(&str, Value)> = vec![
        ("`$ref` is not allowed", plain(json!({"$ref": "#/$defs/x"}))),
        ("is not one Gemini Type", plain(json!({"type": ["string", "null"]}))),
        ("enums are non-empty lists of strings", plain(json!({"type": "integer", "enum": [1, 2]}))),
        (
            "`additionalProperties` is not allowed",
            plain(json!({"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": false})),
        ),
        ("`const` is not allowed", plain(json!({"type": "string", "const": "x"}))),
        ("`oneOf` is not allowed", plain(json!({"oneOf": [{"type": "string"}]}))),
        ("should be non-empty for OBJECT type", plain(json!({"type": "object", "properties": {}}))),
        ("format \"uint64\" is not supported", plain(json!({"type": "integer", "format": "uint64"}))),
        ("format \"uuid\" is not supported", plain(json!({"type": "string", "format": "uuid"}))),
        ("an ARRAY schema needs `items`", plain(json!({"type": "array"}))),
        ("a Schema needs a `type`", plain(json!({"description": "anything"}))),
        ("is not a property", json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]})),
        ("parameter names", json!({"type": "object", "properties": {"first-name": {"type": "string"}}})),
        ("parameters must be an OBJECT schema", json!({"type": "string"})),
    ];
    for (expected, parameters) in bad {
        let violations = validators::violations(Dialect::Gemini, &declaration(parameters.clone()));
        assert!(
            violations.iter().any(|v| v.contains(expected)),
            "expected `{expected}` for {parameters}, got {violations:?}"
        );
    }
    let digit = json!({"name": "9f", "description": "d"});
    assert!(validators::violations(Dialect::Gemini, &digit).iter().any(|v| v.contains("a letter or `_` first")));
}

#[test]
fn the_anthropic_and_mcp_validators_reject_what_those_apis_reject() {
    let tool = |schema: Value| json!({"name": "f", "description": "d", "input_schema": schema});
    assert_eq!(
        validators::violations(Dialect::Anthropic, &tool(object(json!({"a": {"type": "string"}})))),
        Vec::<String>::new()
    );
    let top_level = tool(json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}));
    assert!(validators::violations(Dialect::Anthropic, &top_level).iter().any(|v| v.contains("at the top level")));
    let not_object = tool(json!({"type": "string"}));
    assert!(!validators::violations(Dialect::Anthropic, &not_object).is_empty());
    let spaced = json!({"name": "read file", "input_schema": object(json!({}))});
    assert!(validators::violations(Dialect::Anthropic, &spaced).iter().any(|v| v.contains("does not match")));

    let mcp = |schema: Value| json!({"name": "f", "inputSchema": schema});
    assert_eq!(validators::violations(Dialect::Mcp, &mcp(json!({"type": "object"}))), Vec::<String>::new());
    assert!(
        validators::violations(Dialect::Mcp, &mcp(json!({"properties": {}})))
            .iter()
            .any(|v| v.contains("must be \"object\""))
    );
    assert!(
        validators::violations(Dialect::Mcp, &mcp(json!({"type": "object", "required": [1]})))
            .iter()
            .any(|v| v.contains("list of strings"))
    );
    assert!(
        !validators::violations(Dialect::Mcp, &json!({"name": "f", "input_schema": {"type": "object"}})).is_empty()
    );
}

// -----------------------------------------------------------------------------------------------------------
// What a model sends under each dialect's schema, the tools accept

/// A value a model could produce under `schema`. `prefer_null` takes `null` wherever the schema allows it;
/// `last` picks the last alternative or enum value instead of the first and fills arrays.
fn instance(schema: &Value, root: &Value, prefer_null: bool, last: bool, depth: usize) -> Value {
    let Some(node) = SchemaNode::of(schema, root) else {
        return json!("anything");
    };
    let map = node.map;
    // Deep in a recursive type, stop where the schema lets the model stop.
    if node.null_allowed && (prefer_null || depth > 4) {
        return Value::Null;
    }
    if let Some(value) = map.get("const") {
        return value.clone();
    }
    if let Some(values) = map.get("enum").and_then(Value::as_array) {
        let mut values = values.iter().filter(|v| !v.is_null());
        let picked = if last { values.next_back() } else { values.next() };
        return picked.cloned().unwrap_or(Value::Null);
    }
    let non_null = node.non_null_branches();
    if !non_null.is_empty() {
        let branch = if last { non_null[non_null.len() - 1] } else { non_null[0] };
        return instance(branch, root, prefer_null, last, depth);
    }
    match node.kind() {
        Some("string") => {
            let format = map.get("format").and_then(Value::as_str).unwrap_or_default();
            let described = map.get("description").and_then(Value::as_str).unwrap_or_default();
            if format == "date-time" || described.contains("Format: date-time") {
                json!("2024-05-01T12:00:00Z")
            } else if map.get("maxLength") == Some(&json!(1)) {
                json!("x")
            } else {
                json!("abc")
            }
        }
        Some("integer") => map.get("minimum").cloned().unwrap_or(json!(7)),
        Some("number") => json!(2.5),
        Some("boolean") => json!(true),
        Some("array") => {
            let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let count = if last && depth <= 4 { min.max(1) } else { min };
            if let Some(prefix) = map.get("prefixItems").and_then(Value::as_array) {
                return prefix.iter().map(|p| instance(p, root, prefer_null, last, depth + 1)).collect();
            }
            let items = map.get("items").cloned().unwrap_or(json!({}));
            (0..count).map(|_| instance(&items, root, prefer_null, last, depth + 1)).collect()
        }
        Some("object") | None => {
            let mut out = serde_json::Map::new();
            if let Some(properties) = map.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    out.insert(name.clone(), instance(property, root, prefer_null, last, depth + 1));
                }
            }
            if let Some(extra) = map.get("additionalProperties").filter(|a| a.is_object()) {
                out.insert("key".into(), instance(extra, root, prefer_null, last, depth + 1));
            }
            Value::Object(out)
        }
        Some(_) => Value::Null,
    }
}

#[test]
fn what_a_model_sends_under_each_dialects_schema_the_tool_accepts() {
    let dispatcher = corpus::dispatcher();
    let mut dispatched = 0;
    for definition in corpus::definitions() {
        for dialect in [Dialect::OpenAi, Dialect::Gemini, Dialect::Mcp] {
            let Ok(converted) = definition.to_dialect(dialect) else {
                continue;
            };
            let schema = match dialect {
                Dialect::OpenAi => converted["function"]["parameters"].clone(),
                Dialect::Gemini => converted.get("parameters").cloned().unwrap_or(json!({"type": "object"})),
                _ => converted["inputSchema"].clone(),
            };
            for (prefer_null, last) in [(true, false), (false, false), (false, true)] {
                let arguments = instance(&schema, &schema, prefer_null, last, 0);
                let call = ToolCall::new("call", definition.name.clone(), arguments.clone());
                let message = block_on(dispatcher.dispatch(call, &CallContext::new())).expect_message();
                assert_eq!(
                    message.status,
                    Status::Success,
                    "`{}` in {dialect} refused {arguments}: {}",
                    definition.name,
                    message.content
                );
                assert!(message.stripped_arguments.is_empty(), "{:?}", message.stripped_arguments);
                dispatched += 1;
            }
        }
    }
    assert!(dispatched > 100, "{dispatched}");
}

// -----------------------------------------------------------------------------------------------------------
// Lists

#[test]
fn definitions_for_and_the_dispatcher_offer_tools_in_a_dialect() {
    let definitions = corpus::definitions();
    let convertible: Vec<&ToolDefinition> =
        definitions.iter().filter(|d| expected(&d.name, Dialect::Gemini).is_none()).collect();
    let declarations = definitions_for(Dialect::Gemini, convertible.iter().copied()).unwrap();
    assert_eq!(declarations.len(), convertible.len());
    assert_eq!(declarations[0]["name"], "scalars");

    let error = definitions_for(Dialect::Gemini, &definitions).unwrap_err();
    assert_eq!(error.tool(), Some("maps"), "the first tool that cannot be expressed, in order: {error}");

    let policy = Policy::builder().deny("maps").build().unwrap();
    let dispatcher = Dispatcher::builder()
        .tool(tool!(corpus::scalars))
        .tool(tool!(corpus::maps))
        .tool(tool!(corpus::nested))
        .policy(policy)
        .build()
        .unwrap();
    let offered = dispatcher.offered_tools_in_all(Dialect::OpenAi).unwrap();
    let names: Vec<&str> = offered.iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["scalars", "nested"], "denied tools are not offered, so `maps` cannot fail the list");
    for tool in &offered {
        assert!(validators::violations(Dialect::OpenAi, tool).is_empty());
    }
    let open = Dispatcher::builder().tool(tool!(corpus::scalars)).tool(tool!(corpus::maps)).build().unwrap();
    let error = open.offered_tools_in_all(Dialect::OpenAi).unwrap_err();
    assert_eq!(error.kind(), &Inexpressible::Map);
    // One inexpressible tool does not hide the rest: what can be offered is, and the rest is reported.
    let offer = open.offered_tools_in(Dialect::OpenAi);
    assert!(!offer.is_complete());
    assert_eq!(offer.definitions.len(), 1);
    assert_eq!(offer.definitions[0]["function"]["name"], "scalars");
    let left_out = offer.left_out();
    assert_eq!(left_out.len(), 1);
    assert_eq!(left_out[0].0, "maps");
    assert!(left_out[0].1.contains("arbitrary keys"), "{}", left_out[0].1);
    assert_eq!(offer.into_complete().unwrap_err().kind(), &Inexpressible::Map);
    let gemini = offer_in(Dialect::Gemini, &definitions);
    let expressible = definitions.iter().filter(|d| expected(&d.name, Dialect::Gemini).is_none()).count();
    assert_eq!(gemini.definitions.len(), expressible);
    assert_eq!(gemini.definitions.len() + gemini.inexpressible.len(), definitions.len());
    assert!(gemini.inexpressible.iter().all(|e| expected(e.tool().unwrap(), Dialect::Gemini).is_some()));
    // The documented fallback, per tool.
    let mixed: Vec<Value> = open
        .offered_tools()
        .iter()
        .map(|d| d.to_dialect(Dialect::OpenAi).or_else(|_| d.to_dialect(Dialect::OpenAiNonStrict)).unwrap())
        .collect();
    assert_eq!(mixed[0]["function"]["strict"], true);
    assert_eq!(mixed[1]["function"]["strict"], false);
    assert!(validators::violations(Dialect::OpenAiNonStrict, &mixed[1]).is_empty());
}
