//! Compiles a std-only test program of `tests/support/` with the toolchain's `rustc`, once
//! per test process. The fake harnesses are built this way rather than as binaries of the
//! package, so `cargo install` installs `agentrun` alone.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The executable of `tests/support/<name>.rs`, built into the target directory's scratch
/// space under a name that carries a hash of its source: test runs reuse it until the source
/// changes, and nothing is left in the system's temporary directory.
pub(crate) fn support_program(name: &'static str) -> &'static Path {
    static BUILT: OnceLock<Mutex<Vec<(&'static str, &'static Path)>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| *n == name) {
        return exe;
    }
    let source = format!("{}/tests/support/{name}.rs", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read(&source).expect("the support program's source is readable");
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&text, &mut hasher);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("support-programs");
    std::fs::create_dir_all(&dir).expect("the target directory is writable");
    let exe = dir.join(format!(
        "{name}-{:016x}",
        std::hash::Hasher::finish(&hasher)
    ));
    if !exe.exists() {
        // Built under a name of this process, then renamed: test binaries that run at the
        // same time never see a half-written program.
        let partial = dir.join(format!("{name}.{}.partial", std::process::id()));
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let out = Command::new(rustc)
            .args(["--edition", "2024", "--crate-name", name, "-o"])
            .arg(&partial)
            .arg(&source)
            .output()
            .expect("rustc runs");
        assert!(
            out.status.success(),
            "compiling {source} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&partial, &exe).expect("the built program can be put in place");
    }
    let exe: &'static Path = Box::leak(exe.into_boxed_path());
    built.push((name, exe));
    exe
}
