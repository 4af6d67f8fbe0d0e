//! The dispatcher: the guarded counterpart of LangGraph's `ToolNode`. It holds the tools, the policy and
//! the approver, and runs each model tool call through the gates in order.
//!
//! The gate sequence is one function, [`Dispatcher::run_gates`], readable top to bottom. Beside it: the
//! call it carries (`call`, where observe mode records what it would refuse), what each gate asks of a
//! tool's rules (`gates`), building (`build`), escalation (`escalation`), admission (`admission`), the
//! tool's output (`output`), what each refusal says (`refusal`), the audit trail (`trail`) and the durable
//! writes (`writes`). A reserved effect is held by an `EffectGuard` while the tool runs.
//!
//! The order matters for what a human's approval is worth: every gate that can refuse runs before the
//! grant is spent, and the grant is spent in the same atomic write that reserves the call's effect, so a
//! refusal by the rate limit or the effect record leaves the approval live.
//!
//! **Two durable writes at most.** Admission (the spend, the reservation and the "approved" record) is
//! one write; settlement (the effect's outcome and the call's record) another. Both are awaited: on redb
//! they are queued to the database's writer thread and share commits with concurrent dispatches.

mod admission;
mod argument_refusal;
mod build;
mod call;
mod dispatcher;
mod durable_write;
mod effect_guard;
mod escalation;
mod gates;
mod output;
mod refusal;
mod trail;
mod writes;

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;
use serde_json::Value;
use tracing::Instrument as _;

pub use self::build::{BuildError, DispatcherBuilder};
use self::call::Call;
pub use self::dispatcher::Dispatcher;
use self::effect_guard::EffectGuard;
use self::escalation::{Cleared, Reviewer};
use self::gates::Admitted;
use self::refusal::Refused;
use self::trail::{Trail, audit_outcome_of};
use crate::approval::Approver;
use crate::audit::AuditOutcome;
use crate::clock::Clock;
use crate::context::CallContext;
use crate::dialect::{Dialect, DialectError, DialectOffer};
use crate::effect::Settle;
use crate::message::{IncomingArguments, IncomingCall, Outcome, Refusal, Status, ToolMessage};
use crate::schema::ToolDefinition;
use crate::tool::Arguments;

/// A refusal and the argument keys stripped before it.
type Refusing = (Refused, Vec<String>);

impl Dispatcher {
    /// The masker results go through, for what a gateway serves besides tools.
    #[cfg(feature = "mcp-gateway")]
    pub(crate) fn masker(&self) -> &std::sync::Arc<crate::mask::Masker> {
        &self.masker
    }

    /// The audit log, if the dispatcher keeps one.
    #[cfg(feature = "mcp-gateway")]
    pub(crate) fn audit_log(&self) -> Option<&std::sync::Arc<crate::audit::AuditLog>> {
        self.audit.as_ref()
    }

    /// The clock its rate limits read.
    #[cfg(feature = "mcp-gateway")]
    pub(crate) fn clock(&self) -> &std::sync::Arc<dyn Clock> {
        &self.clock
    }

