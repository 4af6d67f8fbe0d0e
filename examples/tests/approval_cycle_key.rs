//! The approval key the `approval_cycle` example writes is readable by its owner only.

#[cfg(unix)]
#[test]
fn the_example_writes_its_approval_key_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let demo = dir.path().join("demo");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_approval_cycle"))
        .args(["start", "--dir"])
        .arg(&demo)
        .output()
        .expect("the example runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let mode = std::fs::metadata(demo.join("approval.key")).expect("the key was written").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file's mode is {:o}", mode & 0o777);
}
