//! The tool-poisoning scan: its precision and recall on the corpus of `tests/corpus/tool_poisoning.json`
//! (positives in the shapes of published attacks, negatives from real servers and near misses), and what it
//! does with a real upstream: the official Python SDK server of `tests/mcp/poisoned_upstream.py`, whose `add`
//! carries Invariant Labs' `<IMPORTANT>` block next to a clean `multiply`. `airlock mcp scan` reports each
//! finding and fails; the gateway hides the poisoned tool and refuses its calls (pinned or not), serves the
//! clean one, and offers the poisoned one only where the policy accepts every kind of finding it has. The
//! upstream's own call log says what reached it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_airlock::Policy;
use agent_airlock::integrations::mcp_gateway::scan_definition;
use agent_airlock::policy::FindingKind;
use agent_airlock_tests::mcp_stdio::StdioSession;
use serde_json::{Value, json};

use crate::gateway;
use gateway::{AIRLOCK, airlock, venv};

const CORPUS: &str = include_str!("../../corpus/tool_poisoning.json");
const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/poisoned_upstream.py");

/// The floors the scan must keep on the corpus (BENCHMARKS.md reports what it reaches).
const RECALL_FLOOR: f64 = 0.95;
const PRECISION_FLOOR: f64 = 0.95;

#[test]
fn the_scan_keeps_its_precision_and_recall_on_the_corpus() {
    let corpus: Value = serde_json::from_str(CORPUS).expect("the corpus is JSON");
    let entries = |key: &str| corpus[key].as_array().cloned().unwrap_or_else(|| panic!("the corpus has {key}"));
    let (positives, negatives) = (entries("positives"), entries("negatives"));
    assert!(
        positives.len() >= 40 && negatives.len() >= 60,
        "{} positives, {} negatives",
        positives.len(),
        negatives.len()
    );

    let mut missed = Vec::new();
    let mut expected_kinds = (0, 0);
    for entry in &positives {
        let findings = scan_definition(&entry["tool"]);
        let found: Vec<FindingKind> = findings.iter().map(|f| f.kind).collect();
        for kind in entry["expect"].as_array().expect("expected kinds") {
            let kind = FindingKind::from_name(kind.as_str().expect("a kind")).expect("a known kind");
            expected_kinds.1 += 1;
            expected_kinds.0 += usize::from(found.contains(&kind));
        }
        if findings.is_empty() {
            missed.push(entry["source"].as_str().unwrap_or("?").to_owned());
        }
        // Every finding is shown with its kind, where, and the text, hidden characters escaped.
        for finding in &findings {
            let shown = finding.to_string();
            assert!(shown.starts_with(&format!("{} in ", finding.kind)), "{shown}");
            assert!(!shown.chars().any(agent_airlock::approval::display::is_hidden_char), "{shown:?}");
        }
    }
    let mut false_alarms = Vec::new();
    for entry in &negatives {
        let findings = scan_definition(&entry["tool"]);
        if !findings.is_empty() {
            let shown: Vec<String> = findings.iter().map(ToString::to_string).collect();
            false_alarms.push(format!("{}: {}", entry["source"].as_str().unwrap_or("?"), shown.join("; ")));
        }
    }
    let true_positives = positives.len() - missed.len();
    let recall = true_positives as f64 / positives.len() as f64;
    let precision = true_positives as f64 / (true_positives + false_alarms.len()) as f64;
    println!(
        "tool-poisoning corpus: {} positives, {} negatives; recall {recall:.3} ({true_positives}/{}), precision \
         {precision:.3} ({} false alarm(s)); expected kinds found {}/{}",
        positives.len(),
        negatives.len(),
        positives.len(),
        false_alarms.len(),
        expected_kinds.0,
        expected_kinds.1,
    );
    println!("missed: {missed:#?}\nfalse alarms: {false_alarms:#?}");
    assert!(recall >= RECALL_FLOOR, "recall {recall:.3}; missed: {missed:#?}");
    assert!(precision >= PRECISION_FLOOR, "precision {precision:.3}; false alarms: {false_alarms:#?}");
    // Every server-filesystem tool is a negative, and none is flagged: the gateway in front of it hides nothing.
    assert!(
        negatives.iter().filter(|e| e["source"].as_str().is_some_and(|s| s.contains("server-filesystem"))).count()
            >= 14
    );
    assert!(!false_alarms.iter().any(|alarm| alarm.contains("server-filesystem")), "{false_alarms:#?}");
}

