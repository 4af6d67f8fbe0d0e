//! Step 2 of the protocol, the decision: check a stored request, then record a grant or a denial (signed by
//! an operator, or not), and read a decision recorded elsewhere.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::error::{AdmitError, DecisionError, decision_ledger_error};
use super::key_ring::KeyLookupError;
use super::mac::{self, Binding};
use super::message::{
    GRANT_MEMBER, InterruptRequest, REQUEST_MEMBER, REQUEST_VERSION, REQUEST_VERSION_MASKED, REQUEST_VERSION_UNMASKED,
    RequestBody, ResumeValue, denied_resume,
};
use super::{DecisionSigner, InterruptApprovals, closing, random_id, sealed_arguments};
use crate::approval::operators::{DecisionKind, DecisionSubject};
use crate::canonical;
use crate::keys::{MAC_LEN, decode_lower_hex};
use crate::ledger::{Approved, DenialRecord, GrantRecord, LedgerError, RequestStatus};
use crate::store::Reply;

impl InterruptApprovals {
    /// Checks a stored interrupt value: its shape, its key, its seal (in constant time) and its binding.
    /// Touches no ledger; [`InterruptApprovals::approve`] and [`InterruptApprovals::deny`] start with it.
    pub fn verify_request(&self, interrupt: &Value) -> Result<InterruptRequest, DecisionError> {
        let Some(outer) = interrupt.as_object().filter(|outer| outer.len() == 1) else {
            return Err(DecisionError::NotARequest);
        };
        let Some(inner) = outer.get(REQUEST_MEMBER).and_then(Value::as_object) else {
            return Err(DecisionError::NotARequest);
        };
        let key_id = string_member(inner, "key_id")?;
        let key = self.keys.find(key_id).map_err(|err| match err {
            KeyLookupError::Retired { key_id } => DecisionError::RetiredKey { key_id },
            KeyLookupError::Unknown { key_id } => DecisionError::UnknownKey { key_id },
        })?;
        let seal = decode_lower_hex::<MAC_LEN>(string_member(inner, "seal")?).ok_or_else(|| {
            DecisionError::Malformed { detail: "`seal` is not 64 lowercase hex characters".to_owned() }
        })?;
        let mut unsealed = inner.clone();
        unsealed.remove("seal");
        let canonical = canonical::to_canonical_vec(&Value::Object(unsealed))
            .map_err(|err| DecisionError::Malformed { detail: err.to_string() })?;
        if !mac::verify_seal(key, &canonical, &seal) {
            return Err(DecisionError::SealMismatch);
        }
        // Sealed by this key: from here on the content is our own. Each version is read as its own layout,
        // never one as another.
        if let Some(version) = inner
            .get("version")
            .and_then(Value::as_u64)
            .filter(|v| ![REQUEST_VERSION, REQUEST_VERSION_MASKED, REQUEST_VERSION_UNMASKED].contains(v))
        {
            return Err(DecisionError::UnsupportedVersion { version });
        }
        let mut body: RequestBody = serde_json::from_value(Value::Object(inner.clone()))
            .map_err(|err| DecisionError::Malformed { detail: err.to_string() })?;
        let malformed = |detail: &str| DecisionError::Malformed { detail: detail.to_owned() };
        if body.version == REQUEST_VERSION {
            if inner.contains_key("arguments") {
                return Err(malformed("a version-3 request holds no plaintext `arguments`"));
            }
            let sealed = body.sealed_arguments.as_deref().ok_or_else(|| malformed("`sealed_arguments` is missing"))?;
            let plaintext =
                sealed_arguments::open(key, &body.request_id, sealed).map_err(|detail| malformed(&detail))?;
            body.arguments = serde_json::from_slice(&plaintext)
                .map_err(|_| malformed("`sealed_arguments` does not hold an object of arguments"))?;
        } else {
            if body.sealed_arguments.is_some() {
                return Err(malformed("only a version-3 request holds `sealed_arguments`"));
            }
            if !inner.contains_key("arguments") {
                return Err(malformed("`arguments` is missing"));
            }
        }
        let digest = body.arguments_digest().map_err(|detail| DecisionError::Malformed { detail })?;
        let binding = mac::binding_of_digest(key, &body.binding_input(), &digest);
        if binding.to_hex() != body.binding {
            return Err(DecisionError::InconsistentBinding);
        }
        Ok(InterruptRequest { body, value: interrupt.clone() })
    }

