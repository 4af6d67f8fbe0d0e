//! The dispatcher: the guarded counterpart of LangGraph's `ToolNode`. It holds the tools, the policy and
//! the approver, and runs each model tool call through the gates in order.
//!
//! The gate sequence is one function, [`Dispatcher::run_gates`], readable top to bottom. Beside it:
//! building (`build`), escalation (`escalation`), what each refusal says (`refusal`) and the audit trail
//! (`trail`) and the durable writes (`writes`). A reserved effect is held by an
//! `EffectGuard` while the tool runs.
//!
//! The order matters for what a human's approval is worth: every gate that can refuse runs before the
//! grant is spent, and the grant is spent in the same atomic write that reserves the call's effect, so a
//! refusal by the rate limit or the effect record leaves the approval live.
//!
//! **Two durable writes at most.** Admission (the spend, the reservation and the "approved" record) is
//! one write; settlement (the effect's outcome and the call's record) another. Both are awaited: on redb
//! they are queued to the database's writer thread and share commits with concurrent dispatches.

mod argument_refusal;
mod build;
mod dispatcher;
mod durable_write;
mod effect_guard;
mod escalation;
mod refusal;
mod trail;
mod writes;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::Value;
use tracing::Instrument as _;

pub use self::build::{BuildError, DEFAULT_EFFECT_LEASE, DispatcherBuilder};
pub use self::dispatcher::Dispatcher;
use self::dispatcher::Entry;
use self::durable_write::{DurableWrite, NotDecided};
use self::effect_guard::EffectGuard;
use self::escalation::{Escalated, EscalatedCall, Reviewer};
use self::refusal::Refused;
use self::trail::{Trail, audit_outcome_of};
use crate::approval::protocol::PreparedAdmission;
use crate::approval::{Approver, EscalationReason};
use crate::args;
use crate::audit::{AuditLog, AuditOutcome};
use crate::clock::Clock;
use crate::context::{CallContext, Invocation};
use crate::dialect::{Dialect, DialectError, DialectOffer};
use crate::effect::{Reservation, Settle};
use crate::ledger::{EffectClaim, LedgerError};
use crate::mask::{MaskSet, Masker};
use crate::message::{Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};
use crate::policy::{ConditionAction, Evaluation};
use crate::schema::ToolDefinition;
use crate::store::rate_buckets::{SharedBucket, SharedRefusal};
use crate::tool::{Arguments, GhostPolicy, ToolOutput};

/// A refusal and the argument keys stripped before it.
type Refusing = (Refused, Vec<String>);

impl Dispatcher {
    /// The masker results go through, for what a gateway serves besides tools.
    #[cfg(feature = "mcp-gateway")]
    pub(crate) fn masker(&self) -> &Arc<Masker> {
        &self.masker
    }

