//! `agentrun agent qwen` on the real Qwen Code CLI (installed at its pinned version, with the
//! Node 22 it needs, by `scripts/install-agent-clis.sh` on first use), offline against the
//! scripted OpenAI chat-completions server on 127.0.0.1 with a private home. Qwen Code does
//! not offer its shell tool in headless mode without `--approval-mode yolo`, which the runs
//! pass with `--harness-arg`.

use agentrun_tests::agent_clis::AgentCli;

#[path = "support/chat_cli.rs"]
mod chat_cli;

use chat_cli::*;

const CLI: AgentCli = AgentCli::Qwen;
const YOLO: &[&str] = &["--harness-arg=--approval-mode", "--harness-arg=yolo"];

#[test]
fn text_answer_reports_the_served_model_from_the_session_log() {
    let last = a_text_answer_names_the_served_model(CLI, &[]);
    // The stream names only the requested model: the served one comes from the log.
    assert_eq!(last["report"]["retained"], true, "{last:#}");
    assert_eq!(last["observed_models"], serde_json::json!([]), "{last:#}");
}

#[test]
fn tool_call_runs_the_shell_under_yolo() {
    a_tool_call_runs_the_shell_in_the_workspace(CLI, YOLO);
}

#[test]
fn resumed_turn_sees_the_first() {
    a_resumed_turn_sees_the_first(CLI, YOLO);
}

#[test]
fn prompts_that_start_with_a_dash() {
    prompts_that_start_with_a_dash_reach_the_model_verbatim(CLI, &[]);
}

#[test]
fn a_400_fails_the_turn_and_context_length_is_named() {
    a_400_fails_the_turn(CLI, &[]);
}

#[test]
fn persistent_500_fails_the_turn() {
    a_persistent_500_fails_the_turn(CLI, &[]);
}

#[test]
fn rate_limit_then_success() {
    a_429_then_success_succeeds(CLI, &[]);
}

#[test]
fn an_effort_is_refused_before_the_launch() {
    let server = server(CLI, vec![]);
    let c = Cli::new(CLI, &server, &[]);
    let (o, _) = c.agent(&["--effort", "high"], "hi");
    // A usage error, reported as JSON under `--json`.
    assert_eq!(o.status.code(), Some(125), "{}", describe(&o));
    assert!(
        text(&o.stdout).contains("qwen takes no reasoning effort"),
        "{}",
        describe(&o)
    );
    assert!(server.model_requests().is_empty());
}
