//! Files agentrun opens by a path it is given: `compact --output` never replaces what it must
//! not, settings and records a run would refuse are refused everywhere, and a FIFO (or socket,
//! directory, device) wherever a path is opened neither hangs agentrun nor passes for a file.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, assert_exit_says, stderr, stdout};

/// Runs `cmd` to its end, failing the test (and killing it) when it has not ended after two
/// minutes: what waits on a FIFO never would.
#[track_caller]
fn ends(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{cmd:?} is blocked");
        }
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

fn transcript() -> Value {
    json!({
        "summary": "earlier work",
        "messages": [
            {"role": "user", "content": "why does the build fail?"},
            {"role": "assistant", "content": "a missing fixture"},
            {"role": "user", "content": "fix it"},
        ]
    })
}

const SUMMARIZER: &str = "cat >/dev/null; echo the summary";

fn compact(env: &Sandbox, input: &str, extra: &[&str]) -> Output {
    let mut args = vec!["compact", input, "--summarizer", SUMMARIZER];
    args.extend_from_slice(extra);
    env.run(&args)
}

#[test]
fn compact_output_is_never_the_transcript_and_replaces_a_file_only_with_force() {
    let env = Sandbox::new();
    let t = env.path("t.json");
    let original = serde_json::to_vec(&transcript()).unwrap();
    fs::write(&t, &original).unwrap();
    let t_str = t.to_str().unwrap();
    // The transcript by its own path, another spelling, a symbolic link and a hard link.
    fs::create_dir(env.path("sub")).unwrap();
    std::os::unix::fs::symlink(&t, env.path("link.json")).unwrap();
    fs::hard_link(&t, env.path("hard.json")).unwrap();
    let spellings = [
        t_str.to_owned(),
        env.path("sub/../t.json").display().to_string(),
        env.path("link.json").display().to_string(),
        env.path("hard.json").display().to_string(),
    ];
    for output in &spellings {
        for force in [false, true] {
            let mut extra = vec!["--output", output.as_str()];
            if force {
                extra.push("--force");
            }
            let o = compact(&env, t_str, &extra);
            assert_exit_says(&o, 125, "is the transcript being compacted");
            assert_eq!(
                fs::read(&t).unwrap(),
                original,
                "{output} (--force: {force})"
            );
        }
    }
    // Read from stdin, the transcript is recognised as well.
    let o = env
        .cmd(&[
            "compact",
            "-",
            "--summarizer",
            SUMMARIZER,
            "--output",
            t_str,
            "--force",
        ])
        .stdin(fs::File::open(&t).unwrap())
        .output()
        .unwrap();
    assert_exit_says(&o, 125, "is the transcript being compacted");
    assert_eq!(fs::read(&t).unwrap(), original);
    // Nothing was summarized for any of these: the refusal comes first.
    assert!(!env.store.join("records").exists() || count(&env.store.join("records")) == 0);

    // Another existing file: kept without --force, replaced with it.
    let other = env.path("other.json");
    fs::write(&other, b"precious").unwrap();
    let other_str = other.to_str().unwrap();
    let o = compact(&env, t_str, &["--output", other_str]);
    assert_exit_says(&o, 125, "--force");
    assert_eq!(fs::read(&other).unwrap(), b"precious");
    let o = compact(&env, t_str, &["--output", other_str, "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written: Value = serde_json::from_slice(&fs::read(&other).unwrap()).unwrap();
    assert_eq!(written["summary"], "the summary");
    // A link at the output is replaced itself, never written through.
    let target = env.path("target.txt");
    fs::write(&target, b"system file").unwrap();
    let via = env.path("via.json");
    std::os::unix::fs::symlink(&target, &via).unwrap();
    let o = compact(&env, t_str, &["--output", via.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(&target).unwrap(), b"system file");
    assert!(fs::symlink_metadata(&via).unwrap().is_file());
    // A new file is written; no temporary file is left beside it.
    let new = env.path("new.json");
    let o = compact(&env, t_str, &["--output", new.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(new.is_file());
    let leftovers: Vec<_> = fs::read_dir(env.path(""))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A directory is no output.
    let o = compact(
        &env,
        t_str,
        &["--output", env.path("sub").to_str().unwrap(), "--force"],
    );
    assert_exit_says(&o, 125, "a directory");
}

fn count(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |d| d.count())
}

#[test]
fn config_refuses_the_settings_a_run_refuses_with_the_same_words() {
    let env = Sandbox::new();
    let config = env.path("config.toml");
    fs::write(&config, "sink_var = \"PATH\"\n").unwrap();
    let config_str = config.to_str().unwrap();
    let run = env.run(&["--config", config_str, "run", "--sink", "true"]);
    let shown = env.run(&["--config", config_str, "config"]);
    let json = env.run(&["--config", config_str, "config", "--json"]);
    for o in [&run, &shown] {
        assert_exit_says(o, 125, "invalid result-sink variable name \"PATH\"");
        assert_exit_says(o, 125, "the program needs PATH for itself");
    }
    assert!(shown.stdout.is_empty(), "{}", stdout(&shown));
    // Under --json the error is the JSON document.
    assert_eq!(json.status.code(), Some(125));
    let error: Value = serde_json::from_slice(&json.stdout).unwrap();
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the program needs PATH for itself"),
        "{error}"
    );
    fs::write(&config, "store = \"/tmp/a\\u0000b\"\n").unwrap();
    for command in [&["config"][..], &["run", "true"]] {
        let o = env.run(&[&["--config", config_str][..], command].concat());
        assert_exit_says(&o, 125, "NUL");
        assert!(stderr(&o).contains("store"), "{}", stderr(&o));
    }
}

/// `agentrun run --json ARGS`: the run's JSON.
fn run_json(env: &Sandbox, args: &[&str]) -> Value {
    let o = env.run(&[&["run", "--json"][..], args].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn verify_and_runs_refuse_a_record_that_names_another_run() {
    let env = Sandbox::new();
    let good = run_json(&env, &["echo", "good"]);
    let forged = run_json(&env, &["echo", "forged"]);
    let forged_id = forged["record"]["run_id"].as_str().unwrap().to_owned();
    let path = env.store.join("records").join(format!("{forged_id}.json"));
    let mut record: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    record["run_id"] = "../../../etc/x".into();
    fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();

    let verify = env.run(&["verify"]);
    let out = stdout(&verify) + &stderr(&verify);
    assert_eq!(verify.status.code(), Some(1), "{out}");
    assert!(
        out.contains("../../../etc/x") && out.contains(&forged_id),
        "{out}"
    );
    let runs = env.run(&["runs"]);
    assert_exit_says(&runs, 125, &forged_id);
    assert!(
        stderr(&runs).contains("../../../etc/x"),
        "{}",
        stderr(&runs)
    );
    let listed = stdout(&runs);
    assert!(
        listed.contains(good["record"]["run_id"].as_str().unwrap()),
        "{listed}"
    );
    assert!(!listed.contains("etc/x"), "{listed}");
    assert_exit_says(&env.run(&["show", &forged_id]), 125, "../../../etc/x");
}

#[test]
fn a_fifo_as_stdin_without_a_writer_holds_up_neither_the_timeout_nor_a_signal() {
    let env = Sandbox::new();
    let fifo = env.path("in.fifo");
    mkfifo(&fifo);
    let fifo_str = fifo.to_str().unwrap();
    let o = ends(env.cmd(&["run", "--timeout", "2s", "--stdin", fifo_str, "cat"]));
    assert_exit_says(&o, 124, "timed out");
    // SIGINT, once the child runs (its record's capture directory exists).
    let child = env
        .cmd(&["run", "--stdin", fifo_str, "cat"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..1200 {
        if count(&env.store.join("captures")) > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let o = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("agentrun ignored SIGINT while its stdin FIFO had no writer")
        .unwrap();
    assert_exit_says(&o, 130, "stopped by a signal");
}

/// A sandbox holding a store with one run of `printf 'one\ntwo\n'`: its record's run id and
/// the stored stdout object's digest.
fn stored_run(env: &Sandbox) -> (String, String) {
    let json = run_json(env, &["printf", "one\\ntwo\\n"]);
    let run_id = json["record"]["run_id"].as_str().unwrap().to_owned();
    let digest = json["record"]["output"]["streams"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "stdout"))
        .map(|s| s["sha256"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("{json:#}"));
    (run_id, digest)
}

/// What a test can put in place of a file without privileges; the listener keeps a socket.
fn replace_with(path: &Path, kind: &str) -> Option<UnixListener> {
    let _ = fs::remove_file(path);
    match kind {
        "FIFO" => mkfifo(path),
        "directory" => fs::create_dir(path).unwrap(),
        "socket" => return Some(UnixListener::bind(path).unwrap()),
        _ => unreachable!(),
    }
    None
}

/// Reads `artifact://DIGEST` through `agentrun mcp`: the `read` tool and `resources/read`,
/// speaking JSON-RPC over stdio; returns both answers.
fn mcp_reads(env: &Sandbox, digest: &str) -> Vec<Value> {
    let mut child = env
        .cmd(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let uri = format!("artifact://{digest}");
    let mut stdin = child.stdin.take().unwrap();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "read", "arguments": {"filePath": uri}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}}),
    ];
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut answers = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(message) = serde_json::from_str::<Value>(&line.unwrap()) else {
                continue;
            };
            if message["id"] == 2 || message["id"] == 3 {
                answers.push(message);
                if answers.len() == 2 {
                    break;
                }
            }
        }
        let _ = tx.send(answers);
    });
    let answers = rx.recv_timeout(Duration::from_secs(120));
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    answers.expect("agentrun mcp did not answer the reads")
}

#[test]
fn a_fifo_socket_or_directory_anywhere_a_path_is_opened_is_refused_at_once_by_its_type() {
    // The settings file.
    let env = Sandbox::new();
    for kind in ["FIFO", "directory", "socket"] {
        let config = env.path(&format!("config-{kind}"));
        let _listener = replace_with(&config, kind);
        let o = ends(env.cmd(&["--config", config.to_str().unwrap(), "config"]));
        assert_exit_says(&o, 125, kind);
    }

    // A store object, its index sidecar and a record.
    for kind in ["FIFO", "directory", "socket"] {
        for part in ["object", "index", "record"] {
            let env = Sandbox::new();
            let (run_id, digest) = stored_run(&env);
            let object = env
                .store
                .join("objects")
                .join(&digest[..2])
                .join(&digest[2..]);
            let path = match part {
                "object" => object,
                "index" => object.with_extension("idx"),
                _ => env.store.join("records").join(format!("{run_id}.json")),
            };
            let _listener = replace_with(&path, kind);
            let uri = format!("artifact://{digest}");
            let what = format!("{kind} in place of the {part}");
            if part == "record" {
                let o = ends(env.cmd(&["show", &run_id]));
                assert_exit_says(&o, 125, kind);
                let o = ends(env.cmd(&["runs"]));
                assert_exit_says(&o, 125, kind);
            } else {
                for args in [&["read", &uri][..], &["read", &uri, "--all"]] {
                    let o = ends(env.cmd(args));
                    assert_exit_says(&o, 125, kind);
                }
                let o = ends(env.cmd(&["show", &run_id]));
                assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
                for answer in mcp_reads(&env, &digest) {
                    let text = answer.to_string();
                    assert!(text.contains(kind), "{what}: {text}");
                    assert!(!text.contains("one\\ntwo"), "{what}: {text}");
                }
            }
            let o = ends(env.cmd(&["verify"]));
            assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
            assert!(stdout(&o).contains(kind), "{what}: {}", stdout(&o));
        }
    }

    // --stdin: a FIFO, a pipe and a file are read; a directory or a socket is refused.
    let env = Sandbox::new();
    let fifo = env.path("in.fifo");
    mkfifo(&fifo);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::write(fifo, b"through the fifo\n").unwrap())
    };
    let o = ends(env.cmd(&["run", "--stdin", fifo.to_str().unwrap(), "cat"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("through the fifo"), "{}", stdout(&o));
    writer.join().unwrap();
    let mut piped = env.cmd(&["run", "--stdin", "/dev/stdin", "cat"]);
    piped.stdin(Stdio::piped());
    let mut child = piped.stdout(Stdio::piped()).spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"through a pipe\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("through a pipe"));
    for kind in ["directory", "socket"] {
        let path = env.path(&format!("stdin-{kind}"));
        let _listener = replace_with(&path, kind);
        let o = ends(env.cmd(&["run", "--stdin", path.to_str().unwrap(), "cat"]));
        assert_exit_says(&o, 125, kind);
    }

    // The transcript of compact: a FIFO is read like stdin; a directory, a socket or a
    // device is refused before anything is read.
    let fifo = env.path("t.fifo");
    mkfifo(&fifo);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::write(fifo, serde_json::to_vec(&transcript()).unwrap()))
    };
    let o = ends(env.cmd(&[
        "compact",
        fifo.to_str().unwrap(),
        "--summarizer",
        SUMMARIZER,
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "the summary\n");
    writer.join().unwrap().unwrap();
    for kind in ["directory", "socket"] {
        let path = env.path(&format!("t-{kind}"));
        let _listener = replace_with(&path, kind);
        let o = ends(env.cmd(&[
            "compact",
            path.to_str().unwrap(),
            "--summarizer",
            SUMMARIZER,
        ]));
        assert_exit_says(&o, 125, kind);
    }
    let o = ends(env.cmd(&["compact", "/dev/zero", "--summarizer", SUMMARIZER]));
    assert_exit_says(&o, 125, "character device");
}

/// `compact --output` into a directory that is missing, or is a file, is refused before the
/// summarizer runs (nothing is paid for a summary that cannot be written); one that cannot
/// be written to is refused too (checked only where permissions bind: not as root). When
/// the write still fails at the end (the directory went away meanwhile), the summary is
/// printed on stdout all the same, and the exit status says the write failed.
#[test]
fn compact_output_into_a_missing_or_unwritable_directory_is_refused_before_summarizing() {
    let env = Sandbox::new();
    let t = env.path("t.json");
    fs::write(&t, serde_json::to_vec(&transcript()).unwrap()).unwrap();
    let t_str = t.to_str().unwrap();
    let ran = env.path("summarizer-ran");
    let summarizer = format!(
        "touch '{}'; cat >/dev/null; echo the summary",
        ran.display()
    );
    let attempt = |output: &Path| {
        env.run(&[
            "compact",
            t_str,
            "--summarizer",
            &summarizer,
            "--output",
            output.to_str().unwrap(),
        ])
    };
    let o = attempt(&env.path("missing/out.json"));
    assert_exit_says(&o, 125, "does not exist");
    let o = attempt(&t.join("out.json"));
    assert_exit_says(&o, 125, "directory");
    let o = attempt(&env.path("missing/deeper/out.json"));
    assert_exit_says(&o, 125, "does not exist");
    let locked = env.path("locked");
    fs::create_dir(&locked).unwrap();
    fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    if fs::write(locked.join("probe"), b"").is_err() {
        let o = attempt(&locked.join("out.json"));
        assert_exit_says(&o, 125, "no file can be created");
    }
    assert!(
        !ran.exists(),
        "the summarizer ran for an output that cannot be written"
    );

    // The directory disappears while the summarizer runs: the summary is not lost.
    let doomed = env.path("doomed");
    fs::create_dir(&doomed).unwrap();
    let output = doomed.join("out.json");
    let o = env.run(&[
        "compact",
        t_str,
        "--summarizer",
        &format!(
            "rm -r '{}'; cat >/dev/null; echo the summary",
            doomed.display()
        ),
        "--output",
        output.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stdout(&o).contains("the summary"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("cannot write") && stderr(&o).contains("printed on stdout"),
        "{}",
        stderr(&o)
    );
}
