//! `airlock requests`, `approve`, `deny`, `spent` and `prune`: approval requests, shown only from their
//! sealed value after the seal is checked, and decided by an operator.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::approval::display::{escape, value_text};
use agent_airlock::audit::{AuditConfig, AuditLog};
use agent_airlock::ledger::{ApprovalLedger, RequestEntry, RequestStatus};
use agent_airlock::{
    Clock, SystemClock,
    approval::{DecisionError, DecisionSigner, InterruptApprovals, InterruptRequest, KeyRing, ResumeValue},
    keys::ApprovalKey,
};
use clap::Subcommand;

use serde_json::{Value, json};

use crate::effects::{ensure_signable_for, open_audit_file};
use crate::keys::{AuditKeySource, KeySource, SigningKeySource, audit_key, warn_if_others_can_read};
use crate::output::{millis, print_json, when};
use crate::{Cli, Failure, Storage};

#[derive(Subcommand)]
pub(crate) enum RequestsCommand {
    /// Every request, oldest first, with its status; tool and reason only where the seal verifies.
    List {
        /// Only pending requests.
        #[arg(long)]
        pending: bool,
        #[command(flatten)]
        key: KeySource,
    },
    /// One request in full, if its seal verifies: the tool, the reason, every argument (secrets masked).
    Show {
        /// The request id.
        request_id: String,
        #[command(flatten)]
        key: KeySource,
    },
}

/// `airlock requests list | show`.
pub(crate) fn requests(cli: &Cli, command: &RequestsCommand) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let now = SystemClock.now();
    let ledger = storage.ledger()?;
    match command {
        RequestsCommand::List { pending, key } => {
            let entries = list_requests(&*ledger, *pending)?;
            let verifier = Verifier::new(Arc::clone(&ledger), key)?;
            if cli.json {
                let listed = entries.iter().map(|e| entry_json(e, &verifier.check(e), now)).collect();
                print_json(&Value::Array(listed));
            } else if entries.is_empty() {
                println!("no approval requests");
            } else {
                if verifier.is_none() {
                    eprintln!("{NO_KEY}");
                }
                println!("{:<32}  {:<8}  {:<34}  {:<20}  reason", "request", "status", "requested", "tool");
                for e in &entries {
                    let (tool, reason) = match verifier.check(e) {
                        Sealed::Verified(request) => {
                            (escape(request.tool()).into_owned(), escape(request.reason()).into_owned())
                        }
                        Sealed::Unverified => ("UNVERIFIED".to_owned(), "(no key: not shown)".to_owned()),
                        Sealed::Tampered(why) => ("TAMPERED".to_owned(), format!("(not shown: {why})")),
                    };
                    let status = e.status.label(now);
                    let requested = when(now, e.request.requested_at);
                    println!(
                        "{:<32}  {status:<8}  {requested:<34}  {tool:<20}  {reason}",
                        escape(&e.request.request_id)
                    );
                }
            }
        }
        RequestsCommand::Show { request_id, key } => {
            let entry = find(&*ledger, request_id)?;
            let sealed = Verifier::new(Arc::clone(&ledger), key)?.check(&entry);
            if cli.json {
                print_json(&entry_json(&entry, &sealed, now));
            } else {
                println!("request   {}", escape(&entry.request.request_id));
                println!("status    {}", entry.status.label(now));
                if let Some(decision) = decision_text(&entry.status) {
                    println!("decision  {decision}");
                }
                match &sealed {
                    Sealed::Verified(request) => {
                        println!("seal      verified (key `{}`)", escape(request.key_id()));
                        println!("call      {}", call_site(request));
                        println!("requested {}", when(now, request.requested_at()));
                        print!("{}", render_request(request)?);
                    }
                    Sealed::Unverified => println!("seal      UNVERIFIED: {NO_KEY}"),
                    Sealed::Tampered(why) => {
                        println!("seal      TAMPERED: {why}; the record's tool, reason and arguments are not shown");
                    }
                }
            }
        }
    }
    Ok(())
}

