//! `agentrun agent` on the real Claude Code, Codex and OpenCode CLIs, run offline against the
//! scripted model servers of `agentrun_tests::model_server` (the CLIs are installed at pinned
//! versions by `scripts/install-agent-clis.sh` on first use). Each scenario checks what a user
//! sees — session id, final message, models, per-run usage, status and exit code — and what
//! the CLI sent to the model (the prompt verbatim, the tool results, the model, the effort).

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agentrun_tests::agent_clis::{self, AgentCli, OPENCODE_TEST_MODEL};
use agentrun_tests::model_server::{Api, ModelServer, Reply, Request, TokenUsage, replies};
use serde_json::{Value, json};

#[path = "support/sandbox.rs"]
mod sandbox;

/// A private home, working directory and store for one CLI session.
struct Sandbox {
    sandbox: sandbox::Sandbox,
    env: Vec<(String, String)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cli {
    Claude,
    Codex,
    OpenCode,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::OpenCode => "opencode",
        }
    }
    fn agent_cli(self) -> AgentCli {
        match self {
            Cli::Claude => AgentCli::Claude,
            Cli::Codex => AgentCli::Codex,
            Cli::OpenCode => AgentCli::OpenCode,
        }
    }
    fn api(self) -> Api {
        self.agent_cli().api()
    }
    fn shell_call(self) -> Reply {
        self.agent_cli().shell_call()
    }
    fn final_error(self) -> Reply {
        self.agent_cli().final_error()
    }
    /// Flags every run of this CLI needs here (Codex: the temp dir is no Git repository).
    fn base_flags(self) -> &'static [&'static str] {
        match self {
            Cli::Codex => &["--skip-git-repo-check"],
            _ => &[],
        }
    }
}

impl Sandbox {
    fn new(cli: Cli, server: &ModelServer) -> Sandbox {
        let sandbox = sandbox::Sandbox::new();
        let home = sandbox.path("home");
        std::fs::create_dir_all(sandbox.path("work")).unwrap();
        let env = match cli {
            Cli::Claude => agent_clis::claude_env(&home, server),
            Cli::Codex => agent_clis::codex_env(&home, server, "gpt-5.5"),
            Cli::OpenCode => agent_clis::opencode_env(&home, server),
        }
        .unwrap();
        Sandbox { sandbox, env }
    }

