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
use crate::clock::{Clock, SystemClock};
use crate::context::{CallContext, Invocation};
use crate::message::{Outcome, Refusal, RefusalKind, Status, ToolCall, ToolMessage};
use crate::policy::Policy;
use crate::rate::{BucketId, Rate, RateLimiter};
use crate::schema::ToolDefinition;
use crate::tool::{Tool, ToolOutput};

/// Runs model tool calls through policy, argument, escalation and rate-limit gates before the tool.
pub struct Dispatcher {
    tools: HashMap<&'static str, Entry>,
    order: Vec<&'static str>,
    limiter: RateLimiter,
    approver: Option<Arc<dyn Approver>>,
    clock: Arc<dyn Clock>,
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
}

/// A dispatcher that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two tools share a registered name.
    #[error("two tools are registered as `{0}`")]
    DuplicateTool(String),
}

/// Builds a [`Dispatcher`].
pub struct DispatcherBuilder {
    tools: Vec<Arc<dyn Tool>>,
    policy: Policy,
    approver: Option<Arc<dyn Approver>>,
    clock: Arc<dyn Clock>,
}

impl Dispatcher {
    /// Starts a dispatcher with no tools, an allow-all policy, no approver and the system clock.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder {
            tools: Vec::new(),
            policy: Policy::new(),
            approver: None,
            clock: Arc::new(SystemClock),
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

    /// Who decides escalated calls. Without one, escalated calls are refused.
    pub fn approver(mut self, approver: impl Approver) -> Self {
        self.approver = Some(Arc::new(approver));
        self
    }

