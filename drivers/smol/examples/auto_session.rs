//! An auto session as library calls on smol: create it, run it with live progress, read its
//! outcome. The harness is a stand-in speaking Claude Code's stream (a few lines of `sh` in a
//! temporary directory), so the example runs anywhere; with a real Claude Code on `PATH`, drop
//! the `.env("PATH", …)` and give it a permission mode with `.harness_arg(…)`.
//!
//! ```text
//! cargo run -p agentrun-smol --example auto_session
//! ```

use std::error::Error;
use std::path::{Path, PathBuf};

use agentrun_core::harness::Harness;
use agentrun_fs::Store;
use agentrun_smol::{AutoProgress, AutoSession, AutoSessionOptions, Runner};

pub(crate) fn main() -> Result<(), Box<dyn Error>> {
    let tmp = tempfile::tempdir()?;
    let bin = stand_in_claude(tmp.path())?;
    let store = Store::open(tmp.path().join("store"))?;

    let options = AutoSessionOptions::new(Harness::Claude, "make the failing test pass")
        .verify("true")
        .max_turns(4)
        .workspace(tmp.path());
    let outcome = smol::block_on(async {
        let session = AutoSession::create(Runner::new(store), options)
            .await?
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
        println!("session {} in {}", session.id(), session.dir().display());
        session
            .run(|progress| match progress {
                AutoProgress::Event(line) => println!("{line}"),
                AutoProgress::Harness(line) => println!("  {line}"),
                _ => {}
            })
            .await
    })?;
    println!("{}", outcome.summary());
    // The exit code by auto mode's contract: 0 completed (or stopped at the turn limit).
    match outcome.exit_code() {
        0 => Ok(()),
        code => Err(format!("the session ended with exit code {code}").into()),
    }
}

/// A `claude` that answers every turn and claims completion in the result sink (only the
/// Evaluate turn's claim counts).
fn stand_in_claude(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir(&bin)?;
    let script = r#"#!/bin/sh
echo '{"type":"system","subtype":"init","session_id":"stand-in","model":"m"}'
printf 'COMPLETE' > "$AGENTRUN_RESULT_SINK"
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"stand-in"}'
"#;
    let path = bin.join("claude");
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(bin)
}
