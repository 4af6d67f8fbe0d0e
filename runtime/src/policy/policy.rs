//! The policy itself: its rules by glob and what it says about one tool. [`PolicyBuilder`](super::PolicyBuilder)
//! checks and builds it (`builder.rs`); a policy file is read into a builder (`file.rs`).
//! Its four main names are re-exported at the crate root (the path of one call); the rest from
//! [`crate::policy`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agent_airlock_grammar::{Segment, parse_effect_template};
use globset::GlobMatcher;

use super::condition::{Condition, ConditionError, Evaluation};
use super::findings::FindingKind;
use crate::identity::Identity;
use crate::mask::MaskSet;
use crate::rate::{Rate, RateScope};
use crate::tool::Arguments;

/// A deployment policy over registered tool names.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub(super) deny: Vec<Rule<()>>,
    pub(super) allow: Vec<Rule<()>>,
    pub(super) default_deny: bool,
    pub(super) observe: bool,
    pub(super) escalate: Vec<Rule<String>>,
    pub(super) approvals: Vec<Rule<u32>>,
    pub(super) rate_limits: Vec<Rule<(Rate, RateScope)>>,
    pub(super) shared_rate_limits: Vec<Rule<(Rate, RateScope)>>,
    pub(super) masks: Vec<Rule<MaskSet>>,
    pub(super) ghost_block: Vec<Rule<()>>,
    pub(super) effects: Vec<Rule<PolicyEffect>>,
    pub(super) conditions: Vec<Rule<ConditionRule>>,
    pub(super) pins: BTreeMap<String, String>,
    /// The tool-poisoning findings each tool (by exact name) may have and still be offered by a gateway.
    pub(super) allowed_findings: BTreeMap<String, BTreeSet<FindingKind>>,
    /// The findings each listed resource (by exact URI or URI template) may have and still be listed.
    pub(super) allowed_resource_findings: BTreeMap<String, BTreeSet<FindingKind>>,
    /// The findings each listed prompt (by exact name) may have and still be listed.
    pub(super) allowed_prompt_findings: BTreeMap<String, BTreeSet<FindingKind>>,
    /// The pinned digest of each listed resource's (by exact URI or URI template) or prompt's listing.
    pub(super) resource_pins: BTreeMap<String, String>,
    pub(super) prompt_pins: BTreeMap<String, String>,
    pub(super) approvers: Vec<Rule<ApprovalRoute>>,
    pub(super) deny_resources: Vec<Rule<()>>,
    pub(super) deny_prompts: Vec<Rule<()>>,
    pub(super) allow_resources: Vec<Rule<()>>,
    pub(super) allow_prompts: Vec<Rule<()>>,
    /// The `[resources.…]` and `[prompts.…]` tables' rules: one bucket per rule, shared by every URI (or
    /// prompt) it matches.
    pub(super) resource_rates: Vec<Rule<Rate>>,
    pub(super) prompt_rates: Vec<Rule<Rate>>,
    pub(super) resource_masks: Vec<Rule<MaskSet>>,
    pub(super) prompt_masks: Vec<Rule<MaskSet>>,
    /// The `[tools.…]` tables of a policy file, by glob, to report those that name no tool.
    pub(super) tables: Vec<Rule<()>>,
}

/// A `[tools.…]` table that names no tool a server offers (a typo like `[tools.wirte_file]`): its rules
/// would silently apply to nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnmatchedTable {
    /// The table's name or glob.
    pub table: String,
    /// The offered tool whose name is closest, if one is near enough to be the one meant.
    pub closest: Option<String>,
}

impl std::fmt::Display for UnmatchedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`[tools.{}]` names no tool the server offers", self.table)?;
        match &self.closest {
            Some(name) => write!(f, " (did you mean `{name}`?)"),
            None => Ok(()),
        }
    }
}

/// Who decides a tool's escalated calls when a gateway serves it (`approver = "…"` in a policy file).
///
/// Ordered from the least to the most strict: where several rules apply, the strictest wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum ApprovalRoute {
    /// The human behind the MCP client, asked through elicitation.
    #[default]
    Client,
    /// An operator, out of band (`airlock approve` against the shared store): the call waits for the
    /// decision, up to the gateway's approval timeout.
    Operator,
}

