//! `agentrun mcp` spoken to in plain JSON-RPC over its stdio: the allow list against a
//! relative `PATH`, the payload bound of every rendered result, the stop when the client
//! disconnects, and the protocol answers to invalid params, duplicate request ids and
//! requests before `initialize`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/moto.rs"]
mod moto;

/// How long any answer may take on a busy machine: a failure, not a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

/// A server child with a line reader on its stdout.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Messages read while waiting for another one.
    stash: Vec<Value>,
}

/// The real program directories of this machine (no relative entry).
fn system_path() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    let mut dirs: Vec<&str> = path.split(':').filter(|d| d.starts_with('/')).collect();
    for d in ["/usr/bin", "/bin"] {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs.join(":")
}

fn server_command(store: &Path, path: &str, cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentrun"));
    c.arg("--store")
        .arg(store)
        .arg("mcp")
        .args(args)
        .env("PATH", path)
        .env_remove("AGENTRUN_CONFIG")
        .env("XDG_CONFIG_HOME", cwd.join("no-config"))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

impl Server {
    fn start(store: &Path, path: &str, cwd: &Path, args: &[&str]) -> Self {
        Server::spawn(server_command(store, path, cwd, args))
    }

    fn spawn(mut command: Command) -> Self {
        let mut child = command.spawn().expect("start agentrun mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server {
            child,
            stdin,
            lines,
            stash: Vec::new(),
        }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message from the server, `None` at end of output.
    fn next(&mut self, deadline: Instant) -> Option<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => Some(serde_json::from_str(&line).expect("a JSON line")),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("no message from the server in time"),
        }
    }

    /// The answer (result or error) to request `id`; notifications and other answers are
    /// kept for later.
    fn answer(&mut self, id: &Value) -> Value {
        if let Some(at) = self.stash.iter().position(|m| is_answer(m, id)) {
            return self.stash.remove(at);
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let message = self
                .next(deadline)
                .unwrap_or_else(|| panic!("the server ended before answering {id}"));
            if is_answer(&message, id) {
                return message;
            }
            self.stash.push(message);
        }
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(&id)
    }

    fn initialize(&mut self) {
        let answer = self.request(
            json!(0),
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "mcp_stdio test", "version": "1"}
            }),
        );
        assert!(answer.get("result").is_some(), "{answer}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: Value, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )
    }

    /// Closes stdin and collects every message written until the server exits.
    fn hang_up(&mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let deadline = Instant::now() + PATIENCE;
        let mut messages = std::mem::take(&mut self.stash);
        while let Some(message) = self.next(deadline) {
            messages.push(message);
        }
        messages
    }

    fn wait(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let output = wait_with_deadline(&mut self.child);
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        (output, stderr)
    }
}

