//! What each gate of [`Dispatcher::run_gates`](super::Dispatcher) asks, one method per gate. The policy
//! gates are methods of [`Rules`], so the sequence asks them once of the rules a tool enforces and once of
//! the rules it only observes, the same way.

use std::borrow::Cow;
use std::time::Duration;

use super::argument_refusal;
use super::call::Call;
use super::dispatcher::{Dispatcher, Entry, Rules};
use serde_json::Value;

use super::Refusing;
use super::refusal::{self, Refused};
use crate::approval::EscalationReason;
use crate::args;
use crate::context::Invocation;
use crate::identity::Identity;
use crate::message::{IncomingArguments, RefusalKind};
use crate::policy::ConditionAction;
use crate::policy::condition::Evaluation;
use crate::store::SharedRateBuckets;
use crate::store::rate_buckets::{SharedBucket, SharedRefusal};
use crate::tool::{ArgumentErrors, Arguments, GhostPolicy, Prepared, PreparedCall, Tool, ToolSpec};

impl Rules {
    /// Whether a call may be escalated: by an escalation rule (the author's `escalate`, a policy glob), or by
    /// an argument condition whose action is to ask a human.
    pub(super) fn may_escalate(&self) -> bool {
        !self.escalations.is_empty()
            || self.conditions.iter().any(|rule| matches!(rule.action(), ConditionAction::Escalate(_)))
    }

    /// Gate 2: a deny glob matched the registered name.
    #[inline]
    pub(super) fn denial(&self, name: &str) -> Result<(), Refused> {
        match &self.denied_by {
            Some(rule) => Err(refusal::denied(name, rule)),
            None => Ok(()),
        }
    }

    /// Gate 2, on the caller: the first deny rule that tests only who calls and applies to this caller
    /// (failing closed without an identity). It needs no arguments, so it refuses before they are screened
    /// or validated: a caller a tool is hidden from (see [`Dispatcher::denies_caller`]) learns nothing of its
    /// arguments from a refusal.
    #[inline]
    pub(super) fn caller_denial(&self, name: &str, identity: Option<&Identity>) -> Result<(), Refused> {
        if self.conditions.is_empty() {
            return Ok(());
        }
        let none = Arguments::new();
        for rule in &self.conditions {
            let ConditionAction::Deny(reason) = rule.action() else { continue };
            if !rule.condition().is_about_identity() {
                continue;
            }
            match rule.evaluate_for(&none, identity) {
                Evaluation::DoesNotHold => {}
                Evaluation::Holds => return Err(refusal::condition_denied(name, rule.name(), reason, None)),
                Evaluation::FailedClosed(why) => {
                    return Err(refusal::condition_denied(name, rule.name(), reason, Some(&why)));
                }
            }
        }
        Ok(())
    }

    /// Gate 2 whole: the deny globs on the name, then the deny rules on who calls. Neither reads the arguments
    /// ([`Dispatcher::refuses_before_arguments`] asks this too).
    #[inline]
    pub(super) fn before_arguments(&self, name: &str, identity: Option<&Identity>) -> Result<(), Refused> {
        self.denial(name).and_then(|()| self.caller_denial(name, identity))
    }

    /// Gate 3: how undeclared keys are screened, the author's mode or the policy's `block`.
    #[inline]
    pub(super) fn ghosts(&self, spec: &ToolSpec) -> GhostPolicy {
        if self.ghost_block.is_some() { GhostPolicy::Block } else { spec.ghost() }
    }

    /// Gate 3, for rules the screen did not apply: the policy's `block` would refuse what was stripped.
    #[inline]
    pub(super) fn ghosts_blocked(&self, name: &str, stripped: &[String]) -> Result<(), Refused> {
        match &self.ghost_block {
            Some(rule) if !stripped.is_empty() => Err(Refused::new(
                RefusalKind::MalformedArguments,
                format!("the arguments for `{name}` carry undeclared keys: {}", stripped.join(", ")),
            )
            .rule(format!("{rule}: ghost = block"))),
            _ => Ok(()),
        }
    }

    /// Whether a gate after gate 4 reads the arguments under these rules: the effect key
    /// ([`effect_key`](Self::effect_key)), the argument conditions ([`conditions`](Self::conditions)) and an
    /// escalation (gate 5's approval request shows them). Whatever else comes to read them after gate 4 must
    /// be added here: without it the arguments are given to the tool and are gone.
    #[inline]
    pub(super) fn reads_arguments(&self) -> bool {
        self.effect.is_some() || !self.conditions.is_empty() || !self.escalations.is_empty()
    }

