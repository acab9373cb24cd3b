//! `agentrun compact --harness claude` end to end with the real Claude Code CLI against a
//! scripted Anthropic server that answers an over-long summarizer request with the API's real
//! context-length error and a short one with a summary: the first attempt fails, the pruned
//! retry succeeds, and every reference in the retry input reads back the original output.

use std::path::Path;
use std::process::Output;

use agentrun_tests::agent_clis;
use agentrun_tests::model_server::{Api, ModelServer, Reply, Request};
use serde_json::{Value, json};

/// A request longer than this is "too long for the model".
const CONTEXT_BYTES: usize = 20_000;

#[path = "support/sandbox.rs"]
mod sandbox;

fn agentrun(args: &[&str], env: &[(String, String)], store: &Path) -> Output {
    sandbox::agentrun()
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("AGENTRUN_HOME", store)
        .output()
        .unwrap()
}

fn request_bytes(request: &Request) -> usize {
    request.user_texts().iter().map(String::len).sum()
}

#[test]
fn the_pruned_retry_succeeds_where_the_whole_history_is_too_long() {
    let server = ModelServer::start(Api::AnthropicMessages, |request: &Request| {
        if request_bytes(request) > CONTEXT_BYTES {
            Reply::prompt_too_long(250_000, 200_000)
        } else {
            Reply::text("SUMMARY: the build failed on a missing fixture; fixed it.")
        }
    })
    .unwrap();
    let sandbox = sandbox::Sandbox::new();
    let (home, store) = (sandbox.path("home"), sandbox.store.clone());
    let build_log = "error[E0425]: cannot find value `fixture` in this scope\n".repeat(800);
    let digest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    let transcript = json!({
        "summary": "The user asked to make the test suite pass.",
        "messages": [
            {"role": "user", "content": "Why does cargo build fail?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "cargo build"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"filePath": format!("artifact://{digest}/stdout")}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": build_log, "is_error": true},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "A PAGE OF AN ARTIFACT\n".repeat(400)}
            ]},
            {"role": "assistant", "content": "The fixture module is missing; I added it."}
        ],
        "recent_start": 3
    });
    let path = sandbox.path("transcript.json");
    let original = serde_json::to_vec_pretty(&transcript).unwrap();
    std::fs::write(&path, &original).unwrap();

    let env = agent_clis::claude_env(&home, &server).unwrap();
    let output = agentrun(
        &[
            "compact",
            path.to_str().unwrap(),
            "--harness",
            "claude",
            "--json",
        ],
        &env,
        &store,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["summary"],
        "SUMMARY: the build failed on a missing fixture; fixed it."
    );
    let attempts = report["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{report:#}");
    assert_eq!(attempts[0]["kind"], "first");
    assert_eq!(attempts[0]["result"], "context_length", "{report:#}");
    assert_eq!(attempts[1]["kind"], "retry");
    assert_eq!(attempts[1]["result"], "summarized");
    assert_eq!(report["retry_reason"], "context length exceeded");
    assert_eq!(report["omitted_artifact_reads"], 1);
    // The compacted transcript: the new summary, then the recent message as it was.
    assert_eq!(
        report["transcript"]["messages"],
        json!([transcript["messages"][3]])
    );

    // What the model saw: the whole history first, then the pruned snapshot.
    let requests: Vec<String> = server
        .model_requests()
        .iter()
        .map(|r| r.user_texts().join("\n"))
        .filter(|t| t.contains("<transcript>"))
        .collect();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(requests[0].contains(&build_log));
    assert!(!requests[1].contains("cannot find value"));
    assert!(requests[1].contains("[artifact read output omitted for compaction]"));
    assert!(!requests[1].contains("A PAGE OF AN ARTIFACT"));

    // Every reference in the retry input reads back the original output.
    let references = report["references"].as_array().unwrap();
    assert_eq!(references.len(), 1);
    let uri = references[0]["uri"].as_str().unwrap();
    assert!(requests[1].contains(&format!("read(filePath=\"{uri}\")")));
    let read = agentrun(&["read", uri, "--all"], &env, &store);
    assert_eq!(read.status.code(), Some(0));
    assert_eq!(read.stdout, build_log.as_bytes());

    // The input file is untouched.
    assert_eq!(std::fs::read(&path).unwrap(), original);
}
