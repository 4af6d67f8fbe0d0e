//! The dispatcher: the guarded counterpart of LangGraph's `ToolNode`. It holds the tools, the policy and
//! the approver, and runs each model tool call through the gates in order.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::Value;
use tracing::Instrument as _;

use crate::approval::{ApprovalRequest, Approver, Decision, EscalationReason};
use crate::args::{self, AdmissionError, MAX_ARGUMENT_DEPTH};
use crate::audit::{AuditEvent, AuditLog, AuditOutcome};
use crate::clock::{Clock, SystemClock};
use crate::context::{CallContext, Invocation};
use crate::dialect::{Dialect, DialectError};
use crate::effect::{EffectError, EffectStore, Reservation};
use crate::interrupt::{AdmitError, BindingInput, InterruptApprovals, RequestError};
use crate::ledger::LedgerError;
use crate::mask::{MaskSet, Masker};
use crate::message::{Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};
use crate::policy::Policy;
use crate::rate::{BucketId, Rate, RateLimiter, RateScope};
use crate::schema::ToolDefinition;
use crate::tool::{Arguments, DEFAULT_TOOL_MASK, Tool, ToolOutput};

/// Runs model tool calls through policy, argument, escalation and rate-limit gates before the tool.
pub struct Dispatcher {
    tools: HashMap<&'static str, Entry>,
    order: Vec<&'static str>,
    limiter: RateLimiter,
    escalation: Escalation,
    clock: Arc<dyn Clock>,
    effects: Option<Arc<dyn EffectStore>>,
    effect_lease: Duration,
    audit: Option<Arc<AuditLog>>,
    masker: Arc<Masker>,
}

/// One registered tool with everything the policy decided about it, computed once at build time.
struct Entry {
    tool: Arc<dyn Tool>,
    definition: ToolDefinition,
    denied_by: Option<String>,
    escalations: Vec<EscalationReason>,
    /// Bucket ids in ascending order and, at the same positions, the rule each enforces (`attribute` or
    /// the policy glob) with its rate.
    buckets: Vec<BucketId>,
    bucket_rules: Vec<(String, Rate)>,
    /// The author's masking plus the policy's.
    mask: MaskSet,
}

/// A dispatcher that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two tools share a registered name.
    #[error("two tools are registered as `{0}`")]
    DuplicateTool(String),
    /// A tool declares `effect = "..."` and the dispatcher has no effect store.
    #[error("tool `{0}` declares an effect but the dispatcher has no effect store; call `.effects(...)`")]
    NoEffectStore(String),
    /// A hand-written tool's `mask` does not parse (generated tools are checked at compile time).
    #[error("tool `{tool}` has an invalid mask: {message}")]
    InvalidMask {
        /// The tool.
        tool: String,
        /// What is wrong.
        message: String,
    },
}

/// Builds a [`Dispatcher`].
pub struct DispatcherBuilder {
    tools: Vec<Arc<dyn Tool>>,
    policy: Policy,
    escalation: Escalation,
    clock: Arc<dyn Clock>,
    effects: Option<Arc<dyn EffectStore>>,
    effect_lease: Duration,
    audit: Option<Arc<AuditLog>>,
    masker: Option<Arc<Masker>>,
}

/// How long a reserved effect may run before a crash is presumed and the key becomes ambiguous.
pub const DEFAULT_EFFECT_LEASE: Duration = Duration::from_secs(600);

impl Dispatcher {
    /// Starts a dispatcher with no tools, an allow-all policy, no approver and the system clock.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder {
            tools: Vec::new(),
            policy: Policy::new(),
            escalation: Escalation::Refuse,
            clock: Arc::new(SystemClock),
            effects: None,
            effect_lease: DEFAULT_EFFECT_LEASE,
            audit: None,
            masker: None,
        }
    }
}

impl DispatcherBuilder {
    /// Registers a tool, e.g. `tool!(delete_file)`.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Registers a shared tool.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// The deployment policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Who decides escalated calls, during the call. Without an approver or interrupt approvals, escalated
    /// calls are refused. Replaces interrupt approvals.
    pub fn approver(mut self, approver: impl Approver) -> Self {
        self.escalation = Escalation::Approver(Arc::new(approver));
        self
    }

    /// Escalated calls pause with an interrupt ([`Outcome::Interrupt`]) and run when the host resumes them
    /// with a matching approval ([`CallContext::with_resume`]), exactly once. Replaces an approver.
    pub fn interrupt_approvals(mut self, approvals: InterruptApprovals) -> Self {
        self.escalation = Escalation::Interrupt(Box::new(approvals));
        self
    }

