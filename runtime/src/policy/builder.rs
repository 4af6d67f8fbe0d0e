//! [`PolicyBuilder`]: every rule added by glob, checked as it is added, every mistake kept for
//! [`PolicyBuilder::build`] to report at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use globset::Glob;

use super::condition::Condition;
use super::findings::FindingKind;
use super::policy::{
    ApprovalRoute, ConditionAction, ConditionRule, Policy, PolicyEffect, PolicyError, PolicyMode, Rule, Surface,
};
use crate::mask::MaskSet;
use crate::rate::{Rate, RateScope};
use crate::tool::GhostPolicy;

impl Policy {
    /// Starts a policy.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }
}

/// Builds a [`Policy`]; every mistake is reported by [`PolicyBuilder::build`].
#[derive(Debug, Default)]
pub struct PolicyBuilder {
    policy: Policy,
    pub(super) errors: Vec<PolicyError>,
}

impl PolicyBuilder {
    fn rule<T>(&mut self, pattern: &str, value: T) -> Option<Rule<T>> {
        match Glob::new(pattern) {
            Ok(glob) => Some(Rule { pattern: pattern.to_owned(), matcher: glob.compile_matcher(), value }),
            Err(err) => {
                self.errors.push(PolicyError::Glob { pattern: pattern.to_owned(), message: err.kind().to_string() });
                None
            }
        }
    }

