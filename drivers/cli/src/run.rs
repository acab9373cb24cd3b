//! `agentrun run`: run a program, capture its output, print the bounded preview.
//!
//! stdout gets the model-facing preview (or the JSON record, or the clean answer with
//! `--sink`); stderr gets one summary line and an `agentrun read` command per non-empty
//! stream, with the exact continuation when the preview was cut.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::ResultRecord;
use agentrun_core::process::{Exit, RunOptions, RunOutcome, StdinMode};
use agentrun_core::record::StreamRecord;
use agentrun_core::sink::ResultSink;
use clap::Args;

use crate::failure::{Failure, plural, write_or_quiet};
use crate::json_out::JsonStyle;
use crate::read::CliRead;
use crate::settings::{LimitFlags, Settings};
use crate::status_line::{self, StatusLine};
use crate::{duration, interrupts};
use agentrun_core::ReadSyntax;

/// The exit code of `run --sink --require-result` when the program exited 0 but wrote no
/// usable result.
const NO_RESULT: u8 = 1;

/// Arguments of `agentrun run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    limits: LimitFlags,
    /// Stop the program after this long (e.g. 30s, 5m, 1h); exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    timeout: Option<Duration>,
    /// Stop the program when it printed nothing on stdout or stderr for this long; exit code
    /// 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    idle_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when stopping the program.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "5s")]
    kill_grace: Duration,
    /// Leave what the program starts in the background running after it exits (daemons
    /// started on purpose). By default whatever is left of its process group is stopped when
    /// it exits (SIGTERM, the kill grace, SIGKILL).
    #[arg(long)]
    keep_background: bool,
    /// The program's standard input: `null` (nothing), `inherit` (agentrun's own stdin: a pipe
    /// or a file, not a terminal), or FILE: a file, or a FIFO or pipe such as `<(cmd)` whose
    /// bytes are passed on as they come.
    #[arg(long, value_name = "null|inherit|FILE", default_value = "null")]
    stdin: String,
    /// Give the program a clean result channel (a private file named in $AGENTRUN_RESULT_SINK)
    /// and print its answer verbatim on stdout, the preview on stderr.
    #[arg(long, help_heading = "Result channel")]
    sink: bool,
    /// The variable that names the result sink (e.g. AMPLIHACK_RESULT_SINK); it is removed
    /// from the program's environment unless --sink is given [default: AGENTRUN_RESULT_SINK,
    /// or the config file's `sink_var`].
    #[arg(long, value_name = "NAME", help_heading = "Result channel")]
    sink_var: Option<String>,
    /// Fail when the program wrote no usable result to the sink: exit 1 instead of the
    /// program's 0 (a non-zero exit code of the program is passed through as it is).
    #[arg(long, requires = "sink", help_heading = "Result channel")]
    require_result: bool,
    /// Show the program's stdout and stderr on the terminal as they come, like `tee`, while
    /// capturing them; afterwards only the summary and the read commands are printed.
    #[arg(long, conflicts_with_all = ["json", "sink"])]
    live: bool,
    /// Print one JSON object (status, exit, artifact URIs, the record) instead of the preview.
    #[arg(long)]
    pub(crate) json: bool,
    /// No status line while the program runs. (It is shown only when stderr is a terminal
    /// and NO_COLOR is not set; the summary and read commands are printed either way.)
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Run the program in DIR (recorded with the run; `agentrun runs` shows it).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Set the environment variable KEY to VALUE for the program (repeatable).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(OsString, OsString)>,
    /// Label the run (recorded with it; `agentrun runs --label L` lists the runs labelled L).
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// The program to run (looked up on PATH, never run through a shell), then its
    /// arguments: every word after PROGRAM is the program's, options and `--` included.
    // One positional rather than PROGRAM and ARGS: clap ends option parsing only once a
    // trailing positional has its first value, so with a separate PROGRAM an ARGS word such
    // as `--version` or `--json` would still be taken as agentrun's own. No
    // `allow_hyphen_values`: a misspelt option before PROGRAM is an error, not the program.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        value_names = ["PROGRAM", "ARGS"]
    )]
    command: Vec<OsString>,
}

/// `KEY=VALUE`, split at the first `=`: the key must be non-empty (the value may be empty or
/// hold more `=`).
fn parse_env(spec: &str) -> Result<(OsString, OsString), String> {
    match spec.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.into(), value.into())),
        _ => Err(format!(
            "expected KEY=VALUE (e.g. --env RUST_LOG=debug), got {spec:?}"
        )),
    }
}