impl Server {
    /// A server over a store in `dir`, on the system's PATH, initialized.
    fn initialized(dir: &Path, args: &[&str]) -> Self {
        let mut server = Server::start(&dir.join("store"), &system_path(), dir, args);
        server.initialize();
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_with_deadline(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_answer(message: &Value, id: &Value) -> bool {
    message.get("id") == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The text content of a tool result, all blocks joined.
fn text_of(answer: &Value) -> String {
    answer["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool result: {answer}"))
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

fn write_script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A work area: a store, a directory the model names as `cwd`, and the server's own
/// directory, each holding a fake `echo` (and `bin/echo`) that leaves a marker when run.
struct Area {
    dir: tempfile::TempDir,
}

impl Area {
    fn new() -> Self {
        let area = Area {
            dir: tempfile::tempdir().unwrap(),
        };
        for place in [area.work(), area.home()] {
            for fake in [place.join("echo"), place.join("bin/echo")] {
                write_script(
                    &fake,
                    &format!(
                        "echo hijacked > '{}'; echo HIJACKED",
                        area.marker().display()
                    ),
                );
            }
        }
        area
    }
    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }
    /// The directory the model asks to run in.
    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }
    /// The server's working directory.
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn marker(&self) -> PathBuf {
        self.dir.path().join("hijacked")
    }
}

// ---------------------------------------------------------------------------------------
// The allow list and a relative PATH.

/// Every kind of relative `PATH` entry (`.`, an empty entry anywhere, a relative directory):
/// an allowed name is never looked up in the directory the call names as `cwd`, nor in the
/// server's own directory; the real program runs.
#[test]
fn a_relative_path_entry_never_lets_cwd_choose_the_allowed_program() {
    let system = system_path();
    for path in [
        format!(".:{system}"),
        format!(":{system}"),
        format!("{system}:"),
        format!("{}::{system}", system.split(':').next().unwrap()),
        format!("bin:{system}"),
        format!("./bin:{system}"),
    ] {
        let area = Area::new();
        let mut server = Server::start(&area.store(), &path, &area.home(), &["--allow", "echo"]);
        server.initialize();
        let answer = server.call(
            json!(1),
            "run",
            json!({"command": ["echo", "real echo"], "cwd": area.work()}),
        );
        let text = text_of(&answer);
        assert!(
            text.contains("real echo") && !text.contains("HIJACKED"),
            "PATH={path}: {text}"
        );
        assert!(!area.marker().exists(), "PATH={path}: a fake echo ran");
    }
}

/// The `agent` tool runs the harness found at start-up too, not one in the call's `cwd`.
#[test]
fn an_agent_harness_is_not_chosen_by_cwd_either() {
    let area = Area::new();
    let real = fake_claude(area.dir.path(), "echo real-model", 10);
    for fake in [area.work().join("claude"), area.work().join("bin/claude")] {
        write_script(
            &fake,
            &format!("echo hijacked > '{}'", area.marker().display()),
        );
    }
    for path in [
        format!(".:{}:{}", real.display(), system_path()),
        format!("bin:{}:{}", real.display(), system_path()),
    ] {
        let mut server = Server::start(&area.store(), &path, &area.home(), &["--allow", "claude"]);
        server.initialize();
        let answer = server.call(
            json!(1),
            "agent",
            json!({"harness": "claude", "prompt": "hi", "cwd": area.work()}),
        );
        let text = text_of(&answer);
        assert!(text.contains("real-model"), "PATH={path}: {text}");
        assert!(!area.marker().exists(), "PATH={path}: a fake claude ran");
    }
}

/// The program's own children get no relative `PATH` entry either: an allowed `sh` that runs
/// `echo` by name from the call's `cwd` runs the real one.
#[test]
fn an_allowed_program_gets_a_path_without_relative_entries() {
    let area = Area::new();
    let path = format!(".:{}", system_path());
    let mut server = Server::start(&area.store(), &path, &area.home(), &["--allow", "sh"]);
    server.initialize();
    let answer = server.call(
        json!(1),
        "run",
        json!({
            "command": ["sh", "-c", "printf '%s\\n' \"$PATH\"; command -v echo"],
            "cwd": area.work()
        }),
    );
    let text = text_of(&answer);
    let child_path = text.lines().nth(1).unwrap_or_default();
    assert!(
        child_path.split(':').all(|d| d.starts_with('/')),
        "the child's PATH: {text}"
    );
    assert!(!area.marker().exists());
}

/// An allowed name that no absolute `PATH` entry holds does not stop the server: it starts
/// with a warning naming it, the other allowed programs run, and calls to that name (by
/// `run` or `agent`) are refused with the same explanation; the copy found through the
/// relative entry never runs, even from a `cwd` that has it.
#[test]
fn an_allowed_name_found_only_through_a_relative_entry_is_refused_with_a_warning() {
    let area = Area::new();
    let only = format!("echo only > '{}'", area.marker().display());
    for place in [area.home(), area.work()] {
        write_script(&place.join("bin/only-here"), &only);
        write_script(&place.join("bin/claude"), &only);
    }
    let path = format!("bin:{}", system_path());
    let mut server = Server::start(
        &area.store(),
        &path,
        &area.home(),
        &[
            "--allow",
            "echo",
            "--allow",
            "only-here",
            "--allow",
            "claude",
        ],
    );
    server.initialize();
    let answer = server.call(
        json!(1),
        "run",
        json!({"command": ["only-here"], "cwd": area.work()}),
    );
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    let text = text_of(&answer);
    assert!(
        text.contains("only-here") && text.contains("PATH") && text.contains("not found"),
        "{text}"
    );
    let answer = server.call(
        json!(2),
        "agent",
        json!({"harness": "claude", "prompt": "hi", "cwd": area.work()}),
    );
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    assert!(text_of(&answer).contains("claude"), "{answer}");
    let answer = server.call(json!(3), "run", json!({"command": ["echo", "fine"]}));
    assert!(text_of(&answer).contains("fine"), "{answer}");
    assert!(
        !area.marker().exists(),
        "a relative PATH entry was searched"
    );
    let (status, stderr) = server.wait();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: only-here") && stderr.contains("warning: claude"),
        "{stderr}"
    );
}

/// An allowed relative path (`./tool`, `bin/tool`) would be looked up from the call's `cwd`:
/// refused at start-up. An absolute path is run as it is.
#[test]
fn allowed_paths_must_be_absolute() {
    let area = Area::new();
    for relative in ["./echo", "bin/echo"] {
        let server = Server::start(
            &area.store(),
            &system_path(),
            &area.home(),
            &["--allow", relative],
        );
        let (status, stderr) = server.wait();
        assert!(!status.success(), "{relative}: {stderr}");
        assert!(stderr.contains(relative), "{stderr}");
    }
}

// ---------------------------------------------------------------------------------------
// The payload bound.

/// A fake `claude` on PATH that prints a Claude Code stream-json turn whose assistant
/// messages name the models `models` (a shell expression printing one name per line).
fn fake_claude(dir: &Path, models: &str, diagnostic_bytes: usize) -> PathBuf {
    fake_claude_ending(dir, models, diagnostic_bytes, false)
}

/// As [`fake_claude`], the turn ending with a success whose final message is `bytes` long
/// when `success`, else with an error whose diagnostic is.
fn fake_claude_ending(dir: &Path, models: &str, diagnostic_bytes: usize, success: bool) -> PathBuf {
    let (subtype, is_error) = if success {
        ("success", "false")
    } else {
        ("error_during_execution", "true")
    };
    let bin = dir.join("fakebin");
    let script = format!(
        r#"cat >/dev/null
printf '%s\n' '{{"type":"system","subtype":"init","session_id":"00000000-0000-4000-8000-000000000009","model":"m0"}}'
{{ {models}; }} | while IFS= read -r model; do
  printf '{{"type":"assistant","message":{{"content":[{{"text":"working","type":"text"}}],"id":"msg_1","model":"%s","role":"assistant","type":"message"}},"session_id":"00000000-0000-4000-8000-000000000009"}}\n' "$model"
done
diag=$(head -c {diagnostic_bytes} /dev/zero | tr '\0' d)
printf '{{"type":"result","subtype":"{subtype}","is_error":{is_error},"result":"%s","session_id":"00000000-0000-4000-8000-000000000009","num_turns":1,"total_cost_usd":0.01}}\n' "$diag"
"#
    );
    write_script(&bin.join("claude"), &script);
    bin
}

fn assert_bounded(text: &str, bound: usize, what: &str) {
    assert!(
        text.len() <= bound,
        "{what}: a {}-byte result under a {bound}-byte bound: {}...",
        text.len(),
        &text[..text.len().min(600)]
    );
}

/// The `agent` result stays within --max-payload-bytes whatever the harness reports: one
/// 5 MB model name, 20 000 model names, a 1 MB diagnostic.
#[test]
fn an_agent_result_stays_within_the_payload_bound() {
    let cases = [
        ("head -c 5000000 /dev/zero | tr '\\0' m; echo", 100),
        ("seq 1 20000 | sed 's/^/model-/'", 100),
        ("echo m1", 1_000_000),
    ];
    for (models, diagnostic) in cases {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake_claude(dir.path(), models, diagnostic);
        let path = format!("{}:{}", bin.display(), system_path());
        let mut server = Server::start(
            &dir.path().join("store"),
            &path,
            dir.path(),
            &["--allow", "claude", "--max-payload-bytes", "8704"],
        );
        server.initialize();
        let answer = server.call(
            json!(1),
            "agent",
            json!({"harness": "claude", "prompt": "hi", "cwd": dir.path()}),
        );
        let text = text_of(&answer);
        assert_bounded(&text, 8704, models);
        assert!(text.contains("[Agent claude"), "{text}");
        assert!(text.contains("[Models: m"), "the models are named: {text}");
        assert!(text.contains("read(filePath=\"artifact://"), "{text}");
    }
}

/// A `run` result with full previews and a clean answer at --max-bytes stays within
/// --max-payload-bytes, and still says where the answer is.
#[test]
fn a_run_result_with_a_clean_answer_stays_within_the_payload_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        &dir.path().join("store"),
        &system_path(),
        dir.path(),
        &[
            "--allow",
            "sh",
            "--max-payload-bytes",
            "8704",
            "--max-bytes",
            "8000",
        ],
    );
    server.initialize();
    let script = "seq 1 100000; seq 1 100000 >&2; \
                  head -c 7990 /dev/zero | tr '\\0' a > \"$AGENTRUN_RESULT_SINK\"";
    let answer = server.call(
        json!(1),
        "run",
        json!({"command": ["sh", "-c", script], "sink": true}),
    );
    let text = text_of(&answer);
    assert_bounded(&text, 8704, "run with a clean answer");
    assert!(text.contains("Clean answer"), "{text}");
    assert!(text.contains("[Exit code 0"), "{text}");
    // An error result naming a huge program is bounded too.
    let long = "p".repeat(100_000);
    let answer = server.call(json!(2), "run", json!({"command": [long]}));
    assert_bounded(&text_of(&answer), 8704, "a refused huge program name");
    // So are protocol errors that echo what was sent.
    for (id, method, params) in [
        (
            3,
            "resources/read",
            json!({"uri": format!("artifact://{long}")}),
        ),
        (4, "tools/call", json!({"name": long, "arguments": {}})),
    ] {
        let answer = server.request(json!(id), method, params);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_bounded(message, 8704, method);
    }
}

