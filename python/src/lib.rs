//! `airlock_rs._native`: the Rust side of the `airlock_rs` Python package.
//!
//! Python reaches the runtime's own dispatcher here: one [`Dispatcher`] per guarded tool, built from the
//! tool's JSON Schema (a [`JsonTool`]), the policy, the approvals and the ledger's audit log. The LangGraph
//! glue (`airlock_rs/langgraph.py`) turns a `ToolCallRequest` into a call of `ToolGuard::dispatch` and
//! the outcome back into a `ToolMessage`, a `Command` or an `interrupt()`.
//!
//! Everything that crosses into Python is an exception of the `AirlockError` family or a plain value:
//! nothing here panics on what Python passes (a panic in a tool's callback is caught by the dispatcher),
//! and the GIL is released whenever the Rust side waits (the ledger's writes, the dispatcher's gates).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_airlock::approval::operators::Operators;
use agent_airlock::approval::{
    DecisionError, DecisionSigner, InterruptApprovals as Protocol, InterruptRequest, KeyRing, ResumeValue,
};
use agent_airlock::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome};
use agent_airlock::checkpoint::{CheckpointCommitments as Core, PostgresCommitments, RedbCommitments, Verdict};
use agent_airlock::effect::{EffectStore, RedbEffectStore};
use agent_airlock::json_tool::{JsonCall, JsonTool};
use agent_airlock::keys::ApprovalKey;
use agent_airlock::keys::AuditKey;
use agent_airlock::ledger::{ApprovalLedger, PostgresLedger, RedbLedger, RequestRecord};
use agent_airlock::store::{ProcessSharing, RedbOpenOptions, open_database};
use agent_airlock::{
    CallContext, Dispatcher, IncomingCall, Outcome, Policy, RefusalKind, Status, ToolCall, ToolCallText, ToolError,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

create_exception!(_native, AirlockError, PyException, "Every error of airlock_rs.");
create_exception!(_native, PolicyError, AirlockError, "A policy that cannot be built (a bad glob or rate).");
create_exception!(_native, SchemaError, AirlockError, "A tool whose argument schema cannot be guarded.");
create_exception!(_native, LedgerError, AirlockError, "The approval ledger cannot be opened or written.");
create_exception!(_native, ApprovalError, AirlockError, "An approval request that cannot be decided.");
create_exception!(
    _native,
    ApprovalKeyError,
    AirlockError,
    "An approval key that is too short or badly named, or an operator key or operators file that cannot be used."
);
create_exception!(
    _native,
    ToolFailed,
    PyException,
    "Raised by the LangGraph glue inside a tool's callback: the tool ran and failed (the node made an error message)."
);

/// How long a grant issued by `approve` stays valid unless the caller says otherwise.
const DEFAULT_GRANT_TTL_SECS: u64 = 900;

/// One runtime for the process. `Runtime::block_on` polls the dispatch future (and the tool's callback in
/// it) on the calling thread, so calls from many Python threads run side by side; the runtime's one worker
/// only drives timers and whatever a store spawns. (A runtime per thread would be built again for every
/// call: ToolNode runs each batch of tool calls on threads it starts anew.)
static RUNTIME: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> = std::sync::OnceLock::new();

/// Runs `future` to completion on the calling thread, or, when that thread already drives one (see
/// [`nested`]), on a thread of its own while the calling one waits.
fn block_on<F>(future: F) -> Result<F::Output, String>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("airlock-rs")
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))
    });
    let runtime = runtime.as_ref().map_err(Clone::clone)?;
    if !nested() {
        return Ok(runtime.block_on(future));
    }
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("airlock-rs-nested".to_owned())
            .spawn_scoped(scope, || runtime.block_on(future))
            .map_err(|e| format!("cannot start a thread for a nested call: {e}"))?
            .join()
            .map_err(|_| "the nested call panicked".to_owned())
    })
}

/// Whether the calling thread is inside a runtime already: a tool's callback, run by another call's
/// [`block_on`] on this thread, that dispatches a call itself (a guarded tool calling another). Tokio
/// cannot block a thread that drives a future, so [`block_on`] runs the nested call on another thread, and
/// the caller must release the GIL meanwhile: that thread takes it to run the nested tool's callback.
fn nested() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Where approvals, effects and audit records live.
#[derive(Clone)]
enum Store {
    Redb {
        database: Arc<redb::Database>,
        ledger: Arc<RedbLedger>,
        effects: Arc<RedbEffectStore>,
        audit: Arc<AuditLog>,
        /// Whether `audit` is an append-only file of its own (`audit_file`), which hosts sharing it read.
        append_only: bool,
    },
    Postgres {
        ledger: Arc<PostgresLedger>,
        audit: Arc<AuditLog>,
    },
}

impl Store {
    fn ledger(&self) -> Arc<dyn ApprovalLedger> {
        match self {
            Store::Redb { ledger, .. } => Arc::clone(ledger) as Arc<dyn ApprovalLedger>,
            Store::Postgres { ledger, .. } => Arc::clone(ledger) as Arc<dyn ApprovalLedger>,
        }
    }

    fn effects(&self) -> Arc<dyn EffectStore> {
        match self {
            Store::Redb { effects, .. } => Arc::clone(effects) as Arc<dyn EffectStore>,
            Store::Postgres { ledger, .. } => Arc::new(ledger.effect_store()),
        }
    }

    fn audit(&self) -> Arc<AuditLog> {
        match self {
            Store::Redb { audit, .. } | Store::Postgres { audit, .. } => Arc::clone(audit),
        }
    }

    /// The append-only audit file the hosts share, if the audit log is one: where a denial records the grant
    /// it revokes first.
    fn revocation_log(&self) -> Option<Arc<AuditLog>> {
        match self {
            Store::Redb { audit, append_only: true, .. } => Some(Arc::clone(audit)),
            _ => None,
        }
    }
}

/// The approval ledger, effect records and audit log in one redb file (the file `airlock` opens with
/// `--db`).
#[pyclass(frozen, module = "airlock_rs")]
struct RedbApprovalLedger {
    store: Store,
}

#[pymethods]
impl RedbApprovalLedger {
    /// The audit log's records from `from_seq` (1 is the first) on, at most `limit`: what each call did
    /// (`outcome.kind`: `executed`, `refused`, `state_tamper`, ...), without argument values.
    #[pyo3(signature = (from_seq = 1, limit = 1000))]
    fn audit_records(&self, py: Python<'_>, from_seq: u64, limit: usize) -> PyResult<Py<PyAny>> {
        audit_records(py, &self.store, from_seq, limit)
    }

