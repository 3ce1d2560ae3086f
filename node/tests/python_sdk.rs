//! The Python SDK (`sdk/python`): its dependencies installed from the
//! registry into `sdk/python/.venv` by its hash-pinned lock when missing or
//! changed, then `mypy --strict` over the package and its tests, a wheel
//! built from the package, and its pytest suite (every Python example of
//! the KV seed and the failure paths) against real clusters started from
//! this build's `lode` binary.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::run_checked;

fn sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/python")
}

/// The virtual environment's Python, installed from `requirements.lock`
/// unless the environment already holds exactly that lock.
fn python() -> PathBuf {
    let sdk = sdk();
    let venv = sdk.join(".venv");
    let python = venv.join("bin/python");
    let lock = std::fs::read(sdk.join("requirements.lock")).expect("read requirements.lock");
    let stamp = venv.join("installed.lock");
    if python.exists() && std::fs::read(&stamp).ok().as_deref() == Some(&lock[..]) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    run_checked(
        "python3 -m venv",
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
    );
    run_checked(
        "pip install --require-hashes -r requirements.lock",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--require-hashes",
            ])
            .arg("-r")
            .arg(sdk.join("requirements.lock")),
    );
    std::fs::write(&stamp, &lock).expect("write the lock stamp");
    python
}

#[test]
fn the_python_sdk_type_checks_builds_and_passes_its_suite_against_real_clusters() {
    let python = python();
    let sdk = sdk();
    run_checked(
        "mypy --strict",
        Command::new(&python)
            .args(["-m", "mypy", "--strict", "src", "tests", "bench.py"])
            .env("MYPYPATH", "src")
            .current_dir(&sdk),
    );
    // The wheel is built from a copy: setuptools writes its build
    // directories beside the sources.
    let build = tempfile::tempdir().expect("temp dir");
    let package = build.path().join("package");
    std::fs::create_dir(&package).expect("create the package copy");
    run_checked(
        "copy the package",
        Command::new("cp")
            .arg("-r")
            .arg(sdk.join("pyproject.toml"))
            .arg(sdk.join("src"))
            .arg(&package),
    );
    let wheels = build.path().join("wheels");
    run_checked(
        "pip wheel",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--wheel-dir",
            ])
            .arg(&wheels)
            .arg(&package),
    );
    let built = std::fs::read_dir(&wheels).expect("the wheel directory").count();
    assert_eq!(built, 1, "one wheel built");
    run_checked(
        "pytest",
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .env("PYTHONPATH", sdk.join("src"))
            .env("LODE_BINARY", env!("CARGO_BIN_EXE_lode"))
            .current_dir(&sdk),
    );
}
