//! The MCP `fanout` tool over `agentrun mcp`'s stdio: two attempts of a Claude-dialect harness
//! script (allowed by name, like the verification's `sh`) in a git repository; the one whose
//! change passes the verification wins, and the result names its branch.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const HARNESS: &str = r#"#!/bin/sh
model=""
while [ $# -gt 0 ]; do
  case "$1" in --model) model="$2"; shift;; esac
  shift
done
echo '{"type":"system","subtype":"init","session_id":"s-'"$model"'","model":"'"$model"'"}'
[ "$model" = honest ] && echo fixed > fixed.txt
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s-'"$model"'"}'
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_fanout_tool_races_attempts_and_names_the_winners_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("claude"), HARNESS).unwrap();
    std::fs::set_permissions(bin.join("claude"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("README"), "base\n").unwrap();
    git(&work, &["init", "-q"]);
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-qm", "base"]);

    let mut child = Command::new(env!("CARGO_BIN_EXE_agentrun"))
        .arg("--store")
        .arg(tmp.path().join("store"))
        .args(["mcp", "--allow", "claude", "--allow", "sh"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", tmp.path())
        .env("XDG_CONFIG_HOME", tmp.path().join("no-config"))
        .env_remove("AGENTRUN_HOME")
        .env_remove("AGENTRUN_RESULT_SINK")
        .current_dir(&work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = move |v: Value| writeln!(stdin, "{v}").unwrap();
    let mut answer = |id: u64| loop {
        let line = lines.next().expect("an answer").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            return v;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "mcp_fanout test", "version": "1"}}}),
    );
    assert!(answer(0).get("result").is_some());
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}));
    let tools = answer(1);
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"fanout"), "{names:?}");
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "fanout",
        "arguments": {
            "attempts": ["claude:lazy", "claude:honest"],
            "prompt": "fix it",
            "verify": "test -f fixed.txt",
            "select": "all"
        }}}),
    );
    let result = answer(2);
    let r = &result["result"];
    assert_eq!(r["isError"], false, "{result:#}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("attempt 1 won"), "{text}");
    assert!(
        text.contains("0. claude:lazy — succeeded, verification failed"),
        "{text}"
    );
    let branch = git(
        &work,
        &[
            "branch",
            "--list",
            "--format=%(refname:short)",
            "agentrun/*",
        ],
    );
    let branch = branch.trim();
    assert!(branch.ends_with("/1"), "{branch}");
    assert!(text.contains(&format!("git merge {branch}")), "{text}");
    assert_eq!(git(&work, &["status", "--porcelain"]), "");
    // A harness the server does not allow is refused before anything runs.
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "fanout",
        "arguments": {"attempts": ["codex"], "prompt": "fix it"}}}),
    );
    let refused = answer(3);
    assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    assert!(
        refused["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`codex` is not allowed"),
        "{refused:#}"
    );
    drop(send);
    let _ = child.wait();
}
