//! What the real Claude Code, Codex, OpenCode, Qwen Code and pi CLIs print in the real-CLI
//! scenarios — a text turn, a tool turn, a failed turn, a context-length failure, a session and
//! its resumption; for Qwen Code and pi also a 429 retried to success and a persistent 500 —
//! recorded by `scripts/record-harness-fixtures.sh` into
//! `tests/fixtures/harness/<harness>/<cli>-<version>-<scenario>.jsonl` with the retained
//! records agentrun reads after them (Codex's session file, `opencode export`, the session
//! logs of Qwen Code and pi), fed through
//! `Interpretation` exactly as `agentrun agent` feeds them: session id, final message, models,
//! per-run usage and outcome of each, so a decoder regression against the real dialects fails
//! without the CLIs installed.
//!
//! Every answer of the scripted model server reports 100 input tokens plus 40 read from the
//! cache, 20 output tokens of which 4 reasoning (Anthropic has no reasoning count): one
//! request is 140 / 40 / 20 / 4 in agentrun's convention, the tool turn's two requests twice
//! that.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::retained::{
    codex_token_total, parse_codex_session, parse_opencode_export, parse_pi_session_log,
    parse_qwen_session_log,
};
use agentrun_core::harness::{
    Completion, FailureKind, Harness, HarnessExit, Interpretation, OutcomeStatus, RetainedRecord,
    UsageScope,
};
use harness_common::*;

/// A recorded CLI: its harness, fixture prefix, the model it answered with, and whether its
/// API reports reasoning tokens.
struct Cli {
    harness: Harness,
    prefix: &'static str,
    model: &'static str,
    reasoning: u64,
}

const CLAUDE: Cli = Cli {
    harness: Harness::Claude,
    prefix: "claude/claude-code-2.1.332",
    model: "claude-opus-5-5",
    reasoning: 0,
};
const CODEX: Cli = Cli {
    harness: Harness::Codex,
    prefix: "codex/codex-0.171.0",
    model: "gpt-5.5",
    reasoning: 4,
};
const OPENCODE: Cli = Cli {
    harness: Harness::OpenCode,
    prefix: "opencode/opencode-1.18.33",
    model: "agentrun-test/test-model",
    reasoning: 4,
};

const QWEN: Cli = Cli {
    harness: Harness::Qwen,
    prefix: "qwen/qwen-code-0.24.4",
    model: "test-model",
    reasoning: 4,
};
/// pi names the served model (`responseModel`) only when it is not the requested one; the
/// scripted server answers with the requested one, so no model is observed.
const PI: Cli = Cli {
    harness: Harness::Pi,
    prefix: "pi/pi-0.73.1",
    model: "",
    reasoning: 0,
};

/// The fixed session id the recording gives scenario `n` (1 text turn … 5 resume, 6
/// rate-limited, 7 server error).
fn session_id(cli: &Cli, n: u32) -> String {
    match cli.harness {
        Harness::OpenCode => format!("ses_0000000000000000000fixture{n}"),
        _ => format!("00000000-0000-4000-8000-00000000000{n}"),
    }
}

impl Cli {
    fn file(&self, scenario: &str, suffix: &str) -> Vec<u8> {
        fixture(&format!("{}-{scenario}{suffix}", self.prefix))
    }

    /// The retained record agentrun reads after the scenario's run.
    fn retained(&self, scenario: &str) -> Option<RetainedRecord> {
        match self.harness {
            Harness::Codex => {
                Some(parse_codex_session(&self.file(scenario, "-session.jsonl")).unwrap())
            }
            Harness::OpenCode => {
                Some(parse_opencode_export(&self.file(scenario, "-export.json")).unwrap())
            }
            Harness::Qwen => {
                Some(parse_qwen_session_log(&self.file(scenario, "-log.jsonl")).unwrap())
            }
            Harness::Pi => Some(parse_pi_session_log(&self.file(scenario, "-log.jsonl")).unwrap()),
            _ => None,
        }
    }

    /// The scenario's stream through `Interpretation`, completed with `record`.
    fn decode(&self, scenario: &str, record: Option<RetainedRecord>) -> (Vec<String>, Completion) {
        let (progress, interp) = interpret(self.harness, None, &self.file(scenario, ".jsonl"));
        // The failure scenarios' CLIs exit non-zero (pi exits 0 whatever happened); the turn
        // failure still names the cause.
        let exit = if matches!(scenario, "failure" | "context-length" | "server-error")
            && self.harness != Harness::Pi
        {
            HarnessExit::Failed {
                diagnostic: format!("{} exited with code 1", self.harness),
            }
        } else {
            HarnessExit::Success
        };
        let completion = interp.finish(exit).complete(record);
        // Every line of the real dialect is understood (an absent record may still warn).
        assert!(
            !completion
                .report
                .warnings
                .iter()
                .any(|w| w.contains("unrecognized")),
            "{} {scenario}: {:?}",
            self.prefix,
            completion.report.warnings
        );
        (progress, completion)
    }

