//! Arguments from the model: the screen of gate 3 (object, depth, undeclared keys at every depth the
//! schema closes, repeated set items, nulls) and strict deserialization with every bad field named. What a
//! refusal says about them lives with the dispatcher's other refusal wording.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Inject, Invocation};
use crate::dialect::Dialect;
use crate::echo;
use crate::tool::{ArgumentError, ArgumentErrors, Arguments, GhostPolicy, ParamSpec, ToolSpec};

mod given;
pub(crate) mod nested;
pub(crate) mod unique;

pub(crate) use nested::{CompiledSchema, Duplicate, Ghost, OutOfRange, argument_texts};

pub(crate) use crate::tool::MAX_ARGUMENT_DEPTH;

/// How many ghosts a refusal names; the rest are counted.
pub(crate) const MAX_LISTED: usize = 16;

/// Arguments that passed the screen of gate 3 (shape, undeclared keys, repeated set items).
#[derive(Debug)]
pub(crate) struct Screened {
    pub(crate) arguments: Arguments,
    /// The paths of the keys stripped, each capped for display (`address.zipcode`).
    pub(crate) stripped: Vec<String>,
}

/// Why arguments did not pass the screen.
#[derive(Debug)]
pub(crate) enum ScreeningError {
    NotAnObject(&'static str),
    TooDeep,
    Ghosts(Vec<Ghost>),
    Duplicates(Vec<Duplicate>),
    /// Integers beyond the bounds the call's dialect states (inside the canonical ones).
    OutOfRange(Vec<OutOfRange>),
}

/// Checks the shape, strips (or, with `ghost` [`GhostPolicy::Block`], refuses) undeclared keys at every
/// depth the tool's canonical `schema` closes (the top level included), refuses repeated items where it
/// says `uniqueItems`, and drops top-level `null`s, which count as absent. `ghost` is the tool's own, or
/// the policy's if stricter. A call in a `dialect` is held to that dialect's schema instead where the two
/// differ: repeated set items count once where it cannot say `uniqueItems`, and integers keep to the bounds
/// it states where its SDK holds them as floats. `schema` is compiled once, when the dispatcher is built.
pub(crate) fn screen(
    arguments: Value,
    spec: &ToolSpec,
    schema: &CompiledSchema,
    ghost: GhostPolicy,
    dialect: Option<Dialect>,
) -> Result<Screened, ScreeningError> {
    let mut map = match arguments {
        Value::Object(map) => map,
        // Some providers send no arguments at all for a tool without parameters.
        Value::Null => Arguments::new(),
        Value::String(_) => {
            return Err(ScreeningError::NotAnObject("a string (malformed JSON text?)"));
        }
        Value::Array(items) => {
            discard(Value::Array(items));
            return Err(ScreeningError::NotAnObject("an array"));
        }
        Value::Bool(_) => return Err(ScreeningError::NotAnObject("a boolean")),
        Value::Number(_) => return Err(ScreeningError::NotAnObject("a number")),
    };
    if exceeds_depth(&map, MAX_ARGUMENT_DEPTH) {
        discard(Value::Object(map));
        return Err(ScreeningError::TooDeep);
    }
    // The top level is walked like any other object, so a schema that leaves it open (a tool defined by a
    // schema may) keeps keys it does not declare; every typed tool's schema closes it.
    let mut walk = nested::Walk::new(schema, ghost == GhostPolicy::Strip).in_dialect(dialect);
    walk.arguments(&mut map);
    // `null` counts as absent, except for an argument that must be sent and may be `null` (a schema can
    // say so; a typed parameter that accepts `null` is never required).
    // (Looked for first: a map with no `null`, the usual case, is not rewritten.)
    if map.values().any(Value::is_null) {
        // The names kept with `null`, gathered once (a lookup per key is quadratic for a tool with many
        // parameters, as one defined by an upstream's schema can have); usually none, and then nothing allocated.
        let kept: std::collections::HashSet<&str> =
            spec.params().iter().filter(|p| p.is_required() && p.accepts_null()).map(|p| p.name()).collect();
        map.retain(|key, value| !value.is_null() || kept.contains(key.as_str()));
    }
    let ghosts = walk.ghosts;
    if ghost == GhostPolicy::Block && !ghosts.is_empty() {
        return Err(ScreeningError::Ghosts(ghosts));
    }
    if !walk.duplicates.is_empty() {
        return Err(ScreeningError::Duplicates(walk.duplicates));
    }
    if !walk.out_of_range.is_empty() {
        return Err(ScreeningError::OutOfRange(walk.out_of_range));
    }
    // A path short enough to show as it is (the usual case) is kept, not copied.
    let stripped = ghosts
        .into_iter()
        .map(|ghost| {
            let capped = match echo::fragment(&ghost.path) {
                Cow::Owned(capped) => Some(capped),
                Cow::Borrowed(_) => None,
            };
            capped.unwrap_or(ghost.path)
        })
        .collect();
    Ok(Screened { arguments: map, stripped })
}

/// Drops `value` with bounded recursion: serde_json's own drop recurses once per level, so a value nested a
/// million levels deep (which a host can build, though no parser would produce it) would overflow the stack.
/// Up to [`MAX_ARGUMENT_DEPTH`] levels (every argument object a model sends in practice) it recurses, with no
/// heap of its own; a subtree below that is dropped from a stack on the heap.
pub(crate) fn discard(value: Value) {
    discard_at(value, 0);
}

fn discard_at(value: Value, depth: usize) {
    match value {
        Value::Array(items) if depth < MAX_ARGUMENT_DEPTH => {
            items.into_iter().for_each(|item| discard_at(item, depth + 1));
        }
        Value::Object(map) if depth < MAX_ARGUMENT_DEPTH => {
            map.into_iter().for_each(|(_, child)| discard_at(child, depth + 1));
        }
        deep @ (Value::Array(_) | Value::Object(_)) => discard_deep(deep),
        _ => {}
    }
}

/// [`discard`] below the depth it recurses to: iterative, its stack on the heap.
#[cold]
fn discard_deep(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, child)| child)),
            _ => {}
        }
    }
}