/// With --structured-content, the structured content is bounded by --max-payload-bytes too
/// (some clients show it instead of the text): long strings are cut, and when that is not
/// enough the big fields are dropped and named, the artifact URIs kept.
#[test]
fn structured_content_stays_within_the_payload_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_claude_ending(dir.path(), "seq 1 20000 | sed 's/^/model-/'", 100_000, true);
    let path = format!("{}:{}", bin.display(), system_path());
    let mut server = Server::start(
        &dir.path().join("store"),
        &path,
        dir.path(),
        &[
            "--allow",
            "claude",
            "--allow",
            "sh",
            "--structured-content",
            "--max-payload-bytes",
            "8704",
        ],
    );
    server.initialize();
    let answer = server.call(
        json!(1),
        "agent",
        json!({"harness": "claude", "prompt": "hi", "cwd": dir.path()}),
    );
    assert_bounded(&text_of(&answer), 8704, "agent text");
    let structured = &answer["result"]["structuredContent"];
    let json = structured.to_string();
    assert_bounded(&json, 8704, "agent structured content");
    assert!(json.contains("\"artifact://"), "the URIs are kept: {json}");
    assert!(
        structured.get("strings_cut_at").is_some() || structured.get("omitted_fields").is_some(),
        "says what was cut: {json}"
    );
    assert_eq!(
        structured["observed_models_omitted"],
        json!(20_000 - 32),
        "{json}"
    );

    let script = "seq 1 100000; seq 1 100000 >&2; \
                  head -c 50000 /dev/zero | tr '\\0' a > \"$AGENTRUN_RESULT_SINK\"";
    let answer = server.call(
        json!(2),
        "run",
        json!({"command": ["sh", "-c", script], "sink": true}),
    );
    assert_bounded(&text_of(&answer), 8704, "run text");
    let structured = &answer["result"]["structuredContent"];
    let json = structured.to_string();
    assert_bounded(&json, 8704, "run structured content");
    assert!(json.contains("\"artifact://"), "the URIs are kept: {json}");
    assert!(
        structured.get("strings_cut_at").is_some() || structured.get("omitted_fields").is_some(),
        "says what was cut: {json}"
    );
    assert!(
        structured["duration_ms"].is_number(),
        "counts are kept: {json}"
    );
}

