//! Unit tests of `condition`.

use serde_json::json;

use super::*;

fn args(value: Value) -> Arguments {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("test arguments are objects"),
    }
}

fn eval(condition: &str, value: Value) -> Evaluation {
    Condition::parse(condition).unwrap().evaluate(&args(value))
}

#[test]
fn comparisons_are_typed_and_exact() {
    assert_eq!(eval("amount > 10000", json!({"amount": 10001})), Evaluation::Holds);
    assert_eq!(eval("amount > 10000", json!({"amount": 10000})), Evaluation::DoesNotHold);
    assert_eq!(eval("amount >= 10000", json!({"amount": 10000.0})), Evaluation::Holds);
    assert_eq!(eval("amount < 1.5", json!({"amount": 1})), Evaluation::Holds);
    assert_eq!(eval("amount <= -1", json!({"amount": -2})), Evaluation::Holds);
    assert_eq!(eval("id == 18446744073709551615", json!({"id": u64::MAX})), Evaluation::Holds);
    assert_eq!(eval("id == 18446744073709551615", json!({"id": u64::MAX - 1})), Evaluation::DoesNotHold);
    assert_eq!(eval("currency != \"usd\"", json!({"currency": "eur"})), Evaluation::Holds);
    assert_eq!(eval("force == true", json!({"force": false})), Evaluation::DoesNotHold);
    assert_eq!(eval("currency in [\"usd\", \"eur\"]", json!({"currency": "eur"})), Evaluation::Holds);
    assert_eq!(eval("currency in [\"usd\", \"eur\"]", json!({"currency": "gbp"})), Evaluation::DoesNotHold);
    assert_eq!(eval("path starts_with \"/etc/\"", json!({"path": "/etc/passwd"})), Evaluation::Holds);
    assert_eq!(eval("currency in[\"usd\"]", json!({"currency": "usd"})), Evaluation::Holds);
    assert_eq!(eval("path matches\"/a/*\"", json!({"path": "/a/b"})), Evaluation::Holds);
    assert_eq!(eval("to.address.zip == \"10115\"", json!({"to": {"address": {"zip": "10115"}}})), Evaluation::Holds);
    assert_eq!(eval("items[1].sku == \"b\"", json!({"items": [{"sku": "a"}, {"sku": "b"}]})), Evaluation::Holds);
}

#[test]
fn globs_separate_path_components() {
    let ssh = |path: &str| eval("path matches \"**/.ssh/**\"", json!({ "path": path }));
    assert_eq!(ssh("/home/me/.ssh/id_ed25519"), Evaluation::Holds);
    assert_eq!(ssh(".ssh/authorized_keys"), Evaluation::Holds);
    assert_eq!(ssh("/home/me/notes.txt"), Evaluation::DoesNotHold);
    assert_eq!(eval("path matches \"/tmp/*\"", json!({"path": "/tmp/a/b"})), Evaluation::DoesNotHold);
}

