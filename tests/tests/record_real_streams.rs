//! Records what the real Claude Code, Codex, OpenCode, Qwen Code, pi and Gemini CLIs print in
//! the real-CLI scenarios — a text turn, a tool turn, a failed turn, a context-length failure
//! and a resumed session; for Qwen Code, pi and Gemini CLI also a rate-limited request retried
//! to success and a persistent server error, and for Gemini CLI a prompt starting with `-`;
//! for Codex, OpenCode, pi and Gemini CLI the failure taxonomy's scenarios (`failures`: every
//! request answered with HTTP 429 without and with `Retry-After`, 503, 500, 401, a cut
//! stream; and a request never answered, the CLI stopped), decoded by
//! `core/tests/harness_real_failures.rs`; for Claude Code and Qwen Code the API failures
//! (`FAILURES`, decoded by `core/tests/harness_real_failures_claude_family.rs`) —
//! into `tests/fixtures/harness/<harness>/<cli>-<version>-<scenario>.jsonl`, with the retained
//! records agentrun reads after them: Codex's session file (the lines each run appended,
//! `…-session.jsonl`), OpenCode's `opencode export` (`…-export.json`), the session logs of
//! Qwen Code and pi (`…-log.jsonl`, the whole log as the run left it) and Gemini CLI's session
//! log (`…-session.jsonl`).
//! `core/tests/harness_real_cli.rs` (and `harness_real_failures.rs`) decodes these files, so a
//! decoder regression against the
//! real dialects fails without the CLIs installed.
//!
//! Ignored by default: `scripts/record-harness-fixtures.sh` re-records them (after a CLI
//! version change, say). The CLIs run exactly as `agentrun agent` launches them
//! (`Harness::invocation`), offline against the scripted model servers. What would differ
//! from one recording (or machine) to the next is replaced by fixed values, everything else
//! is kept as printed: the sandbox directory becomes `/tmp/agentrun-fixture`, the model
//! server's port `8080`, and each session id a fixed one (`SESSION_IDS`). Timestamps and the
//! CLIs' own message and part ids still change.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentrun_core::harness::{Harness, LaunchRequest, Stdin};
use agentrun_tests::agent_clis::{self, AgentCli};
use agentrun_tests::model_server::{ModelServer, Reply, Request, Script, TokenUsage, replies};
use serde_json::Value;

/// The fixed path the sandbox directory is replaced with.
const FIXED_ROOT: &str = "/tmp/agentrun-fixture";
/// The fixed port the model server's port is replaced with.
const FIXED_PORT: &str = "8080";

/// The fixed session id of each scenario, per CLI (the resumed run keeps its session's).
fn fixed_session_id(cli: AgentCli, scenario: &str) -> String {
    let n = match scenario {
        "text-turn" => 1,
        "tool-turn" => 2,
        "failure" => 3,
        "context-length" => 4,
        // Gemini CLI's were recorded before these had ids of their own.
        "rate-limited" if cli != AgentCli::Gemini => 6,
        "server-error" if cli != AgentCli::Gemini => 7,
        // Claude Code's and Qwen Code's failure scenarios, one id (see `FAILURES`).
        s if matches!(cli, AgentCli::Claude | AgentCli::Qwen) && failure_scenario(s).is_some() => 8,
        // The failure taxonomy's scenarios (see `failures`), by hex digit.
        "http-429" => return fixed_id(cli, 'a'),
        "http-429-retry-after" => return fixed_id(cli, 'b'),
        "http-503" => return fixed_id(cli, 'c'),
        "http-500" => return fixed_id(cli, 'd'),
        "http-401" => return fixed_id(cli, 'e'),
        "disconnect" => return fixed_id(cli, 'f'),
        "no-answer" => 9,
        // Gemini CLI's was recorded before it had an id of its own.
        "dash-prompt" if cli != AgentCli::Gemini => 0,
        _ => 5, // resume-first and resume
    };
    fixed_id(cli, char::from_digit(n, 10).unwrap_or('0'))
}

/// The fixed session id number `n` (a hex digit) of `cli`.
fn fixed_id(cli: AgentCli, n: char) -> String {
    match cli {
        AgentCli::OpenCode => format!("ses_0000000000000000000fixture{n}"),
        _ => format!("00000000-0000-4000-8000-00000000000{n}"),
    }
}

