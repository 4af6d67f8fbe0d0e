//! Tools defined at run time by a JSON Schema (`agent_airlock::json_tool`): the dispatcher guards them
//! as it guards `#[airlock_tool]` tools. Nested ghosts are stripped with their paths, bad schemas are
//! refused when the tool is made, refusals stay bounded, what the published schema accepts is what the
//! runtime admits, and a call runs through escalation and effects on a real redb ledger.

use std::sync::{Arc, Mutex};

use agent_airlock::json_tool::{Closing, JsonCall, JsonTool, JsonToolError};
use agent_airlock::{CallContext, Dispatcher, GhostPolicy, Status, Tool, ToolCall, ToolError, ToolMessage};
use agent_airlock_tests::block_on;
use serde_json::{Value, json};

/// What an upstream received, call by call.
type Received = Arc<Mutex<Vec<JsonCall>>>;

/// A tool whose executor records each admitted call and answers `{"ok": true}`.
fn recording(name: &str, schema: Value) -> (JsonTool, Received) {
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let tool = JsonTool::builder(name, "A tool defined by a schema.", schema)
        .build(move |call: JsonCall| {
            log.lock().unwrap().push(call);
            async { Ok::<Value, ToolError>(json!({"ok": true})) }
        })
        .expect("a valid definition");
    (tool, received)
}

fn dispatch(dispatcher: &Dispatcher, name: &str, arguments: Value) -> ToolMessage {
    block_on(dispatcher.dispatch(ToolCall::new("call_1", name, arguments), &CallContext::new())).expect_message()
}

/// A schema as an MCP server written with the Python SDK publishes it: objects left open, `$defs`, an
/// optional field as `anyOf` with `null`.
fn pydantic_style() -> Value {
    json!({
        "type": "object",
        "title": "create_orderArguments",
        "properties": {
            "customer": {"$ref": "#/$defs/Customer"},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "title": "Lines"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Note"}
        },
        "required": ["customer", "lines"],
        "$defs": {
            "Customer": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "email": {"type": "string"}},
                "required": ["id"]
            },
            "Line": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
                "required": ["sku", "quantity"]
            }
        }
    })
}

#[test]
fn nested_ghosts_are_stripped_with_their_paths_and_never_reach_the_executor() {
    let (tool, received) = recording("create_order", pydantic_style());
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(
        &dispatcher,
        "create_order",
        json!({
            "customer": {"id": "c1", "admin": true},
            "lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2, "discount": 100}],
            "note": null,
            "sudo": "yes"
        }),
    );
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(message.stripped_arguments, ["sudo", "customer.admin", "lines[1].discount"]);
    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(
        Value::Object(received[0].arguments.clone()),
        json!({"customer": {"id": "c1"}, "lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2}]})
    );
    assert_eq!((received[0].tool.as_str(), received[0].tool_call_id.as_str()), ("create_order", "call_1"));
}

#[test]
fn invalid_arguments_are_refused_with_paths_and_hints() {
    let (tool, received) = recording("create_order", pydantic_style());
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(
        &dispatcher,
        "create_order",
        json!({"customer": {"idd": "c1"}, "lines": [{"sku": "a", "quantity": "2"}, {"sku": "b", "quantity": 0}]}),
    );
    assert_eq!(message.status, Status::Error);
    assert!(message.content.contains("`customer`: missing field `id`"), "{}", message.content);
    assert!(message.content.contains("`lines[0].quantity`"), "{}", message.content);
    assert!(message.content.contains("`lines[1].quantity`"), "{}", message.content);
    assert!(message.hints.iter().any(|h| h == "rename `customer.idd` to `customer.id`"), "{:?}", message.hints);
    assert_eq!(message.stripped_arguments, ["customer.idd"]);

    let missing = dispatch(&dispatcher, "create_order", json!({"lines": []}));
    assert!(missing.content.contains("`customer` is required"), "{}", missing.content);
    assert!(received.lock().unwrap().is_empty());
}

#[test]
fn a_schema_that_cannot_be_a_tool_is_refused_when_the_tool_is_made() {
    let make = |schema: Value| {
        JsonTool::builder("t", "A tool.", schema).build(|_: JsonCall| async { Ok::<Value, ToolError>(Value::Null) })
    };
    let err = |schema: Value| make(schema).unwrap_err();
    assert!(matches!(err(json!([])), JsonToolError::NotAnObject { found: "an array", .. }));
    assert!(matches!(err(json!(true)), JsonToolError::NotAnObject { found: "a boolean", .. }));
    assert!(matches!(err(json!({"type": "string"})), JsonToolError::RootNotObjectType { .. }));
    assert!(matches!(err(json!({"properties": {}})), JsonToolError::RootNotObjectType { .. }));
    let bad_keyword = err(json!({"type": "object", "properties": {"a": {"type": 5}}}));
    assert!(matches!(bad_keyword, JsonToolError::Invalid { .. }), "{bad_keyword:?}");
    assert!(bad_keyword.to_string().starts_with("the input schema of `t` is not a schema"), "{bad_keyword}");
    let remote = err(json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}));
    assert!(matches!(remote, JsonToolError::Invalid { .. }), "{remote:?}");
    let dangling = err(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Nope"}}}));
    assert!(matches!(dangling, JsonToolError::Invalid { .. }), "{dangling:?}");
    let bad_pattern = err(json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}));
    assert!(matches!(bad_pattern, JsonToolError::Invalid { .. }), "{bad_pattern:?}");
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "array", "items": deep});
    }
    let deep = err(json!({"type": "object", "properties": {"a": deep}}));
    assert!(matches!(deep, JsonToolError::TooDeep { .. }), "{deep:?}");
    // The rules of every tool hold too.
    let named = JsonTool::builder("has space", "A tool.", json!({"type": "object"}))
        .build(|_: JsonCall| async { Ok::<Value, ToolError>(Value::Null) })
        .unwrap_err();
    assert!(matches!(named, JsonToolError::Spec(_)), "{named:?}");
    let effect = JsonTool::builder("t", "A tool.", json!({"type": "object", "properties": {"a": {}}}))
        .effect("x:{b}")
        .build(|_: JsonCall| async { Ok::<Value, ToolError>(Value::Null) })
        .unwrap_err();
    assert_eq!(effect.to_string(), "unknown parameter `b` in effect template");
    // Errors are words, not panics, and every message is lower-case without a trailing period.
    for error in [bad_keyword, remote, dangling, bad_pattern] {
        let text = error.to_string();
        assert!(!text.ends_with('.'), "{text}");
    }
}

