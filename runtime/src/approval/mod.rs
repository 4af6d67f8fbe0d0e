//! Everything about a human's approval of an escalated call, one concept a file:
//!
//! - `approver`: the request a human sees during the call, the [`Approver`] callback and its [`Decision`];
//! - `display`: how a call is shown to a human, whole and with hidden characters escaped;
//! - `protocol`: the durable approval protocol across an interrupt ([`InterruptApprovals`]): binding, seal,
//!   token, the key ring, and the messages a host stores and resumes with;
//! - `operators`: who may approve: operators' signing keys, the operators file, decision signatures.

mod approver;
pub mod display;
pub mod operators;
pub(crate) mod protocol;

pub use self::approver::{ApprovalRequest, Approver, Decision, EscalationReason};
pub(crate) use self::operators::ledger_credential;
pub use self::protocol::{
    Admission, AdmitError, Binding, BindingField, BindingInput, CallSite, DEFAULT_CLOSING_PATIENCE,
    DEFAULT_MAX_PENDING, DecisionError, DecisionSigner, InterruptApprovals, InterruptRequest, KeyLookupError, KeyRing,
    RequestError, ResumeValue, RetiredKeys, ShowError,
};
