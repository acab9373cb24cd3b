//! The `agentrun` binary as the scenario tests run it: in a temporary directory of their own
//! holding the store, with stdin from `/dev/null` and nothing inherited from whoever runs the
//! tests that would change what agentrun does (a result-sink variable, `AGENTRUN_HOME`).
//! Included by each test file with `#[path = "support/sandbox.rs"] mod sandbox;`; each file
//! uses part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The harness names agentrun knows, each of which a fake harness may stand in for.
pub(crate) const HARNESSES: [&str; 6] = ["claude", "grok", "agy", "codex", "muse", "opencode"];

/// The `agentrun` binary under test ([`command`]).
pub(crate) fn agentrun() -> Command {
    command(env!("CARGO_BIN_EXE_agentrun"))
}

/// `program` with stdin from `/dev/null`, without an inherited `AGENTRUN_RESULT_SINK` or
/// `AGENTRUN_HOME` (for a program that runs agentrun in turn).
pub(crate) fn command(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env_remove("AGENTRUN_RESULT_SINK")
        .env_remove("AGENTRUN_HOME")
        .stdin(Stdio::null());
    c
}

/// A temporary directory with a store (`store`, created by agentrun on first use) and
/// whatever the test puts beside it; removed when dropped.
pub(crate) struct Sandbox {
    dir: tempfile::TempDir,
    /// The store directory.
    pub(crate) store: PathBuf,
}

impl Sandbox {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        Self { dir, store }
    }

    /// `rel` inside the sandbox.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `agentrun --store STORE ARGS` ([`agentrun`]).
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut c = agentrun();
        c.arg("--store").arg(&self.store).args(args);
        c
    }

    /// Runs [`Sandbox::cmd`] to its end.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Creates `bin/` in the sandbox with `program` under every harness name, and returns it
    /// (to be put on `PATH`).
    pub(crate) fn fake_harnesses(&self, program: &Path) -> PathBuf {
        let bin = self.path("bin");
        std::fs::create_dir(&bin).unwrap();
        for name in HARNESSES {
            std::os::unix::fs::symlink(program, bin.join(name)).unwrap();
        }
        bin
    }
}

/// A recorded harness stream under `tests/fixtures/harness/`.
pub(crate) fn fixture(path: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/harness"
    ))
    .join(path)
}

/// The output's stdout, which must be UTF-8.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The output's stderr, invalid UTF-8 replaced.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `o` exited with `code` and said `needle` on stderr (stderr is shown when
/// either fails); returns stderr.
#[track_caller]
pub(crate) fn assert_exit_says(o: &Output, code: i32, needle: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "{needle:?} not on stderr: {err}");
    err
}