    /// The clock for rate limits (tests use a [`ManualClock`](crate::ManualClock)).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Where effect records live (required when a tool declares `effect = "..."`). Share the redb file of
    /// the approval ledger and the audit log, e.g. `RedbEffectStore::new(database)`.
    pub fn effects(mut self, store: impl EffectStore) -> Self {
        self.effects = Some(Arc::new(store));
        self
    }

    /// How long a reserved effect may run before a crash is presumed (default [`DEFAULT_EFFECT_LEASE`]).
    pub fn effect_lease(mut self, lease: Duration) -> Self {
        self.effect_lease = lease;
        self
    }

    /// Appends every dispatch outcome to a tamper-evident audit log. An append is a durable commit on the
    /// dispatching thread.
    pub fn audit(mut self, log: Arc<AuditLog>) -> Self {
        self.audit = Some(log);
        self
    }

    /// How results are masked (strategies per kind). Default: [`Masker::default`], type tags such as `[EMAIL]`.
    pub fn masker(mut self, masker: Masker) -> Self {
        self.masker = Some(Arc::new(masker));
        self
    }

    /// The dispatcher, with each tool's policy decision and schema computed once.
    pub fn build(self) -> Result<Dispatcher, BuildError> {
        let mut limiter = RateLimiter::default();
        let mut tools = HashMap::with_capacity(self.tools.len());
        let mut order = Vec::with_capacity(self.tools.len());
        for tool in self.tools {
            let spec = tool.spec();
            if tools.contains_key(spec.name) {
                return Err(BuildError::DuplicateTool(spec.name.to_owned()));
            }
            if spec.effect.is_some() && self.effects.is_none() {
                return Err(BuildError::NoEffectStore(spec.name.to_owned()));
            }
            let decision = self.policy.for_tool(spec.name);
            let authored = match spec.mask {
                Some(text) => text
                    .parse::<MaskSet>()
                    .map_err(|err| BuildError::InvalidMask { tool: spec.name.to_owned(), message: err.to_string() })?,
                None => DEFAULT_TOOL_MASK,
            };
            let mask = authored | decision.mask;
            let mut escalations = Vec::new();
            if let Some(reason) = spec.escalate {
                escalations.push(EscalationReason { rule: "attribute".into(), reason: reason.into() });
            }
            escalations
                .extend(decision.escalations.into_iter().map(|(rule, reason)| EscalationReason { rule, reason }));
            // Every applicable limit gets its own bucket, so the stricter one always binds.
            let mut limits: Vec<(String, Rate, RateScope)> =
                spec.rate.map(|r| ("attribute".to_owned(), r, RateScope::PerTool)).into_iter().collect();
            limits.extend(decision.rate_limits);
            let buckets = limits.iter().map(|(_, rate, scope)| limiter.add_bucket(*rate, *scope)).collect();
            let bucket_rules = limits.into_iter().map(|(rule, rate, _)| (rule, rate)).collect();
            let definition = ToolDefinition::of(&*tool);
            order.push(spec.name);
            tools.insert(
                spec.name,
                Entry { tool, definition, denied_by: decision.denied_by, escalations, buckets, bucket_rules, mask },
            );
        }
        Ok(Dispatcher {
            tools,
            order,
            limiter,
            escalation: self.escalation,
            clock: self.clock,
            effects: self.effects,
            effect_lease: self.effect_lease,
            audit: self.audit,
            masker: self.masker.unwrap_or_default(),
        })
    }
}

/// What a refusal says, before it becomes a message.
struct Refused {
    kind: RefusalKind,
    rule: Option<String>,
    retry_after: Option<Duration>,
    text: String,
    hints: Vec<String>,
}

impl Refused {
    fn new(kind: RefusalKind, text: String) -> Self {
        Refused { kind, rule: None, retry_after: None, text, hints: Vec::new() }
    }

    fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }
}

impl Dispatcher {
    /// The tools the model may be offered: denied tools are left out, escalated ones kept (a human can
    /// approve them). In registration order.
    pub fn offered_tools(&self) -> Vec<ToolDefinition> {
        self.order
            .iter()
            .filter_map(|name| self.tools.get(name))
            .filter(|entry| entry.denied_by.is_none())
            .map(|entry| entry.definition.clone())
            .collect()
    }

