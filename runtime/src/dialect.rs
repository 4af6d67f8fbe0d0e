//! Provider dialects: the canonical schema of a tool (see [`input_schema`](crate::input_schema)) turned into
//! what each provider accepts, and the whole tool definition in each provider's request shape.
//!
//! | dialect | tool definition | schema rules |
//! |---|---|---|
//! | [`Dialect::OpenAi`] | `{"type": "function", "function": {name, description, parameters, "strict": true}}` | Structured Outputs subset: every property required, optional ones nullable, `additionalProperties: false` everywhere, `anyOf` not `oneOf`, few `format`s |
//! | [`Dialect::OpenAiNonStrict`] | the same with `"strict": false` | the canonical schema |
//! | [`Dialect::Anthropic`] | `{name, description, input_schema}` | object root, no `anyOf`/`oneOf`/`allOf` at the root |
//! | [`Dialect::Gemini`] | function declaration `{name, description, parameters}` | OpenAPI 3.0 subset: no `$ref`, `nullable`, string enums, no `additionalProperties` |
//! | [`Dialect::Mcp`] | `{name, description, inputSchema}` | JSON Schema with an object root |
//!
//! A schema either converts to one the provider accepts or fails with a [`DialectError`] saying where and
//! why. Conversions never narrow what the tool accepts in a way the model cannot see: keywords a dialect
//! lacks are dropped only when dropping them widens the schema (a `format`, `default`, `uniqueItems`), since
//! the dispatcher still validates every argument strictly against the Rust type (and a call in the dialect
//! as its schema says, below); a shape the dialect cannot
//! say at all (a map under OpenAI strict mode, a recursive type under Gemini) is an error.
//!
//! What a dialect's schema admits, a call in that dialect is admitted, and what it rejects is refused,
//! once the host says which dialect it offered the tools in ([`CallContext::with_dialect`]; a call without
//! one is held to the canonical schema). The canonical schema and the dialect's differ in two places, and
//! the call follows the dialect's:
//!
//! - **Sets.** Where a dialect cannot say `uniqueItems` ([`Dialect::says_unique_items`]: OpenAI strict mode
//!   and Gemini), a set's schema is a plain array whose description says "Items must be unique.". That
//!   schema admits a repeated item, so a call in that dialect has the repeat counted once (the tool receives
//!   the set) instead of refused. This is the one rule for every such dialect: refusing to offer sets there
//!   would lose tools the model can call correctly, and a description cannot bind the runtime to refuse what
//!   the schema admits.
//! - **Integer bounds.** Gemini's SDK holds `minimum` and `maximum` as 64-bit floats, so a bound a float
//!   cannot hold (`u64::MAX` would come back as 2^64, `i64::MAX` as 2^63) is stated as the nearest one inside
//!   it that a float holds exactly (2^64 - 2048, 2^63 - 1024), and a call in the Gemini dialect is held to
//!   that bound. The other dialects' SDKs keep JSON integers exact, and their schemas state the type's own
//!   bounds.
//!
//! [`CallContext::with_dialect`]: crate::CallContext::with_dialect
//!
//! ```
//! use agent_airlock::{airlock_tool, tool, tool::Tool, ToolDefinition, ToolError, dialect::Dialect};
//!
//! /// Look up an order.
//! #[airlock_tool]
//! fn order_status(
//!     /// The order number.
//!     order: u64,
//!     /// Include the line items.
//!     detailed: Option<bool>,
//! ) -> Result<String, ToolError> {
//!     Ok(format!("order {order} shipped"))
//! }
//!
//! let definition = ToolDefinition::of(&tool!(order_status));
//! let openai = definition.to_dialect(Dialect::OpenAi).unwrap();
//! assert_eq!(openai["function"]["strict"], true);
//! assert_eq!(openai["function"]["parameters"]["required"], serde_json::json!(["order", "detailed"]));
//! assert_eq!(openai["function"]["parameters"]["properties"]["detailed"]["type"], serde_json::json!(["boolean", "null"]));
//! let gemini = definition.to_dialect(Dialect::Gemini).unwrap();
//! assert_eq!(gemini["parameters"]["properties"]["detailed"]["nullable"], true);
//! ```

