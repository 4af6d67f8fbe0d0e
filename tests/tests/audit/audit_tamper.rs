//! The verifier against an attacker with write access to the redb file: each kind of tampering is made by
//! editing the raw tables, and the verifier must name the first bad record.

use std::path::{Path, PathBuf};

use agent_airlock::RefusalKind;
use agent_airlock::audit::{
    self, Anchor, AuditConfig, AuditEvent, AuditLog, AuditOutcome, CommitmentAlg, CommittedPart, HEAD_TABLE,
    RECORDS_TABLE, TamperKind, VerifyError, VerifyReport,
};
use agent_airlock::keys::AuditKey;
use agent_airlock_tests::audit_test_key;
use redb::{Database, ReadableTable};
use serde_json::json;
use sha2::{Digest as _, Sha256};

const RECORDS: u64 = 10;

fn keyed() -> AuditConfig {
    AuditConfig { key: Some(audit_test_key()), ..AuditConfig::default() }
}

fn unkeyed() -> AuditConfig {
    AuditConfig::default()
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    config: AuditConfig,
}

/// A log of ten records with varied outcomes, closed.
fn fixture(config: AuditConfig) -> Fixture {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("airlock.redb");
    append_records(&path, &config, 0..RECORDS as usize);
    Fixture { _dir: dir, path, config }
}

/// Appends the records numbered `range` of the standard fixture sequence.
fn append_records(path: &Path, config: &AuditConfig, range: std::ops::Range<usize>) {
    let log = AuditLog::open(path, config.clone()).expect("the log opens");
    let outcomes = [
        AuditOutcome::Executed,
        AuditOutcome::Refused { refusal: RefusalKind::Denied },
        AuditOutcome::Interrupted,
        AuditOutcome::Approved,
        AuditOutcome::Failed { not_executed: true },
        AuditOutcome::Duplicate,
        AuditOutcome::Refused { refusal: RefusalKind::HumanDenied },
        AuditOutcome::Ambiguous,
        AuditOutcome::Panicked,
        AuditOutcome::Executed,
    ];
    for (i, outcome) in outcomes.into_iter().enumerate().filter(|(i, _)| range.contains(i)) {
        let call_id = format!("call_{i}");
        let arguments = json!({"payment_id": format!("pi_{i}"), "amount": 100 + i});
        let result = json!({"refund_id": format!("re_{i}")});
        let event = AuditEvent::new("refund", &call_id, outcome)
            .thread_id(Some("thread-1"))
            .rule(Some("attribute"))
            .arguments(&arguments)
            .result(&result);
        let receipt = log.append(event).expect("appended");
        assert_eq!(receipt.seq, i as u64 + 1);
    }
}

impl Fixture {
    fn verify(&self, anchor: Option<&Anchor>) -> Result<VerifyReport, VerifyError> {
        let log = AuditLog::open(&self.path, self.config.clone()).expect("the log opens");
        audit::verify(&log, anchor)
    }

    fn head(&self) -> Anchor {
        AuditLog::open(&self.path, self.config.clone()).expect("the log opens").export_head().expect("a head")
    }

    /// Edits the raw tables, as an attacker with the file would.
    fn tamper(&self, edit: impl FnOnce(&mut Raw)) {
        let db = Database::open(&self.path).expect("the file opens");
        let txn = db.begin_write().expect("a write transaction");
        {
            let mut raw = Raw {
                records: txn.open_table(RECORDS_TABLE).expect("records table"),
                head: txn.open_table(HEAD_TABLE).expect("head table"),
            };
            edit(&mut raw);
        }
        txn.commit().expect("committed");
    }
}

struct Raw<'txn> {
    records: redb::Table<'txn, u64, &'static [u8]>,
    head: redb::Table<'txn, &'static str, &'static [u8]>,
}

/// A stored record split as the format documents: `0x01 ‖ hash ‖ flag ‖ [mac] ‖ body`.
#[derive(Clone)]
struct Frame {
    hash: [u8; 32],
    mac: Option<[u8; 32]>,
    body: String,
}

impl Frame {
    fn parse(bytes: &[u8]) -> Frame {
        assert_eq!(bytes[0], 1, "format version");
        let hash: [u8; 32] = bytes[1..33].try_into().expect("a hash");
        let (mac, body) = match bytes[33] {
            0 => (None, &bytes[34..]),
            1 => (Some(bytes[34..66].try_into().expect("a mac")), &bytes[66..]),
            flag => panic!("flag {flag}"),
        };
        Frame { hash, mac, body: String::from_utf8(body.to_vec()).expect("a JSON body") }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![1];
        out.extend_from_slice(&self.hash);
        match &self.mac {
            Some(mac) => {
                out.push(1);
                out.extend_from_slice(mac);
            }
            None => out.push(0),
        }
        out.extend_from_slice(self.body.as_bytes());
        out
    }

