//! Gate 3's screen read off the arguments' JSON text, for a call that would pass it unchanged: each
//! top-level value's text found and checked against the compiled schema without building a JSON map, so the
//! tool can deserialize its parameters straight from the text ([`Tool::prepare_text`]).
//!
//! Every byte of the text is read as strictly as parsing it into a map would read it: a value's text found
//! by skipping it (which does not decode a string's escapes or a number's value) is read whole again here
//! unless what was skipped needs no more (see `TopLevel`), so a text the map's parse refuses is never
//! admitted because a tool's type ignores the part of it that is not JSON.
//!
//! It answers only "the screen would admit these arguments as they are"; anything else (a ghost at any depth
//! the schema closes, a key sent twice at the top level, a top-level `null`, a set, a union of object or
//! array alternatives, an integer too large for a 64-bit one or `-0` (which serde_json reads as floats, and
//! a 128-bit integer type read from the text would not), nesting past [`MAX_ARGUMENT_DEPTH`], an
//! escaped key, text that is not one JSON object) is `None`, and the dispatcher screens the parsed map as
//! before, which words the refusal or strips. So it can be stricter than the screen, never looser.
//!
//! [`Tool::prepare_text`]: crate::tool::Tool::prepare_text

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::compiled_schema::{CompiledSchema, Kind, Leaf, NodeId, ROOT};
use crate::args::MAX_ARGUMENT_DEPTH;
use crate::tool::{ArgumentTexts, MAX_TEXT_PARAMS, ParamSpec};

/// The smallest magnitude of an integer a 64-bit integer cannot hold: serde_json reads one as a float,
/// where a parameter of a 128-bit type read from the text would hold it exactly (and from the map would not).
const BEYOND_64_BITS: f64 = 9_223_372_036_854_775_808.0;

impl CompiledSchema {
    /// The one object alternative the place `id` stands for; `None` when it is open, or stands for none or
    /// several.
    fn only_object(&self, id: NodeId) -> Option<&Leaf> {
        match &*self.alternatives(&[id], Kind::Object)? {
            [only] => Some(&self.leaves[*only]),
            _ => None,
        }
    }

    /// Whether a call's arguments can be read from their text: the schema's root is one closed object.
    pub(crate) fn reads_text(&self, params: &[ParamSpec]) -> bool {
        params.len() <= MAX_TEXT_PARAMS && self.only_object(ROOT).is_some_and(|root| root.closed)
    }
}

/// The text of each of `params`' values in `text`, when gate 3's screen against `schema` would admit the
/// arguments `text` parses to unchanged (see the module's documentation); `None` otherwise.
pub(crate) fn argument_texts<'t>(
    text: &'t str,
    params: &[ParamSpec],
    schema: &CompiledSchema,
) -> Option<ArgumentTexts<'t>> {
    if !schema.reads_text(params) {
        return None;
    }
    let root = schema.only_object(ROOT)?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let texts = deserializer.deserialize_map(TopLevel { schema, root, params }).ok()?;
    deserializer.end().ok()?;
    Some(texts)
}

/// Refuses to read on: the arguments are left to the screen of the parsed map. Its text is never shown.
fn not_here<E: de::Error>() -> E {
    E::custom("left to the screen")
}