/// The `agent` result names the failure kind in its status line and its structured content.
#[test]
fn an_agent_result_names_the_failure_kind() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("fakebin");
    // Claude Code's answer to a rate-limited request, reported as a "success", exit 1.
    write_script(
        &bin.join("claude"),
        r#"cat >/dev/null
printf '%s\n' '{"type":"system","subtype":"init","session_id":"00000000-0000-4000-8000-000000000009","model":"m0"}'
printf '%s\n' '{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":1146,"error_status":429,"error":"rate_limit"}'
printf '%s\n' '{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":429,"result":"API Error: Request rejected (429)","session_id":"00000000-0000-4000-8000-000000000009","num_turns":1,"total_cost_usd":0}'
exit 1"#,
    );
    let path = format!("{}:{}", bin.display(), system_path());
    let mut server = Server::start(
        &dir.path().join("store"),
        &path,
        dir.path(),
        &["--allow", "claude", "--structured-content"],
    );
    server.initialize();
    let answer = server.call(
        json!(1),
        "agent",
        json!({"harness": "claude", "prompt": "hi", "cwd": dir.path()}),
    );
    let text = text_of(&answer);
    assert!(
        text.contains("[Agent claude failed (rate_limited): API Error: Request rejected (429)"),
        "{text}"
    );
    let structured = &answer["result"]["structuredContent"];
    assert_eq!(
        structured["outcome"]["failure_kind"], "rate_limited",
        "{structured}"
    );
    assert_eq!(
        structured["outcome"]["retry_after"]["delay_ms"], 1146,
        "{structured}"
    );
}

// ---------------------------------------------------------------------------------------
// A client disconnect.

