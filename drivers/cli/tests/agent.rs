//! End-to-end scenarios of `agentrun agent` against fake harness CLIs
//! (`tests/support/fake_harness.rs`, symlinked under each harness's program name into a directory
//! put first on `PATH`). The fake checks the argv, environment and stdin each harness is launched
//! with (docs/interpretation.md, "Registry") and replays a recorded fixture from
//! `tests/fixtures/harness/`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[path = "support/compile.rs"]
mod compile;

/// The fake harness executable (`tests/support/fake_harness.rs`).
fn fake_harness() -> &'static std::path::Path {
    compile::support_program("fake_harness")
}

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, assert_exit_says, fixture, stderr, stdout};

/// A sandbox with the fake harnesses on `PATH`.
struct Env {
    sandbox: Sandbox,
    bin: PathBuf,
}

impl Env {
    fn new() -> Self {
        let sandbox = Sandbox::new();
        let bin = sandbox.fake_harnesses(fake_harness());
        Self { sandbox, bin }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.sandbox.path(name)
    }

    /// `agentrun --store … <args>` with only the fake harnesses on `PATH` and the fake's
    /// prompt set to `PROMPT`.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.sandbox.cmd(args);
        c.env("PATH", &self.bin)
            .env("FAKE_PROMPT", "fix the bug")
            .env("XDG_DATA_HOME", self.path("data"))
            .env("CODEX_HOME", self.path("codex"))
            .env_remove("GROK_DISABLE_AUTOUPDATER")
            .env_remove("AGY_CLI_DISABLE_AUTO_UPDATE")
            .env_remove("MUSE_NO_AUTO_UPDATE")
            .env_remove("OPENCODE_DISABLE_AUTOUPDATE");
        c
    }

    /// `agentrun agent NAME <flags> -- fix the bug`, replaying `fixture`.
    fn agent(&self, name: &str, flags: &[&str], fixture_path: &str) -> Command {
        let mut args = vec!["agent", name];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "fix", "the", "bug"]);
        let mut c = self.cmd(&args);
        c.env("FAKE_FIXTURE", fixture(fixture_path));
        c
    }
}

