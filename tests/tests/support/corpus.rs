//! A corpus of parameter types, each behind a real `#[airlock_tool]` function: what tool authors write, from
//! scalars to recursive types. The dialect and snapshot tests run over all of it.

// The corpus types are read only through `Debug` (the tools echo their arguments), which the lint ignores.
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use agent_airlock::{Dispatcher, ToolDefinition, ToolError, airlock_tool, tool, tool::Tool};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;

/// A postal address.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Address {
    /// Street and number.
    pub street: String,
    /// Postal code, if the country has them.
    pub zip: Option<String>,
    /// ISO country code; empty means the shop's own country.
    #[serde(default)]
    pub country: String,
    #[serde(default = "one")]
    pub floors: u32,
}

fn one() -> u32 {
    1
}

/// One line of an order.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LineItem {
    /// Stock keeping unit.
    pub sku: String,
    pub quantity: u32,
}

/// An order to place.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Order {
    pub id: u64,
    /// What to ship.
    pub lines: Vec<LineItem>,
    pub shipping: Address,
    /// Wrap it as a present.
    #[serde(default)]
    pub gift: bool,
    pub note: Option<String>,
}

/// A colour.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Colour {
    Red,
    /// The colour of go.
    Green,
    DeepBlue,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub enum Plain {
    Yes,
    No,
}

/// A shape (externally tagged).
#[derive(Debug, Deserialize, JsonSchema)]
pub enum Shape {
    Circle { radius: f64 },
    Square(f64),
    Dot,
}

/// Something that happened (internally tagged).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Login { user: String },
    Logout,
}

/// A chat message (adjacently tagged).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "t", content = "c")]
pub enum Message {
    Text(String),
    Ping,
}

/// A number or a word (untagged).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    Number(i64),
    Word(String),
}

/// An RFC 3339 timestamp: a newtype with a hand-written schema, as a chrono type would have.
#[derive(Debug, Deserialize)]
#[serde(try_from = "String")]
pub struct Timestamp(pub String);

impl TryFrom<String> for Timestamp {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        let bytes = text.as_bytes();
        let shaped = bytes.len() >= 20 && bytes[4] == b'-' && bytes[7] == b'-' && bytes[10] == b'T';
        if shaped { Ok(Timestamp(text)) } else { Err(format!("`{text}` is not an RFC 3339 timestamp")) }
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "date-time", "description": "An RFC 3339 timestamp."})
    }
}

/// A time window, with formats given by attributes on plain strings.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Window {
    #[schemars(extend("format" = "date"))]
    pub day: String,
    #[schemars(extend("format" = "uuid"))]
    pub request: String,
    #[schemars(length(min = 1, max = 40), regex(pattern = r"^[a-z]+$"))]
    pub label: String,
}

/// A tree of labels.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Tree {
    pub label: String,
    pub children: Vec<Tree>,
}

/// A linked list.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LinkedNode {
    pub value: i64,
    /// The rest of the list.
    pub next: Option<Box<LinkedNode>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Renamed {
    #[serde(rename = "first-name")]
    pub first_name: String,
}

/// A severity: an integer enum, as `serde_repr` would produce.
#[derive(Debug, Deserialize)]
#[serde(try_from = "u8")]
pub struct Level(pub u8);

impl TryFrom<u8> for Level {
    type Error = String;
    fn try_from(level: u8) -> Result<Self, String> {
        if (1..=3).contains(&level) { Ok(Level(level)) } else { Err(format!("level {level} is not 1, 2 or 3")) }
    }
}

impl JsonSchema for Level {
    fn schema_name() -> Cow<'static, str> {
        "Level".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer", "enum": [1, 2, 3]})
    }
}

/// A record with free-form extra fields.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Record {
    pub id: u64,
    #[serde(flatten)]
    pub extra: HashMap<String, String>,
}

/// A struct without fields.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Marker {}

/// Scalars of every width.
#[airlock_tool]
#[allow(clippy::too_many_arguments)]
pub fn scalars(
    /// Some text.
    text: String,
    flag: bool,
    ratio: f64,
    small: f32,
    tiny: i8,
    count: u64,
    huge: i128,
    index: usize,
    letter: char,
) -> Result<String, ToolError> {
    Ok(format!("{:?}", (text, flag, ratio, small, tiny, count, huge, index, letter)))
}