/// Closing stdin stops an in-flight run, as a cancel does: the program gets its stop signal
/// (its TERM trap runs), and its result is still written before the server exits. That the
/// stop comes at once, before the transport waits for answers, is proven in virtual time by
/// the transport's `end_of_input_calls_the_stop_hook_before_waiting_for_answers`.
#[test]
fn a_disconnect_stops_in_flight_runs_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (started, term) = (dir.path().join("started"), dir.path().join("term"));
    let script = format!(
        "trap 'echo term > \"{}\"; exit 0' TERM; echo started > \"{}\"; while :; do sleep 1; done",
        term.display(),
        started.display()
    );
    let mut server = Server::start(
        &dir.path().join("store"),
        &system_path(),
        dir.path(),
        &["--allow", "sh"],
    );
    server.initialize();
    server.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": ["sh", "-c", script]}}}));
    wait_for_file(&started);
    let messages = server.hang_up();
    // The answer can only be written if the run was stopped while the connection was still
    // being drained, not after the server gave up waiting for its calls.
    let answer = messages
        .iter()
        .find(|m| is_answer(m, &json!(5)))
        .unwrap_or_else(|| panic!("the in-flight call got no answer: {messages:?}"));
    assert!(text_of(answer).contains("[Cancelled"), "{answer}");
    assert!(term.exists(), "the program never got its stop signal");
    let (status, stderr) = server.wait();
    assert!(status.success(), "{stderr}");
}

/// A program whose cleanup outlasts its grace (it is SIGKILLed at the end of it) still has
/// its result written after a disconnect: the server keeps the session open until the
/// stopped calls are answered.
#[test]
fn a_disconnect_still_answers_a_call_whose_stop_takes_the_whole_grace() {
    let dir = tempfile::tempdir().unwrap();
    let (started, term) = (dir.path().join("started"), dir.path().join("term"));
    let script = format!(
        "trap 'echo > \"{}\"; sleep 120; exit 0' TERM; echo > \"{}\"; while :; do sleep 1; done",
        term.display(),
        started.display()
    );
    let mut server = Server::start(
        &dir.path().join("store"),
        &system_path(),
        dir.path(),
        &["--allow", "sh"],
    );
    server.initialize();
    server.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": ["sh", "-c", script]}}}));
    wait_for_file(&started);
    let messages = server.hang_up();
    let answer = messages
        .iter()
        .find(|m| is_answer(m, &json!(6)))
        .unwrap_or_else(|| panic!("the stopped call got no answer: {messages:?}"));
    assert!(text_of(answer).contains("[Cancelled"), "{answer}");
    assert!(term.exists(), "the program never got its stop signal");
}

// ---------------------------------------------------------------------------------------
// Protocol answers.

/// Invalid params of known methods get -32602, never -32601 "method not found".
#[test]
fn invalid_params_get_invalid_params_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("store"), &system_path(), dir.path(), &[]);
    server.initialize();
    let cases = [
        ("tools/call", json!({})),
        ("tools/call", json!({"name": "run", "arguments": "x"})),
        ("tools/call", json!(5)),
        ("resources/read", json!({"uri": 5})),
        ("resources/read", json!({})),
        ("initialize", json!({"protocolVersion": 5})),
    ];
    for (i, (method, params)) in cases.into_iter().enumerate() {
        let id = json!(100 + i);
        let answer = server.request(id.clone(), method, params.clone());
        assert_eq!(
            answer["error"]["code"], -32602,
            "{method} {params}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(method), "{method}: {message}");
    }
    // An unknown method is still -32601.
    let answer = server.request(json!(200), "tools/frobnicate", json!({}));
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
}

/// A request before `initialize` is told the session is not initialized; `ping` is
/// answered; the session then starts normally.
#[test]
fn a_request_before_initialize_is_told_to_initialize() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("store"), &system_path(), dir.path(), &[]);
    let answer = server.request(json!(1), "tools/list", json!({}));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not initialized") && message.contains("initialize"),
        "{answer}"
    );
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let answer = server.request(json!(2), "ping", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
    // A ping does not start the session.
    let answer = server.request(json!(4), "resources/templates/list", json!({}));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not initialized"), "{answer}");
    server.initialize();
    let answer = server.request(json!(3), "tools/list", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
}

/// A notification before `initialize` is dropped (and logged), not the end of the server: the
/// session then starts normally.
#[test]
fn a_notification_before_initialize_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("store"), &system_path(), dir.path(), &[]);
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    server.initialize();
    let answer = server.request(json!(1), "tools/list", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    let (status, stderr) = server.wait();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("notifications/initialized") && stderr.contains("before `initialize`"),
        "{stderr}"
    );
}

/// A script that runs until `go` exists, then prints `what`.
fn waiter(go: &Path, what: &str) -> Value {
    json!([
        "sh",
        "-c",
        format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; echo {what}",
            go.display()
        )
    ])
}

