//! `agentrun agent NAME -- PROMPT`: launch a harness CLI with the registry invocation
//! (`agentrun_core::harness::Harness::invocation`), interpret its stdout live, retain its
//! stdout and stderr as artifacts, and print the completion and the final message.
//!
//! The run goes through `agentrun_smol::Runner::run` with `observe_stdout`: the stdout tap
//! splits chunks into lines (`agentrun_core::lines::LineSplitter`, bounded per line) and feeds them to the
//! `Interpretation` on the pump's thread, printing each line's progress as soon as it is
//! decoded, in the format of `agentrun interpret` (shared printing in `interpret.rs`).
//!
//! After the exit, the harness's retained record (Muse session log, OpenCode session export)
//! is read when it has one, and the completion is printed on stdout; the run summary and the
//! `agentrun read` commands for the artifacts go to stderr. A timeout interrupts the
//! interpretation: no completion report, no retained read, the models observed so far.
//!
//! Exit codes: 0 when the session succeeded; 1 when it did not (a failed turn, a safeguard
//! refusal under `--security`, a harness that exited non-zero or was killed by a signal, a
//! capture fault) or on a runtime error; 124 on `--timeout`/`--idle-timeout`; 127 when the
//! harness program is not on `PATH`, 126 when it cannot be executed; 2 for usage errors.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::harness::{
    Completion, Harness, HarnessExit, Interpretation, LaunchRequest, OutcomeStatus, RetainedKind,
    RetainedRecord, RetainedRequest, Stdin,
};
use agentrun_core::lines::LineSplitter;
use agentrun_core::process::{Exit, ProcessResult, RunOptions, RunOutcome, StdinMode};
use agentrun_core::{PreviewLimits, ResultRecord};
use agentrun_fs::Store;
use clap::Args;

use crate::interpret::{Out, completion_json, human, models_line};
use crate::interrupts::Interrupts;
use crate::{Failure, duration};

/// The longest stdout line interpreted in full; longer lines are interpreted truncated (and
/// counted as unrecognized) while the artifact keeps them whole.
const MAX_LINE_BYTES: usize = 64 << 20;

/// The largest retained record read.
const RETAINED_CAP: u64 = 64 << 20;

/// How long `opencode session export ID` may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// Arguments of `agentrun agent`.
#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The harness to launch: claude, grok, agy (antigravity), codex, muse, opencode.
    #[arg(value_name = "NAME", value_parser = parse_harness)]
    harness: Harness,
    /// The model to request (passed to the harness verbatim).
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// The reasoning effort to request (claude, grok, codex; ignored by the others).
    #[arg(long, value_name = "E")]
    effort: Option<String>,
    /// A harness session id to resume.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// An argument passed to the harness verbatim, before the prompt (repeatable; may start
    /// with `-`), e.g. `--harness-arg=--permission-mode --harness-arg=acceptEdits`.
    #[arg(long = "harness-arg", value_name = "ARG", allow_hyphen_values = true)]
    harness_args: Vec<String>,
    /// Enable the security policy: `Model: …` progress and sticky safeguard refusals (exit 1).
    #[arg(long)]
    security: bool,
    /// Stop the harness after this long (e.g. 30s, 5m, 1h); exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    timeout: Option<Duration>,
    /// Stop the harness when it printed nothing for this long; exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    idle_timeout: Option<Duration>,
    /// The retained record to reconcile with, instead of the harness's own (Muse session log;
    /// OpenCode session export).
    #[arg(long, value_name = "FILE")]
    retained: Option<PathBuf>,
    /// Print JSON lines: `{"progress": …}` per progress line, then one completion object
    /// with the run's artifacts.
    #[arg(long)]
    pub(crate) json: bool,
    /// The prompt (several words are joined with spaces; everything after the first word
    /// belongs to the prompt, so put options before it or after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROMPT"
    )]
    prompt: Vec<String>,
}

fn parse_harness(s: &str) -> Result<Harness, String> {
    Harness::from_name(s).map_err(|e| e.to_string())
}

/// What the stdout tap owns while the harness runs.
struct Live {
    interp: Interpretation,
    splitter: LineSplitter,
    out: Out<io::Stdout>,
    json: bool,
    /// The first stdout write error (reported after the run; interpretation goes on).
    failure: Option<Failure>,
}

