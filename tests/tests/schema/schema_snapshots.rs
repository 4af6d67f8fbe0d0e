//! Snapshots of the canonical schema of every corpus tool, and of its OpenAI strict and Gemini forms (the two
//! dialects that rewrite it; Anthropic and MCP carry it unchanged, which `dialects.rs` checks).
//!
//! Each tool has `tests/snapshots/<tool>.json`. A mismatch fails with a line diff. After a deliberate change,
//! run with `AIRLOCK_BLESS=1` to rewrite the files, and review the change in `git diff`.

use crate::corpus;
use crate::diff;

use std::path::{Path, PathBuf};

use agent_airlock::{ToolDefinition, dialect::Dialect};
use serde_json::{Value, json};

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots")
}

fn blessing() -> bool {
    std::env::var_os("AIRLOCK_BLESS").is_some_and(|v| v == "1")
}

/// What is recorded for one tool: the canonical schema and the two rewritten dialects (or their errors).
fn snapshot_of(definition: &ToolDefinition) -> Value {
    let dialect = |d: Dialect| match definition.to_dialect(d) {
        Ok(value) => value,
        Err(error) => json!({ "error": error.to_string() }),
    };
    json!({
        "canonical": definition.input_schema,
        "openai": dialect(Dialect::OpenAi),
        "gemini": dialect(Dialect::Gemini),
    })
}

/// Compares `actual` with the stored snapshot `name`: `Err` with a readable diff when they differ.
fn check_snapshot(name: &str, actual: &Value, stored: Option<&str>) -> Result<(), String> {
    let actual_text = format!("{}\n", serde_json::to_string_pretty(actual).expect("JSON values serialize"));
    let Some(stored) = stored else {
        return Err(format!("snapshot `{name}` is missing; run with `AIRLOCK_BLESS=1` to record it:\n{actual_text}"));
    };
    let expected: Value = match serde_json::from_str(stored) {
        Ok(value) => value,
        Err(err) => {
            return Err(format!("snapshot `{name}` is not JSON ({err}); run with `AIRLOCK_BLESS=1`"));
        }
    };
    if &expected == actual {
        return Ok(());
    }
    let expected_text = format!("{}\n", serde_json::to_string_pretty(&expected).expect("JSON values serialize"));
    Err(format!(
        "snapshot `{name}` differs (- stored, + now); run with `AIRLOCK_BLESS=1` if the change is intended:\n{}",
        diff::line_diff(&expected_text, &actual_text, 3)
    ))
}

#[test]
fn corpus_schemas_match_their_snapshots() {
    let dir = snapshot_dir();
    let mut failures = Vec::new();
    for definition in corpus::definitions() {
        let path = dir.join(format!("{}.json", definition.name));
        let actual = snapshot_of(&definition);
        if blessing() {
            let text = format!("{}\n", serde_json::to_string_pretty(&actual).expect("JSON values serialize"));
            std::fs::write(&path, text).expect("the snapshot directory is writable");
            continue;
        }
        let stored = std::fs::read_to_string(&path).ok();
        if let Err(failure) = check_snapshot(&definition.name, &actual, stored.as_deref()) {
            failures.push(failure);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn no_snapshot_outlives_its_tool() {
    let names: Vec<String> = corpus::definitions().into_iter().map(|d| format!("{}.json", d.name)).collect();
    let stale: Vec<String> = std::fs::read_dir(snapshot_dir())
        .expect("tests/snapshots exists")
        .map(|entry| entry.expect("a readable directory entry").file_name().to_string_lossy().into_owned())
        .filter(|file| !names.contains(file))
        .collect();
    assert!(stale.is_empty(), "snapshots without a corpus tool: {stale:?}");
}

#[test]
fn a_changed_snapshot_fails_with_a_readable_diff() {
    let properties: serde_json::Map<String, Value> =
        (0..20).map(|i| (format!("p{i:02}"), json!({"type": "string"}))).collect();
    let stored = json!({"canonical": {"type": "object", "properties": properties}});
    let stored_text = serde_json::to_string_pretty(&stored).unwrap();
    let mut actual = stored.clone();
    actual["canonical"]["properties"]["p10"]["type"] = json!("integer");

    assert_eq!(check_snapshot("t", &stored, Some(&stored_text)), Ok(()));
    let failure = check_snapshot("t", &actual, Some(&stored_text)).unwrap_err();
    assert!(failure.contains("snapshot `t` differs"), "{failure}");
    assert!(failure.contains("-         \"type\": \"string\""), "{failure}");
    assert!(failure.contains("+         \"type\": \"integer\""), "{failure}");
    assert!(failure.contains("\"p10\""), "{failure}");
    // Context, not the whole document: properties far from the change are not shown.
    assert!(!failure.contains("p00") && !failure.contains("p19"), "{failure}");

    let missing = check_snapshot("t", &actual, None).unwrap_err();
    assert!(missing.contains("AIRLOCK_BLESS=1"), "{missing}");
}

#[test]
fn the_diff_marks_insertions_deletions_and_context() {
    let diff = diff::line_diff("a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nD\ne\nf\ng\nh\ni\n", 1);
    assert_eq!(diff, "@@ expected line 3\n  c\n- d\n+ D\n  e\n@@ expected line 8\n  h\n+ i\n");
    assert_eq!(diff::line_diff("same\n", "same\n", 3), "");
}
