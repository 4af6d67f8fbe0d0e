//! What the ledger keeps: requests, grants (and partial approvals), denials, spends, and what a read or a
//! prune returns.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::operators::DecisionSignature;
use crate::effect::Reservation;

/// What [`ApprovalLedger::prune`](super::ApprovalLedger::prune) removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PruneReport {
    /// The requests removed (each with its status), in id order.
    pub requests: Vec<String>,
    /// The grants removed (spent, revoked, replaced or expired), in id order.
    pub grants: Vec<String>,
}

/// An effect key to reserve in the same write as a spend ([`ApprovalLedger::spend_and_reserve`](super::ApprovalLedger::spend_and_reserve)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectClaim {
    /// The rendered effect key.
    pub key: String,
    /// How long the reservation may run before a crash is presumed.
    pub lease: Duration,
}

/// A grant spent and an effect reserved by one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendReserved {
    /// The spend.
    pub spent: SpentRecord,
    /// The reservation, to settle after the tool ran.
    pub reservation: Reservation,
}

/// A request for approval, as issued (immutable once recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Random id, 32 lowercase hex characters.
    pub request_id: String,
    /// The key that bound and sealed it.
    pub key_id: String,
    /// The registered tool name.
    pub tool: String,
    /// The rule that asked for approval.
    pub rule: String,
    /// The reason given.
    pub reason: String,
    /// The binding, lowercase hex.
    pub binding: String,
    /// When it was issued.
    #[serde(with = "millis")]
    pub requested_at: Duration,
    /// The sealed interrupt value the host was given, `{"airlock_approval": {...}}`, arguments included.
    pub interrupt: Value,
    /// Who asked, as the host authenticated them ([`CallContext::with_caller`](crate::CallContext::with_caller)):
    /// the holder of a gateway's bearer token, an OAuth token's subject. When named, the pending limit counts
    /// this caller's requests across all their threads ([`pending_scope`](Self::pending_scope)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

impl RequestRecord {
    /// The thread the request's call belongs to, as sealed in its interrupt value (`""` for none).
    pub fn thread_id(&self) -> &str {
        self.interrupt["airlock_approval"]["call"]["thread_id"].as_str().unwrap_or("")
    }

    /// The model's id for the call, as sealed in its interrupt value (`""` if it has none).
    pub fn tool_call_id(&self) -> &str {
        self.interrupt["airlock_approval"]["call"]["tool_call_id"].as_str().unwrap_or("")
    }

    /// When the request stops being approvable, as sealed in its interrupt value (`None`: never).
    pub fn expires_at(&self) -> Option<Duration> {
        self.interrupt["airlock_approval"]["expires_at_ms"].as_u64().map(Duration::from_millis)
    }

    /// How many distinct approvers the request needs before a grant is issued, as sealed in its interrupt
    /// value (1 unless the policy asked for more).
    pub fn approvals_required(&self) -> u32 {
        self.interrupt["airlock_approval"]["approvals"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(1).max(1)
    }

    /// What pending requests are counted under for the pending limit: the tool and the caller when one is
    /// named, so a caller's new thread (a new MCP session) is no fresh budget; else the tool and the thread.
    pub fn pending_scope(&self) -> String {
        // NUL cannot occur in a tool name; the thread id, or the caller, comes last. NUL leads no thread id a
        // host uses (as for the per-caller rate buckets): a caller's scope is never a thread's.
        match &self.caller {
            Some(caller) => format!("{}\u{0}\u{0}caller\u{0}{caller}", self.tool),
            None => format!("{}\u{0}{}", self.tool, self.thread_id()),
        }
    }
}

/// One approval: permission to run the bound call once, before `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// Random id, 32 lowercase hex characters.
    pub grant_id: String,
    /// The request approved.
    pub request_id: String,
    /// The key of the request (and of the grant's token).
    pub key_id: String,
    /// The request's binding, lowercase hex.
    pub binding: String,
    /// Who approved (for a request that needed several approvers, the last of them).
    pub approver: String,
    /// The other distinct approvers of a request that needed several, in the order they approved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub co_approvers: Vec<String>,
    /// The approvers' signatures (operator mode: [`Operators`](crate::approval::operators::Operators)), in the
    /// order they approved; empty for unsigned approvals, which admit nothing in operator mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<DecisionSignature>,
    /// When.
    #[serde(with = "millis")]
    pub granted_at: Duration,
    /// The first instant at which the grant no longer admits.
    #[serde(with = "millis")]
    pub expires_at: Duration,
}

impl GrantRecord {
    /// Everyone who approved, in order: the co-approvers, then the approver.
    pub fn approvers(&self) -> Vec<&str> {
        self.co_approvers.iter().map(String::as_str).chain([self.approver.as_str()]).collect()
    }
}

/// One approver's yes to a request that needs several distinct approvers, before the last of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialApproval {
    /// Who approved.
    pub approver: String,
    /// When.
    #[serde(with = "millis")]
    pub approved_at: Duration,
    /// The approver's signature, if they signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<DecisionSignature>,
}

