//! Result masking against a corpus of positives (each must be found, as its kind, at its exact span) and
//! negatives (classic false positives that must pass unchanged), in text and in JSON (object keys,
//! name/value pairs, secret-naming keys), plus JSON shape, strategies and properties.

use std::borrow::Cow;

use agent_airlock::{
    keys::HashKey,
    mask::{Detection, FULL_MASK, MASK_SET_NAMES, MaskConfig, MaskKind, MaskReport, MaskSet, MaskStrategy, Masker},
};
use proptest::prelude::*;
use serde_json::{Value, json};

const CORPUS: &str = include_str!("../../corpus/masking.txt");
const JSON_CORPUS: &str = include_str!("../../corpus/masking_json.txt");
const README: &str = include_str!("../../../README.md");
const OPEN: char = '⟦';
const CLOSE: char = '⟧';

struct Positive {
    line: usize,
    kind: MaskKind,
    text: String,
    span: std::ops::Range<usize>,
}

struct Corpus {
    positives: Vec<Positive>,
    negatives: Vec<(usize, String)>,
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn corpus() -> Corpus {
    let mut corpus = Corpus { positives: Vec::new(), negatives: Vec::new() };
    for (index, raw) in CORPUS.lines().enumerate() {
        let line = index + 1;
        if let Some(rest) = raw.strip_prefix("+ ") {
            let (kind, text) =
                rest.split_once(" | ").unwrap_or_else(|| panic!("line {line}: expected `+ kind | text`"));
            let kind = MaskKind::from_name(kind.trim()).unwrap_or_else(|| panic!("line {line}: unknown kind `{kind}`"));
            let marked = unescape(text);
            let start = marked.find(OPEN).unwrap_or_else(|| panic!("line {line}: no {OPEN}"));
            let text = marked.replacen(OPEN, "", 1);
            let end = text.find(CLOSE).unwrap_or_else(|| panic!("line {line}: no {CLOSE}"));
            let text = text.replacen(CLOSE, "", 1);
            assert!(!text.contains([OPEN, CLOSE]), "line {line}: one marked span per positive");
            corpus.positives.push(Positive { line, kind, text, span: start..end });
        } else if let Some(text) = raw.strip_prefix("- ") {
            corpus.negatives.push((line, unescape(text)));
        } else {
            assert!(raw.is_empty() || raw.starts_with('#'), "line {line}: expected `+ `, `- `, `#` or nothing");
        }
    }
    corpus
}

/// A JSON positive: the value to mask, its kind, and the text (a key, a string or a number) that must be gone.
struct JsonPositive {
    line: usize,
    kind: MaskKind,
    value: Value,
    secret: String,
}

struct JsonCorpus {
    positives: Vec<JsonPositive>,
    negatives: Vec<(usize, Value)>,
}

fn json_corpus() -> JsonCorpus {
    let mut corpus = JsonCorpus { positives: Vec::new(), negatives: Vec::new() };
    for (index, raw) in JSON_CORPUS.lines().enumerate() {
        let line = index + 1;
        let parse = |text: &str| -> Value {
            serde_json::from_str(text).unwrap_or_else(|err| panic!("line {line}: not JSON ({err}): {text}"))
        };
        if let Some(rest) = raw.strip_prefix("+ ") {
            let (kind, text) =
                rest.split_once(" | ").unwrap_or_else(|| panic!("line {line}: expected `+ kind | json`"));
            let kind = MaskKind::from_name(kind.trim()).unwrap_or_else(|| panic!("line {line}: unknown kind `{kind}`"));
            let (before, marked) = text.split_once(OPEN).unwrap_or_else(|| panic!("line {line}: no {OPEN}"));
            let (secret, after) = marked.split_once(CLOSE).unwrap_or_else(|| panic!("line {line}: no {CLOSE}"));
            assert!(!after.contains([OPEN, CLOSE]), "line {line}: one marked value per positive");
            let value = parse(&format!("{before}{secret}{after}"));
            corpus.positives.push(JsonPositive { line, kind, value, secret: secret.to_owned() });
        } else if let Some(text) = raw.strip_prefix("- ") {
            corpus.negatives.push((line, parse(text)));
        } else {
            assert!(raw.is_empty() || raw.starts_with('#'), "line {line}: expected `+ `, `- `, `#` or nothing");
        }
    }
    corpus
}

/// The number of members of every object and the length of every array, in document order: what masking
/// keeps (it may rename keys, never drop or add one).
fn member_counts(value: &Value) -> Vec<usize> {
    let mut counts = Vec::new();
    let mut pending = vec![value];
    while let Some(node) = pending.pop() {
        match node {
            Value::Object(map) => {
                counts.push(map.len());
                pending.extend(map.values());
            }
            Value::Array(items) => {
                counts.push(items.len());
                pending.extend(items);
            }
            _ => {}
        }
    }
    counts
}

fn hash_key() -> HashKey {
    HashKey::new("corpus", b"corpus-test-key-0123456789abcdef").unwrap()
}

fn strategies() -> Vec<(&'static str, MaskStrategy)> {
    vec![
        ("full", MaskStrategy::Full),
        ("partial", MaskStrategy::Partial),
        ("type_tag", MaskStrategy::TypeTag),
        ("keyed_hash", MaskStrategy::KeyedHash(hash_key())),
    ]
}

#[test]
fn corpus_is_large_enough_and_covers_every_kind() {
    let corpus = corpus();
    assert!(corpus.positives.len() >= 100, "{} positives", corpus.positives.len());
    assert!(corpus.negatives.len() >= 100, "{} negatives", corpus.negatives.len());
    for kind in MaskKind::ALL {
        assert!(corpus.positives.iter().any(|p| p.kind == kind), "no positive for {kind}");
    }
}

#[test]
fn every_positive_is_found_exactly() {
    let masker = Masker::default();
    let mut failures = Vec::new();
    for positive in corpus().positives {
        let found = masker.detect(&positive.text, MaskSet::ALL);
        let expected = vec![Detection { kind: positive.kind, range: positive.span.clone() }];
        if found != expected {
            let shown: Vec<String> = found
                .iter()
                .map(|d| format!("{} {:?} `{}`", d.kind, d.range, &positive.text[d.range.clone()]))
                .collect();
            failures.push(format!(
                "line {}: expected {} `{}`, found {:?}",
                positive.line,
                positive.kind,
                &positive.text[positive.span.clone()],
                shown
            ));
        }
    }
    assert!(failures.is_empty(), "{} positives failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_negative_passes_unchanged() {
    let masker = Masker::default();
    let mut failures = Vec::new();
    for (line, text) in corpus().negatives {
        let (masked, report) = masker.mask_text_with_report(&text, MaskSet::ALL);
        if !matches!(masked, Cow::Borrowed(_)) || !report.is_empty() {
            failures.push(format!("line {line}: `{text}` became `{masked}` ({report:?})"));
        }
    }
    assert!(failures.is_empty(), "{} negatives failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn positives_are_masked_away_by_every_strategy_and_stay_masked() {
    for (name, strategy) in strategies() {
        let masker = Masker::new(MaskConfig::new(strategy));
        for positive in corpus().positives {
            let secret = &positive.text[positive.span.clone()];
            let (masked, report) = masker.mask_text_with_report(&positive.text, MaskSet::ALL);
            assert_eq!(report.count(positive.kind), 1, "{name}, line {}", positive.line);
            assert_eq!(report.total(), 1, "{name}, line {}", positive.line);
            assert!(!masked.contains(secret), "{name}, line {}: `{masked}` still holds `{secret}`", positive.line);
            let again = masker.mask_text(&masked, MaskSet::ALL);
            assert!(
                matches!(again, Cow::Borrowed(_)),
                "{name}, line {}: `{masked}` masked again to `{again}`",
                positive.line
            );
        }
    }
}

#[test]
fn only_the_kinds_in_the_set_are_masked() {
    let masker = Masker::default();
    for positive in corpus().positives {
        let without = MaskSet::ALL.intersection(complement(MaskSet::of(positive.kind)));
        let found = masker.detect(&positive.text, without);
        assert!(
            found.iter().all(|d| d.kind != positive.kind),
            "line {}: {} found though not in {without}",
            positive.line,
            positive.kind
        );
        assert!(masker.detect(&positive.text, MaskSet::NONE).is_empty());
        let family = if positive.kind.is_secret() {
            MaskSet::SECRETS
        } else if positive.kind == MaskKind::IpAddress {
            MaskSet::of(MaskKind::IpAddress)
        } else {
            MaskSet::PII
        };
        assert_eq!(masker.detect(&positive.text, family).len(), 1, "line {} under {family}", positive.line);
    }
}

fn complement(set: MaskSet) -> MaskSet {
    MaskKind::ALL.into_iter().filter(|k| !set.contains_kind(*k)).fold(MaskSet::NONE, |acc, k| acc | MaskSet::of(k))
}

#[test]
fn strategies_render_as_documented() {
    let text =
        "mail jane.doe@example.com card 4111 1111 1111 1111 key sk-proj-flzdE1F8ResqEDusTpkr0cStY4qWB8dWKnHfDNxS";
    let set = MaskSet::SECRETS | MaskSet::PII;
    let render = |strategy| Masker::new(MaskConfig::new(strategy)).mask_text(text, set).into_owned();
    assert_eq!(render(MaskStrategy::Full), format!("mail {FULL_MASK} card {FULL_MASK} key {FULL_MASK}"));
    assert_eq!(render(MaskStrategy::TypeTag), "mail [EMAIL] card [PAYMENT_CARD] key [OPENAI_KEY]");
    assert_eq!(render(MaskStrategy::Partial), "mail j***@example.com card **** **** **** 1111 key sk-proj-...DNxS");
    let hashed = render(MaskStrategy::KeyedHash(hash_key()));
    let words: Vec<&str> = hashed.split(' ').collect();
    assert!(words[1].starts_with("[EMAIL:") && words[1].len() == "[EMAIL:]".len() + 8, "{hashed}");
    assert!(words[3].starts_with("[PAYMENT_CARD:"), "{hashed}");
    assert!(words[5].starts_with("[OPENAI_KEY:"), "{hashed}");

    // Equal values map equally (also when written differently), different values differently, and the
    // mapping depends on the key.
    let masker = Masker::new(MaskConfig::new(MaskStrategy::KeyedHash(hash_key())));
    let one = masker.mask_text("a: Jane.Doe@Example.com b: jane.doe@example.com c: john@example.com", set);
    let tags: Vec<&str> = one.split(' ').filter(|w| w.starts_with('[')).collect();
    assert_eq!(tags[0], tags[1]);
    assert_ne!(tags[0], tags[2]);
    let other_key = Masker::new(MaskConfig::new(MaskStrategy::KeyedHash(HashKey::new("corpus", &[9; 32]).unwrap())));
    assert_ne!(other_key.mask_text("jane.doe@example.com", set), masker.mask_text("jane.doe@example.com", set));
}

#[test]
fn per_kind_strategies() {
    let config = MaskConfig::new(MaskStrategy::TypeTag)
        .with(MaskSet::of(MaskKind::PaymentCard), MaskStrategy::Partial)
        .with(MaskSet::SECRETS, MaskStrategy::Full);
    let masker = Masker::new(config);
    assert_eq!(
        masker.mask_text("4111111111111111 jane@example.com password=hunter2", MaskSet::ALL),
        format!("************1111 [EMAIL] password={FULL_MASK}")
    );
}

#[test]
fn json_is_masked_leaf_by_leaf_keeping_its_shape() {
    let masker = Masker::default();
    let mut value = json!({
        "customer": {
            "name": "Jane Doe",
            "email": "jane@example.com",
            "phones": ["+1 415 555 2671", "4155552672"],
            "ssn": 123456789,
            "card_number": 4111111111111111u64,
            "password": "hunter2",
            "api_key": "sk-proj-flzdE1F8ResqEDusTpkr0cStY4qWB8dWKnHfDNxS",
            "jane@example.com": "object keys are masked too",
        },
        "orders": [
            {"id": 123456789, "ts": 1700000000, "total": 12.5, "paid": true, "coupon": null, "card": 4111111111111111u64},
            {"id": 987654321, "note": "ship to the back door, call 415-555-2671", "version": "10.0.1.2"},
        ],
        "max_tokens": 4096,
        "next_page_token": "CAESBggDEAEYAQ",
        "empty": {},
        "list": [],
    });
    let report = masker.mask_value(&mut value, MaskSet::SECRETS | MaskSet::PII);
    assert_eq!(
        value,
        json!({
            "customer": {
                "name": "Jane Doe",
                "email": "[EMAIL]",
                "phones": ["[PHONE]", "[PHONE]"],
                "ssn": "[US_SSN]",
                "card_number": "[PAYMENT_CARD]",
                "password": "[SECRET_VALUE]",
                "api_key": "[OPENAI_KEY]",
                "[EMAIL]": "object keys are masked too",
            },
            "orders": [
                {"id": 123456789, "ts": 1700000000, "total": 12.5, "paid": true, "coupon": null, "card": "[PAYMENT_CARD]"},
                {"id": 987654321, "note": "ship to the back door, call [PHONE]", "version": "10.0.1.2"},
            ],
            "max_tokens": 4096,
            "next_page_token": "CAESBggDEAEYAQ",
            "empty": {},
            "list": [],
        })
    );
    let expected = [
        (MaskKind::Email, 2),
        (MaskKind::Phone, 3),
        (MaskKind::UsSsn, 1),
        (MaskKind::PaymentCard, 2),
        (MaskKind::SecretValue, 1),
        (MaskKind::OpenAiKey, 1),
    ];
    for (kind, count) in expected {
        assert_eq!(report.count(kind), count, "{kind}: {report:?}");
    }
    assert_eq!(report.total(), 10);
    let reported = serde_json::to_value(report).unwrap();
    assert_eq!(reported["email"], 2);
    assert!(!reported.to_string().contains("jane"), "reports hold no values");
}

#[test]
fn json_numbers_stay_numbers_unless_masked() {
    let masker = Masker::default();
    for number in
        [json!(1700000000), json!(123456789), json!(-4111111111111111i64), json!(3.5), json!(4111111111111112u64)]
    {
        let mut value = json!({ "n": number.clone() });
        assert!(masker.mask_value(&mut value, MaskSet::ALL).is_empty(), "{number}");
        assert_eq!(value["n"], number);
    }
    let mut value = json!([4111111111111111u64]);
    masker.mask_value(&mut value, MaskSet::ALL);
    assert_eq!(value, json!(["[PAYMENT_CARD]"]));
    let mut pin = json!({"pin": 1234, "otp": "991823"});
    masker.mask_value(&mut pin, MaskSet::SECRETS);
    assert_eq!(pin, json!({"pin": "[SECRET_VALUE]", "otp": "[SECRET_VALUE]"}));
}

#[test]
fn json_masking_respects_the_set() {
    let masker = Masker::default();
    let original = json!({"email": "jane@example.com", "password": "hunter2", "phone": "4155552671"});
    let mut value = original.clone();
    assert!(masker.mask_value(&mut value, MaskSet::NONE).is_empty());
    assert_eq!(value, original);
    masker.mask_value(&mut value, MaskSet::SECRETS);
    assert_eq!(value, json!({"email": "jane@example.com", "password": "[SECRET_VALUE]", "phone": "4155552671"}));
    let mut value = original.clone();
    masker.mask_value(&mut value, MaskSet::PII);
    assert_eq!(value, json!({"email": "[EMAIL]", "password": "hunter2", "phone": "[PHONE]"}));
}

#[test]
fn deeply_nested_json_does_not_overflow_the_stack() {
    let mut value = json!("jane@example.com");
    for _ in 0..5_000 {
        value = Value::Array(vec![value]);
    }
    let report = Masker::default().mask_value(&mut value, MaskSet::PII);
    assert_eq!(report.count(MaskKind::Email), 1);
    // Unwrap iteratively so that dropping the value does not recurse either.
    let mut node = value;
    while let Value::Array(mut items) = node {
        node = items.pop().unwrap();
    }
    assert_eq!(node, json!("[EMAIL]"));
}

#[test]
fn masks_never_overlap_and_keep_the_text_between() {
    let masker = Masker::default();
    let text = "a jane@example.com b 4111111111111111 c +44 20 7946 0958 d AKIAIOSFODNN7QK4RW2Z e";
    let found = masker.detect(text, MaskSet::ALL);
    assert_eq!(found.len(), 4);
    assert!(found.windows(2).all(|w| w[0].range.end <= w[1].range.start));
    assert_eq!(masker.mask_text(text, MaskSet::ALL), "a [EMAIL] b [PAYMENT_CARD] c [PHONE] d [AWS_ACCESS_KEY] e");
}

#[path = "../../../fuzz/src/mask_reference.rs"]
mod mask_reference;
use mask_reference::reference_mask_text as reference_mask;

#[test]
fn one_pass_agrees_with_the_slow_reference_on_the_corpus() {
    let masker = Masker::default();
    let corpus = corpus();
    let texts = corpus
        .positives
        .iter()
        .map(|p| (p.line, p.text.as_str()))
        .chain(corpus.negatives.iter().map(|(line, text)| (*line, text.as_str())));
    for (line, text) in texts {
        for set in [MaskSet::ALL, MaskSet::SECRETS, MaskSet::PII] {
            assert_eq!(masker.mask_text(text, set), reference_mask(&masker, text, set), "line {line}, {set}");
        }
    }
    // Masking one finding never exposes its neighbour: a run of glued dotted quads, a phone glued to an
    // address, a quoted value that closes inside a private-key block.
    for text in [
        "1.2.3.41.2.3.41.2.3.41.2.3.4 and 10.2.30.4.2.30.4.2.30.4",
        "+33 1 42 68 53 00first@example.io",
        "passwd: \"10.0.0.1.-----BEGIN PRIVATE KEY-----MIIBVQIBADANBgkqhkiG9w0BAQEFAAS\n\"x\"-----END PRIVATE KEY-----.\"",
    ] {
        assert_eq!(masker.mask_text(text, MaskSet::ALL), reference_mask(&masker, text, MaskSet::ALL), "{text:?}");
    }
}

#[test]
fn a_policy_can_add_masking_but_union_never_removes_it() {
    let tool: MaskSet = "secrets".parse().unwrap();
    let policy: MaskSet = "pii".parse().unwrap();
    let effective = tool | policy;
    assert!(effective.contains(tool) && effective.contains(policy));
    assert_eq!(tool | MaskSet::NONE, tool);
    let masker = Masker::default();
    let text = "jane@example.com password=hunter2";
    assert_eq!(masker.mask_text(text, effective), "[EMAIL] password=[SECRET_VALUE]");
}

#[test]
fn the_grammar_names_are_exported_for_the_macro() {
    for name in MASK_SET_NAMES {
        assert!(name.parse::<MaskSet>().is_ok(), "{name}");
        assert!(MaskSet::named(name).is_some(), "{name}");
    }
    assert!("secrets,pii".parse::<MaskSet>().is_ok());
    assert!("secret".parse::<MaskSet>().is_err());
}

#[test]
fn non_ascii_text_is_masked_on_character_boundaries() {
    let masker = Masker::default();
    let text = "Kundin: Jürgen Müller — jürgen@example.com oder jm@example.de, Tel.: ☎ +49 30 1234567 — ✓";
    let masked = masker.mask_text(text, MaskSet::ALL);
    assert_eq!(masked, "Kundin: Jürgen Müller — [EMAIL] oder [EMAIL], Tel.: ☎ [PHONE] — ✓");
    assert_eq!(masker.mask_text("über@example.de", MaskSet::PII), "[EMAIL]");
}

#[test]
fn one_masker_serves_many_threads() {
    let masker = std::sync::Arc::new(Masker::default());
    let texts: Vec<String> = corpus().positives.into_iter().map(|p| p.text).collect();
    let sets =
        [MaskSet::ALL, MaskSet::SECRETS, MaskSet::PII, MaskSet::of(MaskKind::Email) | MaskSet::of(MaskKind::Jwt)];
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let masker = std::sync::Arc::clone(&masker);
            let texts = texts.clone();
            std::thread::spawn(move || {
                let set = sets[i % sets.len()];
                texts.iter().map(|t| masker.mask_text(t, set).into_owned()).collect::<Vec<_>>()
            })
        })
        .collect();
    // Threads first, so that they race to compile the scanners of sets no other test uses.
    let results: Vec<Vec<String>> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
    let expected: Vec<Vec<String>> =
        sets.iter().map(|&set| texts.iter().map(|t| masker.mask_text(t, set).into_owned()).collect()).collect();
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result, expected[i % sets.len()]);
    }
}

