//! Compiles a std-only test program of `tests/support/` with the toolchain's `rustc`, once
//! per test process. The fake harnesses are built this way rather than as binaries of the
//! package, so `cargo install` installs `agentrun` alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The executable of `tests/support/<name>.rs`.
pub(crate) fn support_program(name: &'static str) -> &'static Path {
    static BUILT: OnceLock<Mutex<Vec<(&'static str, &'static Path)>>> = OnceLock::new();
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| *n == name) {
        return exe;
    }
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let exe: PathBuf = dir.path().join(name);
    let source = format!("{}/tests/support/{name}.rs", env!("CARGO_MANIFEST_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args(["--edition", "2024", "--crate-name", name, "-o"])
        .arg(&exe)
        .arg(&source)
        .output()
        .expect("rustc runs");
    assert!(
        out.status.success(),
        "compiling {source} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe: &'static Path = Box::leak(exe.into_boxed_path());
    built.push((name, exe));
    exe
}