    /// Opens (or creates) the file at `path`. `multi_process=True` shares it with other processes that
    /// open it the same way (`airlock --multi-process`); otherwise it is this process's alone, and
    /// opening waits up to `wait_secs` while another process has it. With `audit_key` (raw bytes, at
    /// least 16, named `audit_key_id`), audit records are signed (`airlock audit verify --audit-key-file`).
    /// With `audit_file`, the audit log is an append-only file of its own (created if missing; any number of
    /// processes may append to it, each append under the file's lock): each call's record is one write and
    /// `fdatasync` instead of a commit of `path`, and an approval's spend and its record are two writes
    /// (`airlock audit verify --file`); a denial through `InterruptApprovals` on this ledger records the grant
    /// it revokes in that file first, so every host writing it refuses the grant whatever the ledger says.
    #[new]
    #[pyo3(signature = (path, *, multi_process = false, wait_secs = 10.0, audit_key = None, audit_key_id = "audit-1", audit_file = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        multi_process: bool,
        wait_secs: f64,
        audit_key: Option<&[u8]>,
        audit_key_id: &str,
        audit_file: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let config = audit_config(audit_key, audit_key_id)?;
        let wait = Duration::try_from_secs_f64(wait_secs)
            .map_err(|_| LedgerError::new_err("`wait_secs` must be a non-negative number of seconds"))?;
        let sharing = if multi_process { ProcessSharing::MultiProcess } else { ProcessSharing::Exclusive };
        let options = RedbOpenOptions::default().sharing(sharing).wait_if_open(wait);
        let opened = py.detach(|| -> Result<Store, String> {
            let database = Arc::new(open_database(&path, &options).map_err(|e| e.to_string())?);
            let ledger = RedbLedger::from_database(Arc::clone(&database)).map_err(|e| e.to_string())?;
            let effects = RedbEffectStore::new(Arc::clone(&database)).map_err(|e| e.to_string())?;
            let audit = match &audit_file {
                Some(file) => AuditLog::open_append_only(file, config).map_err(|e| format!("audit_file: {e}"))?,
                None => AuditLog::with_database(Arc::clone(&database), config).map_err(|e| e.to_string())?,
            };
            let (ledger, effects, audit) = (Arc::new(ledger), Arc::new(effects), Arc::new(audit));
            Ok(Store::Redb { database, ledger, effects, audit, append_only: audit_file.is_some() })
        });
        let store = opened.map_err(|e| LedgerError::new_err(format!("{}: {e}", path.display())))?;
        Ok(RedbApprovalLedger { store })
    }
}

/// The approval ledger, effect records and audit log in a PostgreSQL database, shared by every host and
/// operator that connects to it.
#[pyclass(frozen, module = "airlock_rs")]
struct PostgresApprovalLedger {
    store: Store,
}

#[pymethods]
impl PostgresApprovalLedger {
    /// The audit log's records from `from_seq` (1 is the first) on, at most `limit`: what each call did
    /// (`outcome.kind`: `executed`, `refused`, `state_tamper`, ...), without argument values.
    #[pyo3(signature = (from_seq = 1, limit = 1000))]
    fn audit_records(&self, py: Python<'_>, from_seq: u64, limit: usize) -> PyResult<Py<PyAny>> {
        audit_records(py, &self.store, from_seq, limit)
    }

    /// Connects to `url` (`postgresql://…`) and creates or upgrades the tables; `audit_key` as for
    /// `RedbApprovalLedger`.
    #[new]
    #[pyo3(signature = (url, *, audit_key = None, audit_key_id = "audit-1"))]
    fn new(py: Python<'_>, url: String, audit_key: Option<&[u8]>, audit_key_id: &str) -> PyResult<Self> {
        let config = audit_config(audit_key, audit_key_id)?;
        let connected = py.detach(|| PostgresLedger::connect(&url));
        // The URL may hold a password: the error names the database by its kind only.
        let ledger = connected.map_err(|e| LedgerError::new_err(format!("the PostgreSQL database: {e}")))?;
        let audit = AuditLog::with_postgres(&ledger, config);
        Ok(PostgresApprovalLedger { store: Store::Postgres { ledger: Arc::new(ledger), audit: Arc::new(audit) } })
    }
}

/// The audit records from `from_seq` on (at most `limit`), as dicts.
fn audit_records(py: Python<'_>, store: &Store, from_seq: u64, limit: usize) -> PyResult<Py<PyAny>> {
    let audit = store.audit();
    let records = py.detach(|| audit.records(from_seq, limit)).map_err(|e| LedgerError::new_err(e.to_string()))?;
    let value = serde_json::to_value(records).map_err(|e| AirlockError::new_err(e.to_string()))?;
    from_json(py, &value)
}

fn audit_config(key: Option<&[u8]>, key_id: &str) -> PyResult<AuditConfig> {
    let mut config = AuditConfig::default();
    if let Some(secret) = key {
        config.key = Some(AuditKey::new(key_id, secret).map_err(|e| ApprovalKeyError::new_err(e.to_string()))?);
    }
    Ok(config)
}

fn store_of(ledger: &Bound<'_, PyAny>) -> PyResult<Store> {
    if let Ok(redb) = ledger.cast::<RedbApprovalLedger>() {
        return Ok(redb.get().store.clone());
    }
    if let Ok(postgres) = ledger.cast::<PostgresApprovalLedger>() {
        return Ok(postgres.get().store.clone());
    }
    Err(LedgerError::new_err("the ledger must be a RedbApprovalLedger or a PostgresApprovalLedger"))
}

/// The deployment policy: which tools are refused, allowed, escalated, rate limited; where approvals and
/// audit records go.
#[pyclass(frozen, module = "airlock_rs")]
struct SecurityPolicy {
    policy: Policy,
    store: Option<Store>,
    /// A dispatcher with no tools, for [`refuse_unknown_tool`](Self::refuse_unknown_tool), built once.
    no_tools: std::sync::OnceLock<Dispatcher>,
}

