//! What each refusal says to the model: one constructor per refusing gate, so the wording lives in one
//! place and the gate sequence stays readable.

use std::time::Duration;

use crate::approval::protocol::AdmitError;
use crate::args::{MAX_ARGUMENT_DEPTH, ScreeningError};
use crate::echo;
use crate::effect::EffectError;
use crate::message::RefusalKind;
use crate::rate::Rate;
use crate::store::rate_buckets::{SharedBucket, SharedRefusal};
use crate::tool::ToolSpec;

/// What a refusal says, before it becomes a message.
pub(super) struct Refused {
    pub(super) kind: RefusalKind,
    pub(super) rule: Option<String>,
    pub(super) retry_after: Option<Duration>,
    pub(super) text: String,
    pub(super) hints: Vec<String>,
}

impl Refused {
    pub(super) fn new(kind: RefusalKind, text: String) -> Self {
        Refused { kind, rule: None, retry_after: None, text, hints: Vec::new() }
    }

    pub(super) fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    pub(super) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }
}

/// Gate 1: the text does not list what is registered.
pub(super) fn unknown_tool(name: &str) -> Refused {
    Refused::new(RefusalKind::UnknownTool, format!("there is no tool named `{}`", echo::fragment(name)))
        .hint("call only the tools you were offered, with their exact names")
}

/// Gate 2: a deny glob matched the registered name.
pub(super) fn denied(name: &str, rule: &str) -> Refused {
    // Joined, not `format!`ted: the formatting machinery was ~400 of a denied call's ~3,200 instructions.
    const BEFORE: &str = "tool `";
    const AFTER: &str = "` is not permitted in this deployment";
    let mut text = String::with_capacity(BEFORE.len() + name.len() + AFTER.len());
    text.push_str(BEFORE);
    text.push_str(name);
    text.push_str(AFTER);
    Refused::new(RefusalKind::Denied, text)
        .rule(rule)
        .hint("do not retry this tool; find another way or tell the user it is not permitted")
}

/// Gate 4b: a policy condition denies the call. `why` says how a missing or mistyped argument applied it.
pub(super) fn condition_denied(name: &str, rule: &str, reason: &str, why: Option<&str>) -> Refused {
    let why = why.map(|why| format!(" ({why}, so the rule applies)")).unwrap_or_default();
    Refused::new(
        RefusalKind::Denied,
        format!("tool `{name}` is not permitted with these arguments: policy rule `{rule}`: {reason}{why}"),
    )
    .rule(rule)
    .hint("do not retry with the same arguments; change them or tell the user the call is not permitted")
}

/// Observe mode: the policy would ask a human (and, with nobody to ask, refuse).
pub(super) fn would_escalate(name: &str, rules: &str, reasons: &str) -> Refused {
    Refused::new(
        RefusalKind::ApprovalUnavailable,
        format!("tool `{name}` needs a human's approval under policy rule `{rules}`: {reasons}"),
    )
    .rule(rules)
}

/// Gate 3: the arguments are not an object, nest too deep, or carry ghosts under `ghost = "block"`.
pub(super) fn screening(name: &str, spec: &ToolSpec, err: ScreeningError) -> Refused {
    match err {
        ScreeningError::NotAnObject(what) => Refused::new(
            RefusalKind::MalformedArguments,
            format!("the arguments for `{name}` must be a JSON object, got {what}"),
        )
        .hint("send the arguments as one JSON object keyed by parameter name"),
        ScreeningError::TooDeep => Refused::new(
            RefusalKind::MalformedArguments,
            format!("the arguments for `{name}` nest deeper than {MAX_ARGUMENT_DEPTH} levels"),
        )
        .hint("send flatter arguments"),
        ScreeningError::Ghosts(ghosts) => {
            let (text, hints) = super::argument_refusal::describe_ghosts(name, spec, &ghosts);
            let mut refused = Refused::new(RefusalKind::MalformedArguments, text).rule("ghost = block");
            refused.hints = hints;
            refused
        }
        ScreeningError::Duplicates(duplicates) => {
            let (text, hints) = super::argument_refusal::describe_duplicates(name, &duplicates);
            let mut refused = Refused::new(RefusalKind::InvalidArguments, text);
            refused.hints = hints;
            refused
        }
        ScreeningError::OutOfRange(out_of_range) => {
            let (text, hints) = super::argument_refusal::describe_out_of_range(name, &out_of_range);
            let mut refused = Refused::new(RefusalKind::InvalidArguments, text);
            refused.hints = hints;
            refused
        }
    }
}

