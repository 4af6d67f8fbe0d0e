//! Unit tests of `policy`.

use super::*;

#[test]
fn resources_and_prompts_follow_the_default_rule() {
    let open = Policy::new();
    assert_eq!(open.for_surface(Surface::Resource, "config://secrets").denied_by, None);
    assert_eq!(open.for_surface(Surface::Resource, " config://secrets").denied_by, None, "nothing screens");
    assert_eq!(open.for_surface(Surface::Prompt, "admin_reset").denied_by, None);

    let closed = Policy::builder().default_deny().build().unwrap();
    assert_eq!(closed.for_surface(Surface::Resource, "config://app").denied_by.as_deref(), Some("default deny"));
    assert_eq!(closed.for_surface(Surface::Prompt, "summarise").denied_by.as_deref(), Some("default deny"));
    assert_eq!(
        closed.for_surface(Surface::Resource, "config://sec\trets").denied_by.as_deref(),
        Some(super::super::uri::UNREADABLE_URI)
    );

    let allowed = Policy::builder()
        .default_deny()
        .allow_resource("config://app")
        .deny_resource("config://**")
        .allow_prompt("sum*")
        .surface_rate_limit(Surface::Resource, "config://*", "1/minute")
        .surface_mask(Surface::Prompt, "summarise", "pii")
        .build()
        .unwrap();
    assert_eq!(allowed.resource_denied_by("CONFIG://app"), Some("config://**"), "deny beats allow");
    let summarise = allowed.for_surface(Surface::Prompt, "summarise");
    assert_eq!((summarise.denied_by, summarise.mask), (None, "pii".parse().unwrap()));
    assert_eq!(
        allowed.surface_rate_rules(Surface::Resource),
        vec![("config://*".to_owned(), "1/minute".parse().unwrap())]
    );
    assert!(allowed.surface_rate_rules(Surface::Prompt).is_empty());
    assert!(Policy::builder().surface_rate_limit(Surface::Prompt, "x", "1/fortnight").build().is_err());
    assert!(Policy::builder().surface_mask(Surface::Resource, "x", "gossip").build().is_err());
}

#[test]
fn deny_beats_allow_and_allow_lists_close_the_rest() {
    let policy = Policy::builder().allow("read_*").allow("delete_*").deny("delete_all").build().unwrap();
    assert_eq!(policy.for_tool("read_file").denied_by, None);
    assert_eq!(policy.for_tool("delete_all").denied_by.as_deref(), Some("delete_all"));
    assert_eq!(policy.for_tool("write_file").denied_by.as_deref(), Some("not in allow list"));
}

#[test]
fn escalation_and_rates_accumulate() {
    let policy = Policy::builder()
        .escalate("*_file", "touches files")
        .escalate("delete_*", "destructive")
        .rate_limit("*", "100/minute")
        .build()
        .unwrap();
    let decision = policy.for_tool("delete_file");
    assert_eq!(decision.escalations.len(), 2);
    assert_eq!(decision.rate_limits.len(), 1);
}
