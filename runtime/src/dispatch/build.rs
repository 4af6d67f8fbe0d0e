//! Building a [`Dispatcher`]: each tool's policy decision, buckets, masking and schema, computed once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::dispatcher::{Dispatcher, Entry, Escalation, Rules, Stores};
use super::escalation::joined;
use crate::approval::protocol::InterruptApprovals;
use crate::approval::{Approver, EscalationReason};
use crate::audit::AuditLog;
use crate::clock::{Clock, SystemClock};
use crate::effect::DEFAULT_EFFECT_LEASE;
use crate::effect::EffectStore;
use crate::mask::Masker;
use crate::policy::Policy;
use crate::policy::PolicyMode;
use crate::rate::{BucketId, BucketKey, LocalRateBuckets, Rate, RateLimiter, RateScope};
use crate::schema::ToolDefinition;
use crate::store::SharedRateBuckets;
use crate::store::rate_buckets::SharedBucket;
use crate::tool::{GhostPolicy, Tool};

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
    /// An escalated tool with an effect, under interrupt approvals, whose effect store is not the approval
    /// ledger's: the grant spend and the effect reservation could not be one atomic write.
    #[error(
        "tool `{0}` needs approval and declares an effect, but the effect store is not the approval ledger's; use `ledger.effects()` (or one redb database for both)"
    )]
    EffectsApartFromLedger(String),
    /// A policy effect template names a parameter the tool it matches does not declare.
    #[error("policy effect template `{template}` for tool `{tool}` names `{param}`, which the tool does not declare")]
    UnknownEffectParam {
        /// The tool.
        tool: String,
        /// The template.
        template: String,
        /// The placeholder.
        param: String,
    },
    /// A policy rule shares a tool's rate limit across hosts, and the dispatcher has no store for the bucket:
    /// no [`shared_rates`](DispatcherBuilder::shared_rates) and no ledger, effect store or audit log in
    /// PostgreSQL.
    #[error(
        "tool `{tool}` has a shared rate limit (rule `{rule}`) but the dispatcher has no store for shared rate buckets: use a PostgreSQL ledger, effect store or audit log, or `.shared_rates(ledger.shared_rate_buckets())`; a redb file holds no rate buckets, and `SharedRateBuckets::in_memory()` shares them between the dispatchers of one process only"
    )]
    NoSharedRateStore {
        /// The tool.
        tool: String,
        /// The policy glob of the shared rule.
        rule: String,
    },
}

/// Builds a [`Dispatcher`].
pub struct DispatcherBuilder {
    tools: Vec<Arc<dyn Tool>>,
    policy: Policy,
    escalation: Escalation,
    /// `None`: the system clock, and the interrupt approvals keep their own.
    clock: Option<Arc<dyn Clock>>,
    effects: Option<Arc<dyn EffectStore>>,
    effect_lease: Duration,
    audit: Option<Arc<AuditLog>>,
    masker: Option<Arc<Masker>>,
    shared_rates: Option<SharedRateBuckets>,
    local_rates: Option<LocalRateBuckets>,
}

impl Dispatcher {
    /// Starts a dispatcher with no tools, an allow-all policy, no approver and the system clock.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder {
            tools: Vec::new(),
            policy: Policy::new(),
            escalation: Escalation::Refuse,
            clock: None,
            effects: None,
            effect_lease: DEFAULT_EFFECT_LEASE,
            audit: None,
            masker: None,
            shared_rates: None,
            local_rates: None,
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

    /// Escalated calls pause with an interrupt ([`Outcome::Interrupt`](crate::Outcome::Interrupt)) and run
    /// when the host resumes them with a matching approval ([`CallContext::with_resume`](crate::CallContext::with_resume)),
    /// exactly once. Replaces an approver. Without [`effects`](Self::effects), tools with an effect keep
    /// their records in the approval ledger ([`ApprovalLedger::effects`](crate::ledger::ApprovalLedger::effects)).
    pub fn interrupt_approvals(mut self, approvals: InterruptApprovals) -> Self {
        self.escalation = Escalation::Interrupt(Box::new(approvals));
        self
    }

