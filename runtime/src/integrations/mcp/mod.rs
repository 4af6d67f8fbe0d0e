//! A guarded MCP server on [rmcp](https://docs.rs/rmcp), the official MCP Rust SDK (feature `mcp`).
//!
//! [`GuardedMcpServer`] serves a [`Dispatcher`](crate::Dispatcher)'s tools to any MCP client:
//!
//! - `tools/list` returns what the dispatcher offers: denied tools are absent, escalated ones listed;
//! - `tools/call` runs [`Dispatcher::dispatch_with_approver`](crate::Dispatcher::dispatch_with_approver).
//!   Refusals and tool failures are tool results with `isError: true` whose text is the refusal and its
//!   hints (never a JSON-RPC error, which clients hide from the model). Every result carries
//!   `_meta["agent-airlock/call"]` ([`CALL_META_KEY`]): the tool call id, the stripped ghost arguments,
//!   and for refusals the refusal (kind, rule, retry) and hints;
//! - an escalated call is decided as the server's [`McpApprovals`] say, chosen when it is made: the client's
//!   human through MCP form elicitation on the connection of the request being served (recorded and bound
//!   in a ledger, or not), or the dispatcher's own approver or interrupt approvals. A client that did not
//!   declare elicitation gets a refusal ("needs a human's approval and none can be asked here"), never a
//!   silent run. An answer approves only the call it was asked for: nothing is remembered, so the same
//!   request id or the same arguments ask again;
//! - the human is shown the call in full, every argument whole with hidden characters escaped
//!   ([`crate::approval::display`]); a call too long to show is refused without asking. At most one elicitation per
//!   tool waits on a connection; a cancelled call (`notifications/cancelled`) withdraws its elicitation and
//!   never runs, whatever the human answers later. When no answer is obtained (cancelled, timed out,
//!   undeliverable) the model is told so, never that a human declined.
//!
//! The call's [`CallContext`](crate::CallContext) has the connection id as its thread
//! ([`GuardedMcpServer::connection_id`]),
//! and the JSON-RPC request id (as JSON text: `7` or `"abc"`, so a number and a string never collide) as
//! its tool call id. Where the transport says who made the request
//! ([`GuardedMcpServer::with_caller_of`]), the call runs as that caller too
//! ([`CallContext::with_caller`](crate::CallContext::with_caller)): per-thread rate limits then count the
//! caller across all of its connections, while approvals stay bound to the connection.
//!
//! Elicitation is a server-to-client request, which protocol revision 2026-07-28 no longer allows (it
//! replaces it with `InputRequiredResult` round trips). The server therefore offers the revisions up to
//! 2025-11-25; clients that probe for the newer one fall back to the `initialize` handshake.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_airlock::Dispatcher;
//! use agent_airlock::integrations::mcp::{GuardedMcpServer, McpApprovals};
//!
//! # async fn run(dispatcher: Dispatcher) -> Result<(), Box<dyn std::error::Error>> {
//! GuardedMcpServer::new(Arc::new(dispatcher), McpApprovals::ClientElicitation).serve_stdio().await?;
//! # Ok(())
//! # }
//! ```
mod approval_routing;
mod elicitation;
mod served;
mod server;
mod wire;

use std::sync::Arc;
use std::time::Duration;

pub use rmcp;

use crate::approval::protocol::InterruptApprovals;
use crate::policy::ApprovalRoute;

pub use self::served::ServedDispatcher;
pub use self::server::{CallerOf, GuardedMcpServer, McpServeError};
// The gateway's passthrough names requests as the server does.
#[cfg(feature = "mcp-gateway")]
pub(crate) use self::wire::request_id_text;
pub use self::wire::{mcp_input_schema, mcp_tool, tool_result};

/// The `_meta` key of every `tools/call` result: what the guard did with the call.
pub const CALL_META_KEY: &str = "agent-airlock/call";

/// The `_meta` key of an approval elicitation: the [`ApprovalRequest`](crate::approval::ApprovalRequest) as
/// JSON, for clients that show more than the message.
pub const APPROVAL_META_KEY: &str = "agent-airlock/approval";