/// Whether a policy's refusals are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyMode {
    /// The policy refuses what it refuses.
    #[default]
    Enforce,
    /// Every decision is evaluated, audited and traced as "would refuse", and nothing the policy decides is
    /// refused: for trying a policy on live traffic. What a tool's author declared is still enforced.
    Observe,
}

/// What an argument condition does when it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionAction {
    /// Refuse the call, for this reason.
    Deny(String),
    /// Ask a human, for this reason.
    Escalate(String),
}

/// An argument condition of a policy, for the tools matching a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionRule {
    pub(super) name: String,
    pub(super) condition: Arc<Condition>,
    pub(super) action: ConditionAction,
}

impl ConditionRule {
    /// The rule's name in refusals, approval requests and audit records: `GLOB when CONDITION`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The condition.
    pub fn condition(&self) -> &Condition {
        &self.condition
    }

    /// What the rule does when its condition applies.
    pub fn action(&self) -> &ConditionAction {
        &self.action
    }

    /// Whether the rule applies to a call with these (screened) arguments, and why: a missing or mistyped
    /// argument applies it (fail closed).
    pub fn evaluate(&self, arguments: &Arguments) -> Evaluation {
        self.condition.evaluate(arguments)
    }

    /// As [`evaluate`](Self::evaluate), for a caller with this verified identity (or none: an identity
    /// condition then applies the rule).
    pub fn evaluate_for(&self, arguments: &Arguments, identity: Option<&Identity>) -> Evaluation {
        self.condition.evaluate_for(arguments, identity)
    }
}

/// An idempotency key template from a policy (`effect = "refund:{payment_id}"`), for tools whose author
/// declared none. Its placeholders are checked against each tool's parameters when a dispatcher is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEffect {
    template: String,
    /// `(is_param, text)` in order.
    segments: Vec<(bool, String)>,
}

impl PolicyEffect {
    pub(super) fn parse(template: &str) -> Result<PolicyEffect, agent_airlock_grammar::EffectTemplateError> {
        let segments = parse_effect_template(template)?
            .into_iter()
            .map(|segment| match segment {
                Segment::Literal(text) => (false, text.to_owned()),
                Segment::Param(name) => (true, name.to_owned()),
            })
            .collect();
        Ok(PolicyEffect { template: template.to_owned(), segments })
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The parameters the template names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter(|(param, _)| *param).map(|(_, name)| name.as_str())
    }

    /// The key for one call, from its admitted arguments, as [`EffectTemplate::render`](crate::tool::EffectTemplate::render).
    pub fn render(&self, arguments: &Arguments) -> String {
        crate::tool::render_effect_key(
            self.segments
                .iter()
                .map(|(param, text)| if *param { Segment::Param(text) } else { Segment::Literal(text) }),
            arguments,
            self.template.len(),
        )
    }
}

#[derive(Debug, Clone)]
pub(super) struct Rule<T> {
    pub(super) pattern: String,
    pub(super) matcher: GlobMatcher,
    pub(super) value: T,
}

/// What the policy says about one tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolPolicy {
    /// The deny glob that matched, or `not in allow list` when allow globs exist and none matched.
    pub denied_by: Option<String>,
    /// `(glob, reason)` for each escalation rule that matched.
    pub escalations: Vec<(String, String)>,
    /// How many distinct approvers an escalated call of the tool needs: the most any matching rule asks
    /// (1 when none does).
    pub approvals: u32,
    /// `(glob, rate, scope)` for each rate-limit rule that matched, its bucket in each dispatcher's memory.
    pub rate_limits: Vec<(String, Rate, RateScope)>,
    /// `(glob, rate, scope)` for each shared rate-limit rule that matched
    /// ([`PolicyBuilder::shared_rate_limit`](crate::PolicyBuilder::shared_rate_limit)): one bucket for every
    /// dispatcher of the deployment.
    pub shared_rate_limits: Vec<(String, Rate, RateScope)>,
    /// The masking every matching rule adds (the union).
    pub mask: MaskSet,
    /// The first glob that sets `ghost = "block"` for the tool, if any.
    pub ghost_block: Option<String>,
    /// `(glob, template)` of the first effect rule that matched.
    pub effect: Option<(String, PolicyEffect)>,
    /// Every argument condition that matched, in the order given.
    pub conditions: Vec<ConditionRule>,
    /// The pinned digest of the tool's definition, if the policy pins it.
    pub pin: Option<String>,
    /// Who decides its escalated calls when a gateway serves it: the strictest matching rule's (an operator
    /// over the client's human, whatever the rules' order), else the client.
    pub approver: ApprovalRoute,
}

