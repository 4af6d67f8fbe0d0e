//! What the host supplies with a call, and the `#[inject]` extractors that read it.

use std::any::{Any, TypeId, type_name};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde_json::Value;

use crate::dialect::Dialect;
use crate::identity::{Caller, Identity};

type TypeMap = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// The host's side of a call: the thread and checkpoint it runs in, the values tools may inject, and
/// (on resume) the value the host resumes with. Cheap to clone.
#[derive(Clone, Default)]
pub struct CallContext {
    inner: Arc<ContextInner>,
}

#[derive(Clone, Default)]
struct ContextInner {
    thread_id: Option<String>,
    caller: Option<String>,
    /// What per-thread rate limits count by when a caller is named: the caller, apart from every thread id.
    caller_rate_key: Option<String>,
    /// The caller's verified identity, for identity conditions.
    identity: Option<Arc<Identity>>,
    checkpoint_ns: String,
    checkpoint_map: BTreeMap<String, String>,
    state: TypeMap,
    store: TypeMap,
    resume: Option<Value>,
    dialect: Option<Dialect>,
}

impl CallContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    fn inner_mut(&mut self) -> &mut ContextInner {
        Arc::make_mut(&mut self.inner)
    }

    /// The conversation or graph thread this call belongs to.
    pub fn with_thread(mut self, thread_id: impl Into<String>) -> Self {
        self.inner_mut().thread_id = Some(thread_id.into());
        self
    }

    /// Who is calling, as the host authenticated them: the holder of a gateway's bearer token, an OAuth
    /// token's subject. Per-thread rate limits (`rate_per = "thread"`) count by the caller when one is named,
    /// so a caller does not get a fresh budget by starting a new thread (a new MCP session, say); without
    /// one they count by the thread. So does the cap on pending approval requests
    /// ([`InterruptApprovals::with_max_pending`](crate::approval::InterruptApprovals::with_max_pending)).
    /// Approvals themselves do not follow it: a request stays bound to its thread.
    ///
    /// A caller named this way has no verified identity: one set before (by
    /// [`with_authenticated`](Self::with_authenticated)) is cleared, so the policy's identity conditions never
    /// judge one caller by another's claims.
    pub fn with_caller(mut self, caller: impl Into<String>) -> Self {
        let caller = caller.into();
        let inner = self.inner_mut();
        // NUL leads no thread id a host uses: a caller's bucket is never a thread's.
        inner.caller_rate_key = Some(format!("\u{0}caller\u{0}{caller}"));
        inner.caller = Some(caller);
        inner.identity = None;
        self
    }

    /// The caller a transport authenticated: its name as [`with_caller`](Self::with_caller), and its
    /// verified [`Identity`], if any, for the policy's identity conditions (`identity.sub == "…"`). A caller
    /// without an identity clears one set before.
    pub fn with_authenticated(self, caller: &Caller) -> Self {
        let mut context = self.with_caller(caller.name());
        context.inner_mut().identity = caller.identity_arc().cloned();
        context
    }

    /// The checkpoint namespace and the map of checkpoint ids (namespace → id) the call runs under.
    pub fn with_checkpoint(mut self, namespace: impl Into<String>, map: BTreeMap<String, String>) -> Self {
        let inner = self.inner_mut();
        inner.checkpoint_ns = namespace.into();
        inner.checkpoint_map = map;
        self
    }

    /// Agent state of type `T`, injected into parameters of type [`State<T>`].
    pub fn with_state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.inner_mut().state.insert(TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// Agent state the host keeps a handle to, injected into parameters of type [`State<T>`].
    pub fn with_state_arc<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.inner_mut().state.insert(TypeId::of::<T>(), value);
        self
    }

    /// A store of type `T`, injected into parameters of type [`Store<T>`].
    pub fn with_store<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.inner_mut().store.insert(TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// A store the host keeps a handle to, injected into parameters of type [`Store<T>`].
    pub fn with_store_arc<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.inner_mut().store.insert(TypeId::of::<T>(), value);
        self
    }

    /// The value the host resumes an interrupted call with.
    pub fn with_resume(mut self, value: Value) -> Self {
        self.inner_mut().resume = Some(value);
        self
    }

    /// The dialect the tools were offered in (see
    /// [`Dispatcher::offered_tools_in`](crate::Dispatcher::offered_tools_in)): the call is then admitted as
    /// that dialect's schema says. Where it cannot say `uniqueItems` (OpenAI strict mode, Gemini) a repeated
    /// set item counts once instead of being refused; where the provider's SDK holds bounds as floats
    /// (Gemini) an integer is held to the bound the dialect states. Without a dialect, the call is held to
    /// the canonical schema, which MCP, Anthropic and OpenAI non-strict offer as it is.
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.inner_mut().dialect = Some(dialect);
        self
    }

    /// The dialect the host offered the tools in, if it said.
    pub fn dialect(&self) -> Option<Dialect> {
        self.inner.dialect
    }

    /// The thread id, if the host gave one.
    pub fn thread_id(&self) -> Option<&str> {
        self.inner.thread_id.as_deref()
    }

    /// Who is calling, if the host said ([`with_caller`](Self::with_caller)).
    pub fn caller(&self) -> Option<&str> {
        self.inner.caller.as_deref()
    }

    /// The caller's verified identity, if the host gave one ([`with_authenticated`](Self::with_authenticated)).
    pub fn identity(&self) -> Option<&Identity> {
        self.inner.identity.as_deref()
    }

    /// What per-thread rate limits count this call under: its caller if named, else its thread.
    pub(crate) fn rate_subject(&self) -> Option<&str> {
        self.inner.caller_rate_key.as_deref().or(self.inner.thread_id.as_deref())
    }

    /// The checkpoint namespace.
    pub fn checkpoint_ns(&self) -> &str {
        &self.inner.checkpoint_ns
    }

    /// The checkpoint map.
    pub fn checkpoint_map(&self) -> &BTreeMap<String, String> {
        &self.inner.checkpoint_map
    }

    /// The resume value, if this pass resumes an interrupt.
    pub fn resume(&self) -> Option<&Value> {
        self.inner.resume.as_ref()
    }

    fn lookup<T: Send + Sync + 'static>(map: &TypeMap) -> Option<Arc<T>> {
        map.get(&TypeId::of::<T>()).and_then(|v| Arc::clone(v).downcast::<T>().ok())
    }

    /// The agent state of type `T`, if the host supplied one.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        Self::lookup(&self.inner.state)
    }

    /// The store of type `T`, if the host supplied one.
    pub fn store<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        Self::lookup(&self.inner.store)
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values are the host's and may be secret: only their presence is shown.
        f.debug_struct("CallContext")
            .field("thread_id", &self.inner.thread_id)
            .field("caller", &self.inner.caller)
            .field("identity", &self.inner.identity)
            .field("checkpoint_ns", &self.inner.checkpoint_ns)
            .field("checkpoint_map", &self.inner.checkpoint_map)
            .field("state_values", &self.inner.state.len())
            .field("store_values", &self.inner.store.len())
            .field("resuming", &self.inner.resume.is_some())
            .field("dialect", &self.inner.dialect)
            .finish()
    }
}