/// Optional values of every kind.
#[airlock_tool]
pub fn optionals(
    /// What to call the customer.
    nickname: Option<String>,
    limit: Option<u32>,
    address: Option<Address>,
    colour: Option<Colour>,
    plain: Option<Plain>,
    tags: Option<Vec<String>>,
    shape: Option<Shape>,
) -> Result<String, ToolError> {
    Ok(format!("{:?}", (nickname, limit, address, colour, plain, tags, shape)))
}

/// Sequences.
#[airlock_tool]
pub fn collections(
    names: Vec<String>,
    addresses: Vec<Address>,
    unique: HashSet<String>,
    rgb: [u8; 3],
    point: (f64, f64),
) -> Result<String, ToolError> {
    Ok(format!("{:?}", (names, addresses, unique, rgb, point)))
}

/// Place an order.
#[airlock_tool]
pub fn nested(
    /// The order.
    order: Order,
) -> Result<String, ToolError> {
    Ok(format!("{order:?}"))
}

/// Enums without data.
#[airlock_tool]
pub fn unit_enums(colour: Colour, plain: Plain) -> Result<String, ToolError> {
    Ok(format!("{:?}", (colour, plain)))
}

/// Enums with data, in every serde representation.
#[airlock_tool]
pub fn tagged_enums(
    external: Shape,
    internal: Event,
    adjacent: Message,
    untagged: Scalar,
) -> Result<String, ToolError> {
    Ok(format!("{:?}", (external, internal, adjacent, untagged)))
}

/// Maps with arbitrary keys.
#[airlock_tool]
pub fn maps(counts: HashMap<String, u32>, addresses: BTreeMap<String, Address>) -> Result<String, ToolError> {
    Ok(format!("{:?}", (counts, addresses.len())))
}

/// Dates and identifiers.
#[airlock_tool]
pub fn timestamps(
    /// When it happened.
    at: Timestamp,
    window: Window,
) -> Result<String, ToolError> {
    Ok(format!("{:?}", (at, window)))
}

/// Recursive types.
#[airlock_tool]
pub fn recursive(tree: Tree, list: Option<LinkedNode>) -> Result<String, ToolError> {
    Ok(format!("{:?}", (tree, list)))
}

/// Parameters named with raw identifiers.
#[airlock_tool]
pub fn raw_idents(
    /// The kind of thing.
    r#type: String,
    r#match: Option<u32>,
    renamed: Renamed,
) -> Result<String, ToolError> {
    Ok(format!("{:?}", (r#type, r#match, renamed)))
}

/// Takes nothing.
#[airlock_tool]
pub fn no_params() -> Result<String, ToolError> {
    Ok("nothing".to_owned())
}

/// Takes any JSON.
#[airlock_tool]
pub fn any_value(
    /// Whatever the caller wants stored.
    payload: serde_json::Value,
) -> Result<String, ToolError> {
    Ok(payload.to_string())
}

/// Takes a heterogeneous tuple.
#[airlock_tool]
pub fn tuples(pair: (i32, String)) -> Result<String, ToolError> {
    Ok(format!("{pair:?}"))
}

/// Takes an integer enum.
#[airlock_tool]
pub fn integer_enum(level: Level) -> Result<String, ToolError> {
    Ok(format!("{level:?}"))
}

/// Takes a struct with a flattened map.
#[airlock_tool]
pub fn flattened(record: Record) -> Result<String, ToolError> {
    Ok(format!("{record:?}"))
}

/// Takes a struct without fields.
#[airlock_tool]
pub fn empty_struct(marker: Marker) -> Result<String, ToolError> {
    Ok(format!("{marker:?}"))
}

macro_rules! corpus {
    ($($tool:ident),* $(,)?) => {
        /// Every corpus tool, in a stable order.
        pub fn tools() -> Vec<Box<dyn Tool>> {
            vec![$(Box::new(tool!($tool)) as Box<dyn Tool>),*]
        }

        /// A dispatcher holding every corpus tool (only some test files dispatch).
        #[allow(dead_code)]
        pub fn dispatcher() -> Dispatcher {
            Dispatcher::builder()$(.tool(tool!($tool)))*.build().expect("the corpus tools register")
        }
    };
}

corpus![
    scalars,
    optionals,
    collections,
    nested,
    unit_enums,
    tagged_enums,
    maps,
    timestamps,
    recursive,
    raw_idents,
    no_params,
    any_value,
    tuples,
    integer_enum,
    flattened,
    empty_struct,
];

/// The definition of every corpus tool.
pub fn definitions() -> Vec<ToolDefinition> {
    tools().iter().map(|tool| ToolDefinition::of(tool.as_ref())).collect()
}
