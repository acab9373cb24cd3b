//! `agentrun run`: run a program, capture its output, print the bounded preview.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use agentrun_core::PreviewLimits;
use agentrun_core::process::{Exit, Outcome, RunOptions};
use agentrun_core::sink::{DEFAULT_SINK_VAR, ResultSink};
use agentrun_fs::Store;
use clap::Args;

use crate::failure::{Failure, write_or_quiet};
use crate::{duration, interrupts};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Most lines shown per stream.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    max_lines: u64,
    /// Most preview bytes shown per stream.
    #[arg(long, value_name = "N", default_value_t = 51_200)]
    max_bytes: usize,
    /// Bound on the whole preview, headings and hints included.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    max_payload_bytes: usize,
    /// Also show this many last lines of a truncated stream.
    #[arg(long, value_name = "N", default_value_t = 0)]
    tail_lines: u64,
    /// Stop the program after this long (e.g. 30s, 5m, 1h); exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    timeout: Option<Duration>,
    /// Stop the program when it printed nothing on stdout or stderr for this long; exit code
    /// 124.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    idle_timeout: Option<Duration>,
    /// Give the program a clean result channel (a private file named in $AGENTRUN_RESULT_SINK)
    /// and print its answer verbatim on stdout, the preview on stderr.
    #[arg(long)]
    sink: bool,
    /// The variable that names the result sink (e.g. AMPLIHACK_RESULT_SINK). It is removed
    /// from the program's environment unless --sink is given.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_SINK_VAR)]
    sink_var: String,
    /// Time between SIGTERM and SIGKILL when stopping the program.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "5s")]
    kill_grace: Duration,
    /// Print the result record as JSON instead of the preview.
    #[arg(long)]
    json: bool,
    /// The program and its arguments (run directly, never through a shell).
    #[arg(required = true, last = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<std::ffi::OsString>,
}

pub(crate) fn run(store: Store, args: RunArgs) -> Result<ExitCode, Failure> {
    let limits = PreviewLimits {
        max_lines: args.max_lines,
        max_bytes: args.max_bytes,
        max_payload_bytes: args.max_payload_bytes,
        tail_lines: args.tail_lines,
    };
    limits.validate().map_err(Failure::usage)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no program"))?;
    let mut options = RunOptions::new(program)
        .args(rest)
        .limits(limits)
        .kill_grace(args.kill_grace)
        .sink_var(&args.sink_var);
    if let Some(t) = args.timeout {
        options = options.timeout(t);
    }
    if let Some(t) = args.idle_timeout {
        options = options.idle_timeout(t);
    }
    if args.sink {
        options = options.with_result_sink(ResultSink::Allocate);
    }
    options.validate().map_err(Failure::usage)?;
    let runner = agentrun_smol::Runner::new(store);
    let mut interrupts = interrupts::Interrupts::install();
    let result = smol::block_on(
        runner
            .run(options)
            .cancel_on(interrupts.requests())
            .into_future(),
    );
    let result = match result {
        Ok(r) => r,
        Err(e @ agentrun_smol::RunError::Spawn { .. }) => {
            eprintln!("agentrun: error: {e}");
            let agentrun_smol::RunError::Spawn { source, .. } = &e else {
                return Err(Failure::runtime(e));
            };
            let code = if source.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ok(ExitCode::from(code));
        }
        Err(e) => return Err(Failure::runtime(e)),
    };
    let mut code = match (result.outcome, result.exit) {
        (Outcome::TimedOut | Outcome::IdleTimedOut, _) => 124,
        (Outcome::Cancelled, _) => interrupts.exit_code().map_or(130, i32::from),
        (Outcome::Completed, Some(exit)) => exit.shell_code(),
        (Outcome::Completed, None) => 1,
    };
    // A capture fault (full disk, …) must not pass for success: the child may have done its
    // job, but part of its output was not retained.
    if !result.record.faults.is_empty() && code == 0 {
        code = 1;
    }
    let mut out = io::stdout().lock();
    if args.json {
        let json = serde_json::json!({
            "outcome": result.outcome,
            "pid": result.pid,
            "exit": result.exit,
            "duration_ms": result.duration.as_millis() as u64,
            "model_text": result.model_text(),
            "record": result.record,
            "result": result.result,
            "sink": result.sink,
        });
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
    } else if args.sink {
        // stdout is the clean channel: the answer alone, verbatim; everything else on stderr.
        eprint!("{}", result.model_text());
        eprintln!(
            "{}",
            run_footer(&result.record, result.outcome, result.exit)
        );
        match &result.result {
            Some(answer) => write_or_quiet(&mut out, answer.as_bytes())?,
            None => eprintln!(
                "agentrun: no clean result: the sink was {}; the preview above is the fallback",
                result.sink.describe()
            ),
        }
    } else {
        write_or_quiet(&mut out, result.model_text().as_bytes())?;
        let _ = out.flush();
        eprintln!(
            "{}",
            run_footer(&result.record, result.outcome, result.exit)
        );
    }
    for fault in &result.record.faults {
        let stream = fault.stream.as_ref().map_or("output", |s| s.as_str());
        eprintln!(
            "agentrun: error: capturing {stream} failed: {}; the output is incomplete (what was \
             captured before the failure is retained)",
            fault.message
        );
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The human summary on stderr: how the run ended, and where the full output is.
fn run_footer(
    record: &agentrun_core::ResultRecord,
    outcome: Outcome,
    exit: Option<Exit>,
) -> String {
    let mut s = run_summary(record, outcome, exit);
    for stream in record.streams().iter().filter(|s| s.preview.truncated) {
        s.push_str(&format!(
            "\nagentrun: rest of {}: agentrun read {} --offset {}",
            stream.name.as_ref().map_or("output", |n| n.as_str()),
            record.stream_uri(stream),
            stream.preview.newlines
        ));
    }
    s
}

/// One line: how the run ended, its id, and each stream's size.
pub(crate) fn run_summary(
    record: &agentrun_core::ResultRecord,
    outcome: Outcome,
    exit: Option<Exit>,
) -> String {
    let ended = match (outcome, exit) {
        (Outcome::TimedOut, _) => "timed out".to_owned(),
        (Outcome::IdleTimedOut, _) => "stopped after the idle timeout".to_owned(),
        (Outcome::Cancelled, _) => "stopped by a signal".to_owned(),
        (_, Some(Exit::Code(c))) => format!("exit {c}"),
        (_, Some(Exit::Signal(s))) => format!("killed by signal {s}"),
        (_, None) => "ended".to_owned(),
    };
    let mut s = format!("agentrun: {ended}; run {}", record.run_id);
    for stream in record.streams() {
        let name = stream.name.as_ref().map_or("output", |n| n.as_str());
        s.push_str(&format!(
            "; {name} {} lines, {} bytes",
            stream.lines, stream.bytes
        ));
    }
    s
}