/// Which surface of an MCP server a [`SurfacePolicy`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `resources/read`, by the resource's URI (its normal form).
    Resource,
    /// `prompts/get`, by the prompt's name.
    Prompt,
}

/// What the policy says about one resource read or one prompt get through a gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SurfacePolicy {
    /// Why it is refused: the deny glob that matched, `not in allow list`, `default deny`, or (for a URI)
    /// that it has no normal form.
    pub denied_by: Option<String>,
    /// `(rule, glob, rate)` for each rate-limit rule that matched: `rule` numbers the rule among the
    /// surface's rate rules ([`Policy::surface_rate_rules`]), one bucket each, shared by everything it
    /// matches.
    pub rate_limits: Vec<(usize, String, Rate)>,
    /// The masking every matching table adds to the gateway's default (the union).
    pub mask: MaskSet,
}

/// A policy that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A glob did not parse.
    #[error("invalid glob `{pattern}`: {message}")]
    Glob {
        /// The glob as given.
        pattern: String,
        /// What is wrong with it.
        message: String,
    },
    /// A rate did not parse.
    #[error("invalid rate `{rate}` for `{pattern}`: {message}")]
    Rate {
        /// The glob the rate was for.
        pattern: String,
        /// The rate as given.
        rate: String,
        /// What is wrong with it.
        message: String,
    },
    /// A mask list did not parse.
    #[error("invalid mask `{mask}` for `{pattern}`: {message}")]
    Mask {
        /// The glob the mask was for.
        pattern: String,
        /// The mask as given.
        mask: String,
        /// What is wrong with it.
        message: String,
    },
    /// An approvals rule asking for no approver.
    #[error("approvals rule `{pattern}` needs at least one approver")]
    NoApprovers {
        /// The glob.
        pattern: String,
    },
    /// An escalation rule without a reason.
    #[error("escalation rule `{pattern}` needs a non-empty reason")]
    EmptyReason {
        /// The glob.
        pattern: String,
    },
    /// An effect template did not parse.
    #[error("invalid effect template `{template}` for `{pattern}`: {message}")]
    Effect {
        /// The glob the template was for.
        pattern: String,
        /// The template as given.
        template: String,
        /// What is wrong with it.
        message: String,
    },
    /// An argument condition did not parse.
    #[error("invalid condition `{condition}` for `{pattern}`: {}", error.message)]
    Condition {
        /// The glob the condition was for.
        pattern: String,
        /// The condition as given.
        condition: String,
        /// What is wrong with it, and where.
        error: ConditionError,
    },
    /// A condition rule without a reason.
    #[error("condition rule `{pattern} when {condition}` needs a non-empty reason")]
    EmptyConditionReason {
        /// The glob.
        pattern: String,
        /// The condition as given.
        condition: String,
    },
    /// An `allow_findings` entry for a glob, or a kind no scan reports.
    #[error("invalid `allow_findings` for `{tool}`: {message}")]
    Findings {
        /// The tool name as given.
        tool: String,
        /// What is wrong with it.
        message: String,
    },
    /// A definition pin for a glob, or an empty one.
    #[error("invalid pin for `{tool}`: {message}")]
    Pin {
        /// The tool name as given.
        tool: String,
        /// What is wrong with it.
        message: String,
    },
}

impl Policy {
    /// A policy that allows everything and adds nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the policy's refusals are enforced or only observed.
    pub fn mode(&self) -> PolicyMode {
        if self.observe { PolicyMode::Observe } else { PolicyMode::Enforce }
    }

    /// Whether tools matching no allow glob are denied even when no allow glob is given.
    pub fn is_default_deny(&self) -> bool {
        self.default_deny
    }

    /// The pinned definition digest of the tool registered as `name`, for a gateway to enforce.
    pub fn pin(&self, name: &str) -> Option<&str> {
        self.pins.get(name).map(String::as_str)
    }

