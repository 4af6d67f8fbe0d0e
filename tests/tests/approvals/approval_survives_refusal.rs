//! An approval is never lost to a later gate: a resumed call refused by the rate limit or by its effect
//! record (duplicate, ambiguous, in flight) leaves its grant live, because the grant is spent only in the
//! same atomic write that reserves the effect, after every gate that can refuse. And what no human can
//! change is refused before a human is asked. Each case runs on the memory ledger and on a real redb file.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_airlock::effect::{EffectStatus, EffectStore, Resolution};
use agent_airlock::ledger::{
    ApprovalLedger, EffectClaim, GrantState, LedgerError, MemoryLedger, PostgresLedger, RedbLedger, SpendAttempt,
};
use agent_airlock::{
    BuildError, CallContext, Dispatcher, ManualClock, Outcome, Policy, RefusalKind, State, Status, ToolCall, ToolError,
    ToolMessage, airlock_tool,
    approval::{ApprovalRequest, Decision, InterruptApprovals},
    tool,
};
use agent_airlock_tests::block_on;
use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
use serde_json::{Value, json};

/// What the payment provider saw, and how it behaves.
#[derive(Default)]
struct Provider {
    paid: AtomicUsize,
    /// 0: succeed; 1: fail after maybe paying (the effect becomes ambiguous); 2: wait for `release`.
    mode: AtomicUsize,
    started: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

/// Pay an invoice (escalated, once per invoice).
#[airlock_tool(escalate = "moves money", effect = "pay:{invoice}")]
async fn pay(
    /// The invoice.
    invoice: String,
    #[inject] provider: State<Provider>,
) -> Result<String, ToolError> {
    match provider.mode.load(Ordering::SeqCst) {
        1 => {
            provider.paid.fetch_add(1, Ordering::SeqCst);
            return Err(ToolError::new("connection reset after the request was sent"));
        }
        2 => {
            provider.started.notify_one();
            provider.release.notified().await;
        }
        _ => {}
    }
    provider.paid.fetch_add(1, Ordering::SeqCst);
    Ok(format!("paid {invoice}"))
}

enum Backend {
    Memory,
    Redb,
    Postgres,
}

struct Host {
    _dir: tempfile::TempDir,
    ledger: Arc<dyn ApprovalLedger>,
    approvals: InterruptApprovals,
    dispatcher: Arc<Dispatcher>,
    provider: Arc<Provider>,
    clock: Arc<ManualClock>,
}

impl Host {
    fn new(backend: &Backend, policy: Policy) -> Host {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ledger: Arc<dyn ApprovalLedger> = match backend {
            Backend::Memory => Arc::new(MemoryLedger::new()),
            Backend::Redb => Arc::new(RedbLedger::open(dir.path().join("airlock.redb")).expect("a fresh ledger file")),
            Backend::Postgres => {
                let url = agent_airlock_tests::pg_server::shared().fresh_database();
                Arc::new(PostgresLedger::connect(&url).expect("a fresh PostgreSQL ledger"))
            }
        };
        let clock = Arc::new(ManualClock::new(START));
        let approvals =
            InterruptApprovals::new(key_ring(), Arc::clone(&ledger), GRANT_TTL).with_clock(Arc::clone(&clock));
        // No `.effects(...)`: with interrupt approvals the effect records live in the ledger's storage.
        let dispatcher = Dispatcher::builder()
            .tool(tool!(pay))
            .policy(policy)
            .interrupt_approvals(approvals.clone())
            .clock(Arc::clone(&clock))
            .build()
            .expect("a valid dispatcher");
        Host {
            _dir: dir,
            ledger,
            approvals,
            dispatcher: Arc::new(dispatcher),
            provider: Arc::new(Provider::default()),
            clock,
        }
    }

    fn context(&self, resume: Option<Value>) -> CallContext {
        let context = CallContext::new().with_thread("t1").with_state_arc(Arc::clone(&self.provider));
        match resume {
            Some(resume) => context.with_resume(resume),
            None => context,
        }
    }

    fn dispatch(&self, call: ToolCall, resume: Option<Value>) -> Outcome {
        block_on(self.dispatcher.dispatch(call, &self.context(resume)))
    }

