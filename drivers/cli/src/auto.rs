//! `agentrun auto NAME [OPTIONS] OBJECTIVE…`, `agentrun auto --continue SESSION` and
//! `agentrun append SESSION TEXT`: auto mode on the command line.
//!
//! Argument parsing and printing only: the session is an `agentrun_smol::AutoSession`
//! (created from the arguments or resumed from its directory, run to its end). stderr
//! gets the session id and directory at start, one line per logged event while it runs, the
//! harness's own progress indented under them, and a summary at the end; `--json` prints the
//! final state as one JSON document on stdout.
//!
//! Exit codes: 0 completed, stopped at max turns, or stopped at its budget (`--max-cost-usd`,
//! `--max-tokens`: status `budget`); the Evaluate turn's code when it failed;
//! the required phase's code on abort (its reason on stderr); 127/126 when the harness cannot
//! be started; 128+N when stopped by signal N (continue the session with `--continue`); 125
//! for usage errors (including `--max-turns` below 3) and agentrun's own failures.

use agentrun_process::error_chain;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentrun_core::auto_mode::sanitize::MAX_INPUT_BYTES;
use agentrun_core::auto_mode::{AutoModeError, DEFAULT_MAX_TURNS};
use agentrun_core::budget::PriceTable;
use agentrun_core::harness::Harness;
use agentrun_core::retry::DEFAULT_AUTO_MAX_RETRIES;
use agentrun_fs::Store;
use agentrun_fs::auto_session::SessionDir;
use agentrun_smol::{
    AutoEnd, AutoProgress, AutoSession, AutoSessionError, AutoSessionOptions, StopRequests,
};
use clap::Args;

use crate::failure::write_or_quiet;
use crate::interrupts::Interrupts;
use crate::{Failure, duration};

/// Arguments of `agentrun auto`.
#[derive(Debug, Args)]
pub(crate) struct AutoArgs {
    /// The harness to drive: claude, grok, agy (antigravity), codex, muse, opencode, qwen, pi,
    /// gemini.
    #[arg(
        value_name = "NAME",
        value_parser = crate::harness_arg::parse_harness,
        required_unless_present = "continue_session"
    )]
    harness: Option<Harness>,
    /// The model to request (passed to the harness verbatim).
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// The reasoning effort to request: a plain word such as low, medium or high (claude, grok,
    /// codex; opencode gets it as its variant).
    #[arg(long, value_name = "E")]
    effort: Option<String>,
    /// The last turn: clarify is turn 1, plan turn 2, then one execute/evaluate turn each
    /// (at least 3).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_TURNS)]
    max_turns: u32,
    /// A command (run with `sh -c` in the current directory) that must exit 0 before a
    /// claimed completion counts, e.g. "cargo test".
    #[arg(long, value_name = "CMD")]
    verify: Option<String>,
    /// The session directory [default: <store>/sessions/<session id>].
    #[arg(long, value_name = "DIR")]
    session_dir: Option<PathBuf>,
    /// An argument passed to the harness verbatim before the prompt (repeatable; may start
    /// with `-`), e.g. `--harness-arg=--permission-mode --harness-arg=acceptEdits`.
    #[arg(long = "harness-arg", value_name = "ARG", allow_hyphen_values = true)]
    harness_args: Vec<String>,
    /// Stop a harness turn after this long (it counts as exit code 124).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    turn_timeout: Option<Duration>,
    /// Run a turn that hit a rate limit or an overload again, up to N times (0: never),
    /// resuming the same harness session after a wait.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_AUTO_MAX_RETRIES)]
    max_retries: u32,
    /// The first wait before a retry when the harness does not say how long; doubled for
    /// each further retry, with jitter, each wait at most 15 minutes.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_backoff)]
    retry_backoff: Duration,
    /// Stop a harness turn that emitted no event line for this long (`0`: never); the turn
    /// fails as `stalled`, naming the last event seen, with exit code 124 (like a turn
    /// timeout).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10m")]
    stall_timeout: Duration,
    /// Cap the whole session's cost in US dollars (e.g. 5 or 0.50): once the turns spent
    /// this much, no further turn starts and the session ends with status `budget`. A
    /// harness that reports tokens but no cost is priced from the price table (estimated).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    max_cost_usd: Option<f64>,
    /// Cap the whole session's tokens (input plus output), like `--max-cost-usd`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_tokens: Option<u64>,
    /// Continue an interrupted session (its id or directory) from its last transition.
    #[arg(
        long = "continue",
        value_name = "SESSION",
        conflicts_with_all = ["harness", "model", "effort", "verify", "session_dir", "harness_args", "objective", "max_retries", "retry_backoff", "max_cost_usd", "max_tokens"]
    )]
    continue_session: Option<String>,
    /// Print the final session state as one JSON document on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// The objective (several words are joined with spaces): it starts at the first word
    /// that is not an option, and every word from there on is the objective's, options
    /// included. An objective that starts with `-` goes after `--`.
    // No `allow_hyphen_values`, so that a misspelt option is an error, never the objective.
    #[arg(
        trailing_var_arg = true,
        value_name = "OBJECTIVE",
        required_unless_present = "continue_session"
    )]
    objective: Vec<String>,
}