/// `agentrun interpret` of the same fixture: `agent` must print exactly what it prints.
fn interpret(env: &Env, harness: &str, extra: &[&str], fixture_path: &str) -> String {
    let fixture = fixture(fixture_path);
    let mut args = vec!["interpret", "--harness", harness];
    args.extend_from_slice(extra);
    args.push(fixture.to_str().unwrap());
    let o = env.cmd(&args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

struct Case {
    harness: &'static str,
    fixture: &'static str,
    /// Flags to `agent`; the fake checks the argv they must produce.
    flags: &'static [&'static str],
    models: &'static str,
    final_message: &'static str,
}

#[test]
fn each_harness_prints_its_final_message_and_models() {
    let cases = [
        Case {
            harness: "claude",
            fixture: "claude/agentrun-golden-synthetic.jsonl",
            flags: &["--model", "opus", "--effort", "high", "--resume", "s-1"],
            models: "observed models: child-haiku, false-parent, root-opus, next-sonnet, \
                     usage-only-model",
            final_message: "root answer",
        },
        Case {
            harness: "grok",
            fixture: "grok/agentrun-messages-synthetic.jsonl",
            flags: &["--model", "grok-4", "--effort", "low", "--resume", "g-1"],
            models: "observed models: grok-code-fast-1",
            final_message: "Two files.",
        },
        Case {
            harness: "agy",
            fixture: "antigravity/agentrun-stream-synthetic.jsonl",
            // Antigravity has no effort flag: it is left out of the argv.
            flags: &[
                "--model",
                "gemini-3-pro",
                "--effort",
                "high",
                "--resume",
                "c-1",
            ],
            models: "observed models: gemini-3-pro, gemini-3-flash, gemini-3-subagent",
            final_message: "README updated and pushed.",
        },
        Case {
            harness: "codex",
            fixture: "codex/agentrun-resume-synthetic.jsonl",
            flags: &[
                "--model",
                "gpt-5-codex",
                "--effort",
                "medium",
                "--resume",
                "t-1",
            ],
            models: "observed models: (none)",
            final_message: "second answer",
        },
        Case {
            harness: "muse",
            fixture: "muse/agentrun-exec-synthetic.jsonl",
            flags: &["--model", "muse-large"],
            models: "models (retained record): muse-large-2026, muse-small-2026",
            final_message: "All tests pass.",
        },
        Case {
            harness: "opencode",
            fixture: "opencode/takopi-opencode_stream_success.jsonl",
            flags: &[
                "--model",
                "anthropic/claude-sonnet-4-5",
                "--resume",
                "ses_prev",
            ],
            models: "models (retained record): anthropic/claude-sonnet-4-5",
            final_message: "```\nhello\n```",
        },
    ];
    for case in cases {
        let env = Env::new();
        // Muse's session log and Codex's session file where agentrun looks for them;
        // OpenCode's export from the fake.
        let muse_log = fixture("muse/agentrun-session-log-synthetic.jsonl");
        let muse_dir = env.path("data/muse/sessions/2026/11/30/muse-sess-42");
        std::fs::create_dir_all(&muse_dir).unwrap();
        std::fs::copy(&muse_log, muse_dir.join("session.jsonl")).unwrap();
        let codex_dir = env.path("codex/sessions/2026/11/30");
        std::fs::create_dir_all(&codex_dir).unwrap();
        let codex_session = codex_dir.join("rollout-2026-11-30T10-00-00-codex-first-thread.jsonl");
        std::fs::write(
            &codex_session,
            "{\"type\":\"session_meta\",\"payload\":{\"id\":\"codex-first-thread\"}}\n\
             {\"type\":\"turn_context\",\"payload\":{\"model\":\"gpt-5-codex\"}}\n",
        )
        .unwrap();
        let export = fixture("opencode/agentrun-session-export-synthetic.json");
        let mut c = env.agent(case.harness, case.flags, case.fixture);
        c.env("FAKE_EXPORT", &export)
            .env("FAKE_EXPORT_SESSION", "ses_494719016ffe85dkDMj0FPRbHK");
        for (flag, var) in [
            ("--model", "FAKE_MODEL"),
            ("--effort", "FAKE_EFFORT"),
            ("--resume", "FAKE_RESUME"),
        ] {
            if let Some(i) = case.flags.iter().position(|f| *f == flag) {
                c.env(var, case.flags[i + 1]);
            }
        }
        let o = c.output().unwrap();
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{}: {out}\n{err}", case.harness);
        assert!(out.contains(case.models), "{}: {out}", case.harness);
        assert!(
            out.ends_with(&format!("final message:\n{}\n", case.final_message)),
            "{}: {out}",
            case.harness
        );
        assert!(!err.contains("warning"), "{}: {err}", case.harness);
        // A resumed run says when its usage is the session's running total, which
        // `agentrun interpret` (not knowing whether the stream was a resume) cannot.
        let (usage, out): (Vec<&str>, Vec<&str>) = out
            .split_inclusive('\n')
            .partition(|l| l.starts_with("usage: "));
        let out = out.concat();
        if case.harness == "claude" {
            assert_eq!(
                usage,
                ["usage: 10 input tokens, 20 output tokens, $0.1234 (session running total)\n"]
            );
        }
        // Otherwise exactly what `agentrun interpret` prints for the same stream (and record).
        let retained = match case.harness {
            "muse" => vec!["--retained", muse_log.to_str().unwrap()],
            "opencode" => vec!["--retained", export.to_str().unwrap()],
            "codex" => vec!["--retained", codex_session.to_str().unwrap()],
            _ => vec![],
        };
        assert_eq!(
            out,
            interpret(&env, case.harness, &retained, case.fixture),
            "{}",
            case.harness
        );
        // The run summary and the read command for stdout on stderr.
        assert!(err.contains(" succeeded (exit 0); stdout "), "{err}");
        assert!(
            err.contains("agentrun: stdout: agentrun read artifact://"),
            "{err}"
        );
    }
}

#[test]
fn progress_is_printed_while_the_harness_runs() {
    let env = Env::new();
    let marker = env.path("seen-progress");
    let mut child = env
        .agent("claude", &[], "claude/agentrun-golden-synthetic.jsonl")
        .env("FAKE_DELAY_MS", "5")
        // The fake does not exit before the test saw progress (it gives up after 20 s, exit 91).
        .env("FAKE_WAIT_FOR", &marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in reader.lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(first, "session started");
    // The harness is still running: nothing about the completion yet.
    assert!(child.try_wait().unwrap().is_none());
    std::fs::write(&marker, b"").unwrap();
    let rest: Vec<String> = rx.iter().collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{rest:?}");
    assert!(rest.contains(&"final message:".to_owned()), "{rest:?}");
}

#[test]
fn security_prints_model_lines() {
    let env = Env::new();
    let o = env
        .agent(
            "claude",
            &["--security"],
            "claude/agentrun-golden-synthetic.jsonl",
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let models: Vec<&str> = out.lines().filter(|l| l.starts_with("Model: ")).collect();
    assert_eq!(
        models,
        ["Model: root-opus", "Model: next-sonnet", "Model: root-opus"]
    );
    // Codex: the requested-model wording.
    let o = env
        .agent(
            "codex",
            &["--security", "--model", "gpt-5-codex"],
            "codex/claude-codes-hello_world.jsonl",
        )
        .env("FAKE_MODEL", "gpt-5-codex")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("Model: gpt-5-codex (requested)\n"));
}

#[test]
fn a_refusal_under_security_exits_1() {
    let env = Env::new();
    let fixture_path = "claude/agentrun-cyber-refusals-synthetic.jsonl";
    let o = env
        .agent("claude", &["--security"], fixture_path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("status: refused (claude-cyber)\n"));
    // Without the security policy the same session succeeds.
    let o = env.agent("claude", &[], fixture_path).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_failed_turn_or_a_failing_harness_exits_1() {
    let env = Env::new();
    let o = env
        .agent("codex", &[], "codex/openagent-codex_v0142_failure.jsonl")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("status: turn failed: "));
    // A clean stream but a non-zero exit: execution failed, with the stderr tail (whose
    // "quota" names a rate limit).
    let o = env
        .agent("grok", &[], "grok/agentrun-messages-synthetic.jsonl")
        .env("FAKE_EXIT", "3")
        .env("FAKE_STDERR", "grok: quota exhausted")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o)
            .contains("status: execution failed (rate_limited): grok exited with code 3: grok: quota exhausted\n"),
        "{}",
        stdout(&o)
    );
}