/// Gate 5, with no one to ask.
pub(super) fn no_approver(name: &str, rules: &str) -> Refused {
    Refused::new(
        RefusalKind::ApprovalUnavailable,
        format!("tool `{name}` needs a human's approval and none can be asked here"),
    )
    .rule(rules)
    .hint("do not retry; tell the user this action needs their approval")
}

/// Gate 5: the approval request could not be recorded.
pub(super) fn request_not_recorded(name: &str, rules: &str) -> Refused {
    Refused::new(
        RefusalKind::ApprovalUnavailable,
        format!("tool `{name}` needs a human's approval and the request could not be recorded"),
    )
    .rule(rules)
    .hint("do not retry now; tell the user this action needs their approval")
}

/// Gate 5: no human's answer could be obtained (not shown, not delivered, unanswered, cancelled).
pub(super) fn approval_not_obtained(name: &str, rules: &str, reason: &str) -> Refused {
    tracing::warn!(target: "agent_airlock", rules = %rules, %reason, "approval could not be obtained");
    Refused::new(
        RefusalKind::ApprovalUnavailable,
        format!("tool `{name}` needs a human's approval and it could not be obtained: {reason}"),
    )
    .rule(rules)
    .hint("do not retry at once; tell the user this action needs their approval")
}

/// Gate 5: as many requests of this tool already wait in this thread as the limit allows.
pub(super) fn too_many_pending(
    name: &str,
    rules: &str,
    per_caller: bool,
    pending: u32,
    oldest_expires_at: Option<Duration>,
    now: Duration,
) -> Refused {
    let wait = oldest_expires_at.map(|at| at.saturating_sub(now));
    let when = match wait {
        Some(wait) => {
            let secs = wait.as_secs().saturating_add(u64::from(wait.subsec_nanos() > 0)).max(1);
            format!("retry once one is decided, or in {secs} s when the oldest expires")
        }
        None => "retry once one of them is decided".to_owned(),
    };
    let mut refused = Refused::new(
        RefusalKind::ApprovalUnavailable,
        format!(
            "tool `{name}` already has {pending} approval requests waiting {}; {when}",
            if per_caller { "for this caller" } else { "in this thread" }
        ),
    )
    .rule(rules)
    .hint(format!("do not call `{name}` again until the user has answered the approvals already asked"));
    refused.retry_after = wait;
    refused
}

/// Gate 5: a human said no.
pub(super) fn human_denied(name: &str, rules: &str, reason: Option<&str>) -> Refused {
    let text = match reason {
        Some(reason) => format!("a human declined this call to `{name}`: {reason}"),
        None => format!("a human declined this call to `{name}`"),
    };
    Refused::new(RefusalKind::HumanDenied, text)
        .rule(rules)
        .hint("do not retry the same call; ask the user how to proceed")
}

/// Gates 5 and 7: the resume value does not admit this call (or its grant could not be spent).
pub(super) fn not_admitted(name: &str, rules: &str, err: AdmitError) -> Refused {
    match err {
        AdmitError::Denied { reason, .. } => human_denied(name, rules, reason.as_deref()),
        // Not a recorded yes or no (`false`, a forged denial): a no, in nobody's words.
        AdmitError::NotAnApproval | AdmitError::UnverifiedDenial => {
            Refused::new(RefusalKind::ApprovalInvalid, format!("this call to `{name}` was not approved"))
                .rule(rules)
                .hint("do not retry the same call; ask the user to approve it")
        }
        // The store failed, not the approval: whether a spend whose answer was lost took effect is
        // unknown, so the grant is not promised back; the call can be made again later (a spent grant
        // or a held effect key then refuses it).
        AdmitError::Ledger(fault) if fault.is_fault() => {
            tracing::error!(target: "agent_airlock", error = %fault, "approval ledger failed");
            Refused::new(
                RefusalKind::Unavailable,
                format!("tool `{name}` cannot run right now: its approval could not be checked against the ledger"),
            )
            .rule(rules)
            .hint("retry later")
        }
        err => {
            // The error may quote the resume value (an unknown member, a key id): untrusted, so echoed capped
            // and escaped, in the log as in the refusal.
            let err = crate::echo::message(&err.to_string());
            tracing::warn!(target: "agent_airlock", error = %err, "approval not admitted");
            Refused::new(RefusalKind::ApprovalInvalid, format!("this call to `{name}` was not admitted: {err}"))
                .rule(rules)
                .hint("do not retry with the same approval; ask the user to approve this exact call again")
        }
    }
}

