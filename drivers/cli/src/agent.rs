//! `agentrun agent NAME [OPTIONS] PROMPT…`: one harness turn through the library
//! (`agentrun_smol::Runner::agent`, i.e. `agentrun_process::AgentOptions`), formatted for a
//! terminal: each progress line on stdout as soon as it is decoded (the format of `agentrun
//! interpret`, shared printing in `interpret.rs`), then the completion and the final message;
//! the run summary and the `agentrun read` commands for the artifacts on stderr. This file
//! only parses arguments and formats: launching, live interpretation, retention and the
//! retained record (OpenCode export, Muse, Qwen Code, pi and Gemini CLI logs, Codex session
//! file) are the library's.
//!
//! Exit codes: 0 when the session succeeded; 1 when it did not (a failed turn, a safeguard
//! refusal under `--security`, a harness that exited non-zero or was killed by a signal, a
//! capture fault) or on a runtime error; 124 on `--timeout`/`--idle-timeout` and on a turn the
//! stall watchdog stopped (`--stall-timeout`); 127 when the
//! harness program is not on `PATH`, 126 when it cannot be executed; 125 for usage errors and
//! agentrun's own failures.

use std::future::IntoFuture;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::ResultRecord;
use agentrun_core::budget::{Budget, PriceTable};
use agentrun_core::harness::Harness;
use agentrun_core::process::{ProcessResult, RunOutcome};
use agentrun_fs::Store;
use agentrun_smol::{AgentOptions, AgentRun, RetainedSource};
use clap::Args;

use crate::interpret::{Out, human, models_line};
use crate::interrupts::Interrupts;
use crate::read::CliRead;
use crate::{Failure, duration};
use agentrun_core::ReadSyntax;

/// Arguments of `agentrun agent`.
#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The harness to launch: claude, grok, agy (antigravity), codex, muse, opencode, qwen,
    /// pi, gemini.
    #[arg(value_name = "NAME", value_parser = crate::harness_arg::parse_harness)]
    harness: Harness,
    /// The model to request (passed to the harness verbatim).
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// The reasoning effort to request, a plain word such as `high` (claude, grok, codex;
    /// opencode as its variant; pi as `--thinking`; refused for qwen and gemini, which take
    /// it only from their settings; ignored by agy and muse).
    #[arg(long, value_name = "E")]
    effort: Option<String>,
    /// A harness session id to resume.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// An argument passed to the harness verbatim, before the prompt (repeatable; may start
    /// with `-`), e.g. `--harness-arg=--permission-mode --harness-arg=acceptEdits`.
    #[arg(long = "harness-arg", value_name = "ARG", allow_hyphen_values = true)]
    harness_args: Vec<String>,
    /// Codex: run outside a Git repository (passes `--skip-git-repo-check`; Codex refuses
    /// to start elsewhere without it).
    #[arg(long)]
    skip_git_repo_check: bool,
    /// Enable the security policy: `Model: …` progress and sticky safeguard refusals (exit 1).
    #[arg(long)]
    security: bool,
    /// Stop the harness after this long (e.g. 30s, 5m, 1h); exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    timeout: Option<Duration>,
    /// Stop the harness when it printed nothing for this long; exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    idle_timeout: Option<Duration>,
    /// Run the turn again, up to N times, when it ends with a rate limit or an overload,
    /// resuming its harness session after a wait (0: the failure stands).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_retries: u32,
    /// The first wait before a retry when the harness does not say how long; doubled for
    /// each further retry, with jitter, each wait at most 15 minutes.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_backoff)]
    retry_backoff: Duration,
    /// Stop the harness when it emitted no event line for this long (`0`: never); the turn
    /// then fails as `stalled`, naming the last event seen; exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10m")]
    stall_timeout: Duration,
    /// Cap the run's cost in US dollars: checked whenever the stream reports usage (the
    /// harness is then stopped and the turn fails as `budget`) and on the final usage. A
    /// harness that reports tokens but no cost is priced from the price table (estimated).
    #[arg(long, value_name = "USD", value_parser = crate::auto::parse_usd)]
    max_cost_usd: Option<f64>,
    /// Cap the run's tokens (input plus output), like `--max-cost-usd`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_tokens: Option<u64>,
    /// The retained record to reconcile with, instead of the harness's own (the Muse, Qwen
    /// Code, pi or Gemini CLI session log; the Codex session file; the OpenCode export, as
    /// `opencode export ID` prints it).
    #[arg(long, value_name = "FILE")]
    retained: Option<PathBuf>,
    /// Print JSON lines: `{"progress": …}` per progress line, then one completion object
    /// with the run's artifacts.
    #[arg(long)]
    pub(crate) json: bool,
    /// The prompt (several words are joined with spaces): it starts at the first word that is
    /// not an option, and every word from there on is the prompt's, options included. A
    /// prompt that starts with `-` goes after `--`.
    // No `allow_hyphen_values`: with it, a misspelt option (`--stall-timeuot 5s`) would become
    // the prompt and be sent to the harness; without it, it is an error naming the option.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROMPT")]
    prompt: Vec<String>,
}