/// One call as an injected parameter sees it.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// The host's context.
    pub context: &'a CallContext,
    /// The model's id for this call.
    pub tool_call_id: &'a str,
    /// The registered tool name.
    pub tool: &'a str,
}

/// Why an injected value could not be supplied. The message is for the host's developer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectError {
    message: String,
}

impl InjectError {
    /// An error with a message for the host's developer.
    pub fn new(message: impl Into<String>) -> Self {
        InjectError { message: message.into() }
    }
}

impl fmt::Display for InjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for InjectError {}

/// A value the host supplies to an `#[inject]` parameter, taken from the call's context.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an `#[inject]` parameter",
    label = "not injectable",
    note = "injectable types are `State<T>`, `Store<T>`, `ToolCallId` and `CallContext`; implement `agent_airlock::tool::Inject` for your own"
)]
pub trait Inject: Sized + Send + 'static {
    /// Extracts the value for one call.
    fn inject(invocation: &Invocation<'_>) -> Result<Self, InjectError>;
}

/// Agent state of type `T`, supplied with [`CallContext::with_state`].
pub struct State<T>(pub Arc<T>);

/// A store of type `T`, supplied with [`CallContext::with_store`].
pub struct Store<T>(pub Arc<T>);

macro_rules! shared_value {
    ($wrapper:ident, $getter:ident, $with:literal) => {
        impl<T> Deref for $wrapper<T> {
            type Target = T;
            fn deref(&self) -> &T {
                &self.0
            }
        }

        impl<T> Clone for $wrapper<T> {
            fn clone(&self) -> Self {
                $wrapper(Arc::clone(&self.0))
            }
        }

        impl<T> fmt::Debug for $wrapper<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}<{}>", stringify!($wrapper), type_name::<T>())
            }
        }

        impl<T: Send + Sync + 'static> Inject for $wrapper<T> {
            fn inject(invocation: &Invocation<'_>) -> Result<Self, InjectError> {
                invocation.context.$getter::<T>().map($wrapper).ok_or_else(|| {
                    InjectError::new(format!(
                        concat!("no `{}` in the call context; supply it with `CallContext::", $with, "`"),
                        type_name::<T>()
                    ))
                })
            }
        }
    };
}