fn stdin_mode(spec: &str) -> StdinMode {
    match spec {
        "null" => StdinMode::Null,
        "inherit" => StdinMode::Inherit,
        // Opened by the runner without waiting for a writer, so a FIFO or `<(cmd)` never
        // holds up the timeout or the signal handling.
        path => StdinMode::File(PathBuf::from(path)),
    }
}

/// Runs `agentrun run`.
pub(crate) fn run(settings: &Settings, args: RunArgs) -> Result<ExitCode, Failure> {
    let limits = settings.limits(&args.limits)?;
    let sink_var = settings.sink_var(args.sink_var.as_deref()).value;
    let (program, program_args) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("name the program to run"))?;
    let mut options = RunOptions::new(program)
        .args(program_args)
        .limits(limits)
        .kill_grace(args.kill_grace)
        .keep_background(args.keep_background)
        .sink_var(&sink_var)
        .stdin(stdin_mode(&args.stdin));
    if let Some(t) = args.timeout {
        options = options.timeout(t);
    }
    if let Some(t) = args.idle_timeout {
        options = options.idle_timeout(t);
    }
    if args.sink {
        options = options.with_result_sink(ResultSink::Allocate);
    }
    if let Some(dir) = &args.cwd {
        options = options.current_dir(dir);
    }
    for (key, value) in &args.env {
        options = options.env(key, value);
    }
    if let Some(label) = &args.label {
        options = options.label(label);
    }
    options.validate().map_err(Failure::usage)?;
    let store = settings.open_store()?;
    let runner = agentrun_smol::Runner::new(store.clone());
    let mut interrupts = interrupts::Interrupts::install();
    let mut run = runner.run(options).cancel_on(interrupts.requests());
    // The first error of the live copy to stdout, reported (exit 125) once the run is over.
    let live_error: LiveError = Arc::default();
    // The status line is the only thing on the terminal while the program runs; with
    // --live its output is.
    let status = StatusLine::default();
    if args.live {
        run = run
            .observe_stdout(tee(io::stdout, Some(live_error.clone())))
            .observe_stderr(tee(io::stderr, None));
    } else if status_line::wanted(args.quiet) {
        let line = status.clone();
        run = run.on_progress(status_line::REDRAW_EVERY, move |p| line.draw(p));
    }
    let result = smol::block_on(run.into_future());
    status.erase();
    let result = match result {
        Ok(r) => r,
        Err(e) if let Some(spawn) = e.spawn_failure() => {
            let failure = Failure {
                code: spawn.exit_code(),
                kind: "spawn",
                message: e.to_string(),
            };
            return Ok(failure.report(args.json.then_some(JsonStyle::Document)));
        }
        Err(e @ agentrun_smol::RunError::StdinIsTerminal) => {
            return Err(Failure::usage(format!(
                "--stdin inherit: {e} (`producer | agentrun run --stdin inherit …`, \
                 `--stdin FILE`, or the default `--stdin null`)"
            )));
        }
        Err(e @ agentrun_smol::RunError::WorkingDirectory { .. }) => {
            return Err(Failure::usage(format!("--cwd: {e}")));
        }
        Err(agentrun_smol::RunError::StdinFile { path, source, .. }) => {
            return Err(Failure::usage(format!(
                "--stdin {}: {source}",
                path.display()
            )));
        }
        Err(e) => return Err(Failure::runtime(e)),
    };
    // The library's policy; a stop on a signal agentrun received is told by its own code.
    let code = match (result.outcome, interrupts.exit_code()) {
        (RunOutcome::Cancelled, Some(code)) => code,
        _ => agentrun_process::run_exit_code(&result),
    };
    // A program that exited 0 without the answer it was asked for has not succeeded, as an
    // agent session that exits 0 without succeeding exits 1; a program that failed already
    // says so with its own code, which stays.
    let code = if args.require_result && code == 0 && result.result.is_none() {
        NO_RESULT
    } else {
        code
    };
    let mut out = io::stdout().lock();
    let footer = footer(&result.record, result.outcome, result.exit, args.timeout);
    // A stdout that cannot be written (a full disk) fails the command, but only after the
    // footer: the run is kept, and the footer says where.
    let written = if args.json {
        write_or_quiet(&mut out, crate::json_out::document(&result)?.as_bytes())
    } else if args.sink {
        // stdout is the clean channel: the answer alone, verbatim; everything else on stderr.
        say_inline!("{}", result.model_text());
        say!("{footer}");
        match &result.result {
            Some(answer) => write_or_quiet(&mut out, answer.as_bytes()),
            None => {
                say!(
                    "agentrun: no clean result: the sink was {}; the preview above is the \
                     fallback",
                    result.sink.describe()
                );
                Ok(())
            }
        }
    } else if args.live {
        // The output was shown as it came: only where it is kept remains to be said.
        say!("{footer}");
        match live_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(Failure::stdout_write(e)),
            None => Ok(()),
        }
    } else {
        let written = write_or_quiet(&mut out, result.model_text().as_bytes());
        say!("{footer}");
        written
    };
    if let Some(error) = &result.sink_cleanup_error {
        say!("agentrun: warning: {error}; `agentrun gc` removes what is left");
    }
    report_faults(&result.record);
    written?;
    Ok(ExitCode::from(code))
}