fn upstream(python: &Path, log: &Path) -> Vec<String> {
    vec![python.display().to_string(), UPSTREAM.to_owned(), log.display().to_string()]
}

/// The tools the upstream's log says were called, in order.
fn calls(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn scan_reports_each_finding_escaped_and_fails() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let log = scratch.path().join("calls.log");
    let mut args = vec!["mcp".to_owned(), "scan".to_owned(), "--".to_owned()];
    args.extend(upstream(venv.python(), &log));
    let scan = airlock(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&scan.stderr);
    assert_eq!(scan.status.code(), Some(1), "a finding fails the scan: {stderr}");
    for line in [
        "airlock mcp scan: `add`: instruction_tag in description: \"",
        "airlock mcp scan: `add`: concealment in description: \"",
        "airlock mcp scan: `add`: cross_tool in description: \"",
        "airlock mcp scan: `add`: sensitive_path in description: \"",
        "finding(s) in 1 of 2 tool(s)",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    assert!(stderr.contains("<IMPORTANT>"), "the offending text is quoted: {stderr}");
    assert!(!stderr.contains("`multiply`"), "{stderr}");

    // The starter policy still comes out, each finding in it and the allowance commented out.
    let starter = String::from_utf8(scan.stdout).expect("UTF-8");
    let policy = Policy::from_toml(&starter).unwrap_or_else(|e| panic!("{e}\n{starter}"));
    assert_eq!(policy.pins().len(), 2);
    assert!(policy.allowed_findings().is_empty());
    assert!(starter.contains("# FINDINGS"), "{starter}");
    assert!(
        starter
            .contains("# allow_findings = [\"instruction_tag\", \"concealment\", \"cross_tool\", \"sensitive_path\"]"),
        "{starter}"
    );
    assert!(calls(&log).is_empty(), "scan calls nothing");
}

const SURFACES_UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/upstream_server.py");

/// `airlock mcp scan` reviews what a client may put before its model besides tools: the upstream of
/// `tests/mcp/upstream_server.py` with `SURFACES=1` lists a resource and two prompts whose descriptions
/// poison. Each finding is reported, the scan fails, and the starter policy has a table for each with the
/// accepting line commented out; clean resources and prompts get none.
#[test]
fn scan_reports_the_findings_of_resources_and_prompts_too() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let log = scratch.path().join("calls.log");
    let notes = scratch.path().join("notes");
    let (python, upstream, log, notes) = (
        venv.python().display().to_string(),
        SURFACES_UPSTREAM,
        log.display().to_string(),
        notes.display().to_string(),
    );
    let scan = airlock(&["mcp", "scan", "--env", "SURFACES=1", "--", &python, upstream, &log, &notes]);
    let stderr = String::from_utf8_lossy(&scan.stderr);
    assert_eq!(scan.status.code(), Some(1), "a finding fails the scan: {stderr}");
    for line in [
        "airlock mcp scan: resource `config://poisoned`: cross_tool in description: \"",
        "airlock mcp scan: prompt `poisoned`: instruction_tag in description: \"",
        "airlock mcp scan: prompt `poisoned`: override in description: \"",
        "airlock mcp scan: prompt `vetted`: instruction_tag in description: \"",
        "finding(s) in 3 of ",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    for clean in ["`config://app`", "`config://leaky`", "`summarise`", "`note://{name}`"] {
        assert!(!stderr.contains(clean), "{clean}: {stderr}");
    }

    let starter = String::from_utf8(scan.stdout).expect("UTF-8");
    let policy = Policy::from_toml(&starter).unwrap_or_else(|e| panic!("{e}\n{starter}"));
    assert!(policy.allowed_surface_findings(agent_airlock::policy::Surface::Prompt).is_empty(), "{starter}");
    for (table, kinds) in [
        ("[resources.\"config://poisoned\"]", "[\"cross_tool\"]"),
        ("[prompts.\"poisoned\"]", "[\"instruction_tag\", \"override\"]"),
        ("[prompts.\"vetted\"]", "[\"instruction_tag\"]"),
    ] {
        // The table, the pin of the listing reviewed, the accepting line commented out.
        let at = starter.find(table).unwrap_or_else(|| panic!("{table}\n{starter}"));
        let lines: Vec<&str> = starter[at..].lines().take(3).collect();
        assert!(lines[1].starts_with("pin = \"sha256:"), "{lines:?}");
        assert_eq!(lines[2], format!("# allow_findings = {kinds}"), "{lines:?}");
    }
    assert_eq!(policy.surface_pins(agent_airlock::policy::Surface::Prompt).len(), 2, "{starter}");

    // The starter with its accepting lines uncommented and the entries allowed: the gateway in front of the
    // same server lists them (the pins `scan` wrote are those of the listings the gateway sees), and still
    // leaves out what is not accepted.
    let accepting = starter
        .replace("# allow_findings = [", "allow_findings = [")
        .replace("allow_resources = []", "allow_resources = [\"config://**\"]")
        .replace("allow_prompts = []", "allow_prompts = [\"*\"]");
    let policy_path = scratch.path().join("accepting.toml");
    std::fs::write(&policy_path, &accepting).expect("the policy is written");
    let mut command = Command::new(AIRLOCK);
    command.arg("--db").arg(scratch.path().join("accepting.redb")).args(["mcp", "--policy"]).arg(&policy_path).args([
        "--env",
        "SURFACES=1",
        "--",
        &python,
        upstream,
        &log,
        &notes,
    ]);
    let mut session = StdioSession::start(&mut command);
    let names = |session: &mut StdioSession, id: u64, method: &str, list: &str, key: &str| -> Vec<String> {
        session.send(json!({"jsonrpc": "2.0", "id": id, "method": method}));
        let answer = session.response(id, Duration::from_secs(60));
        let entries = answer["result"][list].as_array().unwrap_or_else(|| panic!("a listing: {answer}")).clone();
        let mut names: Vec<String> = entries.iter().map(|e| e[key].as_str().expect("a key").to_owned()).collect();
        names.sort();
        names
    };
    let resources = names(&mut session, 2, "resources/list", "resources", "uri");
    assert!(resources.contains(&"config://poisoned".to_owned()), "{resources:?}\n{accepting}");
    let prompts = names(&mut session, 3, "prompts/list", "prompts", "name");
    assert!(prompts.contains(&"poisoned".to_owned()) && prompts.contains(&"vetted".to_owned()), "{prompts:?}");
    session.close();
    assert!(!starter.contains("[resources.\"config://app\"]"), "{starter}");
}

const HOSTILE_UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/hostile_upstream.py");

/// A server that declares resources and prompts but answers `resources/templates/list` "method not found" (as
/// many do) and fails `prompts/list`: `airlock mcp scan` still scans its tools and resources and writes the
/// starter policy, says which listing failed, and fails (what that listing holds was not scanned).
#[test]
fn scan_goes_on_past_a_listing_that_fails_and_says_so() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let (python, dir) = (venv.python().display().to_string(), scratch.path().display().to_string());
    let scan = airlock(&["mcp", "scan", "--env", "HOSTILE_SURFACES=1", "--", &python, HOSTILE_UPSTREAM, &dir]);
    let stderr = String::from_utf8_lossy(&scan.stderr);
    assert_eq!(scan.status.code(), Some(1), "{stderr}");
    for line in [
        "airlock mcp scan: resource `config://hostile`: cross_tool in description: \"",
        "airlock mcp scan: the upstream server did not list its prompts: ",
        "prompts are broken",
        "1 listing(s) failed: what they hold was not scanned",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    assert!(!stderr.contains("resource templates"), "method not found is an empty listing: {stderr}");
    let starter = String::from_utf8(scan.stdout).expect("UTF-8");
    let policy = Policy::from_toml(&starter).unwrap_or_else(|e| panic!("{e}\n{starter}"));
    assert_eq!(policy.pins().len(), 5, "every tool is still pinned: {starter}");
    assert!(starter.contains("[resources.\"config://hostile\"]"), "{starter}");
}

/// A gateway in front of the poisoned upstream under `policy`, its standard error written to `stderr`.
fn session(dir: &Path, name: &str, policy: &str, python: &Path) -> (StdioSession, std::path::PathBuf) {
    let policy_path = dir.join(format!("{name}.toml"));
    std::fs::write(&policy_path, policy).expect("the policy is written");
    let stderr = dir.join(format!("{name}.stderr"));
    let mut command = Command::new(AIRLOCK);
    command
        .arg("--db")
        .arg(dir.join(format!("{name}.redb")))
        .args(["mcp", "--policy"])
        .arg(&policy_path)
        .arg("--")
        .args(upstream(python, &dir.join("calls.log")))
        .stderr(Stdio::from(std::fs::File::create(&stderr).expect("the stderr file")));
    (StdioSession::start(&mut command), stderr)
}

fn listed(session: &mut StdioSession, id: u64) -> Vec<String> {
    session.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
    let answer = session.response(id, Duration::from_secs(60));
    let tools = answer["result"]["tools"].as_array().unwrap_or_else(|| panic!("a tool list: {answer}"));
    tools.iter().map(|tool| tool["name"].as_str().expect("a name").to_owned()).collect()
}

fn refused(answer: &Value) -> bool {
    answer.get("error").is_some() || answer["result"]["isError"] == true
}

#[test]
fn the_gateway_hides_a_poisoned_tool_unless_the_policy_accepts_its_findings() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let dir = scratch.path();
    let log = dir.join("calls.log");
    let python = venv.python();
    let arguments = json!({"a": 2, "b": 3, "sidenote": "nothing"});

    // The policy `scan` writes, the tools allowed and pinned, nothing accepted: a pin is not a review of
    // the findings, since `scan` pins every tool.
    let mut args = vec!["mcp".to_owned(), "scan".to_owned(), "--".to_owned()];
    args.extend(upstream(python, &log));
    let starter =
        String::from_utf8(airlock(&args.iter().map(String::as_str).collect::<Vec<_>>()).stdout).expect("UTF-8");
    let pinned = starter.replace("allow = []", "allow = [\"add\", \"multiply\"]");
    let unpinned = "version = 1\ndefault = \"allow\"\n";
    let partly =
        "version = 1\ndefault = \"allow\"\n\n[tools.add]\nallow_findings = [\"instruction_tag\", \"sensitive_path\"]\n";
    for (name, policy) in [("pinned", pinned.as_str()), ("unpinned", unpinned), ("partly", partly)] {
        let (mut session, stderr) = session(dir, name, policy, python);
        assert_eq!(listed(&mut session, 1), ["multiply"], "{name}");
        session.call(2, "add", arguments.clone());
        let answer = session.response(2, Duration::from_secs(60));
        assert!(refused(&answer), "{name}: {answer}");
        session.call(3, "multiply", json!({"a": 2, "b": 3}));
        let answer = session.response(3, Duration::from_secs(60));
        assert_eq!(answer["result"]["content"][0]["text"], "6", "{name}: {answer}");
        session.close();
        let stderr = std::fs::read_to_string(stderr).expect("the gateway's stderr");
        assert!(stderr.contains("`add` is hidden, its calls refused: its definition has "), "{name}: {stderr}");
        // What the policy accepts is not what hides it; the rest is reported.
        let reported = stderr.contains("its definition has instruction_tag in description");
        assert_eq!(reported, name != "partly", "{name}: {stderr}");
        assert!(stderr.contains("concealment in description: \""), "{name}: {stderr}");
    }
    let called: Vec<String> = calls(&log).iter().map(|c| c["tool"].as_str().unwrap_or("?").to_owned()).collect();
    assert_eq!(called, ["multiply", "multiply", "multiply"], "the poisoned tool never reached the upstream");

    // Accepting every kind it has offers it, and its calls go through the gates to the upstream.
    let accepting = starter
        .replace("allow = []", "allow = [\"add\", \"multiply\"]")
        .replace("# allow_findings = [", "allow_findings = [");
    let (mut session, stderr) = session(dir, "accepting", &accepting, python);
    assert_eq!(listed(&mut session, 1), ["add", "multiply"]);
    session.call(2, "add", arguments.clone());
    let answer = session.response(2, Duration::from_secs(60));
    assert_eq!(answer["result"]["content"][0]["text"], "5", "{answer}");
    session.close();
    let stderr = std::fs::read_to_string(stderr).expect("the gateway's stderr");
    assert!(stderr.contains("`add` is offered with findings the policy allows: instruction_tag"), "{stderr}");
    let last = calls(&log).pop().expect("a call");
    assert_eq!(last, json!({"tool": "add", "arguments": arguments}));
}