    /// The audit log, if the dispatcher keeps one.
    #[cfg(feature = "mcp-gateway")]
    pub(crate) fn audit_log(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    /// The clock its rate limits read.
    #[cfg(feature = "mcp-gateway")]
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The tools the model may be offered: denied tools are left out, escalated ones kept (a human can
    /// approve them). In registration order.
    pub fn offered_tools(&self) -> Vec<ToolDefinition> {
        self.order
            .iter()
            .filter_map(|name| self.tools.get(name.as_str()))
            .filter(|entry| entry.denied_by.is_none() || self.observe)
            .map(|entry| entry.definition.clone())
            .collect()
    }

    /// [`offered_tools`](Self::offered_tools) less those the policy denies to this caller outright: a deny
    /// condition on the caller's identity alone (`not (identity.groups contains "payments")`) that applies
    /// to it, so what a caller may not call is not offered to it. A caller with no identity is denied
    /// every tool with such a rule (identity conditions fail closed). In observe mode nothing is left out.
    pub fn offered_tools_to(&self, context: &CallContext) -> Vec<ToolDefinition> {
        self.offered_tools().into_iter().filter(|definition| !self.denies_caller(&definition.name, context)).collect()
    }

    /// Whether the policy refuses every call of `tool` by this caller, whatever its arguments: one of the
    /// tool's deny conditions tests only the caller's identity and applies to it. `false` for an unknown
    /// tool and in observe mode.
    pub fn denies_caller(&self, tool: &str, context: &CallContext) -> bool {
        let Some(entry) = self.tools.get(tool) else { return false };
        !self.observe
            && entry.conditions.iter().any(|rule| {
                matches!(rule.action(), ConditionAction::Deny(_))
                    && rule.condition().is_about_identity()
                    && rule.evaluate_for(&Arguments::new(), context.identity()).applies()
            })
    }

    /// [`offered_tools`](Self::offered_tools) in `dialect`'s request shape (see
    /// [`ToolDefinition::to_dialect`]): every tool the dialect can express, and why each other one cannot.
    pub fn offered_tools_in(&self, dialect: Dialect) -> DialectOffer {
        crate::dialect::offer_in(dialect, &self.offered_tools())
    }

    /// [`offered_tools_in`](Self::offered_tools_in), all or nothing: the first tool the dialect cannot
    /// express is the error.
    pub fn offered_tools_in_all(&self, dialect: Dialect) -> Result<Vec<Value>, DialectError> {
        crate::dialect::definitions_for(dialect, &self.offered_tools())
    }

    /// Runs one tool call through every gate. Never panics on model input; a tool that panics yields an
    /// error message.
    pub async fn dispatch(&self, call: ToolCall, context: &CallContext) -> Outcome {
        self.dispatch_escalating_to(call, context, Reviewer::Configured).await
    }

    /// Like [`dispatch`](Self::dispatch), but an escalated call is reviewed by `approver` instead of what the
    /// dispatcher was built with; `None` means no human can be asked for this call, so it is refused.
    ///
    /// For hosts whose human is reachable only through the request being served: an MCP server asks its
    /// client through elicitation on the current request's connection, so its approver exists per request.
    pub async fn dispatch_with_approver(
        &self,
        call: ToolCall,
        context: &CallContext,
        approver: Option<&dyn Approver>,
    ) -> Outcome {
        let reviewer = match approver {
            Some(approver) => Reviewer::Given(approver),
            None => Reviewer::Nobody,
        };
        self.dispatch_escalating_to(call, context, reviewer).await
    }

    async fn dispatch_escalating_to(&self, call: ToolCall, context: &CallContext, reviewer: Reviewer<'_>) -> Outcome {
        let ToolCall { id, name, arguments } = call;
        let span = tracing::info_span!(target: "agent_airlock", "tool_call", tool = %name, tool_call_id = %id);
        let mut trail = Trail::default();
        let gates = self.run_gates(&id, &name, arguments, context, reviewer, &mut trail);
        // `instrument`, not `enter`: a guard held across `.await` would mislabel other tasks' events.
        let outcome = match gates.instrument(span.clone()).await {
            Ok(outcome) => outcome,
            Err((refused, stripped)) => {
                span.in_scope(|| {
                    tracing::info!(
                        target: "agent_airlock",
                        outcome = "refused",
                        kind = ?refused.kind,
                        rule = refused.rule.as_deref().unwrap_or(""),
                        "tool call refused"
                    )
                });
                trail.outcome = Some(audit_outcome_of(refused.kind));
                trail.rule.clone_from(&refused.rule);
                Outcome::Message(ToolMessage {
                    tool_call_id: id.clone(),
                    name: name.clone(),
                    content: refused.text,
                    status: Status::Error,
                    hints: refused.hints,
                    stripped_arguments: stripped,
                    refusal: Some(Refusal { kind: refused.kind, rule: refused.rule, retry_after: refused.retry_after }),
                    structured_content: None,
                })
            }
        };
        // The second durable write: the effect settled and the records, together.
        let mut entries = std::mem::take(&mut trail.pending);
        if let (Some(audited), Some(log)) = (trail.outcome, &self.audit) {
            entries.push(trail.entry(log, &name, &id, context, audited));
        }
        self.settle_and_record(trail.settle.take(), entries).await;
        // Only now does the host hold the interrupt: dropped before this, the request is closed.
        if let Some(issued) = trail.issued.take() {
            issued.handed_over();
        }
        outcome
    }

    /// The gates, in order. Every `return Err` is a refusal; nothing runs until gate 8.
    async fn run_gates(
        &self,
        id: &str,
        name: &str,
        arguments: Value,
        context: &CallContext,
        reviewer: Reviewer<'_>,
        trail: &mut Trail,
    ) -> Result<Outcome, Refusing> {
        let refuse = |refused: Refused| (refused, Vec::new());

        // 1. Unknown tool. The text does not list what is registered.
        let Some(entry) = self.tools.get(name) else {
            args::discard(arguments);
            return Err(refuse(refusal::unknown_tool(name)));
        };
        let spec = entry.tool.spec();

        // 2. Policy on the registered name. Deny beats everything, approvals included.
        if let Some(rule) = &entry.denied_by {
            if !self.observe {
                args::discard(arguments);
                return Err(refuse(refusal::denied(name, rule)));
            }
            self.would_refuse(refusal::denied(name, rule), name, id, context, trail);
        }

        // 3. Ghost arguments: the author's mode, or the policy's `block` (observed only, in observe mode).
        let ghost = if entry.ghost_block.is_some() && !self.observe { GhostPolicy::Block } else { spec.ghost() };
        let screened = args::screen(arguments, spec, &entry.screen, ghost, context.dialect())
            .map_err(|err| refuse(refusal::screening(name, spec, err)))?;
        if !screened.stripped.is_empty() {
            tracing::warn!(target: "agent_airlock", stripped = ?screened.stripped, "undeclared arguments stripped");
        }
        let stripped = screened.stripped;
        let with_stripped = |refused: Refused| (refused, stripped.clone());
        if self.audit.is_some() {
            trail.arguments = Some(Value::Object(screened.arguments.clone()));
        }
        if let Some(rule) = &entry.ghost_block
            && self.observe
            && !stripped.is_empty()
        {
            let refused = Refused::new(
                RefusalKind::MalformedArguments,
                format!("the arguments for `{name}` carry undeclared keys: {}", stripped.join(", ")),
            )
            .rule(format!("{rule}: ghost = block"));
            self.would_refuse(refused, name, id, context, trail);
        }

        // 4. Validation and injection: the future is built but not polled.
        let invocation = Invocation { context, tool_call_id: id, tool: spec.name() };
        let (prepared, effect_key) = match entry.tool.prepare(&screened.arguments, &invocation) {
            Ok(prepared) => prepared.into_parts(),
            Err(errors) => {
                let (text, hints) =
                    argument_refusal::describe_errors(name, &errors, &entry.definition.input_schema, &stripped);
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
                return Err(with_stripped(refused));
            }
        };
        // The key comes from the typed values (hand-written tools may leave it to the template), or from
        // the policy's template over the admitted arguments.
        let effect_key = match spec.effect() {
            Some(template) => Some(effect_key.unwrap_or_else(|| template.render(&screened.arguments))),
            None => entry.policy_effect.as_ref().map(|template| template.render(&screened.arguments)),
        };
        let effect_key = match effect_key {
            Some(key) if spec.effect().is_none() && self.observe => {
                if let Err(refused) = self.effect_refusal(name, &key) {
                    self.would_refuse(refused, name, id, context, trail);
                }
                None
            }
            key => key,
        };

        // 4b. The policy's argument conditions, on the screened arguments. A deny rule refuses at once
        //     (deny beats everything); an escalation rule joins the tool's escalations.
        let met = self.conditions_met(entry, name, &screened.arguments, id, context, trail).map_err(with_stripped)?;

        // 5. Escalation. What no human can change (an empty bucket, a duplicate effect) is refused before
        //    a human is asked; an approval across an interrupt is verified here and spent at gate 7.
        if !entry.observed_escalations.is_empty() {
            let (rules, reasons) = escalation::joined(&entry.observed_escalations);
            self.would_refuse(refusal::would_escalate(name, &rules, &reasons), name, id, context, trail);
        }
        let mut resumed = None;
        // The tool's escalations as joined at build time, or with the conditions this call met.
        let with_met;
        let (escalations, rules, reasons) = if met.is_empty() {
            (&entry.escalations, &entry.escalation_rules, &entry.escalation_reasons)
        } else {
            let all: Vec<EscalationReason> = entry.escalations.iter().cloned().chain(met).collect();
            let (rules, reasons) = escalation::joined(&all);
            with_met = (all, rules, reasons);
            (&with_met.0, &with_met.1, &with_met.2)
        };
        if !escalations.is_empty() {
            trail.rule = Some(rules.clone());
            self.refusal_before_asking(entry, name, effect_key.as_deref(), context).await.map_err(with_stripped)?;
            let call =
                EscalatedCall { entry, id, name, arguments: &screened.arguments, context, escalations, rules, reasons };
            match self.escalate(&call, reviewer).await.map_err(with_stripped)? {
                Escalated::Approved { detail } => {
                    trail.detail = Some(detail);
                    // Written with the admission, or with the settlement if nothing is admitted durably.
                    if let Some(log) = &self.audit {
                        let approved = trail.entry(log, name, id, context, AuditOutcome::Approved);
                        trail.pending.push(approved);
                    }
                }
                Escalated::Resumed(admission) => resumed = Some(admission),
                Escalated::Interrupt(request, issued) => {
                    tracing::info!(target: "agent_airlock", outcome = "interrupted", rules = %rules, "approval requested");
                    trail.outcome = Some(AuditOutcome::Interrupted);
                    trail.detail = Some(format!("request {}", request.request_id()));
                    trail.issued = Some(issued);
                    return Ok(Outcome::Interrupt { tool_call_id: id.to_owned(), request });
                }
            }
        }

        // 6. Rate limits: one token from every applicable bucket, or none. The buckets in memory first, then
        //    the shared ones (a round trip to the store, awaited), so a call refused here costs the store
        //    nothing; a shared bucket that cannot be reached refuses the call. Per-thread buckets count by the
        //    caller when the host names one, so a new thread is no fresh budget.
        let thread = context.rate_subject();
        let now = self.clock.now();
        if let Err((wait, position)) = self.limiter.acquire(&entry.buckets, thread, now) {
            let (rule, rate) = entry.bucket_rules[position].clone();
            return Err(with_stripped(refusal::rate_limited(name, rule, rate, wait)));
        }
        if let Err(refused) = self.take_shared(&entry.shared_buckets, thread, now).await {
            self.limiter.refund(&entry.buckets, thread, now);
            return Err(with_stripped(refusal::shared_rate(name, &entry.shared_buckets, refused)));
        }
        let observed_taken = match self.limiter.acquire(&entry.observed_buckets, thread, now) {
            Ok(()) => match self.take_shared(&entry.observed_shared_buckets, thread, now).await {
                Ok(()) => true,
                Err(refused) => {
                    self.limiter.refund(&entry.observed_buckets, thread, now);
                    let refused = refusal::shared_rate(name, &entry.observed_shared_buckets, refused);
                    self.would_refuse(refused, name, id, context, trail);
                    false
                }
            },
            Err((wait, position)) => {
                let (rule, rate) = entry.observed_bucket_rules[position].clone();
                self.would_refuse(refusal::rate_limited(name, rule, rate, wait), name, id, context, trail);
                false
            }
        };

        // 7. Admission, one atomic write: spend the grant (if resumed) and reserve the effect key. A
        //    refusal here gives the rate tokens back (shared ones too) and leaves the grant live.
        let reservation = match self.admit(name, id, effect_key, resumed, context, trail).await {
            Ok(reservation) => reservation,
            Err(refused) => {
                let now = self.clock.now();
                self.limiter.refund(&entry.buckets, thread, now);
                self.refund_shared(&entry.shared_buckets, thread, now).await;
                if observed_taken {
                    self.limiter.refund(&entry.observed_buckets, thread, now);
                    self.refund_shared(&entry.observed_shared_buckets, thread, now).await;
                }
                return Err(with_stripped(refused));
            }
        };
        let mut effect = reservation.zip(self.effects.as_ref()).map(|(reservation, store)| {
            EffectGuard::new(Arc::clone(store), reservation, Arc::clone(&self.clock))
                .renewed_by(&self.lease_keeper, self.effect_lease)
        });

        // 8. Execute. A panicking tool becomes an error message, not a crashed host.
        let Ok(output) = AssertUnwindSafe(prepared).catch_unwind().await else {
            tracing::error!(target: "agent_airlock", outcome = "panicked", effect = effect.is_some(), "tool panicked");
            trail.settle = effect.as_mut().and_then(|guard| guard.take(Settle::Ambiguous));
            trail.outcome = Some(AuditOutcome::Panicked);
            return Ok(Outcome::Message(message(id, name, Status::Error, format!("tool `{name}` failed"), stripped)));
        };

        // 9. Mask what the model (and the audit log) sees; settle the effect from the outcome.
        Ok(self.settle(output, entry, id, name, stripped, effect.as_mut(), trail))
    }

    /// Gate 4b: the escalations of every argument condition the call meets (or cannot be shown not to
    /// meet); a deny condition refuses. In observe mode each is reported instead.
    fn conditions_met(
        &self,
        entry: &Entry,
        name: &str,
        arguments: &Arguments,
        id: &str,
        context: &CallContext,
        trail: &mut Trail,
    ) -> Result<Vec<EscalationReason>, Refused> {
        let mut escalations = Vec::new();
        for rule in &entry.conditions {
            let evaluation = rule.evaluate_for(arguments, context.identity());
            if !evaluation.applies() {
                continue;
            }
            let why = match &evaluation {
                Evaluation::FailedClosed(why) => Some(why.as_str()),
                _ => None,
            };
            match rule.action() {
                ConditionAction::Deny(reason) => {
                    let refused = refusal::condition_denied(name, rule.name(), reason, why);
                    if !self.observe {
                        return Err(refused);
                    }
                    self.would_refuse(refused, name, id, context, trail);
                }
                ConditionAction::Escalate(reason) => {
                    let reason = match why {
                        Some(why) => format!("{reason} ({why}, so the rule applies)"),
                        None => reason.clone(),
                    };
                    if self.observe {
                        self.would_refuse(
                            refusal::would_escalate(name, rule.name(), &reason),
                            name,
                            id,
                            context,
                            trail,
                        );
                    } else {
                        escalations.push(EscalationReason { rule: rule.name().to_owned(), reason });
                    }
                }
            }
        }
        Ok(escalations)
    }

    /// Observe mode: a refusal the policy alone would make, traced and audited as "would refuse", not
    /// enforced.
    fn would_refuse(&self, refused: Refused, name: &str, id: &str, context: &CallContext, trail: &mut Trail) {
        tracing::warn!(
            target: "agent_airlock",
            outcome = "would_refuse",
            kind = ?refused.kind,
            rule = refused.rule.as_deref().unwrap_or(""),
            text = %refused.text,
            "observe mode: the policy would refuse this call; not enforced"
        );
        if let Some(log) = &self.audit {
            let observed = Trail {
                rule: refused.rule,
                detail: Some(format!("observe mode: would refuse, not enforced: {}", refused.text)),
                arguments: trail.arguments.clone(),
                ..Trail::default()
            };
            // Written with the dispatch's next durable write, like a human's approval.
            trail.pending.push(observed.entry(log, name, id, context, audit_outcome_of(refused.kind)));
        }
    }

    /// Whether reserving `key` now would be refused (a duplicate, an ambiguous or running effect), without
    /// reserving it. A storage fault is not a refusal here.
    fn effect_refusal(&self, name: &str, key: &str) -> Result<(), Refused> {
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

    /// Gate 6's shared buckets: one token from each, or none.
    async fn take_shared(
        &self,
        buckets: &[SharedBucket],
        thread: Option<&str>,
        now: Duration,
    ) -> Result<(), SharedRefusal> {
        match &self.shared_rates {
            Some(shared) if !buckets.is_empty() => shared.acquire(buckets, thread, now).await,
            _ => Ok(()),
        }
    }

    /// Gives back what [`take_shared`](Self::take_shared) took, for a call a later gate refused. If the
    /// store cannot be reached, the tokens stay spent: the limit errs on the strict side.
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
    async fn refusal_before_asking(
        &self,
        entry: &Entry,
        name: &str,
        effect_key: Option<&str>,
        context: &CallContext,
    ) -> Result<(), Refused> {
        let now = self.clock.now();
        if let Err((wait, position)) = self.limiter.check(&entry.buckets, context.rate_subject(), now) {
            let (rule, rate) = entry.bucket_rules[position].clone();
            return Err(refusal::rate_limited(name, rule, rate, wait));
        }
        if let Some(shared) = &self.shared_rates
            && let Err(refused @ SharedRefusal::Empty(..)) =
                shared.check(&entry.shared_buckets, context.rate_subject(), now).await
        {
            return Err(refusal::shared_rate(name, &entry.shared_buckets, refused));
        }
        // A storage fault here is not a refusal: gate 7 reports it if it persists.
        match effect_key {
            Some(key) => self.effect_refusal(name, key),
            None => Ok(()),
        }
    }

    /// Gate 7, one durable write: spends a verified approval, reserves the effect key and records the
    /// approval, all or nothing.
    async fn admit(
        &self,
        name: &str,
        id: &str,
        effect_key: Option<String>,
        resumed: Option<PreparedAdmission>,
        context: &CallContext,
        trail: &mut Trail,
    ) -> Result<Option<Reservation>, Refused> {
        let now = self.clock.now();
        let claim =
            effect_key.filter(|_| self.effects.is_some()).map(|key| EffectClaim { key, lease: self.effect_lease });
        let resumed = resumed.zip(self.interrupt_approvals());
        if claim.is_none() && resumed.is_none() {
            // Nothing to write durably yet: a human's approval is recorded with the settlement.
            return Ok(None);
        }
        let earlier = std::mem::take(&mut trail.pending);
        let mut entries = earlier.clone();
        if resumed.is_some()
            && let Some(log) = &self.audit
        {
            // Its detail names the grant, once the write has spent it.
            entries.push(trail.entry(log, name, id, context, AuditOutcome::Approved));
        }
        let decision = DurableWrite {
            now,
            spend: resumed.as_ref().map(|(prepared, _)| prepared.attempt().clone()),
            reserve: claim,
            audit: self.audit.as_ref().filter(|_| !entries.is_empty()).map(|log| log.appending(entries)),
            ..DurableWrite::default()
        };
        let answer = self.decide(decision).await;
        let refused = |trail: &mut Trail, refused: Refused| {
            // Nothing was written: what happened before the admission is recorded with the refusal.
            trail.pending = earlier.clone();
            Err(refused)
        };
        let Some((prepared, _)) = resumed else {
            return match answer {
                Ok(Ok(decided)) => Ok(decided.reservation),
                Ok(Err(NotDecided::Effect(err))) => refused(trail, refusal::effect(name, err, now)),
                Ok(Err(NotDecided::Spend(err))) | Err(err) => {
                    refused(trail, refusal::effect(name, durable_write::effect_fault(err), now))
                }
            };
        };
        let rules = trail.rule.clone().unwrap_or_default();
        let (spent, reservation) = match answer {
            Ok(Ok(decided)) => (decided.spent.ok_or(LedgerError::WriterStopped), decided.reservation),
            Ok(Err(NotDecided::Effect(err))) => return refused(trail, refusal::effect(name, err, now)),
            Ok(Err(NotDecided::Spend(err))) | Err(err) => (Err(err), None),
        };
        match prepared.admitted(spent) {
            Ok(admission) => {
                tracing::info!(
                    target: "agent_airlock",
                    outcome = "approved",
                    rules = %rules,
                    grant_id = %admission.grant_id,
                    approver = %admission.approver,
                    "approval spent"
                );
                trail.detail = Some(format!("grant {} by {}", admission.grant_id, admission.approver));
                Ok(reservation)
            }
            Err(not_admitted) => refused(trail, refusal::not_admitted(name, &rules, not_admitted)),
        }
    }

    /// Gate 9: the tool's output as a message (masked) or a host command (untouched), with how its
    /// effect settles and its audit facts noted (written after the gates, in one write).
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &self,
        output: ToolOutput,
        entry: &Entry,
        id: &str,
        name: &str,
        stripped: Vec<String>,
        effect: Option<&mut EffectGuard>,
        trail: &mut Trail,
    ) -> Outcome {
        let audited = self.audit.is_some();
        match output {
            ToolOutput::Content(mut value) => {
                tracing::info!(target: "agent_airlock", outcome = "executed", effect = effect.is_some(), "tool call executed");
                self.mask(&mut value, entry.mask);
                trail.settle = effect.and_then(|guard| guard.take(Settle::Commit));
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = Some(value.clone());
                }
                Outcome::Message(message(id, name, Status::Success, content_text(value), stripped))
            }
            ToolOutput::Structured { mut content, mut structured } => {
                tracing::info!(target: "agent_airlock", outcome = "executed", effect = effect.is_some(), "tool call executed");
                self.mask(&mut content, entry.mask);
                self.mask(&mut structured, entry.mask);
                trail.settle = effect.and_then(|guard| guard.take(Settle::Commit));
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = Some(serde_json::json!({"content": content, "structuredContent": structured}));
                }
                let mut message = message(id, name, Status::Success, content_text(content), stripped);
                message.structured_content = Some(structured);
                Outcome::Message(message)
            }
            ToolOutput::Command(command) => {
                tracing::info!(target: "agent_airlock", outcome = "command", effect = effect.is_some(), "tool returned a host command");
                trail.settle = effect.and_then(|guard| guard.take(Settle::Commit));
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = serde_json::to_value(&command).ok();
                }
                Outcome::Command { command, tool_call_id: id.to_owned(), stripped_arguments: stripped }
            }
            ToolOutput::Failed(error) => {
                let not_executed = error.is_not_executed();
                // Error text can carry secrets too (a connection string in a driver's message).
                let text = self.masker.mask_text(error.message(), entry.mask).into_owned();
                tracing::info!(
                    target: "agent_airlock",
                    outcome = "failed",
                    not_executed,
                    effect = effect.is_some(),
                    "tool returned an error"
                );
                let how = if not_executed { Settle::Fail } else { Settle::Ambiguous };
                trail.settle = effect.and_then(|guard| guard.take(how));
                trail.outcome = Some(AuditOutcome::Failed { not_executed });
                if audited {
                    trail.result = Some(Value::String(text.clone()));
                }
                Outcome::Message(message(id, name, Status::Error, text, stripped))
            }
        }
    }

    fn mask(&self, value: &mut Value, set: MaskSet) {
        if set.is_empty() {
            return;
        }
        let report = self.masker.mask_value(value, set);
        if !report.is_empty() {
            tracing::info!(target: "agent_airlock", masked = %report.total(), kinds = %report.kinds(), "result masked");
        }
    }
}

fn message(id: &str, name: &str, status: Status, content: String, stripped: Vec<String>) -> ToolMessage {
    ToolMessage {
        tool_call_id: id.to_owned(),
        name: name.to_owned(),
        content,
        status,
        hints: Vec::new(),
        stripped_arguments: stripped,
        refusal: None,
        structured_content: None,
    }
}

/// A string result is shown as is; anything else as JSON.
fn content_text(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}