    /// The rule that denies the resource at `uri` to a gateway's clients, if any: a `deny_resources` glob,
    /// or under `default = "deny"` (and wherever `allow_resources` globs are given) `not in allow list` /
    /// `default deny` for a URI no `allow_resources` glob matches. The globs match the URI's normal form
    /// (RFC 3986: scheme and host lower-cased, unreserved escapes decoded, dot segments resolved,
    /// `file://localhost/` as `file:///`), so `CONFIG://secrets` and `file:///home/me/%2Eenv` are denied by
    /// `config://secrets` and `file:///**/.env`. Where any rule names resources (a `deny_resources` or
    /// `allow_resources` glob, `default = "deny"`, a `[resources.…]` table's rate or mask), a URI with no
    /// normal form is denied too: control characters, surrounding blanks, no scheme, an encoded separator
    /// (`..%2F..%2Fetc%2Fpasswd`) or control character, an unresolved dot segment, a `file:` URI on another
    /// host (`file://x/home/me/.env`). A glob cannot hold for a URI it cannot read, nor a table apply to it.
    pub fn resource_denied_by(&self, uri: &str) -> Option<&str> {
        let screened = !self.deny_resources.is_empty()
            || !self.allow_resources.is_empty()
            || self.default_deny
            || !self.resource_rates.is_empty()
            || !self.resource_masks.is_empty();
        if !screened {
            return None;
        }
        let Some(normal) = super::uri::normalise(uri) else { return Some(super::uri::UNREADABLE_URI) };
        self.surface_denied_by(&normal, &self.deny_resources, &self.allow_resources)
    }

    /// The rule that denies the prompt named `name` to a gateway's clients, if any: a `deny_prompts` glob,
    /// or under `default = "deny"` (and wherever `allow_prompts` globs are given) a name no `allow_prompts`
    /// glob matches.
    pub fn prompt_denied_by(&self, name: &str) -> Option<&str> {
        self.surface_denied_by(name, &self.deny_prompts, &self.allow_prompts)
    }

