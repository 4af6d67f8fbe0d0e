//! Unit tests of `file`.

use serde_json::json;

use super::*;
use crate::policy::condition::Evaluation;
use crate::policy::{ConditionAction, FindingKind};

const EXAMPLE: &str = r#"
version = 1
default = "deny"
deny = ["delete_*"]
allow = ["read_*", "refund", "write_file", "delete_all"]
deny_resources = ["file:///**/.env"]
deny_prompts = ["admin_*"]
allow_resources = ["file:///srv/**"]
allow_prompts = ["summarise", "admin_*"]

[resources."file:///srv/docs/**"]
rate = "30/minute"
mask = "pii"

[prompts.summarise]
rate = "10/minute"
allow_findings = ["long_description"]

[resources."note://{name}"]
allow_findings = ["cross_tool", "instruction_tag"]

[tools.refund]
escalate = "moves money"
approvals = 2
rate = "10/minute"
rate_per = "thread"
mask = "pii"
effect = "refund:{payment_id}"
pin = "sha256:abc"
approver = "operator"
allow_findings = ["secret_parameter", "long_description"]

[[tools.refund.when]]
if = "amount > 10000"
escalate = "large refund"

[tools."write_*"]
ghost = "block"
when = [{ if = 'path matches "**/.ssh/**"', deny = "never write ssh keys" }]
"#;

#[test]
fn rate_shared_makes_a_shared_rule_per_tool_or_per_thread() {
    let text = "version = 1\ndefault = \"allow\"\n\
            [tools.refund]\nrate = \"3/minute\"\nrate_shared = true\n\
            [tools.\"chat_*\"]\nrate = \"5/hour\"\nrate_per = \"thread\"\nrate_shared = true\n\
            [tools.local]\nrate = \"7/day\"\nrate_shared = false\n";
    let policy = Policy::from_toml(text).unwrap();
    let refund = policy.for_tool("refund");
    assert!(refund.rate_limits.is_empty());
    assert_eq!(refund.shared_rate_limits, vec![("refund".to_owned(), "3/minute".parse().unwrap(), RateScope::PerTool)]);
    let chat = policy.for_tool("chat_send");
    assert!(chat.rate_limits.is_empty());
    assert_eq!(chat.shared_rate_limits, vec![("chat_*".to_owned(), "5/hour".parse().unwrap(), RateScope::PerThread)]);
    let local = policy.for_tool("local");
    assert_eq!(local.rate_limits, vec![("local".to_owned(), "7/day".parse().unwrap(), RateScope::PerTool)]);
    assert!(local.shared_rate_limits.is_empty());
    assert!(policy.summary().contains("rate      refund: 3/minute, shared by every host"), "{}", policy.summary());
}

#[test]
fn deny_resources_match_every_spelling_of_a_denied_uri() {
    let text = "version = 1\ndefault = \"allow\"\ndeny_resources = [\"config://secrets\", \"file:///**/.env\"]\n";
    let policy = Policy::from_toml(text).unwrap();
    for uri in [
        "config://secrets",
        "CONFIG://secrets",
        "Config://secrets",
        " config://secrets",
        "config://sec\trets",
        "config://SECRETS",
        "config://secr%65ts",
        "file:///home/me/.env",
        "file://localhost/home/me/.env",
        "file:///home/me/%2Eenv",
        "file:///home/me/notes/../.env",
    ] {
        assert!(policy.resource_denied_by(uri).is_some(), "{uri:?} is read");
    }
    for uri in ["config://app", "file:///home/me/notes.txt", "note://a.txt"] {
        assert_eq!(policy.resource_denied_by(uri), None, "{uri}");
    }
    // Without resource rules nothing is screened, a URI without a normal form included.
    assert_eq!(Policy::from_toml("version = 1\ndefault = \"allow\"\n").unwrap().resource_denied_by(" x"), None);
}

