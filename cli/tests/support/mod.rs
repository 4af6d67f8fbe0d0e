//! What the CLI tests share: running the `airlock` binary on a database file, and recording or admitting
//! calls as a dispatcher would, against the same file.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

pub(crate) mod console;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::SystemClock;
use agent_airlock::approval::{AdmitError, BindingInput, InterruptApprovals, KeyRing};
use agent_airlock::keys::ApprovalKey;
use agent_airlock::ledger::{ApprovalLedger, RedbLedger};
use serde_json::{Map, Value};

/// The approval key, given to the binary through `AIRLOCK_APPROVAL_KEY`.
pub(crate) const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// How long a request and a grant live unless a test says otherwise.
pub(crate) const TTL: Duration = Duration::from_secs(600);

/// Runs `airlock --db <db> <args>` with the approval key in the environment.
pub(crate) fn airlock(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env("AIRLOCK_APPROVAL_KEY", SECRET)
        .output()
        .unwrap()
}

/// The signing key file of operator `name`, made once per test process with `airlock operators add`
/// (the public keys are listed in [`operators_file`]).
pub(crate) fn signing_key(name: &str) -> String {
    static KEYS: std::sync::Mutex<Option<tempfile::TempDir>> = std::sync::Mutex::new(None);
    let mut dir = KEYS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = dir.get_or_insert_with(|| tempfile::tempdir().unwrap());
    let path = dir.path().join(format!("{name}.key"));
    if !path.exists() {
        let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["operators", "add", name, "--key-out"])
            .arg(&path)
            .arg("--operators")
            .arg(dir.path().join("operators.toml"))
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    path.display().to_string()
}

/// The operators file listing every key [`signing_key`] made so far.
pub(crate) fn operators_file() -> String {
    let key = signing_key("alice");
    Path::new(&key).with_file_name("operators.toml").display().to_string()
}

/// The standard output of a run that succeeded (its standard error otherwise, as the failure).
pub(crate) fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The standard output of a run that succeeded, as JSON.
pub(crate) fn stdout_json(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap()
}

/// Interrupt approvals on the file at `db` with the test key and no limit on pending requests; the file
/// is closed again when the value is dropped, so the CLI can open it.
pub(crate) fn approvals(db: &Path, grant_ttl: Duration) -> InterruptApprovals {
    approvals_on(Arc::new(RedbLedger::open(db).unwrap()), grant_ttl)
}

/// Interrupt approvals on `ledger` with the test key and no limit on pending requests.
pub(crate) fn approvals_on(ledger: Arc<dyn ApprovalLedger>, grant_ttl: Duration) -> InterruptApprovals {
    let key = ApprovalKey::from_hex("k1", SECRET).unwrap();
    InterruptApprovals::new(KeyRing::new(key), ledger, grant_ttl)
        .with_clock(Arc::new(SystemClock))
        .with_max_pending(None)
}

/// One tool's calls, numbered: call `n` has the arguments `arguments(n)` and the id `call_{n}`, in thread
/// `t1` at checkpoint `c1`, as the dispatcher would bind it.
pub(crate) struct Calls {
    /// The tool's registered name.
    pub(crate) tool: &'static str,
    /// The arguments of call `n`.
    pub(crate) arguments: fn(u64) -> Map<String, Value>,
}

impl Calls {
    /// Runs `f` with call `n` bound.
    pub(crate) fn with<R>(&self, n: u64, f: impl FnOnce(&BindingInput<'_>) -> R) -> R {
        let checkpoint = [(String::new(), "c1".to_owned())].into();
        let arguments = (self.arguments)(n);
        let call = BindingInput {
            thread_id: "t1",
            checkpoint_ns: "",
            checkpoint: &checkpoint,
            tool_call_id: &format!("call_{n}"),
            tool: self.tool,
            arguments: &arguments,
        };
        f(&call)
    }

    /// Records a pending request for call `n` under the rule `attribute`, then closes the file; returns
    /// the request id.
    pub(crate) fn request(&self, db: &Path, n: u64, reason: &str) -> String {
        self.request_in(&approvals(db, TTL), n, reason)
    }

    /// Records a pending request for call `n` under the rule `attribute` through `approvals`; returns the
    /// request id.
    pub(crate) fn request_in(&self, approvals: &InterruptApprovals, n: u64, reason: &str) -> String {
        self.with(n, |call| approvals.request(call, "attribute", reason).wait().unwrap()).request_id().to_owned()
    }

    /// Admits call `n` with `resume`, as the resumed dispatch would, then closes the file.
    pub(crate) fn admit(&self, db: &Path, n: u64, resume: &Value) -> Result<(), AdmitError> {
        self.with(n, |call| approvals(db, TTL).admit(call, resume).wait().map(|_| ()))
    }
}
