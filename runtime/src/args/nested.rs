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

mod compiled_schema;
mod findings;
mod path;
mod text;
mod walk;

pub(crate) use compiled_schema::CompiledSchema;
pub(crate) use findings::{Duplicate, Ghost, OutOfRange, closest};
pub(crate) use text::argument_texts;
pub(crate) use walk::Walk;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};

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
    fn an_objects_own_ghosts_come_before_those_below_it_in_the_order_sent() {
        // One pass reads each key and walks its value: the ghosts found below a key sent early are still
        // listed after every ghost of the object itself, each group in the order sent.
        let inner = closed(json!({"n": {"type": "integer"}}));
        let schema =
            closed(json!({"a": inner.clone(), "b": {"type": "array", "items": inner}, "c": {"type": "integer"}}));
        let (value, ghosts, _) = walk(
            schema,
            json!({"a": {"n": 1, "m": 2}, "g1": 1, "b": [{"n": 1, "k": 3}], "c": 1, "g2": {"x": 1}, "g3": 3}),
        );
        assert_eq!(ghosts, ["x.g1", "x.g2", "x.g3", "x.a.m", "x.b[0].k"]);
        assert_eq!(value, json!({"a": {"n": 1}, "b": [{"n": 1}], "c": 1}));
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever number of ghosts an object holds (a few are removed one by one, many in one pass) and
        /// however their keys are spelt (dots, brackets, the empty key, bidi and multi-byte characters, a
        /// ghost's key ending another's), what is left is exactly the declared keys as sent, in the order
        /// sent, at the top level and one object down, and each ghost is reported once at its path.
        #[test]
        fn stripping_leaves_the_declared_keys_in_the_order_sent(
            top in proptest::collection::vec((proptest::bool::ANY, 0..12_usize), 0..80),
            inner in proptest::collection::vec((proptest::bool::ANY, 0..12_usize), 0..12),
        ) {
            const GHOSTS: [&str; 12] =
                ["g", "", "a.b", "x[0]", "\u{202e}admin", "é", "p1", "gp1", "ghost ", " g", "[1]", "g.g"];
            // `p{i}` is declared (an integer), `o` is declared as a closed object of `q{i}`s.
            let declared: Map<String, Value> = (0..12).map(|i| (format!("p{i}"), json!({"type": "integer"})))
                .chain([("o".to_owned(), closed(Value::Object(
                    (0..12).map(|i| (format!("q{i}"), json!({"type": "integer"}))).collect(),
                )))])
                .collect();
            let object = |keys: &[(bool, usize)], prefix: &str| -> (Vec<(String, Value)>, Vec<String>) {
                let mut sent = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for (n, &(is_ghost, i)) in keys.iter().enumerate() {
                    let key = if is_ghost { format!("{}{}", GHOSTS[i], n % 3) } else { format!("{prefix}{i}") };
                    if seen.insert(key.clone()) {
                        sent.push((key, json!(n)));
                    }
                }
                let declared: Vec<String> = (0..12).map(|i| format!("{prefix}{i}")).collect();
                let ghosts = sent.iter().filter(|(k, _)| !declared.contains(k)).map(|(k, _)| k.clone()).collect();
                (sent, ghosts)
            };
            let (mut top_sent, top_ghosts) = object(&top, "p");
            let (inner_sent, inner_ghosts) = object(&inner, "q");
            top_sent.insert(top_sent.len() / 2, ("o".to_owned(), Value::Object(inner_sent.iter().cloned().collect())));
            let value = Value::Object(top_sent.iter().cloned().collect());
            let (kept, ghosts, _) = walk(closed(Value::Object(declared)), value);
            let keep = |sent: &[(String, Value)], ghosts: &[String]| -> Vec<String> {
                sent.iter().map(|(k, _)| k.clone()).filter(|k| !ghosts.contains(k)).collect()
            };
            let kept = kept.as_object().expect("an object").clone();
            proptest::prop_assert_eq!(kept.keys().cloned().collect::<Vec<_>>(), keep(&top_sent, &top_ghosts));
            let kept_inner = kept["o"].as_object().expect("an object");
            proptest::prop_assert_eq!(kept_inner.keys().cloned().collect::<Vec<_>>(), keep(&inner_sent, &inner_ghosts));
            for (key, value) in kept.iter().filter(|(k, _)| *k != "o").chain(kept_inner) {
                let sent = top_sent.iter().chain(&inner_sent).find(|(k, _)| k == key).map(|(_, v)| v);
                proptest::prop_assert_eq!(Some(value), sent, "{} kept with its value", key);
            }
            let expected: Vec<String> = top_ghosts.iter().map(|g| format!("x.{g}"))
                .chain(inner_ghosts.iter().map(|g| format!("x.o.{g}"))).collect();
            proptest::prop_assert_eq!(ghosts, expected);
        }
    }

    /// Many ghosts at two levels are each reported once, in the order of the walk (an object's own, then those
    /// below it), without one insertion per ghost before those found below (quadratic: 80,000 took 1 s), and a
    /// refusing walk looks for the closest declared key only for the ghosts a refusal can list.
    #[test]
    fn many_ghosts_keep_their_order_and_only_the_listed_ones_get_a_suggestion() {
        let root = closed(json!({"zip": {"type": "string"}, "o": closed(json!({"street": {"type": "string"}}))}));
        let compiled = CompiledSchema::compile(&root);
        let mut inner = Map::new();
        for i in 0..20_000 {
            inner.insert(format!("street_{i}"), json!(i));
        }
        let mut arguments = Map::new();
        arguments.insert("o".to_owned(), Value::Object(inner));
        for i in 0..20_000 {
            arguments.insert(format!("zip_{i}"), json!(i));
        }
        let expected: Vec<String> =
            (0..20_000).map(|i| format!("zip_{i}")).chain((0..20_000).map(|i| format!("o.street_{i}"))).collect();
        for remove in [true, false] {
            let mut sent = arguments.clone();
            let mut walk = Walk::new(&compiled, remove);
            walk.arguments(&mut sent);
            let paths: Vec<&str> = walk.ghosts.iter().map(|g| g.path.as_str()).collect();
            assert_eq!(paths, expected, "remove: {remove}");
            let suggested: Vec<&str> =
                walk.ghosts.iter().filter(|g| g.closest.is_some()).map(|g| g.path.as_str()).collect();
            if remove {
                assert!(suggested.is_empty());
                assert_eq!(Value::Object(sent), json!({"o": {}}));
            } else {
                // Each object's first 16 ghosts had fewer than 16 found before them: `o` was walked first, and
                // the top level's own ghosts count from where it started (none found yet).
                let first: Vec<String> =
                    (0..16).map(|i| format!("zip_{i}")).chain((0..16).map(|i| format!("o.street_{i}"))).collect();
                assert_eq!(suggested, first);
                assert_eq!(walk.ghosts[20_000].closest.as_deref(), Some("street"));
                assert_eq!(sent, arguments, "a refusing walk leaves the arguments as sent");
            }
        }
        // A top-level ghost found first gets its suggestion, and counts for those found after it.
        let mut sent = json!({"zipp": 1, "o": {"stret": 1}}).as_object().cloned().unwrap();
        let mut walk = Walk::new(&compiled, false);
        walk.arguments(&mut sent);
        let found: Vec<(&str, Option<&str>)> =
            walk.ghosts.iter().map(|g| (g.path.as_str(), g.closest.as_deref())).collect();
        assert_eq!(found, [("zipp", Some("zip")), ("o.stret", Some("street"))]);
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
