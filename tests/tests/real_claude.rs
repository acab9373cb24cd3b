//! The real Claude Code CLI (installed by `scripts/install-agent-clis.sh`) against the scripted
//! Anthropic server: proof that the server and the offline environment are what Claude Code
//! needs, for every kind of reply the other end-to-end tests script.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentrun_tests::agent_clis::{self, AgentCli};
use agentrun_tests::model_server::{Api, ModelServer, Reply, TokenUsage, replies};
use serde_json::{Value, json};

struct Run {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

impl Run {
    fn result(&self) -> &Value {
        self.events
            .iter()
            .rev()
            .find(|e| e["type"] == "result")
            .unwrap_or_else(|| panic!("no result event: {:#?}\n{}", self.events, self.stderr))
    }
}

fn claude(server: &ModelServer, home: &Path, work: &Path, prompt: &str) -> Run {
    let exe = agent_clis::executable(AgentCli::Claude);
    let output = Command::new(exe)
        .args(["-p", "--output-format", "stream-json", "--verbose", prompt])
        .env_clear()
        .envs(agent_clis::claude_env(home, server).unwrap())
        .current_dir(work)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    Run {
        code: output.status.code(),
        events: stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    (dir, home, work)
}

#[test]
fn a_text_turn_reaches_the_server_and_its_answer_is_the_result() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([Reply::text("the answer").with_usage(TokenUsage {
            input: 11,
            cached: 4,
            output: 3,
            reasoning: 0,
        })]),
    )
    .unwrap();
    let (_dir, home, work) = dirs();
    let run = claude(&server, &home, &work, "what is it?");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let result = run.result();
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["result"], "the answer");
    assert_eq!(result["usage"]["input_tokens"], 11);
    assert_eq!(result["usage"]["cache_read_input_tokens"], 4);
    assert_eq!(result["usage"]["output_tokens"], 3);
    let requests = server.model_requests();
    assert_eq!(requests.len(), 1, "only the main loop talks to the model");
    assert!(requests[0].has_user_text("what is it?"));
    assert_eq!(requests[0].header("x-api-key"), Some("sk-ant-offline-test"));
    // Nothing but the model endpoint was asked for.
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.path.starts_with("/v1/messages"))
    );
}

#[test]
fn a_tool_turn_runs_the_command_for_real_and_sends_its_result_back() {
    let (_dir, home, work) = dirs();
    // Write takes an absolute path.
    let target = work.join("write.txt");
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([
            Reply::tool_call(
                "Bash",
                json!({"command": "echo made > made.txt && echo wrote", "description": "w"}),
            ),
            Reply::tool_call(
                "Write",
                json!({"file_path": target, "content": "written by Write\n"}),
            ),
            Reply::text("both done"),
        ]),
    )
    .unwrap();
    let run = claude(&server, &home, &work, "make files");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.result()["result"], "both done");
    assert_eq!(
        std::fs::read_to_string(work.join("made.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written by Write\n"
    );
    let requests = server.model_requests();
    assert_eq!(requests.len(), 3);
    let bash = requests[1].tool_results();
    assert_eq!(bash.len(), 1);
    assert_eq!(bash[0].call_id, "toolu_0000");
    assert_eq!(bash[0].output, "wrote");
    assert!(!bash[0].is_error);
    let write = requests[2].tool_results();
    assert_eq!(write.last().unwrap().call_id, "toolu_0100");
    assert!(!write.last().unwrap().is_error);
}

#[test]
fn rate_limits_and_server_errors_fail_the_turn_with_the_status() {
    for (reply, status) in [(Reply::rate_limited(), 429), (Reply::server_error(), 500)] {
        let server = ModelServer::start(Api::AnthropicMessages, replies([reply])).unwrap();
        let (_dir, home, work) = dirs();
        let run = claude(&server, &home, &work, "hi");
        assert_ne!(run.code, Some(0), "{status}: {:#?}", run.events);
        let result = run.result();
        assert_eq!(result["is_error"], true, "{status}: {result:#}");
        assert_eq!(result["api_error_status"], status, "{result:#}");
        assert_eq!(
            server.model_requests().len(),
            1,
            "no retries with MAX_RETRIES=0"
        );
    }
}

#[test]
fn the_context_length_error_is_reported_as_prompt_too_long() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([Reply::prompt_too_long(250_000, 200_000)]),
    )
    .unwrap();
    let (_dir, home, work) = dirs();
    let run = claude(&server, &home, &work, "hi");
    assert_ne!(run.code, Some(0));
    let result = run.result();
    assert_eq!(result["is_error"], true);
    assert_eq!(result["terminal_reason"], "prompt_too_long", "{result:#}");
    assert_eq!(result["api_error_status"], 400);
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .starts_with("Prompt is too long"),
        "{result:#}"
    );
}

#[test]
fn mid_stream_failures_fail_the_turn() {
    for reply in [Reply::stream_error(), Reply::disconnect("half an ans")] {
        let server = ModelServer::start(Api::AnthropicMessages, replies([reply.clone()])).unwrap();
        let (_dir, home, work) = dirs();
        let run = claude(&server, &home, &work, "hi");
        assert_ne!(run.code, Some(0), "{reply:?}: {:#?}", run.events);
        assert_eq!(
            run.result()["is_error"],
            true,
            "{reply:?}: {:#}",
            run.result()
        );
    }
}

#[test]
fn a_hanging_model_keeps_claude_waiting_until_it_is_stopped() {
    let server = ModelServer::start(Api::AnthropicMessages, replies([Reply::Hang])).unwrap();
    let (_dir, home, work) = dirs();
    let mut child = Command::new(agent_clis::executable(AgentCli::Claude))
        .args(["-p", "--output-format", "stream-json", "--verbose", "wait"])
        .env_clear()
        .envs(agent_clis::claude_env(&home, &server).unwrap())
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(server.wait_for_requests(1, Duration::from_secs(120)));
    assert!(
        child.try_wait().unwrap().is_none(),
        "claude must still wait"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