    /// The tools the model may be offered: denied tools are left out, escalated ones kept (a human can
    /// approve them). In registration order.
    pub fn offered_tools(&self) -> Vec<ToolDefinition> {
        self.order
            .iter()
            .filter_map(|name| self.tools.get(name.as_str()))
            .filter(|entry| entry.enforced.denied_by.is_none())
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
    /// tool and in observe mode (where the policy's conditions are observed, not enforced).
    pub fn denies_caller(&self, tool: &str, context: &CallContext) -> bool {
        let Some(entry) = self.tools.get(tool) else { return false };
        entry.enforced.caller_denial(tool, context.identity()).is_err()
    }

    /// Whether a call of `tool` by this caller is refused before any gate reads its arguments: the tool is
    /// unknown, a deny glob names it, or one of its deny rules on who calls applies to this caller (failing
    /// closed without an identity). Such a call's arguments are dropped unread, so a host holding them in a
    /// form of its own (a Python dict) need not convert them: dispatching the call with any arguments (an
    /// empty [`ToolCallText`](crate::ToolCallText)) gives the same refusal and audit record. A call this answers
    /// `false` for may still be refused by a later gate.
    pub fn refuses_before_arguments(&self, tool: &str, context: &CallContext) -> bool {
        let Some(entry) = self.tools.get(tool) else { return true };
        entry.enforced.before_arguments(tool, context.identity()).is_err()
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
    ///
    /// The future returned is the dispatch's own, not one wrapped around it: a future is moved whole into
    /// each one that awaits it, and this one is about 1.9 KB.
    ///
    /// `call` is a [`ToolCall`](crate::ToolCall), or a [`ToolCallText`](crate::ToolCallText) whose JSON text is
    /// parsed only once a gate reads the arguments (an unknown or denied tool never reads them).
    pub fn dispatch(&self, call: impl Into<IncomingCall>, context: &CallContext) -> impl Future<Output = Outcome> {
        self.dispatch_escalating_to(call.into(), context, Reviewer::Configured)
    }

    /// Like [`dispatch`](Self::dispatch), but an escalated call is reviewed by `approver` instead of what the
    /// dispatcher was built with; `None` means no human can be asked for this call, so it is refused.
    ///
    /// For hosts whose human is reachable only through the request being served: an MCP server asks its
    /// client through elicitation on the current request's connection, so its approver exists per request.
    pub async fn dispatch_with_approver(
        &self,
        call: impl Into<IncomingCall>,
        context: &CallContext,
        approver: Option<&dyn Approver>,
    ) -> Outcome {
        let reviewer = match approver {
            Some(approver) => Reviewer::Given(approver),
            None => Reviewer::Nobody,
        };
        self.dispatch_escalating_to(call.into(), context, reviewer).await
    }

    async fn dispatch_escalating_to(
        &self,
        call: IncomingCall,
        context: &CallContext,
        reviewer: Reviewer<'_>,
    ) -> Outcome {
        let IncomingCall { id, name, arguments } = call;
        let span = tracing::info_span!(target: "agent_airlock", "tool_call", tool = %name, tool_call_id = %id);
        let mut call = Call { name: &name, id: &id, context, trail: Trail::default(), audit: self.audit.as_deref() };
        // `instrument`, not `enter`: a guard held across `.await` would mislabel other tasks' events.
        let mut outcome = match self.run_gates(&mut call, arguments, reviewer).instrument(span.clone()).await {
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
                call.trail.outcome = Some(audit_outcome_of(refused.kind));
                call.trail.rule.clone_from(&refused.rule);
                Outcome::Message(ToolMessage {
                    // Addressed below, once the records no longer read them.
                    tool_call_id: String::new(),
                    name: String::new(),
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
        let mut entries = std::mem::take(&mut call.trail.pending);
        if let Some(record) = call.trail.outcome.and_then(|audited| call.record(audited)) {
            entries.push(record);
        }
        let settle = call.trail.settle.take();
        // Awaited (and its future built, boxed) only when there is something to write.
        if settle.is_some() || (self.audit.is_some() && !entries.is_empty()) {
            Box::pin(self.settle_and_record(settle, entries)).await;
        }
        let issued = call.trail.issued.take();
        address(&mut outcome, id, name);
        // Only now does the host hold the interrupt: dropped before this, the request is closed.
        if let Some(issued) = issued {
            issued.handed_over();
        }
        outcome
    }

    /// The gates, in order. Every `return Err` is a refusal; nothing runs until gate 8. Each policy gate
    /// asks the tool's enforced rules and its observed ones (observe mode) the same question; what the
    /// observed ones would refuse is recorded by [`Call::observe`], never enforced.
    async fn run_gates(
        &self,
        call: &mut Call<'_>,
        arguments: IncomingArguments,
        reviewer: Reviewer<'_>,
    ) -> Result<Outcome, Refusing> {
        let name = call.name;
        // 1. Unknown tool. The text does not list what is registered.
        let Some(entry) = self.tools.get(name) else {
            arguments.discard();
            return Err((refusal::unknown_tool(name), Vec::new()));
        };
        let (enforced, observed) = (&entry.enforced, &entry.observed);

        // 2. Policy on the registered name, and its deny rules on who calls (they need no arguments, so a
        //    caller the tool is hidden from learns nothing of them). Deny beats everything, approvals included.
        call.observe(observed.denial(name));
        if let Err(refused) = enforced.before_arguments(name, call.context.identity()) {
            arguments.discard();
            return Err((refused, Vec::new()));
        }

        // 3 and 4, straight from JSON text where they can be: the tool deserializes each parameter from its text
        //    when the screen would admit the arguments unchanged (see `Entry::prepare_text`). Any other call
        //    takes the map's way: parsed here (the first gate that reads the arguments, so a call refused above
        //    never is), its ghosts stripped or refused, then validated and its values extracted.
        let Admitted { prepared, effect_key, kept, stripped } = match entry.prepare_text(call, &arguments) {
            Some((prepared, effect_key)) => {
                arguments.discard();
                Admitted { prepared, effect_key, kept: None, stripped: Vec::new() }
            }
            None => entry.screen_and_prepare(call, arguments.into_value())?,
        };
        let with_stripped = |refused: Refused| (refused, stripped.clone());
        let arguments = kept.as_ref().unwrap_or(&NO_ARGUMENTS);
        if let Some(key) = observed.effect_key(arguments) {
            call.observe(self.effect_refusal(name, &key));
        }

        // 4b. The policy's argument conditions, on the screened arguments. A deny rule refuses at once
        //     (deny beats everything); an escalation rule joins the tool's escalations.
        for met in observed.conditions(name, arguments, call.context.identity()) {
            call.observe(met.and_then(|met| Err(refusal::would_escalate(name, &met.rule, &met.reason))));
        }
        let met = enforced.conditions_met(name, arguments, call.context.identity()).map_err(with_stripped)?;

        // 5. Escalation. What no human can change (an empty bucket, a duplicate effect) is refused before
        //    a human is asked; an approval across an interrupt is verified here and spent at gate 7.
        //    A call nothing escalates awaits nothing here: the gate's future is built (and boxed, so the
        //    dispatch's own future stays small) only for one that does.
        call.observe(observed.would_escalate(name));
        //    (`cleared` in a block of its own: it is not kept in the dispatch's future at the later awaits.)
        let resumed = {
            let cleared = match !met.is_empty() || !enforced.escalations.is_empty() {
                false => Cleared::Go,
                true => Box::pin(self.escalation(call, entry, met, arguments, effect_key.as_deref(), reviewer))
                    .await
                    .map_err(with_stripped)?,
            };
            match cleared {
                Cleared::Go => None,
                Cleared::Resumed(admission) => Some(admission),
                Cleared::Interrupt(request) => return Ok(Outcome::Interrupt { tool_call_id: String::new(), request }),
            }
        };

        // 6. Rate limits: one token from every applicable bucket, or none. The buckets in memory first, then
        //    the shared ones (a round trip to the store, awaited), so a call refused here costs the store
        //    nothing; a shared bucket that cannot be reached refuses the call. Per-thread buckets count by the
        //    caller when the host names one, so a new thread is no fresh budget. Without shared buckets
        //    (the usual case) the gate is synchronous.
        let (thread, now) = (call.context.rate_subject(), self.clock.now());
        if let Some(shared) = self.take_local_tokens(enforced, name, thread, now).map_err(with_stripped)? {
            Box::pin(self.take_shared_tokens(shared, enforced, name, thread, now)).await.map_err(with_stripped)?;
        }
        let observed_verdict = match self.take_local_tokens(observed, name, thread, now) {
            Ok(Some(shared)) => Box::pin(self.take_shared_tokens(shared, observed, name, thread, now)).await,
            verdict => verdict.map(|_| ()),
        };
        let observed_taken = call.observe(observed_verdict);

        // 7. Admission, one atomic write: spend the grant (if resumed) and reserve the effect key. A
        //    refusal here gives the rate tokens back (shared ones too) and leaves the grant live. A call
        //    with nothing to write (no effect store or key, no approval to spend) skips it synchronously.
        let mut effect = match self.admission_writes(effect_key.as_ref(), resumed.as_ref()) {
            false => None,
            true => {
                Box::pin(self.admit(call, entry, effect_key, resumed, observed_taken)).await.map_err(with_stripped)?
            }
        };

        // 8. Execute. A panicking tool becomes an error message, not a crashed host.
        let Ok(output) = AssertUnwindSafe(prepared).catch_unwind().await else {
            return Ok(panicked(call, effect.as_mut(), stripped));
        };

        // 9. Mask what the model (and the audit log) sees; settle the effect from the outcome.
        Ok(self.settle(call, output, entry, stripped, effect.as_mut()))
    }
}

/// What the gates after gate 4 read when the tool was given the arguments (nothing reads them then): built
/// once, not per call.
static NO_ARGUMENTS: std::sync::LazyLock<Arguments> = std::sync::LazyLock::new(Arguments::new);

/// Gate 8's answer for a tool that panicked: an error message, its effect settled as ambiguous.
#[cold]
#[inline(never)]
fn panicked(call: &mut Call<'_>, effect: Option<&mut EffectGuard>, stripped: Vec<String>) -> Outcome {
    tracing::error!(target: "agent_airlock", outcome = "panicked", effect = effect.is_some(), "tool panicked");
    call.trail.settle = effect.and_then(|guard| guard.take(Settle::Ambiguous));
    call.trail.outcome = Some(AuditOutcome::Panicked);
    Outcome::Message(call.message(Status::Error, format!("tool `{}` failed", call.name), stripped))
}

/// Puts the call's id and tool name into the outcome the gates built without them (see [`Call::message`]):
/// moved there once the call's records no longer read them, rather than copied on every call.
fn address(outcome: &mut Outcome, id: String, name: String) {
    match outcome {
        Outcome::Message(message) => {
            message.tool_call_id = id;
            message.name = name;
        }
        Outcome::Command { tool_call_id, .. } | Outcome::Interrupt { tool_call_id, .. } => *tool_call_id = id,
    }
}