fn fragment() -> impl Strategy<Value = String> {
    let corpus = corpus();
    let mut pieces: Vec<String> = corpus.positives.iter().map(|p| p.text.clone()).collect();
    pieces.extend(corpus.negatives.iter().map(|(_, t)| t.clone()));
    pieces.extend(
        [
            "@",
            ".",
            "-",
            " ",
            ":",
            "=",
            "+",
            "(",
            ")",
            "\"",
            "'",
            "/",
            "\n",
            "[EMAIL]",
            "****",
            "sk-",
            "AKIA",
            "eyJ",
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----END RSA PRIVATE KEY-----",
            "password=",
            "Cookie: ",
            "Set-Cookie: ",
            "sid=",
            "; ",
            "machine h.io login ",
            " password ",
            "\ndata:\n  url: ",
            "\nkind: Secret\n",
            "self.",
            "token = ",
            " += ",
            "::",
            " + ",
            " = ",
            "await ",
            "\", ",
            "user_password",
            "docker login -p ",
            "phone ",
            "SSN ",
            "4111",
            "1111",
            "415",
            "555",
            "2671",
            "é",
            "☎",
        ]
        .map(String::from),
    );
    prop::sample::select(pieces)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(512)))]

    #[test]
    fn arbitrary_text_never_panics_and_masking_is_idempotent(text in any::<String>()) {
        for (_, strategy) in strategies() {
            let masker = Masker::new(MaskConfig::new(strategy));
            let once = masker.mask_text(&text, MaskSet::ALL).into_owned();
            let twice = masker.mask_text(&once, MaskSet::ALL);
            prop_assert_eq!(twice.as_ref(), once.as_str());
        }
        let masker = Masker::default();
        prop_assert_eq!(masker.mask_text(&text, MaskSet::ALL), reference_mask(&masker, &text, MaskSet::ALL));
    }

    #[test]
    fn mixed_corpus_fragments_are_masked_idempotently(
        pieces in prop::collection::vec(fragment(), 1..12),
        set in prop::sample::select(vec![MaskSet::ALL, MaskSet::SECRETS, MaskSet::PII, MaskSet::SECRETS | MaskSet::PII]),
    ) {
        let text = pieces.concat();
        for (name, strategy) in strategies() {
            let masker = Masker::new(MaskConfig::new(strategy));
            let (once, report) = masker.mask_text_with_report(&text, set);
            let found = masker.detect(&text, set);
            prop_assert!(report.total() as usize >= found.len());
            prop_assert_eq!(report.is_empty(), found.is_empty());
            prop_assert!(found.windows(2).all(|w| w[0].range.end <= w[1].range.start));
            let twice = masker.mask_text(&once, set);
            prop_assert_eq!(twice.as_ref(), once.as_ref(), "strategy {}", name);
        }
        let masker = Masker::default();
        prop_assert_eq!(masker.mask_text(&text, set), reference_mask(&masker, &text, set));
    }

    #[test]
    fn json_values_keep_their_shape(pieces in prop::collection::vec(fragment(), 1..8), n in any::<u64>()) {
        let masker = Masker::default();
        let original = json!({"a": pieces.clone(), "b": {"c": pieces.concat(), "n": n}, "phone": pieces[0].clone()});
        let mut value = original.clone();
        let before = shape(&value);
        let report: MaskReport = masker.mask_value(&mut value, MaskSet::ALL);
        prop_assert_eq!(shape(&value), before);
        prop_assert_eq!(report.is_empty(), value == original);
        let again = masker.mask_value(&mut value, MaskSet::ALL);
        prop_assert!(again.is_empty(), "masked twice: {:?}", again);
    }
}

