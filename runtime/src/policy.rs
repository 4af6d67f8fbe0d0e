//! The deployment's policy: deny and allow globs, extra escalation, extra rate limits. A policy can
//! tighten what a tool's author declared, never loosen it.

use globset::{Glob, GlobMatcher};

use crate::mask::MaskSet;
use crate::rate::{Rate, RateScope};

/// A deployment policy over registered tool names.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    deny: Vec<Rule<()>>,
    allow: Vec<Rule<()>>,
    escalate: Vec<Rule<String>>,
    rate_limits: Vec<Rule<(Rate, RateScope)>>,
    masks: Vec<Rule<MaskSet>>,
}

#[derive(Debug, Clone)]
struct Rule<T> {
    pattern: String,
    matcher: GlobMatcher,
    value: T,
}

/// What the policy says about one tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    /// The deny glob that matched, or `not in allow list` when allow globs exist and none matched.
    pub denied_by: Option<String>,
    /// `(glob, reason)` for each escalation rule that matched.
    pub escalations: Vec<(String, String)>,
    /// `(glob, rate, scope)` for each rate-limit rule that matched.
    pub rate_limits: Vec<(String, Rate, RateScope)>,
    /// The masking every matching rule adds (the union).
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
    /// An escalation rule without a reason.
    #[error("escalation rule `{pattern}` needs a non-empty reason")]
    EmptyReason {
        /// The glob.
        pattern: String,
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

    /// What the policy says about the tool registered as `name`.
    pub fn for_tool(&self, name: &str) -> ToolPolicy {
        let denied_by = self.deny.iter().find(|r| r.matcher.is_match(name)).map(|r| r.pattern.clone()).or_else(|| {
            (!self.allow.is_empty() && !self.allow.iter().any(|r| r.matcher.is_match(name)))
                .then(|| "not in allow list".to_owned())
        });
        ToolPolicy {
            denied_by,
            escalations: self
                .escalate
                .iter()
                .filter(|r| r.matcher.is_match(name))
                .map(|r| (r.pattern.clone(), r.value.clone()))
                .collect(),
            rate_limits: self
                .rate_limits
                .iter()
                .filter(|r| r.matcher.is_match(name))
                .map(|r| (r.pattern.clone(), r.value.0, r.value.1))
                .collect(),
            mask: self.masks.iter().filter(|r| r.matcher.is_match(name)).fold(MaskSet::NONE, |set, r| set | r.value),
        }
    }
}

/// Builds a [`Policy`]; every mistake is reported by [`PolicyBuilder::build`].
#[derive(Debug, Default)]
pub struct PolicyBuilder {
    policy: Policy,
    errors: Vec<PolicyError>,
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

    /// Refuses every tool whose name matches `glob`. Deny beats everything.
    pub fn deny(mut self, glob: &str) -> Self {
        if let Some(rule) = self.rule(glob, ()) {
            self.policy.deny.push(rule);
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

    /// Limits each tool matching `glob` to `rate` (`"10/minute"`), on top of its author's limit.
    pub fn rate_limit(self, glob: &str, rate: &str) -> Self {
        self.scoped_rate_limit(glob, rate, RateScope::PerTool)
    }

    /// Limits each thread's calls of each tool matching `glob` to `rate`; threads do not share a bucket.
    pub fn rate_limit_per_thread(self, glob: &str, rate: &str) -> Self {
        self.scoped_rate_limit(glob, rate, RateScope::PerThread)
    }

    fn scoped_rate_limit(mut self, glob: &str, rate: &str, scope: RateScope) -> Self {
        match rate.parse::<Rate>() {
            Ok(parsed) => {
                if let Some(rule) = self.rule(glob, (parsed, scope)) {
                    self.policy.rate_limits.push(rule);
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

    /// The policy, or every error found.
    pub fn build(self) -> Result<Policy, Vec<PolicyError>> {
        if self.errors.is_empty() { Ok(self.policy) } else { Err(self.errors) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
