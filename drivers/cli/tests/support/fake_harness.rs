//! A fake harness CLI for the `agentrun agent` tests (`drivers/cli/tests/agent.rs`). Test-only:
//! the tests compile it with `rustc` (it uses std only); it is not a binary of the package.
//!
//! Invoked under a harness program name (a symlink named `claude`, `grok`, `agy`, `codex`, `muse`
//! or `opencode` on `PATH`), it checks its argv, environment and stdin against what that harness is
//! launched with (docs/interpretation.md, "Registry") — written out here independently of the
//! registry in `agentrun_core::harness` — and exits 90 with a one-line message on stderr on any
//! mismatch. Then it replays a recorded stream line by line on stdout.
//!
//! Environment (all optional except `FAKE_FIXTURE` and `FAKE_PROMPT`):
//!
//! * `FAKE_PROMPT`, `FAKE_MODEL`, `FAKE_EFFORT`, `FAKE_RESUME`: the launch request the argv
//!   must encode; `FAKE_HARNESS_ARGS`: the `--harness-arg` values, one per line;
//! * `FAKE_FIXTURE`: the file replayed on stdout; `FAKE_DELAY_MS`: a pause before each line;
//! * `FAKE_STDERR`: a line written to stderr; `FAKE_EXIT`: the exit code (default 0);
//! * `FAKE_WAIT_FOR`: after the replay, wait up to 20 s for this file to exist (the test
//!   creates it on seeing progress), else exit 91: proves the output was interpreted live;
//! * `FAKE_SLEEP_MS`: sleep after the replay (to be stopped by a timeout);
//! * `FAKE_EXPORT`, `FAKE_EXPORT_SESSION`: for `opencode export ID`, the file printed and the
//!   id expected.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn fail(code: u8, name: &str, message: String) -> ExitCode {
    eprintln!("fake {name}: {}", message.replace('\n', " "));
    ExitCode::from(code)
}

/// The argv (after the program) the harness `name` is launched with.
fn expected_args(name: &str) -> Option<Vec<String>> {
    let prompt = var("FAKE_PROMPT").unwrap_or_default();
    let (model, effort, resume) = (var("FAKE_MODEL"), var("FAKE_EFFORT"), var("FAKE_RESUME"));
    // `--harness-arg` values, one per line, expected after the harness's own flags.
    let extra: Vec<String> = var("FAKE_HARNESS_ARGS")
        .map(|v| v.lines().map(String::from).collect())
        .unwrap_or_default();
    let mut a: Vec<String> = Vec::new();
    let flag = |a: &mut Vec<String>, f: &str, v: &Option<String>| {
        if let Some(v) = v {
            a.push(f.to_owned());
            a.push(v.clone());
        }
    };
    match name {
        "claude" => {
            a.extend(["-p", "--output-format", "stream-json", "--verbose"].map(String::from));
            flag(&mut a, "--model", &model);
            flag(&mut a, "--effort", &effort);
            a.extend(extra);
            flag(&mut a, "--resume", &resume);
            a.extend(["--".to_owned(), prompt]);
        }
        "grok" => {
            a.extend(["--output-format", "streaming-messages-json"].map(String::from));
            flag(&mut a, "-m", &model);
            flag(&mut a, "--reasoning-effort", &effort);
            a.extend(extra);
            flag(&mut a, "-r", &resume);
            // `-p, --single <PROMPT>`, the value joined with `=` so it is never a flag.
            a.push(format!("--single={prompt}"));
        }
        "agy" => {
            a.extend(["-p", "--output-format", "stream-json"].map(String::from));
            flag(&mut a, "--model", &model);
            a.extend(extra);
            flag(&mut a, "--conversation", &resume);
            a.extend(["--".to_owned(), prompt]);
        }
        "codex" => {
            a.extend(["exec", "--json"].map(String::from));
            flag(&mut a, "-m", &model);
            if let Some(e) = &effort {
                a.extend(["-c".to_owned(), format!("model_reasoning_effort=\"{e}\"")]);
            }
            a.extend(extra);
            if let Some(r) = &resume {
                a.extend(["resume".to_owned(), r.clone()]);
            }
            a.extend(["--".to_owned(), prompt]);
        }
        "muse" => {
            a.extend(["exec", "--json"].map(String::from));
            flag(&mut a, "--model", &model);
            a.extend(extra);
            flag(&mut a, "--session-id", &resume);
            a.extend(["--".to_owned(), prompt]);
        }
        "opencode" => {
            a.extend(["run", "--format", "json"].map(String::from));
            flag(&mut a, "-m", &model);
            flag(&mut a, "--variant", &effort);
            a.extend(extra);
            flag(&mut a, "-s", &resume);
        }
        _ => return None,
    }
    Some(a)
}