    fn work(&self) -> PathBuf {
        self.sandbox.path("work")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = self.sandbox.cmd(args);
        c.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.work());
        c
    }

    /// `agentrun agent CLI <base flags> <flags> -- PROMPT`.
    fn agent(&self, cli: Cli, flags: &[&str], prompt: &str) -> Output {
        let mut args = vec!["agent", cli.name()];
        args.extend_from_slice(cli.base_flags());
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", prompt]);
        self.command(&args).output().unwrap()
    }

    /// The same with `--json`: the final object.
    fn agent_json(&self, cli: Cli, flags: &[&str], prompt: &str) -> (Output, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(flags);
        let o = self.agent(cli, &all, prompt);
        let last = text(&o.stdout)
            .lines()
            .last()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        (o, last)
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

/// The last user text block of a model request: where each CLI puts the prompt.
fn last_user_text(request: &Request) -> String {
    let texts = request.user_texts();
    let last = texts.last().cloned().unwrap_or_default();
    last.rsplit('\n').next().unwrap_or("").to_owned()
}

/// The model requests that carry the conversation (OpenCode's and Codex's only kind).
fn conversation(server: &ModelServer) -> Vec<Request> {
    server.model_requests()
}

fn server(cli: Cli, script: Vec<Reply>) -> ModelServer {
    ModelServer::start(cli.api(), replies(script)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Every CLI: the same scenarios
// ---------------------------------------------------------------------------------------------

fn prompts_reach_the_model_verbatim(cli: Cli) {
    let prompts = ["-x", "--help me", "help", "resume"];
    let server = server(
        cli,
        prompts
            .iter()
            .map(|p| Reply::text(format!("ok {p}")))
            .collect(),
    );
    let sandbox = Sandbox::new(cli, &server);
    for (n, prompt) in prompts.iter().enumerate() {
        let o = sandbox.agent(cli, &[], prompt);
        assert_eq!(o.status.code(), Some(0), "{prompt:?}: {}", describe(&o));
        let out = text(&o.stdout);
        assert!(
            out.ends_with(&format!("final message:\nok {prompt}\n")),
            "{prompt:?}: {}",
            describe(&o)
        );
        let requests = conversation(&server);
        assert_eq!(requests.len(), n + 1, "one model request per turn");
        assert_eq!(last_user_text(&requests[n]), *prompt);
    }
    // Without `--`, the prompt words after the harness name are the prompt too.
    let server = self::server(cli, vec![Reply::text("ok")]);
    let sandbox = Sandbox::new(cli, &server);
    let mut args = vec!["agent", cli.name()];
    args.extend_from_slice(cli.base_flags());
    args.extend_from_slice(&["help", "me"]);
    let o = sandbox.command(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(last_user_text(&conversation(&server)[0]), "help me");
}

fn a_tool_turn_runs_for_real_and_reports_the_session(cli: Cli) {
    let usage = TokenUsage {
        input: 100,
        cached: 40,
        output: 20,
        reasoning: 0,
    };
    let server = server(
        cli,
        vec![
            cli.shell_call().with_usage(usage),
            Reply::text("all done").with_usage(usage),
        ],
    );
    let sandbox = Sandbox::new(cli, &server);
    let (o, last) = sandbox.agent_json(cli, &[], "make the file");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    assert_eq!(
        std::fs::read_to_string(sandbox.work().join("made.txt")).unwrap(),
        "made\n"
    );
    let out = text(&o.stdout);
    assert!(
        out.contains(r#"{"progress":"$ echo made > made.txt && echo wrote"}"#),
        "{}",
        describe(&o)
    );
    assert_eq!(last["outcome"]["final_message"], "all done", "{last:#}");
    assert_eq!(last["outcome"]["status"]["status"], "succeeded");
    let session = last["outcome"]["session_id"].as_str().unwrap_or("");
    assert!(!session.is_empty(), "{last:#}");
    // The tool's result went back to the model.
    let requests = conversation(&server);
    assert_eq!(requests.len(), 2, "{}", describe(&o));
    let results = requests[1].tool_results();
    assert!(
        results.iter().any(|r| r.output.contains("wrote")),
        "{results:?}"
    );
    // Two requests of 140 input tokens (40 cached) and 20 output: this run's usage, in the
    // one convention (input includes cached).
    let usage = &last["report"]["usage"];
    assert_eq!(usage["input_tokens"], 280, "{last:#}");
    assert_eq!(usage["cached_input_tokens"], 80, "{last:#}");
    assert_eq!(usage["output_tokens"], 40, "{last:#}");
}

fn a_failed_turn_exits_1_with_the_apis_error(cli: Cli) {
    let server = ModelServer::start(cli.api(), move |_: &Request| cli.final_error()).unwrap();
    let sandbox = Sandbox::new(cli, &server);
    let (o, last) = sandbox.agent_json(cli, &[], "hi");
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    // One attempt: the error is final (Claude Code and Codex run with retries off).
    assert_eq!(server.model_requests().len(), 1, "{}", describe(&o));
    let status = &last["outcome"]["status"];
    assert!(
        matches!(
            status["status"].as_str(),
            Some("turn_failed" | "execution_failed")
        ),
        "{last:#}"
    );
    assert!(
        status["diagnostic"].as_str().is_some_and(|d| !d.is_empty()),
        "{last:#}"
    );
}

fn the_context_length_error_is_classified(cli: Cli) {
    let server = ModelServer::start(cli.api(), |_: &Request| {
        Reply::prompt_too_long(250_000, 200_000)
    })
    .unwrap();
    let sandbox = Sandbox::new(cli, &server);
    let (o, last) = sandbox.agent_json(cli, &[], "hi");
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

/// Resumes the first session; returns both final objects and the server.
fn resume(cli: Cli) -> (Value, Value, ModelServer) {
    let usage = TokenUsage {
        input: 100,
        cached: 0,
        output: 10,
        reasoning: 0,
    };
    let server = server(
        cli,
        vec![
            Reply::text("first answer").with_usage(usage),
            Reply::text("second answer").with_usage(usage),
            Reply::text("third answer").with_usage(usage),
        ],
    );
    let sandbox = Sandbox::new(cli, &server);
    let (o, first) = sandbox.agent_json(cli, &[], "remember 42");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    let session = first["outcome"]["session_id"].as_str().unwrap().to_owned();
    let (o, second) = sandbox.agent_json(cli, &["--resume", &session], "what was it?");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    assert_eq!(
        second["outcome"]["session_id"],
        session.as_str(),
        "{second:#}"
    );
    assert_eq!(second["outcome"]["final_message"], "second answer");
    // The resumed request carries the first exchange.
    let requests = conversation(&server);
    assert!(
        requests.last().unwrap().has_user_text("remember 42"),
        "{:?}",
        requests.last().unwrap().user_texts()
    );
    // Each run reports its own tokens, not the thread's running total.
    for run in [&first, &second] {
        assert_eq!(run["report"]["usage"]["input_tokens"], 100, "{run:#}");
        assert_eq!(run["report"]["usage"]["output_tokens"], 10, "{run:#}");
        assert_eq!(run["report"]["usage"]["tokens_scope"], "run", "{run:#}");
    }
    // The first run started the session: its cost is its own.
    assert_eq!(first["report"]["usage"]["cost_scope"], "run", "{first:#}");
    let cost = |run: &Value| run["report"]["usage"]["cost_usd"].as_f64();
    match cli {
        // Claude Code's `total_cost_usd` is the session's running total, and a one-off resume
        // does not know the total before it: the report says so rather than claim it.
        Cli::Claude => {
            assert_eq!(
                second["report"]["usage"]["cost_scope"], "session",
                "{second:#}"
            );
            let (one, both) = (cost(&first).unwrap(), cost(&second).unwrap());
            assert!(one > 0.0 && (both - 2.0 * one).abs() < 1e-9, "{one} {both}");
            let o = sandbox.agent(cli, &["--resume", &session], "and now?");
            assert!(
                text(&o.stdout).contains(" (session running total)\n"),
                "{}",
                describe(&o)
            );
        }
        // Codex reports no cost; OpenCode's is per message, from the test model's price.
        Cli::Codex => assert_eq!(cost(&second), None, "{second:#}"),
        Cli::OpenCode => {
            assert_eq!(second["report"]["usage"]["cost_scope"], "run", "{second:#}");
            let (one, two) = (cost(&first).unwrap(), cost(&second).unwrap());
            assert!(one > 0.0 && (two - one).abs() < 1e-9, "{one} {two}");
        }
    }
    (first, second, server)
}

fn a_timeout_stops_the_cli_and_exits_124(cli: Cli) {
    let server = server(cli, vec![Reply::Hang]);
    let sandbox = Sandbox::new(cli, &server);
    let o = sandbox.agent(cli, &["--timeout", "3s"], "wait");
    assert_eq!(o.status.code(), Some(124), "{}", describe(&o));
    assert!(
        text(&o.stdout).contains("status: interrupted (timed out)"),
        "{}",
        describe(&o)
    );
}

fn ctrl_c_stops_the_cli_and_keeps_its_output(cli: Cli) {
    let server = server(cli, vec![Reply::Hang]);
    let sandbox = Sandbox::new(cli, &server);
    let mut args = vec!["agent", cli.name()];
    args.extend_from_slice(cli.base_flags());
    args.extend_from_slice(&["--", "wait"]);
    let child: Child = sandbox
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        server.wait_for_requests(1, Duration::from_secs(120)),
        "the CLI never reached the model"
    );
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", describe(&o));
    assert!(
        text(&o.stdout).contains("status: interrupted (cancelled)"),
        "{}",
        describe(&o)
    );
    // The run is recorded as cancelled, its output kept.
    assert!(text(&o.stderr).contains("cancelled"), "{}", describe(&o));
}

fn model_and_effort_reach_the_model(cli: Cli, model: &str, effort: &str) -> Request {
    let server = server(cli, vec![Reply::text("fine")]);
    let sandbox = Sandbox::new(cli, &server);
    let o = sandbox.agent(
        cli,
        &["--model", model, "--effort", effort, "--security"],
        "hi",
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let request = conversation(&server).pop().unwrap();
    let sent = request.model().unwrap_or("");
    assert!(
        model.ends_with(sent) && !sent.is_empty(),
        "sent {sent:?} for {model:?}"
    );
    request
}

/// The scenarios every CLI shares, one test each per CLI: `claude::tool_turn`, …
macro_rules! shared_scenarios {
    ($($module:ident: $cli:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[test]
            fn prompts_reach_the_model_verbatim() {
                super::prompts_reach_the_model_verbatim($cli);
            }

            #[test]
            fn tool_turn() {
                a_tool_turn_runs_for_real_and_reports_the_session($cli);
            }

            #[test]
            fn failure() {
                a_failed_turn_exits_1_with_the_apis_error($cli);
                the_context_length_error_is_classified($cli);
            }

            #[test]
            fn timeout_and_ctrl_c() {
                a_timeout_stops_the_cli_and_exits_124($cli);
                ctrl_c_stops_the_cli_and_keeps_its_output($cli);
            }
        }
    )*};
}

shared_scenarios!(claude: Cli::Claude, codex: Cli::Codex, opencode: Cli::OpenCode);

// ---------------------------------------------------------------------------------------------
// Claude Code
// ---------------------------------------------------------------------------------------------

#[test]
fn claude_resume() {
    resume(Cli::Claude);
}

#[test]
fn claude_model_effort_security() {
    let request = model_and_effort_reach_the_model(Cli::Claude, "claude-test-1", "high");
    assert!(
        request.body_text().contains("high"),
        "{}",
        request.body_text()
    );
    // The security policy names the model that answered.
    let server = server(
        Cli::Claude,
        vec![Reply::text("fine").with_model("claude-answering-2")],
    );
    let sandbox = Sandbox::new(Cli::Claude, &server);
    let o = sandbox.agent(Cli::Claude, &["--security"], "hi");
    let out = text(&o.stdout);
    assert!(
        out.contains("Model: claude-answering-2\n"),
        "{}",
        describe(&o)
    );
    // The answering model comes first; Claude Code's usage table names the requested one too.
    assert!(
        out.contains("observed models: claude-answering-2"),
        "{}",
        describe(&o)
    );
}

/// A model that never answers, with Claude Code's own retries off: `--stall-timeout` stops
/// the CLI once its stream has been silent for the timeout, and the turn is reported
/// `stalled`, naming the last event Claude Code printed (its `system` init), with exit 124.
#[test]
fn claude_a_silent_model_is_stopped_as_stalled() {
    let server = server(Cli::Claude, vec![Reply::Hang]);
    let mut sandbox = Sandbox::new(Cli::Claude, &server);
    sandbox
        .env
        .push(("CLAUDE_CODE_MAX_RETRIES".to_owned(), "0".to_owned()));
    let (o, last) = sandbox.agent_json(Cli::Claude, &["--stall-timeout", "5s"], "wait");
    assert_eq!(o.status.code(), Some(124), "{}", describe(&o));
    assert!(
        server.wait_for_requests(1, Duration::from_secs(10)),
        "the CLI never reached the model"
    );
    assert_eq!(last["outcome"]["failure_kind"], "stalled", "{last:#}");
    let diagnostic = last["outcome"]["status"]["diagnostic"]
        .as_str()
        .unwrap_or_default();
    assert!(
        diagnostic.contains("\"system\"") && diagnostic.contains("stall timeout of 5s"),
        "{last:#}"
    );
    assert!(last["outcome"]["session_id"].is_string(), "{last:#}");
}

// ---------------------------------------------------------------------------------------------
// Codex
// ---------------------------------------------------------------------------------------------

#[test]
fn codex_resume_reports_this_runs_usage_and_the_model_used() {
    let (first, second, _server) = resume(Cli::Codex);
    // The model comes from Codex's session file (its stream names none).
    for run in [&first, &second] {
        assert_eq!(run["report"]["models"], json!(["gpt-5.5"]), "{run:#}");
        assert_eq!(run["report"]["retained"], true, "{run:#}");
    }
}

#[test]
fn codex_model_effort_security() {
    let request = model_and_effort_reach_the_model(Cli::Codex, "gpt-5.5-mini", "high");
    assert_eq!(
        request.json["reasoning"]["effort"],
        "high",
        "{}",
        request.body_text()
    );
    let server = server(Cli::Codex, vec![Reply::text("fine")]);
    let sandbox = Sandbox::new(Cli::Codex, &server);
    let o = sandbox.agent(Cli::Codex, &["--security", "--model", "gpt-5.5-mini"], "hi");
    let out = text(&o.stdout);
    assert!(
        out.contains("Model: gpt-5.5-mini (requested)\n"),
        "{}",
        describe(&o)
    );
    assert!(
        out.contains("models (retained record): gpt-5.5-mini\n"),
        "{}",
        describe(&o)
    );
}

#[test]
fn codex_outside_a_git_repository_needs_the_flag() {
    let server = server(Cli::Codex, vec![Reply::text("fine")]);
    let sandbox = Sandbox::new(Cli::Codex, &server);
    let o = sandbox
        .command(&["agent", "codex", "--", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(
        text(&o.stdout).contains("execution failed: codex exited with code"),
        "{}",
        describe(&o)
    );
    assert!(server.model_requests().is_empty());
}

// ---------------------------------------------------------------------------------------------
// OpenCode
// ---------------------------------------------------------------------------------------------

#[test]
fn opencode_resume() {
    let (first, second, _server) = resume(Cli::OpenCode);
    for run in [&first, &second] {
        assert_eq!(
            run["report"]["models"],
            json!([OPENCODE_TEST_MODEL]),
            "{run:#}"
        );
    }
}

#[test]
fn opencode_model_and_variant() {
    model_and_effort_reach_the_model(Cli::OpenCode, OPENCODE_TEST_MODEL, "high");
}
