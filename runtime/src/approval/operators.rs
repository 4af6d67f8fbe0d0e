//! Who may approve: one Ed25519 key pair per operator, and the operators file hosts read.
//!
//! The shared approval key binds and seals requests; whoever holds it (or can write the ledger) could
//! record a grant, so in *operator mode* ([`InterruptApprovals::with_operators`]) a recorded decision
//! counts only if it carries a valid signature by a key the operators file lists:
//!
//! - each operator holds a [`OperatorKey`] of their own (`airlock operators add NAME` writes it, mode 0600,
//!   and appends its public key to the operators file);
//! - every grant and denial an operator records carries a [`DecisionSignature`] over a domain-separated
//!   message (`agent-airlock/decision/v1` NUL, then the canonical JSON of the decision kind, request id,
//!   binding, approvals needed, operator name, whether it is an attestation, and the time signed);
//! - the host verifies every signature against [`Operators`] before a grant admits anything, and counts
//!   `approvals = N` in distinct credentials ([`Operators::count`]): one key used under two names is one
//!   approval;
//! - a console holds a key of its own, listed with `role = "console"`: it signs *attestations* for the
//!   operator who signed in to it. Distinct accounts attested by a listed console key count, each once,
//!   and an attested account that is also the name of a key that signed counts once;
//! - a revoked key (`revoked = true`, `airlock operators revoke NAME`) counts for nothing, in decisions
//!   signed before or after it was revoked.
//!
//! [`InterruptApprovals::with_operators`]: super::InterruptApprovals::with_operators

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::json;
use zeroize::Zeroizing;

use crate::canonical;

/// What every decision signature is over, before the decision's canonical JSON: no other message this
/// library signs begins with it.
pub const DECISION_DOMAIN: &[u8] = b"agent-airlock/decision/v1\0";

/// How a public key is written in the operators file and in ledger rows: `ed25519:` and 64 lowercase hex.
const KEY_PREFIX: &str = "ed25519:";

/// A decision a signature covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionKind {
    /// An approval.
    Grant,
    /// A denial.
    Deny,
}

impl DecisionKind {
    fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Grant => "grant",
            DecisionKind::Deny => "deny",
        }
    }
}

/// What a decision signature covers, besides who signed: the request and its binding, the number of
/// approvals it needs, and the decision.
#[derive(Debug, Clone, Copy)]
pub struct DecisionSubject<'a> {
    /// Approve or deny.
    pub kind: DecisionKind,
    /// The request decided.
    pub request_id: &'a str,
    /// The request's binding, lowercase hex.
    pub binding: &'a str,
    /// How many distinct approvers the request needs.
    pub approvals: u32,
}

/// One operator's signature on a decision, as recorded in the ledger with the grant or denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionSignature {
    /// The operator the decision is signed for: the key's own name, or, for an attestation, the account
    /// signed in to the console.
    pub operator: String,
    /// The public key that signed, `ed25519:<64 hex>`.
    pub key: String,
    /// Signed by a console key for the operator signed in to it (an attestation).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attested: bool,
    /// When it was signed, in milliseconds since the Unix epoch.
    pub signed_at_ms: u64,
    /// For an approval: when the grant it approves expires, as the approving host set it (milliseconds since
    /// the Unix epoch). Signed with the rest, so whoever writes the database cannot push a grant's expiry out:
    /// a host admits a signed grant only until the expiry its latest valid signature signs. Absent from a
    /// denial, and from signatures made before it was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The Ed25519 signature, 128 lowercase hex characters.
    pub signature: String,
}

/// Why an operator key or the operators file could not be used. Never contains key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// Reading or writing a file failed.
    #[error("{what} `{path}`: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists: keys are never overwritten.
    #[error("`{path}` already exists; an operator key is never overwritten (remove it first, or choose another path)")]
    Exists {
        /// The file.
        path: String,
    },
    /// The file's content is not what it should be.
    #[error("`{origin}` is not valid: {detail}")]
    Invalid {
        /// The file (or text) read.
        origin: String,
        /// What is wrong.
        detail: String,
    },
    /// The system random source failed.
    #[error("the system random source failed: {0}")]
    Randomness(String),
}

/// An operator's private signing key, and the name it signs as. Its `Debug` shows the name and public
/// key only.
pub struct OperatorKey {
    name: String,
    signing: SigningKey,
}

impl fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorKey").field("name", &self.name).field("key", &self.key_id()).finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    name: String,
    secret: String,
}