    /// Interrupts `call` and approves it: the resume value and the grant id.
    fn approved(&self, call: &ToolCall) -> (Value, String) {
        let interrupt = match self.dispatch(call.clone(), None) {
            Outcome::Interrupt { request, .. } => request.into_value(),
            other => panic!("expected an interrupt, got {other:?}"),
        };
        let resume = block_on(self.approvals.approve(&interrupt, "alice")).expect("approved").into_value();
        let grant_id = resume["airlock_grant"]["grant_id"].as_str().expect("a grant id").to_owned();
        (resume, grant_id)
    }

    fn resume(&self, call: &ToolCall, resume: &Value) -> ToolMessage {
        self.dispatch(call.clone(), Some(resume.clone())).expect_message()
    }

    fn grant_state(&self, grant_id: &str) -> GrantState {
        self.ledger.find_grant(grant_id).expect("the ledger reads").expect("the grant exists").state
    }

    fn requests(&self) -> usize {
        self.ledger.list_requests().expect("the ledger reads").len()
    }
}

fn pay_call(id: &str, invoice: &str) -> ToolCall {
    ToolCall::new(id, "pay", json!({ "invoice": invoice }))
}

fn refused(message: &ToolMessage) -> RefusalKind {
    assert_eq!(message.status, Status::Error, "{}", message.content);
    message.refusal.as_ref().unwrap_or_else(|| panic!("not a refusal: {}", message.content)).kind
}

/// One `pay` a minute, whoever calls.
fn one_a_minute() -> Policy {
    Policy::builder().rate_limit("pay", "1/minute").build().expect("a valid policy")
}

fn each_backend(test: impl Fn(&Backend)) {
    for backend in [Backend::Memory, Backend::Redb, Backend::Postgres] {
        test(&backend);
    }
}

#[test]
fn a_rate_limited_resume_keeps_its_grant_and_runs_once_the_bucket_refills() {
    each_backend(|backend| {
        let host = Host::new(backend, one_a_minute());
        let call = pay_call("c1", "inv-1");
        let (resume, grant) = host.approved(&call);
        // Another approved call empties the bucket between this approval and its resume.
        let other = pay_call("c2", "inv-2");
        let (other_resume, _) = host.approved(&other);
        assert_eq!(host.resume(&other, &other_resume).status, Status::Success);

        assert_eq!(refused(&host.resume(&call, &resume)), RefusalKind::RateLimited);
        assert_eq!(host.grant_state(&grant), GrantState::Live, "the rate refusal did not burn the approval");
        assert_eq!(host.provider.paid.load(Ordering::SeqCst), 1, "only the other call ran");

        host.clock.advance(Duration::from_secs(61));
        let message = host.resume(&call, &resume);
        assert_eq!(message.status, Status::Success, "{}", message.content);
        assert!(matches!(host.grant_state(&grant), GrantState::Spent { .. }));
        host.clock.advance(Duration::from_secs(61));
        // A replay meets the committed effect first: "already ran", and nothing runs.
        assert_eq!(refused(&host.resume(&call, &resume)), RefusalKind::Duplicate, "spent exactly once");
        assert_eq!(host.provider.paid.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_duplicate_effect_refuses_the_resume_and_leaves_the_grant_live() {
    each_backend(|backend| {
        let (host, [first, second], [resume_first, resume_second], second_grant) = two_approved_payments(backend);
        assert_eq!(host.resume(&first, &resume_first).status, Status::Success);

        assert_eq!(refused(&host.resume(&second, &resume_second)), RefusalKind::Duplicate);
        assert_eq!(host.grant_state(&second_grant), GrantState::Live);
        assert_eq!(host.provider.paid.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn an_ambiguous_effect_refuses_the_resume_and_the_grant_runs_after_the_operator_resolves_it() {
    each_backend(|backend| {
        let (host, [first, second], [resume_first, resume_second], second_grant) = two_approved_payments(backend);
        host.provider.mode.store(1, Ordering::SeqCst);
        assert_eq!(host.resume(&first, &resume_first).status, Status::Error, "the provider failed mid-call");
        host.provider.mode.store(0, Ordering::SeqCst);

        assert_eq!(refused(&host.resume(&second, &resume_second)), RefusalKind::EffectUnresolved);
        assert_eq!(host.grant_state(&second_grant), GrantState::Live);

        let effects = host.ledger.effects();
        let ambiguous = effects.list(&agent_airlock::effect::EffectFilter::ambiguous(), host.clock_now()).unwrap();
        assert_eq!(ambiguous.len(), 1);
        effects.resolve(&ambiguous[0].key, Resolution::Failed, "ops", host.clock_now()).expect("resolved");
        assert_eq!(host.resume(&second, &resume_second).status, Status::Success);
        assert_eq!(host.provider.paid.load(Ordering::SeqCst), 2, "the ambiguous attempt and the approved retry");
    });
}

impl Host {
    fn clock_now(&self) -> Duration {
        agent_airlock::Clock::now(&*self.clock)
    }
}

/// Two calls paying the same invoice, both approved and not yet resumed; the second one's grant id.
fn two_approved_payments(backend: &Backend) -> (Host, [ToolCall; 2], [Value; 2], String) {
    let host = Host::new(backend, Policy::new());
    let first = pay_call("c1", "inv-1");
    let second = pay_call("c2", "inv-1");
    let (resume_first, _) = host.approved(&first);
    let (resume_second, second_grant) = host.approved(&second);
    (host, [first, second], [resume_first, resume_second], second_grant)
}

#[test]
fn an_effect_in_flight_refuses_the_resume_and_leaves_the_grant_live() {
    each_backend(|backend| {
        let (host, [first, second], [resume_first, resume_second], second_grant) = two_approved_payments(backend);
        host.provider.mode.store(2, Ordering::SeqCst);

        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let dispatcher = Arc::clone(&host.dispatcher);
            let context = host.context(Some(resume_first));
            let running = tokio::spawn(async move { dispatcher.dispatch(first, &context).await });
            host.provider.started.notified().await;

            let message = host.dispatcher.dispatch(second.clone(), &host.context(Some(resume_second))).await;
            assert_eq!(refused(&message.expect_message()), RefusalKind::EffectInFlight);
            assert_eq!(host.grant_state(&second_grant), GrantState::Live);

            host.provider.release.notify_one();
            assert_eq!(running.await.unwrap().expect_message().status, Status::Success);
        });
    });
}

#[test]
fn an_empty_bucket_or_a_done_effect_is_refused_before_a_human_is_asked() {
    each_backend(|backend| {
        // Interrupt approvals: no request is recorded (no popup, no write) for a call that cannot run.
        let host = Host::new(backend, one_a_minute());
        let first = pay_call("c0", "inv-0");
        let (resume, _) = host.approved(&first);
        assert_eq!(host.resume(&first, &resume).status, Status::Success);
        let before = host.requests();
        assert_eq!(refused(&host.dispatch(pay_call("c1", "inv-1"), None).expect_message()), RefusalKind::RateLimited);
        assert_eq!(host.requests(), before, "no request recorded for a call the rate limit refuses");

        let host = Host::new(backend, Policy::new());
        let first = pay_call("c1", "inv-1");
        let (resume, _) = host.approved(&first);
        assert_eq!(host.resume(&first, &resume).status, Status::Success);
        let before = host.requests();
        assert_eq!(refused(&host.dispatch(pay_call("c2", "inv-1"), None).expect_message()), RefusalKind::Duplicate);
        assert_eq!(host.requests(), before);
    });

    // An approver callback is not called either.
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let dispatcher = Dispatcher::builder()
        .tool(tool!(pay))
        .policy(one_a_minute())
        .effects(agent_airlock::effect::MemoryEffectStore::new())
        .approver(move |_request: ApprovalRequest| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Decision::Approve }
        })
        .clock(ManualClock::new(START))
        .build()
        .unwrap();
    let context = CallContext::new().with_thread("t1").with_state_arc(Arc::new(Provider::default()));
    assert_eq!(
        block_on(dispatcher.dispatch(pay_call("c1", "inv-1"), &context)).expect_message().status,
        Status::Success
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let message = block_on(dispatcher.dispatch(pay_call("c2", "inv-2"), &context)).expect_message();
    assert_eq!(refused(&message), RefusalKind::RateLimited);
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the human was not asked about a call the rate limit refuses");
}

#[test]
fn an_effect_store_apart_from_the_approval_ledger_is_refused_at_build_time() {
    let approvals = InterruptApprovals::new(key_ring(), Arc::new(MemoryLedger::new()), GRANT_TTL)
        .with_clock(Arc::new(ManualClock::new(START)));
    let built = Dispatcher::builder()
        .tool(tool!(pay))
        .effects(agent_airlock::effect::MemoryEffectStore::new())
        .interrupt_approvals(approvals)
        .build();
    assert!(matches!(built, Err(BuildError::EffectsApartFromLedger(tool)) if tool == "pay"));

    // One redb database for both is accepted.
    let dir = tempfile::tempdir().unwrap();
    let database = Arc::new(redb::Database::create(dir.path().join("airlock.redb")).unwrap());
    let ledger = Arc::new(RedbLedger::from_database(Arc::clone(&database)).unwrap());
    let effects = agent_airlock::effect::RedbEffectStore::new(database).unwrap();
    let approvals =
        InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(Arc::new(ManualClock::new(START)));
    let built = Dispatcher::builder().tool(tool!(pay)).effects(effects).interrupt_approvals(approvals).build();
    assert!(built.is_ok());
}

/// Pay an amount (escalated only by a policy's argument condition, once per invoice).
#[airlock_tool(effect = "pay:{invoice}")]
async fn pay_amount(
    /// The invoice.
    invoice: String,
    /// The amount, in cents.
    amount: u64,
) -> Result<String, ToolError> {
    Ok(format!("paid {amount} on {invoice}"))
}

/// A call a policy condition escalates is spent and reserved in the ledger's store like any escalated call, so
/// an effect store apart from the ledger is refused for it too: otherwise a resumed call's reservation goes to
/// the ledger while the settlement and the next call's duplicate check read the other store, and the effect
/// runs twice.
#[test]
fn an_effect_store_apart_from_the_ledger_is_refused_when_only_a_condition_escalates() {
    let builder = |policy: Policy| {
        let approvals = InterruptApprovals::new(key_ring(), Arc::new(MemoryLedger::new()), GRANT_TTL)
            .with_clock(Arc::new(ManualClock::new(START)));
        Dispatcher::builder()
            .tool(tool!(pay_amount))
            .policy(policy)
            .effects(agent_airlock::effect::MemoryEffectStore::new())
            .interrupt_approvals(approvals)
            .build()
    };
    let escalating = Policy::builder().escalate_when("pay_*", "amount > 100", "a large payment").build().unwrap();
    assert!(matches!(builder(escalating), Err(BuildError::EffectsApartFromLedger(tool)) if tool == "pay_amount"));
    // A condition that only denies never asks a human: nothing is spent, the store apart is fine.
    let denying = Policy::builder().deny_when("pay_*", "amount > 100", "too large").build().unwrap();
    assert!(builder(denying).is_ok());
    assert!(builder(Policy::new()).is_ok());
}

/// The ledger's own promise, on every backend: a spend and a reservation are one write, both or neither.
#[test]
fn spend_and_reserve_is_all_or_nothing() {
    each_backend(|backend| {
        let host = Host::new(backend, Policy::new());
        let call = pay_call("c1", "inv-1");
        let (resume, grant) = host.approved(&call);
        let binding = host.ledger.find_grant(&grant).unwrap().unwrap().grant.binding;
        let effects = host.ledger.effects();
        let now = host.clock_now();
        let claim = |key: &str| EffectClaim { key: key.to_owned(), lease: Duration::from_secs(60) };
        let attempt = |grant_id: &str| SpendAttempt { grant_id: grant_id.to_owned(), binding: binding.clone(), now };

        // The effect refuses: the grant stays live.
        let held = effects.reserve("held", Duration::from_secs(60), now).unwrap();
        let answer = block_on(host.ledger.spend_and_reserve(attempt(&grant), claim("held"))).expect("no ledger error");
        assert!(matches!(answer, Err(agent_airlock::effect::EffectError::InFlight { .. })));
        assert_eq!(host.grant_state(&grant), GrantState::Live);
        effects.commit(&held, now).unwrap();

        // The spend refuses (no such grant): nothing is reserved.
        let unknown = "0".repeat(32);
        let answer = block_on(host.ledger.spend_and_reserve(attempt(&unknown), claim("fresh")));
        assert!(matches!(answer, Err(LedgerError::UnknownGrant { .. })));
        assert_eq!(effects.get("fresh").unwrap(), None);

        // Both succeed together; a second spend is refused and reserves nothing more.
        let done = block_on(host.ledger.spend_and_reserve(attempt(&grant), claim("fresh"))).unwrap().unwrap();
        assert_eq!(done.reservation.key(), "fresh");
        assert!(matches!(host.grant_state(&grant), GrantState::Spent { .. }));
        assert_eq!(effects.get("fresh").unwrap().unwrap().status_at(now), EffectStatus::Reserved);
        let again = block_on(host.ledger.spend_and_reserve(attempt(&grant), claim("other")));
        assert!(matches!(again, Err(LedgerError::AlreadySpent { .. })));
        assert_eq!(effects.get("other").unwrap(), None);
        drop(resume);
    });
}