    fn run(&self, scenario: &str) -> (Vec<String>, Completion) {
        self.decode(scenario, self.retained(scenario))
    }

    /// Asserts a successful run: session, final message, this CLI's model, `requests` model
    /// requests' worth of usage.
    #[track_caller]
    fn succeeded(&self, c: &Completion, session: u32, final_message: &str, requests: u64) {
        assert_eq!(c.outcome.session_id, Some(session_id(self, session)));
        assert_eq!(c.outcome.final_message.as_deref(), Some(final_message));
        assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
        assert_eq!(c.outcome.failure_kind, None);
        assert!(c.outcome.terminal_seen);
        let models: &[&str] = if self.model.is_empty() {
            &[]
        } else {
            &[self.model]
        };
        assert_eq!(c.report.models, strings(models), "{}", self.prefix);
        self.usage(c, requests);
    }

    #[track_caller]
    fn usage(&self, c: &Completion, requests: u64) {
        let usage = c.report.usage.as_ref().expect("usage reported");
        assert_eq!(
            (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.output_tokens,
                usage.reasoning_tokens
            ),
            (
                140 * requests,
                40 * requests,
                20 * requests,
                self.reasoning * requests
            ),
            "{}",
            self.prefix
        );
    }

    /// Asserts a failed turn whose diagnostic contains `cause`.
    #[track_caller]
    fn failed(&self, c: &Completion, session: u32, cause: &str, kind: Option<FailureKind>) {
        assert_eq!(c.outcome.session_id, Some(session_id(self, session)));
        match &c.outcome.status {
            OutcomeStatus::TurnFailed { diagnostic } => {
                assert!(diagnostic.contains(cause), "{}: {diagnostic}", self.prefix)
            }
            other => panic!("{}: {other:?}", self.prefix),
        }
        assert_eq!(c.outcome.failure_kind, kind, "{}", self.prefix);
    }

    /// The scenarios every CLI shares.
    fn common_scenarios(&self) {
        let (progress, c) = self.run("text-turn");
        self.succeeded(&c, 1, "Hello from the scripted model.", 1);
        assert_eq!(progress, strings(&["session started"]), "{}", self.prefix);

        let (progress, c) = self.run("tool-turn");
        self.succeeded(&c, 2, "all done", 2);
        assert_eq!(
            progress,
            strings(&["session started", "$ echo made > made.txt && echo wrote"]),
            "{}",
            self.prefix
        );

        let (_, c) = self.run("context-length");
        self.failed(&c, 4, "", Some(FailureKind::ContextLength));

        let (_, c) = self.run("resume-first");
        self.succeeded(&c, 5, "first answer", 1);
    }
}

#[test]
fn claude_code() {
    CLAUDE.common_scenarios();
    let (_, c) = CLAUDE.run("failure");
    CLAUDE.failed(
        &c,
        3,
        "API Error: 500 Internal server error",
        Some(FailureKind::ServerError),
    );
    // The API error answered nothing: no model.
    assert!(c.report.models.is_empty());
    let (_, c) = CLAUDE.run("context-length");
    assert!(
        c.outcome
            .final_message
            .as_deref()
            .is_some_and(|m| m.starts_with("Prompt is too long")),
        "{:?}",
        c.outcome.final_message
    );
    // The resumed run keeps the session and reports its own tokens, but Claude Code's
    // `total_cost_usd` is the session's running total: the usage says so, and less the
    // previous run's report it is the run's own.
    let (_, c) = CLAUDE.run("resume");
    CLAUDE.succeeded(&c, 5, "second answer", 1);
    let (_, first) = CLAUDE.run("resume-first");
    let usage = |c: &Completion| c.report.usage.clone().unwrap();
    let (resumed, first) = (usage(&c), usage(&first));
    assert_eq!(
        (resumed.tokens_scope, resumed.cost_scope),
        (UsageScope::Run, UsageScope::Session)
    );
    let (one, both) = (first.cost_usd.unwrap(), resumed.cost_usd.unwrap());
    assert!(one > 0.0 && (both - 2.0 * one).abs() < 1e-9, "{one} {both}");
    let own = resumed.since(&first);
    assert_eq!(own.cost_scope, UsageScope::Run);
    assert!(
        (own.cost_usd.unwrap() - one).abs() < 1e-9,
        "{:?}",
        own.cost_usd
    );
    assert_eq!(
        own.input_tokens, resumed.input_tokens,
        "the tokens were the run's own"
    );
    // Told that the first run started its session, the interpretation calls its cost its own.
    let mut interp = Interpretation::new(Harness::Claude);
    interp.started_new_session();
    for line in CLAUDE.file("resume-first", ".jsonl").split(|b| *b == b'\n') {
        interp.handle_line(line);
    }
    let fresh = interp.finish(HarnessExit::Success).complete(None);
    assert_eq!(usage(&fresh).cost_scope, UsageScope::Run);
    assert_eq!(usage(&fresh).cost_usd, Some(one));
}