/// The usage every answer of the scripts reports.
pub const USAGE: TokenUsage = TokenUsage {
    input: 100,
    cached: 40,
    output: 20,
    reasoning: 4,
};

fn harness(cli: AgentCli) -> Harness {
    match cli {
        AgentCli::Claude => Harness::Claude,
        AgentCli::Codex => Harness::Codex,
        AgentCli::Qwen => Harness::Qwen,
        AgentCli::Pi => Harness::Pi,
        AgentCli::Gemini => Harness::Gemini,
        _ => Harness::OpenCode,
    }
}

/// The name the fixture files start with (`claude-code-2.1.332`).
fn file_prefix(cli: AgentCli) -> String {
    let name = match cli {
        AgentCli::Claude => "claude-code",
        AgentCli::Codex => "codex",
        AgentCli::Qwen => "qwen-code",
        AgentCli::Pi => "pi",
        AgentCli::Gemini => "gemini-cli",
        _ => "opencode",
    };
    format!("{name}-{}", agent_clis::version(cli))
}

fn fixture_dir(cli: AgentCli) -> PathBuf {
    let sub = match cli {
        AgentCli::Claude => "claude",
        AgentCli::Codex => "codex",
        AgentCli::Qwen => "qwen",
        AgentCli::Pi => "pi",
        AgentCli::Gemini => "gemini",
        _ => "opencode",
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/harness")
        .join(sub)
}

/// One CLI's sandbox: a private home and working directory, the model server.
struct Sandbox {
    cli: AgentCli,
    _dir: tempfile::TempDir,
    root: PathBuf,
    env: Vec<(String, String)>,
    server: ModelServer,
}

impl Sandbox {
    fn new(cli: AgentCli, script: impl Script) -> Sandbox {
        let server = ModelServer::start(cli.api(), script).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("agentrun-record-")
            .tempdir()
            .unwrap();
        let root = dir.path().to_owned();
        let home = root.join("home");
        std::fs::create_dir_all(root.join("work")).unwrap();
        let env = match cli {
            AgentCli::Claude => agent_clis::claude_env(&home, &server),
            AgentCli::Codex => agent_clis::codex_env(&home, &server, "gpt-5.5"),
            AgentCli::Qwen => agent_clis::qwen_env(&home, &server),
            AgentCli::Pi => agent_clis::pi_env(&home, &server),
            AgentCli::Gemini => agent_clis::gemini_env(&home, &server),
            _ => agent_clis::opencode_env(&home, &server),
        }
        .unwrap();
        Sandbox {
            cli,
            _dir: dir,
            root,
            env,
            server,
        }
    }

    fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.root.join("work"));
        c
    }

    /// Runs one turn as `agentrun agent` launches it; returns its stdout.
    fn turn(&self, prompt: &str, resume: Option<&str>) -> Vec<u8> {
        self.turn_with(prompt, resume, &[], None)
    }

    /// [`Sandbox::turn`] with `extra_env` over the sandbox's environment, killed after
    /// `kill_after` when it has not ended by then (what a timeout does to it).
    fn turn_with(
        &self,
        prompt: &str,
        resume: Option<&str>,
        extra_env: &[(&str, String)],
        kill_after: Option<std::time::Duration>,
    ) -> Vec<u8> {
        let mut child = self.spawn_with(prompt, resume, extra_env);
        if let Some(limit) = kill_after {
            // The pipes are drained while waiting, so a chatty CLI cannot block on them.
            let mut stdout = child.stdout.take().unwrap();
            let mut stderr = child.stderr.take().unwrap();
            let out = std::thread::spawn(move || {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut stdout, &mut b).map(|_| b)
            });
            let err = std::thread::spawn(move || {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut stderr, &mut b).map(|_| b)
            });
            let deadline = std::time::Instant::now() + limit;
            while child.try_wait().unwrap().is_none() {
                if std::time::Instant::now() >= deadline {
                    eprintln!("{}: stopped after {limit:?}", self.cli.name());
                    let _ = Command::new("kill")
                        .args(["-s", "KILL", "--", &format!("-{}", child.id())])
                        .status();
                    let _ = child.kill();
                    child.wait().unwrap();
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let stdout = out.join().unwrap().unwrap();
            let stderr = err.join().unwrap().unwrap();
            eprintln!(
                "{} stderr: {}",
                self.cli.name(),
                String::from_utf8_lossy(&stderr)
            );
            return stdout;
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            !out.stdout.is_empty(),
            "{} printed nothing: {}",
            self.cli.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Starts one turn as `agentrun agent` launches it, its prompt written.
    fn spawn(&self, prompt: &str, resume: Option<&str>) -> std::process::Child {
        self.spawn_with(prompt, resume, &[])
    }

    /// [`Sandbox::spawn`] with `extra_env` over the sandbox's environment.
    fn spawn_with(
        &self,
        prompt: &str,
        resume: Option<&str>,
        extra_env: &[(&str, String)],
    ) -> std::process::Child {
        let gemini = self.cli == AgentCli::Gemini;
        let invocation = harness(self.cli)
            .invocation(&LaunchRequest {
                prompt: prompt.to_owned(),
                resume: resume.map(str::to_owned),
                skip_git_repo_check: true,
                // Qwen Code offers its shell tool in headless mode only under yolo. Gemini CLI
                // gets a model (else it routes through a classifier request first), and the
                // permission mode that offers the shell tool.
                model: gemini.then(|| GEMINI_MODEL.to_owned()),
                harness_args: match self.cli {
                    AgentCli::Qwen | AgentCli::Gemini => {
                        vec!["--approval-mode".to_owned(), "yolo".to_owned()]
                    }
                    _ => Vec::new(),
                },
                ..LaunchRequest::default()
            })
            .unwrap();
        let mut c = self.command(&agent_clis::executable(self.cli));
        c.args(&invocation.args)
            .envs(invocation.env.iter().map(|(k, v)| (k, v)))
            .envs(extra_env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let prompt_bytes = match invocation.stdin {
            Stdin::Prompt(p) => {
                c.stdin(Stdio::piped());
                Some(p.into_bytes())
            }
            _ => {
                c.stdin(Stdio::null());
                None
            }
        };
        // Its own process group, so a stop reaches the processes it starts (Gemini CLI runs in
        // a child process it starts itself; Qwen Code runs itself again under another Node).
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let mut child = c.spawn().unwrap();
        if let Some(bytes) = prompt_bytes {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(&bytes).unwrap();
        }
        child
    }

    /// Runs one turn whose model request is never answered: once the server has it, and the
    /// CLI a few seconds more to print what it prints while waiting, the CLI is stopped with
    /// its first stop signal (as agentrun's stall timeout stops it), killed if it outlives
    /// the grace period; returns what it printed.
    fn stopped_turn(&self, prompt: &str) -> Vec<u8> {
        let mut child = self.spawn(prompt, None);
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut { stdout }, &mut bytes).map(|_| bytes)
        });
        assert!(
            self.server
                .wait_for_requests(1, std::time::Duration::from_secs(120)),
            "{} sent no model request",
            self.cli.name()
        );
        std::thread::sleep(std::time::Duration::from_secs(3));
        let signal = match self.cli {
            AgentCli::Codex => "INT",
            _ => "TERM",
        };
        let group = format!("-{}", child.id());
        let _ = Command::new("kill")
            .args(["-s", signal, "--", &group])
            .status();
        for _ in 0..100 {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Whatever outlived the grace period, as agentrun's SIGKILL to the group.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .status();
        let _ = child.wait();
        reader.join().unwrap().unwrap()
    }

    /// `opencode export ID`'s stdout.
    fn opencode_export(&self, id: &str) -> Vec<u8> {
        let out = self
            .command(&agent_clis::executable(AgentCli::OpenCode))
            .args(["export", id])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "opencode export: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Codex's session file of thread `id`.
    fn codex_session_file(&self, id: &str) -> PathBuf {
        let mut dirs = vec![self.root.join("home/.codex/sessions")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.to_string_lossy().ends_with(&format!("-{id}.jsonl")) {
                    return path;
                }
            }
        }
        panic!("no Codex session file for thread {id}");
    }

    /// The session log of Qwen Code or pi for session `id`: the one file below the CLI's
    /// sessions directory named after it.
    fn session_log(&self, id: &str) -> PathBuf {
        let (root, suffix) = match self.cli {
            AgentCli::Qwen => (
                self.root.join("home/.qwen/projects"),
                format!("/{id}.jsonl"),
            ),
            _ => (
                self.root.join("home/.pi/agent/sessions"),
                format!("_{id}.jsonl"),
            ),
        };
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.to_string_lossy().ends_with(&suffix) {
                    return path;
                }
            }
        }
        panic!("no {} session log for {id}", self.cli.name());
    }

    /// Gemini CLI's newest session log of session `id`
    /// (`~/.gemini/tmp/<project>/chats/session-<date>-<id8>.jsonl`).
    fn gemini_session_log(&self, id: &str) -> PathBuf {
        let suffix = format!("-{}.jsonl", &id[..8]);
        let tmp = self.root.join("home/.gemini/tmp");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&tmp)
            .unwrap()
            .flat_map(|p| std::fs::read_dir(p.unwrap().path().join("chats")).into_iter())
            .flatten()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(&suffix))
            .collect();
        found.sort();
        found
            .pop()
            .unwrap_or_else(|| panic!("no Gemini session log for session {id}"))
    }

    /// `bytes` with the sandbox path, the server port and the session id `id` replaced.
    fn normalize(&self, bytes: &[u8], id: &str, scenario: &str) -> Vec<u8> {
        let text = String::from_utf8(bytes.to_vec()).expect("the CLIs print UTF-8");
        let root = self.root.display().to_string();
        let base = self
            .root
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let port = self.server.addr().port().to_string();
        text.replace(&root, FIXED_ROOT)
            // Claude Code names its project directory after the path, `/` as `-`.
            .replace(&root.replace('/', "-"), &FIXED_ROOT.replace('/', "-"))
            // OpenCode also names the directory without its leading `/`, and by its name.
            .replace(
                root.trim_start_matches('/'),
                FIXED_ROOT.trim_start_matches('/'),
            )
            .replace(&base, "agentrun-fixture")
            .replace(
                &format!("127.0.0.1:{port}"),
                &format!("127.0.0.1:{FIXED_PORT}"),
            )
            .replace(
                &format!("localhost:{port}"),
                &format!("localhost:{FIXED_PORT}"),
            )
            .replace(id, &fixed_session_id(self.cli, scenario))
            // Gemini CLI's process group ids in its shell tool's output.
            .split("Process Group PGID: ")
            .enumerate()
            .map(|(i, part)| match i {
                0 => part.to_owned(),
                _ => format!(
                    "Process Group PGID: 4242{}",
                    part.trim_start_matches(|c: char| c.is_ascii_digit())
                ),
            })
            .collect::<String>()
            .into_bytes()
    }

    fn write(&self, scenario: &str, suffix: &str, bytes: &[u8]) {
        let dir = fixture_dir(self.cli);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}-{scenario}{suffix}", file_prefix(self.cli)));
        std::fs::write(&path, bytes).unwrap();
        eprintln!("recorded {} ({} bytes)", path.display(), bytes.len());
    }
}