/// Whether any of `roots`, each at the depth given with it, holds a value deeper than `limit`. Iterative, so
/// a hostile nesting cannot exhaust the stack here.
#[cfg_attr(not(feature = "json-tool"), allow(dead_code))]
pub(crate) fn nests_deeper_than<'a>(roots: impl IntoIterator<Item = (&'a Value, usize)>, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = roots.into_iter().collect();
    while let Some((value, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    false
}

/// Whether the arguments (their values at depth 1) nest deeper than `limit`. Recursive but bounded: it
/// descends at most `limit` levels before answering, so it needs no heap and a small stack (the limit is
/// [`MAX_ARGUMENT_DEPTH`] on the dispatch path).
fn exceeds_depth(map: &Arguments, limit: usize) -> bool {
    /// Whether `value`, at `depth`, or anything in it lies deeper than `limit`. A scalar is answered without
    /// a call (most values are), a container by one.
    #[inline(always)]
    fn deeper(value: &Value, depth: usize, limit: usize) -> bool {
        match value {
            Value::Array(_) | Value::Object(_) => container_deeper(value, depth, limit),
            _ => depth > limit,
        }
    }
    fn container_deeper(value: &Value, depth: usize, limit: usize) -> bool {
        if depth > limit {
            return true;
        }
        match value {
            Value::Array(items) => items.iter().any(|item| deeper(item, depth + 1, limit)),
            Value::Object(map) => map.values().any(|child| deeper(child, depth + 1, limit)),
            _ => false,
        }
    }
    map.values().any(|value| deeper(value, 1, limit))
}

/// The argument `key` of `args`, as [`argument_value`] deserializes it.
#[cfg(test)]
pub(crate) fn argument<T: DeserializeOwned>(args: &Arguments, key: &str, errors: &mut ArgumentErrors) -> Option<T> {
    argument_value(args.get(key).map(ArgumentSlot::Lent), key, errors)
}

/// The value sent for one argument, as the generated `prepare` found it: lent by arguments the dispatcher still reads
/// after gate 4, or given by arguments it gave up (a string in it, at any depth, is moved into the typed value,
/// not copied).
#[derive(Debug)]
pub enum ArgumentSlot<'a> {
    /// Borrowed: deserialized from the reference.
    Lent(&'a Value),
    /// Given up: its strings may be taken (an empty one is left in each place).
    Given(&'a mut Value),
}

/// Deserializes the value sent for the argument `key` (`None`: absent, as [`slots`] found it) strictly
/// (`"5"` is not a number, `5.0` is not an integer). Absent means `null`, which only a type like
/// `Option<T>` accepts.
///
/// A lent value is deserialized plainly first: only one that fails is deserialized again with its path
/// tracked (the tracker copies every key it passes), so an argument that parses pays for no path. A value
/// given up is deserialized in place (`given`): the strings the typed value takes by value are moved into it
/// at any depth, and the path of an error is tracked as it is read, written out only for an error. Either
/// way a value that fails is reported the same.
pub(crate) fn argument_value<T: DeserializeOwned>(
    slot: Option<ArgumentSlot<'_>>,
    key: &str,
    errors: &mut ArgumentErrors,
) -> Option<T> {
    let value: &Value = match slot {
        Some(ArgumentSlot::Given(value)) => return given_value(value, key, errors),
        Some(ArgumentSlot::Lent(value)) => value,
        None => &Value::Null,
    };
    if let Ok(parsed) = T::deserialize(value) {
        return Some(parsed);
    }
    tracked(value, key, errors)
}

/// A top-level argument sent as a JSON string without escapes, from the text between its quotes: given to the
/// parameter's type as [`argument_value`] gives a string the map holds, so it reads the same value the same way
/// (`Tool::prepare_text`, whose call must be the one the map's way prepares). `None` when it does not deserialize.
pub(crate) fn plain_string_argument<T: DeserializeOwned>(unquoted: &str) -> Option<T> {
    let mut value = Value::String(unquoted.to_owned());
    let track = given::Track::default();
    T::deserialize(given::Given { value: &mut value, chain: &given::Chain::Root, track: &track }).ok()
}

/// A value given up, deserialized in place (see [`argument_value`]).
fn given_value<T: DeserializeOwned>(value: &mut Value, key: &str, errors: &mut ArgumentErrors) -> Option<T> {
    let track = given::Track::default();
    match T::deserialize(given::Given { value: &mut *value, chain: &given::Chain::Root, track: &track }) {
        Ok(parsed) => Some(parsed),
        Err(err) => {
            refused(value.is_null(), key, &track.into_path(), err, errors);
            None
        }
    }
}

/// A value that failed, deserialized again with its path tracked, for the error's field.
#[cold]
#[inline(never)]
fn tracked<T: DeserializeOwned>(value: &Value, key: &str, errors: &mut ArgumentErrors) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(parsed) => Some(parsed),
        Err(err) => {
            let path = err.path().to_string();
            refused(value.is_null(), key, &path, err.into_inner(), errors);
            None
        }
    }
}

