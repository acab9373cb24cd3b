//! `agentrun mcp` inside the real Claude Code CLI (installed by
//! `scripts/install-agent-clis.sh`), configured with `--mcp-config`, against the scripted
//! Anthropic server: the model calls `mcp__agentrun__run` on a command with a large output,
//! then `mcp__agentrun__read` with the offset from the hint. What the CLI sends back to the
//! model server must hold the bounded preview, the hint, and then the exact next page.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use agentrun_tests::agent_clis::{self, AgentCli};
use agentrun_tests::model_server::{Api, ModelServer, Reply, Request};
use serde_json::{Value, json};

#[path = "mcp/python.rs"]
mod python_client;

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
    let read_result = last_tool_output(&requests[2]);
    let next_page = seq_lines(2001, 4000);
    assert!(
        read_result.starts_with(&next_page),
        "the next page, exactly: {}",
        &read_result[..read_result.len().min(300)]
    );
    assert!(
        read_result[next_page.len()..].contains(&format!(
            "[Lines 2000-3999 of 100000. Read more: read(filePath=\"{uri}\", offset=4000)]"
        )),
        "the continuation line: {}",
        &read_result[next_page.len()..]
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
