//! `agentrun agent gemini` on the real Gemini CLI (`@google/gemini-cli`, installed at its pinned
//! version by `scripts/install-agent-clis.sh` on first use), run offline against the scripted
//! Gemini API of `agentrun_tests::model_server` (`streamGenerateContent` with SSE) on
//! 127.0.0.1, with a private home (`agent_clis::gemini_env`). Each scenario checks what a user
//! sees — session id, final message, models, usage, status, failure and exit code — and what
//! the CLI sent to the model.
//!
//! The shell tool is offered by Gemini CLI in headless mode only with
//! `--approval-mode yolo`, passed here with `--harness-arg`.

use std::path::{Path, PathBuf};
use std::process::Output;

use agentrun_tests::agent_clis::{self, AgentCli, GEMINI_MAX_ATTEMPTS};
use agentrun_tests::model_server::{Api, ModelServer, Reply, Request, TokenUsage, replies};
use serde_json::Value;

#[path = "support/connect_trace.rs"]
mod connect_trace;
#[path = "support/sandbox.rs"]
mod sandbox;

/// The model every run requests, and the one the scripted API says served it.
const REQUESTED: &str = "gemini-2.5-flash";
const SERVED: &str = "gemini-2.5-flash-served-001";

/// A private home, working directory and store for Gemini CLI sessions.
struct Sandbox {
    sandbox: sandbox::Sandbox,
    env: Vec<(String, String)>,
}

impl Sandbox {
    fn new(server: &ModelServer) -> Sandbox {
        let sandbox = sandbox::Sandbox::new();
        let home = sandbox.path("home");
        std::fs::create_dir_all(sandbox.path("work")).unwrap();
        let env = agent_clis::gemini_env(&home, server).unwrap();
        Sandbox { sandbox, env }
    }

    fn work(&self) -> PathBuf {
        self.sandbox.path("work")
    }

