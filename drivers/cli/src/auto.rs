//! `agentrun auto NAME [OPTIONS] OBJECTIVE…`, `agentrun auto --continue SESSION` and
//! `agentrun append SESSION TEXT`: auto mode on the command line.
//!
//! The session runs `agentrun_core::turn::run_session_loop` over an
//! `agentrun_smol::AutoModeRunner` (one harness turn per prompt) and an
//! `agentrun_smol::AutoModeChannel` (the phase machine over the session directory). stderr
//! gets the session id and directory at start, one line per logged event while it runs, the
//! harness's own progress indented under them, and a summary at the end; `--json` prints the
//! final state as one JSON document on stdout.
//!
//! Exit codes: 0 completed or stopped at max turns; the Evaluate turn's code when it failed;
//! the required phase's code on abort (its reason on stderr); 127/126 when the harness cannot
//! be started; 128+N when stopped by signal N (continue the session with `--continue`); 125
//! for usage errors (including `--max-turns` below 3) and agentrun's own failures.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use agentrun_core::auto_mode::sanitize::MAX_INPUT_BYTES;
use agentrun_core::auto_mode::{
    AutoMode, DEFAULT_MAX_TURNS, DEFAULT_RESULT_SINK_VAR, SessionStatus, Settings,
};
use agentrun_core::harness::{Harness, LaunchRequest};
use agentrun_core::turn::{LoopError, TurnError, run_session_loop};
use agentrun_fs::Store;
use agentrun_fs::auto_session::{SessionDir, new_session_id};
use agentrun_smol::{AutoModeChannel, AutoModeRunner, HarnessLaunch, StopRequests};
use clap::Args;

use crate::failure::write_or_quiet;
use crate::interrupts::Interrupts;
use crate::{Failure, duration};