#[test]
fn codex() {
    CODEX.common_scenarios();
    let (_, c) = CODEX.run("failure");
    // Codex words an HTTP 500 its own way, as an overload.
    CODEX.failed(&c, 3, "high demand", Some(FailureKind::Overloaded));
    let (_, c) = CODEX.run("context-length");
    assert!(
        matches!(&c.outcome.status, OutcomeStatus::TurnFailed { diagnostic }
            if diagnostic.contains("context window"))
    );
    // The stream names no model: without the session file there is none.
    let (_, c) = CODEX.decode("text-turn", None);
    assert!(c.report.models.is_empty());
    // After a resume the stream reports the thread's running total; the total the session
    // file held before the run is subtracted.
    let (_, c) = CODEX.decode("resume", None);
    CODEX.usage(&c, 2);
    assert_eq!(c.report.usage.unwrap().tokens_scope, UsageScope::Session);
    let mut record = CODEX.retained("resume").unwrap();
    record.usage_baseline = codex_token_total(&CODEX.file("resume-first", "-session.jsonl"));
    let (_, c) = CODEX.decode("resume", Some(record));
    CODEX.succeeded(&c, 5, "second answer", 1);
    assert_eq!(c.report.usage.unwrap().tokens_scope, UsageScope::Run);
}

#[test]
fn opencode() {
    OPENCODE.common_scenarios();
    let (_, c) = OPENCODE.run("failure");
    OPENCODE.failed(
        &c,
        3,
        "APIError: Incorrect API key provided: sk-offline-test",
        Some(FailureKind::Auth),
    );
    // The stream alone names no model; the export does.
    let (_, c) = OPENCODE.decode("text-turn", None);
    assert!(c.report.models.is_empty());
    // The resumed session's export holds both runs: only this run's messages count.
    let (_, c) = OPENCODE.run("resume");
    OPENCODE.succeeded(&c, 5, "second answer", 1);
    let usage = c.report.usage.unwrap();
    assert_eq!(
        (usage.tokens_scope, usage.cost_scope),
        (UsageScope::Run, UsageScope::Run)
    );
}

/// The scenarios Qwen Code and pi share beyond the common ones; `outage` is the kind the
/// persistent HTTP 500 decodes to.
fn chat_cli_scenarios(cli: &Cli, failure: &str, outage: Option<FailureKind>) {
    cli.common_scenarios();
    let (_, c) = cli.run("failure");
    cli.failed(&c, 3, failure, None);
    let (_, c) = cli.run("rate-limited");
    cli.succeeded(&c, 6, "after the wait", 1);
    let (_, c) = cli.run("server-error");
    cli.failed(&c, 7, "the scripted outage", outage);
    // A prompt that starts with `-` (the scripted answer repeats it) decodes as a success;
    // whether it reached the model as the prompt is checked end to end, where the server
    // sees the request.
    let (_, c) = cli.run("dash-prompt");
    cli.succeeded(&c, 0, "ok -x", 1);
    // The resumed run: this run's tokens only, although the log holds both runs.
    let (_, c) = cli.run("resume");
    cli.succeeded(&c, 5, "second answer", 1);
    let usage = c.report.usage.clone().unwrap();
    assert_eq!(usage.tokens_scope, UsageScope::Run, "{}", cli.prefix);
    // The stream alone gives the same run's tokens (Qwen's stream has no reasoning count).
    let (_, c) = cli.decode("resume", None);
    let u = c.report.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cached_input_tokens, u.output_tokens),
        (140, 40, 20),
        "{}",
        cli.prefix
    );
    assert_eq!(c.outcome.final_message.as_deref(), Some("second answer"));
}