    /// Approves a request (given as the stored interrupt value): checks the seal first, records a grant
    /// valid for the grant time-to-live, and returns the resume value. Approving a request that holds a
    /// live grant returns that grant's resume value again (one approval, one grant), so a host that lost
    /// the resume value can recover it.
    ///
    /// In operator mode ([`with_operators`](Self::with_operators)) an unsigned approval is refused
    /// ([`DecisionError::SignatureRequired`]): use [`approve_signed`](Self::approve_signed).
    pub fn approve(&self, interrupt: &Value, approver: &str) -> Reply<ResumeValue, DecisionError> {
        let prepared = self.require_unsigned_allowed().and_then(|()| self.prepare_grant(interrupt, approver, None));
        self.record_grant(prepared)
    }

    /// [`approve`](Self::approve), signed by `signer`: the grant (or, for a request that needs several
    /// approvers, this approval) carries a [`DecisionSignature`](crate::approval::operators::DecisionSignature) over the request id, its binding, the
    /// number of approvals it needs, the approver's name and the time, which a host in operator mode
    /// verifies before the grant admits anything.
    pub fn approve_signed(&self, interrupt: &Value, signer: DecisionSigner<'_>) -> Reply<ResumeValue, DecisionError> {
        let prepared = self.prepare_grant(interrupt, signer.name(), Some(signer)).and_then(|(request, grant)| {
            self.refuse_a_credential_counted_already(&request, &grant).map(|()| (request, grant))
        });
        self.record_grant(prepared)
    }

    /// Operator mode: an approval by a credential the operators count as one that already approved this
    /// round (alice's key, then alice's account attested by a console) is answered as an approver who
    /// approved twice is, and not recorded. The ledger tells credentials apart by key and account alone: a
    /// grant it issued on such an approval would carry too few signatures to admit anything, and would hold
    /// the request until it expired.
    fn refuse_a_credential_counted_already(
        &self,
        request: &InterruptRequest,
        grant: &GrantRecord,
    ) -> Result<(), DecisionError> {
        let (Some(operators), Some(signature)) = (&self.operators, grant.signatures.first()) else {
            return Ok(());
        };
        let status = self.ledger.find_request(&grant.request_id).map_err(decision_ledger_error)?.map(|e| e.status);
        let Some(RequestStatus::Approving { approvals, .. }) = status else {
            return Ok(());
        };
        let subject = DecisionSubject {
            kind: DecisionKind::Grant,
            request_id: &request.body.request_id,
            binding: &request.body.binding,
            approvals: request.body.approvals,
        };
        let mut signatures: Vec<_> = approvals.iter().filter_map(|approval| approval.signature.clone()).collect();
        let before = operators.count(&signatures, &subject).credentials;
        signatures.push(signature.clone());
        let counted_alone = operators.count(std::slice::from_ref(signature), &subject).credentials == 1;
        if !counted_alone || operators.count(&signatures, &subject).credentials > before {
            return Ok(());
        }
        Err(DecisionError::MoreApproversNeeded {
            approvers: approvals.into_iter().map(|approval| approval.approver).collect(),
            required: request.body.approvals,
        })
    }

    fn record_grant(
        &self,
        prepared: Result<(InterruptRequest, GrantRecord), DecisionError>,
    ) -> Reply<ResumeValue, DecisionError> {
        match prepared {
            Ok((request, grant)) => {
                let approvals = self.clone();
                self.ledger
                    .grant(grant, self.clock.now())
                    .then(move |granted| approvals.finish_grant(&request, granted), decision_writer_stopped)
            }
            Err(error) => Reply::ready_or(Err(error), decision_writer_stopped),
        }
    }

    fn require_unsigned_allowed(&self) -> Result<(), DecisionError> {
        match self.operators {
            Some(_) => Err(DecisionError::SignatureRequired),
            None => Ok(()),
        }
    }