#[test]
fn the_published_schema_is_the_enforced_one() {
    let (tool, _) = recording("create_order", pydantic_style());
    let schema = tool.definition_schema().clone();
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["$defs"]["Customer"]["additionalProperties"], false);
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let offered = dispatcher.offered_tools();
    assert_eq!(offered[0].input_schema, schema);
    assert_eq!(offered[0].description, "A tool defined by a schema.");

    // As written, open objects keep what they are sent; only the closed ones strip.
    let mut as_written = pydantic_style();
    as_written["$defs"]["Line"]["additionalProperties"] = json!(false);
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let tool = JsonTool::builder("create_order", "As written.", as_written.clone())
        .closing(Closing::AsWritten)
        .build(move |call: JsonCall| {
            log.lock().unwrap().push(call);
            async { Ok::<Value, ToolError>(json!("done")) }
        })
        .unwrap();
    assert_eq!(tool.definition_schema(), &as_written);
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(
        &dispatcher,
        "create_order",
        json!({"customer": {"id": "c", "vip": true}, "lines": [{"sku": "a", "quantity": 1, "gift": true}], "x": 1}),
    );
    assert_eq!(message.status, Status::Success, "{}", message.content);
    assert_eq!(message.stripped_arguments, ["lines[0].gift"]);
    assert_eq!(
        Value::Object(received.lock().unwrap()[0].arguments.clone()),
        json!({"customer": {"id": "c", "vip": true}, "lines": [{"sku": "a", "quantity": 1}], "x": 1})
    );
}

#[test]
fn ghost_block_refuses_a_nested_ghost() {
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let tool = JsonTool::builder("create_order", "Blocks ghosts.", pydantic_style())
        .ghost(GhostPolicy::Block)
        .build(move |call: JsonCall| {
            log.lock().unwrap().push(call);
            async { Ok::<Value, ToolError>(json!("done")) }
        })
        .unwrap();
    assert_eq!(tool.spec().ghost(), GhostPolicy::Block);
    let dispatcher = Dispatcher::builder().tool(tool).build().unwrap();
    let message = dispatch(&dispatcher, "create_order", json!({"customer": {"id": "c", "idd": 1}, "lines": []}));
    assert_eq!(message.status, Status::Error);
    assert!(message.content.contains("`customer.idd`"), "{}", message.content);
    assert!(received.lock().unwrap().is_empty());
}

