//! Runs in progress: `runs` lists them as running from another process, `follow` prints one
//! as it grows and exits with its code.

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
    assert!(row.contains("(running for "), "{row}");
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