/// The top-level object: each key a declared parameter, sent once, its value's text kept and screened.
struct TopLevel<'s> {
    schema: &'s CompiledSchema,
    root: &'s Leaf,
    params: &'s [ParamSpec],
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = ArgumentTexts<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut texts = ArgumentTexts::new();
        let mut at = 0;
        while let Some(key) = map.next_key::<&'de str>()? {
            let property = self.root.property(key, at).ok_or_else(not_here)?;
            let position = crate::args::position(self.params, at, key).ok_or_else(not_here)?;
            let value: &'de RawValue = map.next_value()?;
            let value = value.get();
            match value.as_bytes().first() {
                // `null` counts as absent: the screen drops it (or keeps it), which is its business.
                Some(b'n') | None => return Err(not_here()),
                // What the text was checked for as it was read: `true`, `false`, a string without escapes, a
                // plain integer of up to 18 characters (none that long reaches 2^63) other than `-0`.
                Some(b't' | b'f') => {}
                Some(b'"') if memchr::memchr(b'\\', value.as_bytes()).is_none() => {}
                Some(b'-' | b'0'..=b'9') if plain_integer(value) => {}
                // Anything else is read whole: a container against its schema, a string's escapes decoded (a
                // lone surrogate is not JSON), a number's value (`1e400` is out of range) and size.
                Some(_) => screen(value, self.schema, Some(property.schema))?,
            }
            if !texts.set(position, value) {
                return Err(not_here());
            }
            at += 1;
        }
        Ok(texts)
    }
}

/// Whether a number's text (as serde_json found it) is an integer it reads as one of 64 bits: digits, a
/// leading `-`, at most 18 characters, not `-0`.
fn plain_integer(number: &str) -> bool {
    let digits = number.strip_prefix('-').unwrap_or(number);
    number.len() <= 18 && digits.bytes().all(|b| b.is_ascii_digit()) && !(digits == "0" && number.starts_with('-'))
}

/// Screens one top-level value's text (an object, an array or a number) against the place `node`.
fn screen<E: de::Error>(text: &str, schema: &CompiledSchema, node: Option<NodeId>) -> Result<(), E> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    Screen { schema, node, depth: 1 }.deserialize(&mut deserializer).map_err(|_| not_here())
}

/// One value at `depth` (a top-level value is at 1) against the place `node`; `None`: a place nothing below
/// is screened at (an open schema, or none for that kind of value), where only the depth and the integers'
/// size are read.
struct Screen<'s> {
    schema: &'s CompiledSchema,
    node: Option<NodeId>,
    depth: usize,
}

impl Screen<'_> {
    fn below(&self, node: Option<NodeId>) -> Self {
        Screen { schema: self.schema, node, depth: self.depth + 1 }
    }

    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.depth > MAX_ARGUMENT_DEPTH { Err(not_here()) } else { Ok(()) }
    }

    /// The alternatives of `kind` here, as the walk sees them: `Ok(None)` when nothing below is screened,
    /// the one alternative, or not here (several).
    fn only<E: de::Error>(&self, kind: Kind) -> Result<Option<&Leaf>, E> {
        self.scalar()?;
        let Some(node) = self.node else { return Ok(None) };
        match self.schema.alternatives(&[node], kind).as_deref() {
            None | Some([]) => Ok(None),
            Some([only]) => Ok(Some(&self.schema.leaves[*only])),
            Some(_) => Err(not_here()),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Screen<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Screen<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<(), E> {
        // serde_json reads `-0` as the float -0.0 (keeping its sign) where a 128-bit integer read from the
        // text is 0; and an integer past 64 bits as a float where such a one holds it.
        if value.abs() >= BEYOND_64_BITS || (value == 0.0 && value.is_sign_negative()) {
            return Err(not_here());
        }
        self.scalar()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let leaf = self.only(Kind::Object)?;
        let mut at = 0;
        while let Some(key) = map.next_key::<&'de str>()? {
            let node = match leaf {
                None => None,
                Some(leaf) => match leaf.property(key, at) {
                    Some(property) => Some(property.schema),
                    None if leaf.closed => return Err(not_here()),
                    None => leaf.additional,
                },
            };
            map.next_value_seed(self.below(node))?;
            at += 1;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let leaf = self.only(Kind::Array)?;
        if leaf.is_some_and(|leaf| leaf.unique_items) {
            return Err(not_here());
        }
        let mut index = 0;
        while seq.next_element_seed(self.below(leaf.and_then(|leaf| leaf.item_schema(index))))?.is_some() {
            index += 1;
        }
        Ok(())
    }
}