fn main() -> ExitCode {
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args: Vec<String> = argv.collect();

    if name == "opencode" && args.first().map(String::as_str) == Some("export") {
        return export(&name, &args);
    }
    let Some(expected) = expected_args(&name) else {
        return fail(
            90,
            &name,
            "invoked under an unknown harness name".to_owned(),
        );
    };
    if args != expected {
        return fail(
            90,
            &name,
            format!("argv mismatch: expected {expected:?}, got {args:?}"),
        );
    }
    // Each CLI's self-update switch, and only its own.
    for (harness, key, value) in [
        ("grok", "GROK_DISABLE_AUTOUPDATER", "1"),
        ("agy", "AGY_CLI_DISABLE_AUTO_UPDATE", "true"),
        ("muse", "MUSE_NO_AUTO_UPDATE", "1"),
        ("opencode", "OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ] {
        let got = std::env::var(key).ok();
        let wanted = (name == harness).then(|| value.to_owned());
        if got != wanted {
            return fail(90, &name, format!("{key} is {got:?}, expected {wanted:?}"));
        }
    }
    if std::env::var_os("AGENTRUN_RESULT_SINK").is_some() {
        return fail(
            90,
            &name,
            "AGENTRUN_RESULT_SINK leaked into the harness".to_owned(),
        );
    }
    let mut stdin = Vec::new();
    if let Err(e) = io::stdin().take(1 << 20).read_to_end(&mut stdin) {
        return fail(90, &name, format!("reading stdin: {e}"));
    }
    let wanted_stdin = if name == "opencode" {
        var("FAKE_PROMPT").unwrap_or_default().into_bytes()
    } else {
        Vec::new()
    };
    if stdin != wanted_stdin {
        return fail(
            90,
            &name,
            format!(
                "stdin mismatch: expected {:?}, got {:?}",
                String::from_utf8_lossy(&wanted_stdin),
                String::from_utf8_lossy(&stdin)
            ),
        );
    }

    if let Some(line) = var("FAKE_STDERR") {
        eprintln!("{line}");
    }
    if let Err(e) = replay(var("FAKE_FIXTURE").map(PathBuf::from)) {
        return fail(92, &name, format!("replaying the fixture: {e}"));
    }
    if let Some(marker) = var("FAKE_WAIT_FOR") {
        let start = Instant::now();
        while !Path::new(&marker).exists() {
            if start.elapsed() > Duration::from_secs(20) {
                return fail(
                    91,
                    &name,
                    "nobody saw the output while the harness ran".to_owned(),
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if let Some(ms) = var("FAKE_SLEEP_MS").and_then(|v| v.parse().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    ExitCode::from(var("FAKE_EXIT").and_then(|v| v.parse().ok()).unwrap_or(0u8))
}

fn replay(fixture: Option<PathBuf>) -> io::Result<()> {
    let Some(path) = fixture else {
        return Err(io::Error::other("FAKE_FIXTURE is not set"));
    };
    let bytes = std::fs::read(&path)?;
    let delay = var("FAKE_DELAY_MS")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis);
    let mut out = io::stdout().lock();
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        out.write_all(line)?;
        out.flush()?;
    }
    Ok(())
}

/// `opencode session export ID`: prints `FAKE_EXPORT`.
fn export(name: &str, args: &[String]) -> ExitCode {
    let [_, id] = args else {
        return fail(90, name, format!("bad export command {args:?}"));
    };
    if let Some(wanted) = var("FAKE_EXPORT_SESSION")
        && *id != wanted
    {
        return fail(90, name, format!("exported {id:?}, expected {wanted:?}"));
    }
    let Some(path) = var("FAKE_EXPORT") else {
        return fail(1, name, format!("no session {id}"));
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let _ = io::stdout().write_all(&bytes);
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, name, format!("{path}: {e}")),
    }
}
