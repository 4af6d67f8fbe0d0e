//! Step 1 of the protocol, the request: bind the call, seal the request, record it as pending.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::closing::IssuedRequest;
use super::error::RequestError;
use super::mac::{self, BindingInput};
use super::message::{CallSite, InterruptRequest, REQUEST_MEMBER, REQUEST_VERSION, RequestBody};
use super::{InterruptApprovals, millis, random_id, sealed_arguments, unsealed_object};
use crate::approval::{EscalationReason, display};
use crate::canonical;
use crate::ledger::{LedgerError, RequestRecord};
use crate::mask::{MaskSet, Masker};
use crate::store::Reply;

impl InterruptApprovals {
    /// Issues a sealed request for `call`, recorded as pending, needing one approver. `rule` and `reason`
    /// say why approval is needed (e.g. `attribute` and the tool author's `escalate` text). The exact
    /// arguments are stored encrypted ([`InterruptRequest`]); a call too long to show a human in full is
    /// refused ([`RequestError::CannotShow`]) and nothing is recorded.
    pub fn request(&self, call: &BindingInput<'_>, rule: &str, reason: &str) -> Reply<InterruptRequest, RequestError> {
        self.request_approved_by(call, rule, reason, 1)
    }

    /// [`InterruptApprovals::request`] for a call that `approvals` distinct approvers must approve before
    /// the grant is issued (a policy's `approvals = N`; 0 counts as 1). It is sealed into the request, so
    /// nobody can lower it.
    ///
    /// The interrupt value the host checkpoints and the ledger's record hold the exact arguments only
    /// encrypted; the binding covers them (through their digest, `arguments_sha256`), so the resumed call
    /// must carry exactly them, and a human is shown exactly them ([`InterruptRequest::render`]).
    pub fn request_approved_by(
        &self,
        call: &BindingInput<'_>,
        rule: &str,
        reason: &str,
        approvals: u32,
    ) -> Reply<InterruptRequest, RequestError> {
        match self.prepare_request(call, None, rule, reason, approvals) {
            Ok((request, record)) => self
                .ledger
                .record_request(record, self.max_pending)
                .then(move |recorded| recorded.map(|()| request).map_err(RequestError::Ledger), request_writer_stopped),
            Err(error) => Reply::ready_or(Err(error), request_writer_stopped),
        }
    }

    /// [`InterruptApprovals::request_approved_by`]; `masker` and `mask` are ignored. Requests used to store
    /// their arguments masked, which showed the approver something other than what the grant covers; they
    /// now store the exact arguments encrypted.
    #[deprecated(note = "use `request_approved_by`: a request no longer stores masked arguments")]
    pub fn request_masked(
        &self,
        call: &BindingInput<'_>,
        rule: &str,
        reason: &str,
        _masker: &Masker,
        _mask: MaskSet,
        approvals: u32,
    ) -> Reply<InterruptRequest, RequestError> {
        self.request_approved_by(call, rule, reason, approvals)
    }

    /// [`InterruptApprovals::request_approved_by`] for the dispatcher: with the guard that closes the request
    /// if the dispatch is dropped before the interrupt reaches the host, armed from before the write. The
    /// pending limit counts by `caller` when the call names one.
    pub(crate) async fn request_issued(
        &self,
        call: &BindingInput<'_>,
        caller: Option<&str>,
        rule: &str,
        reason: &str,
        approvals: u32,
    ) -> Result<(InterruptRequest, IssuedRequest), RequestError> {
        let (request, record) = self.prepare_request(call, caller, rule, reason, approvals)?;
        let issued = self.issued(request.request_id());
        match self.ledger.record_request(record, self.max_pending).await {
            Ok(()) => Ok((request, issued)),
            // The write may have happened: the guard closes what may be there.
            Err(error @ LedgerError::WriterStopped) => Err(RequestError::Ledger(error)),
            Err(error) => {
                issued.not_recorded();
                Err(RequestError::Ledger(error))
            }
        }
    }

    fn prepare_request(
        &self,
        call: &BindingInput<'_>,
        caller: Option<&str>,
        rule: &str,
        reason: &str,
        approvals: u32,
    ) -> Result<(InterruptRequest, RequestRecord), RequestError> {
        let key = self.keys.current();
        let exact = Value::Object(call.arguments.clone());
        // A human is never asked about what they cannot be shown whole: refuse before recording anything.
        let reasons = [EscalationReason { rule: rule.to_owned(), reason: reason.to_owned() }];
        display::render_call(call.tool, &reasons, &exact).map_err(RequestError::CannotShow)?;
        let plaintext = Zeroizing::new(canonical::to_canonical_vec(&exact).map_err(RequestError::Arguments)?);
        let arguments_digest: [u8; 32] = Sha256::digest(plaintext.as_slice()).into();
        let binding = mac::binding_of_digest(key, call, &arguments_digest);
        let request_id = random_id().map_err(RequestError::Randomness)?;
        let sealed = sealed_arguments::seal(key, &request_id, &plaintext).map_err(RequestError::Randomness)?;
        let now = self.clock.now();
        let body = RequestBody {
            version: REQUEST_VERSION,
            request_id,
            key_id: key.id().to_owned(),
            tool: call.tool.to_owned(),
            rule: rule.to_owned(),
            reason: reason.to_owned(),
            arguments: call.arguments.clone(),
            sealed_arguments: Some(sealed),
            arguments_sha256: Some(hex::encode(arguments_digest)),
            call: CallSite {
                thread_id: call.thread_id.to_owned(),
                checkpoint_ns: call.checkpoint_ns.to_owned(),
                checkpoint: call.checkpoint.clone(),
                tool_call_id: call.tool_call_id.to_owned(),
            },
            requested_at_ms: millis(now),
            expires_at_ms: self.request_ttl.map(|ttl| millis(now.saturating_add(ttl))),
            approvals: approvals.max(1),
            binding: binding.to_hex(),
            seal: String::new(),
        };
        let mut object = unsealed_object(&body);
        let canonical = canonical::to_canonical_vec(&Value::Object(object.clone())).map_err(RequestError::Arguments)?;
        let seal = hex::encode(mac::seal(key, &canonical));
        object.insert("seal".to_owned(), Value::String(seal.clone()));
        let body = RequestBody { seal, ..body };
        let value = json!({ REQUEST_MEMBER: Value::Object(object) });
        let record = RequestRecord {
            request_id: body.request_id.clone(),
            key_id: body.key_id.clone(),
            tool: body.tool.clone(),
            rule: body.rule.clone(),
            reason: body.reason.clone(),
            binding: body.binding.clone(),
            requested_at: now,
            interrupt: value.clone(),
            caller: caller.map(str::to_owned),
        };
        Ok((InterruptRequest { body, value }, record))
    }
}

/// What a reply of a request answers when polled again after its answer was taken.
pub(super) fn request_writer_stopped() -> RequestError {
    RequestError::Ledger(LedgerError::WriterStopped)
}