/// A harness that exits 0 before its stream's final result did not finish its session: no
/// exit 0, no "succeeded" in the JSON.
#[test]
fn a_session_cut_off_before_its_final_result_exits_1() {
    let env = Env::new();
    let full = std::fs::read(fixture("claude/morpheus-claude_stream.jsonl")).unwrap();
    let cut: Vec<&[u8]> = full.split_inclusive(|b| *b == b'\n').take(3).collect();
    let path = env.path("cut.jsonl");
    std::fs::write(&path, cut.concat()).unwrap();
    for json in [false, true] {
        let flags: &[&str] = if json { &["--json"] } else { &[] };
        let mut c = env.agent("claude", flags, "claude/morpheus-claude_stream.jsonl");
        let o = c.env("FAKE_FIXTURE", &path).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let text = stdout(&o);
        if json {
            let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert_eq!(v["outcome"]["terminal_seen"], false, "{v}");
            assert_eq!(v["outcome"]["status"]["status"], "turn_failed", "{v}");
            assert_eq!(v["outcome"]["failure_kind"], "cut_off", "{v}");
        } else {
            assert!(
                text.contains(
                    "status: turn failed (cut_off): the stream ended without a final result"
                ),
                "{text}"
            );
        }
    }
}

/// The failure kind is in the status line and the JSON of `agent` and `interpret`, with the
/// harness's own retries as progress; stderr names it where the stream does not; a success
/// has none.
#[test]
fn failure_kinds_are_in_the_status_line_and_the_json() {
    let env = Env::new();
    let limited = "claude/claude-code-2.1.332-rate-limited-retry-after.jsonl";
    let o = env
        .agent("claude", &[], limited)
        .env("FAKE_EXIT", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("status: turn failed (rate_limited): API Error: Request rejected (429)"),
        "{text}"
    );
    assert!(text.contains("\nrate limited, retry 1/1 in 1."), "{text}");
    let o = env
        .agent("claude", &["--json"], limited)
        .env("FAKE_EXIT", "1")
        .output()
        .unwrap();
    let text = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["outcome"]["failure_kind"], "rate_limited", "{last}");
    assert!(
        last["outcome"]["retry_after"]["delay_ms"].is_u64(),
        "{last}"
    );
    let o = env
        .cmd(&[
            "interpret",
            "--harness",
            "claude",
            "--json",
            fixture(limited).to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["outcome"]["failure_kind"], "rate_limited", "{last}");
    // A clean stream, a failed process, the API error only on stderr.
    let o = env
        .agent(
            "grok",
            &["--json"],
            "grok/agentrun-messages-synthetic.jsonl",
        )
        .env("FAKE_EXIT", "3")
        .env("FAKE_STDERR", "Error: 503 Service Unavailable")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["outcome"]["status"]["status"], "execution_failed",
        "{last}"
    );
    assert_eq!(last["outcome"]["failure_kind"], "overloaded", "{last}");
    // A success carries none.
    let o = env
        .agent(
            "grok",
            &["--json"],
            "grok/agentrun-messages-synthetic.jsonl",
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert!(last["outcome"].get("failure_kind").is_none(), "{last}");
}