/// What an upstream that percent-decodes would read differently from the normal form the globs match (an
/// encoded separator), and a `file:` URI on another host, are refused by an allow list, a deny list and a
/// table alike; the URIs they hold for pass as before.
#[test]
fn uris_an_upstream_may_read_otherwise_than_the_globs_are_refused() {
    let allow =
        Policy::from_toml("version = 1\ndefault = \"deny\"\nallow_resources = [\"file:///srv/notes/**\"]\n").unwrap();
    for uri in [
        "file:///srv/notes/..%2F..%2Fetc%2Fpasswd",
        "file:///srv/notes/..%2f..%2fetc%2fpasswd",
        "file:///srv/notes/..%5C..%5Cetc%5Cpasswd",
        "file://x/srv/notes/a.txt",
    ] {
        assert_eq!(allow.resource_denied_by(uri), Some(super::super::uri::UNREADABLE_URI), "{uri}");
    }
    assert_eq!(allow.resource_denied_by("file:///srv/notes/a.txt"), None);
    assert_eq!(allow.resource_denied_by("file://localhost/srv/notes/a%20b.txt"), None);
    assert_eq!(allow.resource_denied_by("file:///srv/notes/../../etc/passwd"), Some("not in allow list"));

    let deny = Policy::from_toml("version = 1\ndefault = \"allow\"\ndeny_resources = [\"file:///**/.env\"]\n").unwrap();
    for uri in ["file:///home/me/docs%2F..%2F.env", "file://x/home/me/.env", "file://x/home/me/%2Eenv"] {
        assert!(deny.resource_denied_by(uri).is_some(), "{uri} escapes the deny");
    }
    assert_eq!(deny.resource_denied_by("file:///home/me/docs/notes.txt"), None);

    // A table alone names resources too: its mask or rate cannot be slipped by a URI it cannot read.
    let table =
        Policy::from_toml("version = 1\ndefault = \"allow\"\n[resources.\"file:///**\"]\nmask = \"pii\"\n").unwrap();
    assert!(table.resource_denied_by("file:///home/me/docs%2Fnotes.txt").is_some());
    assert_eq!(table.for_surface(Surface::Resource, "file:///home/me/notes.txt").mask, "pii".parse().unwrap());
}

#[test]
fn the_strictest_approver_wins_whatever_the_order_of_the_tables() {
    for text in [
        "version = 1\ndefault = \"allow\"\n[tools.\"*\"]\napprover = \"client\"\n[tools.transfer]\napprover = \"operator\"\n",
        "version = 1\ndefault = \"allow\"\n[tools.transfer]\napprover = \"operator\"\n[tools.\"*\"]\napprover = \"client\"\n",
        "version = 1\ndefault = \"allow\"\n[tools.\"t*\"]\napprover = \"operator\"\n[tools.transfer]\napprover = \"client\"\n",
    ] {
        let policy = Policy::from_toml(text).unwrap();
        assert_eq!(policy.for_tool("transfer").approver, ApprovalRoute::Operator, "{text}");
    }
    let policy = Policy::from_toml(
            "version = 1\ndefault = \"allow\"\n[tools.\"*\"]\napprover = \"client\"\n[tools.transfer]\napprover = \"operator\"\n",
        )
        .unwrap();
    assert_eq!(policy.for_tool("read").approver, ApprovalRoute::Client);
}

#[test]
fn tables_naming_no_offered_tool_are_reported_with_the_closest_name() {
    let text = "version = 1\ndefault = \"allow\"\n[tools.wirte_file]\nescalate = \"x\"\n[tools.\"read_*\"]\n\
                    [tools.\"admin_*\"]\n[tools.list_directory]\n[tools.zzz]\n";
    let policy = Policy::from_toml(text).unwrap();
    let offered = ["write_file", "read_file", "list_directory"];
    let unmatched = policy.tables_naming_no_tool(offered);
    let shown: Vec<String> = unmatched.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "`[tools.wirte_file]` names no tool the server offers (did you mean `write_file`?)",
            "`[tools.admin_*]` names no tool the server offers",
            "`[tools.zzz]` names no tool the server offers",
        ]
    );
}