impl Live {
    fn chunk(&mut self, chunk: &[u8]) {
        let Live {
            interp,
            splitter,
            out,
            json,
            failure,
        } = self;
        splitter.push(chunk, |line| feed(interp, out, *json, failure, line.bytes));
    }

    /// End of output: feeds a last line without a newline.
    fn end(self) -> (Interpretation, u64, Option<Failure>) {
        let Live {
            mut interp,
            splitter,
            mut out,
            json,
            mut failure,
        } = self;
        let truncated = splitter.truncated_lines();
        splitter.finish(|line| feed(&mut interp, &mut out, json, &mut failure, line.bytes));
        (interp, truncated, failure)
    }
}

fn feed(
    interp: &mut Interpretation,
    out: &mut Out<io::Stdout>,
    json: bool,
    failure: &mut Option<Failure>,
    line: &[u8],
) {
    let progress = interp.handle_line(line);
    if failure.is_none()
        && let Err(f) = out.progress(&progress, json)
    {
        *failure = Some(f);
    }
}

/// Runs `agentrun agent`.
pub(crate) fn run(store: Store, args: AgentArgs) -> Result<ExitCode, Failure> {
    let harness = args.harness;
    let request = LaunchRequest {
        prompt: args.prompt.join(" "),
        model: args.model.clone(),
        effort: args.effort.clone(),
        resume: args.resume.clone(),
        harness_args: args.harness_args.clone(),
    };
    let invocation = harness.invocation(&request);
    let mut options = RunOptions::new(&invocation.program)
        .args(&invocation.args)
        .limits(PreviewLimits {
            // The stderr tail names why a harness failed.
            tail_lines: 5,
            ..PreviewLimits::default()
        })
        // SIGINT first for the CLIs that finish their session record on it.
        .stop_signals(harness.stop_signals().sequence)
        .stdin(match invocation.stdin {
            Stdin::Null => StdinMode::Null,
            Stdin::Prompt(prompt) => StdinMode::Bytes(prompt.into_bytes()),
        });
    for (key, value) in &invocation.env {
        options = options.env(key, value);
    }
    if let Some(t) = args.timeout {
        options = options.timeout(t);
    }
    if let Some(t) = args.idle_timeout {
        options = options.idle_timeout(t);
    }
    options.validate().map_err(Failure::usage)?;

    let mut interp = Interpretation::new(harness);
    if args.security {
        interp.for_security(args.model.as_deref());
    }
    let live = Arc::new(Mutex::new(Some(Live {
        interp,
        splitter: LineSplitter::new(MAX_LINE_BYTES),
        out: Out::new(io::stdout()),
        json: args.json,
        failure: None,
    })));
    let tap = live.clone();
    let runner = agentrun_smol::Runner::new(store.clone());
    let mut interrupts = Interrupts::install();
    let tap = move |chunk: &[u8]| {
        if let Some(live) = tap.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            live.chunk(chunk);
        }
    };
    let outcome = smol::block_on(
        runner
            .run(options)
            .observe_stdout(tap)
            .cancel_on(interrupts.requests())
            .into_future(),
    );
    let result = match outcome {
        Ok(result) => result,
        Err(agentrun_smol::RunError::Spawn { program, source }) => {
            let program = program.to_string_lossy();
            let (code, why) = if source.kind() == io::ErrorKind::NotFound
                && agentrun_process::program_exists(program.as_ref().as_ref())
            {
                (
                    127,
                    format!(
                        "{program:?} exists but its interpreter (its #! line) was not found \
                         ({source})"
                    ),
                )
            } else if source.kind() == io::ErrorKind::NotFound {
                (
                    127,
                    format!(
                        "{program:?} was not found on PATH; install the {harness} CLI or put it \
                         on PATH"
                    ),
                )
            } else {
                (
                    126,
                    format!("{program:?} cannot be executed ({source}); is it executable?"),
                )
            };
            eprintln!("agentrun: error: cannot launch the {harness} harness: {why}");
            return Ok(ExitCode::from(code));
        }
        Err(e) => return Err(Failure::runtime(e)),
    };
    let taken = live.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(live) = taken else {
        return Err(Failure::runtime("the stdout tap was lost"));
    };
    let (interp, truncated, write_failure) = live.end();
    let mut out = Out::new(io::stdout());
    if let Some(f) = write_failure {
        return Err(f);
    }
    if truncated > 0 {
        eprintln!(
            "agentrun: warning: {truncated} stdout line(s) longer than {} MiB were interpreted \
             truncated; the stdout artifact holds them in full",
            MAX_LINE_BYTES >> 20
        );
    }
    eprintln!("{}", footer(&result));
    for fault in &result.record.faults {
        let stream = fault.stream.as_ref().map_or("output", |s| s.as_str());
        eprintln!(
            "agentrun: error: capturing {stream} failed: {}; the output is incomplete",
            fault.message
        );
    }

    if result.outcome != RunOutcome::Completed {
        let interrupted = interp.interrupt();
        let models = interrupted.observed_models();
        let why = match result.outcome {
            RunOutcome::IdleTimedOut => "idle_timed_out",
            RunOutcome::Cancelled => "cancelled",
            _ => "timed_out",
        };
        if args.json {
            let json = serde_json::json!({
                "harness": harness.name(),
                "observed_models": models,
                "interrupted": why,
                "run": run_json(&result),
            });
            out.line(&json.to_string())?;
        } else {
            out.line(&models_line(models))?;
            out.line(&format!("status: interrupted ({})", why.replace('_', " ")))?;
        }
        out.flush()?;
        return Ok(ExitCode::from(interrupts.exit_code().unwrap_or(124)));
    }

    let exit = match result.exit {
        Some(Exit::Code(0)) => HarnessExit::Success,
        other => HarnessExit::Failed {
            diagnostic: exit_diagnostic(harness, other, &result),
        },
    };
    let finished = interp.finish(exit);
    let retained = match finished.retained_request() {
        Some(request) => match acquire(&store, &request, args.resume.as_deref(), &args.retained) {
            Ok(record) => Some(record),
            Err(why) => {
                eprintln!("agentrun: warning: {why}; models and usage come from the stream");
                None
            }
        },
        None => {
            if let Some(path) = &args.retained {
                eprintln!(
                    "agentrun: warning: {harness} has no retained record; ignoring {}",
                    path.display()
                );
            }
            None
        }
    };
    let models = finished.observed_models().to_vec();
    let completion = finished.complete(retained);
    if args.json {
        let mut json = completion_json(harness, &models, &completion);
        json["run"] = run_json(&result);
        out.line(&json.to_string())?;
    } else {
        out.line(&human(&models, &completion))?;
    }
    out.flush()?;
    let mut code = exit_code(&completion);
    if !result.record.faults.is_empty() && code == 0 {
        code = 1;
    }
    Ok(ExitCode::from(code))
}

