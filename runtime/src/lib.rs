//! # agent-airlock
//!
//! Guards the tool calls of LLM agents. A model picks a tool and fills in its arguments, so every tool
//! call is untrusted input. A tool author writes an ordinary function and declares its risk in one
//! attribute ([`airlock_tool`]); a [`Dispatcher`] runs every model tool call through the gates, in this
//! order, before and after the function runs:
//!
//! 1. unknown tool → refusal (without listing hidden tools);
//! 2. [`Policy`] on the registered name: deny and allow globs (deny beats everything, approvals included);
//! 3. ghost arguments (keys the tool does not declare, at every depth) stripped and reported, or refused;
//! 4. strict validation: every bad field named, with a hint the model can act on;
//! 5. escalation to a human ([`Approver`] or [`InterruptApprovals`]); what no human can change (an empty
//!    rate bucket, a duplicate effect) is refused before anyone is asked;
//! 6. rate limits: one token from every applicable bucket, or none;
//! 7. admission: an approval's grant spent and the effect key reserved, in one write;
//! 8. execution, with injected host values (a panicking tool becomes an error message);
//! 9. masking of secrets and personal data in the result ([`Masker`]);
//! 10. an [`audit`] record of the outcome.
//!
//! Each section below shows one concept with an example that runs as a doc-test.
//!
//! ## Where the names are
//!
//! One rule: the crate root holds the path of one call, which every user needs — the macros, the tool's
//! error ([`ToolError`]), the injected context ([`CallContext`], [`State`], [`Store`], [`ToolCallId`]),
//! the [`Dispatcher`] and its [`Policy`] and [`Rate`]s, the clocks, and what a dispatch returns
//! ([`Outcome`], [`ToolMessage`], [`Refusal`]). What a hand-written tool needs beyond that (the [`Tool`]
//! trait, [`ToolSpec`] and its builder, arguments, injection, effect keys, name rules) is in [`tool`]
//! (as axum keeps its `handler` and tower its `util`). Each subsystem that a deployment switches on and
//! chooses a backend or a setting for is a public module, and its names live only there: [`approval`]
//! (approvers and the approval protocol across an interrupt), [`ledger`], [`effect`], [`audit`], [`store`]
//! (one write per decision), [`mask`], [`dialect`], [`keys`], [`canonical`], [`checkpoint`],
//! [`identity`], [`integrations`], `json_tool` (feature `json-tool`), `otel` (feature `otel`: each
//! decision exported over OpenTelemetry), and [`policy`] (the policy file and argument conditions;
//! [`Policy`] itself is at the root). No name is reachable by two paths.
//!
//! [`Tool`]: crate::tool::Tool
//! [`ToolSpec`]: crate::tool::ToolSpec
//!
//! ## A tool and a dispatch
//!
//! The function's doc comments become the tool's description and parameter descriptions; the model sees
//! them through [`Dispatcher::offered_tools_in`]. A call's outcome is a [`ToolMessage`] for the model.
//!
//! ```
//! use agent_airlock::{airlock_tool, tool, CallContext, Dispatcher, ToolCall, ToolError};
//! use serde_json::json;
//!
//! /// Add two numbers.
//! #[airlock_tool(rate = "100/minute")]
//! fn add(
//!     /// The first addend.
//!     a: i64,
//!     /// The second addend.
//!     b: i64,
//! ) -> Result<i64, ToolError> {
//!     a.checked_add(b).ok_or_else(|| ToolError::new("overflow"))
//! }
//!
//! # futures_executor_block_on(async {
//! let dispatcher = Dispatcher::builder().tool(tool!(add)).build().unwrap();
//! let call = ToolCall::new("call_1", "add", json!({"a": 2, "b": 3, "c": 4}));
//! let message = dispatcher.dispatch(call, &CallContext::new()).await.expect_message();
//! assert_eq!(message.content, "5");
//! assert_eq!(message.stripped_arguments, ["c"]);
//! # });
//! # fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```
//!
//! ## Policy
//!
//! A [`Policy`] adds rules by glob on the registered name, on top of what each tool declares: `deny`,
//! `allow` (once any is given, everything else is denied), `escalate` and `rate_limit`. Denied tools are
//! not offered to the model; [`Dispatcher::offered_tools_in`] gives the definitions in a model vendor's
//! [`Dialect`], with any tool the dialect cannot express reported in the [`DialectOffer`].
//!
//! ```
//! # use agent_airlock::{airlock_tool, ToolError};
//! # /// Read a file.
//! # #[airlock_tool] fn read_file(/** The path. */ path: String) -> Result<String, ToolError> { Ok(path) }
//! # /// Delete a file.
//! # #[airlock_tool] fn delete_file(/** The path. */ path: String) -> Result<String, ToolError> { Ok(path) }
//! use agent_airlock::{tool, CallContext, Dispatcher, Policy, RefusalKind, ToolCall, dialect::Dialect};
//! use serde_json::json;
//!
//! let policy = Policy::builder()
//!     .deny("delete_*")
//!     .escalate("write_*", "changes files")
//!     .rate_limit("*", "60/minute")
//!     .build()
//!     .unwrap();
//! let dispatcher =
//!     Dispatcher::builder().tool(tool!(read_file)).tool(tool!(delete_file)).policy(policy).build().unwrap();
//!
//! let offer = dispatcher.offered_tools_in(Dialect::OpenAi);
//! assert!(offer.is_complete());
//! let names: Vec<_> = offer.definitions.iter().map(|d| d["function"]["name"].clone()).collect();
//! assert_eq!(names, [json!("read_file")]);
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let call = ToolCall::new("call_1", "delete_file", json!({"path": "/etc/passwd"}));
//! let message = dispatcher.dispatch(call, &CallContext::new()).await.expect_message();
//! assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::Denied));
//! # });
//! ```
//!
//! The same policy can live in a file ([`Policy::from_toml`], format in [`policy::file`]), with argument
//! conditions ([`policy::condition`]) and an observe mode that refuses nothing and reports what it would:
//!
//! ```
//! use agent_airlock::Policy;
//! use serde_json::json;
//!
//! let policy = Policy::from_toml(
//!     r#"
//! version = 1
//! default = "allow"
//! deny = ["delete_*"]
//!
//! [[tools.write_file.when]]
//! if = 'path matches "**/.ssh/**"'
//! deny = "never write ssh keys"
//! "#,
//! )
//! .unwrap();
//! let rule = &policy.for_tool("write_file").conditions[0];
//! assert!(rule.evaluate(json!({"path": "/home/me/.ssh/id"}).as_object().unwrap()).applies());
//! // A missing argument applies a rule too (fail closed).
//! assert!(rule.evaluate(&Default::default()).applies());
//!
//! let err = Policy::from_toml("version = 1\ndefault = \"allow\"\ndeny = [\"[\"]\n").unwrap_err();
//! assert_eq!(err.to_string(), "line 3, column 9: invalid glob `[`: unclosed character class; missing ']'");
//! ```
//!
//! ## An approver
//!
//! A tool declared with `escalate = "..."` (or matched by a policy `escalate` glob) runs only once a human
//! approves. In a process that can wait, an [`Approver`] answers: any closure from an [`ApprovalRequest`]
//! to a future of a [`Decision`]. Without one, escalated calls are refused.
//!
//! ```
//! use agent_airlock::approval::{ApprovalRequest, Decision};
//! use agent_airlock::{airlock_tool, tool, CallContext, Dispatcher, RefusalKind};
//! use agent_airlock::{ToolCall, ToolError};
//! use serde_json::json;
//!
//! /// Refund a payment.
//! #[airlock_tool(escalate = "moves money")]
//! fn refund(/** The payment. */ payment_id: String, /** Cents. */ amount: u64) -> Result<String, ToolError> {
//!     Ok(format!("refunded {amount} on {payment_id}"))
//! }
//!
//! let approver = |request: ApprovalRequest| async move {
//!     match request.arguments["amount"].as_u64() {
//!         Some(amount) if amount <= 1_000 => Decision::Approve,
//!         _ => Decision::Deny { reason: Some("too much".into()) },
//!     }
//! };
//! let dispatcher = Dispatcher::builder().tool(tool!(refund)).approver(approver).build().unwrap();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let small = ToolCall::new("call_1", "refund", json!({"payment_id": "pi_1", "amount": 500}));
//! let message = dispatcher.dispatch(small, &CallContext::new()).await.expect_message();
//! assert_eq!(message.content, "refunded 500 on pi_1");
//! let large = ToolCall::new("call_2", "refund", json!({"payment_id": "pi_1", "amount": 90_000}));
//! let message = dispatcher.dispatch(large, &CallContext::new()).await.expect_message();
//! assert_eq!(message.refusal.map(|r| r.kind), Some(RefusalKind::HumanDenied));
//! # });
//! ```
//!
//! ## Approvals across an interrupt
//!
//! A graph runtime (LangGraph and the like) cannot hold a call open while a human decides. With
//! [`InterruptApprovals`] the first pass returns [`Outcome::Interrupt`] holding a sealed request; the host
//! stores it, a human approves it ([`InterruptApprovals::approve`], recorded in an
//! [`ApprovalLedger`](ledger::ApprovalLedger)), and the resumed pass carries the [`ResumeValue`] through
//! [`CallContext::with_resume`]. The approval binds the exact call and is spent once: a replay is refused.
//!
//! ```
//! # use agent_airlock::{airlock_tool, ToolError};
//! # /// Refund a payment.
//! # #[airlock_tool(escalate = "moves money")]
//! # fn refund(/** The payment. */ payment_id: String) -> Result<String, ToolError> {
//! #     Ok(format!("refunded {payment_id}"))
//! # }
//! use std::{sync::Arc, time::Duration};
//! use agent_airlock::approval::{InterruptApprovals, KeyRing};
//! use agent_airlock::keys::ApprovalKey;
//! use agent_airlock::ledger::MemoryLedger;
//! use agent_airlock::{tool, CallContext, Dispatcher, Outcome, RefusalKind, SystemClock, ToolCall};
//! use serde_json::json;
//!
//! let keys = KeyRing::new(ApprovalKey::new("k1", &[7u8; 32]).unwrap());
//! let ttl = Duration::from_secs(600);
//! let approvals = InterruptApprovals::new(keys, MemoryLedger::new(), ttl);
//! let dispatcher = Dispatcher::builder().tool(tool!(refund)).interrupt_approvals(approvals.clone()).build().unwrap();
//! let call = || ToolCall::new("call_1", "refund", json!({"payment_id": "pi_1"}));
//! let context = CallContext::new().with_thread("t1");
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let Outcome::Interrupt { request, .. } = dispatcher.dispatch(call(), &context).await else { panic!() };
//! let resume = approvals.approve(&request.to_value(), "alice").await.unwrap().into_value();
//!
//! let resumed = context.clone().with_resume(resume.clone());
//! assert_eq!(dispatcher.dispatch(call(), &resumed).await.expect_message().content, "refunded pi_1");
//! let replay = dispatcher.dispatch(call(), &resumed).await.expect_message();
//! assert_eq!(replay.refusal.map(|r| r.kind), Some(RefusalKind::ApprovalInvalid));
//! # });
//! ```
//!
//! ## Effects
//!
//! A tool with a side effect outside the process declares an idempotency key, `effect = "..."`, built from
//! its arguments. With an [`effect::EffectStore`] configured, the key is reserved before the tool runs and
//! committed after it succeeds, so the same effect never runs twice, across retries and processes.
//!
//! ```
//! use agent_airlock::{airlock_tool, effect::MemoryEffectStore, tool, CallContext, Dispatcher, RefusalKind};
//! use agent_airlock::{ToolCall, ToolError};
//! use serde_json::json;
//!
//! /// Send an invoice.
//! #[airlock_tool(effect = "invoice:{order_id}")]
//! fn send_invoice(/** The order. */ order_id: String) -> Result<String, ToolError> {
//!     Ok(format!("sent invoice for {order_id}"))
//! }
//!
//! let dispatcher = Dispatcher::builder().tool(tool!(send_invoice)).effects(MemoryEffectStore::new()).build().unwrap();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let call = |id| ToolCall::new(id, "send_invoice", json!({"order_id": "o_42"}));
//! let first = dispatcher.dispatch(call("call_1"), &CallContext::new()).await.expect_message();
//! assert_eq!(first.content, "sent invoice for o_42");
//! let again = dispatcher.dispatch(call("call_2"), &CallContext::new()).await.expect_message();
//! assert_eq!(again.refusal.map(|r| r.kind), Some(RefusalKind::Duplicate));
//! # });
//! ```
//!
//! ## Masking
//!
//! Secrets (by default) and, when asked for with `mask = "..."`, personal data are replaced in a tool's
//! result before the model sees it. A [`Masker`] does the same for any text or JSON value.
//!
//! ```
//! use agent_airlock::{airlock_tool, tool, CallContext, Dispatcher, ToolCall, ToolError, mask::{MaskSet, Masker}};
//! use serde_json::json;
//!
//! let masker = Masker::default();
//! let masked = masker.mask_text("key AKIAIOSFODNN7QK4RW2Z, build 1.2.3.4", MaskSet::SECRETS);
//! assert!(!masked.contains("AKIAIOSFODNN7QK4RW2Z") && masked.ends_with("build 1.2.3.4"));
//!
//! /// Look up a customer.
//! #[airlock_tool(mask = "secrets,pii")]
//! fn customer(/** The customer id. */ id: String) -> Result<String, ToolError> {
//!     Ok(format!("{id}: jane@example.com"))
//! }
//!
//! let dispatcher = Dispatcher::builder().tool(tool!(customer)).build().unwrap();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let call = ToolCall::new("call_1", "customer", json!({"id": "c_7"}));
//! let message = dispatcher.dispatch(call, &CallContext::new()).await.expect_message();
//! assert!(message.content.starts_with("c_7: ") && !message.content.contains("jane@example.com"));
//! # });
//! ```
//!
//! ## Audit
//!
//! Every outcome is appended to a hash-chained [`AuditLog`](audit::AuditLog) (a redb file with
//! [`AuditLog::open`](audit::AuditLog::open), or in memory), holding commitments to the arguments and the
//! result rather than the values. [`audit::verify`] walks the chain and reports the first bad record.
//!
//! ```
//! use std::sync::Arc;
//! use agent_airlock::audit::{self, AuditConfig, AuditLog};
//! use agent_airlock::keys::AuditKey;
//! use agent_airlock::{airlock_tool, tool, CallContext, Dispatcher, ToolCall, ToolError};
//! use serde_json::json;
//!
//! /// Echo a text.
//! #[airlock_tool]
//! fn echo(/** The text. */ text: String) -> Result<String, ToolError> { Ok(text) }
//!
//! let key = AuditKey::new("audit-1", &[9u8; 32]).unwrap();
//! let log = Arc::new(AuditLog::in_memory(AuditConfig { key: Some(key), ..AuditConfig::default() }));
//! let dispatcher = Dispatcher::builder().tool(tool!(echo)).audit(Arc::clone(&log)).build().unwrap();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let call = ToolCall::new("call_1", "echo", json!({"text": "hi"}));
//! dispatcher.dispatch(call, &CallContext::new()).await.expect_message();
//! # });
//! let report = audit::verify(&log, None).unwrap();
//! assert_eq!((report.records, report.signed_records, report.head_signed), (1, 1, true));
//! ```
//!
//! ## Keys
//!
//! Secrets are typed by purpose ([`keys`]): an [`ApprovalKey`] cannot be used as an audit key. Each loads
//! from bytes, hex, a file or an environment variable; a [`KeyRing`] holds the current approval key and the
//! retired ones, so keys rotate without invalidating what is pending.
//!
//! ```
//! use agent_airlock::{keys::ApprovalKey, approval::KeyRing};
//!
//! let old = ApprovalKey::from_hex("k1", &"ab".repeat(32)).unwrap();
//! let new = ApprovalKey::from_hex("k2", &"cd".repeat(32)).unwrap();
//! let ring = KeyRing::new(old).rotate(new).unwrap();
//! assert_eq!(ring.current().id(), "k2");
//! assert_eq!(ring.retired()[0].id(), "k1");
//!
//! // Too short a secret, or text that is not hex, is refused without echoing it.
//! assert!(ApprovalKey::from_hex("k3", "abcd").is_err());
//! assert!(ApprovalKey::from_hex("k3", &"zz".repeat(32)).is_err());
//! ```
//!
//! [`ApprovalKey`]: crate::keys::ApprovalKey
//! [`ApprovalRequest`]: crate::approval::ApprovalRequest
//! [`Approver`]: crate::approval::Approver
//! [`Decision`]: crate::approval::Decision
//! [`Dialect`]: crate::dialect::Dialect
//! [`DialectOffer`]: crate::dialect::DialectOffer
//! [`InterruptApprovals`]: crate::approval::InterruptApprovals
//! [`InterruptApprovals::approve`]: crate::approval::InterruptApprovals::approve
//! [`KeyRing`]: crate::approval::KeyRing
//! [`Masker`]: crate::mask::Masker
//! [`ResumeValue`]: crate::approval::ResumeValue
#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![warn(missing_docs)]