#[test]
fn reads_every_rule_through_the_builder() {
    let policy = Policy::from_toml(EXAMPLE).unwrap();
    assert!(policy.is_default_deny());
    assert_eq!(policy.mode(), PolicyMode::Enforce);
    assert_eq!(policy.for_tool("read_file").denied_by, None);
    assert_eq!(policy.for_tool("delete_all").denied_by.as_deref(), Some("delete_*"));
    assert_eq!(policy.for_tool("send_mail").denied_by.as_deref(), Some("not in allow list"));

    let refund = policy.for_tool("refund");
    assert_eq!(refund.escalations, vec![("refund".to_owned(), "moves money".to_owned())]);
    assert_eq!(refund.approvals, 2);
    assert_eq!(policy.for_tool("read_file").approvals, 1);
    assert_eq!(refund.rate_limits.len(), 1);
    assert_eq!(refund.rate_limits[0].2, RateScope::PerThread);
    assert_eq!(refund.mask, "pii".parse().unwrap());
    assert_eq!(refund.effect.as_ref().map(|(_, e)| e.template()), Some("refund:{payment_id}"));
    assert_eq!(refund.pin.as_deref(), Some("sha256:abc"));
    assert_eq!(policy.pin("refund"), Some("sha256:abc"));
    assert_eq!(refund.approver, ApprovalRoute::Operator);
    assert_eq!(
        policy.allowed_findings().get("refund").map(|kinds| kinds.iter().copied().collect::<Vec<_>>()),
        Some(vec![FindingKind::SecretParameter, FindingKind::LongDescription])
    );
    assert_eq!(policy.allowed_findings().len(), 1);
    let kinds = |surface, key: &str| {
        policy.allowed_surface_findings(surface).get(key).map(|kinds| kinds.iter().copied().collect::<Vec<_>>())
    };
    assert_eq!(kinds(Surface::Prompt, "summarise"), Some(vec![FindingKind::LongDescription]));
    assert_eq!(
        kinds(Surface::Resource, "note://{name}"),
        Some(vec![FindingKind::InstructionTag, FindingKind::CrossTool])
    );
    assert_eq!((kinds(Surface::Resource, "summarise"), kinds(Surface::Prompt, "note://{name}")), (None, None));
    assert!(policy.summary().contains("findings  prompt summarise: long_description allowed"), "{}", policy.summary());
    assert_eq!(policy.resource_denied_by("file:///srv/app/.env"), Some("file:///**/.env"));
    assert_eq!(policy.resource_denied_by("file:///srv/app/main.rs"), None);
    assert_eq!((policy.prompt_denied_by("admin_reset"), policy.prompt_denied_by("summarise")), (Some("admin_*"), None));
    assert_eq!(policy.resource_denied_by("file:///etc/passwd"), Some("not in allow list"));
    let docs = policy.for_surface(Surface::Resource, "FILE:///srv/docs/../docs/a.md");
    assert_eq!((docs.denied_by, docs.mask), (None, "pii".parse().unwrap()));
    assert_eq!(docs.rate_limits, vec![(0, "file:///srv/docs/**".to_owned(), "30/minute".parse().unwrap())]);
    let summarise = policy.for_surface(Surface::Prompt, "summarise");
    assert_eq!(summarise.rate_limits, vec![(0, "summarise".to_owned(), "10/minute".parse().unwrap())]);
    assert_eq!(policy.for_surface(Surface::Prompt, "other").denied_by.as_deref(), Some("not in allow list"));
    assert_eq!(policy.for_tool("write_file").approver, ApprovalRoute::Client, "the client's human by default");
    assert_eq!(refund.conditions.len(), 1);
    assert_eq!(refund.conditions[0].name(), "refund when amount > 10000");
    assert_eq!(refund.conditions[0].action(), &ConditionAction::Escalate("large refund".to_owned()));
    let big = json!({"amount": 20000});
    assert_eq!(refund.conditions[0].evaluate(big.as_object().unwrap()), Evaluation::Holds);

    let write = policy.for_tool("write_file");
    assert_eq!(write.ghost_block.as_deref(), Some("write_*"));
    assert_eq!(write.conditions[0].action(), &ConditionAction::Deny("never write ssh keys".to_owned()));
    assert_eq!(write.effect, None);
}

