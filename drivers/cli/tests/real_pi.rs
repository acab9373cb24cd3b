//! `agentrun agent pi` on the real pi CLI (installed at its pinned version by
//! `scripts/install-agent-clis.sh` on first use), offline against the scripted OpenAI
//! chat-completions server on 127.0.0.1 with a private home. pi exits 0 in `--mode json` even
//! when its turn failed: these runs show agentrun reporting the failure from the stream.

use agentrun_tests::agent_clis::AgentCli;
use agentrun_tests::model_server::Reply;

#[path = "support/chat_cli.rs"]
mod chat_cli;

use chat_cli::*;

const CLI: AgentCli = AgentCli::Pi;

#[test]
fn text_answer_reports_the_served_model() {
    let last = a_text_answer_names_the_served_model(CLI, &[]);
    // pi's stream names the model that answered (`responseModel`); its log agrees.
    assert_eq!(
        last["observed_models"],
        serde_json::json!([SERVED]),
        "{last:#}"
    );
    assert_eq!(last["report"]["retained"], true, "{last:#}");
}

#[test]
fn tool_call_runs_the_shell() {
    let last = a_tool_call_runs_the_shell_in_the_workspace(CLI, &[]);
    // pi prices the test model: 2 × (100 × 10 + 40 × 1 + 20 × 20) per million tokens.
    let cost = last["report"]["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.00288).abs() < 1e-9, "{last:#}");
}

#[test]
fn resumed_turn_sees_the_first() {
    a_resumed_turn_sees_the_first(CLI, &[]);
}

#[test]
fn prompts_that_start_with_a_dash() {
    prompts_that_start_with_a_dash_reach_the_model_verbatim(CLI, &[]);
}

#[test]
fn a_400_fails_the_turn_although_pi_exits_0() {
    a_400_fails_the_turn(CLI, &[]);
}

#[test]
fn persistent_500_fails_the_turn_after_pis_retries() {
    a_persistent_500_fails_the_turn(CLI, &[]);
}

#[test]
fn rate_limit_then_success() {
    a_429_then_success_succeeds(CLI, &[]);
}

#[test]
fn the_thinking_level_reaches_pi() {
    let server = server(CLI, vec![Reply::text("fine")]);
    let c = Cli::new(CLI, &server, &[]);
    let (o, last) = c.agent(
        &["--effort", "high", "--model", "agentrun-test/test-model"],
        "hi",
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(last["outcome"]["final_message"], "fine");
    let request = server.model_requests().pop().unwrap();
    assert_eq!(request.model(), Some("test-model"));
}

/// `agentrun auto pi`: each phase is a pi turn, resumed with `--session`; pi runs the scripted
/// shell commands for real, and writes the verdict into the result sink itself.
#[test]
fn auto_completes_after_verification_and_resumes_its_session() {
    let bash = |command: &str| Reply::tool_call("bash", serde_json::json!({"command": command}));
    let server = server(
        CLI,
        vec![
            Reply::text("Done means: done.txt exists."),
            Reply::text("1. Create done.txt."),
            bash("echo ok > done.txt"),
            Reply::text("Created done.txt."),
            bash("printf COMPLETE > \"$AGENTRUN_RESULT_SINK\""),
            Reply::text("COMPLETE"),
        ],
    );
    let c = Cli::new(CLI, &server, &[]);
    let o = c
        .command(&[
            "auto",
            "pi",
            "--json",
            "--verify",
            "test -f done.txt",
            "--",
            "create",
            "done.txt",
        ])
        .env("XDG_CONFIG_HOME", c.home().join("xdg"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the auto state");
    assert_eq!(s["status"], "completed", "{s:#}");
    assert_eq!(s["verified"], true, "{s:#}");
    assert!(c.work().join("done.txt").exists());
    let session = s["harness_session_id"].as_str().unwrap_or("");
    assert!(!session.is_empty(), "{s:#}");
    // Later turns resume the session: the Plan request still carries the Clarify exchange.
    let requests = server.model_requests();
    let plan = requests
        .iter()
        .find(|r| r.has_user_text("This is the Plan phase"))
        .expect("a plan request");
    assert!(plan.has_user_text("This is the Clarify phase"), "resumed");
    assert!(plan.body_text().contains("Done means: done.txt exists."));
}