/// The session id the CLI printed: the first `session_id` / `thread_id` / `sessionID`.
fn session_id(stream: &[u8]) -> String {
    find_session_id(stream)
        .unwrap_or_else(|| panic!("no session id in {}", String::from_utf8_lossy(stream)))
}

/// [`session_id`], `None` when the stream names none.
fn find_session_id(stream: &[u8]) -> Option<String> {
    for line in stream.split(|&b| b == b'\n') {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        // pi's first line: `{"type":"session","id":…}`.
        if v.get("type").and_then(Value::as_str) == Some("session")
            && let Some(id) = v.get("id").and_then(Value::as_str)
        {
            return Some(id.to_owned());
        }
        for key in ["session_id", "thread_id", "sessionID"] {
            if let Some(id) = v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                return Some(id.to_owned());
            }
        }
    }
    None
}

/// Records one single-run scenario.
fn record_one(cli: AgentCli, scenario: &str, script: Vec<Reply>, prompt: &str) {
    let sandbox = Sandbox::new(cli, replies(script));
    let stream = sandbox.turn(prompt, None);
    let id = session_id(&stream);
    sandbox.write(
        scenario,
        ".jsonl",
        &sandbox.normalize(&stream, &id, scenario),
    );
    sandbox.write_retained(scenario, &id, 0);
}