/// The value's structure: objects with their keys, array lengths; every scalar a masked one may become.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        _ => Value::Null,
    }
}

#[test]
fn json_corpus_is_large_enough() {
    let corpus = json_corpus();
    assert!(corpus.positives.len() >= 30, "{} positives", corpus.positives.len());
    assert!(corpus.negatives.len() >= 20, "{} negatives", corpus.negatives.len());
}

#[test]
fn every_json_positive_is_masked_away_keeping_every_member() {
    let mut failures = Vec::new();
    for (name, strategy) in strategies() {
        let masker = Masker::new(MaskConfig::new(strategy));
        for positive in json_corpus().positives {
            let mut value = positive.value.clone();
            let report = masker.mask_value(&mut value, MaskSet::ALL);
            let shown = value.to_string();
            let mut again = value.clone();
            let second = masker.mask_value(&mut again, MaskSet::ALL);
            if report.count(positive.kind) != 1
                || report.total() != 1
                || shown.contains(&positive.secret)
                || member_counts(&value) != member_counts(&positive.value)
                || !second.is_empty()
                || again != value
            {
                failures.push(format!(
                    "{name}, line {}: expected one {} without `{}`, got {shown} ({report:?}; again {second:?})",
                    positive.line, positive.kind, positive.secret
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} JSON positives failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_json_negative_passes_unchanged() {
    let masker = Masker::default();
    let mut failures = Vec::new();
    for (line, original) in json_corpus().negatives {
        let mut value = original.clone();
        let report = masker.mask_value(&mut value, MaskSet::ALL);
        if !report.is_empty() || value != original {
            failures.push(format!("line {line}: `{original}` became `{value}` ({report:?})"));
        }
    }
    assert!(failures.is_empty(), "{} JSON negatives failed:\n{}", failures.len(), failures.join("\n"));
}

/// Two keys that mask to the same text both stay, in their order, suffixed with the first free `#n`; a key
/// already in the object is never overwritten.
#[test]
fn masked_keys_stay_unique() {
    let masker = Masker::default();
    let mut value = json!({"a@example.com": 1, "b@example.com": 2, "[EMAIL]#2": 3, "c@example.com": 4});
    let report = masker.mask_value(&mut value, MaskSet::PII);
    assert_eq!(report.count(MaskKind::Email), 3);
    let members: Vec<(&str, &Value)> = value.as_object().unwrap().iter().map(|(k, v)| (k.as_str(), v)).collect();
    assert_eq!(
        members,
        [("[EMAIL]", &json!(1)), ("[EMAIL]#3", &json!(2)), ("[EMAIL]#2", &json!(3)), ("[EMAIL]#4", &json!(4))]
    );
    let mut again = value.clone();
    assert!(masker.mask_value(&mut again, MaskSet::PII).is_empty());
    assert_eq!(again, value);

    // Partial masks can collide too; keyed hashes tell different values apart without a suffix.
    let partial = Masker::new(MaskConfig::new(MaskStrategy::Partial));
    let mut value = json!({"jane@example.com": 1, "john@example.com": 2});
    partial.mask_value(&mut value, MaskSet::PII);
    assert_eq!(value, json!({"j***@example.com": 1, "j***@example.com#2": 2}));
    let hashed = Masker::new(MaskConfig::new(MaskStrategy::KeyedHash(hash_key())));
    let mut value = json!({"jane@example.com": 1, "john@example.com": 2});
    hashed.mask_value(&mut value, MaskSet::PII);
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    assert!(keys.iter().all(|k| k.starts_with("[EMAIL:") && !k.contains('#')), "{keys:?}");
}

/// Many keys masked alike (a model-chosen object of addresses) cost linear time and all stay.
#[test]
fn many_keys_masked_alike_all_stay() {
    let n = 20_000;
    let mut value = Value::Object((0..n).map(|i| (format!("user{i}@example.com"), json!(i))).collect());
    let report = Masker::default().mask_value(&mut value, MaskSet::PII);
    assert_eq!(report.count(MaskKind::Email), n as u32);
    let object = value.as_object().unwrap();
    assert_eq!(object.len(), n);
    assert_eq!(object["[EMAIL]"], json!(0));
    assert_eq!(object[&format!("[EMAIL]#{n}")], json!(n - 1));
}

/// The README's masking bullet states the corpus's size; this keeps it true.
#[test]
fn the_readme_states_the_corpus_size() {
    let (text, json) = (corpus(), json_corpus());
    let stated = format!(
        "corpus test: {} positives, {} negatives",
        text.positives.len() + json.positives.len(),
        text.negatives.len() + json.negatives.len()
    );
    assert!(README.contains(&stated), "README.md should say `{stated}`");
}

/// Found by `mixed_corpus_fragments_are_masked_idempotently`: a JWT cookie glued to a PGP private-key block
/// glued to an SSH-style Git address gave `detect` findings that overlapped around the block.
#[test]
fn detections_around_a_private_key_block_never_overlap() {
    let text = [
        "cookie: session=x; jwt_cookie=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsImV4cCI6MTcwMDAwMDAwMH0.pTyGJMuHbEL31IeL2HPcHyGcFRl1SPnXNYvMIHa_2o7",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\nlQOYBF0fT8QBCADKxQ3MZt7KqKjLx5b2s1C9vXw2Q==\n-----END PGP PRIVATE KEY BLOCK-----",
        "git@github.com:owner/repo.git",
    ]
    .concat();
    for set in [MaskSet::SECRETS | MaskSet::PII, MaskSet::ALL] {
        for (name, strategy) in strategies() {
            let masker = Masker::new(MaskConfig::new(strategy));
            let found = masker.detect(&text, set);
            assert!(!found.is_empty());
            assert!(found.windows(2).all(|w| w[0].range.end <= w[1].range.start), "{name}: {found:?}");
            let once = masker.mask_text(&text, set).into_owned();
            assert_eq!(masker.mask_text(&once, set), once, "{name}");
        }
    }
}

// A refused e-mail (`name@2x.png`, `https://user@host`) or URL password (`db://u:****@host`) used to skip its
// whole match, so a secret glued inside it was never looked at: `https://AKIAIOSFODNN7QK4RW2Z@example.com`
// came back unmasked. The other kinds are now looked for inside a refused match.

/// Secrets that may sit glued inside an e-mail's local part or a URL's credentials.
const GLUED_SECRETS: &[&str] = &[
    "AKIAIOSFODNN7QK4RW2Z",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
    "sk-proj-Zq3xW9vT1bN4mK8pL2rY6sD0fG5hJ7aQ",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
    "4111111111111111",
    "GB82WEST12345698765432",
];

/// Matches that are refused as a whole, with `{}` where the secret goes.
const REFUSED_AROUND: &[&str] = &[
    "{}@2x.png",
    "a.{}@2x.png",
    "https://{}@example.com/path",
    "see https://{}@example.com",
    "postgres://u:****{}@db.example.com/x",
    "postgres://u:****.{}@db.example.com",
    "redis://:${REDIS_PASSWORD}{}@cache:6379",
    "mongodb://u:...-{}@10.0.0.1/db",
];

#[test]
fn a_secret_inside_a_refused_email_or_url_is_still_masked() {
    assert_eq!(
        Masker::default().mask_text("https://AKIAIOSFODNN7QK4RW2Z@example.com", MaskSet::ALL),
        "https://[AWS_ACCESS_KEY]@example.com"
    );
    assert_eq!(
        Masker::default().mask_text("postgres://u:****4111111111111111@db.example.com/x", MaskSet::ALL),
        "postgres://u:****[PAYMENT_CARD]@db.example.com/x"
    );
    // A refused match still refuses its own kind inside: `a.b@2x.png` holds no address.
    assert_eq!(Masker::default().mask_text("logo.jane@2x.png", MaskSet::ALL), "logo.jane@2x.png");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(agent_airlock_tests::proptest_cases(256)))]

    #[test]
    fn a_secret_glued_inside_a_refused_match_never_survives(
        secret in prop::sample::select(GLUED_SECRETS),
        around in prop::sample::select(REFUSED_AROUND),
        before in prop::sample::select(vec!["", "x ", "mail ", "(", "\"", "user="]),
        after in prop::sample::select(vec!["", " ok", ".", ")", "\"", "\n"]),
    ) {
        let text = format!("{before}{}{after}", around.replace("{}", secret));
        for (name, strategy) in strategies() {
            let masker = Masker::new(MaskConfig::new(strategy));
            let once = masker.mask_text(&text, MaskSet::ALL).into_owned();
            prop_assert!(!once.contains(secret), "strategy {}: `{}` survived in {:?}", name, secret, once);
            let twice = masker.mask_text(&once, MaskSet::ALL);
            prop_assert_eq!(twice.as_ref(), once.as_str(), "strategy {}", name);
        }
        let masker = Masker::default();
        prop_assert_eq!(masker.mask_text(&text, MaskSet::ALL), reference_mask(&masker, &text, MaskSet::ALL));
    }
}

/// A `.netrc` entry whose login holds a finding with blanks (a phone number) is no entry in the text (the blank
/// ends the login), and must be none in the masked text either, where the tag holds no blank: the entry's words
/// hold no `[` or `]`, nor do the words between a command and its password flag (`mysql … -pVALUE`). A cookie list
/// read past a quoted value holding a finding reads on in both alike.
#[test]
fn a_tag_inside_a_netrc_entry_a_command_or_a_cookie_list_lets_no_new_match_through() {
    let masker = Masker::default();
    for text in [
        "machine h.example login +1 415 555 2671 password p4ss-w0rd",
        "machine h.example login me@example.com password p4ss-w0rd",
        r#"Cookie: token="a b c"; sid=q9w8e7r6"#,
        r#"Cookie: session="hunter2 token=Zx81kq1234Ab"; sid=q9w8e7r6"#,
        "Cookie: a=+1 415 555 2671; sid=q9w8e7r6",
        // Twelve words between the command and its flag once the phone number is one tag; fifteen before.
        "mysql a b c d e f g h i j k +1 415 555 2671 -pS3cretPass9",
    ] {
        let once = masker.mask_text(text, MaskSet::ALL);
        assert_eq!(masker.mask_text(&once, MaskSet::ALL), once, "{text:?}");
        assert!(!once.contains("q9w8e7r6") || text.starts_with("Cookie: a=+1"), "{text:?} → {once:?}");
    }
    assert_eq!(
        masker.mask_text("machine h.example login +1 415 555 2671 password p4ss-w0rd", MaskSet::ALL),
        "machine h.example login [PHONE] password p4ss-w0rd"
    );
}

/// A Kubernetes Secret's manifest written as text: its `kind: Secret` line is read before the data block whatever
/// the findings between them (an e-mail in an annotation), in the text as in the masked text.
#[test]
fn a_kubernetes_secret_manifests_data_is_masked_past_a_finding_before_it() {
    let masker = Masker::default();
    let manifest = "apiVersion: v1\nkind: Secret\nmetadata:\n  annotations:\n    owner: jane@example.com\n\
                    data:\n  url: cG9zdGdyZXM6Ly9kYg==\n";
    let once = masker.mask_text(manifest, MaskSet::ALL);
    assert_eq!(
        once,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  annotations:\n    owner: [EMAIL]\ndata:\n  url: [SECRET_VALUE]\n"
    );
    for text in [manifest, "\nkind: Secret\n+1 555-0100\ndata:\n  a: db://x", "kind: Secret\ndata:\n  a: +1 555-0100\n"]
    {
        let once = masker.mask_text(text, MaskSet::ALL);
        assert_eq!(masker.mask_text(&once, MaskSet::ALL), once, "{text:?}");
    }
}

/// A `.netrc` entry or a command whose password is refused (a placeholder, a variable) has its other words masked as
/// any text is: a refusal skips no more than the match's first word (found by the fuzzer: an `ldapsearch` match
/// running over twelve words to a placeholder's `-w` had a `password=` value and a JWT among them passed over).
#[test]
fn a_refused_netrc_entry_or_command_still_has_its_words_masked() {
    let masker = Masker::default();
    for (text, masked) in [
        ("machine h.example login me@example.com password <token>", "machine h.example login [EMAIL] password <token>"),
        ("ldapsearch -D admin@example.com -w $LDAP_PW -b dc=x", "ldapsearch -D [EMAIL] -w $LDAP_PW -b dc=x"),
        ("mysql -u root password=Zx81kq1234Ab -p$MYSQL_PWD", "mysql -u root password=[SECRET_VALUE] -p$MYSQL_PWD"),
        (
            "ldapsearch -x password=Zx81kq1234Ab x y -w XXXXXXXXXX",
            "ldapsearch -x password=[SECRET_VALUE] x y -w XXXXXXXXXX",
        ),
    ] {
        let once = masker.mask_text(text, MaskSet::ALL);
        assert_eq!(once, masked, "{text:?}");
        assert_eq!(masker.mask_text(&once, MaskSet::ALL), once, "{text:?}");
    }
}

/// A command's password flag is found by the masker in a text that names nothing else a secret's name holds: each
/// command's name is one of the words whose absence lets a text skip the labelled values (`screen`), so leaving one
/// out would pass its passwords unmasked. The value holds no such word either (`Pass`, `key`).
#[test]
fn each_commands_password_flag_is_masked_in_a_text_naming_no_secret_else() {
    let masker = Masker::default();
    for command in [
        "mysql -u root -pZx81kq1234Ab shop",
        "mariadb -u app -pZx81kq1234Ab",
        "sshpass -p Zx81kq1234Ab ssh deploy@10.0.0.5",
        "redis-cli -h cache -a Zx81kq1234Ab ping",
        "mongodump -u admin -p Zx81kq1234Ab --out /tmp/d",
        "ldapsearch -x -D cn=admin -w Zx81kq1234Ab -b dc=x",
        "docker login -u ci -p Zx81kq1234Ab ghcr.io",
        "podman login -u ci -p Zx81kq1234Ab quay.io",
        "nerdctl login -u ci -p Zx81kq1234Ab ghcr.io",
        "buildah login -u ci -p Zx81kq1234Ab quay.io",
        "skopeo login -u ci -p Zx81kq1234Ab quay.io",
        "helm registry login ghcr.io -u ci -p Zx81kq1234Ab",
        "openssl rsa -in a.pem -passin pass:Zx81kq1234Ab -out b.pem",
    ] {
        let masked = masker.mask_text(command, MaskSet::SECRETS);
        assert!(!masked.contains("Zx81kq1234Ab") && masked.contains("[SECRET_VALUE]"), "{command:?}: {masked}");
    }
}