pub mod approval;
mod args;
pub mod audit;
pub mod canonical;
pub mod checkpoint;
mod clock;
mod context;
pub mod dialect;
mod dispatch;
mod echo;
pub mod effect;
pub mod identity;
#[cfg(any(feature = "mcp", feature = "rig"))]
pub mod integrations;
#[cfg(feature = "json-tool")]
pub mod json_tool;
pub mod keys;
pub mod ledger;
pub mod mask;
mod message;
#[cfg(feature = "otel")]
pub mod otel;
pub mod policy;
mod rate;
mod schema;
pub mod store;
pub mod tool;

#[doc = agent_airlock_grammar::airlock_tool_keys!()]
///
/// Every mistake is a compile error at the offending value or type: unknown or duplicate keys, bad values,
/// methods, generic, `unsafe`, `const` or variadic functions, pattern or `impl Trait` parameters, a
/// parameter type that is not `Deserialize + JsonSchema`, a result that is not `Serialize`, an error that
/// is not `Display`, a future that is not `Send`.
///
/// ```
/// use agent_airlock::{ToolError, airlock_tool, tool};
///
/// /// Refund a payment to the customer's card.
/// #[airlock_tool(escalate = "moves money", rate = "10/minute", effect = "refund:{payment_id}", mask = "secrets,pii")]
/// fn refund(
///     /// The payment intent to refund.
///     payment_id: String,
///     /// Amount in cents.
///     amount: u64,
/// ) -> Result<String, ToolError> {
///     Ok(format!("refunded {amount} on {payment_id}"))
/// }
///
/// let spec = agent_airlock::tool::Tool::spec(&tool!(refund));
/// assert_eq!(spec.name(), "refund");
/// assert_eq!(spec.escalate(), Some("moves money"));
/// assert_eq!(spec.rate().map(|rate| rate.to_string()).as_deref(), Some("10/minute"));
/// ```
pub use agent_airlock_macros::airlock_tool;
pub use agent_airlock_macros::tool;
pub use clock::{Clock, ManualClock, SystemClock};
pub use context::{CallContext, State, Store, ToolCallId};
pub use dispatch::{BuildError, Dispatcher, DispatcherBuilder};
pub use message::{
    HostCommand, IncomingCall, Outcome, Refusal, RefusalKind, Status, ToolCall, ToolCallText, ToolMessage,
};
pub use policy::builder::PolicyBuilder;
pub use policy::policy::{Policy, PolicyError, ToolPolicy};
pub use rate::{LocalRateBuckets, Rate, RateParseError, RateScope};
pub use schema::{ToolDefinition, input_schema};
pub use tool::error::ToolError;

/// Used by the code `#[airlock_tool]` generates. Not a public API: it changes without notice.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