#[test]
fn the_fake_fails_loudly_when_the_launch_differs() {
    let env = Env::new();
    // The fake expects a model agentrun was not asked for.
    let o = env
        .agent("claude", &[], "claude/agentrun-golden-synthetic.jsonl")
        .env("FAKE_MODEL", "opus")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains(
            "status: execution failed: claude exited with code 90: fake claude: argv mismatch"
        ),
        "{out}"
    );
    // OpenCode reads its prompt on stdin: the fake checks it.
    let o = env
        .agent(
            "opencode",
            &[],
            "opencode/takopi-opencode_stream_success.jsonl",
        )
        .env("FAKE_PROMPT", "another prompt")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("stdin mismatch"), "{}", stdout(&o));
}

#[test]
fn a_missing_or_unexecutable_harness_is_127_or_126_with_its_name() {
    let env = Env::new();
    std::fs::remove_file(env.path("bin/codex")).unwrap();
    let o = env
        .agent("codex", &[], "codex/claude-codes-hello_world.jsonl")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    let err = stderr(&o);
    assert!(err.contains("\"codex\" was not found on PATH"), "{err}");
    assert!(stdout(&o).is_empty());

    std::fs::remove_file(env.path("bin/agy")).unwrap();
    std::fs::write(env.path("bin/agy"), b"not a program").unwrap();
    let o = env
        .agent("agy", &[], "antigravity/agentrun-stream-synthetic.jsonl")
        .output()
        .unwrap();
    assert_exit_says(&o, 126, "\"agy\" cannot be executed");
}

#[test]
fn a_timeout_interrupts_with_the_models_so_far_and_exits_124() {
    let env = Env::new();
    // The fake stalls after its first events; --timeout stops it.
    let stalled = |flags: &[&str]| {
        let flags = [&["--timeout", "1s"][..], flags].concat();
        let fixture = "claude/agentrun-golden-synthetic.jsonl";
        let mut cmd = env.agent("claude", &flags, fixture);
        let o = cmd.env("FAKE_SLEEP_MS", "30000").output().unwrap();
        assert_eq!(o.status.code(), Some(124), "{}", stderr(&o));
        o
    };
    let o = stalled(&[]);
    let out = stdout(&o);
    assert!(
        out.contains("observed models: child-haiku, false-parent"),
        "{out}"
    );
    assert!(out.ends_with("status: interrupted (timed out)\n"), "{out}");
    assert!(!out.contains("final message"), "{out}");
    assert!(
        stderr(&o).contains(" cancelled (timed out); stdout "),
        "{}",
        stderr(&o)
    );
    // The same under --json: the interruption in place of the completion.
    let out = stdout(&stalled(&["--json"]));
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["interrupted"], "timed_out", "{last:#}");
    assert!(
        last.get("report").is_none() && last.get("outcome").is_none(),
        "{last:#}"
    );
    assert_eq!(last["run"]["status"], "cancelled", "{last:#}");
    assert_eq!(last["run"]["reason"], "timed out", "{last:#}");
    assert_eq!(last["run"]["outcome"], "timed_out", "{last:#}");
}