/// 0 when the session succeeded, else 1 (failed turn, refusal, failed process).
fn exit_code(completion: &Completion) -> u8 {
    match completion.outcome.status {
        OutcomeStatus::Succeeded => 0,
        OutcomeStatus::TurnFailed { .. }
        | OutcomeStatus::ExecutionFailed { .. }
        | OutcomeStatus::Refused { .. } => 1,
    }
}

/// `claude exited with code 3: <last stderr line>`.
fn exit_diagnostic(harness: Harness, exit: Option<Exit>, result: &ProcessResult) -> String {
    let mut s = match exit {
        Some(Exit::Code(c)) => format!("{harness} exited with code {c}"),
        Some(Exit::Signal(sig)) => format!("{harness} was killed by signal {sig}"),
        None => format!("{harness} ended without an exit status"),
    };
    let last = result.stderr().and_then(|s| {
        let text = s.tail.as_ref().map_or(s.preview.text.as_str(), |t| &t.text);
        text.lines().rev().find(|l| !l.trim().is_empty())
    });
    if let Some(line) = last {
        s.push_str(": ");
        s.extend(line.trim().chars().take(300));
    }
    s
}

/// The run summary and the `agentrun read` command of every non-empty stream.
fn footer(result: &ProcessResult) -> String {
    let record: &ResultRecord = &result.record;
    let mut s = crate::run_summary(record, result.outcome, result.exit);
    for stream in record.streams().iter().filter(|s| s.bytes > 0) {
        s.push_str(&format!(
            "\nagentrun: {}: agentrun read {}",
            stream.name.as_ref().map_or("output", |n| n.as_str()),
            record.stream_uri(stream)
        ));
    }
    s
}

/// The `run` member of the `--json` object: run id, how it ended, the artifacts.
fn run_json(result: &ProcessResult) -> serde_json::Value {
    let record = &result.record;
    let artifacts: serde_json::Map<String, serde_json::Value> = record
        .streams()
        .iter()
        .map(|s| {
            (
                s.name.as_ref().map_or("output", |n| n.as_str()).to_owned(),
                serde_json::Value::String(record.stream_uri(s).to_string()),
            )
        })
        .collect();
    serde_json::json!({
        "run_id": record.run_id,
        "outcome": result.outcome,
        "exit": result.exit,
        "duration_ms": result.duration.as_millis() as u64,
        "artifacts": artifacts,
    })
}

