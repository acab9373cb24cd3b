//! `agentrun mcp` inside the real Claude Code CLI (installed by
//! `scripts/install-agent-clis.sh`), configured with `--mcp-config`, against the scripted
//! Anthropic server: the model calls `mcp__agentrun__run` on a command with a large output,
//! then `mcp__agentrun__read` with the offset from the hint. What the CLI sends back to the
//! model server must hold the bounded preview, the hint, and then the exact next page.
//!
//! And `agentrun mcp proxy` in front of the official MCP filesystem server, registered with
//! `claude mcp add` in the private home: a file far over Claude Code's MCP output limit comes
//! back to the model as the bounded preview with a hint, and the proxy's `read` pages on from
//! it with the file's exact bytes (beside the same call without the proxy, of which Claude
//! Code sends the model nothing).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use agentrun_tests::agent_clis::{self, AgentCli};
use agentrun_tests::model_server::{Api, ModelServer, Reply, Request};
use serde_json::{Value, json};

#[path = "mcp/python.rs"]
mod python_client;

#[path = "mcp/filesystem.rs"]
mod filesystem;

/// The `read(filePath="…", offset=N)` hint in a tool result: (URI, offset).
fn hint(text: &str) -> Option<(String, u64)> {
    let start = text.find("[Truncated. Read more: read(filePath=\"")?;
    let rest = &text[start + "[Truncated. Read more: read(filePath=\"".len()..];
    let (uri, rest) = rest.split_once("\", offset=")?;
    let (offset, _) = rest.split_once(")]")?;
    Some((uri.to_owned(), offset.parse().ok()?))
}

/// The output of the last tool result in `request`.
fn last_tool_output(request: &Request) -> String {
    request
        .tool_results()
        .last()
        .map(|r| r.output.clone())
        .unwrap_or_default()
}

/// A `read` result as the model got it: exactly `lines`, then `continuation` in what follows.
fn assert_next_page(page: &str, lines: &str, continuation: &str) {
    assert!(
        page.starts_with(lines),
        "the next page, exactly: {}",
        &page[..page.len().min(300)]
    );
    assert!(
        page[lines.len()..].contains(continuation),
        "the continuation line: {}",
        &page[lines.len()..]
    );
}

/// `seq`'s lines `from..=to`, each with its newline.
fn seq_lines(from: u64, to: u64) -> String {
    (from..=to).map(|n| format!("{n}\n")).collect()
}