    /// The clock for everything the dispatcher holds: rate limits, effect leases, and the interrupt
    /// approvals' requests, grants and spends (tests use a [`ManualClock`](crate::ManualClock)). Without it,
    /// the system clock (and the approvals keep their own).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Where effect records live (required when a tool declares `effect = "..."`, unless interrupt
    /// approvals are configured: their ledger keeps them then). With interrupt approvals it must be the
    /// ledger's storage (e.g. one redb database for both), so a grant is spent in the same write that
    /// reserves its effect.
    pub fn effects(mut self, store: impl EffectStore) -> Self {
        self.effects = Some(Arc::new(store));
        self
    }

    /// How long a reserved effect's holder may go silent before a crash is presumed (default
    /// [`DEFAULT_EFFECT_LEASE`]). While the tool runs, the lease is renewed every third of it, so a call
    /// may run longer than its lease; a process that dies stops renewing, and its lease lapses.
    pub fn effect_lease(mut self, lease: Duration) -> Self {
        self.effect_lease = lease;
        self
    }

    /// Appends every dispatch outcome to a tamper-evident audit log. On redb, records are written by the
    /// database's writer, in the same transaction as the call's spend or effect step when the ledger and
    /// the effect records share the log's `Arc<Database>`, and awaited.
    pub fn audit(mut self, log: Arc<AuditLog>) -> Self {
        self.audit = Some(log);
        self
    }

    /// How results are masked (strategies per kind). Default: [`Masker::default`], type tags such as `[EMAIL]`.
    pub fn masker(mut self, masker: Masker) -> Self {
        self.masker = Some(Arc::new(masker));
        self
    }

    /// Where the buckets of shared rate limits live
    /// ([`PolicyBuilder::shared_rate_limit`](crate::PolicyBuilder::shared_rate_limit), `rate_shared = true`).
    /// Without it, the PostgreSQL database of the approval ledger, the effect store or the audit log, if any
    /// is in PostgreSQL; a policy with a shared rule and no such store does not build
    /// ([`BuildError::NoSharedRateStore`]).
    pub fn shared_rates(mut self, buckets: SharedRateBuckets) -> Self {
        self.shared_rates = Some(buckets);
        self
    }

    /// Where the buckets of the rate limits kept in memory (those not shared) come from and are left for
    /// the next dispatcher: give every dispatcher that replaces another the same [`LocalRateBuckets`], so
    /// its tools' limits go on from the buckets as they were rather than full. Without it, each dispatcher
    /// starts with full buckets.
    pub fn local_rates(mut self, buckets: LocalRateBuckets) -> Self {
        self.local_rates = Some(buckets);
        self
    }