impl OperatorKey {
    /// A new key for `name`, from the system random source.
    pub fn generate(name: &str) -> Result<Self, OperatorError> {
        check_name(name, "the operator's name")?;
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).map_err(|err| OperatorError::Randomness(err.to_string()))?;
        Ok(OperatorKey { name: name.to_owned(), signing: SigningKey::from_bytes(&seed) })
    }

    /// The name this key signs as.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public key, `ed25519:<64 hex>`, as the operators file lists it.
    pub fn key_id(&self) -> String {
        key_text(&self.signing.verifying_key())
    }

    /// Writes the key to a new file readable by its owner only (mode 0600 on Unix); an existing file is
    /// never overwritten ([`OperatorError::Exists`]).
    pub fn write_new(&self, path: &Path) -> Result<(), OperatorError> {
        use std::io::Write as _;
        let text = Zeroizing::new(format!(
            "# agent-airlock operator signing key: private to its operator, never share or commit it\n{}",
            toml::to_string(&KeyFile {
                name: self.name.clone(),
                secret: format!("{KEY_PREFIX}{}", hex::encode(self.signing.to_bytes())),
            })
            .map_err(|err| OperatorError::Invalid { origin: path.display().to_string(), detail: err.to_string() })?
        ));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => OperatorError::Exists { path: path.display().to_string() },
            _ => OperatorError::Io { what: "creating the key file", path: path.display().to_string(), source },
        })?;
        file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(|source| OperatorError::Io {
            what: "writing the key file",
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a key written by [`write_new`](Self::write_new).
    pub fn from_file(path: &Path) -> Result<Self, OperatorError> {
        let origin = || path.display().to_string();
        let text = std::fs::read_to_string(path).map(Zeroizing::new).map_err(|source| OperatorError::Io {
            what: "reading the key file",
            path: origin(),
            source,
        })?;
        let invalid = |detail: &str| OperatorError::Invalid { origin: origin(), detail: detail.to_owned() };
        // The parser's message could quote the secret: it is not passed on.
        let file: KeyFile =
            toml::from_str(&text).map_err(|_| invalid("not an operator key file (`name`, `secret`)"))?;
        let secret = Zeroizing::new(file.secret);
        check_name(&file.name, "`name`").map_err(|_| invalid("`name` is empty or holds control characters"))?;
        let hex_seed =
            secret.strip_prefix(KEY_PREFIX).ok_or_else(|| invalid("`secret` does not start with `ed25519:`"))?;
        let seed = crate::keys::decode_lower_hex::<32>(hex_seed)
            .map(Zeroizing::new)
            .ok_or_else(|| invalid("`secret` is not `ed25519:` and 64 lowercase hex characters"))?;
        Ok(OperatorKey { name: file.name, signing: SigningKey::from_bytes(&seed) })
    }

    /// Signs `subject` for `operator` (this key's own name, or, with `attested`, the account a console
    /// authenticated), at `signed_at_ms`.
    pub fn sign(
        &self,
        subject: &DecisionSubject<'_>,
        operator: &str,
        attested: bool,
        signed_at_ms: u64,
    ) -> Result<DecisionSignature, OperatorError> {
        self.sign_until(subject, operator, attested, signed_at_ms, None)
    }

    /// [`sign`](Self::sign), the signature also covering when the grant it approves expires
    /// ([`DecisionSignature::expires_at_ms`]): what a host signs for an approval.
    pub fn sign_until(
        &self,
        subject: &DecisionSubject<'_>,
        operator: &str,
        attested: bool,
        signed_at_ms: u64,
        expires_at_ms: Option<u64>,
    ) -> Result<DecisionSignature, OperatorError> {
        let message = decision_message(subject, operator, attested, signed_at_ms, expires_at_ms)
            .map_err(|detail| OperatorError::Invalid { origin: "the decision".to_owned(), detail })?;
        let signature = self.signing.sign(&message);
        Ok(DecisionSignature {
            operator: operator.to_owned(),
            key: self.key_id(),
            attested,
            signed_at_ms,
            expires_at_ms,
            signature: hex::encode(signature.to_bytes()),
        })
    }
}

fn check_name(name: &str, what: &str) -> Result<(), OperatorError> {
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(OperatorError::Invalid {
            origin: what.to_owned(),
            detail: "a name must be non-empty and hold no control characters".to_owned(),
        });
    }
    Ok(())
}

fn key_text(key: &VerifyingKey) -> String {
    format!("{KEY_PREFIX}{}", hex::encode(key.as_bytes()))
}

