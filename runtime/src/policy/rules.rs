//! The policy itself: its rules by glob, the builder that checks them, and what it says about one tool.
//! Its four main names are re-exported at the crate root (the path of one call); the rest from
//! [`crate::policy`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agent_airlock_grammar::{Segment, parse_effect_template};
use globset::{Glob, GlobMatcher};

use super::condition::{Condition, ConditionError, Evaluation};
use super::file::PolicyFileError;
use super::findings::FindingKind;
use crate::mask::MaskSet;
use crate::rate::{Rate, RateScope};
use crate::tool::{Arguments, GhostPolicy};

/// A deployment policy over registered tool names.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    deny: Vec<Rule<()>>,
    allow: Vec<Rule<()>>,
    default_deny: bool,
    observe: bool,
    escalate: Vec<Rule<String>>,
    approvals: Vec<Rule<u32>>,
    rate_limits: Vec<Rule<(Rate, RateScope)>>,
    shared_rate_limits: Vec<Rule<(Rate, RateScope)>>,
    masks: Vec<Rule<MaskSet>>,
    ghost_block: Vec<Rule<()>>,
    effects: Vec<Rule<PolicyEffect>>,
    conditions: Vec<Rule<ConditionRule>>,
    pins: BTreeMap<String, String>,
    /// The tool-poisoning findings each tool (by exact name) may have and still be offered by a gateway.
    allowed_findings: BTreeMap<String, BTreeSet<FindingKind>>,
    approvers: Vec<Rule<ApprovalRoute>>,
    deny_resources: Vec<Rule<()>>,
    deny_prompts: Vec<Rule<()>>,
    allow_resources: Vec<Rule<()>>,
    allow_prompts: Vec<Rule<()>>,
    /// The `[resources.…]` and `[prompts.…]` tables' rules: one bucket per rule, shared by every URI (or
    /// prompt) it matches.
    resource_rates: Vec<Rule<Rate>>,
    prompt_rates: Vec<Rule<Rate>>,
    resource_masks: Vec<Rule<MaskSet>>,
    prompt_masks: Vec<Rule<MaskSet>>,
    /// The `[tools.…]` tables of a policy file, by glob, to report those that name no tool.
    tables: Vec<Rule<()>>,
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
    name: String,
    condition: Arc<Condition>,
    action: ConditionAction,
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
    fn parse(template: &str) -> Result<PolicyEffect, agent_airlock_grammar::EffectTemplateError> {
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

    /// The key for one call, from its admitted arguments, as [`EffectTemplate::render`](crate::EffectTemplate::render).
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
struct Rule<T> {
    pattern: String,
    matcher: GlobMatcher,
    value: T,
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
    /// ([`PolicyBuilder::shared_rate_limit`]): one bucket for every dispatcher of the deployment.
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

    /// Starts a policy.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// Reads a policy file (see [`mod@super::file`] for the format). Every mistake is refused with its line and column.
    pub fn from_toml(text: &str) -> Result<Policy, PolicyFileError> {
        super::file::parse(text)
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
    /// `config://secrets` and `file:///**/.env`. Where any rule screens resources, a URI with no normal form
    /// (control characters, surrounding blanks, no scheme) is denied too.
    pub fn resource_denied_by(&self, uri: &str) -> Option<&str> {
        let screened = !self.deny_resources.is_empty() || !self.allow_resources.is_empty() || self.default_deny;
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
        // A URI with no normal form matches no table: it is refused where anything screens resources, and
        // otherwise passes with the default masking.
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
        lines.extend(self.allowed_findings.iter().map(|(tool, kinds)| {
            let kinds = kinds.iter().map(|kind| kind.name()).collect::<Vec<_>>().join(", ");
            format!("findings  {tool}: {kinds} allowed")
        }));
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
        let message = if tool.contains(['*', '?', '[', ']', '{', '}']) {
            Some("a pin needs an exact tool name, not a glob".to_owned())
        } else if digest.trim().is_empty() || digest.contains(char::is_whitespace) {
            Some("the digest must be a non-empty string without spaces".to_owned())
        } else if self.policy.pins.contains_key(tool) {
            Some("the tool is pinned twice".to_owned())
        } else {
            None
        };
        match message {
            Some(message) => self.errors.push(PolicyError::Pin { tool: tool.to_owned(), message }),
            None => {
                self.policy.pins.insert(tool.to_owned(), digest.to_owned());
            }
        }
        self
    }

    /// Lets a gateway offer the tool registered exactly as `tool` (no glob) although its definition has
    /// findings of the kind named `kind` ([`FindingKind::name`]).
    pub fn allow_finding(mut self, tool: &str, kind: &str) -> Self {
        if tool.contains(['*', '?', '[', ']', '{', '}']) {
            let message = "findings are allowed for an exact tool name, not a glob".to_owned();
            self.errors.push(PolicyError::Findings { tool: tool.to_owned(), message });
            return self;
        }
        match FindingKind::from_name(kind) {
            Some(kind) => {
                self.policy.allowed_findings.entry(tool.to_owned()).or_default().insert(kind);
            }
            None => {
                let known = FindingKind::ALL.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                let message = format!("unknown finding kind `{kind}`, expected one of {known}");
                self.errors.push(PolicyError::Findings { tool: tool.to_owned(), message });
            }
        }
        self
    }

    /// The policy, or every error found.
    pub fn build(self) -> Result<Policy, Vec<PolicyError>> {
        if self.errors.is_empty() { Ok(self.policy) } else { Err(self.errors) }
    }
}

#[cfg(test)]
mod tests {
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
}