#[test]
fn qwen_code() {
    chat_cli_scenarios(&QWEN, "[API Error: 400", Some(FailureKind::ServerError));
    // The stream names only the requested model: no model without the session log.
    let (_, c) = QWEN.decode("text-turn", None);
    assert!(c.report.models.is_empty());
    assert!(
        c.report
            .warnings
            .iter()
            .any(|w| w.contains("the Qwen Code session log was not available")),
        "{:?}",
        c.report.warnings
    );
    // Under the security policy the requested model is named as such.
    let (progress, _) = interpret(
        Harness::Qwen,
        Some(Some("test-model")),
        &QWEN.file("text-turn", ".jsonl"),
    );
    assert!(
        progress.contains(&"Model: test-model (requested)".to_owned()),
        "{progress:?}"
    );
}

#[test]
fn pi() {
    chat_cli_scenarios(&PI, "400", Some(FailureKind::ServerError));
    // pi's stream echoes the prompt: the one starting with `-` was taken as the prompt, not
    // as a flag (Qwen Code's stream and log do not hold the prompt).
    let stream = PI.file("dash-prompt", ".jsonl");
    assert!(
        String::from_utf8_lossy(&stream)
            .contains(r#"{"role":"user","content":[{"type":"text","text":"-x"}]"#)
    );
    // Served by the requested model: the requested-model fallback, never an observation; pi
    // prices the test model.
    let (progress, interp) = interpret(
        Harness::Pi,
        Some(Some("agentrun-test/test-model")),
        &PI.file("text-turn", ".jsonl"),
    );
    assert!(
        progress.contains(&"Model: agentrun-test/test-model (requested)".to_owned()),
        "{progress:?}"
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(c.report.models.is_empty());
    assert!(c.report.usage.unwrap().cost_usd.is_some_and(|c| c > 0.0));
    // A persistent error: pi's own retries are progress, the last one's error the failure.
    let (progress, c) = PI.run("server-error");
    assert!(
        progress
            .iter()
            .any(|p| p == "server error, retry 1/3 in 2.0 s"),
        "{progress:?}"
    );
    assert!(c.outcome.terminal_seen);
    // Cut off during a retry: not finished.
    let stream = PI.file("server-error", ".jsonl");
    let text = String::from_utf8(stream).unwrap();
    let cut = &text[..text.rfind(r#"{"type":"auto_retry_start""#).unwrap()];
    let cut = format!("{cut}{}", text[cut.len()..].lines().next().unwrap());
    let (_, interp) = interpret(Harness::Pi, None, cut.as_bytes());
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(!c.outcome.terminal_seen);
    assert!(
        matches!(&c.outcome.status, OutcomeStatus::TurnFailed { diagnostic }
            if diagnostic.contains("ended without a final result")),
        "{:?}",
        c.outcome.status
    );
    assert_eq!(c.outcome.failure_kind, Some(FailureKind::CutOff));
}

/// A failure only the retained record reports (the stream cut before its `error` event, as
/// when the CLI is killed after writing its session) is classified like a streamed one: the
/// OpenCode export's error by its status, pi's session log's by its wording.
#[test]
fn a_failure_only_the_retained_record_reports_is_classified() {
    for (cli, scenario, lines, cause, kind) in [
        // OpenCode printed nothing before its `error` event.
        (
            &OPENCODE,
            "failure",
            0,
            "Incorrect API key provided",
            FailureKind::Auth,
        ),
        (
            &OPENCODE,
            "context-length",
            0,
            "prompt is too long",
            FailureKind::ContextLength,
        ),
        // pi's stream up to the start of the turn.
        (
            &PI,
            "server-error",
            3,
            "500 the scripted outage",
            FailureKind::ServerError,
        ),
    ] {
        let stream: Vec<u8> = cli
            .file(scenario, ".jsonl")
            .split_inclusive(|b| *b == b'\n')
            .take(lines)
            .flatten()
            .copied()
            .collect();
        let (_, interp) = interpret(cli.harness, None, &stream);
        let c = interp
            .finish(HarnessExit::Success)
            .complete(cli.retained(scenario));
        match &c.outcome.status {
            OutcomeStatus::TurnFailed { diagnostic } => {
                assert!(diagnostic.contains(cause), "{scenario}: {diagnostic}")
            }
            other => panic!("{} {scenario}: {other:?}", cli.prefix),
        }
        assert_eq!(
            c.outcome.failure_kind,
            Some(kind),
            "{} {scenario}",
            cli.prefix
        );
    }
}