    /// [`offered_tools`](Self::offered_tools) in `dialect`'s request shape (see
    /// [`ToolDefinition::to_dialect`]).
    pub fn offered_tools_in(&self, dialect: Dialect) -> Result<Vec<Value>, DialectError> {
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
                })
            }
        };
        if let Some(outcome) = trail.outcome {
            self.record(&name, &id, context, outcome, &trail);
        }
        outcome
    }

    /// Appends one audit record, if an audit log is configured. A failed append is logged, never hidden.
    fn record(&self, tool: &str, id: &str, context: &CallContext, outcome: AuditOutcome, trail: &Trail) {
        let Some(log) = &self.audit else { return };
        let mut event = AuditEvent::new(tool, id, outcome)
            .thread_id(context.thread_id())
            .rule(trail.rule.as_deref())
            .detail(trail.detail.as_deref());
        if let Some(arguments) = &trail.arguments {
            event = event.arguments(arguments);
        }
        if let Some(result) = &trail.result {
            event = event.result(result);
        }
        if let Err(err) = log.append(event) {
            tracing::error!(target: "agent_airlock", error = %err, "audit append failed");
        }
    }

    async fn run_gates(
        &self,
        id: &str,
        name: &str,
        arguments: Value,
        context: &CallContext,
        reviewer: Reviewer<'_>,
        trail: &mut Trail,
    ) -> Result<Outcome, (Refused, Vec<String>)> {
        let refuse = |refused: Refused| (refused, Vec::new());

        // 1. Unknown tool. The text does not list what is registered.
        let Some(entry) = self.tools.get(name) else {
            return Err(refuse(
                Refused::new(RefusalKind::UnknownTool, format!("there is no tool named `{name}`"))
                    .hint("call only the tools you were offered, with their exact names"),
            ));
        };
        let spec = entry.tool.spec();

        // 2. Policy on the registered name. Deny beats everything, approvals included.
        if let Some(rule) = &entry.denied_by {
            return Err(refuse(
                Refused::new(RefusalKind::Denied, format!("tool `{name}` is not permitted in this deployment"))
                    .rule(rule.clone())
                    .hint("do not retry this tool; find another way or tell the user it is not permitted"),
            ));
        }

        // 3. Ghost arguments.
        let admitted = match args::admit(arguments, spec) {
            Ok(admitted) => admitted,
            Err(err) => return Err(refuse(admission_refusal(name, spec, err))),
        };
        if !admitted.stripped.is_empty() {
            tracing::warn!(target: "agent_airlock", stripped = ?admitted.stripped, "undeclared arguments stripped");
        }
        let stripped = admitted.stripped;
        let with_stripped = |refused: Refused| (refused, stripped.clone());
        if self.audit.is_some() {
            trail.arguments = Some(Value::Object(admitted.arguments.clone()));
        }

        // 4. Validation and injection: the future is built but not polled.
        let invocation = Invocation { context, tool_call_id: id, tool: spec.name };
        let prepared = match entry.tool.prepare(&admitted.arguments, &invocation) {
            Ok(prepared) => prepared,
            Err(errors) => {
                let (text, hints) = args::describe_errors(name, &errors, &entry.definition.input_schema, &stripped);
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

        // 5. Escalation: a human's yes, now (approver) or across an interrupt (resume value).
        if !entry.escalations.is_empty() {
            trail.rule = Some(entry.escalations.iter().map(|e| e.rule.as_str()).collect::<Vec<_>>().join(", "));
            match self.escalate(entry, id, name, &admitted.arguments, context, reviewer).await {
                Ok(Escalated::Admitted { detail }) => {
                    trail.detail = Some(detail);
                    self.record(name, id, context, AuditOutcome::Approved, trail);
                }
                Ok(Escalated::Interrupt(value)) => {
                    tracing::info!(target: "agent_airlock", outcome = "interrupted", "approval requested");
                    trail.outcome = Some(AuditOutcome::Interrupted);
                    trail.detail = value["airlock_approval"]["request_id"].as_str().map(|r| format!("request {r}"));
                    return Ok(Outcome::Interrupt { tool_call_id: id.to_owned(), value });
                }
                Err(refused) => return Err(with_stripped(refused)),
            }
        }

        // 6. Rate limits: one token from every applicable bucket, or none.
        if let Err((wait, position)) = self.limiter.acquire(&entry.buckets, context.thread_id(), self.clock.now()) {
            let (rule, rate) = entry.bucket_rules[position].clone();
            // Whole seconds, rounded up: integer formatting (float `{:.0}` took half of this refusal's time).
            let secs = wait.as_secs().saturating_add(u64::from(wait.subsec_nanos() > 0)).max(1);
            let mut refused = Refused::new(
                RefusalKind::RateLimited,
                format!("tool `{name}` is rate limited ({rate}); retry in {secs} s"),
            )
            .rule(rule)
            .hint(format!("wait at least {secs} seconds before calling `{name}` again"));
            refused.retry_after = Some(wait);
            return Err(with_stripped(refused));
        }

        // 7. Effect reservation: the key is reserved atomically before the tool runs.
        let mut effect = match spec.effect.as_ref().zip(self.effects.as_ref()) {
            Some((template, store)) => {
                let key = template.render(&admitted.arguments);
                match store.reserve(&key, self.effect_lease, self.clock.now()) {
                    Ok(reservation) => Some(EffectGuard {
                        store: Arc::clone(store),
                        reservation,
                        clock: Arc::clone(&self.clock),
                        settled: false,
                    }),
                    Err(err) => return Err(with_stripped(self.effect_refusal(name, err))),
                }
            }
            None => None,
        };

        // 8. Execute. A panicking tool becomes an error message, not a crashed host.
        let output = match AssertUnwindSafe(prepared).catch_unwind().await {
            Ok(output) => output,
            Err(_) => {
                tracing::error!(target: "agent_airlock", outcome = "panicked", "tool panicked");
                if let Some(guard) = &mut effect {
                    guard.settle(Settle::Ambiguous);
                }
                trail.outcome = Some(AuditOutcome::Panicked);
                return Ok(Outcome::Message(message(
                    id,
                    name,
                    Status::Error,
                    format!("tool `{name}` failed"),
                    stripped,
                )));
            }
        };
        let audited = self.audit.is_some();
        Ok(match output {
            ToolOutput::Content(mut value) => {
                tracing::info!(target: "agent_airlock", outcome = "executed", "tool call executed");
                // 9. Mask, leaf by leaf, before the model (or the audit log) sees it.
                self.mask(&mut value, entry.mask);
                if let Some(guard) = &mut effect {
                    guard.settle(Settle::Commit);
                }
                trail.outcome = Some(AuditOutcome::Executed);
                if audited {
                    trail.result = Some(value.clone());
                }
                Outcome::Message(message(id, name, Status::Success, content_text(value), stripped))
            }
            ToolOutput::Command(command) => {
                tracing::info!(target: "agent_airlock", outcome = "command", "tool returned a host command");
                if let Some(guard) = &mut effect {
                    guard.settle(Settle::Commit);
                }
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
                tracing::info!(target: "agent_airlock", outcome = "failed", not_executed, "tool returned an error");
                if let Some(guard) = &mut effect {
                    guard.settle(if not_executed { Settle::Fail } else { Settle::Ambiguous });
                }
                trail.outcome = Some(AuditOutcome::Failed { not_executed });
                if audited {
                    trail.result = Some(Value::String(text.clone()));
                }
                Outcome::Message(message(id, name, Status::Error, text, stripped))
            }
        })
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

    fn effect_refusal(&self, name: &str, err: EffectError) -> Refused {
        let now = self.clock.now();
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
            EffectError::InFlight { lease_until, .. } => {
                let wait = lease_until.saturating_sub(now);
                let mut refused = Refused::new(
                    RefusalKind::EffectInFlight,
                    format!("the same `{name}` call is running right now; it is not started twice"),
                )
                .rule("effect")
                .hint("wait for the running call's result instead of calling again");
                refused.retry_after = Some(wait);
                refused
            }
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
}

/// The facts of one dispatch for its audit record.
#[derive(Default)]
struct Trail {
    outcome: Option<AuditOutcome>,
    rule: Option<String>,
    detail: Option<String>,
    arguments: Option<Value>,
    result: Option<Value>,
}

fn audit_outcome_of(kind: RefusalKind) -> AuditOutcome {
    match kind {
        RefusalKind::Duplicate => AuditOutcome::Duplicate,
        RefusalKind::EffectUnresolved => AuditOutcome::Ambiguous,
        RefusalKind::EffectInFlight => AuditOutcome::InFlight,
        refusal => AuditOutcome::Refused { refusal },
    }
}

/// How a reserved effect ends.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Commit,
    Fail,
    Ambiguous,
}

/// A reserved effect: settled from the tool's outcome, or marked ambiguous if the call is cancelled (the
/// dispatch future dropped while the tool ran).
struct EffectGuard {
    store: Arc<dyn EffectStore>,
    reservation: Reservation,
    clock: Arc<dyn Clock>,
    settled: bool,
}

impl EffectGuard {
    fn settle(&mut self, how: Settle) {
        self.settled = true;
        let now = self.clock.now();
        let result = match how {
            Settle::Commit => self.store.commit(&self.reservation, now),
            Settle::Fail => self.store.fail(&self.reservation, now),
            Settle::Ambiguous => self.store.mark_ambiguous(&self.reservation, now),
        };
        if let Err(err) = result {
            // The lease will lapse and the key become ambiguous: never silently re-runnable.
            tracing::error!(target: "agent_airlock", error = %err, settle = ?how, "effect record not settled");
        }
    }
}

impl Drop for EffectGuard {
    fn drop(&mut self) {
        if !self.settled {
            tracing::warn!(target: "agent_airlock", key = %self.reservation.key(), "call cancelled while its effect ran");
            self.settle(Settle::Ambiguous);
        }
    }
}

impl Dispatcher {
    async fn escalate(
        &self,
        entry: &Entry,
        id: &str,
        name: &str,
        arguments: &Arguments,
        context: &CallContext,
        reviewer: Reviewer<'_>,
    ) -> Result<Escalated, Refused> {
        let rules = entry.escalations.iter().map(|e| e.rule.as_str()).collect::<Vec<_>>().join(", ");
        let denied = |reason: Option<&str>| human_denied(name, &rules, reason);
        let escalation = match reviewer {
            Reviewer::Configured => &self.escalation,
            Reviewer::Given(approver) => return self.ask(approver, entry, id, name, arguments, context, &rules).await,
            Reviewer::Nobody => &Escalation::Refuse,
        };
        match escalation {
            Escalation::Refuse => Err(Refused::new(
                RefusalKind::ApprovalUnavailable,
                format!("tool `{name}` needs a human's approval and none can be asked here"),
            )
            .rule(rules.clone())
            .hint("do not retry; tell the user this action needs their approval")),
            Escalation::Approver(approver) => self.ask(&**approver, entry, id, name, arguments, context, &rules).await,
            Escalation::Interrupt(approvals) => {
                // The binding is derived from the call now being made, never from the resume value.
                let call = BindingInput {
                    thread_id: context.thread_id().unwrap_or(""),
                    checkpoint_ns: context.checkpoint_ns(),
                    checkpoint: context.checkpoint_map(),
                    tool_call_id: id,
                    tool: name,
                    arguments,
                };
                let Some(resume) = context.resume() else {
                    let reasons = entry.escalations.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>().join("; ");
                    return match approvals.request(&call, &rules, &reasons).await {
                        Ok(request) => Ok(Escalated::Interrupt(request.into_value())),
                        Err(RequestError::Ledger(LedgerError::TooManyPending {
                            pending, oldest_expires_at, ..
                        })) => Err(too_many_pending(name, &rules, pending, oldest_expires_at, self.clock.now())),
                        Err(err) => {
                            tracing::error!(target: "agent_airlock", error = %err, "approval request failed");
                            Err(Refused::new(
                                RefusalKind::ApprovalUnavailable,
                                format!("tool `{name}` needs a human's approval and the request could not be recorded"),
                            )
                            .rule(rules.clone())
                            .hint("do not retry now; tell the user this action needs their approval"))
                        }
                    };
                };
                match approvals.admit(&call, resume).await {
                    Ok(admission) => {
                        tracing::info!(
                            target: "agent_airlock",
                            rules = %rules,
                            grant_id = %admission.grant_id,
                            approver = %admission.approver,
                            "approval spent"
                        );
                        Ok(Escalated::Admitted {
                            detail: format!("grant {} by {}", admission.grant_id, admission.approver),
                        })
                    }
                    Err(AdmitError::Denied { reason, .. }) => Err(denied(reason.as_deref())),
                    // Not a recorded yes or no (`false`, a forged denial): a no, in nobody's words.
                    Err(AdmitError::NotAnApproval | AdmitError::UnverifiedDenial) => Err(Refused::new(
                        RefusalKind::ApprovalInvalid,
                        format!("this call to `{name}` was not approved"),
                    )
                    .rule(rules.clone())
                    .hint("do not retry the same call; ask the user to approve it")),
                    Err(err) => {
                        tracing::warn!(target: "agent_airlock", error = %err, "approval not admitted");
                        Err(Refused::new(
                            RefusalKind::ApprovalInvalid,
                            format!("this call to `{name}` was not admitted: {err}"),
                        )
                        .rule(rules.clone())
                        .hint("do not retry with the same approval; ask the user to approve this exact call again"))
                    }
                }
            }
        }
    }
}

impl Dispatcher {
    /// Asks an approver callback about one call.
    #[allow(clippy::too_many_arguments)]
    async fn ask(
        &self,
        approver: &dyn Approver,
        entry: &Entry,
        id: &str,
        name: &str,
        arguments: &Arguments,
        context: &CallContext,
        rules: &str,
    ) -> Result<Escalated, Refused> {
        let request = ApprovalRequest {
            tool: name.to_owned(),
            tool_call_id: id.to_owned(),
            thread_id: context.thread_id().map(str::to_owned),
            reasons: entry.escalations.clone(),
            arguments: Value::Object(arguments.clone()),
        };
        match approver.review(request).await {
            Decision::Approve => {
                tracing::info!(target: "agent_airlock", rules = %rules, "human approved");
                Ok(Escalated::Admitted { detail: "approver callback".to_owned() })
            }
            Decision::Deny { reason } => Err(human_denied(name, rules, reason.as_deref())),
            Decision::Unavailable { reason } => {
                tracing::warn!(target: "agent_airlock", rules = %rules, %reason, "approval could not be obtained");
                Err(Refused::new(
                    RefusalKind::ApprovalUnavailable,
                    format!("tool `{name}` needs a human's approval and it could not be obtained: {reason}"),
                )
                .rule(rules)
                .hint("do not retry at once; tell the user this action needs their approval"))
            }
        }
    }
}

fn too_many_pending(
    name: &str,
    rules: &str,
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
        format!("tool `{name}` already has {pending} approval requests waiting in this thread; {when}"),
    )
    .rule(rules)
    .hint(format!("do not call `{name}` again until the user has answered the approvals already asked"));
    refused.retry_after = wait;
    refused
}

fn human_denied(name: &str, rules: &str, reason: Option<&str>) -> Refused {
    let text = match reason {
        Some(reason) => format!("a human declined this call to `{name}`: {reason}"),
        None => format!("a human declined this call to `{name}`"),
    };
    Refused::new(RefusalKind::HumanDenied, text)
        .rule(rules)
        .hint("do not retry the same call; ask the user how to proceed")
}

/// Who reviews an escalated call in this dispatch.
#[derive(Clone, Copy)]
enum Reviewer<'a> {
    /// What the dispatcher was built with.
    Configured,
    /// A per-call approver (e.g. the MCP client's human, through elicitation).
    Given(&'a dyn Approver),
    /// No one can be asked: escalated calls are refused.
    Nobody,
}

/// What the escalation gate decided when it did not refuse.
enum Escalated {
    /// A human approved: go on to the rate limit.
    Admitted {
        /// How (for the audit record), without argument values.
        detail: String,
    },
    /// Pause: the host stores this value and resumes later.
    Interrupt(Value),
}

/// Who answers escalated calls.
enum Escalation {
    /// No one: escalated calls are refused.
    Refuse,
    /// An async callback, answered during the call.
    Approver(Arc<dyn Approver>),
    /// A human answers between an interrupt and a resume.
    Interrupt(Box<InterruptApprovals>),
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
    }
}

/// A string result is shown as is; anything else as JSON.
fn content_text(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

fn admission_refusal(name: &str, spec: &crate::ToolSpec, err: AdmissionError) -> Refused {
    let declared = || spec.params.iter().map(|p| format!("`{}`", p.name)).collect::<Vec<_>>().join(", ");
    match err {
        AdmissionError::NotAnObject(what) => Refused::new(
            RefusalKind::MalformedArguments,
            format!("the arguments for `{name}` must be a JSON object, got {what}"),
        )
        .hint("send the arguments as one JSON object keyed by parameter name"),
        AdmissionError::TooDeep => Refused::new(
            RefusalKind::MalformedArguments,
            format!("the arguments for `{name}` nest deeper than {MAX_ARGUMENT_DEPTH} levels"),
        )
        .hint("send flatter arguments"),
        AdmissionError::Ghosts(ghosts) => {
            let ghosts = ghosts.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ");
            Refused::new(
                RefusalKind::MalformedArguments,
                format!("`{name}` does not take {ghosts}; its parameters are: {}", declared()),
            )
            .rule("ghost = block")
            .hint(format!("remove {ghosts} and call again"))
        }
    }
}