/// A request reusing the id of one still in flight gets an error naming the id, and the
/// first request keeps its answer; for string and integer ids alike; an id whose request
/// was answered, or cancelled, may be used again and its answer is the new request's.
#[test]
fn a_duplicate_request_id_is_refused_and_loses_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        &dir.path().join("store"),
        &system_path(),
        dir.path(),
        &["--allow", "sh"],
    );
    server.initialize();
    for (n, id) in [json!(7), json!("seven"), json!(-3)]
        .into_iter()
        .enumerate()
    {
        let go = dir.path().join(format!("go{n}"));
        server.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "run", "arguments": {"command": waiter(&go, "first")}}}));
        let duplicate = server.call(
            id.clone(),
            "run",
            json!({"command": ["sh", "-c", "echo second"]}),
        );
        assert_eq!(duplicate["error"]["code"], -32600, "{duplicate}");
        let message = duplicate["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("duplicate") && message.contains(&id.to_string()),
            "{message}"
        );
        std::fs::write(&go, "").unwrap();
        let first = server.answer(&id);
        assert!(text_of(&first).contains("first"), "{first}");
        // Answered: the id is free again.
        let again = server.call(
            id.clone(),
            "run",
            json!({"command": ["sh", "-c", "echo again"]}),
        );
        assert!(text_of(&again).contains("again"), "{again}");
    }
    // A cancelled request's id may be used again at once: the answer to it is the new
    // request's, even when the cancelled run ends while the new one is in flight.
    let (started, stopped) = (
        dir.path().join("old-started"),
        dir.path().join("old-stopped"),
    );
    let old = format!(
        "trap 'echo > \"{}\"; exit 0' TERM; echo > \"{}\"; while :; do sleep 1; done",
        stopped.display(),
        started.display()
    );
    server.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": ["sh", "-c", old]}}}));
    wait_for_file(&started);
    server.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9, "reason": "test"}}),
    );
    let go = dir.path().join("go-new");
    server.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": waiter(&go, "new")}}}));
    wait_for_file(&stopped);
    std::fs::write(&go, "").unwrap();
    let answer = server.answer(&json!(9));
    let text = text_of(&answer);
    assert!(
        text.contains("new") && !text.contains("[Cancelled"),
        "{answer}"
    );
}

/// `compact` with the allowed harness found at start-up: the harness reads the summarizer
/// input on stdin and its final message is the summary; a summary over the preview bound is
/// retained and hinted at, and text and structured content stay within --max-payload-bytes.
/// A summarizer program that is not allowed is refused before anything runs.
#[test]
fn compact_with_a_harness_stays_within_the_payload_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_claude_ending(dir.path(), "echo m1", 50_000, true);
    let path = format!("{}:{}", bin.display(), system_path());
    let transcript = json!({"messages": [
        {"role": "user", "content": "Why does the build fail?"},
        {"role": "assistant", "content": "A fixture is missing."}
    ]});
    std::fs::write(dir.path().join("t.json"), transcript.to_string()).unwrap();
    let mut server = Server::start(
        &dir.path().join("store"),
        &path,
        dir.path(),
        &[
            "--allow",
            "claude",
            "--structured-content",
            "--max-payload-bytes",
            "8704",
        ],
    );
    server.initialize();
    let tools = server.request(json!(1), "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"compact"), "{names:?}");
    // Relative to the server's working directory.
    let answer = server.call(
        json!(2),
        "compact",
        json!({"transcriptPath": "t.json", "harness": "claude", "model": "haiku"}),
    );
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let text = text_of(&answer);
    assert_bounded(&text, 8704, "compact text");
    assert!(text.starts_with("[Compaction succeeded]"), "{text}");
    assert!(text.contains("[first attempt: "), "{text}");
    assert!(text.contains("Summary, over the preview bound"), "{text}");
    assert!(text.contains("read(filePath=\"artifact://"), "{text}");
    let structured = answer["result"]["structuredContent"].to_string();
    assert_bounded(&structured, 8704, "compact structured content");
    assert!(
        structured.contains("\"summary_artifact\":\"artifact://"),
        "{structured}"
    );

    let refused = server.call(
        json!(3),
        "compact",
        json!({"transcriptPath": "t.json", "summarizer": ["sh", "-c", "echo summary"]}),
    );
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    assert!(
        text_of(&refused).contains("`sh` is not allowed"),
        "{refused}"
    );
}