/// Gate 6: a bucket is empty.
pub(super) fn rate_limited(name: &str, rule: String, rate: Rate, wait: Duration) -> Refused {
    // Whole seconds, rounded up: integer formatting (float `{:.0}` took half of this refusal's time).
    let secs = wait.as_secs().saturating_add(u64::from(wait.subsec_nanos() > 0)).max(1);
    Refused::new(RefusalKind::RateLimited, format!("tool `{name}` is rate limited ({rate}); retry in {secs} s"))
        .rule(rule)
        .hint(format!("wait at least {secs} seconds before calling `{name}` again"))
        .retry_after(wait)
}

/// Gate 6: a shared bucket is empty, or its store cannot be reached (a refusal too: a shared limit is
/// never skipped).
pub(super) fn shared_rate(name: &str, buckets: &[SharedBucket], refused: SharedRefusal) -> Refused {
    match refused {
        SharedRefusal::Empty(wait, position) => match buckets.get(position).or(buckets.last()) {
            Some(bucket) => rate_limited(name, bucket.rule.clone(), bucket.rate, wait),
            None => Refused::new(RefusalKind::RateLimited, format!("tool `{name}` is rate limited"))
                .hint("retry later")
                .retry_after(wait),
        },
        SharedRefusal::Fault(err) => {
            tracing::error!(target: "agent_airlock", error = %err, "shared rate limit store failed");
            let rules: Vec<&str> = buckets.iter().map(|bucket| bucket.rule.as_str()).collect();
            Refused::new(
                RefusalKind::Unavailable,
                format!(
                    "tool `{name}` cannot run right now: its shared rate limit could not be checked (the store holding it did not answer)"
                ),
            )
            .rule(rules.join(", "))
            .hint("retry later")
        }
    }
}

/// Gate 7: the effect key cannot be reserved. `now` dates the answer.
pub(super) fn effect(name: &str, err: EffectError, now: Duration) -> Refused {
    let ago = |then: Duration| now.saturating_sub(then).as_secs();
    match err {
        EffectError::Duplicate { committed_at, .. } => Refused::new(
            RefusalKind::Duplicate,
            format!(
                "this `{name}` call already ran {} s ago (at {} s since the Unix epoch); it is not repeated",
                ago(committed_at),
                committed_at.as_secs()
            ),
        )
        .rule("effect")
        .hint("do not repeat this action; tell the user it was already done"),
        EffectError::Ambiguous { since, .. } => Refused::new(
            RefusalKind::EffectUnresolved,
            format!(
                "an earlier `{name}` call with these arguments may or may not have taken effect ({} s ago); an operator must resolve it before it can run again",
                ago(since)
            ),
        )
        .rule("effect")
        .hint("do not retry; tell the user an operator must check whether the action happened"),
        EffectError::InFlight { lease_until, .. } => Refused::new(
            RefusalKind::EffectInFlight,
            format!("the same `{name}` call is running right now; it is not started twice"),
        )
        .rule("effect")
        .hint("wait for the running call's result instead of calling again")
        .retry_after(lease_until.saturating_sub(now)),
        other => {
            tracing::error!(target: "agent_airlock", error = %other, "effect store failed");
            Refused::new(
                RefusalKind::Unavailable,
                format!("tool `{name}` cannot run right now: its effect record could not be written"),
            )
            .rule("effect")
            .hint("retry later")
        }
    }
}