#[test]
fn the_retained_artifacts_are_readable_with_agentrun_read() {
    let env = Env::new();
    let fixture_path = "codex/agentrun-resume-synthetic.jsonl";
    let o = env
        .agent("codex", &["--json"], fixture_path)
        .env("FAKE_STDERR", "codex: some diagnostics")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["progress"], "session started");
    let last = lines.last().unwrap();
    assert_eq!(last["harness"], "codex");
    assert_eq!(last["outcome"]["final_message"], "second answer");
    let run = &last["run"];
    assert_eq!(run["outcome"], "completed");
    // The library's serialization of the turn: the run in brief, as `run --json` heads it.
    assert_eq!(run["status"], "succeeded", "{last:#}");
    assert_eq!(run["reason"], "exit 0", "{last:#}");
    assert!(run["pid"].as_u64().is_some_and(|p| p > 0), "{last:#}");
    assert_eq!(last["truncated_lines"], 0, "{last:#}");
    assert!(last.get("interrupted").is_none(), "{last:#}");
    let show = env
        .cmd(&["show", "--json", run["run_id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(show.status.success(), "{}", stderr(&show));
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["artifacts"], run["artifacts"], "{last:#}");
    assert!(run["artifacts"]["manifest"].is_string(), "{last:#}");
    let read = |uri: &str| {
        let o = env.cmd(&["read", uri, "--all"]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        o.stdout
    };
    let stdout_uri = run["artifacts"]["stdout"].as_str().unwrap();
    assert_eq!(
        read(stdout_uri),
        std::fs::read(fixture(fixture_path)).unwrap()
    );
    let stderr_uri = run["artifacts"]["stderr"].as_str().unwrap();
    assert_eq!(read(stderr_uri), b"codex: some diagnostics\n");
    // The human footer names the same commands.
    let err = stderr(&o);
    assert!(
        err.contains(&format!("agentrun read {stdout_uri}")),
        "{err}"
    );
}

#[test]
fn an_unreadable_retained_record_is_absent_and_a_warning() {
    let env = Env::new();
    // No session log under XDG_DATA_HOME.
    let o = env
        .agent("muse", &[], "muse/agentrun-exec-synthetic.jsonl")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        err.contains("agentrun: warning: the Muse session log "),
        "{err}"
    );
    assert!(out.contains("observed models: (none)\n"), "{out}");
    assert!(!out.contains("retained record"), "{out}");
    assert!(
        out.contains("warning: the Muse session log was not available"),
        "{out}"
    );
    // An export that is not JSON.
    let o = env
        .agent(
            "opencode",
            &[],
            "opencode/takopi-opencode_stream_success.jsonl",
        )
        .env(
            "FAKE_EXPORT",
            fixture("opencode/noldor-opencode-events.jsonl"),
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the OpenCode session export is unreadable"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usage_errors_exit_125() {
    let env = Env::new();
    for args in [
        &["agent", "nosuch", "--", "x"][..],
        &["agent", "claude"][..],
        &["agent", "claude", "--timeout", "0s", "--", "x"][..],
    ] {
        let o = env.cmd(args).output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stderr(&o));
    }
}

/// The harnesses that take the prompt as an argument, each with a fixture to replay.
const ARGV_HARNESSES: [(&str, &str); 5] = [
    ("claude", "claude/agentrun-golden-synthetic.jsonl"),
    ("grok", "grok/agentrun-messages-synthetic.jsonl"),
    ("agy", "antigravity/agentrun-stream-synthetic.jsonl"),
    ("codex", "codex/agentrun-resume-synthetic.jsonl"),
    ("muse", "muse/agentrun-exec-synthetic.jsonl"),
];

#[test]
fn harness_args_reach_every_harness_verbatim_before_the_prompt() {
    for (harness, fixture_path) in ARGV_HARNESSES {
        let env = Env::new();
        let o = env
            .agent(
                harness,
                &[
                    "--harness-arg=--permission-mode",
                    "--harness-arg",
                    "acceptEdits",
                    "--harness-arg",
                    "-x y",
                ],
                fixture_path,
            )
            .env("FAKE_HARNESS_ARGS", "--permission-mode\nacceptEdits\n-x y")
            .env("XDG_DATA_HOME", env.path("data"))
            .output()
            .unwrap();
        // The fake exits 90 when its argv differs from the expected one.
        assert_eq!(o.status.code(), Some(0), "{harness}: {}", stderr(&o));
    }
}

#[test]
fn prompts_that_look_like_flags_reach_every_harness_as_data() {
    for (harness, fixture_path) in ARGV_HARNESSES {
        for prompt in ["-x", "--help", "--help me", "help", "resume", "-p"] {
            let env = Env::new();
            let o = env
                .cmd(&["agent", harness, "--", prompt])
                .env("FAKE_PROMPT", prompt)
                .env("FAKE_FIXTURE", fixture(fixture_path))
                .output()
                .unwrap();
            // The fake exits 90 unless the prompt is where its harness reads it as data
            // (after `--`; Grok: joined as `--single=PROMPT`).
            assert_eq!(
                o.status.code(),
                Some(0),
                "{harness} {prompt:?}: {}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn the_effort_help_names_the_harnesses_that_refuse_or_ignore_it() {
    let env = Env::new();
    let o = env.cmd(&["agent", "--help"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Collapse the help's line wrapping before matching.
    let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("refused for qwen and gemini") && help.contains("ignored by agy and muse"),
        "{help}"
    );
    // `--retained` names every harness's record.
    for command in ["agent", "interpret"] {
        let o = env.cmd(&[command, "--help"]).output().unwrap();
        let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("Muse, Qwen Code, pi or Gemini CLI session log"),
            "{command}: {help}"
        );
    }
}

#[test]
fn a_resume_id_that_could_be_a_flag_or_a_path_is_a_usage_error_before_launch() {
    for (harness, id) in [
        ("claude", "--help"),
        ("codex", "-x"),
        ("gemini", "../s"),
        ("pi", "s.jsonl"),
        ("pi", "a/b"),
        ("qwen", ""),
    ] {
        let env = Env::new();
        let flag = format!("--resume={id}");
        let o = env
            .cmd(&["agent", harness, &flag, "--", "fix the bug"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(125),
            "{harness} {id:?}: {}",
            stderr(&o)
        );
        let err = stderr(&o);
        assert!(
            err.contains(&format!("invalid resume id {id:?} for {harness}")),
            "{err}"
        );
        // Refused before launch: the fake (exit 90 on any argv) never ran.
        assert!(!err.contains("fake "), "{err}");
    }
}

#[test]
fn an_effort_that_is_not_a_plain_word_is_a_usage_error_before_launch() {
    for (harness, effort) in [
        ("codex", "high\" model=\"evil"),
        ("codex", "High"),
        ("codex", "x-high"),
        ("claude", "--help"),
        ("grok", "-x"),
        ("opencode", "a b"),
    ] {
        let env = Env::new();
        let flag = format!("--effort={effort}");
        let o = env
            .cmd(&["agent", harness, &flag, "--", "fix the bug"])
            .env("FAKE_EFFORT", effort)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(125),
            "{harness} {effort:?}: {}",
            stderr(&o)
        );
        let err = stderr(&o);
        assert!(
            err.contains(&format!(
                "invalid reasoning effort {effort:?} for {harness}"
            )),
            "{err}"
        );
        // Refused before launch: the fake (exit 90 on any argv) never ran.
        assert!(!err.contains("fake "), "{err}");
    }
    // The documented words pass.
    let env = Env::new();
    let o = env
        .agent(
            "codex",
            &["--effort", "xhigh"],
            "codex/agentrun-resume-synthetic.jsonl",
        )
        .env("FAKE_EFFORT", "xhigh")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