impl Sandbox {
    /// The retained record of the last run: Codex's session lines from byte `from`,
    /// OpenCode's export.
    fn write_retained(&self, scenario: &str, id: &str, from: usize) -> usize {
        match self.cli {
            AgentCli::Codex => {
                let all = std::fs::read(self.codex_session_file(id)).unwrap();
                let appended = &all[from.min(all.len())..];
                self.write(
                    scenario,
                    "-session.jsonl",
                    &self.normalize(appended, id, scenario),
                );
                all.len()
            }
            AgentCli::OpenCode => {
                let export = self.opencode_export(id);
                self.write(
                    scenario,
                    "-export.json",
                    &self.normalize(&export, id, scenario),
                );
                0
            }
            AgentCli::Qwen | AgentCli::Pi => {
                let log = std::fs::read(self.session_log(id)).unwrap();
                self.write(scenario, "-log.jsonl", &self.normalize(&log, id, scenario));
                0
            }
            AgentCli::Gemini => {
                let log = std::fs::read(self.gemini_session_log(id)).unwrap();
                self.write(
                    scenario,
                    "-session.jsonl",
                    &self.normalize(&log, id, scenario),
                );
                0
            }
            _ => 0,
        }
    }
}

/// The failure taxonomy's scenarios: each model request answered with the same failure, so
/// the CLI's own retries (kept few, see `Sandbox::few_retries`) meet it too.
fn failures() -> Vec<(&'static str, Reply)> {
    vec![
        (
            "http-429",
            Reply::error_retry_after(
                429,
                "rate_limit_error",
                "Rate limit reached for requests",
                None,
            ),
        ),
        (
            "http-429-retry-after",
            Reply::error_retry_after(
                429,
                "rate_limit_error",
                "Rate limit reached for requests",
                Some("1"),
            ),
        ),
        (
            "http-503",
            Reply::error_retry_after(
                503,
                "overloaded_error",
                "The server is overloaded",
                Some("0"),
            ),
        ),
        (
            "http-500",
            Reply::error_retry_after(500, "server_error", "The server had an error", Some("0")),
        ),
        (
            "http-401",
            Reply::error_retry_after(
                401,
                "invalid_request_error",
                "Incorrect API key provided: sk-offline-test",
                None,
            ),
        ),
        ("disconnect", Reply::disconnect("partial answer")),
    ]
}

