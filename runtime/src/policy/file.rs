//! The policy file: one strict, versioned TOML format, read by [`Policy::from_toml`].
//!
//! ```toml
//! version = 1                 # required; the only version so far
//! default = "deny"            # required: "allow" (everything not denied) or "deny" (only what `allow` matches)
//! mode = "enforce"            # or "observe": evaluate, audit and trace, refuse nothing the policy decides
//! deny = ["delete_*"]         # tool-name globs; deny beats everything
//! allow = ["read_*", "refund", "write_file"]   # only with default = "deny"
//! deny_resources = ["file:///**/.env"]           # resource URI globs a gateway hides and refuses to read
//! deny_prompts = ["admin_*"]                     # prompt name globs a gateway hides and refuses to give
//! allow_resources = ["file:///srv/docs/**"]      # only with default = "deny": the resources a gateway serves
//! allow_prompts = ["summarise"]                  # only with default = "deny": the prompts a gateway serves
//!
//! [tools.refund]              # a tool name or a glob; every key is optional
//! escalate = "moves money"    # a human must approve, for this reason
//! rate = "10/minute"          # N/second, minute, hour or day
//! rate_per = "thread"         # "tool" (one bucket, the default) or "thread" (one per conversation)
//! rate_shared = true          # one bucket for every host, kept in the shared store (PostgreSQL)
//! mask = "pii"                # result masking added to the author's
//! ghost = "block"             # refuse undeclared arguments instead of stripping them
//! effect = "refund:{payment_id}"   # idempotency key, for tools whose author declared none
//! pin = "sha256:…"            # the tool definition's digest (exact names only), enforced by a gateway
//! approver = "operator"       # who decides its escalations in a gateway: "client" (the default) or "operator"
//! allow_findings = ["secret_parameter"]   # tool-poisoning findings a gateway accepts (exact names only)
//!
//! [resources."file:///srv/docs/**"]   # a resource URI glob (matched on the URI's normal form)
//! rate = "30/minute"          # every read of a matching resource, together
//! mask = "pii"                # masking of the contents, added to the gateway's default (secrets)
//!
//! [prompts.summarise]         # a prompt name or a glob: `rate` and `mask` as for resources
//! rate = "10/minute"
//! allow_findings = ["long_description"]   # tool-poisoning findings its listing may have (exact names only;
//!                                         # for resources an exact URI or URI template)
//! pin = "sha256:…"                        # its listing's digest (`airlock mcp scan`), same exact keys
//!
//! [[tools.refund.when]]       # argument conditions, see `policy::condition`
//! if = "amount > 10000"
//! escalate = "refunds above 100 dollars need a human"
//!
//! [[tools.write_file.when]]
//! if = 'path matches "**/.ssh/**"'
//! deny = "never write ssh keys"
//!
//! [[tools.transfer.when]]      # identity conditions: the caller a gateway authenticated (OAuth)
//! if = 'not (identity.groups contains "payments")'
//! deny = "payments team only"   # also hides `transfer` from such callers' `tools/list`
//! ```
//!
//! Unknown keys, wrong types, bad globs, rates, masks, templates, conditions and versions are refused
//! with the line and column of the offending value. `rate_shared` (like `rate_per`) needs a `rate`; with
//! `rate_shared = true` the rule's bucket lives in the store every host shares
//! ([`SharedRateBuckets`](crate::store::SharedRateBuckets)) rather than in each host's memory, and a
//! dispatcher with no such store refuses to build.
//!
//! The file is applied through [`PolicyBuilder`]: a file and code follow one set of rules.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::builder::PolicyBuilder;
use super::policy::{ApprovalRoute, Policy, PolicyError, PolicyMode, Surface};
use crate::rate::RateScope;
use crate::tool::GhostPolicy;

/// The version this crate reads.
pub const POLICY_FILE_VERSION: i64 = 1;

/// A policy file that was refused: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct PolicyFileError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong, lower-case.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: Spanned<i64>,
    default: Spanned<DefaultRule>,
    #[serde(default)]
    mode: Option<Spanned<Mode>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny_resources: Vec<Spanned<String>>,
    #[serde(default)]
    deny_prompts: Vec<Spanned<String>>,
    #[serde(default)]
    allow_resources: Vec<Spanned<String>>,
    #[serde(default)]
    allow_prompts: Vec<Spanned<String>>,
    #[serde(default)]
    tools: BTreeMap<Spanned<String>, RawTool>,
    #[serde(default)]
    resources: BTreeMap<Spanned<String>, RawSurface>,
    #[serde(default)]
    prompts: BTreeMap<Spanned<String>, RawSurface>,
}