/// `airlock approve`: shows the request in full, asks, and prints the resume value.
pub(crate) fn approve(
    cli: &Cli,
    request_id: &str,
    yes: bool,
    signing: &SigningKeySource,
    ttl_secs: u64,
    key: &KeySource,
) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let now = SystemClock.now();
    let ttl = Duration::from_secs(ttl_secs);
    let signing_key = signing.load()?;
    let signer = DecisionSigner::Operator(&signing_key);
    let approved = approve_request(storage.ledger()?, key, request_id, Some(signer), "", ttl, |request, entry| {
        if yes { Ok(()) } else { confirm(request, entry.status.label(now)) }
    })?;
    match approved {
        Approval::Granted(resume) => print_resume(cli, resume.as_value(), "approved"),
        Approval::Waiting { approvers, required } if cli.json => {
            print_json(&json!({ "status": "approving", "approvers": approvers, "required": required }));
        }
        Approval::Waiting { approvers, required } => {
            eprintln!("{}", Approval::waiting_text(&approvers, required));
        }
    }
    Ok(())
}

/// `airlock deny`: prints the resume value that refuses the call. With `revocations` (the hosts' append-only
/// audit file and its key), an approved grant the denial revokes is recorded revoked in that file **before** the
/// ledger's write, so a host writing the file refuses it even if the database's row is later set back to live;
/// a grant issued between the two (another approver's) is recorded right after
/// ([`InterruptApprovals::with_revocation_log`]).
pub(crate) fn deny(
    cli: &Cli,
    request_id: &str,
    signing: &SigningKeySource,
    reason: Option<&str>,
    key: &KeySource,
    revocations: Option<(&Path, &AuditKeySource)>,
) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let signing_key = signing.load()?;
    let signer = DecisionSigner::Operator(&signing_key);
    // The file is opened (and its key checked) before anything is written.
    let log = revocations.map(|(path, source)| revocation_log(path, source)).transpose()?;
    let resume = deny_request(storage.ledger()?, key, request_id, Some(signer), "", reason, log)?;
    print_resume(cli, resume.as_value(), "denied");
    Ok(())
}

/// The hosts' append-only audit file, to record revocations in: it must exist, and a signed log needs its key.
fn revocation_log(path: &Path, source: &AuditKeySource) -> Result<Arc<AuditLog>, Failure> {
    let key = audit_key(source)?;
    let signed = key.is_some();
    let config = AuditConfig { key, ..AuditConfig::default() };
    let log = open_audit_file(path, config).map_err(|e| format!("{e}; nothing was denied"))?;
    ensure_signable_for(&log, signed, "revocation", "denied")?;
    Ok(Arc::new(log))
}

/// `airlock spent`: the grants that admitted their call.
pub(crate) fn spent(cli: &Cli) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let now = SystemClock.now();
    let ledger = storage.ledger()?;
    let spent: Vec<Value> = ledger
        .list_requests()
        .map_err(|e| e.to_string())?
        .iter()
        .filter_map(|e| match &e.status {
            RequestStatus::Spent(record) => Some(json!({
                "request_id": e.request.request_id,
                "tool": e.request.tool,
                "grant_id": record.grant.grant_id,
                "approver": record.grant.approver,
                "spent_at_ms": millis(record.spent_at),
            })),
            _ => None,
        })
        .collect();
    if cli.json {
        print_json(&Value::Array(spent));
    } else if spent.is_empty() {
        println!("no spent grants");
    } else {
        for s in spent {
            let spent_at = Duration::from_millis(s["spent_at_ms"].as_u64().unwrap_or(0));
            println!(
                "{}  {}  approved by {}  spent {}",
                escape(s["grant_id"].as_str().unwrap_or("")),
                escape(s["tool"].as_str().unwrap_or("")),
                escape(s["approver"].as_str().unwrap_or("")),
                when(now, spent_at)
            );
        }
    }
    Ok(())
}

/// `airlock prune`: removes approval records settled before `older_than` ago.
pub(crate) fn prune(cli: &Cli, older_than: Duration) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let now = SystemClock.now();
    let ledger = storage.ledger()?;
    let cutoff = now.saturating_sub(older_than);
    let report = ledger.prune(cutoff, now).wait().map_err(|e| e.to_string())?;
    if cli.json {
        print_json(&json!({
            "cutoff_ms": millis(cutoff),
            "requests": report.requests,
            "grants": report.grants,
        }));
    } else {
        println!(
            "pruned {} requests and {} grants settled before {}",
            report.requests.len(),
            report.grants.len(),
            when(now, cutoff)
        );
    }
    Ok(())
}