#[test]
fn path_spellings_match_as_documented() {
    let ssh = |path: &str| eval("path matches \"**/.ssh/**\"", json!({ "path": path })).applies();
    for path in [
        "/home/me/.ssh/id",
        "/home//me/.ssh/id",
        "/home/me//.ssh//id",
        "/home/me/./.ssh/id",
        "/home/me/.ssh/./id",
        "/tmp/../home/me/.ssh/id",
        "/home/me/x/../.ssh/id",
        "~/.ssh/id",
        ".ssh/id",
        "./.ssh/id",
        "../.ssh/id",
        "/.ssh/id",
        "a/b/c/d/.ssh/e/f",
    ] {
        assert!(ssh(path), "{path} must match");
    }
    // Case-sensitive: a class spells the case-insensitive rule.
    assert!(!ssh("/home/me/.SSH/id"));
    assert!(!ssh("/home/me/.Ssh/id"));
    let any_case = |path: &str| eval("path matches \"**/.[sS][sS][hH]/**\"", json!({ "path": path })).applies();
    assert!(any_case("/home/me/.SSH/id") && any_case("/home/me/.Ssh/id") && any_case("/home/me/.ssh/id"));
    // A backslash is not a separator in the argument.
    assert!(!ssh("C:\\Users\\me\\.ssh\\id"));
    assert!(!ssh("/home/me\\.ssh\\id"));
    let windows = |path: &str| eval(r#"path matches "**\\\\.ssh\\\\**""#, json!({ "path": path })).applies();
    assert!(windows("C:\\Users\\me\\.ssh\\id"));
    // In the glob, a backslash escapes: `\\*` is a literal star.
    let star = |path: &str| eval(r#"path matches "/tmp/\\*""#, json!({ "path": path })).applies();
    assert!(star("/tmp/*") && !star("/tmp/a"));
    // A prefix is not a component: dot segments walk out of it.
    let prefix = |path: &str| eval("path matches \"/home/me/**\"", json!({ "path": path })).applies();
    assert!(!prefix("/tmp/../home/me/x"));
}

#[test]
fn missing_and_mistyped_arguments_fail_closed() {
    let missing = eval("amount > 10000", json!({}));
    assert_eq!(missing, Evaluation::FailedClosed("argument `amount` is missing".to_owned()));
    assert!(missing.applies());
    assert_eq!(
        eval("amount > 10000", json!({"amount": "20000"})),
        Evaluation::FailedClosed("argument `amount` is a string, not a number".to_owned())
    );
    assert!(eval("path matches \"**\"", json!({"path": ["a"]})).applies());
    assert!(eval("currency != \"usd\"", json!({"currency": 1})).applies());
    assert!(eval("a.b == 1", json!({"a": 1})).applies());
    assert!(eval("a[3] == 1", json!({"a": [1]})).applies());
    assert!(eval("a.b == 1", json!({"a": {"b": null}})).applies());
    assert!(!eval("amount > 10000", json!({"amount": 1})).applies());
}

fn payments_member() -> Identity {
    Identity::new("https://issuer.test", "alice")
        .with_claim("groups", json!(["payments", "staff"]))
        .with_claim("scope", json!(["mcp:tools", "read"]))
        .with_claim("level", json!(3))
}

fn on_identity(condition: &str, identity: Option<&Identity>) -> Evaluation {
    Condition::parse(condition).unwrap().evaluate_for(&Arguments::new(), identity)
}

#[test]
fn identity_conditions_test_the_callers_claims() {
    let alice = payments_member();
    let bob = Identity::new("https://issuer.test", "bob").with_claim("groups", json!(["support"]));
    let member = "identity.groups contains \"payments\"";
    assert_eq!(on_identity(member, Some(&alice)), Evaluation::Holds);
    assert_eq!(on_identity(member, Some(&bob)), Evaluation::DoesNotHold);
    assert_eq!(on_identity("identity.sub == \"alice\"", Some(&alice)), Evaluation::Holds);
    assert_eq!(on_identity("identity.sub == \"alice\"", Some(&bob)), Evaluation::DoesNotHold);
    assert_eq!(on_identity("identity.iss == \"https://issuer.test\"", Some(&bob)), Evaluation::Holds);
    assert_eq!(on_identity("identity.scope contains \"read\"", Some(&alice)), Evaluation::Holds);
    assert_eq!(on_identity("identity.level >= 3", Some(&alice)), Evaluation::Holds);
    assert_eq!(on_identity("identity.groups[0] == \"payments\"", Some(&alice)), Evaluation::Holds);
    // `not` flips a decided condition.
    let outsider = "not (identity.groups contains \"payments\")";
    assert_eq!(on_identity(outsider, Some(&alice)), Evaluation::DoesNotHold);
    assert_eq!(on_identity(outsider, Some(&bob)), Evaluation::Holds);
    assert_eq!(on_identity("not(not(identity.sub == \"bob\"))", Some(&bob)), Evaluation::Holds);
    assert!(Condition::parse(outsider).unwrap().is_about_identity());
    assert!(!Condition::parse("not (amount > 1)").unwrap().is_about_identity());
}

#[test]
fn identity_conditions_fail_closed_without_an_identity_or_a_claim_even_negated() {
    let outsider = "not (identity.groups contains \"payments\")";
    let none = on_identity(outsider, None);
    assert_eq!(none, Evaluation::FailedClosed("the call carries no verified identity".to_owned()));
    assert!(none.applies());
    assert!(on_identity("identity.groups contains \"payments\"", None).applies());
    let no_groups = Identity::new("https://issuer.test", "carol");
    let missing = on_identity(outsider, Some(&no_groups));
    assert_eq!(missing, Evaluation::FailedClosed("identity claim `groups` is missing".to_owned()));
    // A claim of another type is undecided too: a string is not a list.
    let stringly = Identity::new("https://issuer.test", "dave").with_claim("groups", json!("payments"));
    assert_eq!(
        on_identity(outsider, Some(&stringly)),
        Evaluation::FailedClosed("identity claim `groups` is a string, not a list".to_owned())
    );
    // A claim named `sub` cannot replace the subject.
    let forged = Identity::new("https://issuer.test", "eve").with_claim("sub", json!("alice"));
    assert_eq!(on_identity("identity.sub == \"alice\"", Some(&forged)), Evaluation::DoesNotHold);
    // The argument form is unchanged by an identity: `identity.x` never reads an argument.
    let args = args(json!({"identity": {"sub": "alice"}}));
    let parsed = Condition::parse("identity.sub == \"alice\"").unwrap();
    assert!(matches!(parsed.evaluate(&args), Evaluation::FailedClosed(_)));
}

#[test]
fn contains_and_not_work_on_arguments_too() {
    assert_eq!(eval("tags contains \"urgent\"", json!({"tags": ["a", "urgent"]})), Evaluation::Holds);
    assert_eq!(eval("tags contains \"urgent\"", json!({"tags": ["a"]})), Evaluation::DoesNotHold);
    assert_eq!(eval("ids contains 2", json!({"ids": [1, 2.0]})), Evaluation::Holds);
    // An item of another type leaves the test undecided, so the rule applies (fail closed)...
    let undecided = eval("ids contains 2", json!({"ids": ["2"]}));
    assert_eq!(undecided, Evaluation::FailedClosed("argument `ids` holds a string, not only a number".into()));
    assert!(eval("tags contains \"prod\"", json!({"tags": [["prod"]]})).applies());
    assert!(eval("tags contains \"prod\"", json!({"tags": ["dev", {"v": "prod"}]})).applies());
    // ...unless the item is there anyway.
    assert_eq!(eval("tags contains \"prod\"", json!({"tags": [["x"], "prod"]})), Evaluation::Holds);
    assert!(eval("tags contains \"x\"", json!({"tags": "x"})).applies());
    assert_eq!(eval("not (amount > 10)", json!({"amount": 5})), Evaluation::Holds);
    assert_eq!(eval("not (amount > 10)", json!({"amount": 50})), Evaluation::DoesNotHold);
    assert!(eval("not (amount > 10)", json!({})).applies());
    assert_eq!(eval("not ( currency in [\"usd\"] ) ", json!({"currency": "eur"})), Evaluation::Holds);
}

#[test]
fn refuses_malformed_identity_and_negated_conditions() {
    let err = |c: &str| Condition::parse(c).unwrap_err();
    assert!(err("identity == \"x\"").message.starts_with("expected a claim after `identity`"));
    assert_eq!(err("not (amount > 5").message, "expected `)` to close `not (`");
    assert_eq!(err("not (amount > 5").offset, 15);
    assert!(err("not (amount > 5))").message.contains("trailing characters"));
    assert_eq!(
        Condition::parse("not (name == \"a)\")").unwrap().evaluate(&args(json!({"name": "a)"}))),
        Evaluation::DoesNotHold
    );
    assert_eq!(err("not (amount >)").message, "expected a value after `>`");
    assert!(err("tags contains [1]").message.contains("`contains` needs the item"));
    // `not` without a parenthesis is an argument named `not`.
    assert!(err("not amount > 5").message.starts_with("expected an operator"));
}

#[test]
fn refuses_each_malformed_condition_with_its_offset() {
    let err = |c: &str| Condition::parse(c).unwrap_err();
    assert_eq!(err("> 5").offset, 0);
    assert!(err("> 5").message.starts_with("expected an argument name"));
    assert_eq!(err("amount ~ 5").offset, 7);
    assert!(err("amount ~ 5").message.contains("one of `==`"));
    assert_eq!(err("amount >").message, "expected a value after `>`");
    assert_eq!(err("amount > \"5\"").offset, 9);
    assert!(err("amount > \"5\"").message.contains("compares numbers"));
    assert_eq!(err("amount > 5 6").offset, 11);
    assert!(err("x in []").message.contains("non-empty"));
    assert!(err("x in [1, \"a\"]").message.contains("one type"));
    assert!(err("x == null").message.contains("needs a number, string or boolean"));
    assert!(err("path matches \"[\"").message.starts_with("invalid glob `[`"));
    assert!(err("path starts_with 5").message.contains("needs a string"));
    assert_eq!(err("a. == 1").offset, 2);
    assert_eq!(err("a[x] == 1").offset, 1);
    assert_eq!(err("inx 5").offset, 4);
}
