//! An argument given up by the dispatcher, deserialized in place: every string the typed value asks for by
//! value is moved into it, at any depth (a nested object's fields, an array's items), instead of copied.
//!
//! A value that fails is partly moved by then, so it cannot be deserialized again for its error's path, as
//! a lent one is (`serde_path_to_error` over the borrowed value). The path is therefore tracked here, as the
//! value is read, the way `serde_path_to_error` tracks it (the innermost place an error passed through wins;
//! a map's key is captured by what its visitor was given), but with the keys borrowed from the map and the
//! path written out only for an error: a value that parses pays for no path. The outcome (the typed value,
//! or the error's field and text) is the lent one's, which the tests check over generated values and types.
//!
//! Read natively (and so moved): strings asked for as a string (`any`, `str`, `string`), arrays asked for as
//! a sequence (`any`, `seq`), objects asked for as a struct, `Some` and newtypes around those. Everything else
//! (numbers, booleans, enums, maps, tuples, objects asked for by `any`) is answered by the borrowed value as
//! serde_json answers it, through `serde_path_to_error` where an error can have a path below it, so nothing
//! in it is moved and its path is the one a lent value reports.

use std::borrow::Cow;
use std::cell::Cell;

use serde::de::{self, DeserializeSeed, Deserializer as _, IntoDeserializer, Unexpected, Visitor};
use serde_json::{Error, Map, Value};

/// Where a value sits below its argument: `serde_path_to_error`'s chain, without the links that add no
/// segment (`Some`, newtypes), the keys borrowed.
pub(super) enum Chain<'c> {
    Root,
    Seq { parent: &'c Chain<'c>, index: usize },
    Map { parent: &'c Chain<'c>, key: Captured<'c> },
}

/// A map's key as `serde_path_to_error` captures it: what its visitor was given (a string, an integer's
/// digits, `true`/`false`), or nothing (`?` in the path).
pub(super) enum Captured<'c> {
    Borrowed(&'c str),
    Owned(String),
    Unknown,
}

/// The path of the first (innermost) place an error passed through, written out then.
#[derive(Default)]
pub(super) struct Track {
    path: Cell<Option<String>>,
}

impl Track {
    fn trigger(&self, chain: &Chain<'_>, err: Error) -> Error {
        self.trigger_with(chain, None, err)
    }

    #[cold]
    fn trigger_with(&self, chain: &Chain<'_>, inner: Option<&serde_path_to_error::Path>, err: Error) -> Error {
        let path = match self.path.take() {
            Some(already) => already,
            None => render(chain, inner),
        };
        self.path.set(Some(path));
        err
    }

    /// The path as `serde_path_to_error::Path` displays it (`.` for the argument itself).
    pub(super) fn into_path(self) -> String {
        self.path.into_inner().unwrap_or_else(|| ".".to_owned())
    }
}

/// One segment of a path.
enum Segment<'s> {
    Index(usize),
    Key(&'s str),
    Unknown,
}

/// `chain`, then the path `inner` found below it, as `serde_path_to_error::Path` displays them.
#[cold]
fn render(chain: &Chain<'_>, inner: Option<&serde_path_to_error::Path>) -> String {
    let mut segments = Vec::new();
    let mut link = chain;
    loop {
        match link {
            Chain::Root => break,
            Chain::Seq { parent, index } => {
                segments.push(Segment::Index(*index));
                link = parent;
            }
            Chain::Map { parent, key } => {
                segments.push(match key {
                    Captured::Borrowed(key) => Segment::Key(key),
                    Captured::Owned(key) => Segment::Key(key),
                    Captured::Unknown => Segment::Unknown,
                });
                link = parent;
            }
        }
    }
    segments.reverse();
    for segment in inner.into_iter().flatten() {
        segments.push(match segment {
            serde_path_to_error::Segment::Seq { index } => Segment::Index(*index),
            serde_path_to_error::Segment::Map { key } | serde_path_to_error::Segment::Enum { variant: key } => {
                Segment::Key(key)
            }
            _ => Segment::Unknown,
        });
    }
    if segments.is_empty() {
        return ".".to_owned();
    }
    let mut path = String::new();
    let mut separator = "";
    for segment in segments {
        match segment {
            Segment::Index(index) => path.push_str(&format!("[{index}]")),
            Segment::Key(key) => {
                path.push_str(separator);
                path.push_str(key);
            }
            Segment::Unknown => {
                path.push_str(separator);
                path.push('?');
            }
        }
        separator = ".";
    }
    path
}

