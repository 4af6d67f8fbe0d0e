//! The hot path's workload, shared by the criterion bench (`benches/hot_path.rs`, time) and the
//! instruction-count harness (`src/bin/hot_path_counts.rs`, run under callgrind by
//! `scripts/instruction_budget.py`, which CI checks against `benches/instruction_budget.toml`).
//!
//! One realistic tool: eight parameters (strings, an integer, a bool, an optional string, a nested object,
//! an array) filled in by a ~300-byte argument object, the size a model sends for a ticket or a payment.
//! Each case is one dispatch the model can cause: allowed, allowed with two undeclared keys stripped,
//! refused for two invalid fields, denied by policy; plus masking a 2 KB JSON result that holds secrets,
//! and the floor: parsing the same arguments straight into the typed struct, as a host without a guard does.
//! One more case keeps masking linear on the adversarial text the fuzzer found (`mask_begin_lines`). Two more
//! take the gates a plain call skips, on a dispatcher of their own: `rate_limited` (refused at gate 6, its
//! bucket spent) and `approved` (escalated, approved by an in-process approver, then run).
//!
//! The `_text` cases take the same arguments as JSON text, as OpenAI's `function.arguments` carries them: the
//! floor parses the text straight into the typed struct, the dispatcher gets a [`ToolCallText`] (parsed only
//! once a gate reads the arguments: never for the denied call).

use std::hint::black_box;
use std::time::Duration;

use agent_airlock::approval::{ApprovalRequest, Decision};
use agent_airlock::mask::{MaskSet, Masker};
use agent_airlock::{CallContext, Dispatcher, ManualClock, Policy, Status, ToolCall, ToolCallText, airlock_tool, tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::run_ready;

/// Who the ticket is for.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Customer {
    /// The customer's account id.
    pub id: String,
    /// The support tier.
    pub tier: String,
    /// The customer's region code.
    pub region: String,
}

/// The typed arguments of [`file_ticket`], for the floor: what a host parses without a guard.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketArguments {
    /// See [`file_ticket`].
    pub title: String,
    /// See [`file_ticket`].
    pub body: String,
    /// See [`file_ticket`].
    pub priority: u32,
    /// See [`file_ticket`].
    pub urgent: bool,
    /// See [`file_ticket`].
    pub customer: Customer,
    /// See [`file_ticket`].
    pub tags: Vec<String>,
    /// See [`file_ticket`].
    pub assignee: Option<String>,
    /// See [`file_ticket`].
    pub due: String,
}