/// A resource's findings are accepted for an exact URI or URI template: RFC 6570 templates keep their `*` and
/// `?` (`files://{path*}`, `search://{?q}`), a URI without braces may not have them.
#[test]
fn findings_are_accepted_for_uri_templates_as_written() {
    let policy = Policy::from_toml(
        "version = 1\ndefault = \"allow\"\n[resources.\"files://{path*}\"]\nallow_findings = [\"override\"]\n\
         [resources.\"search://{?q}\"]\nallow_findings = [\"cross_tool\"]\n",
    )
    .unwrap();
    let keys: Vec<&str> = policy.allowed_surface_findings(Surface::Resource).keys().map(String::as_str).collect();
    assert_eq!(keys, ["files://{path*}", "search://{?q}"]);
    let pinned =
        Policy::from_toml("version = 1\ndefault = \"allow\"\n[prompts.summarise]\npin = \"sha256:abc\"\n").unwrap();
    assert_eq!(pinned.surface_pins(Surface::Prompt).get("summarise").map(String::as_str), Some("sha256:abc"));
    assert!(pinned.surface_pins(Surface::Resource).is_empty());
    let refused = Policy::from_toml(
        "version = 1\ndefault = \"allow\"\n[resources.\"files://a?b\"]\nallow_findings = [\"override\"]\n",
    )
    .unwrap_err();
    assert!(refused.message.contains("not a glob"), "{refused}");
}

/// `(line, column, message)` of the error `text` is refused with.
fn refused(text: &str) -> (usize, usize, String) {
    let err = Policy::from_toml(text).unwrap_err();
    (err.line, err.column, err.message)
}

const HEAD: &str = "version = 1\ndefault = \"allow\"\n";

