//! The server example's binary, for tests that run it as a child process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use snitch::core::clock::monotonic_now;

/// `target/<profile>/examples/server`, built by this test process before first use: with
/// `cargo test --test <one>` cargo builds no example, and a binary left by an
/// earlier build would run outdated code. Built as `scripts/test.sh` builds everything
/// (`--workspace --all-features`), so under it this build is a no-op; other features would
/// rebuild a share of the dependencies and relink the example the scripts run next.
pub fn server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test executable's path");
        // target/<profile>/deps/<this test>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .unwrap_or_else(|| panic!("{} is not in target/<profile>/deps", exe.display()))
            .to_path_buf();
        let target_dir = profile_dir
            .parent()
            .expect("target/<profile>")
            .to_path_buf();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a profile directory name")
            .to_owned();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args([
                "build",
                "--workspace",
                "--all-features",
                "--example",
                "server",
            ])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cargo.arg("--release");
            }
            other => {
                cargo.args(["--profile", other]);
            }
        }
        let started = monotonic_now();
        let status = cargo
            .status()
            .unwrap_or_else(|e| panic!("cannot run cargo to build the server example: {e}"));
        assert!(
            status.success(),
            "`cargo build --example server` failed ({status}): the server binary is needed"
        );
        let binary = profile_dir
            .join("examples")
            .join(format!("server{}", std::env::consts::EXE_SUFFIX));
        assert!(
            binary.is_file(),
            "{} missing after `cargo build --example server`",
            binary.display()
        );
        eprintln!(
            "server binary {} ready in {} ms",
            binary.display(),
            started.elapsed().as_millis()
        );
        binary
    })
}