/// How long an approval elicitation waits for the human before the call is refused.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// Who decides an escalated call served over MCP. Chosen when the server is made
/// ([`GuardedMcpServer::new`]), never implied: it says whom the server trusts with a yes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum McpApprovals {
    /// The human behind the MCP client, asked through form elicitation on the request's connection.
    ///
    /// **Trusted: the client.** Its user approves the calls their own agent makes, and nothing is recorded
    /// beyond the audit log: right for a desktop client whose user owns what the tools touch, wrong when the
    /// client's user must not approve their own calls. A client that did not declare elicitation gets a
    /// refusal. The dispatcher's own approver or interrupt approvals are not asked.
    ClientElicitation,
    /// [`ClientElicitation`](Self::ClientElicitation), with every answer bound to the exact call by the HMAC
    /// binding of these [`InterruptApprovals`] and recorded in their ledger: the call pauses as an
    /// interrupt (a sealed request recorded pending), the client's human answers, the answer is recorded as
    /// a grant or a denial, and the call is dispatched again with it as the resume value, so the grant is
    /// spent exactly once by exactly this call (thread = connection id, tool call id = JSON-RPC request id).
    /// The dispatcher must have been built with `.interrupt_approvals(approvals.clone())`, sharing the key
    /// ring and the ledger.
    ///
    /// **Trusted: the client**, as above; the ledger proves what was asked and answered.
    BoundClientElicitation(Box<InterruptApprovals>),
    /// What the dispatcher was built with: its approver callback (an operator's channel outside MCP), or
    /// its interrupt approvals (the call is refused as pending and an operator approves out of band, e.g.
    /// with `airlock approve`), or, with neither, a refusal. The MCP client is never asked.
    ///
    /// **Trusted: the operator** behind the dispatcher's approver or ledger, never the client's user. A call the
    /// client cancels stops waiting for the dispatcher's approver callback and never runs; one cancelled while
    /// its tool runs is dropped (its effect, if any, is left ambiguous for an operator).
    Dispatcher,
    /// Bound approvals, as [`BoundClientElicitation`](Self::BoundClientElicitation), asked of whoever each
    /// tool's [`ApprovalRoute`] names: the client's human through elicitation, or an operator. For the
    /// operator the call pauses as a sealed request recorded pending in the ledger and waits, up to the
    /// server's approval timeout, for a decision another process records in the same ledger (`airlock
    /// approve` or `airlock deny` against the shared store); it then resumes with that decision, so the
    /// grant is spent exactly once by exactly this call. A call cancelled or timed out while it waits is
    /// closed in the ledger (a later approval admits nothing) and never runs.
    ///
    /// **Trusted: the client** for the tools routed to it, **the operator** for the others.
    Routed(Box<RoutedApprovals>),
}

/// The approvals and routes of [`McpApprovals::Routed`].
#[derive(Clone)]
pub struct RoutedApprovals {
    approvals: InterruptApprovals,
    routes: Arc<dyn Fn(&str) -> ApprovalRoute + Send + Sync>,
    poll_interval: Duration,
}

/// How often a call waiting for an operator looks for the decision in the ledger, unless set.
pub const DEFAULT_OPERATOR_POLL: Duration = Duration::from_millis(250);

impl RoutedApprovals {
    /// Bound approvals recorded in `approvals`' ledger, each tool's asked of whom `routes` names for it
    /// (for a policy: `move |tool| policy.for_tool(tool).approver`).
    pub fn new(approvals: InterruptApprovals, routes: impl Fn(&str) -> ApprovalRoute + Send + Sync + 'static) -> Self {
        RoutedApprovals { approvals, routes: Arc::new(routes), poll_interval: DEFAULT_OPERATOR_POLL }
    }

    /// How often a call waiting for an operator looks for the decision ([`DEFAULT_OPERATOR_POLL`]).
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }
}

impl std::fmt::Debug for RoutedApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutedApprovals")
            .field("approvals", &self.approvals)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

/// The `_meta` key of a bound approval elicitation: the sealed `{"airlock_approval": {...}}` request, with
/// the HMAC binding of the call (thread = connection id, tool call id = JSON-RPC request id).
pub const BOUND_APPROVAL_META_KEY: &str = "agent-airlock/sealed-approval";