/// A given-up value, deserialized as serde_json deserializes a `&Value`, except that what is read natively
/// (see the module) moves its strings out, an empty string left in each place.
pub(super) struct Given<'a, 'c> {
    pub(super) value: &'a mut Value,
    pub(super) chain: &'c Chain<'c>,
    pub(super) track: &'c Track,
}

/// Answers `deserialize_$name` from the borrowed value: nothing below it has a path of its own.
macro_rules! lend {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $name<V: Visitor<'a>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Error> {
                let (chain, track) = (self.chain, self.track);
                let value: &'a Value = self.value;
                value.$name($($arg,)* visitor).map_err(|err| track.trigger(chain, err))
            }
        )*
    };
}

/// Answers `deserialize_$name` from the borrowed value through `serde_path_to_error`, for the path below it.
macro_rules! lend_tracked {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $name<V: Visitor<'a>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Error> {
                let value: &'a Value = self.value;
                lent(value, self.chain, self.track, |de| de.$name($($arg,)* visitor))
            }
        )*
    };
}

/// `deserialize` on the borrowed `value` wrapped in `serde_path_to_error`; an error's path is `chain`'s, then
/// the one found below it.
fn lent<'a, T>(
    value: &'a Value,
    chain: &Chain<'_>,
    track: &Track,
    deserialize: impl FnOnce(serde_path_to_error::Deserializer<'_, '_, &'a Value>) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut inner = serde_path_to_error::Track::new();
    match deserialize(serde_path_to_error::Deserializer::new(value, &mut inner)) {
        Ok(parsed) => Ok(parsed),
        Err(err) => Err(track.trigger_with(chain, Some(&inner.path()), err)),
    }
}

impl<'a> Given<'a, '_> {
    /// The string, an empty one left in its place.
    fn take(value: &mut Value) -> String {
        match value {
            Value::String(string) => std::mem::take(string),
            _ => String::new(),
        }
    }

    /// A string moved to the visitor, or what the borrowed value answers for anything else.
    fn string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        let (chain, track) = (self.chain, self.track);
        let result = if self.value.is_string() {
            visitor.visit_string(Self::take(self.value))
        } else {
            let value: &'a Value = self.value;
            value.deserialize_str(visitor)
        };
        result.map_err(|err| track.trigger(chain, err))
    }
}

impl<'a> de::Deserializer<'a> for Given<'a, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::String(_) => self.string(visitor),
            Value::Array(_) => self.deserialize_seq(visitor),
            _ => {
                let value: &'a Value = self.value;
                lent(value, self.chain, self.track, |de| de.deserialize_any(visitor))
            }
        }
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        self.string(visitor)
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        self.string(visitor)
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        let (chain, track) = (self.chain, self.track);
        match self.value {
            Value::Null => visitor.visit_none(),
            // Not `null`: serde_json's `Some`, which adds nothing to the path.
            _ => visitor.visit_some(self),
        }
        .map_err(|err| track.trigger(chain, err))
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        // serde_json's raw value (feature `raw_value`) is read from the borrowed value, as serde_json does.
        if name.starts_with("$serde_json") {
            let value: &'a Value = self.value;
            return lent(value, self.chain, self.track, |de| de.deserialize_newtype_struct(name, visitor));
        }
        let (chain, track) = (self.chain, self.track);
        visitor.visit_newtype_struct(self).map_err(|err| track.trigger(chain, err))
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        let (chain, track) = (self.chain, self.track);
        match self.value {
            Value::Array(items) => {
                let len = items.len();
                let mut seq = GivenSeq { items: items.iter_mut(), index: 0, chain, track };
                match visitor.visit_seq(&mut seq) {
                    Ok(parsed) if seq.items.len() == 0 => Ok(parsed),
                    Ok(_) => Err(de::Error::invalid_length(len, &"fewer elements in array")),
                    Err(err) => Err(err),
                }
            }
            other => {
                let value: &'a Value = other;
                value.deserialize_seq(visitor)
            }
        }
        .map_err(|err| track.trigger(chain, err))
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let (chain, track) = (self.chain, self.track);
        match self.value {
            Value::Object(map) => {
                let len = map.len();
                let mut access =
                    GivenMap { entries: map.iter_mut(), value: None, key: Captured::Unknown, chain, track };
                match visitor.visit_map(&mut access) {
                    Ok(parsed) if access.entries.len() == 0 => Ok(parsed),
                    Ok(_) => Err(de::Error::invalid_length(len, &"fewer elements in map")),
                    Err(err) => Err(err),
                }
                .map_err(|err| track.trigger(chain, err))
            }
            other => {
                let value: &'a Value = other;
                lent(value, chain, track, |de| de.deserialize_struct(name, fields, visitor))
            }
        }
    }

    lend! {
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    lend_tracked! {
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
    }
}