/// A `[resources.…]` or `[prompts.…]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSurface {
    rate: Option<Spanned<String>>,
    mask: Option<Spanned<String>>,
    pin: Option<Spanned<String>>,
    #[serde(default)]
    allow_findings: Vec<Spanned<String>>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum DefaultRule {
    Allow,
    Deny,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Enforce,
    Observe,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum RatePer {
    Tool,
    Thread,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Ghost {
    Strip,
    Block,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Approver {
    Client,
    Operator,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    escalate: Option<Spanned<String>>,
    approvals: Option<Spanned<u32>>,
    rate: Option<Spanned<String>>,
    rate_per: Option<Spanned<RatePer>>,
    rate_shared: Option<Spanned<bool>>,
    mask: Option<Spanned<String>>,
    ghost: Option<Spanned<Ghost>>,
    effect: Option<Spanned<String>>,
    pin: Option<Spanned<String>>,
    approver: Option<Spanned<Approver>>,
    #[serde(default)]
    allow_findings: Vec<Spanned<String>>,
    #[serde(default)]
    when: Vec<Spanned<RawWhen>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWhen {
    #[serde(rename = "if")]
    condition: Spanned<String>,
    deny: Option<Spanned<String>>,
    escalate: Option<Spanned<String>>,
}

/// Reads a policy file; the first mistake, in file order, is the error.
impl Policy {
    /// Reads a policy file (see [`mod@super::file`] for the format). Every mistake is refused with its line and column.
    pub fn from_toml(text: &str) -> Result<Policy, PolicyFileError> {
        parse(text)
    }
}

fn parse(text: &str) -> Result<Policy, PolicyFileError> {
    let at = |span: Range<usize>, message: String| locate(text, span.start, message);
    let raw: RawPolicy = toml::from_str(text).map_err(|err| {
        let message = err.message().trim_end_matches('\n').trim_end_matches('.').to_owned();
        locate(text, err.span().map_or(0, |span| span.start), message)
    })?;
    if *raw.version.get_ref() != POLICY_FILE_VERSION {
        return Err(at(
            raw.version.span(),
            format!("unsupported policy version `{}`, expected `{POLICY_FILE_VERSION}`", raw.version.get_ref()),
        ));
    }
    let mut file = FileBuilder { text, builder: Policy::builder() };
    if *raw.default.get_ref() == DefaultRule::Deny {
        file.builder = file.builder.default_deny();
    } else if let Some(first) = raw.allow.first() {
        return Err(at(
            first.span(),
            "`allow` lists only matter with `default = \"deny\"`: under `default = \"allow\"` every tool not denied runs"
                .to_owned(),
        ));
    } else {
        let surfaces =
            [("allow_resources", "resource", &raw.allow_resources), ("allow_prompts", "prompt", &raw.allow_prompts)];
        for (key, what, globs) in surfaces {
            if let Some(first) = globs.first() {
                return Err(at(
                    first.span(),
                    format!(
                        "`{key}` lists only matter with `default = \"deny\"`: under `default = \"allow\"` every {what} not denied is served"
                    ),
                ));
            }
        }
    }
    if raw.mode.as_ref().is_some_and(|mode| *mode.get_ref() == Mode::Observe) {
        file.builder = file.builder.mode(PolicyMode::Observe);
    }
    for glob in &raw.deny {
        file.apply(|b| b.deny(glob.get_ref()), &[glob.span()])?;
    }
    for glob in &raw.allow {
        file.apply(|b| b.allow(glob.get_ref()), &[glob.span()])?;
    }
    for glob in &raw.deny_resources {
        file.apply(|b| b.deny_resource(glob.get_ref()), &[glob.span()])?;
    }
    for glob in &raw.deny_prompts {
        file.apply(|b| b.deny_prompt(glob.get_ref()), &[glob.span()])?;
    }
    for glob in &raw.allow_resources {
        file.apply(|b| b.allow_resource(glob.get_ref()), &[glob.span()])?;
    }
    for glob in &raw.allow_prompts {
        file.apply(|b| b.allow_prompt(glob.get_ref()), &[glob.span()])?;
    }
    for (surface, tables) in [(Surface::Resource, &raw.resources), (Surface::Prompt, &raw.prompts)] {
        for (glob, table) in tables {
            file.surface(surface, glob, table)?;
        }
    }
    // Rules apply in file order (the first matching effect template wins).
    let mut tools: Vec<_> = raw.tools.into_iter().collect();
    tools.sort_by_key(|(glob, _)| glob.span().start);
    for (glob, tool) in &tools {
        file.tool(glob, tool)?;
    }
    // Each builder error was located as it happened; this only guards against one that was not.
    file.builder
        .build()
        .map_err(|errors| locate(text, 0, errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))
}

struct FileBuilder<'a> {
    text: &'a str,
    builder: PolicyBuilder,
}

impl FileBuilder<'_> {
    /// Applies one builder call; a new error is located at the span of the value it is about (`spans[0]`
    /// for the glob, `spans[1]` for the value, `spans[2]` for a reason).
    fn apply(
        &mut self,
        call: impl FnOnce(PolicyBuilder) -> PolicyBuilder,
        spans: &[Range<usize>],
    ) -> Result<(), PolicyFileError> {
        let before = self.builder.errors.len();
        self.builder = call(std::mem::take(&mut self.builder));
        let Some(error) = self.builder.errors.get(before) else { return Ok(()) };
        let pick = |index: usize| spans.get(index).or(spans.first()).cloned().unwrap_or(0..0);
        let (span, offset) = match error {
            PolicyError::Glob { .. } => (pick(0), None),
            PolicyError::Pin { message, .. } if message.contains("glob") => (pick(0), None),
            PolicyError::Findings { message, .. } if message.contains("glob") => (pick(0), None),
            PolicyError::EmptyReason { .. } | PolicyError::EmptyConditionReason { .. } => (pick(2), None),
            PolicyError::Condition { error, .. } => (pick(1), Some(error.offset)),
            _ => (pick(1), None),
        };
        let message = error.to_string();
        let start = match offset {
            Some(offset) => inside_string(self.text, &span, offset),
            None => span.start,
        };
        Err(locate(self.text, start, message))
    }

    fn surface(&mut self, surface: Surface, glob: &Spanned<String>, table: &RawSurface) -> Result<(), PolicyFileError> {
        let name = glob.get_ref().as_str();
        let key = glob.span();
        if let Err(err) = globset::Glob::new(name) {
            let error = PolicyError::Glob { pattern: name.to_owned(), message: err.kind().to_string() };
            return Err(locate(self.text, key.start, error.to_string()));
        }
        if let Some(rate) = &table.rate {
            self.apply(|b| b.surface_rate_limit(surface, name, rate.get_ref()), &[key.clone(), rate.span()])?;
        }
        if let Some(mask) = &table.mask {
            self.apply(|b| b.surface_mask(surface, name, mask.get_ref()), &[key.clone(), mask.span()])?;
        }
        if let Some(pin) = &table.pin {
            self.apply(|b| b.surface_pin(surface, name, pin.get_ref()), &[key.clone(), pin.span()])?;
        }
        for kind in &table.allow_findings {
            self.apply(|b| b.allow_surface_finding(surface, name, kind.get_ref()), &[key.clone(), kind.span()])?;
        }
        Ok(())
    }

    fn tool(&mut self, glob: &Spanned<String>, tool: &RawTool) -> Result<(), PolicyFileError> {
        let name = glob.get_ref().as_str();
        let key = glob.span();
        // The glob is checked even when its table sets nothing.
        if let Err(err) = globset::Glob::new(name) {
            let error = PolicyError::Glob { pattern: name.to_owned(), message: err.kind().to_string() };
            return Err(locate(self.text, key.start, error.to_string()));
        }
        self.apply(|b| b.table(name), std::slice::from_ref(&key))?;
        if let Some(reason) = &tool.escalate {
            self.apply(|b| b.escalate(name, reason.get_ref()), &[key.clone(), reason.span(), reason.span()])?;
        }
        if let Some(approvals) = &tool.approvals {
            self.apply(
                |b| b.approvals(name, *approvals.get_ref()),
                &[key.clone(), approvals.span(), approvals.span()],
            )?;
        }
        match (&tool.rate, &tool.rate_per, &tool.rate_shared) {
            (Some(rate), per, shared) => {
                let scope = match per.as_ref().map(|p| *p.get_ref()) {
                    Some(RatePer::Thread) => RateScope::PerThread,
                    _ => RateScope::PerTool,
                };
                let shared = shared.as_ref().is_some_and(|shared| *shared.get_ref());
                self.apply(
                    |b| match (shared, scope) {
                        (true, scope) => b.shared_rate_limit(name, rate.get_ref(), scope),
                        (false, RateScope::PerTool) => b.rate_limit(name, rate.get_ref()),
                        (false, RateScope::PerThread) => b.rate_limit_per_thread(name, rate.get_ref()),
                    },
                    &[key.clone(), rate.span()],
                )?;
            }
            (None, Some(per), _) => {
                return Err(locate(self.text, per.span().start, "`rate_per` needs a `rate`".to_owned()));
            }
            (None, None, Some(shared)) => {
                return Err(locate(self.text, shared.span().start, "`rate_shared` needs a `rate`".to_owned()));
            }
            (None, None, None) => {}
        }
        if let Some(mask) = &tool.mask {
            self.apply(|b| b.mask(name, mask.get_ref()), &[key.clone(), mask.span()])?;
        }
        if let Some(ghost) = &tool.ghost {
            let ghost = match ghost.get_ref() {
                Ghost::Strip => GhostPolicy::Strip,
                Ghost::Block => GhostPolicy::Block,
            };
            self.apply(|b| b.ghost(name, ghost), std::slice::from_ref(&key))?;
        }
        if let Some(template) = &tool.effect {
            self.apply(|b| b.effect(name, template.get_ref()), &[key.clone(), template.span()])?;
        }
        if let Some(pin) = &tool.pin {
            self.apply(|b| b.pin(name, pin.get_ref()), &[key.clone(), pin.span()])?;
        }
        if let Some(approver) = &tool.approver {
            let route = match approver.get_ref() {
                Approver::Client => ApprovalRoute::Client,
                Approver::Operator => ApprovalRoute::Operator,
            };
            self.apply(|b| b.approver(name, route), std::slice::from_ref(&key))?;
        }
        for kind in &tool.allow_findings {
            self.apply(|b| b.allow_finding(name, kind.get_ref()), &[key.clone(), kind.span()])?;
        }
        for when in &tool.when {
            let rule = when.get_ref();
            let condition = rule.condition.get_ref();
            let (reason, escalate) = match (&rule.deny, &rule.escalate) {
                (Some(reason), None) => (reason, false),
                (None, Some(reason)) => (reason, true),
                _ => {
                    return Err(locate(
                        self.text,
                        when.span().start,
                        "a `when` rule needs exactly one of `deny = \"reason\"` or `escalate = \"reason\"`".to_owned(),
                    ));
                }
            };
            self.apply(
                |b| {
                    if escalate {
                        b.escalate_when(name, condition, reason.get_ref())
                    } else {
                        b.deny_when(name, condition, reason.get_ref())
                    }
                },
                &[key.clone(), rule.condition.span(), reason.span()],
            )?;
        }
        Ok(())
    }
}

/// The byte position of character `offset` inside the string value at `span`, when the string is written
/// on one line without escapes (so its characters are the file's); otherwise the string's start.
fn inside_string(text: &str, span: &Range<usize>, offset: usize) -> usize {
    let Some(raw) = text.get(span.clone()) else { return span.start };
    let quote = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
        return span.start;
    } else if raw.starts_with('"') {
        '"'
    } else if raw.starts_with('\'') {
        '\''
    } else {
        return span.start;
    };
    let inner = &raw[1..raw.len().saturating_sub(1)];
    if quote == '"' && inner.contains('\\') {
        return span.start;
    }
    let within = inner.char_indices().nth(offset).map_or(inner.len(), |(byte, _)| byte);
    span.start + 1 + within
}

/// `message` at the line and column of byte `at`.
fn locate(text: &str, at: usize, message: String) -> PolicyFileError {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    PolicyFileError { line, column, message }
}

#[cfg(test)]
mod tests;