#[pymethods]
impl SecurityPolicy {
    /// `denied_tools` and `allowed_tools` are glob lists (with `allowed_tools`, every other tool is
    /// refused); `escalate_tools` maps a glob to the reason a human must approve; `approvals` maps a glob to
    /// how many distinct approvers its escalated calls need (`{"refund": 2}`; 1 otherwise); `rate_limits` maps
    /// a glob to `N/unit` (`30/minute`); `masks` maps a glob to what is masked in results (`secrets,pii`);
    /// `effects` maps a glob to an idempotency key template (`{"refund": "refund:{payment_id}"}`): a call
    /// whose key already ran is refused as a duplicate, one whose outcome is unknown (the tool failed) is
    /// refused until an operator resolves it (`airlock effects`); effects need `approval_ledger`, where their
    /// records are kept.
    #[new]
    #[pyo3(signature = (*, denied_tools = None, allowed_tools = None, escalate_tools = None, rate_limits = None,
                        masks = None, approvals = None, effects = None, approval_ledger = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, not a Rust API.
    fn new(
        denied_tools: Option<Vec<String>>,
        allowed_tools: Option<Vec<String>>,
        escalate_tools: Option<BTreeMap<String, String>>,
        rate_limits: Option<BTreeMap<String, String>>,
        masks: Option<BTreeMap<String, String>>,
        approvals: Option<BTreeMap<String, u32>>,
        effects: Option<BTreeMap<String, String>>,
        approval_ledger: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut builder = Policy::builder();
        for glob in denied_tools.iter().flatten() {
            builder = builder.deny(glob);
        }
        if let Some(allowed) = &allowed_tools {
            builder = builder.default_deny();
            for glob in allowed {
                builder = builder.allow(glob);
            }
        }
        for (glob, reason) in escalate_tools.iter().flatten() {
            builder = builder.escalate(glob, reason);
        }
        for (glob, rate) in rate_limits.iter().flatten() {
            builder = builder.rate_limit(glob, rate);
        }
        for (glob, mask) in masks.iter().flatten() {
            builder = builder.mask(glob, mask);
        }
        for (glob, needed) in approvals.iter().flatten() {
            builder = builder.approvals(glob, *needed);
        }
        for (glob, template) in effects.iter().flatten() {
            builder = builder.effect(glob, template);
        }
        let policy = builder.build().map_err(|errors| {
            PolicyError::new_err(errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
        })?;
        let store = approval_ledger.map(store_of).transpose()?;
        if store.is_none() && effects.as_ref().is_some_and(|effects| !effects.is_empty()) {
            return Err(PolicyError::new_err("`effects` need an `approval_ledger`, where their records are kept"));
        }
        Ok(SecurityPolicy { policy, store, no_tools: std::sync::OnceLock::new() })
    }

    /// Refuses the call `tool_call_id` of `tool`, a tool the host does not have, as the dispatcher refuses any
    /// unknown tool: recorded in the audit log (with `approval_ledger`), the name in the refusal escaped and at
    /// most 64 characters. Returns the dict `ToolGuard.dispatch` returns.
    #[pyo3(signature = (tool_call_id, tool, *, thread_id = None, checkpoint_ns = String::new(),
                        checkpoint_map = BTreeMap::new()))]
    fn refuse_unknown_tool(
        &self,
        py: Python<'_>,
        tool_call_id: String,
        tool: String,
        thread_id: Option<String>,
        checkpoint_ns: String,
        checkpoint_map: BTreeMap<String, String>,
    ) -> PyResult<Py<PyAny>> {
        let dispatcher = match self.no_tools.get() {
            Some(dispatcher) => dispatcher,
            None => {
                let mut builder = Dispatcher::builder().policy(self.policy.clone());
                if let Some(store) = &self.store {
                    builder = builder.audit(store.audit());
                }
                let built = builder.build().map_err(|e| PolicyError::new_err(e.to_string()))?;
                self.no_tools.get_or_init(|| built)
            }
        };
        let mut context = CallContext::new().with_checkpoint(checkpoint_ns, checkpoint_map);
        if let Some(thread) = thread_id {
            context = context.with_thread(thread);
        }
        let call = ToolCall::new(tool_call_id, tool, Value::Object(serde_json::Map::new()));
        let outcome = py.detach(|| block_on(dispatcher.dispatch(call, &context))).map_err(AirlockError::new_err)?;
        outcome_to_py(py, outcome)
    }

    /// Why the policy refuses `tool` outright (`denied by <glob>`), or `None` when a call of it may be
    /// made (escalated tools included).
    fn refuses(&self, tool: &str) -> Option<String> {
        self.policy.for_tool(tool).denied_by.map(|glob| format!("denied by `{glob}`"))
    }
}

/// An approver's credential: an operator's Ed25519 signing key (the file `airlock operators add NAME
/// --key-out FILE` writes), which signs every decision made with it. A host in operator mode
/// (`InterruptApprovals(..., operators=FILE)`) counts a decision only if a key its operators file lists
/// signed it, and `approvals = N` counts distinct keys.
#[pyclass(frozen, module = "airlock_rs")]
struct OperatorKey {
    key: Arc<agent_airlock::approval::operators::OperatorKey>,
}

#[pymethods]
impl OperatorKey {
    /// Reads the key file at `path` (written by `airlock operators add` or `OperatorKey.write`).
    #[staticmethod]
    fn from_file(path: std::path::PathBuf) -> PyResult<Self> {
        let key = agent_airlock::approval::operators::OperatorKey::from_file(&path)
            .map_err(|e| ApprovalKeyError::new_err(e.to_string()))?;
        Ok(OperatorKey { key: Arc::new(key) })
    }

    /// A new key for the operator `name`, from the system's random source (list its `public_key` in the
    /// operators file, or use `airlock operators add`, which does both).
    #[staticmethod]
    fn generate(name: &str) -> PyResult<Self> {
        let key = agent_airlock::approval::operators::OperatorKey::generate(name)
            .map_err(|e| ApprovalKeyError::new_err(e.to_string()))?;
        Ok(OperatorKey { key: Arc::new(key) })
    }

    /// Writes the key to a new file at `path`, readable by its owner only; an existing file is never
    /// overwritten.
    fn write(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.key.write_new(&path).map_err(|e| ApprovalKeyError::new_err(e.to_string()))
    }

    /// The name the key signs as.
    #[getter]
    fn name(&self) -> &str {
        self.key.name()
    }

    /// The public key, `ed25519:<64 hex>`, as the operators file lists it.
    #[getter]
    fn public_key(&self) -> String {
        self.key.key_id()
    }

    fn __repr__(&self) -> String {
        format!("OperatorKey(name={:?}, public_key={:?})", self.key.name(), self.key.key_id())
    }
}