/// A given-up array's items, each given up in turn (serde_json's `SeqRefDeserializer`, tracked).
struct GivenSeq<'a, 'c> {
    items: std::slice::IterMut<'a, Value>,
    index: usize,
    chain: &'c Chain<'c>,
    track: &'c Track,
}

impl<'a> de::SeqAccess<'a> for GivenSeq<'a, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        let Some(value) = self.items.next() else { return Ok(None) };
        let chain = Chain::Seq { parent: self.chain, index: self.index };
        self.index += 1;
        let track = self.track;
        seed.deserialize(Given { value, chain: &chain, track }).map(Some).map_err(|err| track.trigger(&chain, err))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// A given-up object's entries, each value given up in turn (serde_json's `MapRefDeserializer`, its keys
/// captured for the path as `serde_path_to_error` captures them).
struct GivenMap<'a, 'c> {
    entries: serde_json::map::IterMut<'a>,
    value: Option<&'a mut Value>,
    key: Captured<'a>,
    chain: &'c Chain<'c>,
    track: &'c Track,
}

impl<'a> de::MapAccess<'a> for GivenMap<'a, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        match seed.deserialize(Key { key, captured: Some(&mut self.key) }) {
            Ok(parsed) => Ok(Some(parsed)),
            Err(err) => {
                let key = std::mem::replace(&mut self.key, Captured::Unknown);
                Err(self.track.trigger(&Chain::Map { parent: self.chain, key }, err))
            }
        }
    }

    fn next_value_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let chain = Chain::Map { parent: self.chain, key: std::mem::replace(&mut self.key, Captured::Unknown) };
        let track = self.track;
        match self.value.take() {
            Some(value) => {
                seed.deserialize(Given { value, chain: &chain, track }).map_err(|err| track.trigger(&chain, err))
            }
            None => Err(de::Error::custom("value is missing")),
        }
        .map_err(|err| track.trigger(self.chain, err))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A key of a given-up object: serde_json's `MapKeyDeserializer` over the borrowed key, capturing it as
/// `serde_path_to_error` does where its visitor is handed it (`captured`, absent inside `Some` and newtypes,
/// which `serde_path_to_error` does not look into).
struct Key<'a, 'k> {
    key: &'a str,
    captured: Option<&'k mut Captured<'a>>,
}

impl<'a> Key<'a, '_> {
    #[inline]
    fn capture(&mut self, key: Captured<'a>) {
        if let Some(captured) = self.captured.as_deref_mut() {
            *captured = key;
        }
    }

    fn borrowed<V: Visitor<'a>>(mut self, visitor: V) -> Result<V::Value, Error> {
        self.capture(Captured::Borrowed(self.key));
        visitor.visit_borrowed_str(self.key)
    }

    /// A number read from the key, as serde_json reads one (its text parsed as JSON, nothing after it): through
    /// a map of that one key, by value, so the parse and its errors are serde_json's own.
    #[cold]
    fn numeric<V: Visitor<'a>>(self, kind: Numeric, visitor: V) -> Result<V::Value, Error> {
        let mut map = Map::new();
        map.insert(self.key.to_owned(), Value::Null);
        let mut captured = None;
        let parsed = de::Deserializer::deserialize_any(map, OneKey { kind, visitor, captured: &mut captured });
        if let (Some(key), Some(slot)) = (captured, self.captured) {
            *slot = Captured::Owned(key);
        }
        parsed
    }
}

