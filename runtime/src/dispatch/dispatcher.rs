//! The dispatcher's state, computed once at build (`build.rs`): its tools, each with everything the policy
//! decided about it, the rate limiter, who answers escalations and where each durable write goes. The gates
//! that read it are in `mod.rs`, `escalation.rs` and `writes.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::approval::protocol::InterruptApprovals;
use crate::approval::{Approver, EscalationReason};
use crate::args;
use crate::audit::AuditLog;
use crate::clock::Clock;
use crate::effect::{EffectStore, LeaseKeeper};
use crate::mask::{MaskSet, Masker};
use crate::policy::{ConditionRule, PolicyEffect};
use crate::rate::{BucketId, Rate, RateLimiter};
use crate::schema::ToolDefinition;
use crate::store::rate_buckets::SharedBucket;
use crate::store::{SharedRateBuckets, StoreHandle};
use crate::tool::Tool;

/// Runs model tool calls through policy, argument, escalation and rate-limit gates before the tool.
pub struct Dispatcher {
    pub(super) tools: HashMap<String, Entry>,
    pub(super) order: Vec<String>,
    pub(super) limiter: RateLimiter,
    pub(super) escalation: Escalation,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) effects: Option<Arc<dyn EffectStore>>,
    pub(super) effect_lease: Duration,
    /// Renews the leases of running calls.
    pub(super) lease_keeper: LeaseKeeper,
    pub(super) audit: Option<Arc<AuditLog>>,
    pub(super) stores: Stores,
    pub(super) masker: Arc<Masker>,
    /// The policy is in observe mode: what it alone would refuse is traced and audited, not refused.
    pub(super) observe: bool,
    /// Where shared buckets live; set whenever a tool has one.
    pub(super) shared_rates: Option<SharedRateBuckets>,
}

/// One registered tool with everything the policy decided about it, computed once at build time.
pub(super) struct Entry {
    pub(super) tool: Arc<dyn Tool>,
    pub(super) definition: ToolDefinition,
    /// The argument screen of gate 3: `definition`'s input schema, compiled once.
    pub(super) screen: args::CompiledSchema,
    pub(super) denied_by: Option<String>,
    pub(super) escalations: Vec<EscalationReason>,
    /// Bucket ids in ascending order and, at the same positions, the rule each enforces (`attribute` or
    /// the policy glob) with its rate.
    pub(super) buckets: Vec<BucketId>,
    pub(super) bucket_rules: Vec<(String, Rate)>,
    /// The escalation rules, comma-separated, and their reasons, `; `-separated: what a refusal, an audit
    /// record and an approval request name, joined once here rather than on every call.
    pub(super) escalation_rules: String,
    pub(super) escalation_reasons: String,
    /// How many distinct approvers an escalation across an interrupt needs (the policy's `approvals`).
    pub(super) approvals: u32,
    /// The author's masking plus the policy's.
    pub(super) mask: MaskSet,
    /// In observe mode, the policy's escalations, rate limits (buckets and rules as above): reported, not
    /// enforced. Empty otherwise (they are in `escalations` and `buckets` then).
    pub(super) observed_escalations: Vec<EscalationReason>,
    pub(super) observed_buckets: Vec<BucketId>,
    pub(super) observed_bucket_rules: Vec<(String, Rate)>,
    /// The policy's shared rate limits, their buckets in the shared store; in observe mode, reported only.
    pub(super) shared_buckets: Vec<SharedBucket>,
    pub(super) observed_shared_buckets: Vec<SharedBucket>,
    /// The policy glob that says `ghost = "block"`, where the author's tool strips.
    pub(super) ghost_block: Option<String>,
    /// The policy's idempotency key template, for a tool whose author declared none.
    pub(super) policy_effect: Option<PolicyEffect>,
    /// The policy's argument conditions for this tool, in order.
    pub(super) conditions: Vec<ConditionRule>,
}

/// Who answers escalated calls.
pub(super) enum Escalation {
    /// No one: escalated calls are refused.
    Refuse,
    /// An async callback, answered during the call.
    Approver(Arc<dyn Approver>),
    /// A human answers between an interrupt and a resume.
    Interrupt(Box<InterruptApprovals>),
}

/// Which store writes which part of a decision, worked out once when the dispatcher is built.
#[derive(Default)]
pub(super) struct Stores {
    /// The interrupt approvals' ledger (spends).
    pub(super) ledger: Option<StoreHandle>,
    /// The effect records (reservations without a spend, settlements).
    pub(super) effects: Option<StoreHandle>,
    /// The audit log.
    pub(super) audit: Option<StoreHandle>,
}