/// Who a decision is recorded under: a name (unsigned), or an operator's key (signed).
#[derive(Clone)]
enum Approver {
    /// Unsigned, under this name: counted only by hosts without an operators file.
    Name(String),
    /// Signed with the operator's key, under the key's name.
    Key(Arc<agent_airlock::approval::operators::OperatorKey>),
}

impl Approver {
    /// `approver` as Python gives it: an `OperatorKey`, or a name.
    fn of(approver: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(key) = approver.cast::<OperatorKey>() {
            return Ok(Approver::Key(Arc::clone(&key.get().key)));
        }
        if let Ok(name) = approver.cast::<PyString>() {
            return Ok(Approver::Name(name.to_str()?.to_owned()));
        }
        Err(PyTypeError::new_err("`approver` must be an airlock_rs.OperatorKey or a name (str)"))
    }
}

/// The approver of the deployment's own operator when none is given: unsigned, as `operator`.
const DEFAULT_APPROVER: &str = "operator";

/// Approvals across LangGraph's `interrupt()`: requests bound to the call and sealed with `key`, granted
/// by a human, spent once on resume.
#[pyclass(frozen, module = "airlock_rs")]
struct InterruptApprovals {
    protocol: Protocol,
    /// Who `approve` and `deny` decide as when the call names nobody.
    approver: Approver,
}

#[pymethods]
impl InterruptApprovals {
    /// `key` is the approval secret (raw bytes, at least 16; kept outside the checkpoints), named
    /// `key_id` in the requests it seals; grants from `approve` are valid for `grant_ttl_secs`.
    ///
    /// `approver` is the credential `approve(value)` and `deny(value)` decide with when they name none:
    /// an `OperatorKey` (each decision signed with it), or a name (unsigned; `operator` by default).
    /// With `operators` (the path of the operators file `airlock operators add` writes) this host is in
    /// operator mode: a decision counts only if a key the file lists signed it, and a request needing N
    /// approvers needs N distinct listed keys; a name, an unlisted key, or whoever holds `key` and the
    /// ledger approves nothing.
    #[new]
    #[pyo3(signature = (key, ledger, *, approver = None, operators = None, key_id = "approval-1",
                        grant_ttl_secs = DEFAULT_GRANT_TTL_SECS))]
    fn new(
        py: Python<'_>,
        key: &[u8],
        ledger: &Bound<'_, PyAny>,
        approver: Option<&Bound<'_, PyAny>>,
        operators: Option<std::path::PathBuf>,
        key_id: &str,
        grant_ttl_secs: u64,
    ) -> PyResult<Self> {
        let key = ApprovalKey::new(key_id, key).map_err(|e| ApprovalKeyError::new_err(e.to_string()))?;
        let approver = approver.map(Approver::of).transpose()?.unwrap_or(Approver::Name(DEFAULT_APPROVER.to_owned()));
        let store = store_of(ledger)?;
        let mut protocol = Protocol::new(KeyRing::new(key), store.ledger(), Duration::from_secs(grant_ttl_secs));
        if let Some(path) = operators {
            let listed = py.detach(|| Operators::load(&path)).map_err(|e| ApprovalKeyError::new_err(e.to_string()))?;
            protocol = protocol.with_operators(listed);
        }
        if let Some(log) = store.revocation_log() {
            protocol = protocol.with_revocation_log(log);
        }
        Ok(InterruptApprovals { protocol, approver })
    }

    /// Whether this host counts only decisions signed by the keys of an operators file.
    #[getter]
    fn operator_mode(&self) -> bool {
        self.protocol.operators().is_some()
    }

    /// Checks an interrupt value's seal and binding and opens its arguments (stored encrypted in the value):
    /// returns the request it holds with `arguments`, the exact arguments the grant would cover, and
    /// `shown`, the call as a human must be shown it (every argument, escaped; secrets flagged). Touches
    /// no ledger.
    fn verify(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let value = to_json(py, value)?;
        let request = self.protocol.verify_request(&value).map_err(|e| ApprovalError::new_err(e.to_string()))?;
        let mut opened = request.as_value().clone();
        if let Some(inner) = opened.get_mut("airlock_approval").and_then(serde_json::Value::as_object_mut) {
            inner.insert("arguments".to_owned(), serde_json::Value::Object(request.arguments().clone()));
            let shown = request.render().map_err(|e| ApprovalError::new_err(e.to_string()))?;
            inner.insert("shown".to_owned(), serde_json::Value::String(shown));
        }
        from_json(py, &opened)
    }

    /// Approves the request `value` holds (the interrupt's value, `{"airlock_approval": {...}}`) after
    /// checking its seal: the value to resume the graph with, `Command(resume=...)`. `approver` (an
    /// `OperatorKey`, or a name) is who approves; without it, the approver the approvals were made with.
    /// A request that needs more approvers than have approved so far (`approvals` in the policy) records
    /// this approval and returns `None`; the last one needed returns the resume value (as does any
    /// approval after it). One credential counts once, whatever it approves as.
    #[pyo3(signature = (value, *, approver = None))]
    fn approve(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        approver: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let approver = self.approver_or_default(approver)?;
        let value = to_json(py, value)?;
        let decided = py.detach(|| match &approver {
            Approver::Name(name) => self.protocol.approve(&value, name).wait(),
            Approver::Key(key) => self.protocol.approve_signed(&value, DecisionSigner::Operator(key)).wait(),
        });
        match decided {
            Ok(resume) => from_json(py, resume.as_value()),
            Err(DecisionError::MoreApproversNeeded { .. }) => Ok(py.None()),
            Err(error) => Err(ApprovalError::new_err(error.to_string())),
        }
    }

    /// Denies the request `value` holds, as `approver` (as for `approve`), for `reason`: the value to
    /// resume with (the call is then refused as denied).
    #[pyo3(signature = (value, *, approver = None, reason = None))]
    fn deny(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        approver: Option<&Bound<'_, PyAny>>,
        reason: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let approver = self.approver_or_default(approver)?;
        let value = to_json(py, value)?;
        let denied = py.detach(|| match &approver {
            Approver::Name(name) => self.protocol.deny(&value, name, reason).wait(),
            Approver::Key(key) => self.protocol.deny_signed(&value, DecisionSigner::Operator(key), reason).wait(),
        });
        let resume = denied.map_err(|e| ApprovalError::new_err(e.to_string()))?;
        from_json(py, resume.as_value())
    }

    /// The call the resume value `value` (a grant or a denial) was made for, as the ledger records its request:
    /// `{"request_id", "tool_call_id", "thread_id", "checkpoint_ns"}`, or `None` when the value is neither or the
    /// ledger knows no such decision. Proves nothing (the dispatcher checks the value when a call resumes with
    /// it): it routes a resume value to the call it answers, among the calls one LangGraph task runs.
    fn addressee(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let Ok(value) = to_json(py, value) else { return Ok(py.None()) };
        let text = |member: &str, field: &str| value.get(member)?.get(field)?.as_str().map(str::to_owned);
        let grant_id = text(ResumeValue::GRANT_MEMBER, "grant_id");
        let denied = text(ResumeValue::DENIED_MEMBER, "request_id");
        let ledger = self.protocol.ledger();
        let found = py.detach(|| -> Result<Option<RequestRecord>, agent_airlock::ledger::LedgerError> {
            let request_id = match (grant_id, denied) {
                (Some(grant_id), _) => match ledger.find_grant(&grant_id)? {
                    Some(entry) => entry.grant.request_id,
                    None => return Ok(None),
                },
                (None, Some(request_id)) => request_id,
                (None, None) => return Ok(None),
            };
            Ok(ledger.find_request(&request_id)?.map(|entry| entry.request))
        });
        let found = found.map_err(|e| LedgerError::new_err(e.to_string()))?;
        let Some(request) = found else { return Ok(py.None()) };
        let Some(call) = Self::call_of(&request.interrupt) else { return Ok(py.None()) };
        let dict = PyDict::new(py);
        dict.set_item("request_id", &request.request_id)?;
        for field in ["tool_call_id", "thread_id", "checkpoint_ns"] {
            dict.set_item(field, call.get(field).and_then(Value::as_str))?;
        }
        Ok(dict.into_any().unbind())
    }

    /// The approval requests recorded for calls in thread `thread_id` and checkpoint namespace
    /// `checkpoint_ns` (one LangGraph task) that still wait for a decision or to be resumed with one (pending,
    /// partly approved, or granted and not spent), oldest first: `{"tool_call_id", "request_id", "value"}`,
    /// `value` being the interrupt value the call paused with. Reads the ledger only, and of it the records of
    /// unresolved requests only (`ApprovalLedger::unresolved_requests`): a resumed task pays for the requests
    /// still open, not for every request the ledger keeps.
    #[pyo3(signature = (thread_id, checkpoint_ns))]
    fn waiting(&self, py: Python<'_>, thread_id: Option<String>, checkpoint_ns: String) -> PyResult<Py<PyAny>> {
        let ledger = self.protocol.ledger();
        let requests = py.detach(|| ledger.unresolved_requests()).map_err(|e| LedgerError::new_err(e.to_string()))?;
        let list = PyList::empty(py);
        for entry in requests {
            let Some(call) = Self::call_of(&entry.request.interrupt) else { continue };
            let same_thread = call.get("thread_id").and_then(Value::as_str) == thread_id.as_deref();
            let same_ns = call.get("checkpoint_ns").and_then(Value::as_str) == Some(checkpoint_ns.as_str());
            if !(same_thread && same_ns) {
                continue;
            }
            let item = PyDict::new(py);
            item.set_item("tool_call_id", call.get("tool_call_id").and_then(Value::as_str))?;
            item.set_item("request_id", &entry.request.request_id)?;
            item.set_item("value", from_json(py, &entry.request.interrupt)?)?;
            list.append(item)?;
        }
        Ok(list.into_any().unbind())
    }

    /// The decision recorded for the request `value` holds, by this process or another sharing the ledger
    /// (`airlock approve`, the console): the value to resume with, or `None` while it waits (pending, or
    /// approved by fewer approvers than it needs). Records nothing; for polling.
    fn recorded_decision(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let value = to_json(py, value)?;
        let recorded = py.detach(|| self.protocol.recorded_decision_blocking(&value));
        match recorded.map_err(|e| ApprovalError::new_err(e.to_string()))? {
            Some(resume) => from_json(py, resume.as_value()),
            None => Ok(py.None()),
        }
    }
}