fn parse_key(text: &str) -> Option<VerifyingKey> {
    let bytes = crate::keys::decode_lower_hex::<32>(text.strip_prefix(KEY_PREFIX)?)?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// The bytes a decision signature is over: [`DECISION_DOMAIN`], then canonical JSON.
fn decision_message(
    subject: &DecisionSubject<'_>,
    operator: &str,
    attested: bool,
    signed_at_ms: u64,
    expires_at_ms: Option<u64>,
) -> Result<Vec<u8>, String> {
    let mut body = json!({
        "kind": subject.kind.as_str(),
        "request_id": subject.request_id,
        "binding": subject.binding,
        "approvals": subject.approvals,
        "operator": operator,
        "attested": attested,
        "signed_at_ms": signed_at_ms,
    });
    // Only when signed: a signature made without it verifies over the message it was made over.
    if let (Some(expires_at_ms), Some(object)) = (expires_at_ms, body.as_object_mut()) {
        object.insert("expires_at_ms".to_owned(), expires_at_ms.into());
    }
    let mut message = DECISION_DOMAIN.to_vec();
    message.extend(canonical::to_canonical_vec(&body).map_err(|err| err.to_string())?);
    Ok(message)
}

/// What a listed key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorRole {
    /// A person's own key: its signatures count as its own credential.
    #[default]
    Operator,
    /// A console's key: it signs attestations for the accounts signed in to it, each counted once.
    Console,
}

/// One `[[operator]]` entry of the operators file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorEntry {
    /// The operator's (or console's) name.
    pub name: String,
    /// The public key, `ed25519:<64 hex>`.
    pub key: String,
    /// A person's key or a console's.
    #[serde(default, skip_serializing_if = "is_operator")]
    pub role: OperatorRole,
    /// Revoked: its signatures, past and future, count for nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
}

fn is_operator(role: &OperatorRole) -> bool {
    *role == OperatorRole::Operator
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OperatorsFile {
    #[serde(default)]
    operator: Vec<OperatorEntry>,
}

/// The operators file (TOML) a host checks decisions against:
///
/// ```toml
/// [[operator]]
/// name = "alice"
/// key = "ed25519:<64 hex>"
///
/// [[operator]]
/// name = "console"
/// key = "ed25519:<64 hex>"
/// role = "console"
///
/// [[operator]]
/// name = "mallory"
/// key = "ed25519:<64 hex>"
/// revoked = true
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operators {
    entries: Vec<OperatorEntry>,
}

/// A verified signature's credential, for counting distinct approvers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Credential {
    /// An operator's own key.
    Key(String),
    /// An account a listed console attested.
    Account(String),
}

/// How many distinct credentials signed a decision validly, and what was wrong with the rest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SignatureCount {
    /// Distinct credentials with a valid signature.
    pub credentials: u32,
    /// Why each other signature counted for nothing.
    pub problems: Vec<String>,
    /// The grant expiry signed by the latest of the valid signatures ([`DecisionSignature::expires_at_ms`]; `None`
    /// if it signs none): a grant is issued by its last approval, with that approval's expiry, so a host bounds
    /// the grant's life by what the operators signed rather than by the expiry the ledger keeps.
    pub signed_expiry_ms: Option<u64>,
}