/// Arguments of `agentrun append`.
#[derive(Debug, Args)]
pub(crate) struct AppendArgs {
    /// The session: its id, or its directory.
    #[arg(value_name = "SESSION")]
    session: String,
    /// The instruction, or `-` to read it from stdin.
    #[arg(value_name = "TEXT", allow_hyphen_values = true)]
    text: String,
}

/// A line on stderr; a failing stderr is not worth dying for.
fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Runs `agentrun auto`: parses into a library session, prints its progress and outcome.
pub(crate) fn run(store: Store, prices: PriceTable, args: AutoArgs) -> Result<ExitCode, Failure> {
    let sessions_dir = store.root().join(agentrun_fs::auto_session::SESSIONS_DIR);
    let runner = agentrun_smol::Runner::new(store);
    let session = smol::block_on(async {
        match &args.continue_session {
            Some(session) => AutoSession::resume(runner, session)
                .await
                .map(|s| s.prices(prices)),
            None => {
                let Some(harness) = args.harness else {
                    return Ok(None);
                };
                let mut options = AutoSessionOptions::new(harness, args.objective.join(" "))
                    .max_turns(args.max_turns)
                    .max_retries(args.max_retries)
                    .retry_backoff(args.retry_backoff)
                    .prices(prices);
                if let Some(usd) = args.max_cost_usd {
                    options = options.max_cost_usd(usd);
                }
                if let Some(tokens) = args.max_tokens {
                    options = options.max_tokens(tokens);
                }
                if let Some(model) = &args.model {
                    options = options.model(model);
                }
                if let Some(effort) = &args.effort {
                    options = options.effort(effort);
                }
                for arg in &args.harness_args {
                    options = options.harness_arg(arg);
                }
                if let Some(verify) = &args.verify {
                    options = options.verify(verify);
                }
                if let Some(dir) = &args.session_dir {
                    options = options.session_dir(dir);
                }
                AutoSession::create(runner, options).await
            }
        }
        .map(Some)
    })
    .map_err(session_failure)?
    .ok_or_else(|| Failure::usage("name the harness to drive, e.g. `claude`"))?;
    let harness = session.state().settings.harness.clone();
    say(&format!(
        "agentrun: session {} in {}",
        session.id(),
        session.dir().display()
    ));

    let mut interrupts = Interrupts::install();
    let outcome = {
        let mut session = session.stop_on(StopRequests::new(interrupts.requests()));
        if let Some(timeout) = args.turn_timeout {
            session = session.turn_timeout(timeout);
        }
        session = session.stall_timeout(args.stall_timeout);
        smol::block_on(session.run(|progress| match progress {
            AutoProgress::Event(line) => say(&format!("agentrun: {line}")),
            AutoProgress::Harness(line) => say(&format!("  {line}")),
            _ => {}
        }))
        .map_err(|e| Failure::runtime(error_chain(&e)))?
    };
    let state = outcome.state();
    let resume_hint = || {
        format!(
            "the session is saved at turn {} ({}); continue it with `agentrun auto --continue {}`",
            state.turn,
            state.phase.as_str(),
            outcome.dir().display()
        )
    };
    match outcome.end() {
        AutoEnd::Finished => {}
        AutoEnd::Interrupted => {
            say(&format!("agentrun: interrupted; {}", resume_hint()));
            let code = interrupts.exit_code().unwrap_or(outcome.exit_code());
            return Ok(ExitCode::from(code));
        }
        AutoEnd::SpawnFailed {
            program, reason, ..
        } => {
            say(&format!(
                "agentrun: error: cannot launch the {harness} harness `{program}`: {reason}; {}",
                resume_hint()
            ));
            return Ok(ExitCode::from(outcome.exit_code()));
        }
        AutoEnd::Failed(e) => {
            return Err(Failure::runtime(format!(
                "{}; {}",
                error_chain(e),
                resume_hint()
            )));
        }
        other => {
            return Err(Failure::runtime(format!(
                "the session ended unexpectedly ({other:?}); {}",
                resume_hint()
            )));
        }
    }

    if let Some(reason) = outcome.abort() {
        say(&format!("agentrun: error: session aborted: {reason}"));
    }
    say(&format!("agentrun: {}", outcome.summary()));
    if args.json {
        let json = crate::json_out::document(state)?;
        write_or_quiet(&mut io::stdout().lock(), json.as_bytes())?;
    } else {
        // stdout is for the result: how the session ended, and where its turns are.
        let mut text = crate::sessions::header(state);
        if outcome.dir() == sessions_dir.join(&state.session_id) {
            text.push_str(&format!("turns: agentrun show {}\n", state.session_id));
        } else {
            text.push_str(&format!(
                "state: {}\n",
                outcome
                    .dir()
                    .join(agentrun_fs::auto_session::STATE_FILE)
                    .display()
            ));
        }
        write_or_quiet(&mut io::stdout().lock(), text.as_bytes())?;
    }
    Ok(ExitCode::from(outcome.exit_code()))
}

