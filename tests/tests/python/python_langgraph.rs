//! The `airlock_rs` Python package (python/) in real LangGraph graphs: the wheel is built with maturin into
//! the pinned environment of `python/requirements.txt` and `python/tests` runs under pytest, so the
//! README's one `cargo test --workspace` covers the package.
//!
//! The wheel is built in the workspace's own target directory (maturin's cargo finds it from
//! python/Cargo.toml, or from `CARGO_TARGET_DIR` as this test's build did): `cargo test` does not hold that
//! directory's lock while its test binaries run, and the crates the wheel shares with the test build (same
//! features, same profile) are not compiled again: on a fresh clone ~100 of the wheel's ~260 build units are its
//! own (pyo3, and crates whose features differ when the Python package is built alone), against all of them in a
//! directory of its own.
//! A lock file serialises builds by tests of concurrent runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use agent_airlock_tests::python_env::{PythonEnv, Venv};

const PYTHON_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../python");
const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock_cli");

fn venv() -> Venv {
    let requirements = Path::new(PYTHON_DIR).join("requirements.txt");
    PythonEnv::under_target(env!("CARGO_TARGET_TMPDIR"))
        .provision(&requirements)
        .unwrap_or_else(|why| panic!("the airlock_rs test environment cannot be provisioned: {why}"))
}

/// Builds the wheel from the current source and installs it into `venv` (replacing an older build).
fn install_wheel(venv: &Venv) {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let _lock = agent_airlock_tests::exclusive_lock(&tmp.join("airlock-rs-wheel.lock")).expect("the wheel lock");
    let wheels = tmp.join("airlock-rs-wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    // maturin asks `cargo metadata`, which wants the sources of every platform's crates in the lock file (the
    // build of this test fetched only this platform's: `android_system_properties`, say, was missing on a
    // fresh machine). Fetch them from the registry first, exactly as locked; the build itself is offline.
    let fetch = Command::new(env!("CARGO"))
        .args(["fetch", "--locked", "--manifest-path"])
        .arg(Path::new(PYTHON_DIR).join("Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert!(
        fetch.status.success(),
        "cargo could not fetch the crates of Cargo.lock for the airlock_rs wheel:\n{}",
        String::from_utf8_lossy(&fetch.stderr)
    );
    let mut build = venv.command();
    build
        .args(["-m", "maturin", "build", "--profile", "dev", "--manifest-path"])
        .arg(Path::new(PYTHON_DIR).join("Cargo.toml"))
        .arg("--out")
        .arg(&wheels)
        .arg("--interpreter")
        .arg(venv.python())
        // Offline: every crate of the lock file was fetched just above.
        .env("CARGO_NET_OFFLINE", "true");
    let output = build.output().expect("maturin runs");
    assert!(
        output.status.success(),
        "maturin could not build the airlock_rs wheel:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let wheel = std::fs::read_dir(&wheels)
        .expect("the wheel folder")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .expect("maturin wrote a wheel");
    let output = venv
        .command()
        .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps", "--force-reinstall"])
        .arg(&wheel)
        .output()
        .expect("pip runs");
    assert!(output.status.success(), "the wheel cannot be installed:\n{}", String::from_utf8_lossy(&output.stderr));
}

/// Runs the pytest files `files` of python/tests with `env`, from that folder (so the source tree's
/// `airlock_rs` folder never shadows the installed wheel).
fn pytest(venv: &Venv, files: &[&str], env: &[(&str, &str)]) {
    let mut command = venv.command();
    command
        .current_dir(Path::new(PYTHON_DIR).join("tests"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(files)
        .env("AIRLOCK_CLI", AIRLOCK)
        .env("AIRLOCK_TEST_PYTHON", venv.python());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("pytest runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(output.status.success(), "pytest failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // Every test must have run: a skip (a missing server, say) would pass without checking anything.
    assert!(!stdout.contains("skipped"), "pytest skipped tests:\n{stdout}");
}

/// The environment with the wheel of the current source installed, once for every test of this binary:
/// installing it again per test (`--force-reinstall` removes the package's files first) would pull the
/// package out from under another test's pytest, which imports it meanwhile (seen on a fresh clone:
/// `No module named 'airlock_rs.checkpoint'`).
fn prepared() -> Venv {
    static PREPARED: OnceLock<Venv> = OnceLock::new();
    PREPARED
        .get_or_init(|| {
            let venv = venv();
            install_wheel(&venv);
            venv
        })
        .clone()
}

#[test]
fn a_guarded_tool_node_refuses_strips_masks_and_limits_through_the_rust_dispatcher() {
    let venv = prepared();
    pytest(&venv, &["test_toolnode.py"], &[]);
}

#[test]
fn escalated_calls_pause_with_interrupt_and_only_a_bound_approval_resumes_them_once() {
    let venv = prepared();
    pytest(&venv, &["test_approvals.py"], &[]);
}

#[test]
fn approver_credentials_sign_decisions_and_n_person_requests_count_distinct_keys() {
    let venv = prepared();
    pytest(&venv, &["test_operators.py"], &[]);
}

#[test]
fn async_graphs_are_guarded_through_awrap_tool_call() {
    let venv = prepared();
    pytest(&venv, &["test_async.py"], &[]);
}

#[test]
fn approvals_and_checkpoints_in_postgresql() {
    let venv = prepared();
    let url = agent_airlock_tests::pg_server::shared().fresh_database();
    pytest(&venv, &["test_postgres.py"], &[("AIRLOCK_TEST_PG_URL", &url)]);
}

#[test]
fn a_checkpoint_edited_between_pause_and_resume_is_refused_and_recorded() {
    let venv = prepared();
    pytest(&venv, &["test_checkpoints.py"], &[]);
}