/// A line longer than a page: the run's hint continues at the first byte not shown, the read
/// it names works, and `resources/read` returns the first 2 MiB with metadata naming the byte
/// continuation (it used to be an internal error).
#[test]
fn an_over_long_first_line_is_continued_by_byte_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::initialized(dir.path(), &["--allow", "sh"]);
    let script = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo after";
    let answer = server.call(json!(1), "run", json!({"command": ["sh", "-c", script]}));
    let text = text_of(&answer);
    let hint = text
        .lines()
        .find(|l| l.starts_with("[Truncated. Read more: "))
        .unwrap_or_else(|| panic!("no hint in {:?}", &text[text.len().saturating_sub(300)..]));
    let (uri, byte) = hint
        .split_once("read(filePath=\"")
        .and_then(|(_, rest)| rest.split_once("\", byteOffset="))
        .unwrap_or_else(|| panic!("not a byte hint: {hint}"));
    let byte: u64 = byte.trim_end_matches(")]").parse().unwrap();
    assert!(byte > 0, "{hint}");
    let page = server.call(
        json!(2),
        "read",
        json!({"filePath": uri, "byteOffset": byte}),
    );
    assert!(page["result"]["isError"] != json!(true), "{page}");
    let body = page["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        !body.is_empty() && body.bytes().all(|b| b == b'x'),
        "{page:.300}"
    );

    let resource = server.request(json!(3), "resources/read", json!({"uri": uri}));
    let contents = &resource["result"]["contents"][0];
    assert_eq!(
        contents["text"].as_str().map(str::len),
        Some(2 << 20),
        "{:.300}",
        resource.to_string()
    );
    let meta = &contents["_meta"];
    assert_eq!(meta["next"], json!({"byteOffset": 2 << 20}), "{meta}");
    assert_eq!(meta["totalBytes"], json!(3_000_007), "{meta}");
    let continuation = meta["continuation"].as_str().unwrap();
    assert!(
        continuation.contains(&format!("byteOffset={}", 2 << 20)),
        "{continuation}"
    );
}

