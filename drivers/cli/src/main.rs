//! `agentrun`: run commands with retained, pageable output, and read it back.
//!
//! See `agentrun --help` and README.md. Exit codes: the child's code for `run` (124 on
//! timeout, 126/127 when the program cannot be run); for `agent` 0 when the session succeeded
//! and 1 when it did not (see `agent.rs`), 124 on timeout, 126/127 when the harness CLI cannot
//! be run; 0 for success of the other commands, 1 for runtime errors (missing or corrupt
//! artifacts, store problems), 2 for usage errors (including malformed URIs and limits).

mod agent;
mod duration;
mod interpret;
mod interrupts;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use agentrun_core::page::{ByteRange, PageRequest};
use agentrun_core::process::{Exit, Outcome, RunOptions};
use agentrun_core::sink::{DEFAULT_SINK_VAR, ResultSink};
use agentrun_core::{ArtifactUri, PreviewLimits};
use agentrun_fs::{GcOptions, ReadError, Store};
use clap::{Args, Parser, Subcommand};

/// Run commands with retained, pageable output, and read any output back by its artifact URI.
///
/// Every run's stdout and stderr are captured in full into a content-addressed store; you see a
/// bounded preview per stream with an exact `read` hint for the rest.
#[derive(Debug, Parser)]
#[command(name = "agentrun", version, propagate_version = true)]
struct Cli {
    /// Artifact store directory [default: $AGENTRUN_HOME, else $XDG_DATA_HOME/agentrun, else
    /// ~/.local/share/agentrun].
    #[arg(long, global = true, value_name = "DIR")]
    store: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program, capture its output, print the bounded model-facing preview, and exit
    /// with the program's exit code (124 on timeout).
    ///
    /// With --sink the program also gets a clean result channel: a private file whose path is
    /// in $AGENTRUN_RESULT_SINK (see --sink-var). Then stdout carries only the clean answer,
    /// byte for byte, and the preview goes to stderr; when the program wrote no answer, stdout
    /// stays empty and stderr says why.
    Run(RunArgs),
    /// Page an artifact: raw stored bytes to stdout, continuation metadata to stderr.
    Read(ReadArgs),
    /// Remove artifacts no record references (after a grace period) and dead captures.
    Gc(GcArgs),
    /// Check every object's digest and index and every record's references.
    Verify(JsonArg),
    /// Decode a recorded or piped harness stream: progress lines as they are decoded, then
    /// the observed models and the completion report.
    Interpret(interpret::InterpretArgs),
    /// Launch a harness CLI (claude, grok, agy, codex, muse, opencode) with a prompt,
    /// interpret its output live, retain it as artifacts, and print the completion and the
    /// final message.
    ///
    /// Exit code: 0 when the session succeeded; 1 when it did not (a failed turn, a safeguard
    /// refusal under --security, a harness that exited non-zero); 124 on timeout; 127 when
    /// the harness program is not on PATH, 126 when it cannot be executed.
    Agent(agent::AgentArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
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

#[derive(Debug, Args)]
struct ReadArgs {
    /// `artifact://<sha256>` or `artifact://<sha256>/<stream>`.
    uri: String,
    /// Zero-based first line.
    #[arg(long, value_name = "N", default_value_t = 0)]
    offset: u64,
    /// Lines to read (1-2000).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    limit: u64,
    /// Read bytes instead of lines, from this byte offset (for lines longer than a page).
    #[arg(long, value_name = "N", conflicts_with_all = ["offset", "all"])]
    byte_offset: Option<u64>,
    /// Bytes to read with --byte-offset (1-2097152).
    #[arg(long, value_name = "N", requires = "byte_offset", default_value_t = 1 << 20)]
    byte_limit: u64,
    /// Stream the whole artifact.
    #[arg(long, conflicts_with_all = ["offset", "limit"])]
    all: bool,
    /// Print the page and its metadata as one JSON object.
    #[arg(long, conflicts_with = "all")]
    json: bool,
}

#[derive(Debug, Args)]
struct GcArgs {
    /// Keep unreferenced objects younger than this.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "1h")]
    grace: Duration,
    /// Report what would be removed without removing anything.
    #[arg(long)]
    dry_run: bool,
    /// Forget the records of runs older than this (e.g. 30d) so their output can be
    /// collected. Without it, every recorded run's output is kept forever.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    expire_records: Option<Duration>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct JsonArg {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// A failure with its exit code: 2 for usage errors, 1 for everything else.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl ToString) -> Self {
        Self {
            code: 2,
            message: message.to_string(),
        }
    }
    fn runtime(message: impl ToString) -> Self {
        Self {
            code: 1,
            message: message.to_string(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("agentrun: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode, Failure> {
    let store = cli.store;
    match cli.command {
        // Decoding a stream touches no store: it works without one.
        Command::Interpret(args) => interpret::run(args),
        Command::Agent(args) => agent::run(open_store(store)?, args),
        Command::Run(args) => run(open_store(store)?, args),
        Command::Read(args) => read(&open_store(store)?, args),
        Command::Gc(args) => gc(&open_store(store)?, args),
        Command::Verify(args) => verify(&open_store(store)?, args),
    }
}

/// The store named by `--store`, else the default root; created owner-only if missing.
fn open_store(dir: Option<PathBuf>) -> Result<Store, Failure> {
    let root = match dir {
        Some(dir) => dir,
        None => Store::default_root().map_err(Failure::runtime)?,
    };
    Store::open(root).map_err(Failure::runtime)
}

fn run(store: Store, args: RunArgs) -> Result<ExitCode, Failure> {
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
    let result = smol::block_on(runner.run_until(options, interrupts.stopped()));
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
fn run_summary(
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

fn parse_uri(s: &str) -> Result<ArtifactUri, Failure> {
    ArtifactUri::parse(s).map_err(|e| Failure::usage(format!("{s:?}: {e}")))
}

fn read(store: &Store, args: ReadArgs) -> Result<ExitCode, Failure> {
    let uri = parse_uri(&args.uri)?;
    let mut out = io::stdout().lock();
    if args.all {
        return match store.copy_to(&uri, &mut out) {
            Ok(_) => Ok(ExitCode::SUCCESS),
            // The reader went away (`… --all | head`): stop reading, quietly.
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
            Err(e) => Err(Failure::runtime(e)),
        };
    }
    if let Some(offset) = args.byte_offset {
        let range = ByteRange::new(offset, args.byte_limit).map_err(Failure::usage)?;
        let page = store.read_bytes(&uri, range).map_err(Failure::runtime)?;
        let end = page.offset + page.bytes.len() as u64;
        if args.json {
            let json = serde_json::json!({
                "uri": uri.to_string(),
                "byte_offset": page.offset,
                "bytes": page.bytes.len(),
                "total_bytes": page.total_bytes,
                "next_byte_offset": page.next_byte_offset,
                "content": String::from_utf8_lossy(&page.bytes),
                "content_is_utf8": std::str::from_utf8(&page.bytes).is_ok(),
            });
            write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
        } else {
            write_or_quiet(&mut out, &page.bytes)?;
            match page.next_byte_offset {
                Some(next) => eprintln!(
                    "agentrun: bytes {}-{end} of {}; next: agentrun read {uri} --byte-offset {next}",
                    page.offset, page.total_bytes
                ),
                None => eprintln!(
                    "agentrun: bytes {}-{end} of {} (end)",
                    page.offset, page.total_bytes
                ),
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let request = PageRequest::new(args.offset, args.limit).map_err(Failure::usage)?;
    let page = store.read_page(&uri, request).map_err(Failure::runtime)?;
    if args.json {
        let json = serde_json::json!({
            "uri": uri.to_string(),
            "offset": page.offset,
            "lines": page.lines,
            "total_lines": page.total_lines,
            "next_offset": page.next_offset,
            "content": String::from_utf8_lossy(&page.bytes),
            "content_is_utf8": std::str::from_utf8(&page.bytes).is_ok(),
        });
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
    } else {
        write_or_quiet(&mut out, &page.bytes)?;
        let last = (page.offset + page.lines).saturating_sub(1);
        match page.next_offset {
            Some(next) => eprintln!(
                "agentrun: lines {}-{last} of {}; next: agentrun read {uri} --offset {next}",
                page.offset, page.total_lines
            ),
            None if page.lines == 0 => {
                eprintln!(
                    "agentrun: no lines at offset {} of {} (end)",
                    page.offset, page.total_lines
                )
            }
            None => eprintln!(
                "agentrun: lines {}-{last} of {} (end)",
                page.offset, page.total_lines
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn gc(store: &Store, args: GcArgs) -> Result<ExitCode, Failure> {
    let options = GcOptions {
        grace: args.grace,
        dry_run: args.dry_run,
        now: SystemTime::now(),
        expire_records: args.expire_records,
    };
    let report = store.gc(&options).map_err(Failure::runtime)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Failure::runtime)?
        );
    } else {
        let verb = if args.dry_run {
            "would remove"
        } else {
            "removed"
        };
        println!(
            "{verb} {} objects ({} bytes), {} dead captures, {} dead result-sink directories and \
             {} expired records; kept {} objects for {} records",
            report.objects_removed,
            report.bytes_removed,
            report.captures_removed,
            report.runtime_dirs_removed,
            report.records_expired,
            report.objects_kept,
            report.records
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(store: &Store, args: JsonArg) -> Result<ExitCode, Failure> {
    let report = store.verify().map_err(Failure::runtime)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Failure::runtime)?
        );
    } else {
        for p in &report.problems {
            println!("problem: {p}");
        }
        println!(
            "checked {} objects and {} records: {}",
            report.objects_checked,
            report.records_checked,
            if report.problems.is_empty() {
                "ok".to_owned()
            } else {
                format!("{} problems", report.problems.len())
            }
        );
    }
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Writes to stdout; a closed pipe (`agentrun read … | head`) ends output quietly.
fn write_or_quiet(out: &mut impl Write, bytes: &[u8]) -> Result<(), Failure> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure::runtime(e)),
        _ => Ok(()),
    }
}