    fn prepare_grant(
        &self,
        interrupt: &Value,
        approver: &str,
        signer: Option<DecisionSigner<'_>>,
    ) -> Result<(InterruptRequest, GrantRecord), DecisionError> {
        let request = self.verify_request(interrupt)?;
        if approver.trim().is_empty() {
            return Err(DecisionError::MissingDecider);
        }
        // What the approver could not have been shown exactly and whole, nobody approves.
        request.render().map_err(DecisionError::CannotShow)?;
        let now = self.clock.now();
        if let Some(expires_at) = request.expires_at()
            && now >= expires_at
        {
            return Err(DecisionError::RequestExpired { expired_at: expires_at });
        }
        let subject = DecisionSubject {
            kind: DecisionKind::Grant,
            request_id: &request.body.request_id,
            binding: &request.body.binding,
            approvals: request.body.approvals,
        };
        let expires_at = now.saturating_add(self.grant_ttl);
        let signatures = match signer {
            Some(signer) => vec![signer.sign(&subject, now, Some(expires_at))?],
            None => Vec::new(),
        };
        let grant = GrantRecord {
            grant_id: random_id().map_err(DecisionError::Randomness)?,
            request_id: request.body.request_id.clone(),
            key_id: request.body.key_id.clone(),
            binding: request.body.binding.clone(),
            approver: approver.to_owned(),
            co_approvers: Vec::new(),
            signatures,
            granted_at: now,
            expires_at,
        };
        Ok((request, grant))
    }

    fn finish_grant(
        &self,
        request: &InterruptRequest,
        granted: Result<Approved, LedgerError>,
    ) -> Result<ResumeValue, DecisionError> {
        let grant = match granted.map_err(decision_ledger_error)? {
            Approved::Granted(grant) => grant,
            Approved::Waiting { approvers, required } => {
                return Err(DecisionError::MoreApproversNeeded { approvers, required });
            }
        };
        // Operator mode: the host mints a token only for a grant enough listed operators signed.
        if let Err(detail) = self.verify_grant_signatures(&grant, &request.body.binding, request.body.approvals) {
            tracing::warn!(
                target: "agent_airlock", request_id = %grant.request_id, grant_id = %grant.grant_id, %detail,
                "a recorded approval is not signed by enough operators; it admits nothing"
            );
            return Err(DecisionError::UnsignedGrant { grant_id: grant.grant_id, detail });
        }
        let key = self.keys.find(&grant.key_id).map_err(|err| match err {
            KeyLookupError::Retired { key_id } => DecisionError::RetiredKey { key_id },
            KeyLookupError::Unknown { key_id } => DecisionError::UnknownKey { key_id },
        })?;
        let binding = decode_lower_hex::<MAC_LEN>(&request.body.binding)
            .map(Binding)
            .ok_or(DecisionError::InconsistentBinding)?;
        let token = hex::encode(mac::token(key, &binding, &grant.grant_id));
        Ok(ResumeValue(json!({
            GRANT_MEMBER: { "key_id": grant.key_id, "grant_id": grant.grant_id, "token": token }
        })))
    }

    /// Records a human's no (the seal is checked first). An unspent grant of the request is revoked (and,
    /// with a [revocation log](Self::with_revocation_log), recorded revoked there first).
    /// Returns the resume value that tells the call it was denied.
    pub fn deny(&self, interrupt: &Value, denied_by: &str, reason: Option<&str>) -> Reply<ResumeValue, DecisionError> {
        let denial = self.require_unsigned_allowed().and_then(|()| self.prepare_denial(interrupt, denied_by, reason));
        self.record_denial(denial)
    }

    /// [`deny`](Self::deny), signed by `signer` (recorded with the denial, so who denied is attributable).
    pub fn deny_signed(
        &self,
        interrupt: &Value,
        signer: DecisionSigner<'_>,
        reason: Option<&str>,
    ) -> Reply<ResumeValue, DecisionError> {
        self.record_denial(self.prepare_signed_denial(interrupt, signer, reason))
    }