impl Sandbox {
    /// Makes the CLI retry a failed request at most once or twice, quickly, where its
    /// configuration allows it (so a persistent failure is reported within seconds): Codex's
    /// provider retries, pi's own retries (its provider SDK's off). Gemini CLI already makes
    /// at most `GEMINI_MAX_ATTEMPTS`; OpenCode's retries are not configurable.
    fn few_retries(&self) {
        let home = self.root.join("home");
        match self.cli {
            AgentCli::Codex => {
                let path = home.join(".codex/config.toml");
                let config = std::fs::read_to_string(&path).unwrap();
                let config = config
                    .replace("request_max_retries = 0", "request_max_retries = 1")
                    .replace("stream_max_retries = 0", "stream_max_retries = 2");
                std::fs::write(&path, config).unwrap();
            }
            AgentCli::Pi => {
                let path = home.join(".pi/agent/settings.json");
                let mut settings: Value =
                    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                settings["retry"] = serde_json::json!({
                    "enabled": true,
                    "maxRetries": 2,
                    "baseDelayMs": 500,
                    "provider": {"maxRetries": 0},
                });
                std::fs::write(&path, settings.to_string()).unwrap();
            }
            _ => {}
        }
    }
}

/// Records the failure taxonomy's scenarios: every failure of `failures()`, then a request
/// never answered (the CLI stopped). Only the streams: what is classified is on them.
fn record_failures(cli: AgentCli) {
    for (scenario, reply) in failures() {
        let sandbox = Sandbox::new(cli, move |_: &Request| reply.clone());
        sandbox.few_retries();
        let stream = sandbox.turn("hi", None);
        let id = session_id(&stream);
        sandbox.write(
            scenario,
            ".jsonl",
            &sandbox.normalize(&stream, &id, scenario),
        );
    }
    let sandbox = Sandbox::new(cli, |_: &Request| Reply::Hang);
    sandbox.few_retries();
    let stream = sandbox.stopped_turn("hi");
    // A CLI may have printed nothing yet that names its session.
    let id = find_session_id(&stream).unwrap_or_else(|| "no session id".to_owned());
    sandbox.write(
        "no-answer",
        ".jsonl",
        &sandbox.normalize(&stream, &id, "no-answer"),
    );
}