    /// Gate 4: the policy's idempotency key over the admitted arguments, for a tool whose author declared
    /// none.
    #[inline]
    pub(super) fn effect_key(&self, arguments: &Arguments) -> Option<String> {
        self.effect.as_ref().map(|template| template.render(arguments))
    }

    /// Gate 4b: each condition the call meets (or cannot be shown not to meet), on its arguments and on the
    /// caller's identity (failing closed without one), in order: its escalation, or a deny rule's refusal.
    #[inline]
    pub(super) fn conditions<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Arguments,
        identity: Option<&'a Identity>,
    ) -> impl Iterator<Item = Result<EscalationReason, Refused>> + 'a {
        self.conditions.iter().filter_map(move |rule| {
            let evaluation = rule.evaluate_for(arguments, identity);
            if !evaluation.applies() {
                return None;
            }
            let why = match &evaluation {
                Evaluation::FailedClosed(why) => Some(why.as_str()),
                _ => None,
            };
            Some(match rule.action() {
                ConditionAction::Deny(reason) => Err(refusal::condition_denied(name, rule.name(), reason, why)),
                ConditionAction::Escalate(reason) => Ok(EscalationReason {
                    rule: rule.name().to_owned(),
                    reason: match why {
                        Some(why) => format!("{reason} ({why}, so the rule applies)"),
                        None => reason.clone(),
                    },
                }),
            })
        })
    }

    /// Gate 4b, enforced: the escalations of the conditions the call meets, or the first deny's refusal.
    #[inline]
    pub(super) fn conditions_met(
        &self,
        name: &str,
        arguments: &Arguments,
        identity: Option<&Identity>,
    ) -> Result<Vec<EscalationReason>, Refused> {
        let mut met = Vec::new();
        // A tool without argument conditions (the usual case) answers here, without building the iterator.
        if self.conditions.is_empty() {
            return Ok(met);
        }
        for verdict in self.conditions(name, arguments, identity) {
            met.push(verdict?);
        }
        Ok(met)
    }

    /// Gate 5, for rules nobody is asked about: they would ask a human.
    #[inline]
    pub(super) fn would_escalate(&self, name: &str) -> Result<(), Refused> {
        match self.escalations.is_empty() {
            true => Ok(()),
            false => Err(refusal::would_escalate(name, &self.escalation_rules, &self.escalation_reasons)),
        }
    }
}

/// A call past gates 3 and 4: its future built (not polled), its effect key, the arguments when a later gate
/// reads them, and the keys stripped.
pub(super) struct Admitted {
    pub(super) prepared: PreparedCall,
    pub(super) effect_key: Option<String>,
    pub(super) kept: Option<Arguments>,
    pub(super) stripped: Vec<String>,
}

impl Entry {
    /// Whether a gate after gate 4 reads the call's arguments: the tool's effect template (rendered from them
    /// when the tool gives no key of its own), or either set of rules' (see [`Rules::reads_arguments`]).
    /// Otherwise gate 4 gives them up to the tool, which moves their values out instead of copying them.
    /// Decided once, at build ([`reads_arguments_after_gate_4`](Self::reads_arguments_after_gate_4)).
    #[inline]
    pub(super) fn keeps_arguments(&self) -> bool {
        self.keeps_arguments
    }

    /// What [`keeps_arguments`](Self::keeps_arguments) answers for a tool with these rules.
    pub(super) fn reads_arguments_after_gate_4(tool: &dyn Tool, enforced: &Rules, observed: &Rules) -> bool {
        tool.spec().effect().is_some() || enforced.reads_arguments() || observed.reads_arguments()
    }