impl InterruptApprovals {
    /// The call site an interrupt value (`{"airlock_approval": {..., "call": {...}}}`) was issued for.
    fn call_of(interrupt: &Value) -> Option<&serde_json::Map<String, Value>> {
        interrupt.get(InterruptRequest::MEMBER)?.get("call")?.as_object()
    }

    fn approver_or_default(&self, approver: Option<&Bound<'_, PyAny>>) -> PyResult<Approver> {
        match approver {
            Some(approver) => Approver::of(approver),
            None => Ok(self.approver.clone()),
        }
    }
}

/// Checkpoint commitments (the runtime's `checkpoint` module) over a ledger's database: keyed digests of
/// what a LangGraph saver holds, verified before the graph goes on from it. `airlock_rs.AirlockCheckpointer`
/// drives it.
#[pyclass(frozen, module = "airlock_rs")]
struct CheckpointCommitments {
    core: Core,
    audit: Arc<AuditLog>,
}

#[pymethods]
impl CheckpointCommitments {
    /// Commitments keyed by `key` (raw bytes, at least 16), kept in `ledger`'s database (its redb file, or
    /// its PostgreSQL database).
    #[new]
    #[pyo3(signature = (key, ledger, *, key_id = "approval-1"))]
    fn new(key: &[u8], ledger: &Bound<'_, PyAny>, key_id: &str) -> PyResult<Self> {
        let key = ApprovalKey::new(key_id, key).map_err(|e| ApprovalKeyError::new_err(e.to_string()))?;
        match store_of(ledger)? {
            Store::Redb { database, audit, .. } => {
                Ok(CheckpointCommitments { core: Core::new(key, RedbCommitments::new(database)), audit })
            }
            Store::Postgres { ledger, audit } => {
                Ok(CheckpointCommitments { core: Core::new(key, PostgresCommitments::new(&ledger)), audit })
            }
        }
    }

