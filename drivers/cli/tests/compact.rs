//! `agentrun compact` with scripted `--summarizer` commands: the attempt table, the exit status
//! and marker convention, the result sink, references that read back, and bad input.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

#[path = "support/sandbox.rs"]
mod sandbox;

/// A sandbox ([`sandbox::Sandbox`]) with a transcript and a scripted summarizer.
struct Env(sandbox::Sandbox);

impl Env {
    fn new() -> Self {
        Self(sandbox::Sandbox::new())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path(name)
    }

    fn agentrun(&self, args: &[&str]) -> Output {
        self.0.run(args)
    }

    /// Writes the transcript and returns its path.
    fn transcript(&self, doc: &Value) -> String {
        let path = self.path("transcript.json");
        std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// A summarizer script that appends each input's size to `runs` and answers per `body`.
    fn summarizer(&self, body: &str) -> String {
        let script = self.path("summarize.sh");
        let runs = self.path("runs");
        std::fs::write(
            &script,
            format!(
                "input=$(cat)\nprintf '%s\\n' \"${{#input}}\" >> '{}'\n{body}\n",
                runs.display()
            ),
        )
        .unwrap();
        format!("sh '{}'", script.display())
    }

    /// Runs `agentrun compact` on [`sample`] with a summarizer answering per `body`.
    fn compact(&self, body: &str, extra: &[&str]) -> Output {
        let t = self.transcript(&sample());
        let cmd = self.summarizer(body);
        let mut args = vec!["compact", &t, "--summarizer", &cmd];
        args.extend_from_slice(extra);
        self.agentrun(&args)
    }

    fn runs(&self) -> Vec<usize> {
        std::fs::read_to_string(self.path("runs"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }
}

fn build_log() -> String {
    "error: cannot find value `fixture` in this scope\n".repeat(200)
}

fn sample() -> Value {
    json!({
        "summary": "earlier work",
        "messages": [
            {"role": "user", "content": "why does the build fail?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "make"}},
                {"type": "tool_use", "id": "t2", "name": "read",
                 "input": {"filePath": "artifact://ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": build_log()},
                {"type": "tool_result", "tool_use_id": "t2", "content": "PAGE\n".repeat(300)}
            ]},
            {"role": "assistant", "content": "fixed"}
        ],
        "recent_start": 3
    })
}

/// Answers with a summary when the input is short, else reports a context-length failure
/// with the marker convention.
const SIZE_LIMITED: &str = "if [ ${#input} -gt 3000 ]; then
  echo 'provider: prompt is too long' >&2
  echo agentrun:context-length-exceeded >&2
  exit 3
fi
echo 'short summary'";

fn assert_success(o: &Output) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn a_summary_on_the_first_attempt_is_printed_and_nothing_is_retained() {
    let env = Env::new();
    let o = env.compact("echo '  the summary  '", &[]);
    assert_success(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "the summary\n");
    assert_eq!(env.runs().len(), 1);
    let runs = env.agentrun(&["runs", "--json"]);
    // Only the summarizer's own run is recorded; no tool output was retained.
    assert!(!String::from_utf8_lossy(&runs.stdout).contains("compaction retry"));
}

#[test]
fn a_marked_context_length_failure_retries_once_with_readable_references() {
    let env = Env::new();
    let doc = sample();
    let t = env.transcript(&doc);
    let before = std::fs::read(&t).unwrap();
    let cmd = env.summarizer(SIZE_LIMITED);
    let o = env.agentrun(&["compact", &t, "--summarizer", &cmd, "--json"]);
    assert_success(&o);
    let report = json(&o);
    assert_eq!(report["summary"], "short summary");
    assert_eq!(report["retried"], true);
    assert_eq!(report["retry_reason"], "context length exceeded");
    let attempts = report["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["result"], "context_length");
    assert!(
        attempts[0]["detail"]
            .as_str()
            .unwrap()
            .contains("exited with code 3")
    );
    assert_eq!(attempts[1]["result"], "summarized");
    assert_eq!(report["omitted_artifact_reads"], 1);
    assert_eq!(report["transcript"]["summary"], "short summary");
    assert_eq!(
        report["transcript"]["messages"],
        json!([doc["messages"][3]])
    );
    let runs = env.runs();
    assert_eq!(runs.len(), 2);
    assert!(runs[1] < runs[0]);
    // The reference reads back the original output.
    let uri = report["references"][0]["uri"].as_str().unwrap();
    let read = env.agentrun(&["read", uri, "--all"]);
    assert_eq!(read.stdout, build_log().as_bytes());
    assert_eq!(
        std::fs::read(&t).unwrap(),
        before,
        "the input is never modified"
    );
}

#[test]
fn a_failure_without_the_marker_never_prunes() {
    let env = Env::new();
    let o = env.compact("echo 'rate limited' >&2; exit 7", &["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let report = json(&o);
    assert_eq!(report["retried"], false);
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exited with code 7: rate limited")
    );
    assert_eq!(env.runs().len(), 1);
    // The marker counts only on a failure, and only as a whole line.
    let env = Env::new();
    let o = env.compact(
        "echo 'see agentrun:context-length-exceeded docs' >&2; exit 3",
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(env.runs().len(), 1);
}

#[test]
fn the_local_fit_check_rejects_without_running_the_summarizer() {
    let env = Env::new();
    let o = env.compact("echo fitted", &["--max-input-bytes", "4000", "--json"]);
    assert_success(&o);
    let report = json(&o);
    assert_eq!(report["retry_reason"], "local fit rejection");
    assert_eq!(report["attempts"][0]["result"], "does_not_fit");
    assert_eq!(env.runs().len(), 1, "only the retry ran");
    // Too small even for the pruned input: fails after no run at all.
    let env = Env::new();
    let o = env.compact("echo fitted", &["--max-input-bytes", "10"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("over the 10-byte limit"));
    assert!(env.runs().is_empty());
}

#[test]
fn the_result_sink_wins_over_stdout_and_output_writes_the_compacted_transcript() {
    let env = Env::new();
    let out = env.path("compacted.json");
    let o = env.compact(
        "echo noise; printf 'from the sink' > \"$AGENTRUN_RESULT_SINK\"",
        &["--output", out.to_str().unwrap()],
    );
    assert_success(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "from the sink\n");
    let compacted: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(compacted["summary"], "from the sink");
    assert_eq!(compacted["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn empty_or_non_text_answers_leave_the_transcript_alone() {
    for body in ["true", "printf '\\377\\376'"] {
        let env = Env::new();
        let out = env.path("compacted.json");
        let o = env.compact(body, &["--output", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{body}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("not a usable summary"));
        assert!(!Path::new(&out).exists());
    }
}

#[test]
fn a_bad_transcript_is_a_located_error() {
    let env = Env::new();
    let t = env.transcript(
        &json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "x"}]}]}),
    );
    let o = env.agentrun(&["compact", &t, "--summarizer", "cat"]);
    assert_eq!(o.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("messages[0].content[0]: a tool_use block needs an \"id\" string"),
        "{stderr}"
    );
    let missing = env.agentrun(&["compact", "/nonexistent.json", "--summarizer", "cat"]);
    assert_eq!(missing.status.code(), Some(125));
    let usage = env.agentrun(&["compact", &t]);
    assert_eq!(usage.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("--harness"));
}

#[test]
fn artifacts_the_transcript_names_are_reused_only_when_they_hold_the_output() {
    let env = Env::new();
    // A real artifact holding exactly one result's output: the stdout stream of a run.
    let run = env.agentrun(&["run", "--json", "--", "printf", "hello\\n"]);
    assert_success(&run);
    let valid = json(&run)["artifacts"]["stdout"]
        .as_str()
        .unwrap()
        .to_owned();
    let bogus = format!("artifact://{}", "0".repeat(64));
    let t = env.transcript(&json!([
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "echo hello"}},
            {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "make"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "hello\n", "artifacts": [valid]},
            {"type": "tool_result", "tool_use_id": "t2", "content": build_log(), "artifacts": [bogus]}
        ]}
    ]));
    let cmd = env.summarizer(SIZE_LIMITED);
    let o = env.agentrun(&["compact", &t, "--summarizer", &cmd, "--json"]);
    assert_success(&o);
    let report = json(&o);
    let references = report["references"].as_array().unwrap();
    assert_eq!(references.len(), 2);
    assert_eq!(references[0]["uri"], valid.as_str());
    assert_eq!(references[0]["existing"], true);
    // The bogus one is not passed on: the output is retained and its reference reads it back.
    assert_eq!(references[1]["existing"], false);
    let uri = references[1]["uri"].as_str().unwrap();
    assert_ne!(uri, bogus);
    let read = env.agentrun(&["read", uri, "--all"]);
    assert_eq!(read.stdout, build_log().as_bytes());
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 hold exactly that output"));
    // One record keeps both: the stored output and the reused stream.
    let retained = &report["retained"];
    assert_eq!(retained["stored"], json!([uri]));
    assert_eq!(retained["kept"], json!([uri, valid]));
    let record = env.agentrun(&["show", retained["run_id"].as_str().unwrap(), "--json"]);
    assert_success(&record);
    assert_eq!(
        json(&record)["record"]["keeps"].as_array().unwrap().len(),
        2
    );
}