shared_value!(State, state, "with_state");
shared_value!(Store, store, "with_store");

/// The model's id for the current tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallId(pub String);

impl Deref for ToolCallId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Inject for ToolCallId {
    fn inject(invocation: &Invocation<'_>) -> Result<Self, InjectError> {
        Ok(ToolCallId(invocation.tool_call_id.to_owned()))
    }
}

impl Inject for CallContext {
    fn inject(invocation: &Invocation<'_>) -> Result<Self, InjectError> {
        Ok(invocation.context.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_thread_rates_count_the_caller_when_named_and_never_mistake_it_for_a_thread() {
        let thread = CallContext::new().with_thread("mcp-1");
        assert_eq!(thread.rate_subject(), Some("mcp-1"));
        assert_eq!(CallContext::new().rate_subject(), None);
        // Two connections of one caller: one subject, whatever their threads; the threads stay theirs.
        let first = CallContext::new().with_thread("mcp-1").with_caller("bearer-token");
        let second = CallContext::new().with_thread("mcp-2").with_caller("bearer-token");
        assert_eq!(first.rate_subject(), second.rate_subject());
        assert_eq!((first.thread_id(), first.caller()), (Some("mcp-1"), Some("bearer-token")));
        // A caller named like a thread is not that thread.
        let named_like = CallContext::new().with_thread("x").with_caller("mcp-1");
        assert_ne!(named_like.rate_subject(), thread.rate_subject());
    }

    #[test]
    fn a_caller_named_later_never_keeps_another_callers_identity() {
        let alice = crate::identity::Caller::identified(crate::identity::Identity::new("https://issuer.test", "alice"));
        let context = CallContext::new().with_authenticated(&alice);
        assert_eq!(context.identity().map(|identity| identity.subject()), Some("alice"));
        let bob = context.with_caller("bob");
        assert_eq!((bob.caller(), bob.identity()), (Some("bob"), None));
        // And the other way round: an authenticated caller replaces a name given before.
        let renamed = CallContext::new().with_caller("bob").with_authenticated(&alice);
        assert_eq!(renamed.caller(), Some("https://issuer.test#alice"));
        assert_eq!(renamed.identity().map(|identity| identity.subject()), Some("alice"));
    }
}
