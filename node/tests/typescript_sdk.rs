//! The TypeScript SDK (`sdk/typescript`): its development dependencies
//! installed from the registry by its lock (`npm ci`) when missing or
//! changed, compiled with `tsc --strict`, then its `node --test` suite
//! (every TypeScript example of the KV seed, MessagePack, the failure
//! paths) against real clusters started from this build's `lode` binary.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::run_checked;

fn sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/typescript")
}

/// `npm ci` unless `node_modules` already holds exactly the lock.
fn install() {
    let sdk = sdk();
    let lock = std::fs::read(sdk.join("package-lock.json")).expect("read package-lock.json");
    let stamp = sdk.join("node_modules/.installed-lock.json");
    if std::fs::read(&stamp).ok().as_deref() == Some(&lock[..]) {
        return;
    }
    run_checked(
        "npm ci",
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&sdk),
    );
    std::fs::write(&stamp, &lock).expect("write the lock stamp");
}

#[test]
fn the_typescript_sdk_compiles_strictly_and_passes_its_suite_against_real_clusters() {
    install();
    let sdk = sdk();
    let _ = std::fs::remove_dir_all(sdk.join("dist"));
    run_checked(
        "tsc --strict",
        Command::new("node")
            .args(["node_modules/typescript/bin/tsc", "-p", "."])
            .current_dir(&sdk),
    );
    assert!(sdk.join("dist/src/index.d.ts").exists(), "type declarations emitted");
    run_checked(
        "node --test",
        Command::new("node")
            .args(["--test", "--test-concurrency=1", "dist/tests/"])
            .env("LODE_BINARY", env!("CARGO_BIN_EXE_lode"))
            .current_dir(&sdk),
    );
}