    /// `agentrun --json agent gemini --model REQUESTED FLAGS -- PROMPT`: the output and the
    /// final object.
    fn agent_json(&self, flags: &[&str], prompt: &str) -> (Output, Value) {
        let mut args = vec!["agent", "gemini", "--json", "--model", REQUESTED];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", prompt]);
        let mut c = self.sandbox.cmd(&args);
        c.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.work());
        let o = c.output().unwrap();
        let last = text(&o.stdout)
            .lines()
            .last()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        (o, last)
    }

    /// Runs the real `gemini` under `strace`; returns the log of its connections.
    fn trace_connections(&mut self) -> PathBuf {
        let dir = self.sandbox.path("trace");
        let real = agent_clis::executable(AgentCli::Gemini);
        connect_trace::trace(&real, "gemini", &dir, &mut self.env)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

fn server(script: Vec<Reply>) -> ModelServer {
    ModelServer::start(Api::Gemini, replies(script)).unwrap()
}

/// The last line of the last user content of a model request: where Gemini CLI puts the
/// prompt (after its `<session_context>` part in the first turn).
fn last_user_text(request: &Request) -> String {
    let texts = request.user_texts();
    let last = texts.last().cloned().unwrap_or_default();
    last.rsplit('\n').next().unwrap_or("").to_owned()
}

const USAGE: TokenUsage = TokenUsage {
    input: 100,
    cached: 40,
    output: 20,
    reasoning: 4,
};

#[test]
fn a_text_answer_names_the_served_model_and_reaches_no_other_host() {
    let server = server(vec![
        Reply::text("Hello from the scripted model.")
            .with_usage(USAGE)
            .with_model(SERVED),
    ]);
    let mut sandbox = Sandbox::new(&server);
    let log = sandbox.trace_connections();
    let (o, last) = sandbox.agent_json(&[], "say hello");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    assert_eq!(
        last["outcome"]["final_message"], "Hello from the scripted model.",
        "{last:#}"
    );
    assert_eq!(last["outcome"]["status"]["status"], "succeeded");
    let session = last["outcome"]["session_id"].as_str().unwrap_or("");
    assert_eq!(session.len(), 36, "a UUID: {last:#}");
    // The served model is observed; the requested one (the init's `model`) is not.
    assert_eq!(last["observed_models"], serde_json::json!([SERVED]));
    assert_eq!(last["report"]["models"], serde_json::json!([SERVED]));
    // The session log was found and read.
    assert_eq!(last["report"]["retained"], true, "{last:#}");
    assert!(last.get("retained_error").is_none(), "{last:#}");
    // Input includes the cached tokens; output the thinking ones.
    let usage = &last["report"]["usage"];
    assert_eq!(usage["input_tokens"], 140, "{last:#}");
    assert_eq!(usage["cached_input_tokens"], 40, "{last:#}");
    assert_eq!(usage["output_tokens"], 20, "{last:#}");
    assert_eq!(usage["reasoning_tokens"], 4, "{last:#}");
    assert_eq!(usage["tokens_scope"], "run", "{last:#}");
    // One model request, to the requested model, with the dummy key.
    let requests = server.model_requests();
    assert_eq!(requests.len(), 1, "{}", describe(&o));
    assert_eq!(requests[0].model(), Some(REQUESTED));
    assert!(
        requests[0].path.contains(":streamGenerateContent"),
        "{}",
        requests[0].path
    );
    assert_eq!(
        requests[0].header("x-goog-api-key"),
        Some("gemini-offline-test")
    );
    assert_eq!(last_user_text(&requests[0]), "say hello");
    // Every connection the CLI (and anything it started) opened went to the model server.
    connect_trace::assert_only_to(&log, server.addr().port());
}

#[test]
fn a_tool_call_runs_the_shell_for_real_with_approval_mode_yolo() {
    let server = server(vec![
        AgentCli::Gemini.shell_call().with_usage(USAGE),
        Reply::text("all done").with_usage(USAGE),
    ]);
    let sandbox = Sandbox::new(&server);
    let (o, last) = sandbox.agent_json(
        &["--harness-arg=--approval-mode", "--harness-arg=yolo"],
        "make the file",
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(
        std::fs::read_to_string(sandbox.work().join("made.txt")).unwrap(),
        "made\n"
    );
    assert!(
        text(&o.stdout).contains(r#"{"progress":"$ echo made > made.txt && echo wrote"}"#),
        "{}",
        describe(&o)
    );
    assert_eq!(last["outcome"]["final_message"], "all done", "{last:#}");
    assert_eq!(last["outcome"]["status"]["status"], "succeeded");
    // The tool's output went back to the model.
    let requests = server.model_requests();
    assert_eq!(requests.len(), 2, "{}", describe(&o));
    let results = requests[1].tool_results();
    assert!(
        results.iter().any(|r| r.output.contains("wrote")),
        "{results:?}"
    );
    // Two requests' tokens: the run's own.
    assert_eq!(last["report"]["usage"]["input_tokens"], 280, "{last:#}");
    assert_eq!(last["report"]["usage"]["output_tokens"], 40, "{last:#}");
}

#[test]
fn a_resumed_turn_sends_the_first_and_reports_its_own_usage() {
    // The second request must carry the first exchange, or the script fails it.
    let mut n = 0;
    let server = ModelServer::start(Api::Gemini, move |request: &Request| {
        n += 1;
        match n {
            1 => Reply::text("first answer").with_usage(USAGE),
            2 if request.has_user_text("remember 42")
                && request
                    .assistant_texts()
                    .iter()
                    .any(|t| t == "first answer") =>
            {
                Reply::text("it was 42").with_usage(USAGE)
            }
            _ => Reply::error(400, "invalid", "the history lacks the first turn"),
        }
    })
    .unwrap();
    let sandbox = Sandbox::new(&server);
    let (o, first) = sandbox.agent_json(&[], "remember 42");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let session = first["outcome"]["session_id"].as_str().unwrap().to_owned();
    let (o, second) = sandbox.agent_json(&["--resume", &session], "what was it?");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    assert_eq!(second["outcome"]["session_id"], session.as_str());
    assert_eq!(
        second["outcome"]["final_message"], "it was 42",
        "{second:#}"
    );
    assert_eq!(last_user_text(&server.model_requests()[1]), "what was it?");
    // Gemini CLI counts each run's own requests, resumed or not.
    for run in [&first, &second] {
        assert_eq!(run["report"]["usage"]["input_tokens"], 140, "{run:#}");
        assert_eq!(run["report"]["usage"]["tokens_scope"], "run", "{run:#}");
        assert_eq!(run["report"]["retained"], true, "{run:#}");
    }
}

#[test]
fn prompts_starting_with_a_dash_reach_the_model_verbatim() {
    let prompts = ["-x", "--help me", "help"];
    let server = server(
        prompts
            .iter()
            .map(|p| Reply::text(format!("ok {p}")))
            .collect(),
    );
    let sandbox = Sandbox::new(&server);
    for (n, prompt) in prompts.iter().enumerate() {
        let (o, last) = sandbox.agent_json(&[], prompt);
        assert_eq!(o.status.code(), Some(0), "{prompt:?}: {}", describe(&o));
        assert_eq!(last["outcome"]["final_message"], format!("ok {prompt}"));
        let requests = server.model_requests();
        assert_eq!(requests.len(), n + 1, "one model request per turn");
        assert_eq!(last_user_text(&requests[n]), *prompt);
    }
}

/// Runs one turn against a server answering every request with `reply`.
fn failing_turn(reply: Reply) -> (Output, Value, ModelServer) {
    let server = ModelServer::start(Api::Gemini, move |_: &Request| reply.clone()).unwrap();
    let sandbox = Sandbox::new(&server);
    let (o, last) = sandbox.agent_json(&[], "hi");
    (o, last, server)
}

#[test]
fn a_400_is_a_failed_turn_naming_the_status_and_the_exit_code_144() {
    let (o, last, server) = failing_turn(AgentCli::Gemini.final_error());
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    // A 400 is final: one attempt.
    assert_eq!(server.model_requests().len(), 1, "{}", describe(&o));
    assert_eq!(
        last["outcome"]["status"]["status"], "turn_failed",
        "{last:#}"
    );
    assert_eq!(
        last["outcome"]["status"]["diagnostic"], "Invalid request (HTTP 400, INVALID_ARGUMENT)",
        "{last:#}"
    );
    assert!(last["outcome"].get("failure_kind").is_none(), "{last:#}");
    // Gemini CLI exits with the status mod 256.
    assert_eq!(last["run"]["exit"]["code"], 144, "{last:#}");
    // The requested model it lists with no tokens is no observation.
    assert_eq!(last["observed_models"], serde_json::json!([]), "{last:#}");
}

#[test]
fn a_persistent_500_fails_after_the_clis_own_retries() {
    let (o, last, server) = failing_turn(Reply::server_error());
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert_eq!(
        server.model_requests().len(),
        GEMINI_MAX_ATTEMPTS as usize,
        "{}",
        describe(&o)
    );
    assert_eq!(
        last["outcome"]["status"]["status"], "turn_failed",
        "{last:#}"
    );
    assert_eq!(
        last["outcome"]["status"]["diagnostic"], "Internal server error (HTTP 500, INTERNAL)",
        "{last:#}"
    );
    assert_eq!(last["outcome"]["failure_kind"], "server_error", "{last:#}");
    assert_eq!(last["run"]["exit"]["code"], 244, "{last:#}");
    // The retries are on stderr only, which agentrun keeps as an artifact.
    assert!(text(&o.stderr).contains("artifact://"), "{}", describe(&o));
}

#[test]
fn a_429_then_success_succeeds_after_one_retry() {
    let server = server(vec![
        Reply::rate_limited(),
        Reply::text("after the retry")
            .with_usage(USAGE)
            .with_model(SERVED),
    ]);
    let sandbox = Sandbox::new(&server);
    let (o, last) = sandbox.agent_json(&[], "hi");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(server.model_requests().len(), 2, "{}", describe(&o));
    assert_eq!(last["outcome"]["final_message"], "after the retry");
    assert_eq!(last["outcome"]["status"]["status"], "succeeded");
    // The CLI lists the requested model beside the served one after the failed attempt, with
    // no tokens: only the served one is observed.
    assert_eq!(
        last["observed_models"],
        serde_json::json!([SERVED]),
        "{last:#}"
    );
}

#[test]
fn the_context_length_error_is_classified() {
    let (o, last, _server) = failing_turn(Reply::prompt_too_long(2_000_000, 1_048_576));
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert_eq!(
        last["outcome"]["status"]["status"], "turn_failed",
        "{last:#}"
    );
    assert_eq!(
        last["outcome"]["failure_kind"], "context_length",
        "{last:#}"
    );
}

#[test]
fn an_effort_is_refused_before_anything_runs() {
    let server = server(vec![]);
    let sandbox = Sandbox::new(&server);
    let (o, _) = sandbox.agent_json(&["--effort", "high"], "hi");
    assert_eq!(o.status.code(), Some(125), "{}", describe(&o));
    assert!(
        text(&o.stdout).contains("gemini takes no reasoning effort on its command line"),
        "{}",
        describe(&o)
    );
    assert!(server.requests().is_empty());
}

#[test]
fn interpret_and_help_know_the_gemini_harness() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/harness/gemini/gemini-cli-0.61.0-tool-turn.jsonl");
    let o = sandbox::agentrun()
        .args(["interpret", "--harness", "gemini", "--json"])
        .arg(&fixture)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains(r#"{"progress":"$ echo made > made.txt && echo wrote"}"#),
        "{out}"
    );
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["harness"], "gemini");
    assert_eq!(last["outcome"]["final_message"], "all done");
    assert_eq!(last["observed_models"], serde_json::json!([REQUESTED]));
    for command in ["agent", "interpret", "auto"] {
        let o = sandbox::agentrun()
            .args([command, "--help"])
            .output()
            .unwrap();
        assert!(
            text(&o.stdout).contains("gemini"),
            "{command}: {}",
            describe(&o)
        );
    }
}

#[test]
fn auto_completes_a_short_objective_resuming_the_session_between_turns() {
    // Clarify, Plan, Execute (a shell call, then an answer), Evaluate. Every request after the
    // first must carry the session's earlier turns (the Clarify prompt), or the script fails it.
    let mut n = 0;
    let server = ModelServer::start(Api::Gemini, move |request: &Request| {
        n += 1;
        if n > 1 && !request.has_user_text("Clarify phase") {
            return Reply::error(400, "invalid", "the session was not resumed");
        }
        match n {
            1 => Reply::text("I will create done.txt holding ok."),
            2 => Reply::text("1. create done.txt\n2. check it"),
            3 => Reply::tool_call(
                "run_shell_command",
                serde_json::json!({"command": "echo ok > done.txt"}),
            ),
            4 => Reply::text("created done.txt"),
            5 => Reply::text("done.txt exists.\nCOMPLETE"),
            _ => Reply::error(400, "invalid", "no more turns were planned"),
        }
    })
    .unwrap();
    let sandbox = Sandbox::new(&server);
    let mut c = sandbox.sandbox.cmd(&[
        "auto",
        "gemini",
        "--json",
        "--model",
        REQUESTED,
        "--verify",
        "grep -qx ok done.txt",
        "--harness-arg=--approval-mode",
        "--harness-arg=yolo",
        "--",
        "create",
        "done.txt",
        "holding",
        "ok",
    ]);
    c.env_clear()
        .envs(sandbox.env.iter().map(|(k, v)| (k, v)))
        .current_dir(sandbox.work());
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let state: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&o)));
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["verified"], true, "{state:#}");
    assert_eq!(
        std::fs::read_to_string(sandbox.work().join("done.txt")).unwrap(),
        "ok\n"
    );
    // One harness session throughout: the first turn's, resumed by every later one.
    let session = state["harness_session_id"].as_str().unwrap_or("");
    assert_eq!(session.len(), 36, "{state:#}");
    assert_eq!(server.model_requests().len(), 5, "{}", describe(&o));
}