    /// Gate 4: validation and injection. The call's future is built, not polled; its effect key comes from
    /// the typed values (hand-written tools may leave it to the template), or from the enforced policy's
    /// template over the admitted arguments. The arguments are kept (and returned) when a later gate reads
    /// them ([`keeps_arguments`](Self::keeps_arguments)), else given to the tool.
    #[inline]
    pub(super) fn prepare(
        &self,
        call: &Call<'_>,
        arguments: Arguments,
        stripped: &[String],
    ) -> Result<(PreparedCall, Option<String>, Option<Arguments>), Refused> {
        let spec = self.tool.spec();
        let invocation = Invocation { context: call.context, tool_call_id: call.id, tool: spec.name() };
        if !self.keeps_arguments() {
            let (prepared, effect_key) = self.prepare_with(call, Cow::Owned(arguments), &invocation, stripped)?;
            return Ok((prepared, effect_key, None));
        }
        let (prepared, effect_key) = self.prepare_with(call, Cow::Borrowed(&arguments), &invocation, stripped)?;
        let effect_key = match spec.effect() {
            Some(template) => Some(effect_key.unwrap_or_else(|| template.render(&arguments))),
            None => self.enforced.effect_key(&arguments),
        };
        Ok((prepared, effect_key, Some(arguments)))
    }

    /// Gates 3 and 4 read off the arguments' JSON text: the call prepared from each parameter's text, for a
    /// tool that [`reads_text`](Entry::reads_text) (which a dispatcher with an audit log never does) and a call
    /// in no dialect whose SDK holds integer bounds as floats (the screen checks those on the map), when the screen
    /// would admit the arguments unchanged and every value deserializes. `None` otherwise: the call takes the
    /// map's way ([`screen_and_prepare`](Self::screen_and_prepare)), which refuses, strips or words what
    /// failed, as if this had not been tried.
    #[inline]
    pub(super) fn prepare_text(
        &self,
        call: &Call<'_>,
        arguments: &IncomingArguments,
    ) -> Option<(PreparedCall, Option<String>)> {
        let IncomingArguments::Text(text) = arguments else { return None };
        if !self.reads_text || call.float_bounds() {
            return None;
        }
        let spec = self.tool.spec();
        let texts = crate::args::argument_texts(text, spec.params(), &self.screen)?;
        let invocation = Invocation { context: call.context, tool_call_id: call.id, tool: spec.name() };
        self.tool.prepare_text(&texts, &invocation).map(Prepared::into_parts)
    }

    /// Gates 3 and 4 on the parsed arguments: ghosts stripped and reported, or refused (the author's `block`, or
    /// the policy's); then validation and injection, the tool's future built but not polled. The arguments
    /// come back only if a later gate reads them (an effect template, an argument condition, an escalation);
    /// otherwise the tool has moved their values out, and nothing after reads them.
    #[inline]
    pub(super) fn screen_and_prepare(&self, call: &mut Call<'_>, arguments: Value) -> Result<Admitted, Refusing> {
        let (name, spec) = (call.name, self.tool.spec());
        let screened = args::screen(arguments, spec, &self.screen, self.enforced.ghosts(spec), call.context.dialect());
        // Taken apart where it is matched, so the screened whole is not kept beside its parts.
        let args::Screened { arguments, stripped } = match screened {
            Ok(screened) => screened,
            Err(err) => return Err((refusal::screening(name, spec, err), Vec::new())),
        };
        call.screened(&arguments, &stripped);
        call.observe(self.observed.ghosts_blocked(name, &stripped));
        match self.prepare(call, arguments, &stripped) {
            Ok((prepared, effect_key, kept)) => Ok(Admitted { prepared, effect_key, kept, stripped }),
            Err(refused) => Err((refused, stripped)),
        }
    }

    /// The tool's `prepare`, its errors worded as gate 4's refusal.
    #[inline]
    fn prepare_with(
        &self,
        call: &Call<'_>,
        arguments: Cow<'_, Arguments>,
        invocation: &Invocation<'_>,
        stripped: &[String],
    ) -> Result<(PreparedCall, Option<String>), Refused> {
        match self.tool.prepare(arguments, invocation) {
            Ok(prepared) => Ok(prepared.into_parts()),
            Err(errors) => Err(self.invalid(call, &errors, stripped)),
        }
    }

    /// Gate 4's refusal of arguments the tool did not accept, or of a call the host cannot inject into.
    #[cold]
    #[inline(never)]
    fn invalid(&self, call: &Call<'_>, errors: &ArgumentErrors, stripped: &[String]) -> Refused {
        let (text, hints) = argument_refusal::describe_errors(
            call.name,
            errors,
            &self.definition.input_schema,
            &self.expected,
            stripped,
        );
        let kind = if errors.is_host_error() {
            for error in errors.errors() {
                tracing::error!(target: "agent_airlock", error = ?error, "injected value missing");
            }
            RefusalKind::HostMisconfigured
        } else {
            RefusalKind::InvalidArguments
        };
        let mut refused = Refused::new(kind, text);
        refused.hints = hints;
        refused
    }
}