    /// Recomputes the hash as the documented formula says, as an attacker without the key can.
    fn rehash(&mut self, prev: &[u8; 32]) {
        let mut hasher = Sha256::new();
        hasher.update(b"agent-airlock/audit/v1/record\0");
        hasher.update(prev);
        hasher.update(self.body.as_bytes());
        self.hash = hasher.finalize().into();
    }
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Raw<'_> {
    fn get(&self, seq: u64) -> Frame {
        Frame::parse(self.records.get(seq).expect("readable").expect("present").value())
    }

    fn put(&mut self, seq: u64, frame: &Frame) {
        self.records.insert(seq, frame.bytes().as_slice()).expect("written");
    }

    fn set_head(&mut self, anchor: &Anchor) {
        self.head.insert("head", anchor.to_json().as_bytes()).expect("written");
    }

    /// Rewrites records `from..=last` consistently (each re-hashed over the new previous hash), as an
    /// attacker without the key can; `edit` changes the first one. MACs are left as they were.
    fn rewrite_from(&mut self, from: u64, last: u64, edit: impl FnOnce(&mut Frame)) -> [u8; 32] {
        let mut prev = if from == 1 { [0; 32] } else { self.get(from - 1).hash };
        let mut edit = Some(edit);
        for seq in from..=last {
            let mut frame = self.get(seq);
            let old_prev = frame.body.split("\"prev\":\"").nth(1).expect("a prev")[..64].to_owned();
            frame.body = frame.body.replace(&old_prev, &hex(&prev));
            if let Some(edit) = edit.take() {
                edit(&mut frame);
            }
            frame.rehash(&prev);
            self.put(seq, &frame);
            prev = frame.hash;
        }
        prev
    }
}

fn tamper_kind(result: Result<VerifyReport, VerifyError>) -> (u64, TamperKind) {
    match result {
        Err(VerifyError::Tampered(tamper)) => (tamper.seq, tamper.kind),
        other => panic!("expected tampering to be detected, got {other:?}"),
    }
}

#[test]
fn an_intact_log_verifies_with_and_without_a_key() {
    for config in [keyed(), unkeyed()] {
        let signed = config.key.is_some();
        let fixture = fixture(config);
        let anchor = fixture.head();
        let report = fixture.verify(Some(&anchor)).expect("intact");
        assert_eq!(report.records, RECORDS);
        assert_eq!(report.head.seq, RECORDS);
        assert_eq!(report.signed_records, if signed { RECORDS } else { 0 });
        assert_eq!(report.head_signed, signed);
        assert_eq!(report.anchor_seq, Some(RECORDS));
        let text = report.to_string();
        assert!(text.starts_with("audit log intact: 10 records, head #10 "), "{text}");
    }
}

#[test]
fn an_empty_log_verifies() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = AuditLog::open(dir.path().join("empty.redb"), keyed()).expect("opens");
    let anchor = log.export_head().expect("a head");
    assert_eq!(anchor.seq, 0);
    let report = audit::verify(&log, Some(&anchor)).expect("an empty log is intact");
    assert_eq!(report.records, 0);
}

