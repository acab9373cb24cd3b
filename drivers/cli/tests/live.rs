//! Runs in progress: `runs` lists them as running from another process, `follow` prints one
//! as it grows and exits with its code; `run` on a terminal shows a status line while it runs.

use std::io::Read;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, stderr, stdout};

/// Generous: the box is busy; only a hang reaches it.
const PATIENCE: Duration = Duration::from_secs(120);

/// Waits (polling) until `ready` says yes, or panics after [`PATIENCE`] with `what`.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A run that prints, waits for the file `go` in the sandbox, prints more and exits 3.
fn start_waiting_run(env: &Sandbox) -> Child {
    let go = env.path("go");
    let script = format!(
        "echo zero; echo first; echo err1 >&2; while [ ! -e '{}' ]; do sleep 0.05; done; echo second; exit 3",
        go.display()
    );
    env.cmd(&["run", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Reads `child`'s stdout on a thread, sending what comes as it comes.
fn chunks(child: &mut Child) -> mpsc::Receiver<Vec<u8>> {
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn a_run_in_progress_is_listed_as_running_and_followed_to_its_end() {
    let env = Sandbox::new();
    let mut run = start_waiting_run(&env);

    // Listed as running from another process, with the bytes captured so far.
    let mut listed = serde_json::Value::Null;
    wait_for("the run to be listed with its first line", || {
        let o = env.run(&["runs", "--json"]);
        if !o.status.success() {
            return false;
        }
        let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let Some(first) = runs.as_array().and_then(|a| a.first()).cloned() else {
            return false;
        };
        let ready = first["streams"][0]["bytes"] == 11 && first["streams"][1]["bytes"] == 5;
        listed = first;
        ready
    });
    assert_eq!(listed["status"], "running", "{listed}");
    assert_eq!(listed["streams"][0]["name"], "stdout", "{listed}");
    assert_eq!(listed["command"][0], "sh", "{listed}");
    assert!(listed["finished_unix_ms"].is_null(), "{listed}");
    assert!(listed["elapsed_ms"].is_u64(), "{listed}");
    let run_id = listed["run_id"].as_str().unwrap().to_owned();

    let table = env.run(&["runs"]);
    let text = stdout(&table);
    let row = text
        .lines()
        .find(|l| l.starts_with(&run_id))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" running "), "{row}");
    assert!(row.contains("stdout 11 B"), "{row}");

    // Followed from another process: the first line comes while the run still waits.
    let mut follow = env
        .cmd(&["follow", "last"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = chunks(&mut follow);
    let mut got = Vec::new();
    while got != b"zero\nfirst\n" {
        let chunk = rx
            .recv_timeout(PATIENCE)
            .expect("follow printed the first lines while the run was waiting");
        got.extend(chunk);
        assert!(
            b"zero\nfirst\n".starts_with(&got),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
    }
    assert!(
        run.try_wait().unwrap().is_none(),
        "the run was still in progress"
    );

    std::fs::File::create(env.path("go")).unwrap();
    while let Ok(chunk) = rx.recv_timeout(PATIENCE) {
        got.extend(chunk);
    }
    let status = follow.wait().unwrap();
    let mut err = String::new();
    follow
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&got), "zero\nfirst\nsecond\n");
    assert_eq!(err, "err1\n");
    assert_eq!(status.code(), Some(3), "follow exits with the run's code");
    assert_eq!(run.wait().unwrap().code(), Some(3));

    // Finished: no longer listed as running; followed at once, whole or its tail.
    let o = env.run(&["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(runs[0]["run_id"], run_id.as_str());
    assert_ne!(runs[0]["status"], "running");
    let o = env.run(&["follow", &run_id[..16]]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stdout(&o), "zero\nfirst\nsecond\n");
    assert_eq!(stderr(&o), "err1\n");
    let o = env.run(&["follow", "--tail", "1", "last"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stdout(&o), "second\n");
}

#[test]
fn follow_tail_starts_with_the_last_lines_of_a_run_in_progress() {
    let env = Sandbox::new();
    let mut run = start_waiting_run(&env);
    wait_for("the run to be listed with its first line", || {
        let o = env.run(&["runs", "--json"]);
        let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        runs[0]["status"] == "running" && runs[0]["streams"][0]["bytes"] == 11
    });
    let mut follow = env
        .cmd(&["follow", "--tail", "1", "last"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = chunks(&mut follow);
    // The last line so far, while the run still waits, then what comes after it.
    let first = rx
        .recv_timeout(PATIENCE)
        .expect("the tail while the run waits");
    assert_eq!(String::from_utf8_lossy(&first), "first\n");
    assert!(
        run.try_wait().unwrap().is_none(),
        "the run was still in progress"
    );
    std::fs::File::create(env.path("go")).unwrap();
    let mut got = Vec::new();
    while let Ok(chunk) = rx.recv_timeout(PATIENCE) {
        got.extend(chunk);
    }
    assert_eq!(follow.wait().unwrap().code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&got), "second\n");
    assert_eq!(run.wait().unwrap().code(), Some(3));
}

#[test]
fn following_an_unknown_run_is_an_error() {
    let env = Sandbox::new();
    assert!(env.run(&["run", "--", "true"]).status.success());
    let o = env.run(&["follow", "zzzz"]);
    sandbox::assert_exit_says(&o, 125, "no run has the id or id prefix");
}

/// `script` from util-linux: runs a command on a pseudo-terminal of its own and copies what
/// the command writes to the terminal to its own stdout.
const SCRIPT: &str = "/usr/bin/script";

/// `agentrun run` of a program that prints a line, then waits for the file `go` in the
/// sandbox before it exits, as a shell command line (for `script -c`).
fn waiting_run_line(env: &Sandbox, extra: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let go = env.path("go");
    let program = format!(
        "echo hello; while [ ! -e {} ]; do sleep 0.05; done",
        quote(&go.display().to_string())
    );
    let mut words = vec![
        quote(env!("CARGO_BIN_EXE_agentrun")),
        "--store".to_owned(),
        quote(&env.store.display().to_string()),
        "run".to_owned(),
    ];
    words.extend(extra.iter().map(|w| quote(w)));
    words.extend([
        "--".to_owned(),
        "sh".to_owned(),
        "-c".to_owned(),
        quote(&program),
    ]);
    words.join(" ")
}

/// Starts `line` under `script` on a terminal of its own, with `NO_COLOR` as given.
fn on_a_terminal(line: &str, no_color: Option<&str>) -> Child {
    assert!(
        std::path::Path::new(SCRIPT).exists(),
        "this test needs `script` from util-linux at {SCRIPT}"
    );
    let mut c = sandbox::command(SCRIPT);
    c.args(["-q", "-e", "-c", line, "/dev/null"])
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(value) = no_color {
        c.env("NO_COLOR", value);
    }
    c.spawn().unwrap()
}

/// Waits until the newest run is in progress, has printed its line, and has been running for
/// a second: long enough for four redraws of a status line, had there been one.
fn wait_until_running_for_a_second(env: &Sandbox) {
    wait_for("the run to be running for a second", || {
        let o = env.run(&["runs", "--json"]);
        let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        runs[0]["status"] == "running"
            && runs[0]["streams"][0]["bytes"] == 6
            && runs[0]["elapsed_ms"].as_u64().is_some_and(|ms| ms >= 1000)
    });
}

/// Everything `child` wrote to its stdout until it exited, and its exit code.
fn rest_of(mut child: Child, rx: mpsc::Receiver<Vec<u8>>, mut got: Vec<u8>) -> (String, i32) {
    while let Ok(chunk) = rx.recv_timeout(PATIENCE) {
        got.extend(chunk);
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (String::from_utf8_lossy(&got).into_owned(), code)
}

#[test]
fn a_run_on_a_terminal_shows_a_status_line_and_erases_it() {
    let env = Sandbox::new();
    let mut script = on_a_terminal(&waiting_run_line(&env, &[]), None);
    let rx = chunks(&mut script);
    // The status line appears while the program waits, with its stdout so far.
    let mut got = Vec::new();
    let line = "stdout 1 line, 6 B; stderr 0 lines, 0 B";
    while !String::from_utf8_lossy(&got).contains(line) {
        let chunk = rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("no status line: {:?}", String::from_utf8_lossy(&got)));
        got.extend(chunk);
    }
    std::fs::File::create(env.path("go")).unwrap();
    let (terminal, code) = rest_of(script, rx, got);
    assert_eq!(code, 0, "{terminal:?}");
    // Drawn in place: at the start of the line, then the rest of the old one cleared.
    let drawn = terminal
        .find("\ragentrun: running ")
        .unwrap_or_else(|| panic!("{terminal:?}"));
    assert!(
        terminal[drawn..].contains(&format!("{line}\x1b[K")),
        "{terminal:?}"
    );
    // Erased before the preview and the footer, and not drawn again after that.
    let erased = terminal
        .rfind("\r\x1b[K")
        .unwrap_or_else(|| panic!("{terminal:?}"));
    let after = &terminal[erased..];
    assert!(after.contains("hello"), "the preview follows: {terminal:?}");
    assert!(
        after.contains("agentrun: run "),
        "the footer follows: {terminal:?}"
    );
    assert!(!after.contains("agentrun: running"), "{terminal:?}");
    assert!(drawn < erased, "{terminal:?}");
}

#[test]
fn no_status_line_when_stderr_is_not_a_terminal_or_with_no_color_or_quiet() {
    // stderr a pipe.
    let env = Sandbox::new();
    let run = env
        .cmd(&["run", "--", "sh", "-c"])
        .arg(format!(
            "echo hello; while [ ! -e '{}' ]; do sleep 0.05; done",
            env.path("go").display()
        ))
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_running_for_a_second(&env);
    std::fs::File::create(env.path("go")).unwrap();
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("agentrun: run "),
        "only the footer: {err:?}"
    );
    assert!(!err.contains("running") && !err.contains('\r'), "{err:?}");
    assert!(!err.contains('\x1b'), "{err:?}");

    // On a terminal, but asked not to.
    for (extra, no_color) in [(&[][..], Some("1")), (&["--quiet"][..], None)] {
        let env = Sandbox::new();
        let mut script = on_a_terminal(&waiting_run_line(&env, extra), no_color);
        let rx = chunks(&mut script);
        wait_until_running_for_a_second(&env);
        std::fs::File::create(env.path("go")).unwrap();
        let (terminal, code) = rest_of(script, rx, Vec::new());
        assert_eq!(code, 0, "{extra:?} {no_color:?}: {terminal:?}");
        assert!(terminal.contains("agentrun: run "), "{terminal:?}");
        assert!(
            !terminal.contains("agentrun: running") && !terminal.contains("\x1b[K"),
            "{extra:?} {no_color:?}: {terminal:?}"
        );
    }
}