/// Stdout while the harness runs: progress lines as they come, and the first write error
/// (reported after the run; the turn goes on).
struct Live {
    out: Out<io::Stdout>,
    json: bool,
    failure: Option<Failure>,
}

impl AgentArgs {
    fn options(&self, prices: PriceTable) -> AgentOptions {
        let mut options = AgentOptions::new(self.harness, self.prompt.join(" "))
            .security(self.security)
            .skip_git_repo_check(self.skip_git_repo_check)
            .stall_timeout(self.stall_timeout)
            .budget(Budget {
                max_cost_usd: self.max_cost_usd,
                max_tokens: self.max_tokens,
            })
            .prices(prices);
        if let Some(m) = &self.model {
            options = options.model(m);
        }
        if let Some(e) = &self.effort {
            options = options.effort(e);
        }
        if let Some(r) = &self.resume {
            options = options.resume(r);
        }
        for arg in &self.harness_args {
            options = options.harness_arg(arg);
        }
        if let Some(t) = self.timeout {
            options = options.timeout(t);
        }
        if let Some(t) = self.idle_timeout {
            options = options.idle_timeout(t);
        }
        if let Some(path) = &self.retained {
            options = options.retained(RetainedSource::File(path.clone()));
        }
        options
            .max_retries(self.max_retries)
            .retry_backoff(self.retry_backoff)
    }
}

/// Runs `agentrun agent`.
pub(crate) fn run(store: Store, prices: PriceTable, args: AgentArgs) -> Result<ExitCode, Failure> {
    let harness = args.harness;
    let options = args.options(prices);
    options
        .run_options()
        .map_err(Failure::usage)?
        .validate()
        .map_err(Failure::usage)?;
    if let (Some(path), None) = (&args.retained, harness.retained_kind()) {
        say!(
            "agentrun: warning: {harness} has no retained record; ignoring {}",
            path.display()
        );
    }
    let live = Arc::new(Mutex::new(Live {
        out: Out::new(io::stdout()),
        json: args.json,
        failure: None,
    }));
    let printer = live.clone();
    let runner = agentrun_smol::Runner::new(store);
    let mut interrupts = Interrupts::install();
    let turn = smol::block_on(
        runner
            .agent(options)
            .on_progress(move |line| {
                let mut live = printer.lock().unwrap_or_else(|p| p.into_inner());
                let Live { out, json, failure } = &mut *live;
                if failure.is_none()
                    && let Err(f) = out.progress(&[line.to_owned()], *json)
                {
                    *failure = Some(f);
                }
            })
            .cancel_on(interrupts.requests())
            .on_retry_wait(|wait| say!("agentrun: {}", wait.line()))
            .into_future(),
    );
    let turn = match turn {
        Ok(turn) => turn,
        Err(agentrun_smol::AgentError::Run(agentrun_smol::RunError::Spawn { program, source })) => {
            let (code, why) = launch_failure(harness, &program.to_string_lossy(), &source);
            let failure = Failure {
                code,
                kind: "spawn",
                message: format!("cannot launch the {harness} harness: {why}"),
            };
            return Ok(failure.report(args.json.then_some(crate::json_out::JsonStyle::Lines)));
        }
        Err(agentrun_smol::AgentError::Options(e)) => return Err(Failure::usage(e)),
        Err(agentrun_smol::AgentError::Launch(e)) => return Err(Failure::usage(e)),
        Err(e) => return Err(Failure::runtime(e)),
    };
    if let Some(f) = live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .failure
        .take()
    {
        // stdout failed (a full disk): the session is still kept, and stderr says where.
        say!("{}", footer(&turn.process));
        crate::run::report_faults(&turn.process.record);
        return Err(f);
    }
    report(&turn, &args, &mut interrupts)
}