    /// Commits to `manifest` (JSON text) as what `checkpoint_id` of the thread holds now; with `head`,
    /// the checkpoint becomes the thread's head. With `tainted`, the checkpoint was made from one found
    /// tampered with, unverifiable or tainted: it verifies as `tainted` from then on (so do its later writes).
    #[pyo3(signature = (thread_id, checkpoint_ns, checkpoint_id, manifest, *, head, tainted = false))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, not a Rust API.
    fn record(
        &self,
        py: Python<'_>,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        manifest: &str,
        head: bool,
        tainted: bool,
    ) -> PyResult<()> {
        let manifest = manifest_of(manifest)?;
        let scope = Core::langgraph_scope(thread_id, checkpoint_ns);
        py.detach(|| {
            if tainted {
                self.core.record_tainted(&scope, checkpoint_id, &manifest, head)
            } else {
                self.core.record(&scope, checkpoint_id, &manifest, head)
            }
        })
        .map(drop)
        .map_err(|e| LedgerError::new_err(e.to_string()))
    }

    /// Whether `checkpoint_id` holding `manifest` (JSON text) is what was last committed for it:
    /// `unrecorded` (nothing for the thread), `unknown` (nothing for this checkpoint), `edited`,
    /// `tainted` (as committed, but made from a tampered checkpoint), `not_head` (as committed, but the graph
    /// had gone on) or `matches`.
    fn verify(
        &self,
        py: Python<'_>,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        manifest: &str,
    ) -> PyResult<&'static str> {
        let manifest = manifest_of(manifest)?;
        let scope = Core::langgraph_scope(thread_id, checkpoint_ns);
        let verdict = py
            .detach(|| self.core.verify(&scope, checkpoint_id, &manifest))
            .map_err(|e| LedgerError::new_err(e.to_string()))?;
        Ok(match verdict {
            Verdict::Unrecorded => "unrecorded",
            Verdict::Unknown => "unknown",
            Verdict::Matches => "matches",
            Verdict::Edited => "edited",
            Verdict::Tainted => "tainted",
            Verdict::NotHead { .. } => "not_head",
            // A verdict of a later runtime: what it says is unknown here, so nothing is vouched for.
            _ => "edited",
        })
    }

    /// Appends a `state_tamper` audit record (signed when the ledger has an audit key) for `checkpoint_id`.
    fn record_tamper(
        &self,
        py: Python<'_>,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        detail: &str,
    ) -> PyResult<()> {
        let scope = Core::langgraph_scope(thread_id, checkpoint_ns);
        py.detach(|| {
            let event = AuditEvent::new(&scope, checkpoint_id, AuditOutcome::StateTamper)
                .thread_id(Some(thread_id))
                .detail(Some(detail));
            self.audit.append(event).map(drop)
        })
        .map_err(|e| LedgerError::new_err(e.to_string()))
    }
}

fn manifest_of(text: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| AirlockError::new_err(format!("the manifest is not JSON: {e}")))
}

/// The callbacks of the calls in flight, by tool call id: the dispatcher runs a tool through its
/// executor, which finds the node's `execute` for this call here.
type Pending = Arc<Mutex<HashMap<String, Vec<InFlight>>>>;

/// One call in flight: the node's callback, and the arguments as Python passed them (the object and its
/// JSON value), so that admitted arguments equal to them reach the callback as that same object.
struct InFlight {
    callback: Py<PyAny>,
    given: Option<(Py<PyAny>, Value)>,
}

/// One tool under guard: its own dispatcher, built once from the tool's argument schema.
#[pyclass(frozen, module = "airlock_rs")]
struct ToolGuard {
    name: String,
    /// Whether a call may wait on a store (the ledger, effect records, the audit log): the GIL is released
    /// for those. A guard with none never waits, and handing the GIL over twice per call would cost more
    /// than the call (a thread that gives it up may wait a switch interval to get it back).
    waits: bool,
    dispatcher: Dispatcher,
    pending: Pending,
}

#[pymethods]
impl ToolGuard {
    /// A guard for the tool `name` whose model-visible arguments `schema` describes (a JSON Schema
    /// object, as JSON text), under `policy`, with escalated calls paused through `approvals` when given
    /// (refused otherwise).
    #[new]
    #[pyo3(signature = (name, description, schema, policy, approvals = None))]
    fn new(
        name: &str,
        description: &str,
        schema: &str,
        policy: &SecurityPolicy,
        approvals: Option<&InterruptApprovals>,
    ) -> PyResult<Self> {
        let schema: Value = serde_json::from_str(schema)
            .map_err(|e| SchemaError::new_err(format!("the schema of `{name}` is not JSON: {e}")))?;
        let pending: Pending = Arc::default();
        let executor_pending = Arc::clone(&pending);
        // A blank description would be refused by the tool rules; the model reads the tool's own anyway.
        let description = if description.trim().is_empty() { name } else { description };
        let tool = JsonTool::builder(name, description, schema)
            .build(move |call: JsonCall| {
                let pending = Arc::clone(&executor_pending);
                async move { run_callback(&pending, call) }
            })
            .map_err(|e| SchemaError::new_err(e.to_string()))?;
        let mut builder = Dispatcher::builder().tool(tool).policy(policy.policy.clone());
        if let Some(store) = &policy.store {
            builder = builder.audit(store.audit()).effects(store.effects());
        }
        if let Some(approvals) = approvals {
            builder = builder.interrupt_approvals(approvals.protocol.clone());
        }
        let dispatcher = builder.build().map_err(|e| PolicyError::new_err(e.to_string()))?;
        let waits = policy.store.is_some() || approvals.is_some();
        Ok(ToolGuard { name: name.to_owned(), waits, dispatcher, pending })
    }

    /// The tool definitions the policy lets a model see (as JSON text): empty when it refuses the tool.
    fn offered(&self) -> PyResult<String> {
        serde_json::to_string(&self.dispatcher.offered_tools()).map_err(|e| AirlockError::new_err(e.to_string()))
    }