    fn record_denial(
        &self,
        denial: Result<(DenialRecord, RequestBody), DecisionError>,
    ) -> Reply<ResumeValue, DecisionError> {
        match denial {
            Ok((denial, request)) => match &self.revocations {
                Some(log) => self.revoke_and_deny(log, request.binding, denial),
                None => self.ledger.deny(denial).then(
                    |denied| denied.map(|denied| denied_resume(&denied)).map_err(decision_ledger_error),
                    decision_writer_stopped,
                ),
            },
            Err(error) => Reply::ready_or(Err(error), decision_writer_stopped),
        }
    }

    fn prepare_signed_denial(
        &self,
        interrupt: &Value,
        signer: DecisionSigner<'_>,
        reason: Option<&str>,
    ) -> Result<(DenialRecord, RequestBody), DecisionError> {
        let (mut denial, request) = self.prepare_denial(interrupt, signer.name(), reason)?;
        let subject = DecisionSubject {
            kind: DecisionKind::Deny,
            request_id: &request.request_id,
            binding: &request.binding,
            approvals: request.approvals,
        };
        denial.signature = Some(signer.sign(&subject, denial.denied_at, None)?);
        Ok((denial, request))
    }

    /// The denial of the request `interrupt` holds (its seal checked), and the sealed request.
    pub(super) fn prepare_denial(
        &self,
        interrupt: &Value,
        denied_by: &str,
        reason: Option<&str>,
    ) -> Result<(DenialRecord, RequestBody), DecisionError> {
        let request = self.verify_request(interrupt)?;
        if denied_by.trim().is_empty() {
            return Err(DecisionError::MissingDecider);
        }
        let denial = DenialRecord {
            request_id: request.body.request_id.clone(),
            denied_by: denied_by.to_owned(),
            reason: reason.map(str::to_owned),
            denied_at: self.clock.now(),
            revoked_grant: None,
            signature: None,
        };
        Ok((denial, request.body))
    }

    /// The decision recorded for a request (given as its interrupt value, seal checked first), by this
    /// process or another sharing the ledger (`airlock approve` or `airlock deny`): the resume value to
    /// resume its call with, or `None` while it waits (pending, or approved by fewer distinct approvers than
    /// it needs). Records nothing, so a host waiting for an
    /// operator polls with it; the grant's expiry and single use are checked when the call is admitted.
    /// Blocks the current thread on the ledger (from async code, call it in `spawn_blocking`).
    pub fn recorded_decision_blocking(&self, interrupt: &Value) -> Result<Option<ResumeValue>, DecisionError> {
        let request = self.verify_request(interrupt)?;
        let request_id = &request.body.request_id;
        let entry = self
            .ledger
            .find_request(request_id)
            .map_err(decision_ledger_error)?
            .ok_or_else(|| DecisionError::UnknownRequest { request_id: request_id.clone() })?;
        match entry.status {
            // Approved by fewer distinct approvers than it needs: still waiting.
            RequestStatus::Pending | RequestStatus::Approving { .. } => Ok(None),
            RequestStatus::Granted(grant) => {
                // A grant recorded for another request (or another binding) is never this call's.
                if grant.request_id != *request_id || grant.binding != request.body.binding {
                    return Err(DecisionError::InconsistentBinding);
                }
                self.finish_grant(&request, Ok(Approved::Granted(grant))).map(Some)
            }
            RequestStatus::Denied(denial) => {
                // A denial admits nothing, so one that is not signed still refuses the call (whoever can
                // write the ledger can deny service anyway); in operator mode it is reported.
                self.report_unsigned_denial(&denial, &request);
                Ok(Some(denied_resume(&denial)))
            }
            RequestStatus::Spent(spent) => {
                Err(DecisionError::AlreadySpent { grant_id: spent.grant.grant_id, spent_at: spent.spent_at })
            }
        }
    }

    /// Operator mode: a denial that is neither the host's own closing nor validly signed is reported.
    fn report_unsigned_denial(&self, denial: &DenialRecord, request: &InterruptRequest) {
        let Some(operators) = &self.operators else { return };
        if denial.denied_by == closing::CLOSED_BY && denial.signature.is_none() {
            return;
        }
        let subject = DecisionSubject {
            kind: DecisionKind::Deny,
            request_id: &request.body.request_id,
            binding: &request.body.binding,
            approvals: request.body.approvals,
        };
        let count = operators.count(denial.signature.as_slice(), &subject);
        if count.credentials == 0 {
            let detail = if count.problems.is_empty() { "unsigned".to_owned() } else { count.problems.join("; ") };
            tracing::warn!(
                target: "agent_airlock", request_id = %denial.request_id, %detail,
                "a recorded denial is not signed by a listed operator; the call is refused all the same"
            );
        }
    }

