//! The server's admin commands through the `snitch` binary (default features), on a
//! SQLite file of a test's own.
#![cfg(feature = "server")]

use std::process::Command;

const SNITCH: &str = env!("CARGO_BIN_EXE_snitch");

#[test]
fn migrate_cases_and_keys_work_through_the_snitch_binary() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("snitch.toml");
    std::fs::write(
        &config,
        format!("data_path = {:?}\n", dir.path().join("snitch.db")),
    )
    .expect("write");
    let snitch = |args: &[&str]| {
        let mut command = Command::new(SNITCH);
        // The environment overrides the file (DATABASE_URL, SNITCH_*): none of it may
        // point this test at a shared database.
        command.env_remove("DATABASE_URL");
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SNITCH_") {
                command.env_remove(&key);
            }
        }
        let out = command
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    snitch(&["migrate"]);
    snitch(&["cases", "create", "acme", "--members", "ops@acme.test"]);
    assert!(snitch(&["cases", "list"]).contains("acme"));
    let key = snitch(&["keys", "create", "--case", "acme", "--label", "ci"]);
    assert!(!key.trim().is_empty());
    assert!(snitch(&["keys", "list", "--case", "acme"]).contains("ci"));
}
