//! `agentrun agent` on a real agent CLI that speaks OpenAI chat completions (Qwen Code, pi),
//! run offline against the scripted server of `agentrun_tests::model_server` on 127.0.0.1
//! with a private home. Included by `real_qwen.rs` and `real_pi.rs` with
//! `#[path = "support/chat_cli.rs"] mod chat_cli;`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

use agentrun_tests::agent_clis::{self, AgentCli};
use agentrun_tests::model_server::{ModelServer, Reply, Request, TokenUsage, replies};
use serde_json::Value;

#[path = "connect_trace.rs"]
mod connect_trace;
#[path = "sandbox.rs"]
mod sandbox;

/// A private home, working directory and store for one CLI, and the flags every run passes.
pub(crate) struct Cli {
    pub(crate) cli: AgentCli,
    sandbox: sandbox::Sandbox,
    env: Vec<(String, String)>,
    /// `--harness-arg=…` flags every run passes (Qwen's `--approval-mode yolo`).
    flags: Vec<String>,
}

impl Cli {
    pub(crate) fn new(cli: AgentCli, server: &ModelServer, flags: &[&str]) -> Cli {
        let sandbox = sandbox::Sandbox::new();
        let home = sandbox.path("home");
        std::fs::create_dir_all(sandbox.path("work")).unwrap();
        let env = match cli {
            AgentCli::Qwen => agent_clis::qwen_env(&home, server),
            AgentCli::Pi => agent_clis::pi_env(&home, server),
            other => panic!("not a chat-completions CLI: {other:?}"),
        }
        .unwrap();
        Cli {
            cli,
            sandbox,
            env,
            flags: flags.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    pub(crate) fn work(&self) -> PathBuf {
        self.sandbox.path("work")
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.sandbox.path("home")
    }

    /// Runs the real CLI under `strace` from now on; returns the log of its connections.
    pub(crate) fn trace_connections(&mut self) -> PathBuf {
        let dir = self.sandbox.path("trace");
        let real = agent_clis::executable(self.cli);
        connect_trace::trace(&real, self.cli.name(), &dir, &mut self.env)
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = self.sandbox.cmd(args);
        c.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.work());
        c
    }

    /// `agentrun agent CLI <flags> <extra> --json -- PROMPT`: the output and the final object.
    pub(crate) fn agent(&self, extra: &[&str], prompt: &str) -> (Output, Value) {
        let mut args = vec!["agent", self.cli.name(), "--json"];
        args.extend(self.flags.iter().map(String::as_str));
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", prompt]);
        let o = self.command(&args).output().unwrap();
        let last = text(&o.stdout)
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        (o, last)
    }
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// The last line of the last user message of a request: where both CLIs put the prompt
/// (after their own context blocks).
pub(crate) fn last_user_text(request: &Request) -> String {
    let texts = request.user_texts();
    let last = texts.last().cloned().unwrap_or_default();
    last.rsplit('\n').next().unwrap_or("").to_owned()
}

pub(crate) fn server(cli: AgentCli, script: Vec<Reply>) -> ModelServer {
    ModelServer::start(cli.api(), replies(script)).unwrap()
}

/// Every request reached the scripted server, and each was a model request or a model list.
fn only_the_server(server: &ModelServer) {
    for r in server.requests() {
        let path = r.path.split('?').next().unwrap_or("");
        assert!(
            path.ends_with("/chat/completions") || path.ends_with("/models"),
            "{} {}",
            r.method,
            r.path
        );
    }
}

/// The model the server says answered.
pub(crate) const SERVED: &str = "served-model-7";

pub(crate) fn a_text_answer_names_the_served_model(cli: AgentCli, flags: &[&str]) -> Value {
    let server = server(cli, vec![Reply::text("Hello there.").with_model(SERVED)]);
    let mut c = Cli::new(cli, &server, flags);
    let log = c.trace_connections();
    let (o, last) = c.agent(&[], "say hello");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    assert_eq!(last["outcome"]["final_message"], "Hello there.", "{last:#}");
    assert_eq!(last["outcome"]["status"]["status"], "succeeded", "{last:#}");
    assert!(
        last["outcome"]["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{last:#}"
    );
    // The model that answered, never the requested one.
    assert_eq!(
        last["report"]["models"],
        serde_json::json!([SERVED]),
        "{last:#}"
    );
    let requests = server.model_requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(last_user_text(&requests[0]), "say hello");
    only_the_server(&server);
    // Every connection the CLI (and anything it started) opened went to the model server.
    connect_trace::assert_only_to(&log, server.addr().port());
    last
}

pub(crate) fn a_tool_call_runs_the_shell_in_the_workspace(cli: AgentCli, flags: &[&str]) -> Value {
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
    let c = Cli::new(cli, &server, flags);
    let (o, last) = c.agent(&[], "make the file");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(
        std::fs::read_to_string(c.work().join("made.txt")).unwrap(),
        "made\n"
    );
    assert!(
        text(&o.stdout).contains(r#"{"progress":"$ echo made > made.txt && echo wrote"}"#),
        "{}",
        describe(&o)
    );
    assert_eq!(last["outcome"]["final_message"], "all done", "{last:#}");
    let requests = server.model_requests();
    assert_eq!(requests.len(), 2, "{}", describe(&o));
    assert!(
        requests[1]
            .tool_results()
            .iter()
            .any(|r| r.output.contains("wrote")),
        "{:?}",
        requests[1].tool_results()
    );
    // Two requests of 140 input tokens (40 of them cached) and 20 output.
    let u = &last["report"]["usage"];
    assert_eq!(u["input_tokens"], 280, "{last:#}");
    assert_eq!(u["cached_input_tokens"], 80, "{last:#}");
    assert_eq!(u["output_tokens"], 40, "{last:#}");
    only_the_server(&server);
    last
}

/// A session, then the same session resumed; the second request carries the first exchange.
pub(crate) fn a_resumed_turn_sees_the_first(cli: AgentCli, flags: &[&str]) -> (Value, Value) {
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
        ],
    );
    let c = Cli::new(cli, &server, flags);
    let (o, first) = c.agent(&[], "remember 42");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let session = first["outcome"]["session_id"].as_str().unwrap().to_owned();
    let (o, second) = c.agent(&["--resume", &session], "what was it?");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(!text(&o.stderr).contains("warning"), "{}", describe(&o));
    assert_eq!(
        second["outcome"]["session_id"],
        session.as_str(),
        "{second:#}"
    );
    assert_eq!(second["outcome"]["final_message"], "second answer");
    let requests = server.model_requests();
    assert_eq!(requests.len(), 2);
    let resumed = &requests[1];
    assert!(
        resumed.has_user_text("remember 42"),
        "{:?}",
        resumed.user_texts()
    );
    assert!(
        resumed.body_text().contains("first answer"),
        "{}",
        resumed.body_text()
    );
    assert_eq!(last_user_text(resumed), "what was it?");
    // Each run reports its own tokens.
    for run in [&first, &second] {
        assert_eq!(run["report"]["usage"]["input_tokens"], 100, "{run:#}");
        assert_eq!(run["report"]["usage"]["output_tokens"], 10, "{run:#}");
        assert_eq!(run["report"]["usage"]["tokens_scope"], "run", "{run:#}");
    }
    only_the_server(&server);
    (first, second)
}

pub(crate) fn prompts_that_start_with_a_dash_reach_the_model_verbatim(
    cli: AgentCli,
    flags: &[&str],
) {
    let prompts = ["-x", "--help me", "help"];
    let server = server(
        cli,
        prompts
            .iter()
            .map(|p| Reply::text(format!("ok {p}")))
            .collect(),
    );
    let c = Cli::new(cli, &server, flags);
    for (n, prompt) in prompts.iter().enumerate() {
        let (o, last) = c.agent(&[], prompt);
        assert_eq!(o.status.code(), Some(0), "{prompt:?}: {}", describe(&o));
        assert_eq!(last["outcome"]["final_message"], format!("ok {prompt}"));
        let requests = server.model_requests();
        assert_eq!(requests.len(), n + 1, "one model request per run");
        assert_eq!(last_user_text(&requests[n]), *prompt);
    }
}

/// A run that fails: exit 1, a failed turn whose diagnostic names `needle`.
fn failed(c: &Cli, needle: &str) -> Value {
    let (o, last) = c.agent(&[], "hi");
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert_eq!(
        last["outcome"]["status"]["status"], "turn_failed",
        "{last:#}"
    );
    let diagnostic = last["outcome"]["status"]["diagnostic"]
        .as_str()
        .unwrap_or("");
    assert!(diagnostic.contains(needle), "{needle:?} in {last:#}");
    last
}

pub(crate) fn a_400_fails_the_turn(cli: AgentCli, flags: &[&str]) {
    let server = server(
        cli,
        vec![Reply::error(
            400,
            "invalid_request_error",
            "the scripted rejection",
        )],
    );
    let c = Cli::new(cli, &server, flags);
    let last = failed(&c, "the scripted rejection");
    assert!(last["outcome"].get("failure_kind").is_none(), "{last:#}");
    assert_eq!(server.model_requests().len(), 1, "a 400 is not retried");
    // The context-length 400 is classified.
    let server = ModelServer::start(cli.api(), |_: &Request| {
        Reply::prompt_too_long(250_000, 200_000)
    })
    .unwrap();
    let c = Cli::new(cli, &server, flags);
    let last = failed(&c, "prompt is too long");
    assert_eq!(
        last["outcome"]["failure_kind"], "context_length",
        "{last:#}"
    );
}

pub(crate) fn a_persistent_500_fails_the_turn(cli: AgentCli, flags: &[&str]) -> usize {
    let server = ModelServer::start(cli.api(), |_: &Request| {
        Reply::error(500, "server_error", "the scripted outage")
    })
    .unwrap();
    let c = Cli::new(cli, &server, flags);
    let last = failed(&c, "the scripted outage");
    assert_eq!(last["outcome"]["failure_kind"], "server_error", "{last:#}");
    let n = server.model_requests().len();
    assert!(n > 1, "the CLI retries a 500 before giving up: {n}");
    only_the_server(&server);
    n
}

pub(crate) fn a_429_then_success_succeeds(cli: AgentCli, flags: &[&str]) -> Value {
    let server = server(
        cli,
        vec![
            Reply::error(429, "rate_limit_error", "slow down"),
            Reply::text("after the wait"),
        ],
    );
    let c = Cli::new(cli, &server, flags);
    let (o, last) = c.agent(&[], "hi");
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(
        last["outcome"]["final_message"], "after the wait",
        "{last:#}"
    );
    assert_eq!(last["outcome"]["status"]["status"], "succeeded", "{last:#}");
    assert_eq!(server.model_requests().len(), 2);
    last
}