    /// Records a policy file's `[tools.<glob>]` table, for [`Policy::tables_naming_no_tool`].
    pub(crate) fn table(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.tables.push(rule);
        }
        self
    }

    /// Refuses every tool whose name matches `glob`. Deny beats everything.
    pub fn deny(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.deny.push(rule);
        }
        self
    }

    /// Denies a gateway's clients the resources whose URI matches `glob`: unlisted, and unreadable.
    pub fn deny_resource(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.deny_resources.push(rule);
        }
        self
    }

    /// Denies a gateway's clients the prompts whose name matches `glob`: unlisted, and not given.
    pub fn deny_prompt(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.deny_prompts.push(rule);
        }
        self
    }

    /// Under `default = "deny"`, or once any such glob is given, a gateway's clients may read only the
    /// resources whose URI (its normal form) matches one of these globs.
    pub fn allow_resource(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.allow_resources.push(rule);
        }
        self
    }

    /// Under `default = "deny"`, or once any such glob is given, a gateway's clients may get only the
    /// prompts whose name matches one of these globs.
    pub fn allow_prompt(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.allow_prompts.push(rule);
        }
        self
    }

    /// Limits a gateway's reads of the resources (or gets of the prompts) matching `glob` to `rate`, all of
    /// them together: one bucket for the rule.
    pub fn surface_rate_limit(mut self, surface: Surface, glob: &str, rate: &str) -> Self {
        match rate.parse::<Rate>() {
            Ok(parsed) => {
                if let Some(rule) = self.rule(glob, parsed) {
                    match surface {
                        Surface::Resource => self.policy.resource_rates.push(rule),
                        Surface::Prompt => self.policy.prompt_rates.push(rule),
                    }
                }
            }
            Err(err) => self.errors.push(PolicyError::Rate {
                pattern: glob.to_owned(),
                rate: rate.to_owned(),
                message: err.to_string(),
            }),
        }
        self
    }

    /// Masks the contents of the resources (or the messages of the prompts) matching `glob` with `masks`,
    /// in addition to the gateway's default (secrets).
    pub fn surface_mask(mut self, surface: Surface, glob: &str, masks: &str) -> Self {
        match masks.parse::<MaskSet>() {
            Ok(set) => {
                if let Some(rule) = self.rule(glob, set) {
                    match surface {
                        Surface::Resource => self.policy.resource_masks.push(rule),
                        Surface::Prompt => self.policy.prompt_masks.push(rule),
                    }
                }
            }
            Err(err) => self.errors.push(PolicyError::Mask {
                pattern: glob.to_owned(),
                mask: masks.to_owned(),
                message: err.to_string(),
            }),
        }
        self
    }

    /// Once any allow glob is given, only tools matching one may run.
    pub fn allow(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.allow.push(rule);
        }
        self
    }

    /// Requires a human's approval for tools matching `glob`, in addition to what their authors declared.
    pub fn escalate(mut self, glob: &str, reason: &str) -> Self {
        if reason.trim().is_empty() {
            self.errors.push(PolicyError::EmptyReason { pattern: glob.to_owned() });
            return self;
        }
        if let Some(rule) = self.rule(glob, reason.to_owned()) {
            self.policy.escalate.push(rule);
        }
        self
    }

    /// Requires `approvals` distinct approvers (two people, say) before an escalated call of a tool matching
    /// `glob` may run: each approval is recorded, the grant is issued at the last one needed, and a single
    /// denial ends the request. Applies to approvals across an interrupt (the ledger counts them); `0` is
    /// refused.
    pub fn approvals(mut self, glob: &str, approvals: u32) -> Self {
        if approvals == 0 {
            self.errors.push(PolicyError::NoApprovers { pattern: glob.to_owned() });
            return self;
        }
        if let Some(rule) = self.rule(glob, approvals) {
            self.policy.approvals.push(rule);
        }
        self
    }

    /// Limits each tool matching `glob` to `rate` (`"10/minute"`), on top of its author's limit.
    pub fn rate_limit(self, glob: &str, rate: &str) -> Self {
        self.scoped_rate_limit(glob, rate, RateScope::PerTool)
    }

    /// Limits each thread's calls of each tool matching `glob` to `rate`; threads do not share a bucket.
    pub fn rate_limit_per_thread(self, glob: &str, rate: &str) -> Self {
        self.scoped_rate_limit(glob, rate, RateScope::PerThread)
    }

    /// Limits each tool matching `glob` to `rate` (per thread with [`RateScope::PerThread`]) across every
    /// dispatcher of the deployment: its bucket lives in the shared store (PostgreSQL, see
    /// [`SharedRateBuckets`](crate::store::SharedRateBuckets)), not in each host's memory, so `10/minute`
    /// means ten calls a minute however many hosts serve the tool. Costs a round trip to the store per
    /// call; rules without it stay in memory.
    pub fn shared_rate_limit(self, glob: &str, rate: &str, scope: RateScope) -> Self {
        self.rate_rule(glob, rate, scope, true)
    }

    fn scoped_rate_limit(self, glob: &str, rate: &str, scope: RateScope) -> Self {
        self.rate_rule(glob, rate, scope, false)
    }

    fn rate_rule(mut self, glob: &str, rate: &str, scope: RateScope, shared: bool) -> Self {
        match rate.parse::<Rate>() {
            Ok(parsed) => {
                if let Some(rule) = self.rule(glob, (parsed, scope)) {
                    if shared {
                        self.policy.shared_rate_limits.push(rule);
                    } else {
                        self.policy.rate_limits.push(rule);
                    }
                }
            }
            Err(err) => self.errors.push(PolicyError::Rate {
                pattern: glob.to_owned(),
                rate: rate.to_owned(),
                message: err.to_string(),
            }),
        }
        self
    }

    /// Masks the results of tools matching `glob` with `masks` (`"pii"`, `"secrets,email"`), in addition to
    /// what each tool's author chose. A policy can add masking, never remove it.
    pub fn mask(mut self, glob: &str, masks: &str) -> Self {
        match masks.parse::<MaskSet>() {
            Ok(set) => {
                if let Some(rule) = self.rule(glob, set) {
                    self.policy.masks.push(rule);
                }
            }
            Err(err) => self.errors.push(PolicyError::Mask {
                pattern: glob.to_owned(),
                mask: masks.to_owned(),
                message: err.to_string(),
            }),
        }
        self
    }

    /// Denies every tool that no allow glob matches, even when none is given (`default = "deny"`).
    pub fn default_deny(mut self) -> Self {
        self.policy.default_deny = true;
        self
    }

    /// Sets the mode: [`PolicyMode::Observe`] evaluates, audits and traces every decision and refuses
    /// nothing the policy decides.
    pub fn mode(mut self, mode: PolicyMode) -> Self {
        self.policy.observe = mode == PolicyMode::Observe;
        self
    }

    /// What happens to undeclared arguments of tools matching `glob`. [`GhostPolicy::Block`] refuses
    /// them; [`GhostPolicy::Strip`] adds nothing (a policy never loosens an author's `ghost = "block"`).
    pub fn ghost(mut self, glob: &str, ghost: GhostPolicy) -> Self {
        if let Some(rule) = self.rule(glob, ())
            && ghost == GhostPolicy::Block
        {
            self.policy.ghost_block.push(rule);
        }
        self
    }

    /// Who decides the escalated calls of tools matching `glob` when a gateway serves them; the strictest
    /// matching rule applies (an operator over the client's human), and without one the client's human decides.
    pub fn approver(mut self, glob: &str, route: ApprovalRoute) -> Self {
        if let Some(rule) = self.rule(glob, route) {
            self.policy.approvers.push(rule);
        }
        self
    }

    /// An idempotency key template (`"refund:{payment_id}"`) for tools matching `glob` whose author
    /// declared none; the first matching template applies. The dispatcher then needs an effect store.
    pub fn effect(mut self, glob: &str, template: &str) -> Self {
        match PolicyEffect::parse(template) {
            Ok(effect) => {
                if let Some(rule) = self.rule(glob, effect) {
                    self.policy.effects.push(rule);
                }
            }
            Err(err) => self.errors.push(PolicyError::Effect {
                pattern: glob.to_owned(),
                template: template.to_owned(),
                message: err.to_string(),
            }),
        }
        self
    }

    /// Refuses calls of tools matching `glob` whose arguments meet `condition` (see [`condition`](super::condition)), or
    /// whose argument the condition reads is missing or of another type.
    pub fn deny_when(self, glob: &str, condition: &str, reason: &str) -> Self {
        self.condition(glob, condition, ConditionAction::Deny(reason.to_owned()))
    }

    /// Requires a human's approval for calls of tools matching `glob` whose arguments meet `condition`
    /// (see [`condition`](super::condition)), or whose argument the condition reads is missing or of another type.
    pub fn escalate_when(self, glob: &str, condition: &str, reason: &str) -> Self {
        self.condition(glob, condition, ConditionAction::Escalate(reason.to_owned()))
    }

    fn condition(mut self, glob: &str, condition: &str, action: ConditionAction) -> Self {
        let (ConditionAction::Deny(reason) | ConditionAction::Escalate(reason)) = &action;
        if reason.trim().is_empty() {
            self.errors
                .push(PolicyError::EmptyConditionReason { pattern: glob.to_owned(), condition: condition.to_owned() });
            return self;
        }
        match Condition::parse(condition) {
            Ok(parsed) => {
                let name = format!("{glob} when {}", parsed.source());
                if let Some(rule) = self.rule(glob, ConditionRule { name, condition: Arc::new(parsed), action }) {
                    self.policy.conditions.push(rule);
                }
            }
            Err(error) => self.errors.push(PolicyError::Condition {
                pattern: glob.to_owned(),
                condition: condition.to_owned(),
                error,
            }),
        }
        self
    }

    /// Pins the definition of the tool registered exactly as `tool` (no glob) to `digest`, for a gateway
    /// to enforce: a tool whose definition no longer has this digest is hidden and refused.
    pub fn pin(mut self, tool: &str, digest: &str) -> Self {
        let globby = tool.contains(GLOB_CHARS);
        if let Err(message) = pin_into(&mut self.policy.pins, tool, digest, "tool name", globby) {
            self.errors.push(PolicyError::Pin { tool: tool.to_owned(), message });
        }
        self
    }

    /// Lets a gateway offer the tool registered exactly as `tool` (no glob) although its definition has
    /// findings of the kind named `kind` ([`FindingKind::name`]).
    pub fn allow_finding(mut self, tool: &str, kind: &str) -> Self {
        let globby = tool.contains(GLOB_CHARS);
        if let Err(message) = allow_into(&mut self.policy.allowed_findings, tool, kind, "tool name", globby) {
            self.errors.push(PolicyError::Findings { tool: tool.to_owned(), message });
        }
        self
    }

    /// Lets a gateway list the resource whose URI (or the template whose URI template) is exactly `key`, or
    /// the prompt named exactly `key`, although its listing has findings of the kind named `kind`. Findings
    /// are accepted one entry at a time: a key with `*`, `?`, `[`, `]`, `{` or `}` is refused as a glob,
    /// but for a resource key with a `{`, which is a URI template (RFC 6570: `files://{path*}`,
    /// `search://{?q}`), matched exactly as written.
    pub fn allow_surface_finding(mut self, surface: Surface, key: &str, kind: &str) -> Self {
        let (what, allowed) = match surface {
            Surface::Resource => ("resource URI", &mut self.policy.allowed_resource_findings),
            Surface::Prompt => ("prompt name", &mut self.policy.allowed_prompt_findings),
        };
        if let Err(message) = allow_into(allowed, key, kind, what, is_surface_glob(surface, key)) {
            self.errors.push(PolicyError::Findings { tool: key.to_owned(), message });
        }
        self
    }

    /// Pins the listing of the resource whose URI (or the template whose URI template) is exactly `key`, or
    /// of the prompt named exactly `key`, to `digest` (`airlock mcp scan` writes it: [`listing_pin`]): a
    /// gateway leaves the entry out of its listing while the upstream lists it otherwise. Exact keys as for
    /// [`allow_surface_finding`](Self::allow_surface_finding).
    ///
    /// [`listing_pin`]: crate::integrations::mcp_gateway::listing_pin
    pub fn surface_pin(mut self, surface: Surface, key: &str, digest: &str) -> Self {
        let (what, pins) = match surface {
            Surface::Resource => ("resource URI", &mut self.policy.resource_pins),
            Surface::Prompt => ("prompt name", &mut self.policy.prompt_pins),
        };
        if let Err(message) = pin_into(pins, key, digest, what, is_surface_glob(surface, key)) {
            self.errors.push(PolicyError::Pin { tool: key.to_owned(), message });
        }
        self
    }

    /// The policy, or every error found.
    pub fn build(self) -> Result<Policy, Vec<PolicyError>> {
        if self.errors.is_empty() { Ok(self.policy) } else { Err(self.errors) }
    }
}