pub(crate) const NO_KEY: &str = "no approval key given (`--key-file`, or `--key-env`, default `AIRLOCK_APPROVAL_KEY`): requests \
                      cannot be verified, so their tool, reason and arguments are not shown";

/// A stored request after its seal was checked.
pub(crate) enum Sealed {
    /// Sealed under the given key: its content is what the guard issued.
    Verified(Box<InterruptRequest>),
    /// No key was given to check it with.
    Unverified,
    /// The seal does not verify (altered in storage, or under another key): nothing in it is shown.
    Tampered(String),
}

/// Checks seals with the operator's key, if one was given.
pub(crate) struct Verifier {
    source: Option<(Arc<dyn ApprovalLedger>, ApprovalKeySecret)>,
}

/// Where the key's secret is, to be loaded under the key id a request names.
pub(crate) enum ApprovalKeySecret {
    File(PathBuf),
    Env(String),
}

impl Verifier {
    pub(crate) fn new(ledger: Arc<dyn ApprovalLedger>, source: &KeySource) -> Result<Self, Failure> {
        let secret = match &source.key_file {
            Some(path) => Some(ApprovalKeySecret::File(path.clone())),
            None if std::env::var_os(&source.key_env).is_some() => Some(ApprovalKeySecret::Env(source.key_env.clone())),
            None => None,
        };
        let verifier = Verifier { source: secret.map(|secret| (ledger, secret)) };
        // A key given but unreadable is the operator's error, not the records'.
        verifier.load("any").transpose()?;
        Ok(verifier)
    }

    pub(crate) fn load(&self, key_id: &str) -> Option<Result<ApprovalKey, Failure>> {
        let (_, secret) = self.source.as_ref()?;
        let key = match secret {
            ApprovalKeySecret::File(path) => ApprovalKey::from_file(key_id, path),
            ApprovalKeySecret::Env(var) => ApprovalKey::from_env(key_id, var),
        };
        Some(key.map_err(|e| e.to_string()))
    }

    pub(crate) fn is_none(&self) -> bool {
        self.source.is_none()
    }

    pub(crate) fn check(&self, entry: &RequestEntry) -> Sealed {
        let Some((ledger, _)) = &self.source else { return Sealed::Unverified };
        // The key is named by the sealed value; a copy altered to name another key fails its seal anyway.
        let key_id = entry.request.interrupt["airlock_approval"]["key_id"].as_str().unwrap_or(&entry.request.key_id);
        let key = match self.load(key_id) {
            Some(Ok(key)) => key,
            Some(Err(error)) => return Sealed::Tampered(format!("the key could not be loaded: {error}")),
            None => return Sealed::Unverified,
        };
        let approvals = InterruptApprovals::new(KeyRing::new(key), Arc::clone(ledger), Duration::ZERO)
            .with_clock(Arc::new(SystemClock));
        match approvals.verify_request(&entry.request.interrupt) {
            // The ledger's copies must agree with the sealed value, or the record was edited.
            Ok(request) if request.request_id() == entry.request.request_id => Sealed::Verified(Box::new(request)),
            Ok(_) => Sealed::Tampered("the record's id differs from its sealed request's".to_owned()),
            Err(error) => Sealed::Tampered(error.to_string()),
        }
    }
}

/// The sealed call, as the human must see it to decide: every exact argument (the digest of what is shown
/// checked against the binding's), secrets flagged, never hidden. An error says why it cannot be shown,
/// and so cannot be approved.
pub(crate) fn render_request(request: &InterruptRequest) -> Result<String, Failure> {
    request.render().map_err(|e| format!("{e}; it cannot be approved"))
}

pub(crate) fn call_site(request: &InterruptRequest) -> String {
    let call = request.call();
    format!(
        "thread {}, tool call {}, checkpoint {}",
        escape(&call.thread_id),
        escape(&call.tool_call_id),
        value_text(&json!(call.checkpoint))
    )
}