/// What a tool carries besides its text: with `--poisoned-meta` the upstream lists `divide`, its description
/// clean, its `_meta` holding an `<IMPORTANT>` block and its icon's URI a zero-width space. `airlock mcp scan`
/// reports both where they are, and the gateway hides `divide` and refuses its calls as it does `add`'s.
#[test]
fn a_tools_meta_and_icons_are_scanned_and_a_poisoned_one_hidden() {
    let venv = venv();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let dir = scratch.path();
    let log = dir.join("calls.log");
    let python = venv.python();
    let mut scan = Command::new(AIRLOCK);
    let upstream = [upstream(python, &log), vec!["--poisoned-meta".to_owned()]].concat();
    scan.args(["mcp", "scan", "--"]).args(&upstream);
    let scanned = scan.output().expect("airlock runs");
    let stderr = String::from_utf8_lossy(&scanned.stderr);
    assert_eq!(scanned.status.code(), Some(1), "{stderr}");
    for line in [
        "airlock mcp scan: `divide`: instruction_tag in _meta.openai/toolInvocation/invoking: \"",
        "airlock mcp scan: `divide`: sensitive_path in _meta.openai/toolInvocation/invoking: \"",
        "airlock mcp scan: `divide`: hidden_characters in icons[0].src: \"",
        "finding(s) in 2 of 3 tool(s)",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    assert!(!stderr.contains("`divide`: instruction_tag in description"), "{stderr}");

    let policy = dir.join("policy.toml");
    std::fs::write(&policy, "version = 1\ndefault = \"allow\"\n").expect("the policy is written");
    let stderr_file = dir.join("gateway.stderr");
    let mut command = Command::new(AIRLOCK);
    command
        .arg("--db")
        .arg(dir.join("airlock.redb"))
        .args(["mcp", "--policy"])
        .arg(&policy)
        .arg("--")
        .args(&upstream)
        .stderr(Stdio::from(std::fs::File::create(&stderr_file).expect("the stderr file")));
    let mut session = StdioSession::start(&mut command);
    assert_eq!(listed(&mut session, 1), ["multiply"]);
    session.call(2, "divide", json!({"a": 6, "b": 3}));
    let answer = session.response(2, Duration::from_secs(60));
    assert!(refused(&answer), "{answer}");
    session.close();
    let stderr = std::fs::read_to_string(stderr_file).expect("the gateway's stderr");
    assert!(stderr.contains("`divide` is hidden, its calls refused: its definition has "), "{stderr}");
    assert!(calls(&log).is_empty(), "the poisoned tool never reached the upstream");
}