    /// Runs one call through every gate. `arguments` is the model's arguments: a dict (or JSON text);
    /// `execute` is called with the admitted arguments (a dict: `arguments` itself when the gates changed
    /// nothing, so `admitted is arguments` says so) only if every gate admits the call, and returns the
    /// result to mask and record (a string, a JSON-like value, or `None`; other objects are recorded as
    /// their `str`). Returns a dict: `kind` is `message` (with `content`, `status`, `hints`,
    /// `stripped_arguments`, `refusal`) or `interrupt` (with `value`, the approval request to pause with).
    #[pyo3(signature = (tool_call_id, arguments, execute, *, thread_id = None, checkpoint_ns = String::new(),
                        checkpoint_map = BTreeMap::new(), resume = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, not a Rust API.
    fn dispatch(
        &self,
        py: Python<'_>,
        tool_call_id: String,
        arguments: &Bound<'_, PyAny>,
        execute: Py<PyAny>,
        thread_id: Option<String>,
        checkpoint_ns: String,
        checkpoint_map: BTreeMap<String, String>,
        resume: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let mut context = CallContext::new().with_checkpoint(checkpoint_ns, checkpoint_map);
        if let Some(thread) = thread_id {
            context = context.with_thread(thread);
        }
        if let Some(resume) = resume {
            context = context.with_resume(resume_value(py, resume)?);
        }
        let mut unreadable = None;
        let (call, given): (IncomingCall, _) = match arguments.cast::<PyString>() {
            // JSON text: parsed by the dispatcher at the first gate that reads the arguments, if any does.
            Ok(text) => (ToolCallText::new(tool_call_id.clone(), self.name.clone(), text.to_str()?).into(), None),
            // Objects refused before any gate reads them are not converted: the refusal and its record are the
            // same whatever the arguments are.
            Err(_) if self.dispatcher.refuses_before_arguments(&self.name, &context) => {
                (ToolCallText::new(tool_call_id.clone(), self.name.clone(), String::new()).into(), None)
            }
            Err(_) => match to_value(arguments, 0, BeyondI64::Refused) {
                Ok(value) => {
                    let given = (arguments.clone().unbind(), value.clone());
                    (ToolCall::new(tool_call_id.clone(), self.name.clone(), value).into(), Some(given))
                }
                // As for JSON text that does not parse: a string, which the dispatcher refuses (and records);
                // the refusal then says why the arguments could not be read.
                Err(error) => {
                    let why = error.value(py).to_string();
                    unreadable = Some(why.clone());
                    (ToolCall::new(tool_call_id.clone(), self.name.clone(), Value::String(why)).into(), None)
                }
            },
        };
        self.lock().entry(tool_call_id.clone()).or_default().push(InFlight { callback: execute, given });
        let outcome = if self.waits || nested() {
            py.detach(|| block_on(self.dispatcher.dispatch(call, &context)))
        } else {
            block_on(self.dispatcher.dispatch(call, &context))
        };
        // The callback is needed no longer, whatever the gates decided.
        {
            let mut pending = self.lock();
            if let Some(stack) = pending.get_mut(&tool_call_id) {
                stack.pop();
                if stack.is_empty() {
                    pending.remove(&tool_call_id);
                }
            }
        }
        let mut outcome = outcome.map_err(AirlockError::new_err)?;
        if let (Some(why), Outcome::Message(message)) = (unreadable, &mut outcome)
            && message.refusal.as_ref().is_some_and(|refusal| refusal.kind == RefusalKind::MalformedArguments)
        {
            message.content = format!("the arguments for `{}` cannot be read: {why}", self.name);
        }
        outcome_to_py(py, outcome)
    }
}

impl ToolGuard {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<InFlight>>> {
        // Only pushed to and popped from under the lock; a poisoned lock holds consistent data.
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Calls the node's `execute` for an admitted call, holding the GIL only for the call itself.
fn run_callback(pending: &Pending, call: JsonCall) -> Result<Value, ToolError> {
    Python::attach(|py| {
        let found = {
            let pending = pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            pending.get(&call.tool_call_id).and_then(|stack| stack.last()).map(|in_flight| {
                // The arguments as given, when the gates changed nothing: no copy for the callback.
                let same = in_flight
                    .given
                    .as_ref()
                    .filter(|(_, value)| value.as_object() == Some(&call.arguments))
                    .map(|(object, _)| object.clone_ref(py));
                (in_flight.callback.clone_ref(py), same)
            })
        };
        let Some((callback, same)) = found else {
            return Err(ToolError::not_executed("no callback is registered for this call"));
        };
        let admitted = match same {
            Some(object) => object,
            None => object_to_py(py, &call.arguments).map_err(|e| ToolError::not_executed(e.to_string()))?,
        };
        let returned = callback.call1(py, (admitted,)).map_err(|e| {
            // The node ran the tool and answered with an error message (its `handle_tool_errors`): a failure
            // whose text is the message's, masked like any result.
            if e.is_instance_of::<ToolFailed>(py) {
                ToolError::new(e.value(py).to_string())
            } else {
                ToolError::new(format!("the tool failed: {}", e.value(py)))
            }
        })?;
        to_value(returned.bind(py), 0, BeyondI64::AsText)
            .map_err(|e| ToolError::new(format!("the tool's result: {}", e.value(py))))
    })
}

/// How deep a value may nest (serde_json's own limit when it parses text).
const MAX_DEPTH: usize = 128;

/// What [`to_value`] makes of an integer beyond i64 and u64, which a `Value` holds only as a double.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BeyondI64 {
    /// Arguments: an error (the call is refused), never a rounded number the approval would bind.
    Refused,
    /// A tool's result, already produced: its exact decimal text, for the model to read.
    AsText,
}

/// A Python value as JSON, converted directly (no JSON text in between), as `json.dumps(value,
/// default=str)` would see it: `None`, booleans, integers, finite floats, strings, dicts (keys as
/// strings), lists and tuples; any other object is its `str`. Integers beyond i64 and u64 as `beyond` says.
fn to_value(object: &Bound<'_, PyAny>, depth: usize, beyond: BeyondI64) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(AirlockError::new_err("not JSON: nested too deeply"));
    }
    if object.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(text) = object.cast::<PyString>() {
        return Ok(Value::String(text.to_str()?.to_owned()));
    }
    if let Ok(flag) = object.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if let Ok(integer) = object.cast::<PyInt>() {
        if let Ok(n) = integer.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = integer.extract::<u64>() {
            return Ok(Value::from(n));
        }
        if beyond == BeyondI64::AsText {
            return Ok(Value::String(integer.str()?.to_str()?.to_owned()));
        }
        // Beyond 64 bits a `Value` holds it only as the nearest double, which the tool (given the exact int
        // when the gates change nothing) would not get: the binding, the display and the effect key would
        // cover another number. Refused, as canonical JSON refuses integers beyond ±(2^53 − 1).
        return Err(AirlockError::new_err(format!(
            "integer {} is outside ±(2^53 − 1) and beyond 64 bits: it would be rounded, so it is refused; send it \
             as a string",
            shown_integer(integer)
        )));
    }
    if let Ok(float) = object.cast::<PyFloat>() {
        return serde_json::Number::from_f64(float.value())
            .map(Value::Number)
            .ok_or_else(|| AirlockError::new_err("not JSON: a float that is not finite"));
    }
    if let Ok(dict) = object.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            map.insert(key_text(&key)?, to_value(&value, depth + 1, beyond)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = object.cast::<PyList>() {
        return list.iter().map(|item| to_value(&item, depth + 1, beyond)).collect::<PyResult<_>>().map(Value::Array);
    }
    if let Ok(tuple) = object.cast::<PyTuple>() {
        return tuple.iter().map(|item| to_value(&item, depth + 1, beyond)).collect::<PyResult<_>>().map(Value::Array);
    }
    Ok(Value::String(object.str()?.to_str()?.to_owned()))
}

/// An integer too large to hold, for a refusal: its digits when few (Python refuses to write more than
/// 4,300), otherwise its size.
fn shown_integer(integer: &Bound<'_, PyInt>) -> String {
    const MAX_SHOWN_DIGITS: usize = 40;
    let digits = integer.str().ok().and_then(|text| text.to_str().ok().map(str::to_owned));
    match digits {
        Some(text) if text.len() <= MAX_SHOWN_DIGITS => format!("`{text}`"),
        _ => {
            let bits = integer.call_method0(intern!(integer.py(), "bit_length")).and_then(|n| n.extract::<u64>());
            bits.map(|bits| format!("of {bits} bits")).unwrap_or_else(|_| "too large".to_owned())
        }
    }
}

/// A dict key as `json.dumps` writes it.
fn key_text(key: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = key.cast::<PyString>() {
        return Ok(text.to_str()?.to_owned());
    }
    if key.is_none() {
        return Ok("null".to_owned());
    }
    if let Ok(flag) = key.cast::<PyBool>() {
        return Ok(if flag.is_true() { "true" } else { "false" }.to_owned());
    }
    if key.cast::<PyInt>().is_ok() || key.cast::<PyFloat>().is_ok() {
        return Ok(key.str()?.to_str()?.to_owned());
    }
    Err(AirlockError::new_err(format!("not JSON: a key of type {}", key.get_type().name()?)))
}

/// A JSON value as Python's `json.loads` would give it.
fn value_to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any().unbind(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any().unbind(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind(),
        },
        Value::String(text) => PyString::new(py, text).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => object_to_py(py, map)?,
    })
}