    /// The clock for rate limits (tests use a [`ManualClock`](crate::ManualClock)).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
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
            let decision = self.policy.for_tool(spec.name);
            let mut escalations = Vec::new();
            if let Some(reason) = spec.escalate {
                escalations.push(EscalationReason {
                    rule: "attribute".into(),
                    reason: reason.into(),
                });
            }
            escalations.extend(
                decision
                    .escalations
                    .into_iter()
                    .map(|(rule, reason)| EscalationReason { rule, reason }),
            );
            // Every applicable limit gets its own bucket, so the stricter one always binds.
            let mut bucket_rules: Vec<(String, Rate)> = spec
                .rate
                .map(|r| ("attribute".to_owned(), r))
                .into_iter()
                .collect();
            bucket_rules.extend(decision.rate_limits);
            let buckets = bucket_rules
                .iter()
                .map(|(_, rate)| limiter.add_bucket(*rate))
                .collect();
            let definition = ToolDefinition::of(&*tool);
            order.push(spec.name);
            tools.insert(
                spec.name,
                Entry {
                    tool,
                    definition,
                    denied_by: decision.denied_by,
                    escalations,
                    buckets,
                    bucket_rules,
                },
            );
        }
        Ok(Dispatcher {
            tools,
            order,
            limiter,
            approver: self.approver,
            clock: self.clock,
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
        Refused {
            kind,
            rule: None,
            retry_after: None,
            text,
            hints: Vec::new(),
        }
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

    /// Runs one tool call through every gate. Never panics on model input; a tool that panics yields an
    /// error message.
    pub async fn dispatch(&self, call: ToolCall, context: &CallContext) -> Outcome {
        self.dispatch_with_approver(call, context, self.approver.as_deref())
            .await
    }

    /// Like [`dispatch`](Self::dispatch), but an escalated call is reviewed by `approver` instead of the
    /// dispatcher's own; `None` means no human can be asked for this call, so an escalated call is refused.
    ///
    /// For hosts whose human is reachable only through the request being served: an MCP server asks its
    /// client through elicitation on the current request's connection, so its approver exists per request.
    pub async fn dispatch_with_approver(
        &self,
        call: ToolCall,
        context: &CallContext,
        approver: Option<&dyn Approver>,
    ) -> Outcome {
        let ToolCall {
            id,
            name,
            arguments,
        } = call;
        let span = tracing::info_span!(target: "agent_airlock", "tool_call", tool = %name, tool_call_id = %id);
        // `instrument`, not `enter`: an entered span held across `.await` would make this future `!Send`
        // (hosts such as MCP servers and rig agents run it on multi-threaded runtimes) and leak the span
        // into whatever else the thread polls meanwhile.
        match self
            .run_gates(&id, &name, arguments, context, approver)
            .instrument(span.clone())
            .await
        {
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
                Outcome::Message(ToolMessage {
                    tool_call_id: id,
                    name,
                    content: refused.text,
                    status: Status::Error,
                    hints: refused.hints,
                    stripped_arguments: stripped,
                    refusal: Some(Refusal {
                        kind: refused.kind,
                        rule: refused.rule,
                        retry_after: refused.retry_after,
                    }),
                })
            }
        }
    }

    async fn run_gates(
        &self,
        id: &str,
        name: &str,
        arguments: Value,
        context: &CallContext,
        approver: Option<&dyn Approver>,
    ) -> Result<Outcome, (Refused, Vec<String>)> {
        let refuse = |refused: Refused| (refused, Vec::new());

        // 1. Unknown tool. The text does not list what is registered.
        let Some(entry) = self.tools.get(name) else {
            return Err(refuse(
                Refused::new(
                    RefusalKind::UnknownTool,
                    format!("there is no tool named `{name}`"),
                )
                .hint("call only the tools you were offered, with their exact names"),
            ));
        };
        let spec = entry.tool.spec();

        // 2. Policy on the registered name. Deny beats everything, approvals included.
        if let Some(rule) = &entry.denied_by {
            return Err(refuse(
                Refused::new(
                    RefusalKind::Denied,
                    format!("tool `{name}` is not permitted in this deployment"),
                )
                .rule(rule.clone())
                .hint(
                    "do not retry this tool; find another way or tell the user it is not permitted",
                ),
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

        // 4. Validation and injection: the future is built but not polled.
        let invocation = Invocation {
            context,
            tool_call_id: id,
            tool: spec.name,
        };
        let prepared = match entry.tool.prepare(&admitted.arguments, &invocation) {
            Ok(prepared) => prepared,
            Err(errors) => {
                let (text, hints) =
                    args::describe_errors(name, &errors, &entry.definition.input_schema, &stripped);
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

        // 5. Escalation.
        if !entry.escalations.is_empty() {
            let rules = entry
                .escalations
                .iter()
                .map(|e| e.rule.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let Some(approver) = approver else {
                return Err(with_stripped(
                    Refused::new(
                        RefusalKind::ApprovalUnavailable,
                        format!(
                            "tool `{name}` needs a human's approval and none can be asked here"
                        ),
                    )
                    .rule(rules)
                    .hint("do not retry; tell the user this action needs their approval"),
                ));
            };
            let request = ApprovalRequest {
                tool: name.to_owned(),
                tool_call_id: id.to_owned(),
                thread_id: context.thread_id().map(str::to_owned),
                reasons: entry.escalations.clone(),
                arguments: Value::Object(admitted.arguments),
            };
            match approver.review(request).await {
                Decision::Approve => {
                    tracing::info!(target: "agent_airlock", rules = %rules, "human approved");
                }
                Decision::Deny { reason } => {
                    let text = match reason {
                        Some(reason) => format!("a human declined this call to `{name}`: {reason}"),
                        None => format!("a human declined this call to `{name}`"),
                    };
                    return Err(with_stripped(
                        Refused::new(RefusalKind::HumanDenied, text)
                            .rule(rules)
                            .hint("do not retry the same call; ask the user how to proceed"),
                    ));
                }
            }
        }

        // 6. Rate limits: one token from every applicable bucket, or none.
        if let Err((wait, position)) = self.limiter.acquire(&entry.buckets, self.clock.now()) {
            let (rule, rate) = entry.bucket_rules[position].clone();
            let secs = wait.as_secs_f64().ceil().max(1.0);
            let mut refused = Refused::new(
                RefusalKind::RateLimited,
                format!("tool `{name}` is rate limited ({rate}); retry in {secs:.0} s"),
            )
            .rule(rule)
            .hint(format!(
                "wait at least {secs:.0} seconds before calling `{name}` again"
            ));
            refused.retry_after = Some(wait);
            return Err(with_stripped(refused));
        }

        // 8. Execute. A panicking tool becomes an error message, not a crashed host.
        let output = match AssertUnwindSafe(prepared).catch_unwind().await {
            Ok(output) => output,
            Err(_) => {
                tracing::error!(target: "agent_airlock", outcome = "panicked", "tool panicked");
                return Ok(Outcome::Message(message(
                    id,
                    name,
                    Status::Error,
                    format!("tool `{name}` failed"),
                    stripped,
                )));
            }
        };
        Ok(match output {
            ToolOutput::Content(value) => {
                tracing::info!(target: "agent_airlock", outcome = "executed", "tool call executed");
                Outcome::Message(message(
                    id,
                    name,
                    Status::Success,
                    content_text(value),
                    stripped,
                ))
            }
            ToolOutput::Command(command) => {
                tracing::info!(target: "agent_airlock", outcome = "command", "tool returned a host command");
                Outcome::Command {
                    command,
                    tool_call_id: id.to_owned(),
                    stripped_arguments: stripped,
                }
            }
            ToolOutput::Failed(error) => {
                tracing::info!(target: "agent_airlock", outcome = "failed", not_executed = error.is_not_executed(), "tool returned an error");
                Outcome::Message(message(
                    id,
                    name,
                    Status::Error,
                    error.message().to_owned(),
                    stripped,
                ))
            }
        })
    }
}

fn message(
    id: &str,
    name: &str,
    status: Status,
    content: String,
    stripped: Vec<String>,
) -> ToolMessage {
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
    let declared = || {
        spec.params
            .iter()
            .map(|p| format!("`{}`", p.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
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
            let ghosts = ghosts
                .iter()
                .map(|g| format!("`{g}`"))
                .collect::<Vec<_>>()
                .join(", ");
            Refused::new(
                RefusalKind::MalformedArguments,
                format!(
                    "`{name}` does not take {ghosts}; its parameters are: {}",
                    declared()
                ),
            )
            .rule("ghost = block")
            .hint(format!("remove {ghosts} and call again"))
        }
    }
}