/// What makes a name a glob where an exact name is needed.
const GLOB_CHARS: [char; 6] = ['*', '?', '[', ']', '{', '}'];

/// Whether `key` reads as a glob where an exact resource URI or prompt name is needed: [`GLOB_CHARS`], but for
/// a resource key with a `{`, a URI template (RFC 6570: `files://{path*}`, `search://{?q}`), matched exactly as
/// written.
fn is_surface_glob(surface: Surface, key: &str) -> bool {
    let template = surface == Surface::Resource && key.contains('{');
    !template && key.contains(GLOB_CHARS)
}

/// Records `digest` as the pin of the `what` (a tool name, a resource URI, a prompt name) `key`, or says why not.
fn pin_into(
    pins: &mut BTreeMap<String, String>,
    key: &str,
    digest: &str,
    what: &str,
    globby: bool,
) -> Result<(), String> {
    if globby {
        return Err(format!("a pin needs an exact {what}, not a glob"));
    }
    if digest.trim().is_empty() || digest.contains(char::is_whitespace) {
        return Err("the digest must be a non-empty string without spaces".to_owned());
    }
    if pins.contains_key(key) {
        return Err(format!("the {what} is pinned twice"));
    }
    pins.insert(key.to_owned(), digest.to_owned());
    Ok(())
}

