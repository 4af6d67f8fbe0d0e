//! The three MACs of an approval, each under its own domain, over length-prefixed fields:
//!
//! - **binding** = HMAC(key, `agent-airlock/approval/binding/v1\0` ‖ thread id ‖ checkpoint namespace ‖ checkpoint map ‖
//!   tool call id ‖ tool name ‖ SHA-256(JCS(arguments))): which call, where, with which arguments;
//! - **seal** = HMAC(key, `agent-airlock/approval/seal/v1\0` ‖ JCS(the request object without `seal`)): the request as issued;
//! - **token** = HMAC(key, `agent-airlock/approval/token/v1\0` ‖ binding ‖ grant id): one grant for one binding.
//!
//! Every variable-length field is preceded by its length as a big-endian u64, and the map by its entry
//! count, so no two different inputs encode to the same bytes. MACs travel as lowercase hex (64
//! characters) and are compared in constant time. The keys and the domain tags live in [`crate::keys`].

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::canonical::{self, CanonicalError};
use crate::keys::{ApprovalKey, MAC_LEN, Mac};

/// Everything a binding covers: where the call is made and what it is. The dispatcher builds one from
/// the call it is about to run, on the first pass and again on resume.
#[derive(Debug, Clone, Copy)]
pub struct BindingInput<'a> {
    /// The conversation or graph thread (`""` for hosts without threads).
    pub thread_id: &'a str,
    /// The checkpoint namespace (`""` for the root graph).
    pub checkpoint_ns: &'a str,
    /// The checkpoint ids by namespace, as the host's checkpointer reports them.
    pub checkpoint: &'a BTreeMap<String, String>,
    /// The model's id for this tool call.
    pub tool_call_id: &'a str,
    /// The registered tool name.
    pub tool: &'a str,
    /// The admitted arguments: ghosts stripped, nulls for optional parameters dropped.
    pub arguments: &'a Map<String, Value>,
}

/// A binding: the MAC naming one call at one place with one set of arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Binding(pub(crate) [u8; MAC_LEN]);

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Binding({})", self.to_hex())
    }
}

impl Binding {
    /// The binding as lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The binding's bytes.
    pub fn as_bytes(&self) -> &[u8; MAC_LEN] {
        &self.0
    }
}

fn put_field(mac: &mut Mac, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

/// The binding of `input` under `key`. Fails only when the arguments have no canonical form.
pub(crate) fn binding(key: &ApprovalKey, input: &BindingInput<'_>) -> Result<Binding, CanonicalError> {
    let arguments_digest = canonical::canonical_object_sha256(input.arguments)?;
    Ok(binding_of_digest(key, input, &arguments_digest))
}

/// The binding of `input` whose arguments have the SHA-256 `arguments_digest` (`input.arguments` is not
/// read): a stored request holds masked arguments and the digest of the exact ones.
pub(crate) fn binding_of_digest(key: &ApprovalKey, input: &BindingInput<'_>, arguments_digest: &[u8; 32]) -> Binding {
    let mut mac = key.binding_mac();
    put_field(&mut mac, input.thread_id.as_bytes());
    put_field(&mut mac, input.checkpoint_ns.as_bytes());
    mac.update(&(input.checkpoint.len() as u64).to_be_bytes());
    for (namespace, id) in input.checkpoint {
        put_field(&mut mac, namespace.as_bytes());
        put_field(&mut mac, id.as_bytes());
    }
    put_field(&mut mac, input.tool_call_id.as_bytes());
    put_field(&mut mac, input.tool.as_bytes());
    put_field(&mut mac, arguments_digest);
    Binding(mac.finish())
}

/// The seal of a request object's canonical bytes (the object without its `seal` member).
pub(crate) fn seal(key: &ApprovalKey, canonical_request: &[u8]) -> [u8; MAC_LEN] {
    let mut mac = key.seal_mac();
    put_field(&mut mac, canonical_request);
    mac.finish()
}

/// Checks a seal in constant time.
pub(crate) fn verify_seal(key: &ApprovalKey, canonical_request: &[u8], seal: &[u8]) -> bool {
    let mut mac = key.seal_mac();
    put_field(&mut mac, canonical_request);
    mac.verify(seal)
}

fn token_mac(key: &ApprovalKey, binding: &Binding, grant_id: &str) -> Mac {
    let mut mac = key.token_mac();
    put_field(&mut mac, &binding.0);
    put_field(&mut mac, grant_id.as_bytes());
    mac
}

/// The token of one grant for one binding.
pub(crate) fn token(key: &ApprovalKey, binding: &Binding, grant_id: &str) -> [u8; MAC_LEN] {
    token_mac(key, binding, grant_id).finish()
}

/// Checks a token in constant time.
pub(crate) fn verify_token(key: &ApprovalKey, binding: &Binding, grant_id: &str, token: &[u8]) -> bool {
    token_mac(key, binding, grant_id).verify(token)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> ApprovalKey {
        ApprovalKey::new("k1", &[42; 32]).unwrap()
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn fields_cannot_shift_into_each_other() {
        let key = key();
        let checkpoint = BTreeMap::new();
        let arguments = args(json!({}));
        let base = BindingInput {
            thread_id: "ab",
            checkpoint_ns: "c",
            checkpoint: &checkpoint,
            tool_call_id: "id",
            tool: "t",
            arguments: &arguments,
        };
        let shifted = BindingInput { thread_id: "a", checkpoint_ns: "bc", ..base };
        assert_ne!(binding(&key, &base).unwrap(), binding(&key, &shifted).unwrap());

        let one: BTreeMap<String, String> = [("a".into(), "bc".into())].into();
        let other: BTreeMap<String, String> = [("ab".into(), "c".into())].into();
        let a = BindingInput { checkpoint: &one, ..base };
        let b = BindingInput { checkpoint: &other, ..base };
        assert_ne!(binding(&key, &a).unwrap(), binding(&key, &b).unwrap());
    }

    #[test]
    fn domains_separate_the_three_macs() {
        let key = key();
        let b = Binding([7; 32]);
        let as_seal = seal(&key, &b.0);
        let as_token = token(&key, &b, "");
        assert_ne!(as_seal, as_token);
        assert!(verify_token(&key, &b, "g", &token(&key, &b, "g")));
        assert!(!verify_token(&key, &b, "g", &token(&key, &b, "h")));
        assert!(!verify_token(&key, &b, "g", &[0; 31]));
    }

    #[test]
    fn different_keys_bind_differently() {
        let checkpoint = BTreeMap::new();
        let arguments = args(json!({"a": 1}));
        let input = BindingInput {
            thread_id: "t",
            checkpoint_ns: "",
            checkpoint: &checkpoint,
            tool_call_id: "c",
            tool: "x",
            arguments: &arguments,
        };
        let other = ApprovalKey::new("k2", &[43; 32]).unwrap();
        assert_ne!(binding(&key(), &input).unwrap(), binding(&other, &input).unwrap());
    }
}
