//! Gate 3's screen read off the arguments' JSON text, for a call that would pass it unchanged: each
//! top-level value's text found and checked against the compiled schema without building a JSON map, so the
//! tool can deserialize its parameters straight from the text ([`Tool::prepare_text`]).
//!
//! Every value is read as strictly as parsing the text into a map would read it (a string's escapes decoded,
//! a number's value computed), whatever the tool's type then does with it, so a text the map's parse refuses
//! is never admitted because a type skips the part of it that is not JSON.
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
///
/// One pass: each value is read by the screen as the parser reaches it, and where its text lies is told by
/// the keys around it. A key without escapes is borrowed from `text`, so it says where it is: the value after
/// it starts past its closing quote, blanks and colon, and ends before the blanks and comma in front of the
/// next key's opening quote (the last value, before the blanks and closing brace ending the text). The parser
/// has checked that everything between is exactly that punctuation, so the text found is the value's.
pub(crate) fn argument_texts<'t>(
    text: &'t str,
    params: &[ParamSpec],
    schema: &CompiledSchema,
) -> Option<ArgumentTexts<'t>> {
    // (The dispatcher asks only for a tool whose schema `reads_text`; a root that is not one closed object, or
    // a parameter past the texts' room, still leaves it here.)
    let root = schema.only_object(ROOT).filter(|root| root.closed)?;
    let mut top = TopLevel { schema, root, params, text, texts: ArgumentTexts::new(), open: None };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.deserialize_map(&mut top).ok()?;
    deserializer.end().ok()?;
    // The last value ends before the closing brace, the last byte of the text but blanks.
    if let Some(open) = top.open.take() {
        let brace = blanks_before(text.as_bytes(), text.len()).checked_sub(1)?;
        (text.as_bytes()[brace] == b'}').then_some(())?;
        top.close(open, brace, false)?;
    }
    Some(top.texts)
}

/// Whether `byte` is one of JSON's blanks, which may surround every value and punctuation mark.
fn blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// Where the blanks right before `end` in `bytes` start.
fn blanks_before(bytes: &[u8], mut end: usize) -> usize {
    while end > 0 && blank(bytes[end - 1]) {
        end -= 1;
    }
    end
}

/// Where the blanks from `start` in `bytes` end.
fn blanks_after(bytes: &[u8], mut start: usize) -> usize {
    while start < bytes.len() && blank(bytes[start]) {
        start += 1;
    }
    start
}

/// Refuses to read on: the arguments are left to the screen of the parsed map. Its text is never shown.
fn not_here<E: de::Error>() -> E {
    E::custom("left to the screen")
}

/// The top-level object: each key a declared parameter, sent once, its value screened and its text kept.
struct TopLevel<'s, 'de> {
    schema: &'s CompiledSchema,
    root: &'s Leaf,
    params: &'s [ParamSpec],
    text: &'de str,
    texts: ArgumentTexts<'de>,
    /// The value read last, whose end is known only at the next key or the text's end: its parameter's
    /// position and where its text starts.
    open: Option<(usize, usize)>,
}

impl<'de> TopLevel<'_, 'de> {
    /// Where the borrowed `key` starts in the text, checked: inside it, between quotes.
    fn key_at(&self, key: &str) -> Option<usize> {
        let at = (key.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        let bytes = self.text.as_bytes();
        let quoted = at >= 1 && bytes.get(at - 1) == Some(&b'"') && bytes.get(at + key.len()) == Some(&b'"');
        quoted.then_some(at)
    }

    /// Keeps the text of the value `open` found, which ends before `end` (and, unless it is the last, before
    /// the comma there).
    fn close(&mut self, (position, start): (usize, usize), end: usize, comma: bool) -> Option<()> {
        let bytes = self.text.as_bytes();
        let mut end = blanks_before(bytes, end);
        if comma {
            (end > 0 && bytes[end - 1] == b',').then_some(())?;
            end = blanks_before(bytes, end - 1);
        }
        let value = self.text.get(start..end).filter(|value| !value.is_empty())?;
        self.texts.set(position, value).then_some(())
    }
}

impl<'de> Visitor<'de> for &mut TopLevel<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut at = 0;
        while let Some(key) = map.next_key::<&'de str>()? {
            let key_at = self.key_at(key).ok_or_else(not_here)?;
            if let Some(open) = self.open.take() {
                self.close(open, key_at - 1, true).ok_or_else(not_here)?;
            }
            let property = self.root.property(key, at).ok_or_else(not_here)?;
            let position = crate::args::position(self.params, at, key).ok_or_else(not_here)?;
            // The value starts past the key's closing quote, the colon and the blanks around it.
            let bytes = self.text.as_bytes();
            let colon = blanks_after(bytes, key_at + key.len() + 1);
            if bytes.get(colon) != Some(&b':') {
                return Err(not_here());
            }
            let start = blanks_after(bytes, colon + 1);
            // `null` counts as absent: the screen drops it (or keeps it), which is its business.
            if bytes.get(start) == Some(&b'n') {
                return Err(not_here());
            }
            map.next_value_seed(Screen { schema: self.schema, node: Some(property.schema), depth: 1 })?;
            self.open = Some((position, start));
            at += 1;
        }
        Ok(())
    }
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