/// Shows the sealed call in full on standard error and asks on the terminal; anything but yes approves
/// nothing.
pub(crate) fn confirm(request: &InterruptRequest, status: &str) -> Result<(), Failure> {
    let shown = render_request(request)?;
    if !std::io::stdin().is_terminal() {
        return Err("refusing to approve without confirmation: standard input is not a terminal; pass `--yes` to \
                    approve from a script"
            .to_owned());
    }
    eprintln!("request {} ({status}), seal verified", escape(request.request_id()));
    eprintln!("call    {}", call_site(request));
    eprint!("{shown}");
    eprint!("Approve this call? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer).map_err(|e| format!("reading the answer failed: {e}"))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err("not approved".to_owned()),
    }
}

/// Who decided a request, and how, for an operator (escaped); `None` while it is pending.
pub(crate) fn decision_text(status: &RequestStatus) -> Option<String> {
    Some(match status {
        RequestStatus::Pending => return None,
        RequestStatus::Approving { approvals, .. } => {
            let names: Vec<String> = approvals.iter().map(|a| escape(&a.approver).into_owned()).collect();
            format!("approved so far by {}", names.join(", "))
        }
        RequestStatus::Granted(grant) => format!("approved by {}", approvers_text(&grant.approvers())),
        RequestStatus::Spent(spent) => format!("approved by {}, spent", approvers_text(&spent.grant.approvers())),
        RequestStatus::Denied(denial) => match &denial.reason {
            Some(reason) => format!("denied by {}: {}", escape(&denial.denied_by), escape(reason)),
            None => format!("denied by {}", escape(&denial.denied_by)),
        },
    })
}

/// The approvers of a grant, escaped, `and`-joined.
pub(crate) fn approvers_text(approvers: &[&str]) -> String {
    approvers.iter().map(|name| escape(name)).collect::<Vec<_>>().join(" and ")
}

/// Every request, oldest first, or only the ones still waiting for a decision.
pub(crate) fn list_requests(ledger: &dyn ApprovalLedger, pending_only: bool) -> Result<Vec<RequestEntry>, Failure> {
    let mut entries = ledger.list_requests().map_err(|e| e.to_string())?;
    entries.retain(|e| !pending_only || e.status.is_waiting());
    Ok(entries)
}

/// Approves `request_id`, signed by `signer` (or, from a console without a key of its own, unsigned as
/// `operator`) (`airlock approve` and the console): the seal is checked first (a
/// tampered request is approved by no one), then `confirm` is shown the verified request and may refuse;
/// only then is the approval recorded. Returns the resume value the host resumes the call with, or, for a
/// request that needs more distinct approvers, who approved so far.
pub(crate) fn approve_request(
    ledger: Arc<dyn ApprovalLedger>,
    key: &KeySource,
    request_id: &str,
    signer: Option<DecisionSigner<'_>>,
    operator: &str,
    ttl: Duration,
    confirm: impl FnOnce(&InterruptRequest, &RequestEntry) -> Result<(), Failure>,
) -> Result<Approval, Failure> {
    let entry = find(&*ledger, request_id)?;
    let approvals = approvals(ledger, key, &entry.request.key_id, ttl)?;
    let request = approvals
        .verify_request(&entry.request.interrupt)
        .map_err(|e| format!("request `{}` is TAMPERED: {e}; nothing was approved", escape(request_id)))?;
    // The record found under this id must hold the sealed request of this id, or it is another request's.
    if request.request_id() != request_id {
        return Err(format!(
            "request `{}` is TAMPERED: it holds the sealed request `{}`; nothing was approved",
            escape(request_id),
            escape(request.request_id())
        ));
    }
    confirm(&request, &entry)?;
    let approved = match signer {
        Some(signer) => approvals.approve_signed(&entry.request.interrupt, signer).wait(),
        None => approvals.approve(&entry.request.interrupt, operator).wait(),
    };
    match approved {
        Ok(resume) => Ok(Approval::Granted(resume)),
        Err(DecisionError::MoreApproversNeeded { approvers, required }) => {
            Ok(Approval::Waiting { approvers, required })
        }
        Err(err) => Err(err.to_string()),
    }
}