/// The error of a value that failed at `path` (as `serde_path_to_error` displays it): a `null` (or absent)
/// value is missing, anything else invalid at its field.
#[cold]
fn refused(null: bool, key: &str, path: &str, err: serde_json::Error, errors: &mut ArgumentErrors) {
    if null {
        errors.push(ArgumentError::Missing { field: key.to_owned() });
        return;
    }
    let field = match path {
        "." => key.to_owned(),
        nested if nested.starts_with('[') => format!("{key}{nested}"),
        nested => format!("{key}.{nested}"),
    };
    errors.push(ArgumentError::Invalid { field, message: range_message(err.to_string()) });
}

/// `message.rsplit_once(", expected ")`, found from the last `,` back: a two-way searcher built for each
/// refused argument cost more than the rest of this function.
fn rsplit_at_expected(message: &str) -> Option<(&str, &str)> {
    const SEPARATOR: &str = ", expected ";
    let mut before = message.len();
    while let Some(comma) = message[..before].rfind(',') {
        if message[comma..].starts_with(SEPARATOR) {
            return Some((&message[..comma], &message[comma + SEPARATOR.len()..]));
        }
        before = comma;
    }
    None
}

/// The value sent for each of `params`, at the parameter's position, in one pass over `args` and without
/// hashing a key: each sent key is compared first with the parameter at its own position (a model sends
/// them in declaration order), then with the others. Arguments given up give their values (a string is
/// moved out, not copied); borrowed ones lend them. Keys no parameter has are left out (the screen has
/// stripped or refused them already).
pub(crate) fn slots<'a, const N: usize>(
    args: &'a mut Cow<'_, Arguments>,
    params: &[ParamSpec; N],
) -> [Option<ArgumentSlot<'a>>; N] {
    let mut slots = [const { None }; N];
    match args {
        Cow::Borrowed(args) => {
            for (at, (key, value)) in args.iter().enumerate() {
                if let Some(found) = position(params, at, key) {
                    slots[found] = Some(ArgumentSlot::Lent(value));
                }
            }
        }
        Cow::Owned(args) => {
            for (at, (key, value)) in args.iter_mut().enumerate() {
                if let Some(found) = position(params, at, key) {
                    slots[found] = Some(ArgumentSlot::Given(value));
                }
            }
        }
    }
    slots
}