impl Dispatcher {
    /// Gate 6 under one set of rules, the buckets in memory: one token from each, or none. Synchronous: the
    /// round trip to a shared store is left to [`take_shared_tokens`](Self::take_shared_tokens), whose future
    /// is built only for rules with shared buckets. The store to take from next, if they have any.
    #[inline]
    pub(super) fn take_local_tokens(
        &self,
        rules: &Rules,
        name: &str,
        thread: Option<&str>,
        now: Duration,
    ) -> Result<Option<&SharedRateBuckets>, Refused> {
        if let Err((wait, position)) = self.limiter.acquire(&rules.buckets, thread, now) {
            let (rule, rate) = rules.bucket_rules[position].clone();
            return Err(refusal::rate_limited(name, rule, rate, wait));
        }
        Ok(self.shared_rates.as_ref().filter(|_| !rules.shared_buckets.is_empty()))
    }

    /// Gate 6's shared buckets, after [`take_local_tokens`](Self::take_local_tokens) took from the ones in
    /// memory: one token from each, or none and the local tokens given back.
    pub(super) async fn take_shared_tokens(
        &self,
        shared: &SharedRateBuckets,
        rules: &Rules,
        name: &str,
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), Refused> {
        if let Err(refused) = shared.acquire(&rules.shared_buckets, thread, now).await {
            self.limiter.refund(&rules.buckets, thread, now);
            return Err(refusal::shared_rate(name, &rules.shared_buckets, refused));
        }
        Ok(())
    }

    /// Gives back what [`take_local_tokens`](Self::take_local_tokens) and
    /// [`take_shared_tokens`](Self::take_shared_tokens) took, for a call a later gate refused.
    pub(super) async fn give_back(&self, rules: &Rules, thread: Option<&str>, now: Duration) {
        self.limiter.refund(&rules.buckets, thread, now);
        self.refund_shared(&rules.shared_buckets, thread, now).await;
    }

    /// Gives back what [`take_shared_tokens`](Self::take_shared_tokens) took. If the store cannot be reached,
    /// the tokens stay spent: the limit errs on the strict side.
    async fn refund_shared(&self, buckets: &[SharedBucket], thread: Option<&str>, now: Duration) {
        if let Some(shared) = &self.shared_rates
            && !buckets.is_empty()
            && let Err(err) = shared.refund(buckets, thread, now).await
        {
            tracing::warn!(target: "agent_airlock", error = %err, "shared rate tokens not given back");
        }
    }

    /// Gate 5's first step: the refusals no human can change, checked without taking anything. Shared
    /// buckets are checked too (one read of the store): a human is not asked about a call an empty shared
    /// bucket refuses anyway. A store fault here is not a refusal: gate 6 refuses if it persists.
    pub(super) async fn refusal_before_asking(
        &self,
        call: &Call<'_>,
        rules: &Rules,
        effect_key: Option<&str>,
    ) -> Result<(), Refused> {
        let (name, subject, now) = (call.name, call.context.rate_subject(), self.clock.now());
        if let Err((wait, position)) = self.limiter.check(&rules.buckets, subject, now) {
            let (rule, rate) = rules.bucket_rules[position].clone();
            return Err(refusal::rate_limited(name, rule, rate, wait));
        }
        if let Some(shared) = &self.shared_rates
            && let Err(refused @ SharedRefusal::Empty(..)) = shared.check(&rules.shared_buckets, subject, now).await
        {
            return Err(refusal::shared_rate(name, &rules.shared_buckets, refused));
        }
        // A storage fault here is not a refusal: gate 7 reports it if it persists.
        match effect_key {
            Some(key) => self.effect_refusal(name, key),
            None => Ok(()),
        }
    }

    /// Whether reserving `key` now would be refused (a duplicate, an ambiguous or running effect), without
    /// reserving it. A storage fault is not a refusal here.
    pub(super) fn effect_refusal(&self, name: &str, key: &str) -> Result<(), Refused> {
        let Some(store) = &self.effects else { return Ok(()) };
        let now = self.clock.now();
        match store.get(key) {
            Ok(current) => crate::effect::reserve_step(current, key, self.effect_lease, now)
                .answer
                .map(|_| ())
                .map_err(|err| refusal::effect(name, err, now)),
            Err(_) => Ok(()),
        }
    }
}