/// The model Gemini CLI is asked for in the recordings.
const GEMINI_MODEL: &str = "gemini-2.5-flash";

/// Gemini CLI's own scenarios besides the common ones: a prompt starting with `-`, a
/// persistent HTTP 500 (the CLI's retries then the failure), a 429 then success.
fn record_gemini_extras(cli: AgentCli) {
    let served = |r: Reply| {
        r.with_usage(USAGE)
            .with_model("gemini-2.5-flash-served-001")
    };
    record_one(cli, "dash-prompt", vec![served(Reply::text("ok -x"))], "-x");
    record_one(
        cli,
        "server-error",
        vec![Reply::server_error(), Reply::server_error()],
        "hi",
    );
    record_one(
        cli,
        "rate-limited",
        vec![
            Reply::rate_limited(),
            served(Reply::text("after the retry")),
        ],
        "hi",
    );
}

/// The failure scenarios (`failure_scenario` gives their replies): each status as a real API
/// sends it ([`Reply::status`]), a request never answered, a stream cut mid-answer and an API
/// that cannot be reached. `record_claude_code` and `record_qwen_code` leave them out
/// (scripts/record-harness-fixtures.sh runs both, by name prefix).
const FAILURES: &[&str] = &[
    "rate-limited-retry-after",
    "rate-limited-no-retry-after",
    "overloaded-529",
    "overloaded-503",
    "server-error-500",
    "auth-401",
    "no-answer",
    "no-answer-stopped",
    "disconnect",
    "unreachable",
];

/// The reply to every request of failure scenario `name` (the CLI may retry on its own).
fn failure_scenario(name: &str) -> Option<Reply> {
    Some(match name {
        "rate-limited-retry-after" => Reply::status(429, Some(1)),
        "rate-limited-no-retry-after" => Reply::status(429, None),
        "overloaded-529" => Reply::status(529, None),
        "overloaded-503" => Reply::status(503, None),
        "server-error-500" => Reply::status(500, None),
        "auth-401" => Reply::status(401, None),
        "no-answer" | "no-answer-stopped" => Reply::Hang,
        // Claude Code asks again without streaming when a stream breaks: that one is cut too.
        "disconnect" => Reply::disconnect("half an ans"),
        // The server is there, but the CLI is pointed at a port nothing listens on.
        "unreachable" => Reply::Hang,
        _ => return None,
    })
}

/// Records the failure scenarios with the CLI's own retries cut to one (Claude Code:
/// `CLAUDE_CODE_MAX_RETRIES=1`, none for the cut stream so its own failure ends the turn; its
/// request timeout 5 s so an unanswered request ends), each stopped after three minutes at most;
/// `no-answer-stopped` is stopped after 10 s, before any request timeout of the CLI, as a
/// stall timeout stops it.
/// `AGENTRUN_RECORD_SCENARIOS` (comma-separated) records only those.
fn record_api_failures(cli: AgentCli) {
    let only = std::env::var("AGENTRUN_RECORD_SCENARIOS").ok();
    for &scenario in FAILURES {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|s| s == scenario))
        {
            continue;
        }
        let reply = failure_scenario(scenario).unwrap();
        let sandbox = Sandbox::new(cli, move |_: &agentrun_tests::model_server::Request| {
            reply.clone()
        });
        let mut env: Vec<(&str, String)> = Vec::new();
        let stop = if scenario == "no-answer-stopped" {
            10
        } else {
            180
        };
        if cli == AgentCli::Claude {
            let retries = if scenario == "disconnect" { "0" } else { "1" };
            env.push(("CLAUDE_CODE_MAX_RETRIES", retries.to_owned()));
            if scenario != "no-answer-stopped" {
                env.push(("API_TIMEOUT_MS", "5000".to_owned()));
            }
            if scenario == "unreachable" {
                env.push(("ANTHROPIC_BASE_URL", "http://127.0.0.1:9".to_owned()));
            }
        }
        if cli == AgentCli::Qwen {
            // Qwen Code's own retries cut to one, its request timeout to 5 s
            // (`model.generationConfig`).
            let path = sandbox.root.join("home/.qwen/settings.json");
            let mut settings: Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let timeout = if scenario == "no-answer-stopped" {
                600_000
            } else {
                5000
            };
            settings["model"]["generationConfig"] = serde_json::json!({
                "maxRetries": 1,
                "retryInitialDelayMs": 500,
                "retryMaxDelayMs": 2000,
                "timeout": timeout,
                "streamIdleTimeoutMs": timeout,
            });
            std::fs::write(&path, settings.to_string()).unwrap();
            if scenario == "unreachable" {
                env.push(("OPENAI_BASE_URL", "http://127.0.0.1:9/v1".to_owned()));
            }
        }
        let stream =
            sandbox.turn_with("hi", None, &env, Some(std::time::Duration::from_secs(stop)));
        let id = session_id(&stream);
        sandbox.write(
            scenario,
            ".jsonl",
            &sandbox.normalize(&stream, &id, scenario),
        );
    }
}