    /// Operator mode: whether `grant` is signed by as many distinct listed, unrevoked credentials as
    /// `approvals`, for the request and binding it names; when it is, the grant expiry its latest valid signature
    /// signs (`None` for a signature made before expiries were signed). Outside operator mode every grant passes,
    /// with `None`.
    fn verify_grant_signatures(
        &self,
        grant: &GrantRecord,
        binding: &str,
        approvals: u32,
    ) -> Result<Option<u64>, String> {
        let Some(operators) = &self.operators else { return Ok(None) };
        if grant.binding != binding {
            return Err("the grant names another binding".to_owned());
        }
        let subject = DecisionSubject { kind: DecisionKind::Grant, request_id: &grant.request_id, binding, approvals };
        let count = operators.count(&grant.signatures, &subject);
        let needed = approvals.max(1);
        if count.credentials >= needed {
            return Ok(count.signed_expiry_ms);
        }
        let mut detail = format!("{} of {needed} distinct operator credential(s) signed it", count.credentials);
        if grant.signatures.is_empty() {
            detail.push_str(" (it carries no signature)");
        }
        for problem in count.problems {
            detail.push_str("; ");
            detail.push_str(&problem);
        }
        Err(detail)
    }

    /// Operator mode, before a spend: the grant the token names must be recorded for a request sealed
    /// under our key whose binding is this call's, and signed by enough operators. Returns that grant.
    pub(super) fn verified_grant(
        &self,
        grant_id: &str,
        binding: &Binding,
    ) -> Result<Option<Box<GrantRecord>>, AdmitError> {
        if self.operators.is_none() {
            return Ok(None);
        }
        let unsigned = |detail: String| {
            tracing::warn!(
                target: "agent_airlock", %grant_id, %detail,
                "a resumed call's grant is not signed by enough operators; it admits nothing"
            );
            AdmitError::UnsignedGrant { grant_id: grant_id.to_owned(), detail }
        };
        let grant = match self.ledger.find_grant(grant_id) {
            Ok(Some(entry)) => entry.grant,
            Ok(None) => return Err(AdmitError::UnknownGrant { grant_id: grant_id.to_owned() }),
            Err(err) => return Err(AdmitError::Ledger(err)),
        };
        let entry = match self.ledger.find_request(&grant.request_id) {
            Ok(Some(entry)) => entry,
            Ok(None) => return Err(unsigned("the grant's request is not in the ledger".to_owned())),
            Err(err) => return Err(AdmitError::Ledger(err)),
        };
        // The number of approvals needed is read from the sealed request, never from the ledger's copy.
        let request = self
            .verify_request(&entry.request.interrupt)
            .map_err(|err| unsigned(format!("the grant's request does not verify: {err}")))?;
        let call_binding = binding.to_hex();
        if request.body.request_id != grant.request_id || request.body.binding != call_binding {
            return Err(unsigned("the grant's request is not this call's".to_owned()));
        }
        let signed_expiry =
            self.verify_grant_signatures(&grant, &call_binding, request.body.approvals).map_err(unsigned)?;
        // The expiry the ledger keeps is the database's to change: the one the operators signed bounds the grant.
        if let Some(expired_at) = signed_expiry.map(Duration::from_millis)
            && self.clock.now() >= expired_at
        {
            return Err(AdmitError::Expired { grant_id: grant_id.to_owned(), expired_at });
        }
        Ok(Some(Box::new(grant)))
    }
}

/// What a reply of a decision answers when polled again after its answer was taken.
pub(super) fn decision_writer_stopped() -> DecisionError {
    DecisionError::Ledger(LedgerError::WriterStopped)
}

pub(super) fn string_member<'a>(object: &'a Map<String, Value>, name: &str) -> Result<&'a str, DecisionError> {
    object
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| DecisionError::Malformed { detail: format!("`{name}` is missing or not a string") })
}