/// The position of the parameter named `key`, sent at `at`: looked for there first.
#[inline(always)]
pub(crate) fn position(params: &[ParamSpec], at: usize, key: &str) -> Option<usize> {
    match params.get(at) {
        Some(param) if same_name(param.name(), key) => Some(at),
        _ => params.iter().position(|param| param.name() == key),
    }
}

/// Whether two argument or property names are equal: `a == b`, with names of up to 16 bytes (nearly every one)
/// compared by two overlapping word loads each instead of a call to `memcmp` (the screen and `prepare` compare
/// every key sent with the name declared at its position).
#[inline(always)]
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => {
            let word = |s: &[u8], at: usize| u32::from_ne_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
            word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4)
        }
        8..=16 => {
            let word = |s: &[u8], at: usize| {
                let mut bytes = [0; 8];
                bytes.copy_from_slice(&s[at..at + 8]);
                u64::from_ne_bytes(bytes)
            };
            word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

/// Serde's text for an integer outside its type's range (``invalid value: integer `2147483648`, expected
/// i32``, or ``invalid type: floating point `1e20`, expected u64`` for one too large to parse as an
/// integer) restated with the range. Any other text is kept.
fn range_message(message: String) -> String {
    let Some((found, type_name)) = rsplit_at_expected(&message) else { return message };
    let Some((min, max)) = crate::schema::integer_range(type_name) else { return message };
    let number = ["invalid value: integer `", "invalid type: floating point `"]
        .iter()
        .find_map(|prefix| found.strip_prefix(prefix))
        .and_then(|rest| rest.strip_suffix('`'));
    let Some(number) = number else { return message };
    let outside = match number.parse::<i128>() {
        Ok(n) => n < min || n > max,
        // A float: out of range when no integer of the type is that large; otherwise the decimal point
        // (`5.0`) is what serde refused.
        Err(_) => number.parse::<f64>().is_ok_and(|f| f.is_finite() && (f < min as f64 || f > max as f64)),
    };
    if !outside {
        return message;
    }
    // Serde prints large floats in exponent form (`1e+20`); an integral one is shown as the integer sent.
    let integral = number.parse::<f64>().ok().filter(|f| f.fract() == 0.0 && f.abs() < 1e21);
    let shown = match integral {
        Some(f) if number.parse::<i128>().is_err() => format!("{f:.0}"),
        _ => echo::fragment(number).into_owned(),
    };
    format!("`{shown}` is out of range for {type_name}: expected an integer from {min} to {max}")
}

pub(crate) fn inject<T: Inject>(invocation: &Invocation<'_>, param: &str, errors: &mut ArgumentErrors) -> Option<T> {
    match T::inject(invocation) {
        Ok(value) => Some(value),
        Err(err) => {
            errors.push(ArgumentError::Injection { param: param.to_owned(), message: err.to_string() });
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_compare_as_strings_do_at_every_length_and_position() {
        for len in 0..40 {
            let name: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            assert!(same_name(&name, &name.clone()), "{name}");
            // One byte different, at every position: the first and last words overlap in the middle.
            for at in 0..len {
                let mut other = name.clone().into_bytes();
                other[at] = b'Z';
                let other = String::from_utf8(other).expect("ASCII");
                assert!(!same_name(&name, &other), "{name} vs {other}");
                assert!(!same_name(&other, &name), "{other} vs {name}");
            }
            // A prefix or an extension is never the same name.
            assert!(!same_name(&name, &format!("{name}x")), "{name}");
            if len > 0 {
                assert!(!same_name(&name, &name[..len - 1]), "{name}");
            }
        }
        assert!(same_name("région", "région") && !same_name("région", "regi\u{f3}n"));
    }

    #[test]
    fn depth_is_checked_on_a_bounded_stack() {
        let mut deep = json!(1);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        let mut map = Arguments::new();
        map.insert("x".into(), deep);
        assert!(exceeds_depth(&map, MAX_ARGUMENT_DEPTH));
        discard(Value::Object(map));
        let mut shallow = Arguments::new();
        shallow.insert("x".into(), json!({"a": [1, {"b": 2}]}));
        assert!(!exceeds_depth(&shallow, MAX_ARGUMENT_DEPTH));
    }

    #[test]
    fn strict_deserialization_names_the_path() {
        let mut errors = ArgumentErrors::new();
        let args: Arguments = serde_json::from_value(json!({"n": "5", "f": 5.0, "v": [1, "x"]})).unwrap();
        assert_eq!(argument::<u32>(&args, "n", &mut errors), None);
        assert_eq!(argument::<u32>(&args, "f", &mut errors), None);
        assert_eq!(argument::<Vec<u32>>(&args, "v", &mut errors), None);
        assert_eq!(argument::<Option<u32>>(&args, "absent", &mut errors), Some(None));
        assert_eq!(argument::<u32>(&args, "absent", &mut errors), None);
        let fields: Vec<String> = errors
            .errors()
            .iter()
            .map(|e| match e {
                ArgumentError::Invalid { field, .. } | ArgumentError::Missing { field } => field.clone(),
                ArgumentError::Injection { param, .. } => param.clone(),
            })
            .collect();
        assert_eq!(fields, ["n", "f", "v[1]", "absent"]);
        assert!(
            matches!(&errors.errors()[0], ArgumentError::Invalid { message, .. } if message.contains("string \"5\""))
        );
    }

    #[test]
    fn a_million_levels_are_dropped_on_a_small_stack() {
        let thread = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            let mut deep = json!(1);
            for _ in 0..1_000_000 {
                deep = Value::Array(vec![deep]);
            }
            discard(deep);
        });
        thread.expect("a thread starts").join().expect("no stack overflow");
    }

    #[test]
    fn out_of_range_integers_are_refused_with_the_range() {
        let mut errors = ArgumentErrors::new();
        let args: Arguments =
            serde_json::from_value(json!({"a": 2147483648_u64, "b": -1, "c": 1e20, "d": 5.0, "e": 1e300})).unwrap();
        assert_eq!(argument::<i32>(&args, "a", &mut errors), None);
        assert_eq!(argument::<u8>(&args, "b", &mut errors), None);
        assert_eq!(argument::<u64>(&args, "c", &mut errors), None);
        assert_eq!(argument::<u32>(&args, "d", &mut errors), None);
        assert_eq!(argument::<i128>(&args, "e", &mut errors), None);
        let messages: Vec<&str> = errors
            .errors()
            .iter()
            .map(|e| match e {
                ArgumentError::Invalid { message, .. } => message.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            messages[0],
            "`2147483648` is out of range for i32: expected an integer from -2147483648 to 2147483647"
        );
        assert_eq!(messages[1], "`-1` is out of range for u8: expected an integer from 0 to 255");
        assert!(messages[2].starts_with("`100000000000000000000` is out of range for u64"), "{}", messages[2]);
        assert!(!messages[2].contains("floating point"), "{}", messages[2]);
        // In range but written with a decimal point: serde's own words stand.
        assert!(messages[3].contains("floating point"), "{}", messages[3]);
        assert!(messages[4].contains("from -9223372036854775808 to 18446744073709551615"), "{}", messages[4]);
    }

    /// The same value, lent and given up: what `T` it becomes (its `Debug`), the errors, and whether the
    /// string given up was moved out (left empty) or left in place.
    fn lent_and_given<T: DeserializeOwned + std::fmt::Debug>(value: Value) -> (String, Vec<ArgumentError>, bool) {
        let mut lent_errors = ArgumentErrors::new();
        let lent = format!("{:?}", argument_value::<T>(Some(ArgumentSlot::Lent(&value)), "p", &mut lent_errors));
        let mut given_value = value.clone();
        let mut given_errors = ArgumentErrors::new();
        let given =
            format!("{:?}", argument_value::<T>(Some(ArgumentSlot::Given(&mut given_value)), "p", &mut given_errors));
        assert_eq!(lent, given, "{value}");
        assert_eq!(lent_errors.errors(), given_errors.errors(), "{value}");
        let moved = given_value != value;
        (given, given_errors.errors().to_vec(), moved)
    }

    #[test]
    fn a_string_given_up_is_moved_and_read_as_a_lent_one() {
        #[derive(Debug, serde::Deserialize)]
        struct Name(#[allow(dead_code)] String);
        #[derive(Debug, serde::Deserialize)]
        enum Kind {
            Plain,
            Tagged(#[allow(dead_code)] u32),
        }

        // Taken by a type that takes a string by value.
        assert_eq!(lent_and_given::<String>(json!("refund")), ("Some(\"refund\")".into(), vec![], true));
        assert_eq!(lent_and_given::<Option<String>>(json!("a")), ("Some(Some(\"a\"))".into(), vec![], true));
        assert_eq!(lent_and_given::<Name>(json!("a")), ("Some(Name(\"a\"))".into(), vec![], true));
        assert!(lent_and_given::<Value>(json!("a")).2);
        // Read from the borrowed value, which stays whole.
        assert_eq!(lent_and_given::<char>(json!("x")), ("Some('x')".into(), vec![], false));
        assert_eq!(lent_and_given::<Kind>(json!("Plain")), ("Some(Plain)".into(), vec![], false));
        // Refused alike: a string for a number (left in place), a string a type took and could not parse, a
        // unit variant's name given for a variant with content (a path below the string).
        let (_, errors, moved) = lent_and_given::<u32>(json!("5"));
        assert!(!moved);
        assert!(
            matches!(&errors[..], [ArgumentError::Invalid { field, message }] if field == "p" && message.contains("string \"5\""))
        );
        let (_, errors, moved) = lent_and_given::<std::net::IpAddr>(json!("not an address"));
        assert!(moved);
        assert!(matches!(&errors[..], [ArgumentError::Invalid { field, .. }] if field == "p"), "{errors:?}");
        let (_, errors, _) = lent_and_given::<Kind>(json!("Tagged"));
        assert!(matches!(&errors[..], [ArgumentError::Invalid { field, .. }] if field == "p.Tagged"), "{errors:?}");
        let (_, errors, _) = lent_and_given::<Kind>(json!("Other"));
        assert!(matches!(&errors[..], [ArgumentError::Invalid { field, .. }] if field == "p"), "{errors:?}");
    }

    /// Nested types of every kind the given-up path reads natively (structs, sequences, options, newtypes,
    /// strings) or lends (enums, maps, tuples, numbers, `Value`, parsed strings), for the comparisons below.
    mod shapes {
        #![allow(dead_code)]
        use std::collections::BTreeMap;
        use std::net::IpAddr;

        use serde::Deserialize;

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct Customer {
            pub(super) id: String,
            pub(super) tier: String,
            pub(super) region: Option<String>,
            #[serde(default)]
            pub(super) n: u32,
        }

        #[derive(Debug, Deserialize)]
        pub(super) struct Name(pub(super) String);

        #[derive(Debug, Deserialize)]
        pub(super) enum Kind {
            Plain,
            Tagged(u32),
            Named { id: String, n: u8 },
        }

        #[derive(Debug, Deserialize)]
        pub(super) struct Outer {
            pub(super) tags: Vec<String>,
            pub(super) items: Option<Vec<Customer>>,
            #[serde(default)]
            pub(super) kind: Option<Kind>,
            #[serde(default)]
            pub(super) addr: Option<IpAddr>,
            #[serde(default)]
            pub(super) extra: serde_json::Value,
            #[serde(default)]
            pub(super) names: Vec<Name>,
            #[serde(default)]
            pub(super) map: BTreeMap<String, String>,
            #[serde(default)]
            pub(super) pair: Option<(String, u8)>,
        }

        #[derive(Debug, Deserialize)]
        pub(super) struct Flattened {
            pub(super) id: String,
            #[serde(flatten)]
            pub(super) rest: BTreeMap<String, serde_json::Value>,
        }

        /// A struct whose hand-written visitor reads its keys as numbers (serde_json parses them).
        #[derive(Debug)]
        pub(super) struct Numbered(pub(super) Vec<(u8, String)>);

        impl<'de> Deserialize<'de> for Numbered {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visit;
                impl<'de> serde::de::Visitor<'de> for Visit {
                    type Value = Numbered;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("numbered strings")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Numbered, A::Error> {
                        let mut entries = Vec::new();
                        while let Some(key) = map.next_key::<u8>()? {
                            entries.push((key, map.next_value::<String>()?));
                        }
                        Ok(Numbered(entries))
                    }
                }
                deserializer.deserialize_struct("Numbered", &["0", "1"], Visit)
            }
        }
    }

    /// Every shape, lent and given up: the same typed value (or none) and the same errors, field and text.
    fn every_shape_alike(value: &Value) {
        use shapes::*;
        lent_and_given::<String>(value.clone());
        lent_and_given::<Option<String>>(value.clone());
        lent_and_given::<u32>(value.clone());
        lent_and_given::<Vec<String>>(value.clone());
        lent_and_given::<Vec<Option<String>>>(value.clone());
        lent_and_given::<Customer>(value.clone());
        lent_and_given::<Option<Customer>>(value.clone());
        lent_and_given::<Vec<Customer>>(value.clone());
        lent_and_given::<Outer>(value.clone());
        lent_and_given::<Kind>(value.clone());
        lent_and_given::<Vec<Kind>>(value.clone());
        lent_and_given::<Name>(value.clone());
        lent_and_given::<Flattened>(value.clone());
        lent_and_given::<Numbered>(value.clone());
        lent_and_given::<(String, u8)>(value.clone());
        lent_and_given::<std::collections::BTreeMap<String, Vec<String>>>(value.clone());
        lent_and_given::<Vec<std::net::IpAddr>>(value.clone());
        lent_and_given::<Value>(value.clone());
    }

    #[test]
    fn nested_strings_given_up_are_moved_and_read_as_lent_ones() {
        use shapes::*;
        // Moved at every depth the typed value reads natively.
        let customer = json!({"id": "cus_9f8e", "tier": "gold", "region": "eu-west"});
        let (parsed, errors, moved) = lent_and_given::<Customer>(customer.clone());
        assert!(errors.is_empty() && moved, "{parsed}");
        let (_, errors, moved) = lent_and_given::<Vec<String>>(json!(["billing", "refund"]));
        assert!(errors.is_empty() && moved);
        let mut given = json!({"tags": ["a", "b"], "items": [customer.clone()], "names": ["n"], "kind": {"Named": {"id": "x", "n": 1}}});
        let mut errors = ArgumentErrors::new();
        assert!(argument_value::<Outer>(Some(ArgumentSlot::Given(&mut given)), "p", &mut errors).is_some());
        assert_eq!(given["tags"], json!(["", ""]));
        assert_eq!(given["items"][0]["id"], json!(""));
        assert_eq!(given["names"], json!([""]));
        // An enum is read from the borrowed value, whole.
        assert_eq!(given["kind"], json!({"Named": {"id": "x", "n": 1}}));

        // Refused alike, with the same path: below a struct, in an array, past strings already moved.
        let cases = [
            (json!({"id": "a", "tier": 5}), "p.tier"),
            (json!({"id": "a", "tier": "b", "debug": 1}), "p.debug"),
            (json!({"id": "a"}), "p"),
            (json!({"tags": ["a", 1]}), "p.tags[1]"),
            (
                json!({"tags": ["a"], "items": [{"id": "x", "tier": "y"}, {"id": "x", "tier": "y", "n": -1}]}),
                "p.items[1].n",
            ),
            (json!({"tags": [], "kind": {"Named": {"id": "x", "n": 300}}}), "p.kind.Named.n"),
            (json!({"tags": [], "addr": "not an address"}), "p.addr"),
            (json!({"tags": [], "pair": ["a", 256]}), "p.pair[1]"),
            (json!({"tags": [], "map": {"k": 1}}), "p.map.k"),
            (json!({"tags": [], "names": ["a", 2]}), "p.names[1]"),
        ];
        for (value, field) in cases {
            let shape = if value.get("id").is_some() { "Customer" } else { "Outer" };
            let (_, errors, _) = if shape == "Customer" {
                lent_and_given::<Customer>(value.clone())
            } else {
                lent_and_given::<Outer>(value.clone())
            };
            assert!(
                matches!(&errors[..], [ArgumentError::Invalid { field: f, .. } | ArgumentError::Missing { field: f }] if f == field),
                "{value}: {errors:?}"
            );
        }
        // Keys read as numbers by a hand-written visitor: parsed as serde_json parses them, refused alike.
        for keys in
            [json!({"1": "a", "2": "b"}), json!({"1 ": "a"}), json!({"x": "a"}), json!({"300": "a"}), json!({"1": 2})]
        {
            lent_and_given::<Numbered>(keys);
        }
        for value in [json!(null), json!([]), json!({}), json!("Plain"), json!({"Tagged": 1}), json!([["a"], 1])] {
            every_shape_alike(&value);
        }
    }

    /// JSON values built from the shapes' own keys and awkward leaves, so generated values often half-fit.
    fn shaped_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let keys = prop::sample::select(vec![
            "id", "tier", "region", "n", "tags", "items", "kind", "addr", "extra", "names", "map", "pair", "Plain",
            "Tagged", "Named", "0", "1", "x",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop::sample::select(vec![0_i64, 1, 5, -1, 255, 256, 300, 4_294_967_296]).prop_map(Value::from),
            Just(json!(5.5)),
            prop::sample::select(vec!["", "a", "gold", "1.2.3.4", "Plain", "Tagged", "5", "x y"]).prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn given_up_values_are_read_as_lent_ones(value in shaped_value()) {
            every_shape_alike(&value);
        }

        /// The separator found from the last comma back is `rsplit_once`'s, on texts made of its pieces.
        #[test]
        fn the_expected_separator_is_found_as_rsplit_once_finds_it(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(", expected ".to_owned()),
                    proptest::strategy::Just(", expected".to_owned()),
                    proptest::strategy::Just(",".to_owned()),
                    proptest::strategy::Just(", ".to_owned()),
                    "[a-z ,`é]{0,6}",
                ],
                0..8,
            )
        ) {
            let message = parts.concat();
            proptest::prop_assert_eq!(rsplit_at_expected(&message), message.rsplit_once(", expected "));
        }
    }

    #[test]
    fn given_arguments_give_their_values_to_the_slots() {
        static PARAMS: [ParamSpec; 2] = [
            ParamSpec::from_checked_parts("a", None, |_| schemars::json_schema!({"type": "string"}), || false),
            ParamSpec::from_checked_parts("b", None, |_| schemars::json_schema!({"type": "string"}), || false),
        ];
        let args: Arguments = serde_json::from_value(json!({"b": "x", "a": "y", "c": 1})).unwrap();
        let mut lent = Cow::Borrowed(&args);
        let [a, b] = slots(&mut lent, &PARAMS);
        assert!(matches!((a, b), (Some(ArgumentSlot::Lent(a)), Some(ArgumentSlot::Lent(b))) if a == "y" && b == "x"));
        let mut given: Cow<'_, Arguments> = Cow::Owned(args.clone());
        let [a, b] = slots(&mut given, &PARAMS);
        let mut errors = ArgumentErrors::new();
        let (a, b) = (argument_value::<String>(a, "a", &mut errors), argument_value::<String>(b, "b", &mut errors));
        assert_eq!((a.as_deref(), b.as_deref()), (Some("y"), Some("x")));
        // Moved out: an empty string left in each place, the key no parameter has untouched.
        assert_eq!(Value::Object(given.into_owned()), json!({"b": "", "a": "", "c": 1}));
    }
}