mod gemini;
mod openai;
mod shared;

use std::fmt;

use serde_json::{Map, Value};

use crate::schema::ToolDefinition;
use shared::Failure;

/// A provider's way of declaring tools to a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// OpenAI function calling with `strict: true` (Structured Outputs): the model's arguments always match
    /// the schema, which must stay inside OpenAI's JSON Schema subset.
    OpenAi,
    /// OpenAI function calling with `strict: false`: the canonical schema as it is. For tools whose
    /// arguments strict mode cannot express (maps, values of any type).
    OpenAiNonStrict,
    /// Anthropic Messages API tools (`input_schema`).
    Anthropic,
    /// Gemini function declarations (`parameters`, an OpenAPI 3.0 schema subset).
    Gemini,
    /// Model Context Protocol `tools/list` entries (`inputSchema`).
    Mcp,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 5] =
        [Dialect::OpenAi, Dialect::OpenAiNonStrict, Dialect::Anthropic, Dialect::Gemini, Dialect::Mcp];

    /// A short human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::OpenAi => "OpenAI strict",
            Dialect::OpenAiNonStrict => "OpenAI non-strict",
            Dialect::Anthropic => "Anthropic",
            Dialect::Gemini => "Gemini",
            Dialect::Mcp => "MCP",
        }
    }

    /// Whether this dialect's schemas can say `uniqueItems`. OpenAI strict mode and Gemini cannot: there a
    /// set's schema is a plain array (the description says "Items must be unique."), and a call in that
    /// dialect (see [`CallContext::with_dialect`](crate::CallContext::with_dialect)) has a repeated item
    /// counted once instead of refused, as that schema admits it.
    pub fn says_unique_items(self) -> bool {
        !matches!(self, Dialect::OpenAi | Dialect::Gemini)
    }

    /// Whether the provider's SDK holds `minimum`/`maximum` as 64-bit floats (Gemini's `Schema.minimum:
    /// float`). Such a dialect states an integer bound a float cannot hold exactly as the nearest one inside
    /// it, and a call in that dialect is held to that bound.
    pub(crate) fn float_bounds(self) -> bool {
        self == Dialect::Gemini
    }

    /// The canonical arguments schema `canonical` in this dialect: what goes in the definition's
    /// `parameters` / `input_schema` / `inputSchema`. For Gemini, a tool without parameters yields an object
    /// without properties, which [`ToolDefinition::to_dialect`] leaves out of the declaration.
    pub fn schema(self, canonical: &Value) -> Result<Value, DialectError> {
        self.convert(canonical).map_err(|failure| DialectError::new(self, None, failure))
    }

    fn convert(self, canonical: &Value) -> Result<Value, Failure> {
        let canonical = &*shared::hoist_refs(canonical);
        match self {
            Dialect::OpenAi => openai::strict(canonical),
            Dialect::OpenAiNonStrict => openai::non_strict(canonical),
            Dialect::Anthropic => {
                const ANTHROPIC: &str = "Anthropic's `input_schema`";
                shared::root_object(canonical, ANTHROPIC, &["anyOf", "oneOf", "allOf"])?;
                shared::check_refs(canonical, canonical, "", ANTHROPIC)?;
                Ok(canonical.clone())
            }
            Dialect::Gemini => gemini::parameters(canonical),
            Dialect::Mcp => {
                const MCP: &str = "MCP's `inputSchema`";
                shared::root_object(canonical, MCP, &[])?;
                shared::check_refs(canonical, canonical, "", MCP)?;
                Ok(canonical.clone())
            }
        }
    }

    /// Checks the tool name against the provider's rule.
    fn check_name(self, name: &str) -> Result<(), Failure> {
        let (max, rule) = match self {
            Dialect::OpenAi | Dialect::OpenAiNonStrict | Dialect::Anthropic => {
                (64, "1 to 64 ASCII letters, digits, `_` or `-`")
            }
            Dialect::Gemini => (64, "a letter or `_` first, then ASCII letters, digits, `_`, `.` or `-`, at most 64"),
            Dialect::Mcp => (128, "1 to 128 ASCII letters, digits, `_`, `.` or `-`"),
        };
        let allowed = |c: char| match self {
            Dialect::OpenAi | Dialect::OpenAiNonStrict | Dialect::Anthropic => {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
            }
            Dialect::Gemini | Dialect::Mcp => c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'),
        };
        let first_allowed = |c: char| match self {
            Dialect::Gemini => c.is_ascii_alphabetic() || c == '_',
            _ => allowed(c),
        };
        let mut chars = name.chars();
        let ok = chars.next().is_some_and(first_allowed) && chars.all(allowed) && name.len() <= max;
        if ok {
            return Ok(());
        }
        Err(Failure::new(
            "",
            Inexpressible::Name { name: name.to_owned() },
            format!("{} tool names must be {rule}, `{name}` is not", self.name()),
        ))
    }
}