/// A program that cannot start gets the code `agentrun run` exits with: 127 for a name too
/// long to name any file, 126 for a file that cannot be executed.
#[test]
fn a_program_that_cannot_start_is_told_with_the_shell_code() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::initialized(dir.path(), &["--allow-all"]);
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    for (id, program, code) in [
        (1, "a".repeat(5000), 127),
        (2, format!("/{}", "a".repeat(5000)), 127),
        (3, script.display().to_string(), 126),
    ] {
        let answer = server.call(json!(id), "run", json!({"command": [program]}));
        assert_eq!(answer["result"]["isError"], json!(true), "{answer:.300}");
        let text = text_of(&answer);
        assert!(
            text.contains(&format!(
                "[Not started: exit code {code}, as a shell gives it]"
            )),
            "{text:.600}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Completion and logging.

/// `completion/complete` completes `{digest}` from the store's records (newest first, by
/// prefix) and `{stream}` from the manifest named in the context; an unknown reference or
/// argument gets empty values.
#[test]
fn completion_completes_digests_and_streams_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut server =
        Server::initialized(dir.path(), &["--allow", "printf", "--structured-content"]);
    let mut manifests = Vec::new();
    for (i, text) in ["one", "two"].iter().enumerate() {
        let answer = server.call(json!(10 + i), "run", json!({"command": ["printf", text]}));
        let uri = answer["result"]["structuredContent"]["artifacts"]["manifest"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned();
        manifests.push(uri.trim_start_matches("artifact://").to_owned());
    }
    let complete = |server: &mut Server, id: u64, params: Value| {
        let answer = server.request(json!(id), "completion/complete", params);
        answer["result"]["completion"]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let digests = complete(
        &mut server,
        20,
        json!({"ref": {"type": "ref/resource", "uri": "artifact://{digest}"},
               "argument": {"name": "digest", "value": ""}}),
    );
    assert_eq!(
        digests,
        vec![manifests[1].clone(), manifests[0].clone()],
        "newest first"
    );
    let prefix = &manifests[0][..12];
    let digests = complete(
        &mut server,
        21,
        json!({"ref": {"type": "ref/resource", "uri": "artifact://{digest}/{stream}"},
               "argument": {"name": "digest", "value": prefix}}),
    );
    assert_eq!(digests, vec![manifests[0].clone()]);
    let streams = complete(
        &mut server,
        22,
        json!({"ref": {"type": "ref/resource", "uri": "artifact://{digest}/{stream}"},
               "argument": {"name": "stream", "value": "std"},
               "context": {"arguments": {"digest": manifests[0]}}}),
    );
    assert_eq!(streams, vec!["stdout", "stderr"]);
    let streams = complete(
        &mut server,
        23,
        json!({"ref": {"type": "ref/resource", "uri": "artifact://{digest}/{stream}"},
               "argument": {"name": "stream", "value": "stde"}}),
    );
    assert_eq!(streams, vec!["stderr"]);
    for (id, params) in [
        (
            24,
            json!({"ref": {"type": "ref/prompt", "name": "nope"},
                    "argument": {"name": "x", "value": ""}}),
        ),
        (
            25,
            json!({"ref": {"type": "ref/resource", "uri": "file:///{path}"},
                    "argument": {"name": "path", "value": ""}}),
        ),
        (
            26,
            json!({"ref": {"type": "ref/resource", "uri": "artifact://{digest}"},
                    "argument": {"name": "stream", "value": ""}}),
        ),
    ] {
        assert!(complete(&mut server, id, params).is_empty());
    }
}

/// Before `logging/setLevel` no log message is sent; after it, the start-up warnings and
/// each error result come as `notifications/message` at or above the level.
#[test]
fn logging_sends_diagnostics_at_the_level_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::initialized(dir.path(), &["--allow", "no-such-program-here"]);
    let refused = server.call(json!(1), "run", json!({"command": ["ls"]}));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let ping = server.request(json!(2), "ping", json!({}));
    assert!(ping.get("result").is_some());
    let logs = |stash: &[Value]| {
        stash
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(logs(&server.stash).is_empty(), "{:?}", server.stash);
    let set = server.request(json!(3), "logging/setLevel", json!({"level": "error"}));
    assert!(set.get("result").is_some(), "{set}");
    let refused = server.call(json!(4), "run", json!({"command": ["ls"]}));
    assert_eq!(refused["result"]["isError"], true);
    assert!(
        logs(&server.stash).is_empty(),
        "warnings are below error: {:?}",
        server.stash
    );
    let set = server.request(json!(5), "logging/setLevel", json!({"level": "warning"}));
    assert!(set.get("result").is_some(), "{set}");
    let refused = server.call(json!(6), "run", json!({"command": ["ls"]}));
    assert_eq!(refused["result"]["isError"], true);
    // The log of an error result may reach the client after the result: everything the
    // server writes until it exits.
    let sent = logs(&server.hang_up());
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0]["params"]["level"], "warning");
    assert_eq!(sent[0]["params"]["logger"], "agentrun");
    assert!(
        sent[0]["params"]["data"]
            .as_str()
            .unwrap()
            .contains("no-such-program-here is allowed but cannot run"),
        "{sent:?}"
    );
    assert!(
        sent[1]["params"]["data"]
            .as_str()
            .unwrap()
            .starts_with("tool run answered with an error"),
        "{sent:?}"
    );
}

/// An orchestrator's server on a shared store (`--store s3://…` on a real S3-API server)
/// pages what a worker with another local home captured into the same bucket: a deep `read`
/// page and `resources/read` of the artifact return exactly the stored bytes.
#[test]
fn the_server_on_a_bucket_pages_what_another_machine_captured() {
    let moto = moto::Moto::start();
    moto.create_bucket("fleet");
    let url = "s3://fleet/agentrun";
    let dir = tempfile::tempdir().unwrap();
    let (worker, orchestrator) = (dir.path().join("worker"), dir.path().join("orchestrator"));
    for home in [&worker, &orchestrator] {
        std::fs::create_dir_all(home.join("no-config")).unwrap();
    }
    let machine = |home: &Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentrun"));
        c.env_clear()
            .env("PATH", system_path())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("no-config"))
            .env("AGENTRUN_HOME", home.join("spool"))
            .current_dir(home);
        moto.configure(&mut c);
        c
    };
    let run = machine(&worker)
        .args(["--store", url, "run", "--json", "--", "seq", "1", "200000"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let record: Value = serde_json::from_slice(&run.stdout).unwrap();
    let uri = record["artifacts"]["stdout"].as_str().unwrap().to_owned();

    let mut command = machine(&orchestrator);
    command
        .args(["--store", url, "mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut server = Server::spawn(command);
    server.initialize();
    let page = server.call(
        json!(1),
        "read",
        json!({"filePath": uri, "offset": 150_000, "limit": 2000}),
    );
    assert!(page["result"]["isError"] != json!(true), "{page:.600}");
    let expected: String = (150_001..=152_000).map(|i| format!("{i}\n")).collect();
    assert!(
        page["result"]["content"][0]["text"].as_str() == Some(expected.as_str()),
        "{:.600}",
        page.to_string()
    );
    assert_eq!(
        page["result"]["content"][1]["text"].as_str().unwrap(),
        format!(
            "[Lines 150000-151999 of 200000. Read more: read(filePath=\"{uri}\", offset=152000)]"
        )
    );

    let resource = server.request(json!(2), "resources/read", json!({"uri": uri}));
    let contents = &resource["result"]["contents"][0];
    let first: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    assert!(
        contents["text"].as_str() == Some(first.as_str()),
        "{:.600}",
        resource.to_string()
    );
    assert_eq!(
        contents["_meta"]["totalLines"],
        json!(200_000),
        "{contents:.300}"
    );
}