/// Arguments of `agentrun auto`.
#[derive(Debug, Args)]
pub(crate) struct AutoArgs {
    /// The harness to drive: claude, grok, agy (antigravity), codex, muse, opencode, gemini.
    #[arg(
        value_name = "NAME",
        value_parser = parse_harness,
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
    /// Continue an interrupted session (its id or directory) from its last transition.
    #[arg(
        long = "continue",
        value_name = "SESSION",
        conflicts_with_all = ["harness", "model", "effort", "verify", "session_dir", "harness_args", "objective"]
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

fn parse_harness(s: &str) -> Result<Harness, String> {
    Harness::from_name(s).map_err(|e| e.to_string())
}

/// A line on stderr; a failing stderr is not worth dying for.
fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Runs `agentrun auto`.
pub(crate) fn run(store: Store, args: AutoArgs) -> Result<ExitCode, Failure> {
    let now = SystemTime::now();
    let (machine, dir) = match &args.continue_session {
        Some(session) => {
            let path = SessionDir::resolve(&store, session).map_err(Failure::usage)?;
            let dir = SessionDir::open(path).map_err(Failure::usage)?;
            let state = dir.read_state().map_err(Failure::runtime)?;
            let machine = AutoMode::resume(state, now).map_err(Failure::usage)?;
            (machine, dir)
        }
        None => {
            let Some(harness) = args.harness else {
                return Err(Failure::usage("name the harness to drive, e.g. `claude`"));
            };
            let workspace = std::env::current_dir()
                .map_err(|e| Failure::runtime(format!("cannot read the current directory: {e}")))?;
            let settings = Settings {
                objective: args.objective.join(" "),
                harness: harness.name().to_owned(),
                model: args.model.clone(),
                effort: args.effort.clone(),
                harness_args: args.harness_args.clone(),
                verify: args.verify.clone(),
                workspace: Some(workspace.to_string_lossy().into_owned()),
                max_turns: args.max_turns,
                result_sink_var: DEFAULT_RESULT_SINK_VAR.to_owned(),
                // Every registered harness has a resume flag.
                harness_resumes: true,
            };
            // A model or effort the harness would refuse fails every turn the same way, and
            // would be saved in the session: refuse it before anything is created.
            harness
                .invocation(&LaunchRequest {
                    model: args.model.clone(),
                    effort: args.effort.clone(),
                    ..LaunchRequest::default()
                })
                .map_err(Failure::usage)?;
            let id = new_session_id();
            // Refuse bad settings before anything is created.
            let machine = AutoMode::new(id.clone(), settings, now).map_err(Failure::usage)?;
            let path = match &args.session_dir {
                Some(dir) => dir.clone(),
                None => SessionDir::default_path(&store, &id)
                    .map_err(Failure::runtime)?
                    .ok_or_else(|| Failure::runtime("the new session id is not valid"))?,
            };
            let dir = SessionDir::create(path).map_err(Failure::usage)?;
            (machine, dir)
        }
    };
    let state = machine.state();
    let harness = Harness::from_name(&state.settings.harness).map_err(Failure::runtime)?;
    let session_id = state.session_id.clone();
    say(&format!(
        "agentrun: session {session_id} in {}",
        dir.path().display()
    ));
    let launch = HarnessLaunch {
        env: Vec::new(),
        model: state.settings.model.clone(),
        effort: state.settings.effort.clone(),
        harness_args: state.settings.harness_args.clone(),
        workspace: state.settings.workspace.as_ref().map(PathBuf::from),
        sink_var: Some(state.settings.result_sink_var.clone()),
        turn_timeout: args.turn_timeout,
        idle_timeout: None,
    };
    let resume = state.harness_session_id.clone();

    let mut interrupts = Interrupts::install();
    let runner_core = agentrun_smol::Runner::new(store.clone());
    let progress: agentrun_smol::ProgressSink = Arc::new(Mutex::new(|line: &str| {
        say(&format!("  {line}"));
    }));
    let log: agentrun_smol::ProgressSink = Arc::new(Mutex::new(|line: &str| {
        say(&format!("agentrun: {line}"));
    }));
    let outcome = {
        let stop = StopRequests::new(interrupts.requests());
        smol::block_on(async {
            let mut runner = AutoModeRunner::new(runner_core.clone(), harness, launch, &session_id)
                .resuming(resume)
                .stop_on(stop.clone())
                .progress(progress);
            let mut channel =
                AutoModeChannel::new(machine, dir, runner_core, agentrun_smol::SmolRuntime)
                    .await?
                    .stop_on(stop)
                    .log_to(log);
            // Auto mode never idles; a short wait keeps a misbehaving channel from spinning.
            let result = run_session_loop(&mut runner, &mut channel, || async {
                smol::Timer::after(Duration::from_millis(200)).await;
            })
            .await;
            // The channel borrows the signal handlers; keep only what the report needs.
            let dir = channel.dir().path().to_owned();
            let state = channel.state().clone();
            Ok::<_, LoopError>((result, state, dir))
        })
    };
    let (result, state, dir) = outcome.map_err(Failure::runtime)?;
    let state = &state;
    if let Err(e) = result {
        let resume_hint = format!(
            "the session is saved at turn {} ({}); continue it with `agentrun auto --continue {}`",
            state.turn,
            state.phase.as_str(),
            dir.display()
        );
        return match e {
            LoopError::Turn(TurnError::Interrupted) => {
                say(&format!("agentrun: interrupted; {resume_hint}"));
                Ok(ExitCode::from(interrupts.exit_code().unwrap_or(130)))
            }
            LoopError::Turn(TurnError::Spawn {
                program,
                reason,
                exit_code,
            }) => {
                say(&format!(
                    "agentrun: error: cannot launch the {harness} harness `{program}`: {reason}; \
                     {resume_hint}"
                ));
                Ok(ExitCode::from(u8::try_from(exit_code).unwrap_or(1)))
            }
            other => Err(Failure::runtime(format!("{other}; {resume_hint}"))),
        };
    }

    if let Some(reason) = &state.abort {
        say(&format!("agentrun: error: session aborted: {reason}"));
    }
    let verification = match (state.status, state.verified, state.verifications.last()) {
        (SessionStatus::Completed, Some(true), _) => "passed".to_owned(),
        (SessionStatus::Completed, _, _) => "none configured (completion unverified)".to_owned(),
        (_, _, Some(v)) => format!(
            "last run failed ({})",
            v.exit_code
                .map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"))
        ),
        _ if state.settings.verify.is_some() => "never run (no completion claimed)".to_owned(),
        _ => "none configured".to_owned(),
    };
    let usage = state
        .usage
        .total()
        .map_or_else(String::new, |u| format!("; usage: {}", u.line()));
    say(&format!(
        "agentrun: session {}: status {}, {} of at most {} turns, {} harness runs; verification: {verification}{usage}",
        state.session_id,
        state.status.as_str(),
        state.turn,
        state.settings.max_turns,
        state.harness_turns,
    ));
    if args.json {
        let mut json = serde_json::to_string(state).map_err(Failure::runtime)?;
        json.push('\n');
        write_or_quiet(&mut io::stdout().lock(), json.as_bytes())?;
    }
    let code = state.exit_code;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
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