/// One stderr line per capture fault: which stream is incomplete and why.
pub(crate) fn report_faults(record: &ResultRecord) {
    for fault in &record.faults {
        let stream = fault.stream.as_ref().map_or("output", |s| s.as_str());
        say!(
            "agentrun: error: {stream} is incomplete: {}; what was captured is retained",
            fault.message
        );
    }
}

/// Where a live tap keeps the first error writing to agentrun's stdout.
type LiveError = Arc<Mutex<Option<io::Error>>>;

/// A live tap copying each chunk to `sink` (agentrun's stdout or stderr) at once. A write
/// error (a closed pipe, a full terminal) ends the copy, never the capture; one other than a
/// closed pipe is kept in `errors`, when given, to fail the command after the run.
fn tee<W: io::Write + 'static>(
    sink: fn() -> W,
    errors: Option<LiveError>,
) -> impl FnMut(&[u8]) + Send + 'static {
    let mut open = true;
    move |chunk: &[u8]| {
        if open {
            let mut w = sink();
            if let Err(e) = w.write_all(chunk).and_then(|()| w.flush()) {
                open = false;
                if let Some(errors) = &errors
                    && e.kind() != io::ErrorKind::BrokenPipe
                {
                    errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
            }
        }
    }
}

fn stream_name(stream: &StreamRecord) -> &str {
    stream.name.as_ref().map_or("output", |n| n.as_str())
}

/// The human summary on stderr: how the run ended, then per non-empty stream the command that
/// reads it (continuing exactly after the preview when it was cut).
pub(crate) fn footer(
    record: &ResultRecord,
    outcome: RunOutcome,
    exit: Option<Exit>,
    timeout: Option<Duration>,
) -> String {
    let mut summary = run_summary(record, outcome, exit);
    if let (RunOutcome::TimedOut, Some(t)) = (outcome, timeout) {
        let after = format!(
            "(timed out after {})",
            agentrun_fs::config::format_duration(t)
        );
        summary = summary.replacen("(timed out)", &after, 1);
    }
    read_commands(record, &summary)
}

/// `summary`, then one `agentrun read` line per non-empty stream: where the preview stopped
/// when it was cut (the record's continuation), else from the start.
pub(crate) fn read_commands(record: &ResultRecord, summary: &str) -> String {
    let mut s = summary.to_owned();
    for stream in record.streams().iter().filter(|s| s.bytes > 0) {
        let uri = record.stream_uri(stream);
        let name = stream_name(stream);
        if stream.preview.truncated {
            let read = CliRead.read_call(&uri, stream.continuation());
            s.push_str(&format!("\nagentrun: rest of {name}: {read}"));
        } else {
            let read = CliRead.read_call(&uri, stream.start());
            s.push_str(&format!("\nagentrun: {name}: {read}"));
        }
    }
    s
}

/// One line: the run id, how it ended, and each stream's size.
pub(crate) fn run_summary(
    record: &ResultRecord,
    outcome: RunOutcome,
    exit: Option<Exit>,
) -> String {
    // The program's status and the capture's are separate: a program that succeeded can
    // still have output that was not all retained (the exit code is then 125). A stopped run
    // says so in its status already.
    let incomplete = if !record.faults.is_empty() {
        ", output incomplete"
    } else {
        ""
    };
    format!(
        "agentrun: run {} {} ({}){incomplete}{}",
        record.run_id,
        outcome.status(exit),
        outcome.reason(exit),
        sizes(record)
    )
}

/// `; stdout 3 lines, 6 bytes; stderr 0 lines, 0 bytes`.
pub(crate) fn sizes(record: &ResultRecord) -> String {
    let mut s = String::new();
    for stream in record.streams() {
        s.push_str(&format!(
            "; {} {}, {}",
            stream_name(stream),
            plural(stream.lines, "line", "lines"),
            plural(stream.bytes, "byte", "bytes")
        ));
    }
    s
}