/// What an approval did ([`ApprovalLedger::grant`](super::ApprovalLedger::grant)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approved {
    /// The request holds a live grant: this approval issued it (the last one needed), or the request held
    /// one already.
    Granted(GrantRecord),
    /// The approval is recorded, and the request needs more distinct approvers before a grant is issued.
    Waiting {
        /// Who approved so far, in order.
        approvers: Vec<String>,
        /// How many distinct approvers the request needs.
        required: u32,
    },
}

impl Approved {
    /// The grant, if the request holds one now.
    pub fn into_grant(self) -> Option<GrantRecord> {
        match self {
            Approved::Granted(grant) => Some(grant),
            Approved::Waiting { .. } => None,
        }
    }
}

/// A human's no.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenialRecord {
    /// The request denied.
    pub request_id: String,
    /// Who denied it.
    pub denied_by: String,
    /// Why, in their words.
    pub reason: Option<String>,
    /// When.
    #[serde(with = "millis")]
    pub denied_at: Duration,
    /// The unspent grant this denial revoked, if there was one (filled in by the ledger).
    pub revoked_grant: Option<String>,
    /// The denier's signature, if they signed (a denial by the host closing a request is unsigned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<DecisionSignature>,
}

/// A grant that was spent: its call was admitted to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpentRecord {
    /// The grant.
    pub grant: GrantRecord,
    /// When it was spent.
    #[serde(with = "millis")]
    pub spent_at: Duration,
}

/// An attempt to spend a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendAttempt {
    /// The grant.
    pub grant_id: String,
    /// The binding of the call being admitted, lowercase hex; must equal the grant's.
    pub binding: String,
    /// Now, for the expiry check.
    pub now: Duration,
}

/// A grant of request `r` by `alice` (key `k`, binding `b`), for unit tests.
#[cfg(test)]
pub(crate) fn test_grant(grant_id: &str, granted_at: Duration, expires_at: Duration) -> GrantRecord {
    GrantRecord {
        grant_id: grant_id.into(),
        request_id: "r".into(),
        key_id: "k".into(),
        binding: "b".into(),
        approver: "alice".into(),
        co_approvers: Vec::new(),
        signatures: Vec::new(),
        granted_at,
        expires_at,
    }
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RequestStatus {
    /// Waiting for a human.
    Pending,
    /// Approved by some of the distinct approvers the request needs, waiting for the others.
    Approving {
        /// The approvals so far, in order.
        approvals: Vec<PartialApproval>,
        /// When this round began by approving a request whose grant had expired unspent: that grant, which
        /// the grant this round issues replaces (and a denial revokes). Its approvals approved it, not the
        /// next one: a new grant needs every approver again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<String>,
    },
    /// Approved; the grant may have expired (compare `expires_at` with now).
    Granted(GrantRecord),
    /// Refused by a human.
    Denied(DenialRecord),
    /// Approved and spent: the call was admitted.
    Spent(SpentRecord),
}

/// How a denied and a spent status begin as the ledgers encode them (serde writes an internally tagged enum's tag
/// first): a listing of unresolved requests passes over those rows without decoding them (redb), or leaves them
/// where they are (PostgreSQL). A status written another way is decoded.
pub(crate) const SETTLED_STATUS_PREFIXES: [&str; 2] = [r#"{"status":"denied","#, r#"{"status":"spent","#];

impl RequestStatus {
    /// Whether the request still waits for a human's decision (pending, or approved by fewer approvers than
    /// it needs).
    pub fn is_waiting(&self) -> bool {
        matches!(self, RequestStatus::Pending | RequestStatus::Approving { .. })
    }

    /// Whether the request still waits for a decision or to be resumed with one: pending, approved by fewer
    /// approvers than it needs, or granted and not spent (a grant that expired unspent included: the call
    /// holding it is still paused on it).
    pub fn is_unresolved(&self) -> bool {
        matches!(self, RequestStatus::Pending | RequestStatus::Approving { .. } | RequestStatus::Granted(_))
    }

    /// A one-word label for operators: `pending`, `approving`, `granted`, `expired`, `denied` or `spent`.
    pub fn label(&self, now: Duration) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Approving { .. } => "approving",
            RequestStatus::Granted(grant) if now >= grant.expires_at => "expired",
            RequestStatus::Granted(_) => "granted",
            RequestStatus::Denied(_) => "denied",
            RequestStatus::Spent(_) => "spent",
        }
    }
}

/// A request and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestEntry {
    /// The request as issued.
    pub request: RequestRecord,
    /// Its status.
    pub status: RequestStatus,
}

/// What became of a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GrantState {
    /// Not spent, not revoked (it may have expired).
    Live,
    /// Spent.
    Spent {
        /// When.
        #[serde(with = "millis")]
        spent_at: Duration,
    },
    /// Revoked by a denial before it was spent.
    Revoked {
        /// When.
        #[serde(with = "millis")]
        revoked_at: Duration,
    },
    /// Expired unspent and replaced when the request was approved again.
    Replaced {
        /// When.
        #[serde(with = "millis")]
        replaced_at: Duration,
        /// The grant that replaced it.
        by_grant: String,
    },
}

/// A grant and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantEntry {
    /// The grant as issued.
    pub grant: GrantRecord,
    /// Its state.
    pub state: GrantState,
}

/// Durations as whole milliseconds since the epoch, so records read well as JSON.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