macro_rules! borrowed_key {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $name<V: Visitor<'a>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Error> {
                $(let _ = $arg;)*
                self.borrowed(visitor)
            }
        )*
    };
}

macro_rules! numeric_key {
    ($($name:ident => $kind:ident;)*) => {
        $(
            fn $name<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
                self.numeric(Numeric::$kind, visitor)
            }
        )*
    };
}

impl<'a> de::Deserializer<'a> for Key<'a, '_> {
    type Error = Error;

    fn deserialize_bool<V: Visitor<'a>>(mut self, visitor: V) -> Result<V::Value, Error> {
        match self.key {
            "true" | "false" => {
                self.capture(Captured::Borrowed(self.key));
                visitor.visit_bool(self.key == "true")
            }
            _ => Err(de::Error::invalid_type(Unexpected::Str(self.key), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        // Map keys cannot be null.
        visitor.visit_some(Key { key: self.key, captured: None })
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(Key { key: self.key, captured: None })
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let key: de::value::CowStrDeserializer<'a, Error> = Cow::Borrowed(self.key).into_deserializer();
        key.deserialize_enum(name, variants, visitor)
    }

    numeric_key! {
        deserialize_i8 => I8;
        deserialize_i16 => I16;
        deserialize_i32 => I32;
        deserialize_i64 => I64;
        deserialize_i128 => I128;
        deserialize_u8 => U8;
        deserialize_u16 => U16;
        deserialize_u32 => U32;
        deserialize_u64 => U64;
        deserialize_u128 => U128;
        deserialize_f32 => F32;
        deserialize_f64 => F64;
    }

    borrowed_key! {
        deserialize_any();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }
}

/// Which number a key is read as.
#[derive(Clone, Copy)]
enum Numeric {
    I8,
    I16,
    I32,
    I64,
    I128,
    U8,
    U16,
    U32,
    U64,
    U128,
    F32,
    F64,
}

/// Reads the one key of a map as `kind`, with serde_json's own key deserializer.
struct OneKey<'k, V> {
    kind: Numeric,
    visitor: V,
    captured: &'k mut Option<String>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for OneKey<'_, V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.visitor.expecting(formatter)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
        let visitor = CaptureNumber { visitor: self.visitor, captured: self.captured };
        map.next_key_seed(KeySeed { kind: self.kind, visitor })?.ok_or_else(|| de::Error::custom("value is missing"))
    }
}

/// The key, read as `kind`.
struct KeySeed<V> {
    kind: Numeric,
    visitor: V,
}

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for KeySeed<V> {
    type Value = V::Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        let visitor = self.visitor;
        match self.kind {
            Numeric::I8 => deserializer.deserialize_i8(visitor),
            Numeric::I16 => deserializer.deserialize_i16(visitor),
            Numeric::I32 => deserializer.deserialize_i32(visitor),
            Numeric::I64 => deserializer.deserialize_i64(visitor),
            Numeric::I128 => deserializer.deserialize_i128(visitor),
            Numeric::U8 => deserializer.deserialize_u8(visitor),
            Numeric::U16 => deserializer.deserialize_u16(visitor),
            Numeric::U32 => deserializer.deserialize_u32(visitor),
            Numeric::U64 => deserializer.deserialize_u64(visitor),
            Numeric::U128 => deserializer.deserialize_u128(visitor),
            Numeric::F32 => deserializer.deserialize_f32(visitor),
            Numeric::F64 => deserializer.deserialize_f64(visitor),
        }
    }
}

/// A key's visitor, the integer it is handed captured as `serde_path_to_error` captures it (its digits; a
/// float is not captured).
struct CaptureNumber<'k, V> {
    visitor: V,
    captured: &'k mut Option<String>,
}

macro_rules! capture_integer {
    ($($name:ident($ty:ty);)*) => {
        $(
            fn $name<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                *self.captured = Some(v.to_string());
                self.visitor.$name(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for CaptureNumber<'_, V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.visitor.expecting(formatter)
    }

    capture_integer! {
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
    }

    fn visit_f32<E: de::Error>(self, v: f32) -> Result<V::Value, E> {
        self.visitor.visit_f32(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.visitor.visit_f64(v)
    }
}
