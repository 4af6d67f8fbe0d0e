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
