//! Unit tests of `mask`.

use super::*;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn masker_is_shareable() {
    assert_send_sync::<Masker>();
    assert_send_sync::<MaskReport>();
}

#[test]
fn a_text_over_the_budget_is_refused_whole() {
    let masker = Masker::new(MaskConfig::default().with_max_text_bytes(64));
    let long = format!("{} nothing secret here", "word ".repeat(20));
    assert_eq!(masker.mask_text(&long, MaskSet::SECRETS), too_large(long.len(), 64));
    assert_eq!(masker.detect(&long, MaskSet::SECRETS).len(), 1);
    assert_eq!(masker.mask_text("short, AKIAIOSFODNN7QK4RW2Z", MaskSet::SECRETS), "short, [AWS_ACCESS_KEY]");
    // A JSON value holding it is over the budget too, and refused whole.
    let mut value = serde_json::json!({"note": long, "ok": "fine"});
    masker.mask_value(&mut value, MaskSet::SECRETS);
    assert_eq!(value, serde_json::Value::String(too_large("note".len() + long.len() + "okfine".len(), 64)));
}

#[test]
fn a_json_value_over_the_budget_is_refused_whole_though_each_leaf_is_under_it() {
    let masker = Masker::new(MaskConfig::default().with_max_text_bytes(64));
    // Each leaf and key is under 64 bytes; together they are over.
    let leaf = "AKIAIOSFODNN7QK4RW2Z plain text";
    let mut value = serde_json::json!({"left": leaf, "more": [leaf, {"key": "AKIAIOSFODNN7QK4RW2Z"}]});
    let bytes = text_bytes(&value);
    assert_eq!(bytes, 4 + 31 + 4 + 31 + 3 + 20);
    masker.mask_value(&mut value, MaskSet::SECRETS);
    assert_eq!(value, serde_json::Value::String(too_large(bytes, 64)));
    // At the budget it is masked as usual, leaf by leaf.
    let masker = Masker::new(MaskConfig::default().with_max_text_bytes(bytes));
    let mut value = serde_json::json!({"left": leaf, "more": [leaf, {"key": "AKIAIOSFODNN7QK4RW2Z"}]});
    masker.mask_value(&mut value, MaskSet::SECRETS);
    let masked = "[AWS_ACCESS_KEY] plain text";
    assert_eq!(value, serde_json::json!({"left": masked, "more": [masked, {"key": "[AWS_ACCESS_KEY]"}]}));
}

#[test]
fn text_without_an_at_sign_is_scanned_without_the_email_pattern() {
    let set = MaskSet::SECRETS | MaskSet::PII;
    let narrowed = detect::narrow(set, "card 4111 1111 1111 1111, AKIAIOSFODNN7QK4RW2Z");
    assert!(!narrowed.contains_kind(MaskKind::Email) && narrowed.contains_kind(MaskKind::PaymentCard));
    assert!(detect::narrow(set, "jane@example.com").contains_kind(MaskKind::Email));
    assert_eq!(detect::narrow(set, "jane@example.com https://example.com"), set);
    let masker = Masker::default();
    assert_eq!(masker.mask_text("card 4111 1111 1111 1111", set), "card [PAYMENT_CARD]");
}

#[test]
fn nothing_found_borrows() {
    let masker = Masker::default();
    assert!(matches!(masker.mask_text("plain text, version 1.2.3.4", MaskSet::ALL), Cow::Borrowed(_)));
    assert!(matches!(masker.mask_text("jane@example.com", MaskSet::NONE), Cow::Borrowed(_)));
}

/// [`all_findings`] as it merged before: the merged list always built, the scanner's findings copied into it.
fn all_findings_the_long_way(scanner: &Scanner, only: MaskSet, text: &str) -> Vec<Finding> {
    let providers = if only.contains_kind(MaskKind::SecretValue) { providers::providers() } else { None };
    let Some(providers) = providers else { return settled_findings(scanner, only, text, true) };
    let pass = providers.keyword_pass(text);
    let found = settled_findings(scanner, only, text, pass.names_a_secret);
    let mut merged = Vec::with_capacity(found.len());
    let mut native = found.iter().copied().peekable();
    providers.find_in(pass, text, &found, |secret| {
        while let Some(finding) = native.next_if(|f| f.start < secret.end) {
            merged.push(finding);
        }
        let overlaps = merged.last().is_some_and(|f: &Finding| f.end > secret.start)
            || native.peek().is_some_and(|f| f.start < secret.end);
        if !overlaps {
            merged.push(Finding { kind: MaskKind::SecretValue, start: secret.start, end: secret.end, keep_prefix: 0 });
        }
    });
    merged.extend(native);
    merged
}

/// Texts holding our own findings and gitleaks' provider secrets side by side, apart, glued and overlapping.
fn merge_texts() -> Vec<String> {
    let secrets: Vec<&str> = include_str!("../../../tests/masking/gitleaks/true_positives.tsv")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split('\t').nth(2))
        .collect();
    let ours = ["jane@example.com", "AKIAIOSFODNN7QK4RW2Z", "4111 1111 1111 1111", "password=hunter2!", "123-45-6789"];
    let mut texts: Vec<String> = secrets
        .iter()
        .zip(ours.iter().cycle())
        .map(|(secret, own)| format!("{own} {secret} {own}, key={secret}; {own}{secret}"))
        .collect();
    texts.push(secrets.join("\n"));
    texts.push(String::from("rotated key=AKIA4HK2Q7ZLMX9RT3WB; token: ghp_R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV"));
    texts.push(String::from("nothing here but glpat- and xoxb- keywords, user0@example.com"));
    texts
}

#[test]
fn the_merge_of_provider_secrets_is_the_long_ways() {
    let set = MaskSet::SECRETS | MaskSet::PII;
    let (scanner, only) = detect::scanner(set).unwrap();
    let (mut without, mut with) = (0, 0);
    for text in merge_texts() {
        let found = all_findings(&scanner, only, &text);
        assert_eq!(found, all_findings_the_long_way(&scanner, only, &text), "{text}");
        let natives = settled_findings(&scanner, only, &text, true).len();
        if found.len() == natives { without += 1 } else { with += 1 }
    }
    // Both paths are taken: texts whose provider secrets add findings, and texts where none does.
    assert!(with > 1_000 && without > 100, "{with} texts with provider secrets merged, {without} without");
}
