//! End-to-end scenarios of `agentrun interpret`: human and JSON output, stdin, retained
//! records, usage errors, and streaming on a live pipe.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, fixture, stdout};

/// `agentrun --store … interpret ARGS` (the store is never touched: `interpret` reads none).
fn cmd(env: &Sandbox, args: &[&str]) -> Command {
    env.cmd(&[&["interpret"][..], args].concat())
}

fn run(args: &[&str]) -> Output {
    cmd(&Sandbox::new(), args).output().unwrap()
}

#[test]
fn golden_claude_human_output() {
    let path = fixture("claude/agentrun-golden-synthetic.jsonl");
    let o = run(&["--harness", "claude", "--security", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stdout(&o),
        "session started\n\
         Read /work/src/lib.rs\n\
         commit and push\n\
         Model: root-opus\n\
         Grep fn main\n\
         Model: next-sonnet\n\
         Model: root-opus\n\
         observed models: child-haiku, false-parent, root-opus, next-sonnet, usage-only-model\n\
         status: succeeded\n\
         session: golden-session\n\
         summary: 3 turns, $0.12 at API prices\n\
         final message:\n\
         root answer\n"
    );
}

#[test]
fn json_output_is_one_object_per_line() {
    let path = fixture("codex/agentrun-cyber-synthetic.jsonl");
    let o = run(&[
        "--harness",
        "codex",
        "--security",
        "--requested-model",
        "gpt-5-codex",
        "--json",
        path.to_str().unwrap(),
    ]);
    // A refused session is not a success: exit 1, as `agent` exits.
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["progress"], "session started");
    assert_eq!(lines[1]["progress"], "Model: gpt-5-codex (requested)");
    let last = lines.last().unwrap();
    assert_eq!(last["harness"], "codex");
    assert_eq!(last["observed_models"], serde_json::json!([]));
    assert_eq!(last["outcome"]["status"]["status"], "refused");
    assert_eq!(last["outcome"]["status"]["category"], "codex-cyber");
    assert_eq!(last["outcome"]["session_id"], "codex-cyber-thread");
    assert_eq!(last["report"]["diagnostics"].as_array().unwrap().len(), 2);
}

#[test]
fn reads_stdin_with_dash() {
    let env = Sandbox::new();
    let out = cmd(&env, &["--harness", "opencode", "-"])
        .stdin(
            std::fs::File::open(fixture("opencode/takopi-opencode_stream_success.jsonl")).unwrap(),
        )
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = stdout(&out);
    assert!(s.starts_with("session started\n$ echo hello\n"), "{s}");
    assert!(s.contains("session: ses_494719016ffe85dkDMj0FPRbHK\n"));
    assert!(s.contains("warning: the OpenCode session export was not available"));
    assert!(s.ends_with("final message:\n```\nhello\n```\n"), "{s}");
}

#[test]
fn retained_record_replaces_stream_models() {
    let stream = fixture("opencode/takopi-opencode_stream_success.jsonl");
    let export = fixture("opencode/agentrun-session-export-synthetic.json");
    let o = run(&[
        "--harness",
        "opencode",
        "--retained",
        export.to_str().unwrap(),
        "--json",
        stream.to_str().unwrap(),
    ]);
    let s = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(s.lines().last().unwrap()).unwrap();
    assert_eq!(last["report"]["retained"], true);
    assert_eq!(
        last["report"]["models"],
        serde_json::json!(["anthropic/claude-sonnet-4-5"])
    );
}

#[test]
fn every_harness_name_decodes_its_fixture() {
    for (name, path, session) in [
        (
            "claude",
            "claude/morpheus-claude_stream.jsonl",
            "1ce8213d-f999-4838-8e26-c634d5150284",
        ),
        (
            "grok",
            "grok/task-mgr-framework-grok_stream.jsonl",
            "019e69d1-5079-7552-bd4c-0d4fe21dc6a3",
        ),
        (
            "agy",
            "antigravity/agentrun-stream-synthetic.jsonl",
            "agy-conv-1",
        ),
        (
            "antigravity",
            "antigravity/openagent-antigravity_print.jsonl",
            "938442f7-bca6-422b-b9d8-f8aa598de783",
        ),
        (
            "codex",
            "codex/claude-codes-hello_world.jsonl",
            "019c8140-6f07-7fb1-86f8-4813739c32bb",
        ),
        ("muse", "muse/agentrun-exec-synthetic.jsonl", "muse-sess-42"),
        (
            "opencode",
            "opencode/noldor-opencode-events.jsonl",
            "ses_09ec7fc10ffekAtgUWHv9M6Y0T",
        ),
    ] {
        let p = fixture(path);
        let o = run(&["--harness", name, p.to_str().unwrap()]);
        assert!(o.status.success(), "{name}");
        assert!(
            stdout(&o).contains(&format!("session: {session}\n")),
            "{name}: {}",
            stdout(&o)
        );
    }
}