#[test]
fn an_altered_field_is_detected_at_its_record() {
    for config in [keyed(), unkeyed()] {
        let fixture = fixture(config);
        fixture.tamper(|raw| {
            let mut frame = raw.get(5);
            frame.body = frame.body.replace(r#""tool":"refund""#, r#""tool":"refunf""#);
            raw.put(5, &frame);
        });
        assert_eq!(tamper_kind(fixture.verify(None)), (5, TamperKind::Altered));
    }
}

#[test]
fn an_altered_outcome_is_detected_even_when_the_record_is_rehashed() {
    let fixture = fixture(unkeyed());
    fixture.tamper(|raw| {
        let prev = raw.get(4).hash;
        let mut frame = raw.get(5);
        frame.body = frame.body.replace(r#""kind":"failed""#, r#""kind":"panicked""#);
        frame.body = frame.body.replace(r#","not_executed":true"#, "");
        frame.rehash(&prev);
        raw.put(5, &frame);
    });
    // Without a key the chain pins it: record 6 no longer follows record 5.
    assert_eq!(tamper_kind(fixture.verify(None)), (6, TamperKind::ChainBroken));
}

#[test]
fn a_rewritten_chain_is_pinned_by_the_key_or_an_anchor() {
    // Without a key, a consistent rewrite from record 4 on is only caught against an anchor taken before.
    let fixture = fixture(unkeyed());
    let anchor = fixture.head();
    fixture.tamper(|raw| {
        let last = raw.rewrite_from(4, RECORDS, |frame| {
            frame.body = frame.body.replace(r#""kind":"approved""#, r#""kind":"interrupted""#);
        });
        let mut head = Anchor::from_json(&anchor.to_json()).expect("an anchor");
        head.hash = audit::Digest(last);
        raw.set_head(&head);
    });
    fixture.verify(None).expect("a consistent rewrite cannot be told from the log alone without a key");
    assert_eq!(tamper_kind(fixture.verify(Some(&anchor))), (RECORDS, TamperKind::AnchorMismatch));

    // With a key, the first forged record is named.
    let fixture = fixture_keyed_rewritten();
    assert_eq!(tamper_kind(fixture.verify(None)), (4, TamperKind::Forged));
}

fn fixture_keyed_rewritten() -> Fixture {
    let fixture = fixture(keyed());
    fixture.tamper(|raw| {
        raw.rewrite_from(4, RECORDS, |frame| {
            frame.body = frame.body.replace(r#""kind":"approved""#, r#""kind":"interrupted""#);
        });
    });
    fixture
}

#[test]
fn a_deleted_record_is_detected_as_a_gap() {
    for config in [keyed(), unkeyed()] {
        let fixture = fixture(config);
        fixture.tamper(|raw| {
            raw.records.remove(5).expect("removed");
        });
        assert_eq!(tamper_kind(fixture.verify(None)), (5, TamperKind::Missing { first: 5, last: 5 }));
    }
}

#[test]
fn a_deleted_record_with_renumbered_successors_breaks_the_chain() {
    let fixture = fixture(unkeyed());
    fixture.tamper(|raw| {
        // Record 5 deleted, 6..=10 moved down one place with their `seq` fixed and their hash recomputed.
        for seq in 5..RECORDS {
            let mut frame = raw.get(seq + 1);
            frame.body = frame.body.replace(&format!(r#"{{"seq":{}"#, seq + 1), &format!(r#"{{"seq":{seq}"#));
            let own_prev = body_prev(&frame);
            frame.rehash(&own_prev);
            raw.put(seq, &frame);
        }
        raw.records.remove(RECORDS).expect("removed");
    });
    assert_eq!(tamper_kind(fixture.verify(None)), (5, TamperKind::ChainBroken));
}

fn body_prev(frame: &Frame) -> [u8; 32] {
    let hex = &frame.body.split("\"prev\":\"").nth(1).expect("a prev")[..64];
    audit::Digest::from_hex(hex).expect("hex").0
}

#[test]
fn swapped_records_are_detected() {
    for config in [keyed(), unkeyed()] {
        let fixture = fixture(config);
        fixture.tamper(|raw| {
            let four = raw.get(4);
            let five = raw.get(5);
            raw.put(4, &five);
            raw.put(5, &four);
        });
        assert_eq!(tamper_kind(fixture.verify(None)), (4, TamperKind::Misplaced { claims: 5 }));
    }
}

#[test]
fn deleting_the_last_records_without_rewinding_the_head_is_detected() {
    for config in [keyed(), unkeyed()] {
        let fixture = fixture(config);
        fixture.tamper(|raw| {
            for seq in 8..=RECORDS {
                raw.records.remove(seq).expect("removed");
            }
        });
        assert_eq!(tamper_kind(fixture.verify(None)), (8, TamperKind::TruncatedBelowHead { head_seq: RECORDS }));
    }
}

#[test]
fn truncation_with_a_rewound_head_needs_a_key_or_an_anchor() {
    // Unkeyed: records 8..=10 deleted and the head rewound to record 7. The log alone looks intact.
    let fixture = fixture(unkeyed());
    let anchor = fixture.head();
    fixture.tamper(|raw| {
        let seven = raw.get(7);
        for seq in 8..=RECORDS {
            raw.records.remove(seq).expect("removed");
        }
        let mut head = anchor.clone();
        head.seq = 7;
        head.hash = audit::Digest(seven.hash);
        raw.set_head(&head);
    });
    let report = fixture.verify(None).expect("without a key or an anchor a clean truncation is invisible");
    assert_eq!(report.records, 7);
    assert_eq!(
        tamper_kind(fixture.verify(Some(&anchor))),
        (8, TamperKind::TruncatedBelowAnchor { anchor_seq: RECORDS })
    );
}

#[test]
fn a_rewound_head_cannot_be_signed_without_the_key() {
    let fixture = fixture(keyed());
    let anchor = fixture.head();
    fixture.tamper(|raw| {
        let seven = raw.get(7);
        for seq in 8..=RECORDS {
            raw.records.remove(seq).expect("removed");
        }
        // Unsigned head.
        let mut head = Anchor::from_json(&anchor.to_json()).expect("an anchor");
        head.seq = 7;
        head.hash = audit::Digest(seven.hash);
        head.mac = None;
        head.key_id = None;
        raw.set_head(&head);
    });
    assert_eq!(tamper_kind(fixture.verify(None)), (8, TamperKind::HeadUnsigned));

    // The record MAC of #7 reused as the head's signature: domain separation makes it useless.
    fixture.tamper(|raw| {
        let seven = raw.get(7);
        let mut head = Anchor::from_json(&anchor.to_json()).expect("an anchor");
        head.seq = 7;
        head.hash = audit::Digest(seven.hash);
        head.mac = seven.mac.map(audit::Digest);
        raw.set_head(&head);
    });
    assert_eq!(tamper_kind(fixture.verify(None)), (8, TamperKind::HeadForged));
}

#[test]
fn a_rollback_to_a_backup_is_caught_by_the_anchor() {
    // A backup holds a genuinely signed head: restoring it deletes later records without forging anything.
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("airlock.redb");
    let backup = dir.path().join("backup.redb");
    append_records(&path, &keyed(), 0..7);
    std::fs::copy(&path, &backup).expect("a backup at 7 records");
    append_records(&path, &keyed(), 7..10);
    let anchor = AuditLog::open(&path, keyed()).expect("opens").export_head().expect("a head");
    assert_eq!(anchor.seq, 10);
    std::fs::copy(&backup, &path).expect("rolled back");

    let log = AuditLog::open(&path, keyed()).expect("opens");
    let report = audit::verify(&log, None).expect("a restored backup is consistent on its own");
    assert_eq!(report.records, 7);
    assert_eq!(
        tamper_kind(audit::verify(&log, Some(&anchor))),
        (8, TamperKind::TruncatedBelowAnchor { anchor_seq: 10 })
    );
}

#[test]
fn stripped_signatures_are_detected() {
    let fixture = fixture(keyed());
    fixture.tamper(|raw| {
        let mut frame = raw.get(3);
        frame.mac = None;
        raw.put(3, &frame);
    });
    assert_eq!(tamper_kind(fixture.verify(None)), (3, TamperKind::Unsigned));
}

#[test]
fn a_garbled_record_is_reported_as_malformed() {
    let fixture = fixture(unkeyed());
    fixture.tamper(|raw| {
        raw.records.insert(6, b"\x01garbage".as_slice()).expect("written");
    });
    let (seq, kind) = tamper_kind(fixture.verify(None));
    assert_eq!(seq, 6);
    assert!(matches!(kind, TamperKind::Malformed { .. }), "{kind:?}");
}

#[test]
fn a_non_canonical_body_is_malformed() {
    let fixture = fixture(unkeyed());
    fixture.tamper(|raw| {
        let prev = raw.get(1).hash;
        let mut frame = raw.get(2);
        frame.body = frame.body.replacen('{', "{ ", 1);
        frame.rehash(&prev);
        raw.put(2, &frame);
    });
    let (seq, kind) = tamper_kind(fixture.verify(None));
    assert_eq!(seq, 2);
    assert!(matches!(kind, TamperKind::Malformed { ref reason } if reason.contains("canonical")), "{kind:?}");
}

#[test]
fn records_signed_with_a_retired_key_verify_and_an_unknown_key_is_reported() {
    let fixture = fixture(keyed());
    let rotated = AuditConfig {
        key: Some(AuditKey::new("test-key-2", &[9u8; 32]).expect("a key")),
        retired_keys: vec![audit_test_key()],
        ..AuditConfig::default()
    };
    let log = AuditLog::open(&fixture.path, rotated.clone()).expect("opens");
    log.append(AuditEvent::new("refund", "after-rotation", AuditOutcome::Executed)).expect("appended");
    let report = audit::verify(&log, None).expect("both keys known");
    assert_eq!(report.signed_records, RECORDS + 1);
    assert_eq!(report.head.key_id.as_deref(), Some("test-key-2"));
    drop(log);

    let forgetful = AuditConfig { key: rotated.key.clone(), ..AuditConfig::default() };
    let log = AuditLog::open(&fixture.path, forgetful).expect("opens");
    match audit::verify(&log, None) {
        Err(VerifyError::UnknownKey { seq: 1, key_id }) => assert_eq!(key_id, "test-key-1"),
        other => panic!("expected an unknown key, got {other:?}"),
    }
}

#[test]
fn an_altered_anchor_is_refused() {
    let fixture = fixture(keyed());
    let mut anchor = fixture.head();
    anchor.seq = 9;
    assert!(matches!(fixture.verify(Some(&anchor)), Err(VerifyError::BadAnchor)));
}

#[test]
fn the_tamper_report_reads_as_a_sentence() {
    let fixture = fixture(unkeyed());
    fixture.tamper(|raw| {
        raw.records.remove(3).expect("removed");
        raw.records.remove(4).expect("removed");
    });
    let err = fixture.verify(None).expect_err("tampered");
    assert_eq!(err.to_string(), "audit log tampered at record #3: records #3 to #4 are missing (deleted)");
}

#[test]
fn commitments_hide_values_unless_raw_storage_is_on() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let arguments = json!({"card": "4242 4242 4242 4242", "amount": 5});
    let result = json!("refunded");
    for (store_raw, key) in [(false, Some(audit_test_key())), (false, None), (true, Some(audit_test_key()))] {
        let path = dir.path().join(format!("raw-{store_raw}-{}.redb", key.is_some()));
        let config = AuditConfig { store_raw, key: key.clone(), ..AuditConfig::default() };
        let log = AuditLog::open(&path, config).expect("opens");
        let event = AuditEvent::new("charge", "call_1", AuditOutcome::Executed).arguments(&arguments).result(&result);
        log.append(event).expect("appended");
        let record = log.records(1, 10).expect("readable").remove(0);
        let commitment = record.arguments.expect("an arguments commitment");
        assert_eq!(commitment.alg, if key.is_some() { CommitmentAlg::HmacSha256 } else { CommitmentAlg::Sha256 });
        assert!(log.check_commitment(&record, CommittedPart::Arguments, &arguments).expect("checkable"));
        assert!(log.check_commitment(&record, CommittedPart::Result, &result).expect("checkable"));
        assert!(
            !log.check_commitment(
                &record,
                CommittedPart::Arguments,
                &json!({"card": "4242 4242 4242 4242", "amount": 6})
            )
            .expect("checkable")
        );
        assert!(
            !log.check_commitment(&record, CommittedPart::Result, &arguments).expect("checkable"),
            "domain separated"
        );
        let raw = record.raw_arguments.clone();
        assert_eq!(raw.is_some(), store_raw);
        if let Some(raw) = raw {
            assert_eq!(raw, r#"{"amount":5,"card":"4242 4242 4242 4242"}"#);
        }
        drop(log);
        let file = std::fs::read(&path).expect("readable");
        let leaked = file.windows(19).any(|w| w == b"4242 4242 4242 4242");
        assert_eq!(leaked, store_raw, "the card number is in the file only when raw storage is on");
    }
}

#[test]
fn a_keyed_commitment_differs_from_the_plain_digest_of_the_same_value() {
    let arguments = json!({"payment_id": "pi_1"});
    let keyed_log = AuditLog::in_memory(keyed());
    let plain_log = AuditLog::in_memory(unkeyed());
    for log in [&keyed_log, &plain_log] {
        log.append(AuditEvent::new("refund", "c", AuditOutcome::Executed).arguments(&arguments)).expect("appended");
    }
    let keyed_digest = keyed_log.records(1, 1).expect("readable")[0].arguments.expect("committed").digest;
    let plain_digest = plain_log.records(1, 1).expect("readable")[0].arguments.expect("committed").digest;
    assert_ne!(keyed_digest, plain_digest);
    let mut hasher = Sha256::new();
    hasher.update(b"agent-airlock/audit/v1/arguments\0");
    hasher.update(br#"{"payment_id":"pi_1"}"#);
    assert_eq!(plain_digest.0, <[u8; 32]>::from(hasher.finalize()), "the documented unkeyed formula");
}