/// `bound`, a `minimum` (`upper` false) or `maximum` (`upper` true), as the nearest whole number inside it
/// that an `f64` holds exactly, if it is an integer an `f64` does not hold: `u64::MAX` becomes
/// 18446744073709549568 (2^64 - 2048), `i64::MAX` 9223372036854774784 (2^63 - 1024). `None` when the bound
/// is already exact (every integer up to 2^53, and `i64::MIN`) or not an integer.
pub(crate) fn float_exact_bound(bound: &Value, upper: bool) -> Option<Value> {
    let n = bound.as_i64().map(i128::from).or_else(|| bound.as_u64().map(i128::from))?;
    // `as f64` rounds to the nearest float; one step inward when that lands outside the bound.
    let mut float = n as f64;
    if upper && float as i128 > n {
        float = float.next_down();
    } else if !upper && (float as i128) < n {
        float = float.next_up();
    }
    let exact = float as i128;
    if exact == n {
        return None;
    }
    i64::try_from(exact).map(Value::from).or_else(|_| u64::try_from(exact).map(Value::from)).ok()
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ToolDefinition {
    /// The whole tool definition in `dialect`'s request shape, ready to paste into a request body:
    ///
    /// - OpenAI: `{"type": "function", "function": {"name", "description", "parameters", "strict"}}` (the
    ///   Chat Completions `tools` entry);
    /// - Anthropic: `{"name", "description", "input_schema"}`;
    /// - Gemini: `{"name", "description", "parameters"}`, an entry of `functionDeclarations` (`parameters`
    ///   left out when the tool takes none, as Gemini rejects an object without properties);
    /// - MCP: `{"name", "description", "inputSchema"}`, an entry of a `tools/list` result.
    pub fn to_dialect(&self, dialect: Dialect) -> Result<Value, DialectError> {
        self.convert(dialect).map_err(|failure| DialectError::new(dialect, Some(&self.name), failure))
    }

    fn convert(&self, dialect: Dialect) -> Result<Value, Failure> {
        dialect.check_name(&self.name)?;
        let schema = dialect.convert(&self.input_schema)?;
        let name = Value::String(self.name.clone());
        let description = Value::String(self.description.clone());
        let object = |entries: Vec<(&str, Value)>| {
            Value::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<_, _>>())
        };
        Ok(match dialect {
            Dialect::OpenAi | Dialect::OpenAiNonStrict => object(vec![
                ("type", Value::String("function".into())),
                (
                    "function",
                    object(vec![
                        ("name", name),
                        ("description", description),
                        ("parameters", schema),
                        ("strict", Value::Bool(dialect == Dialect::OpenAi)),
                    ]),
                ),
            ]),
            Dialect::Anthropic => object(vec![("name", name), ("description", description), ("input_schema", schema)]),
            Dialect::Gemini => {
                let has_parameters = schema.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
                let mut entries = vec![("name", name), ("description", description)];
                if has_parameters {
                    entries.push(("parameters", schema));
                }
                object(entries)
            }
            Dialect::Mcp => object(vec![("name", name), ("description", description), ("inputSchema", schema)]),
        })
    }
}

/// Every definition in `dialect`'s request shape, in order (see [`ToolDefinition::to_dialect`]); the first
/// that cannot be expressed is the error. To fall back per tool instead (say to
/// [`Dialect::OpenAiNonStrict`]), call [`ToolDefinition::to_dialect`] on each.
pub fn definitions_for<'a>(
    dialect: Dialect,
    definitions: impl IntoIterator<Item = &'a ToolDefinition>,
) -> Result<Vec<Value>, DialectError> {
    definitions.into_iter().map(|definition| definition.to_dialect(dialect)).collect()
}

