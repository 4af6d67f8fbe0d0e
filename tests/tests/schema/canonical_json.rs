//! Canonical JSON (RFC 8785): the RFC's own examples, the cases that matter for approvals, and a
//! cross-check against an independent implementation on random values.

use agent_airlock::canonical::{CanonicalError, MAX_CANONICAL_DEPTH, canonical_sha256, to_canonical_string};
use proptest::prelude::*;
use serde_json::{Number, Value, json};

fn canonical(value: &Value) -> String {
    to_canonical_string(value).unwrap()
}

fn canonical_of(text: &str) -> String {
    canonical(&serde_json::from_str(text).unwrap())
}

/// RFC 8785 Appendix B: IEEE-754 doubles (as bits) and their canonical text.
#[test]
fn rfc8785_number_table() {
    let table: [(u64, &str); 22] = [
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
        (0x4430000000000000, "295147905179352830000"),
    ];
    for (bits, expected) in table {
        let number = Number::from_f64(f64::from_bits(bits)).unwrap();
        assert_eq!(canonical(&Value::Number(number)), expected, "bits {bits:016x}");
    }
}

/// RFC 8785 Appendix B writes ±2^53 and 2^68 as plain integers. ±2^53 would parse back as an integer
/// beyond ±(2^53 − 1), which is refused, so the double is refused too; 2^68 is beyond u64 and parses
/// back as a double.
#[test]
fn rfc8785_integral_doubles_beyond_2_pow_53() {
    for bits in [0x4340000000000000u64, 0xc340000000000000] {
        let value = Value::Number(Number::from_f64(f64::from_bits(bits)).unwrap());
        match to_canonical_string(&value) {
            Err(CanonicalError::IntegerOutOfRange { number, .. }) => {
                assert_eq!(number.trim_start_matches('-'), "9007199254740992");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(canonical_of("295147905179352830000"), "295147905179352830000");
    assert_eq!(canonical_of("1e21"), "1e+21");
}

/// RFC 8785 Appendix B also lists NaN and Infinity, which have no canonical form. A `Value` cannot hold
/// them: this is every path by which one could try.
#[test]
fn non_finite_numbers_cannot_reach_the_canonicalizer() {
    for bits in [0x7fffffffffffffffu64, 0x7ff0000000000000, 0xfff0000000000000] {
        assert!(Number::from_f64(f64::from_bits(bits)).is_none());
    }
    // Serialising a struct holding NaN gives `null` (serde_json's choice), before canonicalization.
    assert_eq!(serde_json::to_value(f64::NAN).unwrap(), Value::Null);
    assert_eq!(serde_json::to_value(f64::INFINITY).unwrap(), Value::Null);
    // Parsing an out-of-range literal fails in serde_json.
    assert!(serde_json::from_str::<Value>("1e400").is_err());
    assert!(serde_json::from_str::<Value>("NaN").is_err());
}

/// RFC 8785 §3.2.2: the sample with numbers, escapes and literals.
#[test]
fn rfc8785_sample_with_escapes() {
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
                    \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
    assert_eq!(canonical_of(input), expected);
}

/// RFC 8785 §3.2.3: member names sorted by UTF-16 code units.
#[test]
fn rfc8785_key_sorting() {
    let input = r#"{
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\ud83d\ude00": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
                    \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
                    \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
    assert_eq!(canonical_of(input), expected);
}

#[test]
fn nested_objects_are_sorted_and_whitespace_dropped() {
    let value = json!({"b": {"z": 1, "a": [3, {"y": null, "x": false}]}, "a": "x"});
    assert_eq!(canonical(&value), r#"{"a":"x","b":{"a":[3,{"x":false,"y":null}],"z":1}}"#);
}

#[test]
fn true_is_not_one() {
    assert_eq!(canonical(&json!(true)), "true");
    assert_eq!(canonical(&json!(1)), "1");
    assert_ne!(canonical_sha256(&json!({"a": true})).unwrap(), canonical_sha256(&json!({"a": 1})).unwrap());
    assert_ne!(canonical_sha256(&json!({"a": "1"})).unwrap(), canonical_sha256(&json!({"a": 1})).unwrap());
    assert_ne!(canonical_sha256(&json!({"a": null})).unwrap(), canonical_sha256(&json!({})).unwrap());
    assert_ne!(canonical_sha256(&json!([1, 2])).unwrap(), canonical_sha256(&json!([2, 1])).unwrap());
}

#[test]
fn the_same_number_spelled_differently_is_one_number() {
    for spelling in ["1", "1.0", "1e0", "10e-1", "1.00000"] {
        assert_eq!(canonical_of(spelling), "1", "{spelling}");
    }
    assert_eq!(canonical_of("-0.0"), "0");
    assert_eq!(canonical_of("4.50"), "4.5");
    assert_eq!(canonical_of("1e300"), "1e+300");
}

#[test]
fn key_order_of_the_input_does_not_matter() {
    let a = canonical_of(r#"{"amount": 5, "payment_id": "pi_1", "meta": {"b": 1, "a": 2}}"#);
    let b = canonical_of(r#"{"meta": {"a": 2, "b": 1}, "payment_id": "pi_1", "amount": 5}"#);
    assert_eq!(a, b);
}

#[test]
fn control_characters_and_unicode_are_escaped_as_rfc8785_says() {
    let all_controls: String = (0u8..0x20).map(char::from).collect();
    let expected = "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\
                    \\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\"";
    assert_eq!(canonical(&json!(all_controls)), expected);
    // Not escaped: DEL, line/paragraph separators, non-ASCII, the solidus.
    assert_eq!(canonical(&json!("\u{7f}\u{2028}\u{2029}é€😀/")), "\"\u{7f}\u{2028}\u{2029}é€😀/\"");
    assert_eq!(canonical(&json!("\"\\")), r#""\"\\""#);
}

#[test]
fn integers_beyond_2_pow_53_are_refused_not_rounded() {
    let safe = 9_007_199_254_740_991u64;
    assert_eq!(canonical(&json!(safe)), "9007199254740991");
    assert_eq!(canonical(&json!(-9_007_199_254_740_991i64)), "-9007199254740991");
    for unsafe_value in [
        json!(9_007_199_254_740_992u64),
        json!(9_007_199_254_740_993u64),
        json!(u64::MAX),
        json!(-9_007_199_254_740_992i64),
        json!(i64::MIN),
    ] {
        match to_canonical_string(&unsafe_value) {
            Err(CanonicalError::IntegerOutOfRange { number, path }) => {
                assert_eq!(number, unsafe_value.to_string());
                assert_eq!(path, "");
            }
            other => panic!("{unsafe_value}: {other:?}"),
        }
    }
    let err = to_canonical_string(&json!({"order": {"ids": [1, 18446744073709551615u64]}})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "integer `18446744073709551615` at `/order/ids/1` is outside ±(2^53 − 1): canonical JSON (RFC 8785) would round it, so it is refused; send it as a string"
    );
    // Parsed from text, the same refusal: serde_json keeps the exact integer, never a rounded double.
    let parsed: Value = serde_json::from_str(r#"{"a": 9007199254740993}"#).unwrap();
    assert!(matches!(to_canonical_string(&parsed), Err(CanonicalError::IntegerOutOfRange { .. })));
    // A double of that magnitude written as a plain integer would be read back as one: refused too.
    assert!(matches!(
        to_canonical_string(&serde_json::from_str("9007199254740993.0").unwrap()),
        Err(CanonicalError::IntegerOutOfRange { .. })
    ));
    assert_eq!(canonical_of("9007199254740991.0"), "9007199254740991");
}

#[test]
fn nesting_is_bounded() {
    let mut deep = json!(1);
    for _ in 0..MAX_CANONICAL_DEPTH {
        deep = json!([deep]);
    }
    assert!(to_canonical_string(&deep).is_ok());
    let deeper = json!({ "a": deep });
    assert!(matches!(to_canonical_string(&deeper), Err(CanonicalError::TooDeep { .. })));
}

fn arb_key() -> impl Strategy<Value = String> {
    // Keys mixing ASCII, U+E000..=U+FFFF and astral characters: where UTF-8 and UTF-16 orders differ.
    prop::collection::vec(
        prop_oneof![
            prop::char::range('a', 'e'),
            prop::char::range('\u{e000}', '\u{e003}'),
            prop::char::range('\u{ff5e}', '\u{ff61}'),
            prop::char::range('\u{1f600}', '\u{1f603}'),
            prop::char::range('\u{0}', '\u{1f}'),
        ],
        0..4,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-9_007_199_254_740_991i64..=9_007_199_254_740_991).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        any::<String>().prop_map(Value::String),
        arb_key().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(arb_key(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(512)))]

    /// An independent implementation (`serde_json_canonicalizer`) writes the same bytes.
    #[test]
    fn agrees_with_an_independent_implementation(value in arb_value()) {
        let theirs = serde_json_canonicalizer::to_string(&value).unwrap();
        match to_canonical_string(&value) {
            Ok(ours) => prop_assert_eq!(ours, theirs),
            // Where we refuse, they write an integer literal beyond 2^53 (the rounding we refuse).
            Err(CanonicalError::IntegerOutOfRange { number, .. }) => prop_assert!(theirs.contains(&number)),
            Err(other) => prop_assert!(false, "{other}"),
        }
    }

    /// Canonical text parses back to the same value (up to number spelling) and is a fixed point.
    #[test]
    fn canonical_text_is_a_fixed_point(value in arb_value()) {
        let Ok(text) = to_canonical_string(&value) else { return Ok(()) };
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(to_canonical_string(&reparsed).unwrap(), text);
    }
}