/// What an operator's approval did.
pub(crate) enum Approval {
    /// The grant is issued: the host resumes the call with this value.
    Granted(ResumeValue),
    /// Recorded; the request needs more distinct approvers.
    Waiting { approvers: Vec<String>, required: u32 },
}

impl Approval {
    /// For an operator: who approved so far, and how many approvals the request needs.
    pub(crate) fn waiting_text(approvers: &[String], required: u32) -> String {
        let names: Vec<String> = approvers.iter().map(|name| escape(name).into_owned()).collect();
        format!(
            "approval recorded ({} of {required}: {}); the request waits for {} more distinct approver(s)",
            approvers.len(),
            names.join(", "),
            (required as usize).saturating_sub(approvers.len())
        )
    }
}

/// Denies `request_id`, signed by `signer` (or, from a console without a key of its own, unsigned as
/// `operator`), after checking its seal; `reason` reaches the model. With `revocations`, a grant the denial
/// revokes is recorded there first. Returns the resume value that refuses the call.
pub(crate) fn deny_request(
    ledger: Arc<dyn ApprovalLedger>,
    key: &KeySource,
    request_id: &str,
    signer: Option<DecisionSigner<'_>>,
    operator: &str,
    reason: Option<&str>,
    revocations: Option<Arc<AuditLog>>,
) -> Result<ResumeValue, Failure> {
    let entry = find(&*ledger, request_id)?;
    let mut approvals = approvals(ledger, key, &entry.request.key_id, Duration::from_secs(60))?;
    if let Some(log) = revocations {
        approvals = approvals.with_revocation_log(log);
    }
    match signer {
        Some(signer) => approvals.deny_signed(&entry.request.interrupt, signer, reason).wait(),
        None => approvals.deny(&entry.request.interrupt, operator, reason).wait(),
    }
    .map_err(|e| e.to_string())
}

pub(crate) fn find(ledger: &dyn ApprovalLedger, request_id: &str) -> Result<RequestEntry, Failure> {
    ledger
        .find_request(request_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no approval request `{request_id}`"))
}

pub(crate) fn approvals(
    ledger: Arc<dyn ApprovalLedger>,
    source: &KeySource,
    key_id: &str,
    ttl: Duration,
) -> Result<InterruptApprovals, Failure> {
    let key = match &source.key_file {
        Some(path) => {
            warn_if_others_can_read(path);
            ApprovalKey::from_file(key_id, path)
        }
        None => ApprovalKey::from_env(key_id, &source.key_env),
    }
    .map_err(|e| e.to_string())?;
    Ok(InterruptApprovals::new(KeyRing::new(key), ledger, ttl).with_clock(Arc::new(SystemClock)))
}

pub(crate) fn print_resume(cli: &Cli, resume: &Value, what: &str) {
    if cli.json {
        print_json(resume);
    } else {
        eprintln!("{what}; resume the call with this value:");
        println!("{resume}");
    }
}

pub(crate) fn entry_json(entry: &RequestEntry, sealed: &Sealed, now: Duration) -> Value {
    let r = &entry.request;
    let mut out = json!({
        "request_id": r.request_id,
        "status": entry.status.label(now),
        "requested_at_ms": millis(r.requested_at),
        "decision": serde_json::to_value(&entry.status).unwrap_or(Value::Null),
    });
    match sealed {
        Sealed::Verified(request) => {
            out["seal"] = json!("verified");
            out["tool"] = json!(request.tool());
            out["rule"] = json!(request.rule());
            out["reason"] = json!(request.reason());
            out["key_id"] = json!(request.key_id());
            // The exact arguments (opened with the key); whether a human can be shown them whole.
            out["arguments"] = Value::Object(request.arguments().clone());
            out["approvable"] = json!(request.render().is_ok());
            out["call"] = serde_json::to_value(request.call()).unwrap_or(Value::Null);
        }
        Sealed::Unverified => out["seal"] = json!("unverified"),
        Sealed::Tampered(why) => {
            out["seal"] = json!("tampered");
            out["seal_error"] = json!(why);
        }
    }
    out
}

/// A duration in humantime's grammar: `30d`, `12h`, `2weeks`, `1h 30m` (`0s`: every settled record).
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}` is not a duration ({e}), e.g. `30d`, `12h`"))
}
