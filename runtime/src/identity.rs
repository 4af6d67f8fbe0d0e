//! Who is calling, as the host authenticated them: a [`Caller`] (a name, for rate limits and audit
//! records) and, where a credential says more than "holds the token", its [`Identity`] (an OAuth token's
//! issuer, subject and chosen claims), which policy conditions can test (`identity.groups contains
//! "payments"`, see [`policy::condition`](crate::policy::condition)).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// The verified identity behind a call: who issued the credential, whom it names, and the claims the host
/// chose to keep (each a string, a number, a boolean or a list of them).
///
/// Built only from a credential the host verified (a JWT whose signature, issuer, audience and lifetime
/// were checked): policy conditions trust what it says.
#[derive(Clone, PartialEq)]
pub struct Identity {
    issuer: String,
    subject: String,
    claims: BTreeMap<String, Value>,
}

impl Identity {
    /// An identity issued by `issuer` for `subject`, with no other claims.
    pub fn new(issuer: impl Into<String>, subject: impl Into<String>) -> Self {
        Identity { issuer: issuer.into(), subject: subject.into(), claims: BTreeMap::new() }
    }

    /// Adds a claim conditions can test as `identity.NAME`. `sub` and `iss` are the subject and issuer and
    /// cannot be replaced by a claim of that name (it is ignored).
    pub fn with_claim(mut self, name: impl Into<String>, value: Value) -> Self {
        let name = name.into();
        if name != "sub" && name != "iss" {
            self.claims.insert(name, value);
        }
        self
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The subject (`sub`).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The claims kept besides `iss` and `sub`.
    pub fn claims(&self) -> &BTreeMap<String, Value> {
        &self.claims
    }

    /// A claim by name: `sub` and `iss` included.
    pub fn claim(&self, name: &str) -> Option<Value> {
        match name {
            "sub" => Some(Value::String(self.subject.clone())),
            "iss" => Some(Value::String(self.issuer.clone())),
            other => self.claims.get(other).cloned(),
        }
    }

    /// The name calls run as: the subject prefixed with its issuer (`ISSUER#SUBJECT`), so two issuers'
    /// subjects of one name are two callers.
    pub fn caller_name(&self) -> String {
        format!("{}#{}", self.issuer, self.subject)
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Claims a host keeps are for policy; they are not secrets, but names are enough here.
        f.debug_struct("Identity")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("claims", &self.claims.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Who made a request, as its transport authenticated it: a name (what rate limits count by and audit
/// records name) and, for an OAuth token, the [`Identity`] it proved.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    name: Arc<str>,
    identity: Option<Arc<Identity>>,
}

impl Caller {
    /// The caller of every request with a gateway's static bearer token: one caller, whoever holds it.
    pub const BEARER_TOKEN: &'static str = "bearer-token";

    /// A caller by name, with no identity (identity conditions fail closed for it).
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Caller { name: name.into(), identity: None }
    }

    /// The caller an identity proves: named [`Identity::caller_name`].
    pub fn identified(identity: Identity) -> Self {
        Caller { name: identity.caller_name().into(), identity: Some(Arc::new(identity)) }
    }

    /// The name calls run as ([`CallContext::with_caller`](crate::CallContext::with_caller)).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verified identity, if the credential proved one.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_deref()
    }

    pub(crate) fn identity_arc(&self) -> Option<&Arc<Identity>> {
        self.identity.as_ref()
    }
}