/// Records that the `what` `key` may have findings of the kind named `kind`, or says why not.
fn allow_into(
    allowed: &mut BTreeMap<String, BTreeSet<FindingKind>>,
    key: &str,
    kind: &str,
    what: &str,
    globby: bool,
) -> Result<(), String> {
    if globby {
        return Err(format!("findings are allowed for an exact {what}, not a glob"));
    }
    let Some(kind) = FindingKind::from_name(kind) else {
        let known = FindingKind::ALL.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        return Err(format!("unknown finding kind `{kind}`, expected one of {known}"));
    };
    allowed.entry(key.to_owned()).or_default().insert(kind);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_every_error() {
        let errors = Policy::builder().deny("[").rate_limit("*", "5/fortnight").escalate("*", " ").build().unwrap_err();
        assert_eq!(errors.len(), 3);
        assert!(errors[0].to_string().starts_with("invalid glob `[`"));
        assert!(errors[1].to_string().contains("fortnight"));
    }

    #[test]
    fn the_builder_checks_what_the_file_checks_and_collects_every_error() {
        let errors = Policy::builder()
            .deny_when("write_*", "path matches \"[\"", "bad glob")
            .escalate_when("refund", "amount >", "no value")
            .deny_when("refund", "amount > 1", " ")
            .effect("refund", "refund")
            .pin("re*", "sha256:00")
            .pin("refund", "")
            .build()
            .unwrap_err();
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "invalid condition `path matches \"[\"` for `write_*`: invalid glob `[`: unclosed character class; missing ']'",
                "invalid condition `amount >` for `refund`: expected a value after `>`",
                "condition rule `refund when amount > 1` needs a non-empty reason",
                "invalid effect template `refund` for `refund`: an effect template needs at least one `{parameter}`, or every call would share one key",
                "invalid pin for `re*`: a pin needs an exact tool name, not a glob",
                "invalid pin for `refund`: the digest must be a non-empty string without spaces",
            ]
        );

        let policy = Policy::builder()
            .ghost("write_*", GhostPolicy::Block)
            .ghost("read_*", GhostPolicy::Strip)
            .escalate_when("refund", "amount > 10000", "large refund")
            .pin("refund", "sha256:00")
            .default_deny()
            .mode(PolicyMode::Observe)
            .build()
            .unwrap();
        assert_eq!(policy.for_tool("write_file").ghost_block.as_deref(), Some("write_*"));
        assert_eq!(policy.for_tool("read_file").ghost_block, None);
        assert_eq!(policy.for_tool("refund").conditions[0].name(), "refund when amount > 10000");
        assert_eq!((policy.pin("refund"), policy.pin("other")), (Some("sha256:00"), None));
        assert_eq!(policy.mode(), PolicyMode::Observe);
        assert_eq!(policy.for_tool("refund").denied_by.as_deref(), Some("default deny"));
    }
}