impl Operators {
    /// Parses an operators file's text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, OperatorError> {
        let invalid = |detail: String| OperatorError::Invalid { origin: origin.to_owned(), detail };
        let file: OperatorsFile = toml::from_str(text).map_err(|err| invalid(err.to_string()))?;
        for entry in &file.operator {
            check_name(&entry.name, "`name`")
                .map_err(|_| invalid(format!("operator name {:?} is empty or holds control characters", entry.name)))?;
            if parse_key(&entry.key).is_none() {
                return Err(invalid(format!(
                    "the key of `{}` is not `ed25519:` and 64 lowercase hex characters of a valid public key",
                    entry.name
                )));
            }
        }
        Ok(Operators { entries: file.operator })
    }

    /// Reads an operators file.
    pub fn load(path: &Path) -> Result<Self, OperatorError> {
        let text = std::fs::read_to_string(path).map_err(|source| OperatorError::Io {
            what: "reading the operators file",
            path: path.display().to_string(),
            source,
        })?;
        Operators::from_toml(&text, &path.display().to_string())
    }

    /// Reads an operators file, or an empty list if the file does not exist yet.
    pub fn load_or_empty(path: &Path) -> Result<Self, OperatorError> {
        match std::fs::metadata(path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Operators::default()),
            _ => Operators::load(path),
        }
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        toml::to_string(&OperatorsFile { operator: self.entries.clone() }).unwrap_or_default()
    }

    /// Every entry, in file order (revoked ones included).
    pub fn entries(&self) -> &[OperatorEntry] {
        &self.entries
    }

    /// Adds an entry. A name already listed (revoked or not) or a key already listed is refused, so a
    /// revoked name cannot be reused to undo its revocation.
    pub fn add(&mut self, entry: OperatorEntry) -> Result<(), OperatorError> {
        let invalid = |detail: String| OperatorError::Invalid { origin: "the operators file".to_owned(), detail };
        check_name(&entry.name, "`name`")?;
        if parse_key(&entry.key).is_none() {
            return Err(invalid("the key is not a valid `ed25519:` public key".to_owned()));
        }
        if self.entries.iter().any(|e| e.name == entry.name) {
            return Err(invalid(format!("`{}` is already listed", entry.name)));
        }
        if self.entries.iter().any(|e| e.key == entry.key) {
            return Err(invalid("this key is already listed".to_owned()));
        }
        self.entries.push(entry);
        Ok(())
    }

    /// Revokes every key listed under `name`; how many were newly revoked.
    pub fn revoke(&mut self, name: &str) -> usize {
        let mut revoked = 0;
        for entry in self.entries.iter_mut().filter(|e| e.name == name && !e.revoked) {
            entry.revoked = true;
            revoked += 1;
        }
        revoked
    }

    /// The live (unrevoked) entries of a key.
    fn live_entries<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a OperatorEntry> + 'a {
        self.entries.iter().filter(move |e| e.key == key && !e.revoked)
    }

    /// Whether any entry of `key` is revoked: a key revoked once counts for nothing, whatever else lists it.
    fn is_revoked(&self, key: &str) -> bool {
        self.entries.iter().any(|e| e.key == key && e.revoked)
    }

    fn verify(&self, signature: &DecisionSignature, subject: &DecisionSubject<'_>) -> Result<Credential, String> {
        let who = crate::approval::display::escape(&signature.operator).into_owned();
        if self.is_revoked(&signature.key) {
            return Err(format!("the signature for `{who}` is by a revoked key"));
        }
        let role = if signature.attested { OperatorRole::Console } else { OperatorRole::Operator };
        let mut entries = self.live_entries(&signature.key).filter(|e| e.role == role).peekable();
        if entries.peek().is_none() {
            return Err(format!(
                "the signature for `{who}` is by a key the operators file does not list{}",
                if signature.attested { " as a console" } else { " as an operator" }
            ));
        }
        // A person's key signs only under a name it is listed with.
        if !signature.attested && !entries.any(|e| e.name == signature.operator) {
            return Err(format!("the signature for `{who}` is by a key listed under another name"));
        }
        let key =
            parse_key(&signature.key).ok_or_else(|| format!("the signature for `{who}` names a malformed key"))?;
        let bytes = crate::keys::decode_lower_hex::<64>(&signature.signature)
            .ok_or_else(|| format!("the signature for `{who}` is not 128 lowercase hex characters"))?;
        let message = decision_message(
            subject,
            &signature.operator,
            signature.attested,
            signature.signed_at_ms,
            signature.expires_at_ms,
        )?;
        key.verify(&message, &Signature::from_bytes(&bytes))
            .map_err(|_| format!("the signature for `{who}` does not verify for this decision"))?;
        Ok(if signature.attested {
            Credential::Account(signature.operator.clone())
        } else {
            Credential::Key(signature.key.clone())
        })
    }

    /// Counts the distinct credentials that validly signed `subject`: each listed, unrevoked operator key
    /// once (whatever names it signed under), and each account a listed console attested once, unless a
    /// key listed under that account's name signed too.
    pub fn count(&self, signatures: &[DecisionSignature], subject: &DecisionSubject<'_>) -> SignatureCount {
        let mut credentials = BTreeSet::new();
        let mut problems = Vec::new();
        // The latest valid signature: (when signed, the expiry it signs).
        let mut latest: Option<(u64, Option<u64>)> = None;
        for signature in signatures {
            match self.verify(signature, subject) {
                Ok(credential) => {
                    credentials.insert(credential);
                    latest = latest.max(Some((signature.signed_at_ms, signature.expires_at_ms)));
                }
                Err(problem) => problems.push(problem),
            }
        }
        let covered: BTreeSet<&str> = credentials
            .iter()
            .filter_map(|c| match c {
                Credential::Key(key) => Some(key.as_str()),
                Credential::Account(_) => None,
            })
            .flat_map(|key| self.live_entries(key).map(|e| e.name.as_str()))
            .collect();
        let count = credentials
            .iter()
            .filter(|c| match c {
                Credential::Key(_) => true,
                Credential::Account(name) => !covered.contains(name.as_str()),
            })
            .count();
        SignatureCount {
            credentials: u32::try_from(count).unwrap_or(u32::MAX),
            problems,
            signed_expiry_ms: latest.and_then(|(_, expiry)| expiry),
        }
    }
}

/// What the ledger counts an approval under, so that one credential under two names is one approver:
/// the signing key, the attested account, or (unsigned) the name.
pub(crate) fn ledger_credential(approver: &str, signature: Option<&DecisionSignature>) -> String {
    match signature {
        Some(sig) if sig.attested => format!("account\u{0}{}", sig.operator),
        Some(sig) => format!("key\u{0}{}", sig.key),
        None => format!("name\u{0}{approver}"),
    }
}