fn write_mcp_config(path: &Path, store: &Path) {
    let config = json!({
        "mcpServers": {
            "agentrun": {
                "command": env!("CARGO_BIN_EXE_agentrun"),
                "args": ["--store", store, "mcp", "--allow", "seq"]
            }
        }
    });
    std::fs::write(path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
}

#[test]
fn claude_code_pages_a_large_output_through_the_hint() {
    let dir = tempfile::tempdir().unwrap();
    let (home, work, store) = (
        dir.path().join("home"),
        dir.path().join("work"),
        dir.path().join("store"),
    );
    std::fs::create_dir_all(&work).unwrap();
    let config = dir.path().join("mcp.json");
    write_mcp_config(&config, &store);

    // The model: run seq, then read from the hint it got back, then finish.
    let followed: Arc<Mutex<Option<(String, u64)>>> = Arc::default();
    let script = {
        let followed = followed.clone();
        move |request: &Request| match request.model_index {
            Some(0) => Reply::tool_call(
                "mcp__agentrun__run",
                json!({"command": ["seq", "1", "100000"]}),
            ),
            Some(1) => match hint(&last_tool_output(request)) {
                Some((uri, offset)) => {
                    *followed.lock().unwrap() = Some((uri.clone(), offset));
                    Reply::tool_call(
                        "mcp__agentrun__read",
                        json!({"filePath": uri, "offset": offset}),
                    )
                }
                None => Reply::text("no hint in the run result"),
            },
            _ => Reply::text("read it all"),
        }
    };
    let server = ModelServer::start(Api::AnthropicMessages, script).unwrap();

    let output = Command::new(agent_clis::executable(AgentCli::Claude))
        .args(["-p", "--output-format", "stream-json", "--verbose"])
        .arg("--mcp-config")
        .arg(&config)
        .args(["--strict-mcp-config", "--allowedTools"])
        .arg("mcp__agentrun__run,mcp__agentrun__read")
        .args([
            "--",
            "count to a hundred thousand and read past the preview",
        ])
        .env_clear()
        .envs(agent_clis::claude_env(&home, &server).unwrap())
        .current_dir(&work)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "result")
        .unwrap_or_else(|| panic!("no result event:\n{stdout}\n{stderr}"));
    assert_eq!(result["result"], "read it all", "{stdout}\n{stderr}");

    let requests = server.model_requests();
    assert_eq!(requests.len(), 3, "run, read, done: {stdout}");

    // What the real CLI sent back for `run`: the bounded preview, then the hint.
    let run_result = last_tool_output(&requests[1]);
    assert!(
        run_result.starts_with(&format!("[stdout]\n{}", seq_lines(1, 2000))),
        "the preview is the first 2000 lines: {}",
        &run_result[..run_result.len().min(300)]
    );
    let (uri, offset) = followed
        .lock()
        .unwrap()
        .clone()
        .expect("the model got a hint");
    assert_eq!(offset, 2000);
    assert!(
        uri.starts_with("artifact://") && uri.ends_with("/stdout"),
        "{uri}"
    );
    assert!(
        run_result.contains(&format!(
            "{}[Truncated. Read more: read(filePath=\"{uri}\", offset=2000)]",
            seq_lines(1999, 2000)
        )),
        "the hint follows the preview"
    );
    assert!(run_result.contains("[Exit code 0 after"), "{run_result}");
    assert!(
        run_result.len() < 64 * 1024,
        "the run result is bounded: {} bytes",
        run_result.len()
    );

    // And for `read` with that offset: exactly the next page, then where the page ends.
    assert_next_page(
        &last_tool_output(&requests[2]),
        &seq_lines(2001, 4000),
        &format!("[Lines 2000-3999 of 100000. Read more: read(filePath=\"{uri}\", offset=4000)]"),
    );
}

/// The `agent` tool, from the official MCP Python SDK, runs the real Claude Code against the
/// scripted model server and answers with its final message, models and read hints.
#[test]
fn the_agent_tool_delegates_to_the_real_claude_code() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(
        Api::AnthropicMessages,
        agentrun_tests::model_server::replies([
            Reply::text("the delegated answer").with_model("claude-scripted-model")
        ]),
    )
    .unwrap();
    let output = python_client::client("agent", &dir.path().join("store"))
        .env_clear()
        .envs(agent_clis::claude_env(&dir.path().join("home"), &server).unwrap())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "agent: ok");
    let requests = server.model_requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].has_user_text("say the answer"));
}

/// Claude Code's limit on an MCP tool result, in tokens (its documented default, set
/// explicitly so that no remote default can change it).
const MAX_MCP_OUTPUT_TOKENS: usize = 25_000;

/// Lines of the big file: 19 bytes each, 40 000 of them (760 000 bytes, far over the limit
/// at any count of tokens per byte Claude Code estimates).
const BIG_FILE_LINES: u64 = 40_000;

/// The big file's lines `from..=to`, each with its newline.
fn big_file_lines(from: u64, to: u64) -> String {
    (from..=to)
        .map(|n| format!("{n:06} of the file\n"))
        .collect()
}

/// A private home and working directory for one Claude Code session against `server`, with
/// the big file in the working directory. (The filesystem server serves the directories the
/// client names as its roots, which for Claude Code is the working directory, in place of
/// the one on its command line.)
struct ClaudeSession {
    _dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    work: std::path::PathBuf,
    store: std::path::PathBuf,
    big_file: std::path::PathBuf,
}