fn record(cli: AgentCli) {
    let usage = USAGE;
    record_one(
        cli,
        "text-turn",
        vec![Reply::text("Hello from the scripted model.").with_usage(usage)],
        "say hello",
    );
    record_one(
        cli,
        "tool-turn",
        vec![
            cli.shell_call().with_usage(usage),
            Reply::text("all done").with_usage(usage),
        ],
        "make the file",
    );
    record_one(cli, "failure", vec![cli.final_error()], "hi");
    if matches!(cli, AgentCli::Qwen | AgentCli::Pi) {
        record_one(
            cli,
            "rate-limited",
            vec![
                Reply::error(429, "rate_limit_error", "slow down"),
                Reply::text("after the wait").with_usage(usage),
            ],
            "hi",
        );
        let outage = |_: &agentrun_tests::model_server::Request| {
            Reply::error(500, "server_error", "the scripted outage")
        };
        let sandbox = Sandbox::new(cli, outage);
        let stream = sandbox.turn("hi", None);
        let id = session_id(&stream);
        sandbox.write(
            "server-error",
            ".jsonl",
            &sandbox.normalize(&stream, &id, "server-error"),
        );
        sandbox.write_retained("server-error", &id, 0);
    }
    record_one(
        cli,
        "context-length",
        vec![Reply::prompt_too_long(250_000, 200_000)],
        "hi",
    );
    // A session, then the same session resumed: both runs recorded.
    let sandbox = Sandbox::new(
        cli,
        replies([
            Reply::text("first answer").with_usage(usage),
            Reply::text("second answer").with_usage(usage),
        ]),
    );
    let first = sandbox.turn("remember 42", None);
    let id = session_id(&first);
    sandbox.write(
        "resume-first",
        ".jsonl",
        &sandbox.normalize(&first, &id, "resume"),
    );
    let end = sandbox.write_retained("resume-first", &id, 0);
    let second = sandbox.turn("what was it?", Some(&id));
    assert_eq!(session_id(&second), id, "the resumed run keeps the session");
    sandbox.write(
        "resume",
        ".jsonl",
        &sandbox.normalize(&second, &id, "resume"),
    );
    sandbox.write_retained("resume", &id, end);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_codex_failures() {
    record_failures(AgentCli::Codex);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_opencode_failures() {
    record_failures(AgentCli::OpenCode);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_pi_failures() {
    record_failures(AgentCli::Pi);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_gemini_cli_failures() {
    record_failures(AgentCli::Gemini);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_claude_code() {
    record(AgentCli::Claude);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_claude_code_failures() {
    record_api_failures(AgentCli::Claude);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_qwen_code_failures() {
    record_api_failures(AgentCli::Qwen);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_codex() {
    record(AgentCli::Codex);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_opencode() {
    record(AgentCli::OpenCode);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_qwen_code() {
    record(AgentCli::Qwen);
}

/// A prompt that starts with `-`: Qwen Code takes it as `--prompt=<text>`, pi after a leading
/// space (it has no `--`).
fn record_dash_prompt(cli: AgentCli) {
    record_one(
        cli,
        "dash-prompt",
        vec![Reply::text("ok -x").with_usage(USAGE)],
        "-x",
    );
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_qwen_code_dash_prompt() {
    record_dash_prompt(AgentCli::Qwen);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_pi_dash_prompt() {
    record_dash_prompt(AgentCli::Pi);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_pi() {
    record(AgentCli::Pi);
}

#[test]
#[ignore = "re-records the fixtures; run by scripts/record-harness-fixtures.sh"]
fn record_gemini_cli() {
    record(AgentCli::Gemini);
    record_gemini_extras(AgentCli::Gemini);
}