/// Every definition `dialect` can express, in order, and for each one it cannot, why (see
/// [`ToolDefinition::to_dialect`]): one inexpressible tool does not hide the others. For all or nothing, use
/// [`definitions_for`].
pub fn offer_in<'a>(dialect: Dialect, definitions: impl IntoIterator<Item = &'a ToolDefinition>) -> DialectOffer {
    let mut offer = DialectOffer { dialect, definitions: Vec::new(), inexpressible: Vec::new() };
    for definition in definitions {
        match definition.to_dialect(dialect) {
            Ok(value) => offer.definitions.push(value),
            Err(error) => offer.inexpressible.push(error),
        }
    }
    offer
}

/// What [`offer_in`] could offer in one dialect.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DialectOffer {
    /// The dialect asked for.
    pub dialect: Dialect,
    /// The definitions in the dialect's request shape, ready for the request's `tools`.
    pub definitions: Vec<Value>,
    /// One error per tool left out: [`DialectError::tool`] names it, its `Display` says why.
    pub inexpressible: Vec<DialectError>,
}

impl DialectOffer {
    /// Whether every tool could be offered.
    pub fn is_complete(&self) -> bool {
        self.inexpressible.is_empty()
    }

    /// The tools left out, each with the reason, e.g. for a log line.
    pub fn left_out(&self) -> Vec<(&str, String)> {
        self.inexpressible.iter().map(|error| (error.tool().unwrap_or_default(), error.to_string())).collect()
    }

    /// The definitions if every tool could be offered, or the first tool's error.
    pub fn into_complete(self) -> Result<Vec<Value>, DialectError> {
        match self.inexpressible.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(self.definitions),
        }
    }
}

/// A tool (or schema) that cannot be expressed in a dialect: which, where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialectError {
    dialect: Dialect,
    tool: Option<String>,
    pointer: String,
    kind: Inexpressible,
    detail: String,
}

impl DialectError {
    fn new(dialect: Dialect, tool: Option<&str>, failure: Failure) -> Self {
        DialectError {
            dialect,
            tool: tool.map(str::to_owned),
            pointer: failure.pointer,
            kind: failure.kind,
            detail: failure.detail,
        }
    }

    /// The dialect asked for.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The tool, when the error came from a [`ToolDefinition`].
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// Where in the canonical schema (a JSON pointer, empty for the root).
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// What cannot be expressed.
    pub fn kind(&self) -> &Inexpressible {
        &self.kind
    }
}

impl fmt::Display for DialectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tool {
            Some(tool) => write!(f, "tool `{tool}` cannot be offered in the {} dialect: ", self.dialect)?,
            None => write!(f, "the schema cannot be expressed in the {} dialect: ", self.dialect)?,
        }
        f.write_str(&self.detail)?;
        if self.pointer.is_empty() {
            f.write_str(" (at the schema's root)")
        } else {
            write!(f, " (at `{}`)", self.pointer)
        }
    }
}

impl std::error::Error for DialectError {}