    /// The dispatcher, with each tool's policy decision and schema computed once.
    pub fn build(mut self) -> Result<Dispatcher, BuildError> {
        if let (Some(clock), Escalation::Interrupt(approvals)) = (&self.clock, &mut self.escalation) {
            approvals.set_clock(Arc::clone(clock));
        }
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let mut limiter = match self.local_rates {
            Some(kept) => RateLimiter::keeping(kept, clock.now()),
            None => RateLimiter::default(),
        };
        let mut tools = BTreeMap::new();
        let mut order = Vec::with_capacity(self.tools.len());
        let ledger_effects = match &self.escalation {
            Escalation::Interrupt(approvals) => Some(approvals.ledger().effects()),
            _ => None,
        };
        let effects = self.effects.clone().or_else(|| ledger_effects.clone());
        let observe = self.policy.mode() == PolicyMode::Observe;
        for tool in self.tools {
            let spec = tool.spec();
            if tools.contains_key(spec.name()) {
                return Err(BuildError::DuplicateTool(spec.name().to_owned()));
            }
            let decision = self.policy.for_tool(spec.name());
            // A policy's effect template applies to tools whose author declared none.
            let policy_effect = decision.effect.filter(|_| spec.effect().is_none()).map(|(_, effect)| effect);
            if let Some(effect) = &policy_effect
                && let Some(param) = effect.params().find(|param| spec.param(param).is_none())
            {
                return Err(BuildError::UnknownEffectParam {
                    tool: spec.name().to_owned(),
                    template: effect.template().to_owned(),
                    param: param.to_owned(),
                });
            }
            // In observe mode the policy's own template is only checked, never reserved.
            let reserves_effect = spec.effect().is_some() || (policy_effect.is_some() && !observe);
            if reserves_effect && effects.is_none() {
                return Err(BuildError::NoEffectStore(spec.name().to_owned()));
            }
            let mask = spec.mask() | decision.mask;
            // The author's rules are always enforced; the policy's with them, or only observed.
            let author = Unbucketed {
                rules: Rules {
                    escalations: spec
                        .escalate()
                        .map(|reason| EscalationReason { rule: "attribute".into(), reason: reason.into() })
                        .into_iter()
                        .collect(),
                    ..Rules::default()
                },
                limits: spec
                    .rate()
                    .map(|rate| ("attribute".to_owned(), rate, RateScope::PerTool))
                    .into_iter()
                    .collect(),
                shared_limits: Vec::new(),
            };
            let policy = Unbucketed {
                rules: Rules {
                    denied_by: decision.denied_by,
                    ghost_block: decision.ghost_block.filter(|_| spec.ghost() != GhostPolicy::Block),
                    effect: policy_effect,
                    conditions: decision.conditions,
                    escalations: decision
                        .escalations
                        .into_iter()
                        .map(|(rule, reason)| EscalationReason { rule, reason })
                        .collect(),
                    ..Rules::default()
                },
                limits: decision.rate_limits,
                shared_limits: decision.shared_rate_limits,
            };
            let (enforced, observed) =
                if observe { (author, policy) } else { (author.and(policy), Unbucketed::default()) };
            if reserves_effect
                && enforced.rules.may_escalate()
                && let (Some(ledger), Some(store)) = (&ledger_effects, &effects)
                && (ledger.storage_id().is_none() || ledger.storage_id() != store.storage_id())
            {
                return Err(BuildError::EffectsApartFromLedger(spec.name().to_owned()));
            }
            let enforced = enforced.bucketed(&mut limiter, spec.name(), false);
            let observed = observed.bucketed(&mut limiter, spec.name(), true);
            let definition = ToolDefinition::of(&*tool);
            let name = spec.name().to_owned();
            order.push(name.clone());
            let keeps_arguments = Entry::reads_arguments_after_gate_4(&*tool, &enforced, &observed);
            let screen = crate::args::CompiledSchema::compile(&definition.input_schema);
            // No audit log either: its records keep the admitted arguments, which only the map's way builds.
            let reads_text = !keeps_arguments
                && self.audit.is_none()
                && tool.prepares_text()
                && screen.reads_text(tool.spec().params());
            tools.insert(
                name,
                Entry {
                    tool,
                    screen,
                    expected: super::argument_refusal::ExpectedPhrases::of(&definition.input_schema),
                    definition,
                    approvals: decision.approvals,
                    mask,
                    enforced,
                    observed,
                    keeps_arguments,
                    reads_text,
                },
            );
        }
        let stores = Stores {
            ledger: match &self.escalation {
                Escalation::Interrupt(approvals) => approvals.ledger().store_handle(),
                _ => None,
            },
            effects: effects.as_ref().and_then(|store| store.store_handle()),
            audit: self.audit.as_ref().and_then(|log| log.store_handle()),
        };
        let shared_rates = match self.shared_rates {
            Some(buckets) => Some(buckets),
            None => shared_rates_of(&stores, &order, &tools)?,
        };
        Ok(Dispatcher {
            stores,
            tools,
            order,
            limiter,
            escalation: self.escalation,
            clock,
            effects,
            effect_lease: self.effect_lease,
            lease_keeper: crate::effect::LeaseKeeper::default(),
            audit: self.audit,
            masker: self.masker.unwrap_or_default(),
            shared_rates,
        })
    }
}