fn object_to_py(py: Python<'_>, map: &serde_json::Map<String, Value>) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    for (key, value) in map {
        dict.set_item(key, value_to_py(py, value)?)?;
    }
    Ok(dict.into_any().unbind())
}

fn outcome_to_py(py: Python<'_>, outcome: Outcome) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    match outcome {
        Outcome::Message(message) => {
            dict.set_item(intern!(py, "kind"), intern!(py, "message"))?;
            dict.set_item(intern!(py, "tool_call_id"), message.tool_call_id)?;
            dict.set_item(intern!(py, "content"), message.content)?;
            let status = if message.status == Status::Success { intern!(py, "success") } else { intern!(py, "error") };
            dict.set_item(intern!(py, "status"), status)?;
            dict.set_item(intern!(py, "hints"), PyList::new(py, message.hints)?)?;
            dict.set_item(intern!(py, "stripped_arguments"), PyList::new(py, message.stripped_arguments)?)?;
            match message.refusal {
                Some(refusal) => {
                    let detail = PyDict::new(py);
                    let kind = serde_json::to_value(refusal.kind).map_err(|e| AirlockError::new_err(e.to_string()))?;
                    detail.set_item(intern!(py, "kind"), kind.as_str().unwrap_or("unknown"))?;
                    detail.set_item(intern!(py, "rule"), refusal.rule)?;
                    detail.set_item(intern!(py, "retry_after_secs"), refusal.retry_after.map(|d| d.as_secs_f64()))?;
                    dict.set_item(intern!(py, "refusal"), detail)?;
                }
                None => dict.set_item(intern!(py, "refusal"), py.None())?,
            }
        }
        Outcome::Interrupt { tool_call_id, request } => {
            dict.set_item(intern!(py, "kind"), "interrupt")?;
            dict.set_item(intern!(py, "tool_call_id"), tool_call_id)?;
            dict.set_item(intern!(py, "value"), from_json(py, request.as_value())?)?;
        }
        Outcome::Command { tool_call_id, .. } => {
            // A JSON tool returns values, never host commands; say so rather than guess.
            dict.set_item(intern!(py, "kind"), "unexpected")?;
            dict.set_item(intern!(py, "tool_call_id"), tool_call_id)?;
        }
        _ => dict.set_item(intern!(py, "kind"), "unexpected")?,
    }
    Ok(dict.into_any().unbind())
}

/// A Python value as JSON, through Python's own `json` module (what LangGraph checkpoints round-trip).
fn to_json(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text: String = py.import("json")?.call_method1("dumps", (value,))?.extract()?;
    serde_json::from_str(&text).map_err(|e| AirlockError::new_err(format!("not JSON: {e}")))
}

/// A resume value as the dispatcher reads it. One that has no JSON form (`nan`, a set, a tuple key, nesting
/// past any limit) is no approval: it becomes `null`, which the dispatcher refuses and records as it does any
/// other non-approval, rather than an exception out of the node. Only an interruption of Python itself
/// (`KeyboardInterrupt`, `SystemExit`) goes on up.
fn resume_value(py: Python<'_>, resume: &Bound<'_, PyAny>) -> PyResult<Value> {
    match to_json(py, resume) {
        Ok(value) => Ok(value),
        Err(error) if error.is_instance_of::<PyException>(py) => Ok(Value::Null),
        Err(error) => Err(error),
    }
}

fn from_json(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    value_to_py(py, value)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<RedbApprovalLedger>()?;
    m.add_class::<PostgresApprovalLedger>()?;
    m.add_class::<SecurityPolicy>()?;
    m.add_class::<InterruptApprovals>()?;
    m.add_class::<OperatorKey>()?;
    m.add_class::<ToolGuard>()?;
    m.add_class::<CheckpointCommitments>()?;
    m.add("AirlockError", py.get_type::<AirlockError>())?;
    m.add("PolicyError", py.get_type::<PolicyError>())?;
    m.add("SchemaError", py.get_type::<SchemaError>())?;
    m.add("LedgerError", py.get_type::<LedgerError>())?;
    m.add("ApprovalError", py.get_type::<ApprovalError>())?;
    m.add("ApprovalKeyError", py.get_type::<ApprovalKeyError>())?;
    m.add("ToolFailed", py.get_type::<ToolFailed>())?;
    Ok(())
}