/// The library's classification of a harness that could not start: its exit code (127 not
/// there, 126 not executable) and why.
fn launch_failure(harness: Harness, program: &str, source: &io::Error) -> (u8, String) {
    let failure = agentrun_process::SpawnFailure::classify(program.as_ref(), source);
    let why = format!("{program:?} {}", failure.harness_reason(harness, source));
    (failure.exit_code(), why)
}

/// Prints the turn's end: warnings and the footer on stderr, the completion (or the
/// interruption) on stdout; returns the exit code.
fn report(
    turn: &AgentRun,
    args: &AgentArgs,
    interrupts: &mut Interrupts,
) -> Result<ExitCode, Failure> {
    let result = &turn.process;
    let mut out = Out::new(io::stdout());
    if turn.truncated_lines > 0 {
        say!(
            "agentrun: warning: {} stdout line(s) longer than {} MiB were not interpreted; \
             the stdout artifact holds them in full",
            turn.truncated_lines,
            agentrun_process::MAX_LINE_BYTES >> 20
        );
    }
    say!("{}", footer(result));
    crate::run::report_faults(&result.record);
    if let Some(exceeded) = &turn.budget_exceeded {
        say!("agentrun: {}", exceeded.diagnostic());
    }
    let Some(completion) = &turn.completion else {
        let why = match result.outcome {
            RunOutcome::IdleTimedOut => "idle_timed_out",
            RunOutcome::Cancelled => "cancelled",
            _ => "timed_out",
        };
        if args.json {
            out.line(&turn_json(turn)?)?;
        } else {
            out.line(&models_line(
                &turn.observed_models,
                turn.observed_models_omitted,
            ))?;
            out.line(&format!("status: interrupted ({})", why.replace('_', " ")))?;
        }
        out.flush()?;
        // A signal agentrun received is told by its own code (143 for SIGTERM).
        let code = interrupts.exit_code();
        return Ok(ExitCode::from(
            code.unwrap_or_else(|| agentrun_process::agent_exit_code(turn)),
        ));
    };
    if let Some(why) = &turn.retained_error {
        say!("agentrun: warning: {why}; models and usage come from the stream");
    }
    if args.json {
        out.line(&turn_json(turn)?)?;
    } else {
        out.line(&human(
            &turn.observed_models,
            turn.observed_models_omitted,
            completion,
            true,
        ))?;
    }
    out.flush()?;
    Ok(ExitCode::from(agentrun_process::agent_exit_code(turn)))
}

/// The run summary and the `agentrun read` command of every non-empty stream, from its
/// start (no preview of the harness's output was shown).
fn footer(result: &ProcessResult) -> String {
    let record: &ResultRecord = &result.record;
    let mut s = crate::run_summary(record, result.outcome, result.exit);
    for stream in record.streams().iter().filter(|s| s.bytes > 0) {
        s.push_str(&format!(
            "\nagentrun: {}: {}",
            stream.name.as_ref().map_or("output", |n| n.as_str()),
            CliRead.read_call(&record.stream_uri(stream), stream.start())
        ));
    }
    s
}

/// The final `--json` line: the library's serialization of the turn.
fn turn_json(turn: &AgentRun) -> Result<String, Failure> {
    serde_json::to_string(turn).map_err(Failure::runtime)
}