mod full_dispatch {
    //! A run-time tool through every gate on one real redb file (approval ledger, effect records and audit
    //! log together): escalation across an interrupt, the effect key from the admitted JSON, masking,
    //! audit.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use agent_airlock::approval::InterruptApprovals;
    use agent_airlock::audit::{AuditConfig, AuditLog, AuditOutcome, verify};
    use agent_airlock::effect::RedbEffectStore;
    use agent_airlock::json_tool::{JsonCall, JsonTool};
    use agent_airlock::ledger::RedbLedger;
    use agent_airlock::mask::MaskSet;
    use agent_airlock::{
        CallContext, Dispatcher, ManualClock, Outcome, Policy, RefusalKind, Status, ToolCall, ToolError, ToolMessage,
    };
    use agent_airlock_tests::ledger_fixtures::{GRANT_TTL, START, key_ring};
    use agent_airlock_tests::{audit_test_key, block_on};
    use serde_json::{Value, json};

    struct Host {
        _dir: tempfile::TempDir,
        dispatcher: Dispatcher,
        approvals: InterruptApprovals,
        audit: Arc<AuditLog>,
        runs: Arc<AtomicUsize>,
        received: super::Received,
    }

    impl Host {
        /// `refund` defined by a schema, escalated by its definition, `mail` escalated by the policy only.
        fn new() -> Host {
            let dir = tempfile::tempdir().unwrap();
            let database = Arc::new(redb::Database::create(dir.path().join("airlock.redb")).unwrap());
            let clock = Arc::new(ManualClock::new(START));
            let ledger = Arc::new(RedbLedger::from_database(Arc::clone(&database)).unwrap());
            let effects = Arc::new(RedbEffectStore::new(Arc::clone(&database)).unwrap());
            let config = AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() };
            let audit = Arc::new(AuditLog::with_database(database, config).unwrap().with_clock(Arc::clone(&clock)));
            let approvals = InterruptApprovals::new(key_ring(), ledger, GRANT_TTL).with_clock(Arc::clone(&clock));
            let runs = Arc::new(AtomicUsize::new(0));
            let received: super::Received = Arc::default();
            let (counter, log) = (Arc::clone(&runs), Arc::clone(&received));
            let upstream = Arc::new(move |call: JsonCall| {
                counter.fetch_add(1, Ordering::SeqCst);
                log.lock().unwrap().push(call.clone());
                async move {
                    Ok::<Value, ToolError>(json!({
                        "refunded": call.arguments.get("amount"),
                        "contact": "alice@example.com",
                        "tool": call.tool,
                    }))
                }
            });
            let refund = JsonTool::builder(
                "refund",
                "Refund a payment.",
                json!({
                    "type": "object",
                    "properties": {
                        "payment_id": {"type": "string", "description": "The payment to refund."},
                        "amount": {"type": "integer", "minimum": 1},
                        "meta": {"type": "object", "properties": {"reason": {"type": "string"}}}
                    },
                    "required": ["payment_id", "amount"]
                }),
            )
            .escalate("moves money")
            .effect("refund:{payment_id}:{amount}")
            .mask(MaskSet::ALL)
            .build_shared(upstream.clone())
            .unwrap();
            let mail = JsonTool::builder(
                "mail",
                "Send a mail.",
                json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}),
            )
            .build_shared(upstream)
            .unwrap();
            let dispatcher = Dispatcher::builder()
                .tool(refund)
                .tool(mail)
                .policy(Policy::builder().escalate("mail", "writes to people").build().unwrap())
                .effects(effects)
                .audit(Arc::clone(&audit))
                .interrupt_approvals(approvals.clone())
                .clock(clock)
                .build()
                .unwrap();
            Host { _dir: dir, dispatcher, approvals, audit, runs, received }
        }

        fn dispatch(&self, call: ToolCall, resume: Option<&Value>) -> Outcome {
            let context = CallContext::new().with_thread("t1");
            let context = match resume {
                Some(resume) => context.with_resume(resume.clone()),
                None => context,
            };
            block_on(self.dispatcher.dispatch(call, &context))
        }

        /// The call's interrupt, approved: the request as shown to the human and the resume value.
        fn approve(&self, call: &ToolCall) -> (Value, Value) {
            let request = match self.dispatch(call.clone(), None) {
                Outcome::Interrupt { request, .. } => request.into_value(),
                other => panic!("expected an interrupt, got {other:?}"),
            };
            let resume = block_on(self.approvals.approve(&request, "alice")).unwrap().into_value();
            (request, resume)
        }

        fn resume(&self, call: &ToolCall, resume: &Value) -> ToolMessage {
            self.dispatch(call.clone(), Some(resume)).expect_message()
        }

        fn runs(&self) -> usize {
            self.runs.load(Ordering::SeqCst)
        }
    }

    fn refund(id: &str, arguments: Value) -> ToolCall {
        ToolCall::new(id, "refund", arguments)
    }

    fn refused(message: &ToolMessage) -> RefusalKind {
        assert_eq!(message.status, Status::Error, "{}", message.content);
        message.refusal.as_ref().unwrap_or_else(|| panic!("not a refusal: {}", message.content)).kind
    }

    #[test]
    fn an_approved_call_runs_once_with_its_effect_and_is_audited() {
        let host = Host::new();
        let call = refund(
            "c1",
            json!({"payment_id": "pi_1", "amount": 500, "meta": {"reason": "late", "force": true}, "sudo": 1}),
        );
        let (request, resume) = host.approve(&call);
        assert_eq!(host.runs(), 0, "nothing runs before the approval is presented");
        // The human approves the admitted arguments, ghosts already stripped.
        assert_eq!(
            request["airlock_approval"]["arguments"],
            json!({"payment_id": "pi_1", "amount": 500, "meta": {"reason": "late"}})
        );

        let message = host.resume(&call, &resume);
        assert_eq!(message.status, Status::Success, "{}", message.content);
        assert_eq!(message.stripped_arguments, ["sudo", "meta.force"]);
        assert!(!message.content.contains("alice@example.com"), "masked: {}", message.content);
        assert!(message.content.contains("\"refunded\":500"), "{}", message.content);
        assert_eq!(host.runs(), 1);
        assert_eq!(
            Value::Object(host.received.lock().unwrap()[0].arguments.clone()),
            json!({"payment_id": "pi_1", "amount": 500, "meta": {"reason": "late"}})
        );

        // The same resume again: the effect is committed, so it is a duplicate and nothing runs.
        assert_eq!(refused(&host.resume(&call, &resume)), RefusalKind::Duplicate);
        // The same effect spelt differently (`500.0`, another id) is refused before a human is asked.
        let respelt = refund("c2", json!({"payment_id": "pi_1", "amount": 500.0}));
        assert_eq!(refused(&host.dispatch(respelt, None).expect_message()), RefusalKind::Duplicate);
        assert_eq!(host.runs(), 1);

        let records = host.audit.records(1, 100).unwrap();
        let outcomes: Vec<AuditOutcome> = records.iter().map(|r| r.outcome).collect();
        assert_eq!(outcomes[0], AuditOutcome::Interrupted);
        assert!(outcomes.contains(&AuditOutcome::Approved) && outcomes.contains(&AuditOutcome::Executed));
        assert!(records.iter().all(|r| r.tool == "refund"));
        let report = verify(&host.audit, Some(&host.audit.export_head().unwrap())).unwrap();
        assert_eq!(report.records, records.len() as u64);
    }

    #[test]
    fn an_approval_binds_the_exact_arguments_and_survives_a_mismatch() {
        let host = Host::new();
        let approved = refund("c1", json!({"payment_id": "pi_2", "amount": 700}));
        let (_, resume) = host.approve(&approved);
        // A different amount is not what the human approved; the grant stays live for the call it binds.
        let altered = refund("c1", json!({"payment_id": "pi_2", "amount": 7000}));
        assert_eq!(refused(&host.resume(&altered, &resume)), RefusalKind::ApprovalInvalid);
        assert_eq!(host.runs(), 0);
        // A ghost is stripped before the binding is derived: the admitted call is the approved one.
        let with_ghost = refund("c1", json!({"payment_id": "pi_2", "amount": 700, "ghost": true}));
        let message = host.resume(&with_ghost, &resume);
        assert_eq!(message.status, Status::Success, "{}", message.content);
        assert_eq!(host.runs(), 1);
    }

    #[test]
    fn a_policy_escalates_a_run_time_tool_by_its_name() {
        let host = Host::new();
        let call = ToolCall::new("m1", "mail", json!({"to": "bob", "cc": "eve"}));
        let (request, resume) = host.approve(&call);
        assert_eq!(request["airlock_approval"]["rule"], "mail");
        assert_eq!(request["airlock_approval"]["arguments"], json!({"to": "bob"}));
        assert_eq!(host.resume(&call, &resume).status, Status::Success);
        assert_eq!(host.received.lock().unwrap()[0].tool, "mail");
        // A spent approval is spent: without an effect to catch it, the replay is refused by the ledger.
        assert_eq!(refused(&host.resume(&call, &resume)), RefusalKind::ApprovalInvalid);
        assert_eq!(host.runs(), 1);
    }
}