/// A set of a tool's rules before its rate limits have buckets.
#[derive(Default)]
struct Unbucketed {
    rules: Rules,
    limits: Vec<(String, Rate, RateScope)>,
    shared_limits: Vec<(String, Rate, RateScope)>,
}

impl Unbucketed {
    /// The author's rules (`self`) with the policy's: escalations and limits added, the rest the policy's.
    fn and(mut self, policy: Unbucketed) -> Unbucketed {
        self.rules.escalations.extend(policy.rules.escalations);
        self.limits.extend(policy.limits);
        self.shared_limits.extend(policy.shared_limits);
        Unbucketed { rules: Rules { escalations: self.rules.escalations, ..policy.rules }, ..self }
    }

    /// The rules, every applicable limit with its own bucket (so the stricter one always binds) and the
    /// escalations joined once. `observed`: the rules are the ones only observed.
    fn bucketed(self, limiter: &mut RateLimiter, tool: &str, observed: bool) -> Rules {
        let mut rules = self.rules;
        (rules.buckets, rules.bucket_rules) = add_buckets(limiter, tool, observed, self.limits);
        rules.shared_buckets = shared_buckets_of(tool, self.shared_limits);
        (rules.escalation_rules, rules.escalation_reasons) = joined(&rules.escalations);
        rules
    }
}

/// One bucket per limit (so the stricter one always binds), in ascending id order, and the rule and rate
/// each enforces at the same positions.
fn add_buckets(
    limiter: &mut RateLimiter,
    tool: &str,
    observed: bool,
    limits: Vec<(String, Rate, RateScope)>,
) -> (Vec<BucketId>, Vec<(String, Rate)>) {
    let buckets = limits
        .iter()
        .enumerate()
        .map(|(position, (rule, rate, scope))| {
            let key =
                BucketKey { tool: tool.to_owned(), observed, position, rule: rule.clone(), rate: *rate, scope: *scope };
            limiter.add_bucket(key)
        })
        .collect();
    (buckets, limits.into_iter().map(|(rule, rate, _)| (rule, rate)).collect())
}

/// One shared bucket per distinct limit (a rule given twice would otherwise take two tokens from one
/// bucket).
fn shared_buckets_of(tool: &str, limits: Vec<(String, Rate, RateScope)>) -> Vec<SharedBucket> {
    let mut buckets: Vec<SharedBucket> = Vec::with_capacity(limits.len());
    for (rule, rate, scope) in limits {
        if !buckets.iter().any(|b| b.rule == rule && b.rate == rate && b.scope == scope) {
            buckets.push(SharedBucket { tool: tool.to_owned(), rule, rate, scope });
        }
    }
    buckets
}

/// The store for shared buckets when none was given: the first of the dispatcher's stores that can hold
/// them (PostgreSQL), if any tool has a shared limit.
fn shared_rates_of(
    stores: &Stores,
    order: &[String],
    tools: &BTreeMap<String, Entry>,
) -> Result<Option<SharedRateBuckets>, BuildError> {
    let needing = order.iter().filter_map(|name| tools.get(name)).find_map(|entry| {
        entry
            .enforced
            .shared_buckets
            .first()
            .or(entry.observed.shared_buckets.first())
            .map(|bucket| (bucket.tool.clone(), bucket.rule.clone()))
    });
    let Some((tool, rule)) = needing else { return Ok(None) };
    #[cfg(feature = "postgres")]
    if let Some(buckets) =
        [&stores.ledger, &stores.effects, &stores.audit].into_iter().flatten().find_map(SharedRateBuckets::of_store)
    {
        return Ok(Some(buckets));
    }
    #[cfg(not(feature = "postgres"))]
    let _ = stores;
    Err(BuildError::NoSharedRateStore { tool, rule })
}