/// A cost limit: a positive, finite number of US dollars (`5`, `0.50`, `$2`).
pub(crate) fn parse_usd(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_start_matches('$');
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("{s:?} is not a positive number of US dollars")),
        Err(_) => Err(format!(
            "{s:?} is not a number of US dollars (e.g. 5 or 0.50)"
        )),
    }
}

/// A session that could not be created or resumed: bad settings and sessions are usage
/// errors (with the option that set the value named), the rest agentrun's own failures.
fn session_failure(e: AutoSessionError) -> Failure {
    match &e {
        AutoSessionError::Settings(AutoModeError::TooFewTurns(_)) => {
            Failure::usage(format!("--max-turns: {e}"))
        }
        AutoSessionError::Settings(_)
        | AutoSessionError::Launch(_)
        | AutoSessionError::SessionDir(_)
        | AutoSessionError::Resume(_) => Failure::usage(error_chain(&e)),
        _ => Failure::runtime(error_chain(&e)),
    }
}

/// Runs `agentrun append`.
pub(crate) fn append(store: Store, args: AppendArgs) -> Result<ExitCode, Failure> {
    let path = SessionDir::resolve(&store, &args.session).map_err(Failure::usage)?;
    let dir = SessionDir::open(path).map_err(Failure::usage)?;
    let text = if args.text == "-" {
        let mut bytes = Vec::new();
        io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| {
                Failure::runtime(format!("cannot read the instruction from stdin: {e}"))
            })?;
        bytes
    } else {
        args.text.into_bytes()
    };
    if text.iter().all(u8::is_ascii_whitespace) {
        return Err(Failure::usage("the instruction is empty"));
    }
    let name = dir.drop_instruction(&text).map_err(Failure::usage)?;
    say(&format!(
        "agentrun: queued {name} for the next execute turn of {}",
        dir.path().display()
    ));
    Ok(ExitCode::SUCCESS)
}