/// Reads and parses the retained record; the error says why it is absent.
fn acquire(
    store: &Store,
    request: &RetainedRequest,
    resume: Option<&str>,
    given: &Option<PathBuf>,
) -> Result<RetainedRecord, String> {
    let what = match request.kind {
        RetainedKind::MuseSessionLog => "the Muse session log",
        RetainedKind::OpenCodeExport => "the OpenCode session export",
    };
    let bytes = match given {
        Some(path) => read_capped(path).map_err(|e| format!("{what} {}: {e}", path.display()))?,
        None => {
            let id = request
                .session_id
                .as_deref()
                .or(resume)
                .ok_or_else(|| format!("{what} cannot be read: the stream named no session"))?;
            if !plausible_session_id(id) {
                return Err(format!(
                    "{what} cannot be read: the session id {id:?} is not a plain identifier"
                ));
            }
            match request.kind {
                RetainedKind::MuseSessionLog => {
                    let path = muse_session_log(id).ok_or_else(|| {
                        format!("{what} cannot be located: neither MUSE_HOME nor HOME is set")
                    })?;
                    read_capped(&path).map_err(|e| format!("{what} {}: {e}", path.display()))?
                }
                RetainedKind::OpenCodeExport => opencode_export(store, id)
                    .map_err(|e| format!("{what} (opencode session export {id}): {e}"))?,
            }
        }
    };
    request
        .kind
        .parse(&bytes)
        .map_err(|e| format!("{what} is unreadable: {e}"))
}

/// Whether a session id from the stream may name a file or an argument: letters, digits,
/// `-`, `_`, `.`, `:`, not starting with `-` or `.` (no paths, no options).
fn plausible_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 256
        && !id.starts_with(['-', '.'])
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// Where Muse keeps a session's log: `$MUSE_HOME/sessions/<id>.jsonl`, `MUSE_HOME`
/// defaulting to `~/.muse` (agentrun's reading; Muse does not document it).
fn muse_session_log(id: &str) -> Option<PathBuf> {
    let home = match std::env::var_os("MUSE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".muse"),
    };
    Some(home.join("sessions").join(format!("{id}.jsonl")))
}

fn read_capped(path: &Path) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    if file.metadata()?.len() > RETAINED_CAP {
        return Err(io::Error::other(format!(
            "larger than {} MiB",
            RETAINED_CAP >> 20
        )));
    }
    let mut bytes = Vec::new();
    file.take(RETAINED_CAP).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Runs `opencode session export ID` (retained in the store like any run, with a short
/// timeout) and returns its stdout.
fn opencode_export(store: &Store, id: &str) -> Result<Vec<u8>, String> {
    let options = RunOptions::new("opencode")
        .args(["session", "export", id])
        .timeout(EXPORT_TIMEOUT)
        .kill_grace(Duration::from_secs(1));
    let runner = agentrun_smol::Runner::new(store.clone());
    let result = smol::block_on(runner.run(options).into_future()).map_err(|e| e.to_string())?;
    match (result.outcome, result.exit) {
        (RunOutcome::Completed, Some(Exit::Code(0))) => {}
        (RunOutcome::Completed, exit) => {
            return Err(exit_diagnostic(Harness::OpenCode, exit, &result));
        }
        _ => return Err(format!("timed out after {}s", EXPORT_TIMEOUT.as_secs())),
    }
    let stdout = result.stdout().ok_or("no stdout was captured")?;
    if stdout.bytes > RETAINED_CAP {
        return Err(format!("larger than {} MiB", RETAINED_CAP >> 20));
    }
    let mut bytes = Vec::new();
    store
        .copy_to(&result.record.stream_uri(stdout), &mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_from_the_stream_cannot_be_paths_or_options() {
        for ok in ["ses_abc123", "muse-sess-42", "0b7f.e:1"] {
            assert!(plausible_session_id(ok), "{ok}");
        }
        for bad in ["", "../etc", "a/b", "-rf", ".hidden", "a b", "x\n"] {
            assert!(!plausible_session_id(bad), "{bad:?}");
        }
    }
}