#[test]
fn every_refusal_names_its_line_and_column() {
    let h = |rest: &str| format!("{HEAD}{rest}");
    let cases: Vec<(String, usize, usize, &str)> = vec![
        // TOML syntax, unknown keys at every level, wrong types, unknown enum values.
        (h("deny = [\"a\"\n"), 3, 12, "unclosed array, expected `]`"),
        (h("colour = \"red\"\n"), 3, 1, "unknown field `colour`, expected one of `version`, `default`"),
        (h("[tools.refund]\nescalte = \"x\"\n"), 4, 1, "unknown field `escalte`, expected one of `escalate`"),
        (h("[[tools.refund.when]]\nif = \"a > 1\"\ndeny = \"x\"\nreason = \"y\"\n"), 6, 1, "unknown field `reason`"),
        ("default = \"allow\"\n".to_owned(), 1, 1, "missing field `version`"),
        ("version = 1\n".to_owned(), 1, 1, "missing field `default`"),
        ("version = 2\ndefault = \"allow\"\n".to_owned(), 1, 11, "unsupported policy version `2`, expected `1`"),
        ("version = \"1\"\ndefault = \"allow\"\n".to_owned(), 1, 11, "invalid type: string \"1\", expected i64"),
        ("version = 1\ndefault = \"maybe\"\n".to_owned(), 2, 11, "unknown variant `maybe`, expected `allow` or `deny`"),
        (h("mode = \"loud\"\n"), 3, 8, "unknown variant `loud`, expected `enforce` or `observe`"),
        (h("[tools.refund]\napprover = \"boss\"\n"), 4, 12, "unknown variant `boss`, expected `client` or `operator`"),
        (h("[tools.refund]\nghost = \"maybe\"\n"), 4, 9, "unknown variant `maybe`, expected `strip` or `block`"),
        (h("[tools.refund]\nrate_per = \"galaxy\"\nrate = \"1/minute\"\n"), 4, 12, "unknown variant `galaxy`"),
        // Globs: deny and allow lists, tool keys (even of an empty table).
        (h("deny = [\"ok\", \"[\"]\n"), 3, 15, "invalid glob `[`: unclosed character class"),
        ("version = 1\ndefault = \"deny\"\nallow = [\"a{\"]\n".to_owned(), 3, 10, "invalid glob `a{`"),
        (h("[tools.\"[x\"]\n"), 3, 8, "invalid glob `[x`"),
        (h("deny_resources = [\"[\"]\n"), 3, 19, "invalid glob `[`"),
        (h("deny_prompts = [\"a{\"]\n"), 3, 17, "invalid glob `a{`"),
        (h("allow = [\"read_*\"]\n"), 3, 10, "`allow` lists only matter with `default = \"deny\"`"),
        (
            h("allow_prompts = [\"summarise\"]\n"),
            3,
            18,
            "`allow_prompts` lists only matter with `default = \"deny\"`: under `default = \"allow\"` every prompt",
        ),
        ("version = 1\ndefault = \"deny\"\nallow_resources = [\"[\"]\n".to_owned(), 3, 20, "invalid glob `[`"),
        (h("[resources.\"[x\"]\n"), 3, 12, "invalid glob `[x`"),
        (h("[prompts.summarise]\nrate = \"1/fortnight\"\n"), 4, 8, "invalid rate `1/fortnight` for `summarise`"),
        (h("[resources.\"a://*\"]\nmask = \"gossip\"\n"), 4, 8, "invalid mask `gossip` for `a://*`"),
        (
            h("[prompts.summarise]\nescalate = \"no\"\n"),
            4,
            1,
            "unknown field `escalate`, expected one of `rate`, `mask`, `pin`, `allow_findings`",
        ),
        // Rates.
        (
            h("[tools.refund]\nrate = \"5/fortnight\"\n"),
            4,
            8,
            "invalid rate `5/fortnight` for `refund`: unknown rate unit `fortnight`",
        ),
        (
            h("[tools.refund]\nrate = \"0/minute\"\n"),
            4,
            8,
            "invalid rate `0/minute` for `refund`: rate count must be at least 1",
        ),
        (h("[tools.refund]\nrate_per = \"thread\"\n"), 4, 12, "`rate_per` needs a `rate`"),
        (h("[tools.refund]\nrate_shared = true\n"), 4, 15, "`rate_shared` needs a `rate`"),
        (
            h("[tools.refund]\nrate = \"1/minute\"\nrate_shared = \"yes\"\n"),
            5,
            15,
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            h("[tools.refund]\nrate = \"1/fortnight\"\nrate_shared = true\n"),
            4,
            8,
            "invalid rate `1/fortnight` for `refund`: unknown rate unit `fortnight`",
        ),
        // Masks, templates, pins, reasons.
        (
            h("[tools.refund]\nmask = \"pii,gossip\"\n"),
            4,
            8,
            "invalid mask `pii,gossip` for `refund`: unknown mask set `gossip`",
        ),
        (
            h("[tools.refund]\neffect = \"refund:{id\"\n"),
            4,
            10,
            "invalid effect template `refund:{id` for `refund`: unclosed `{`",
        ),
        (h("[tools.refund]\neffect = \"refund\"\n"), 4, 10, "an effect template needs at least one `{parameter}`"),
        (
            h("[tools.\"re*\"]\npin = \"sha256:00\"\n"),
            3,
            8,
            "invalid pin for `re*`: a pin needs an exact tool name, not a glob",
        ),
        (h("[tools.refund]\npin = \" \"\n"), 4, 7, "invalid pin for `refund`: the digest must be a non-empty string"),
        (h("[tools.refund]\nescalate = \"  \"\n"), 4, 12, "escalation rule `refund` needs a non-empty reason"),
        (h("[tools.refund]\napprovals = 0\n"), 4, 13, "approvals rule `refund` needs at least one approver"),
        // Findings a gateway accepts: known kinds, for an exact name.
        (
            h("[tools.add]\nallow_findings = [\"long_description\", \"sneaky\"]\n"),
            4,
            39,
            "invalid `allow_findings` for `add`: unknown finding kind `sneaky`, expected one of `instruction_tag`",
        ),
        (
            h("[tools.\"a*\"]\nallow_findings = [\"override\"]\n"),
            3,
            8,
            "invalid `allow_findings` for `a*`: findings are allowed for an exact tool name, not a glob",
        ),
        (
            h("[resources.\"note://**\"]\nallow_findings = [\"override\"]\n"),
            3,
            12,
            "invalid `allow_findings` for `note://**`: findings are allowed for an exact resource URI, not a glob",
        ),
        (
            h("[prompts.\"s{a,b}\"]\nallow_findings = [\"override\"]\n"),
            3,
            10,
            "invalid `allow_findings` for `s{a,b}`: findings are allowed for an exact prompt name, not a glob",
        ),
        (
            h("[prompts.\"s*\"]\npin = \"sha256:abc\"\n"),
            3,
            10,
            "invalid pin for `s*`: a pin needs an exact prompt name, not a glob",
        ),
        (
            h("[resources.\"note://a\"]\npin = \" \"\n"),
            4,
            7,
            "invalid pin for `note://a`: the digest must be a non-empty string without spaces",
        ),
        (
            h("[prompts.summarise]\nallow_findings = [\"sneaky\"]\n"),
            4,
            19,
            "invalid `allow_findings` for `summarise`: unknown finding kind `sneaky`, expected one of",
        ),
        (
            h("[tools.add]\nallow_findings = \"override\"\n"),
            4,
            18,
            "invalid type: string \"override\", expected a sequence",
        ),
        // Conditions: the column points inside the string where it can.
        (h("[[tools.refund.when]]\nif = \"a > 1\"\n"), 3, 1, "a `when` rule needs exactly one of"),
        (h("[[tools.refund.when]]\nif = \"a > 1\"\ndeny = \"x\"\nescalate = \"y\"\n"), 3, 1, "exactly one of"),
        (
            h("[[tools.refund.when]]\nif = \"amount >> 5\"\ndeny = \"x\"\n"),
            4,
            15,
            "invalid condition `amount >> 5` for `refund`: invalid value: expected value;",
        ),
        (
            h("[[tools.refund.when]]\nif = \"amount ~ 5\"\ndeny = \"x\"\n"),
            4,
            14,
            "expected an operator after the argument path",
        ),
        (h("[tools.refund]\nwhen = [{ if = 'path matches \"[\"', deny = \"x\" }]\n"), 4, 30, "invalid glob `[`"),
        (
            h("[[tools.refund.when]]\nif = \"path == \\\"a\\\" x\"\ndeny = \"x\"\n"),
            4,
            6,
            "invalid value: trailing characters",
        ),
        (
            h("[[tools.refund.when]]\nif = \"a > 1\"\ndeny = \"\"\n"),
            5,
            8,
            "condition rule `refund when a > 1` needs a non-empty reason",
        ),
    ];
    for (text, line, column, message) in cases {
        let (got_line, got_column, got) = refused(&text);
        assert!(got.contains(message), "{text:?}: {got}");
        assert_eq!((got_line, got_column), (line, column), "{text:?}: {got}");
        let display = Policy::from_toml(&text).unwrap_err().to_string();
        assert_eq!(display, format!("line {line}, column {column}: {got}"));
    }
}

#[test]
fn the_first_matching_effect_template_wins_in_file_order() {
    let policy = Policy::from_toml(&format!(
        "{HEAD}[tools.\"z*\"]\neffect = \"first:{{id}}\"\n[tools.\"*\"]\neffect = \"second:{{id}}\"\n"
    ))
    .unwrap();
    assert_eq!(policy.for_tool("zap").effect.unwrap().1.template(), "first:{id}");
    assert_eq!(policy.for_tool("abc").effect.unwrap().1.template(), "second:{id}");
}

#[test]
fn observe_mode_and_default_allow() {
    let policy = Policy::from_toml("version = 1\ndefault = \"allow\"\nmode = \"observe\"\n").unwrap();
    assert_eq!(policy.mode(), PolicyMode::Observe);
    assert!(!policy.is_default_deny());
    assert_eq!(policy.for_tool("anything").denied_by, None);
    let closed = Policy::from_toml("version = 1\ndefault = \"deny\"\n").unwrap();
    assert_eq!(closed.for_tool("anything").denied_by.as_deref(), Some("default deny"));
}