    fn surface_denied_by<'a>(&'a self, key: &str, deny: &'a [Rule<()>], allow: &'a [Rule<()>]) -> Option<&'a str> {
        if let Some(rule) = deny.iter().find(|r| r.matcher.is_match(key)) {
            return Some(rule.pattern.as_str());
        }
        if allow.iter().any(|r| r.matcher.is_match(key)) {
            None
        } else if !allow.is_empty() {
            Some("not in allow list")
        } else {
            self.default_deny.then_some("default deny")
        }
    }

    /// What the policy says about reading the resource at `uri` ([`Surface::Resource`], matched on its
    /// normal form) or getting the prompt named `key` ([`Surface::Prompt`]) through a gateway.
    pub fn for_surface(&self, surface: Surface, key: &str) -> SurfacePolicy {
        let (denied_by, rates, masks) = match surface {
            Surface::Resource => (self.resource_denied_by(key), &self.resource_rates, &self.resource_masks),
            Surface::Prompt => (self.prompt_denied_by(key), &self.prompt_rates, &self.prompt_masks),
        };
        let normal = match surface {
            Surface::Resource => super::uri::normalise(key),
            Surface::Prompt => Some(key.to_owned()),
        };
        // A URI with no normal form matches no table: it is refused wherever a rule names resources (a table
        // included), and otherwise passes with the default masking.
        let matches = |matcher: &GlobMatcher| normal.as_deref().is_some_and(|key| matcher.is_match(key));
        SurfacePolicy {
            denied_by: denied_by.map(str::to_owned),
            rate_limits: rates
                .iter()
                .enumerate()
                .filter(|(_, r)| matches(&r.matcher))
                .map(|(index, r)| (index, r.pattern.clone(), r.value))
                .collect(),
            mask: masks.iter().filter(|r| matches(&r.matcher)).fold(MaskSet::NONE, |set, r| set | r.value),
        }
    }

    /// Every rate rule of `surface`'s tables, in order: `(glob, rate)`, numbered as
    /// [`SurfacePolicy::rate_limits`] numbers them.
    pub fn surface_rate_rules(&self, surface: Surface) -> Vec<(String, Rate)> {
        let rates = match surface {
            Surface::Resource => &self.resource_rates,
            Surface::Prompt => &self.prompt_rates,
        };
        rates.iter().map(|r| (r.pattern.clone(), r.value)).collect()
    }

    /// Every definition pin, by tool name.
    pub fn pins(&self) -> &BTreeMap<String, String> {
        &self.pins
    }

    /// The tool-poisoning findings each tool (by exact name) may have and still be offered by a gateway
    /// (`allow_findings` in the policy file).
    pub fn allowed_findings(&self) -> &BTreeMap<String, BTreeSet<FindingKind>> {
        &self.allowed_findings
    }

    /// The tool-poisoning findings each resource (by exact URI, or a template by its URI template) or prompt
    /// (by exact name) may have in its listing and still be listed by a gateway (`allow_findings` in a
    /// `[resources.…]` or `[prompts.…]` table).
    pub fn allowed_surface_findings(&self, surface: Surface) -> &BTreeMap<String, BTreeSet<FindingKind>> {
        match surface {
            Surface::Resource => &self.allowed_resource_findings,
            Surface::Prompt => &self.allowed_prompt_findings,
        }
    }

    /// The pinned digests of the resources' (by exact URI or URI template) or prompts' (by exact name)
    /// listings (`pin` in a `[resources.…]` or `[prompts.…]` table): a gateway leaves out an entry whose
    /// listing no longer has its pin.
    pub fn surface_pins(&self, surface: Surface) -> &BTreeMap<String, String> {
        match surface {
            Surface::Resource => &self.resource_pins,
            Surface::Prompt => &self.prompt_pins,
        }
    }

    /// The `[tools.…]` tables (names or globs, in file order) that match none of `tools` (the names a server
    /// offers), each with the closest offered name. Empty for a policy built in code.
    pub fn tables_naming_no_tool<'a>(&self, tools: impl IntoIterator<Item = &'a str> + Clone) -> Vec<UnmatchedTable> {
        self.tables
            .iter()
            .filter(|table| !tools.clone().into_iter().any(|tool| table.matcher.is_match(tool)))
            .map(|table| UnmatchedTable {
                table: table.pattern.clone(),
                closest: crate::args::nested::closest(&table.pattern, tools.clone()),
            })
            .collect()
    }

    /// A summary for a person, one rule a line: mode, default, then each rule with its glob.
    pub fn summary(&self) -> String {
        let mut lines = vec![
            format!("mode      {}", if self.observe { "observe (nothing refused)" } else { "enforce" }),
            format!("default   {}", if self.default_deny { "deny" } else { "allow" }),
        ];
        lines.extend(self.deny.iter().map(|r| format!("deny      {}", r.pattern)));
        lines.extend(self.allow.iter().map(|r| format!("allow     {}", r.pattern)));
        lines.extend(self.deny_resources.iter().map(|r| format!("deny      resource {}", r.pattern)));
        lines.extend(self.deny_prompts.iter().map(|r| format!("deny      prompt {}", r.pattern)));
        lines.extend(self.allow_resources.iter().map(|r| format!("allow     resource {}", r.pattern)));
        lines.extend(self.allow_prompts.iter().map(|r| format!("allow     prompt {}", r.pattern)));
        lines.extend(self.resource_rates.iter().map(|r| format!("rate      resource {}: {}", r.pattern, r.value)));
        lines.extend(self.prompt_rates.iter().map(|r| format!("rate      prompt {}: {}", r.pattern, r.value)));
        lines.extend(self.resource_masks.iter().map(|r| format!("mask      resource {}: {}", r.pattern, r.value)));
        lines.extend(self.prompt_masks.iter().map(|r| format!("mask      prompt {}: {}", r.pattern, r.value)));
        lines.extend(self.escalate.iter().map(|r| format!("escalate  {}: {}", r.pattern, r.value)));
        let rate_line = |r: &Rule<(Rate, RateScope)>, shared: &str| {
            let per = match r.value.1 {
                RateScope::PerTool => "",
                RateScope::PerThread => " per thread",
            };
            format!("rate      {}: {}{per}{shared}", r.pattern, r.value.0)
        };
        lines.extend(self.rate_limits.iter().map(|r| rate_line(r, "")));
        lines.extend(self.shared_rate_limits.iter().map(|r| rate_line(r, ", shared by every host")));
        lines.extend(self.masks.iter().map(|r| format!("mask      {}: {}", r.pattern, r.value)));
        lines.extend(self.approvals.iter().map(|r| format!("approvals {}: {}", r.pattern, r.value)));
        lines.extend(self.ghost_block.iter().map(|r| format!("ghost     {}: block", r.pattern)));
        lines.extend(self.effects.iter().map(|r| format!("effect    {}: {}", r.pattern, r.value.template)));
        lines.extend(self.conditions.iter().map(|r| match &r.value.action {
            ConditionAction::Deny(reason) => format!("deny      {}: {reason}", r.value.name),
            ConditionAction::Escalate(reason) => format!("escalate  {}: {reason}", r.value.name),
        }));
        lines.extend(self.pins.iter().map(|(tool, digest)| format!("pin       {tool}: {digest}")));
        for (surface, allowed) in [
            ("", &self.allowed_findings),
            ("resource ", &self.allowed_resource_findings),
            ("prompt ", &self.allowed_prompt_findings),
        ] {
            lines.extend(allowed.iter().map(|(name, kinds)| {
                let kinds = kinds.iter().map(|kind| kind.name()).collect::<Vec<_>>().join(", ");
                format!("findings  {surface}{name}: {kinds} allowed")
            }));
        }
        for (surface, pins) in [("resource", &self.resource_pins), ("prompt", &self.prompt_pins)] {
            lines.extend(pins.iter().map(|(name, digest)| format!("pin       {surface} {name}: {digest}")));
        }
        lines.extend(self.approvers.iter().map(|r| {
            let route = match r.value {
                ApprovalRoute::Client => "the client's human",
                ApprovalRoute::Operator => "an operator",
            };
            format!("approver  {}: {route}", r.pattern)
        }));
        lines.join("\n")
    }

    /// What the policy says about the tool registered as `name`.
    pub fn for_tool(&self, name: &str) -> ToolPolicy {
        let denied_by = self.deny.iter().find(|r| r.matcher.is_match(name)).map(|r| r.pattern.clone()).or_else(|| {
            if self.allow.iter().any(|r| r.matcher.is_match(name)) {
                None
            } else if !self.allow.is_empty() {
                Some("not in allow list".to_owned())
            } else {
                self.default_deny.then(|| "default deny".to_owned())
            }
        });
        ToolPolicy {
            denied_by,
            escalations: self
                .escalate
                .iter()
                .filter(|r| r.matcher.is_match(name))
                .map(|r| (r.pattern.clone(), r.value.clone()))
                .collect(),
            approvals: self.approvals.iter().filter(|r| r.matcher.is_match(name)).map(|r| r.value).fold(1, u32::max),
            rate_limits: self
                .rate_limits
                .iter()
                .filter(|r| r.matcher.is_match(name))
                .map(|r| (r.pattern.clone(), r.value.0, r.value.1))
                .collect(),
            shared_rate_limits: self
                .shared_rate_limits
                .iter()
                .filter(|r| r.matcher.is_match(name))
                .map(|r| (r.pattern.clone(), r.value.0, r.value.1))
                .collect(),
            mask: self.masks.iter().filter(|r| r.matcher.is_match(name)).fold(MaskSet::NONE, |set, r| set | r.value),
            ghost_block: self.ghost_block.iter().find(|r| r.matcher.is_match(name)).map(|r| r.pattern.clone()),
            effect: self
                .effects
                .iter()
                .find(|r| r.matcher.is_match(name))
                .map(|r| (r.pattern.clone(), r.value.clone())),
            conditions: self.conditions.iter().filter(|r| r.matcher.is_match(name)).map(|r| r.value.clone()).collect(),
            pin: self.pins.get(name).cloned(),
            // The strictest, as for every other rule: `[tools."*"] approver = "client"` written before
            // `[tools.transfer] approver = "operator"` does not hand transfers to the client's human.
            approver: self
                .approvers
                .iter()
                .filter(|r| r.matcher.is_match(name))
                .map(|r| r.value)
                .max()
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests;