/// The ticket tool with the attributes given: its eight parameters of five kinds are the point of the workload,
/// and the gated cases call the same tool under other names, rate limited or escalated.
macro_rules! ticket_tool {
    ($(#[$attribute:meta])* $name:ident) => {
        $(#[$attribute])*
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            /// One-line summary.
            title: String,
            /// What happened.
            body: String,
            /// 1 (highest) to 5.
            priority: u32,
            /// Page the on-call engineer.
            urgent: bool,
            /// Who the ticket is for.
            customer: Customer,
            /// Labels.
            tags: Vec<String>,
            /// Who should take it.
            assignee: Option<String>,
            /// Due date, ISO 8601.
            due: String,
        ) -> String {
            the_ticket(title, body, priority, urgent, customer, tags, assignee, due)
        }
    };
}

ticket_tool!(
    /// File a support ticket.
    #[airlock_tool]
    file_ticket
);

ticket_tool!(
    /// The same tool rate limited to one call a day: the workload spends the call, so every call counted is
    /// refused at gate 6.
    #[airlock_tool(name = "limited_file_ticket", rate = "1/day")]
    limited_file_ticket
);

ticket_tool!(
    /// The same tool escalated to a human: the workload's approver (in process, no ledger) approves at once.
    #[airlock_tool(name = "escalated_file_ticket", escalate = "files a ticket")]
    escalated_file_ticket
);

/// The tool's body, shared with the floor so both do the same work after parsing.
#[allow(clippy::too_many_arguments)]
fn the_ticket(
    title: String,
    body: String,
    priority: u32,
    urgent: bool,
    customer: Customer,
    tags: Vec<String>,
    assignee: Option<String>,
    due: String,
) -> String {
    let size = title.len() + body.len() + customer.id.len() + tags.len() + due.len();
    let assignee = assignee.map_or(0, |a| a.len());
    format!("ticket {priority}/{urgent}/{size}/{assignee}")
}

/// Same tool under a name the policy denies.
#[airlock_tool(name = "admin_file_ticket")]
pub fn admin_file_ticket(
    /// One-line summary.
    title: String,
) -> String {
    title
}

/// The ~300-byte argument object of the allowed case.
pub fn arguments() -> Value {
    json!({
        "title": "Refund not received for order ORD-2024-118842",
        "body": "Customer reports the refund issued on 2024-05-02 has not reached their card; bank says nothing pending.",
        "priority": 2,
        "urgent": false,
        "customer": {"id": "cus_9f8e7d6c5b4a", "tier": "gold", "region": "eu-west"},
        "tags": ["billing", "refund", "escalation"],
        "assignee": "support-tier2",
        "due": "2024-05-09T17:00:00Z"
    })
}

/// The allowed arguments with two keys the tool does not declare (one at the top, one nested).
pub fn arguments_with_ghosts() -> Value {
    let mut arguments = arguments();
    arguments["admin"] = json!(true);
    arguments["customer"]["debug"] = json!(1);
    arguments
}

/// The allowed arguments with two invalid fields: a string for the integer, a number for a string.
pub fn invalid_arguments() -> Value {
    let mut arguments = arguments();
    arguments["priority"] = json!("2");
    arguments["due"] = json!(20240509);
    arguments
}

/// About 2 KB of a tool's JSON result with secrets and PII in it.
pub fn result_2k() -> Value {
    let records: Vec<Value> = (0..8)
        .map(|i| {
            json!({
                "id": 123_456_000 + i,
                "email": format!("user{i}@example.com"),
                "phone": "4155552671",
                "note": "rotated key=AKIA4HK2Q7ZLMX9RT3WB; token: ghp_R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV",
                "version": "10.0.1.2",
                "tags": ["vip", "newsletter"],
                "summary": "Prefers e-mail; last order shipped on 2024-05-01, invoice #123456789.",
            })
        })
        .collect();
    Value::Array(records)
}

/// The cases, by the name the bench, the harness and the budget use.
pub const CASES: [&str; 13] = [
    "direct_parse",
    "allowed",
    "ghosts_stripped",
    "invalid",
    "denied",
    "mask_2k",
    "mask_begin_lines",
    "ghosts_many",
    "direct_parse_text",
    "allowed_text",
    "denied_text",
    "rate_limited",
    "approved",
];

/// How many undeclared keys `ghosts_many` sends at each of its two levels.
pub const MANY_GHOSTS: usize = 2_000;

/// The allowed arguments with [`MANY_GHOSTS`] undeclared keys at the top level after as many in `customer`: each
/// top-level ghost was once inserted before the nested ones found so far, quadratic (80,000 keys took 1 s of one
/// call). The budget keeps the walk linear.
pub fn arguments_with_many_ghosts() -> Value {
    let mut arguments = arguments();
    for i in 0..MANY_GHOSTS {
        arguments["customer"][format!("debug{i}")] = json!(i);
    }
    for i in 0..MANY_GHOSTS {
        arguments[format!("admin{i}")] = json!(true);
    }
    arguments
}

/// 16 KiB of `-----BEGIN PRIVATE KEY-----` lines with no END line after them, behind one whole block: a whole
/// block's search from each of them once read on to the end of the text (quadratic: 33.9 M instructions here,
/// 433 M at 64 KiB, against 2.0 M and 6.9 M now). A result an upstream can send; the budget keeps it linear.
pub fn begin_lines() -> Value {
    let line = "-----BEGIN PRIVATE KEY-----gres#://token=(555) (551.2.30\":nul._0";
    let mut text = String::from("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n");
    while text.len() + line.len() <= 16 * 1024 {
        text.push_str(line);
    }
    Value::String(text)
}

/// Everything a case needs, built once.
pub struct Workload {
    dispatcher: Dispatcher,
    /// The rate-limited and escalated tools, with an approver that approves.
    gated: Dispatcher,
    context: CallContext,
    masker: Masker,
}

impl Default for Workload {
    fn default() -> Self {
        Self::new()
    }
}

impl Workload {
    /// The dispatcher (the ticket tool and its denied twin, no audit log, no approvals), a context, a masker.
    pub fn new() -> Self {
        let dispatcher = Dispatcher::builder()
            .tool(tool!(file_ticket))
            .tool(tool!(admin_file_ticket))
            .policy(Policy::builder().deny("admin_*").build().expect("a valid policy"))
            .clock(ManualClock::new(Duration::from_secs(1_700_000_000)))
            .build()
            .expect("distinct names");
        // The gates a plain call skips, on a dispatcher of their own so the other cases count as they always did.
        let gated = Dispatcher::builder()
            .tool(tool!(limited_file_ticket))
            .tool(tool!(escalated_file_ticket))
            .approver(|_: ApprovalRequest| async { Decision::Approve })
            .clock(ManualClock::new(Duration::from_secs(1_700_000_000)))
            .build()
            .expect("distinct names");
        let context = CallContext::new().with_thread("bench");
        // The limited tool's one call a day is spent here: every call after it is refused (the clock stands still).
        let spent = ToolCall::new("call_abc123", "limited_file_ticket", arguments());
        assert_eq!(run_ready(gated.dispatch(spent, &context)).expect_message().status, Status::Success);
        Workload { dispatcher, gated, context, masker: Masker::default() }
    }

    /// The dispatcher `case` is dispatched by.
    fn dispatcher(&self, case: &str) -> &Dispatcher {
        if matches!(case, "rate_limited" | "approved") { &self.gated } else { &self.dispatcher }
    }

    /// The input of `case`, prepared outside any measurement (a dispatch consumes its call).
    pub fn input(&self, case: &str) -> Input {
        let call = |name: &str, arguments: Value| Input::Call(ToolCall::new("call_abc123", name, arguments));
        let text = |name: &str| Input::CallText(ToolCallText::new("call_abc123", name, arguments().to_string()));
        match case {
            "direct_parse" => Input::Value(arguments()),
            "direct_parse_text" => Input::Text(arguments().to_string()),
            "allowed_text" => text("file_ticket"),
            "denied_text" => text("admin_file_ticket"),
            "allowed" => call("file_ticket", arguments()),
            "ghosts_stripped" => call("file_ticket", arguments_with_ghosts()),
            "ghosts_many" => call("file_ticket", arguments_with_many_ghosts()),
            "invalid" => call("file_ticket", invalid_arguments()),
            "denied" => call("admin_file_ticket", arguments()),
            "rate_limited" => call("limited_file_ticket", arguments()),
            "approved" => call("escalated_file_ticket", arguments()),
            "mask_2k" => Input::Value(result_2k()),
            "mask_begin_lines" => Input::Value(begin_lines()),
            other => panic!("unknown case `{other}`, expected one of {CASES:?}"),
        }
    }

    /// Runs `case` once on `input`; what it produced, so the caller can keep it alive.
    pub fn run(&self, case: &str, input: Input) -> Value {
        match (case, input) {
            ("direct_parse", Input::Value(arguments)) => {
                let a: TicketArguments = serde_json::from_value(arguments).expect("the arguments parse");
                Value::String(the_ticket(a.title, a.body, a.priority, a.urgent, a.customer, a.tags, a.assignee, a.due))
            }
            ("direct_parse_text", Input::Text(text)) => {
                let a: TicketArguments = serde_json::from_str(&text).expect("the arguments parse");
                Value::String(the_ticket(a.title, a.body, a.priority, a.urgent, a.customer, a.tags, a.assignee, a.due))
            }
            ("mask_2k" | "mask_begin_lines", Input::Value(mut result)) => {
                self.masker.mask_value(&mut result, MaskSet::SECRETS | MaskSet::PII);
                result
            }
            (case, Input::Call(call)) => {
                let message = run_ready(self.dispatcher(case).dispatch(call, &self.context)).expect_message();
                Value::String(message.content)
            }
            (_, Input::CallText(call)) => {
                let message = run_ready(self.dispatcher.dispatch(call, &self.context)).expect_message();
                Value::String(message.content)
            }
            (case, _) => panic!("case `{case}` got the wrong kind of input"),
        }
    }

    /// Dispatches `call`: its message.
    pub fn dispatch(&self, call: impl Into<agent_airlock::IncomingCall>) -> agent_airlock::ToolMessage {
        run_ready(self.dispatcher.dispatch(call, &self.context)).expect_message()
    }

    /// Checks once that each case does what its name says, so a budget never measures a broken case.
    pub fn check(&self) {
        for case in ["allowed", "ghosts_stripped", "ghosts_many"] {
            let Input::Call(call) = self.input(case) else { unreachable!() };
            let message = run_ready(self.dispatcher.dispatch(call, &self.context)).expect_message();
            assert_eq!(message.status, Status::Success, "{case}: {message:?}");
            let stripped = match case {
                "allowed" => 0,
                "ghosts_stripped" => 2,
                _ => 2 * MANY_GHOSTS,
            };
            assert_eq!(message.stripped_arguments.len(), stripped, "{case}: {message:?}");
        }
        for case in ["invalid", "denied"] {
            let Input::Call(call) = self.input(case) else { unreachable!() };
            let message = run_ready(self.dispatcher.dispatch(call, &self.context)).expect_message();
            assert_eq!(message.status, Status::Error, "{case}: {message:?}");
        }
        // Refused at gate 6, its bucket spent; approved at gate 5, then run as the allowed call is.
        let Input::Call(call) = self.input("rate_limited") else { unreachable!() };
        let message = run_ready(self.gated.dispatch(call, &self.context)).expect_message();
        let kind = message.refusal.as_ref().map(|refusal| refusal.kind);
        assert_eq!(kind, Some(agent_airlock::RefusalKind::RateLimited), "rate_limited: {message:?}");
        let (Input::Call(call), Input::Call(twin)) = (self.input("approved"), self.input("allowed")) else {
            unreachable!()
        };
        let message = run_ready(self.gated.dispatch(call, &self.context)).expect_message();
        let expected = run_ready(self.dispatcher.dispatch(twin, &self.context)).expect_message();
        assert_eq!((message.status, &message.content), (Status::Success, &expected.content), "approved: {message:?}");
        // The text cases answer as their parsed twins do, word for word.
        for (case, twin) in [("allowed_text", "allowed"), ("denied_text", "denied")] {
            let (Input::CallText(call), Input::Call(parsed)) = (self.input(case), self.input(twin)) else {
                unreachable!()
            };
            let message = run_ready(self.dispatcher.dispatch(call, &self.context)).expect_message();
            let expected = run_ready(self.dispatcher.dispatch(parsed, &self.context)).expect_message();
            assert_eq!(message, expected, "{case}");
        }
        let masked = self.run("mask_begin_lines", self.input("mask_begin_lines")).to_string();
        assert!(masked.starts_with("\"[PRIVATE_KEY]\\n-----BEGIN PRIVATE KEY-----gres"), "{masked:.80}");
        let masked = self.run("mask_2k", self.input("mask_2k")).to_string();
        assert!(!masked.contains("AKIA4HK2Q7ZLMX9RT3WB") && !masked.contains("user0@example.com"), "{masked}");
        black_box(self.run("direct_parse", self.input("direct_parse")));
        black_box(self.run("direct_parse_text", self.input("direct_parse_text")));
    }
}

/// One case's input.
pub enum Input {
    /// A model's tool call.
    Call(ToolCall),
    /// A model's tool call with its arguments as JSON text.
    CallText(ToolCallText),
    /// Arguments to parse, or a result to mask.
    Value(Value),
    /// Arguments to parse from JSON text.
    Text(String),
}