impl ClaudeSession {
    fn new(server: &ModelServer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (work, store) = (dir.path().join("work"), dir.path().join("store"));
        std::fs::create_dir_all(&work).unwrap();
        let big_file = work.join("big.txt");
        std::fs::write(&big_file, big_file_lines(1, BIG_FILE_LINES)).unwrap();
        let mut env = agent_clis::claude_env(&dir.path().join("home"), server).unwrap();
        env.push((
            "MAX_MCP_OUTPUT_TOKENS".to_owned(),
            MAX_MCP_OUTPUT_TOKENS.to_string(),
        ));
        ClaudeSession {
            _dir: dir,
            env,
            work,
            store,
            big_file,
        }
    }

    /// `claude mcp add files -- COMMAND...`, as a user registers a server.
    fn add_files_server<S: AsRef<OsStr>>(&self, command: &[S]) {
        let output = self
            .claude()
            .args(["mcp", "add", "files", "--"])
            .args(command)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "claude mcp add failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `claude -p PROMPT` with `tools` allowed; its output and its final result text.
    fn prompt(&self, tools: &str, prompt: &str) -> (Output, String) {
        let output = self
            .claude()
            .args(["-p", "--output-format", "stream-json", "--verbose"])
            .args(["--allowedTools", tools, "--", prompt])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let result = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .rfind(|e| e["type"] == "result")
            .and_then(|e| e["result"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                panic!(
                    "no result event:\n{stdout}\n{}",
                    String::from_utf8_lossy(&output.stderr)
                )
            });
        (output, result)
    }

    fn claude(&self) -> Command {
        let mut command = Command::new(agent_clis::executable(AgentCli::Claude));
        command
            .env_clear()
            .envs(self.env.iter().cloned())
            .current_dir(&self.work)
            .stdin(Stdio::null());
        command
    }
}

/// What the user runs: `claude mcp add files -- agentrun mcp proxy -- <filesystem server>
/// DIR`. The model reads a file over Claude Code's limit and gets the proxy's bounded preview
/// with a hint, untouched by Claude Code; then `read` at the hinted offset sends the model
/// the file's next lines, exactly.
#[test]
fn claude_code_reads_a_file_over_its_limit_through_the_proxy() {
    let (node, index) = filesystem::filesystem_server();
    let followed: Arc<Mutex<Option<(String, u64)>>> = Arc::default();
    let big_file: Arc<Mutex<String>> = Arc::default();
    let script = {
        let (followed, big_file) = (followed.clone(), big_file.clone());
        move |request: &Request| match request.model_index {
            Some(0) => Reply::tool_call(
                "mcp__files__read_text_file",
                json!({"path": *big_file.lock().unwrap()}),
            ),
            Some(1) => match hint(&last_tool_output(request)) {
                Some((uri, offset)) => {
                    *followed.lock().unwrap() = Some((uri.clone(), offset));
                    Reply::tool_call(
                        "mcp__files__read",
                        json!({"filePath": uri, "offset": offset}),
                    )
                }
                None => Reply::text("no hint in the file's preview"),
            },
            _ => Reply::text("read past the preview"),
        }
    };
    let server = ModelServer::start(Api::AnthropicMessages, script).unwrap();
    let session = ClaudeSession::new(&server);
    *big_file.lock().unwrap() = session.big_file.display().to_string();
    session.add_files_server(&[
        OsStr::new(env!("CARGO_BIN_EXE_agentrun")),
        OsStr::new("--store"),
        session.store.as_os_str(),
        OsStr::new("mcp"),
        OsStr::new("proxy"),
        OsStr::new("--"),
        OsStr::new(node),
        OsStr::new(index),
        session.work.as_os_str(),
    ]);

    let (output, result) = session.prompt(
        "mcp__files__read_text_file,mcp__files__read",
        "read big.txt past the preview",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(result, "read past the preview", "{stdout}\n{stderr}");
    let requests = server.model_requests();
    assert_eq!(requests.len(), 3, "read_text_file, read, done: {stdout}");

    // What Claude Code sent the model for read_text_file: the proxy's preview (the file's
    // first 2000 lines) and the hint after it, not cut by Claude Code.
    let preview = last_tool_output(&requests[1]);
    let (uri, offset) = followed.lock().unwrap().clone().unwrap_or_else(|| {
        panic!(
            "no hint reached the model: {}",
            &preview[..preview.len().min(500)]
        )
    });
    assert!(
        uri.starts_with("artifact://") && uri.ends_with("/text-1"),
        "the hint names the text's stream: {uri}"
    );
    assert_eq!(offset, 2000);
    let first_lines = big_file_lines(1, 2000);
    assert!(
        preview.starts_with(&format!("[text-1]\n{first_lines}")),
        "the preview is the file's first 2000 lines: {}",
        &preview[..preview.len().min(300)]
    );
    assert!(
        preview.contains(&format!(
            "{}[Truncated. Read more: read(filePath=\"{uri}\", offset=2000)]",
            big_file_lines(1999, 2000)
        )),
        "the hint follows the preview"
    );
    assert!(
        !preview.contains(&big_file_lines(2001, 2001)),
        "nothing past the preview"
    );
    assert!(
        preview.contains("[Structured content: "),
        "the structured content is retained and named: {}",
        &preview[preview.len().saturating_sub(600)..]
    );
    assert!(
        !preview.contains("truncated"),
        "Claude Code passed the preview on uncut: {}",
        &preview[preview.len().saturating_sub(600)..]
    );
    assert!(
        preview.len() < MAX_MCP_OUTPUT_TOKENS * 2,
        "the preview is well within Claude Code's limit: {} bytes",
        preview.len()
    );

    // What it sent for read at the hinted offset: the file's next 2000 lines, exactly, and
    // where to go on.
    assert_next_page(
        &last_tool_output(&requests[2]),
        &big_file_lines(2001, 4000),
        &format!(
            "[Lines 2000-3999 of {BIG_FILE_LINES}. Read more: read(filePath=\"{uri}\", \
             offset=4000)]"
        ),
    );
}

/// The control: the same call with the filesystem server registered without the proxy. The
/// file is over Claude Code's limit, so the model gets none of it in the tool result (Claude
/// Code 2.1.332 saves the result, its structured content as one line of JSON, to a file of
/// its own and sends a note saying so).
#[test]
fn without_the_proxy_claude_code_sends_none_of_the_file() {
    let (node, index) = filesystem::filesystem_server();
    let big_file: Arc<Mutex<String>> = Arc::default();
    let script = {
        let big_file = big_file.clone();
        move |request: &Request| match request.model_index {
            Some(0) => Reply::tool_call(
                "mcp__files__read_text_file",
                json!({"path": *big_file.lock().unwrap()}),
            ),
            _ => Reply::text("done"),
        }
    };
    let server = ModelServer::start(Api::AnthropicMessages, script).unwrap();
    let session = ClaudeSession::new(&server);
    *big_file.lock().unwrap() = session.big_file.display().to_string();
    session.add_files_server(&[
        OsStr::new(node),
        OsStr::new(index),
        session.work.as_os_str(),
    ]);

    let (output, result) = session.prompt("mcp__files__read_text_file", "read big.txt");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        result,
        "done",
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = server.model_requests();
    assert_eq!(requests.len(), 2, "read_text_file, done: {stdout}");
    let sent = last_tool_output(&requests[1]);
    let whole = big_file_lines(1, BIG_FILE_LINES);
    assert!(
        !sent.contains(&big_file_lines(1, 1)),
        "none of the file reached the model: {}",
        &sent[..sent.len().min(500)]
    );
    assert!(
        sent.len() < whole.len() / 10,
        "Claude Code held the file back: {} bytes sent for {}",
        sent.len(),
        whole.len()
    );
}
