//! The virtual environments the Python-driven tests provision for themselves (`python_env`): built once and
//! reused, safe when two builders start at once, rebuilt when a build died half-way, and a failure that says
//! what is missing. These run against a package index that cannot be reached, so they need no network: a
//! requirement the fresh environment already satisfies (`pip`) installs nothing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use agent_airlock_tests::python_env::PythonEnv;

/// A port nothing listens on: pip's connection is refused at once.
const UNREACHABLE_INDEX: &str = "http://127.0.0.1:9/simple";

fn offline(root: &Path) -> PythonEnv {
    PythonEnv::in_dir(root)
        .with_pip_env("PIP_INDEX_URL", UNREACHABLE_INDEX)
        .without_pip_env("PIP_EXTRA_INDEX_URL")
        .without_pip_env("PIP_FIND_LINKS")
        .without_pip_env("PIP_NO_INDEX")
}

fn requirements(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("requirements.txt");
    std::fs::write(&path, text).expect("the requirements are written");
    path
}

#[test]
fn two_builders_at_once_build_one_environment_and_later_runs_reuse_it() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let pinned = requirements(scratch.path(), "pip\n");
    let root = scratch.path().join("envs");
    let start = Arc::new(Barrier::new(2));
    let builders: Vec<_> = (0..2)
        .map(|_| {
            let (env, pinned, start) = (offline(&root), pinned.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                env.provision(&pinned)
            })
        })
        .collect();
    let venvs: Vec<_> = builders.into_iter().map(|b| b.join().expect("no panic").expect("provisioned")).collect();

    assert_eq!(venvs.iter().filter(|v| v.created()).count(), 1, "exactly one builder creates it: {venvs:?}");
    assert_eq!(venvs[0].dir(), venvs[1].dir());
    let output = venvs[0].command().args(["-c", "import sys; print(sys.prefix != sys.base_prefix)"]).output();
    assert_eq!(String::from_utf8_lossy(&output.expect("the venv runs").stdout).trim(), "True");

    let again = offline(&root).provision(&pinned).expect("provisioned again");
    assert!(!again.created(), "a later run reuses the environment");
    assert_eq!(again.dir(), venvs[0].dir());

    // Other requirements are another environment.
    let other = requirements(scratch.path(), "pip\n# changed\n");
    let changed = offline(&root).provision(&other).expect("provisioned");
    assert!(changed.created());
    assert_ne!(changed.dir(), venvs[0].dir());
}

#[test]
fn a_build_that_died_half_way_is_rebuilt_not_trusted() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let pinned = requirements(scratch.path(), "pip\n");
    let root = scratch.path().join("envs");
    let first = offline(&root).provision(&pinned).expect("provisioned");
    // What a killed build leaves: the folder without its marker, with a half-written file in it.
    std::fs::remove_file(first.dir().join("airlock-provisioned")).expect("the marker exists");
    std::fs::write(first.dir().join("half-written"), "").expect("written");

    let rebuilt = offline(&root).provision(&pinned).expect("provisioned");
    assert!(rebuilt.created(), "an environment without its marker is rebuilt");
    assert!(!rebuilt.dir().join("half-written").exists());
}

#[test]
fn an_unreachable_package_index_fails_with_a_message_saying_so() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let pinned = requirements(scratch.path(), "mcp==2.3.0\n");
    let root = scratch.path().join("envs");
    let error = offline(&root).provision(&pinned).expect_err("nothing can be downloaded");
    assert!(error.contains("the package index could not be reached"), "{error}");
    assert!(error.contains(&pinned.display().to_string()), "the message names the requirements: {error}");
    assert!(error.contains("PIP_INDEX_URL"), "the message says how to point pip elsewhere: {error}");

    // Nothing half-built is taken for ready: no environment carries the marker a later run would trust.
    for entry in std::fs::read_dir(&root).expect("the root exists") {
        let path = entry.expect("an entry").path();
        assert!(!path.join("airlock-provisioned").exists(), "{} is marked ready", path.display());
    }
}

#[test]
fn a_missing_python_fails_with_a_message_saying_what_to_install() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let pinned = requirements(scratch.path(), "pip\n");
    let missing = scratch.path().join("no-such-python3");
    let error = PythonEnv::in_dir(scratch.path().join("envs"))
        .with_base_python(&missing)
        .provision(&pinned)
        .expect_err("there is no interpreter");
    assert!(error.contains(&format!("cannot run `{}`", missing.display())), "{error}");
    assert!(error.contains("python3-venv") && error.contains("`PYTHON`"), "{error}");
}
