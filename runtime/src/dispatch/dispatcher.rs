//! The dispatcher's state, computed once at build (`build.rs`): its tools, each with everything the policy
//! decided about it, the rate limiter, who answers escalations and where each durable write goes. The gates
//! that read it are in `mod.rs` (the sequence), `gates.rs`, `escalation.rs`, `admission.rs`, `output.rs` and
//! `writes.rs`.

use std::collections::BTreeMap;
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
    pub(super) tools: BTreeMap<String, Entry>,
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
    /// Where shared buckets live; set whenever a tool has one.
    pub(super) shared_rates: Option<SharedRateBuckets>,
}

/// One registered tool with everything the policy decided about it, computed once at build time.
pub(super) struct Entry {
    pub(super) tool: Arc<dyn Tool>,
    pub(super) definition: ToolDefinition,
    /// The argument screen of gate 3: `definition`'s input schema, compiled once.
    pub(super) screen: args::CompiledSchema,
    /// What each parameter expects, as an argument refusal says it: `definition`'s schema, phrased once.
    pub(super) expected: super::argument_refusal::ExpectedPhrases,
    /// How many distinct approvers an escalation across an interrupt needs (the policy's `approvals`).
    pub(super) approvals: u32,
    /// The author's masking plus the policy's.
    pub(super) mask: MaskSet,
    /// The rules the gates enforce: the author's and, unless the policy is in observe mode, the policy's.
    pub(super) enforced: Rules,
    /// In observe mode, the policy's rules: evaluated by the same gates, reported, never enforced. Empty
    /// otherwise.
    pub(super) observed: Rules,
    /// Whether a gate after gate 4 reads the call's arguments (see [`Entry::keeps_arguments`]), derived once
    /// at build from the three fields that decide it.
    pub(super) keeps_arguments: bool,
    /// Whether a call whose arguments come as JSON text can skip building their map: nothing after gate 4
    /// reads them, no audit log keeps them, the tool prepares from texts ([`Tool::prepare_text`]) and its schema's root is one closed
    /// object ([`args::argument_texts`]).
    pub(super) reads_text: bool,
}

/// One set of a tool's rules, as the gates read it. A tool has two: the ones enforced and the ones only
/// observed (see [`Entry`]); each gate evaluates both the same way.
#[derive(Default)]
pub(super) struct Rules {
    /// The policy glob that denies the tool.
    pub(super) denied_by: Option<String>,
    /// The policy glob that says `ghost = "block"`, where the author's tool strips.
    pub(super) ghost_block: Option<String>,
    /// The policy's idempotency key template, for a tool whose author declared none.
    pub(super) effect: Option<PolicyEffect>,
    /// The policy's argument conditions for this tool, in order.
    pub(super) conditions: Vec<ConditionRule>,
    pub(super) escalations: Vec<EscalationReason>,
    /// The escalation rules, comma-separated, and their reasons, `; `-separated: what a refusal, an audit
    /// record and an approval request name, joined once here rather than on every call.
    pub(super) escalation_rules: String,
    pub(super) escalation_reasons: String,
    /// Bucket ids in ascending order and, at the same positions, the rule each enforces (`attribute` or
    /// the policy glob) with its rate.
    pub(super) buckets: Vec<BucketId>,
    pub(super) bucket_rules: Vec<(String, Rate)>,
    /// The policy's shared rate limits, their buckets in the shared store.
    pub(super) shared_buckets: Vec<SharedBucket>,
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