/// What a dialect cannot express.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inexpressible {
    /// The root is not an object schema (`type: "object"`).
    RootNotObject,
    /// A combinator at the root (Anthropic and OpenAI refuse `anyOf`/`oneOf`/`allOf` there).
    RootCombinator {
        /// The keyword.
        keyword: String,
    },
    /// An object with arbitrary keys: `additionalProperties` with a schema or `true` (a `HashMap`,
    /// `BTreeMap`, `serde_json::Map`, a `#[serde(flatten)]` map).
    Map,
    /// An object without properties (Gemini requires at least one on nested objects).
    EmptyObject,
    /// A schema that accepts any JSON value (`true`, `{}`), e.g. `serde_json::Value`.
    AnyValue,
    /// The schema `false`, which accepts nothing.
    NoValue,
    /// A value that can only be `null`, e.g. `()` (Gemini has no `null` type).
    OnlyNull,
    /// A tuple whose positions have different types (`prefixItems`).
    Tuple,
    /// A recursive type (a `$ref` within its own definition) where references are not accepted.
    Recursion {
        /// The reference that closes the cycle.
        reference: String,
    },
    /// A `$ref` that does not resolve within the schema's `$defs`.
    UnresolvedReference {
        /// The reference.
        reference: String,
    },
    /// An enum with values other than strings (Gemini).
    NonStringEnum,
    /// A `type` list of several non-null types (Gemini names one type).
    TypeUnion,
    /// A keyword outside the dialect's subset that cannot be dropped without accepting values the tool
    /// rejects (`allOf`, `not`, `if`, ...).
    Keyword {
        /// The keyword.
        keyword: String,
    },
    /// A provider limit on the schema's size.
    Limit {
        /// What is limited.
        limit: &'static str,
        /// The provider's maximum.
        max: usize,
        /// This schema's count.
        actual: usize,
    },
    /// A tool or parameter name the provider rejects.
    Name {
        /// The name.
        name: String,
    },
    /// Not a JSON schema where one was expected.
    Malformed,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Dialect, float_exact_bound};

    #[test]
    fn references_of_other_shapes_are_hoisted_into_defs_for_the_dialects() {
        // Draft-07's `definitions` (recursive) and zod's pointer into the schema's own properties.
        let schema = json!({
            "type": "object",
            "properties": {
                "root": {"$ref": "#/definitions/Node"},
                "edits": {"type": "array", "items": {"type": "object", "properties": {"old": {"type": "string"}}}},
                "backup": {"$ref": "#/properties/edits/items"}
            },
            "definitions": {"Node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/Node"}}}
            }}
        });
        let mcp = Dialect::Mcp.convert(&schema).expect("MCP takes it");
        assert_eq!(mcp["properties"]["root"]["$ref"], "#/$defs/definitions.Node");
        assert_eq!(
            mcp["$defs"]["definitions.Node"]["properties"]["children"]["items"]["$ref"],
            "#/$defs/definitions.Node"
        );
        assert_eq!(mcp["properties"]["backup"]["$ref"], "#/$defs/properties.edits.items");
        assert_eq!(mcp["$defs"]["properties.edits.items"], schema["properties"]["edits"]["items"]);
        assert!(mcp.get("definitions").is_none(), "{mcp}");
        // A schema the dialects already read is left as it is; an unresolvable pointer is still refused.
        let plain =
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}});
        assert_eq!(Dialect::Mcp.convert(&plain).unwrap(), plain);
        assert!(Dialect::Mcp.convert(&json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})).is_err());
    }

    #[test]
    fn bounds_a_float_cannot_hold_move_inward_to_the_nearest_it_can() {
        assert_eq!(float_exact_bound(&json!(u64::MAX), true), Some(json!(18_446_744_073_709_549_568_u64)));
        assert_eq!(float_exact_bound(&json!(i64::MAX), true), Some(json!(9_223_372_036_854_774_784_i64)));
        // 2^53 + 1 is the first integer a float does not hold: up to 2^53 below, 2^53 + 2 above.
        assert_eq!(float_exact_bound(&json!(9_007_199_254_740_993_i64), true), Some(json!(9_007_199_254_740_992_i64)));
        assert_eq!(float_exact_bound(&json!(9_007_199_254_740_993_i64), false), Some(json!(9_007_199_254_740_994_i64)));
        assert_eq!(
            float_exact_bound(&json!(-9_007_199_254_740_993_i64), false),
            Some(json!(-9_007_199_254_740_992_i64))
        );
        for exact in [json!(i64::MIN), json!(0), json!(255), json!(1_u64 << 63), json!(2.5)] {
            assert_eq!(float_exact_bound(&exact, true), None, "{exact}");
            assert_eq!(float_exact_bound(&exact, false), None, "{exact}");
        }
        for (bound, upper) in [(u64::MAX, true), (u64::MAX - 5000, true), (u64::MAX - 5000, false)] {
            let exact = float_exact_bound(&json!(bound), upper).unwrap().as_u64().unwrap();
            assert_eq!(exact as f64 as u64, exact, "a float holds {exact}");
            assert!(if upper { exact < bound } else { exact > bound });
        }
    }
}