#[test]
fn usage_and_input_errors_exit_125() {
    let o = run(&["--harness", "no-such-agent", "-"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown harness"));
    let o = run(&["--harness", "claude", "--requested-model", "m", "-"]);
    assert_eq!(
        o.status.code(),
        Some(125),
        "--requested-model needs --security"
    );
    let o = run(&["--harness", "claude", "/nonexistent/stream.jsonl"]);
    assert_eq!(o.status.code(), Some(125));
}

#[test]
fn malformed_input_is_survived_and_reported() {
    let env = Sandbox::new();
    let mut child = cmd(&env, &["--harness", "claude", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"\xff\xfe garbage\n[1,2]\n{\"type\":\"assistant\",\"mess\n")
        .unwrap();
    stdin.write_all(&vec![b'['; 1 << 20]).unwrap();
    stdin.write_all(b"\n{\"type\":\"new_thing\"}\r\n").unwrap();
    stdin
        .write_all(b"{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"still here\"}")
        .unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let s = stdout(&o);
    assert!(s.contains("final message:\nstill here\n"), "{s}");
    assert!(
        s.contains("warning: 5 unrecognized lines (unknown event types: new_thing)"),
        "{s}"
    );
}

#[test]
fn streams_progress_from_a_live_pipe_before_eof() {
    let env = Sandbox::new();
    let mut child = cmd(&env, &["--harness", "claude", "--security"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let timeout = Duration::from_secs(20);
    stdin
        .write_all(b"{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"live\"}\n")
        .unwrap();
    stdin.flush().unwrap();
    assert_eq!(rx.recv_timeout(timeout).unwrap(), "session started");
    stdin
        .write_all(b"{\"type\":\"assistant\",\"message\":{\"model\":\"live-model\",\"content\":[{\"type\":\"tool_use\",\"name\":\"Bash\",\"input\":{\"command\":\"git push\"}}]}}\n")
        .unwrap();
    stdin.flush().unwrap();
    assert_eq!(rx.recv_timeout(timeout).unwrap(), "push");
    assert_eq!(rx.recv_timeout(timeout).unwrap(), "Model: live-model");
    // Nothing else yet: the completion waits for EOF.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    stdin
        .write_all(b"{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"done live\"}\n")
        .unwrap();
    drop(stdin);
    let rest: Vec<String> = rx.iter().collect();
    reader.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest[0], "observed models: live-model");
    assert_eq!(rest.last().unwrap(), "done live");
}

fn mkfifo(path: &std::path::Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The output of `command`, or a failure (the child killed) when it has not ended after a
/// generous while: an open that waited on a FIFO would never end.
fn output_or_hang(mut command: Command) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("agentrun interpret waited on a FIFO");
        }
    }
}

/// A FIFO given as `--retained` (a retained record is a file at rest) is refused at once by
/// its type, before the stream is read; a FIFO given as the stream is read as stdin is.
#[test]
fn a_fifo_is_read_as_the_stream_but_refused_as_the_retained_record() {
    let env = Sandbox::new();
    let fifo = env.path("export.fifo");
    mkfifo(&fifo);
    let stream = fixture("opencode/takopi-opencode_stream_success.jsonl");
    let o = output_or_hang(cmd(
        &env,
        &[
            "--harness",
            "opencode",
            "--retained",
            fifo.to_str().unwrap(),
            stream.to_str().unwrap(),
        ],
    ));
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--retained") && err.contains("FIFO") && err.contains("not a regular file"),
        "{err}"
    );

    // The stream through a FIFO, written once the reader is there.
    let input = env.path("stream.fifo");
    mkfifo(&input);
    let writer = {
        let (input, stream) = (input.clone(), stream.clone());
        std::thread::spawn(move || {
            let bytes = std::fs::read(stream).unwrap();
            std::fs::write(input, bytes).unwrap();
        })
    };
    let o = output_or_hang(cmd(
        &env,
        &["--harness", "opencode", input.to_str().unwrap()],
    ));
    writer.join().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("session: "), "{}", stdout(&o));
}

/// Exit codes follow the interpreted session, as `agent`'s do: 0 for a session that
/// succeeded, 1 for a failed turn (human and JSON output alike).
#[test]
fn a_failed_session_exits_1_and_a_successful_one_0() {
    let failed = fixture("claude/claude-code-2.1.332-failure.jsonl");
    let ok = fixture("claude/agentrun-golden-synthetic.jsonl");
    for json in [false, true] {
        let mut args = vec!["--harness", "claude"];
        if json {
            args.push("--json");
        }
        let o = run(&[&args[..], &[failed.to_str().unwrap()]].concat());
        assert_eq!(o.status.code(), Some(1), "json {json}: {}", stdout(&o));
        if !json {
            assert!(stdout(&o).contains("status: turn failed"), "{}", stdout(&o));
        }
        let o = run(&[&args[..], &[ok.to_str().unwrap()]].concat());
        assert_eq!(o.status.code(), Some(0), "json {json}: {}", stdout(&o));
    }
}
