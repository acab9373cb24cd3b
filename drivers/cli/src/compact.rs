//! `agentrun compact TRANSCRIPT (--harness NAME [--model M] | --summarizer CMD)
//! [--max-input-bytes N] [--json]`: summarize a whole agent transcript, retrying once with
//! tool output moved into artifacts when the summarizer's input is too large
//! (`agentrun_core::compaction`; the rules are in docs/compaction.md).
//!
//! The machine decides; this module does its I/O: it runs the summarizer for each
//! `Action::Summarize`, classifies how it ended, checks the artifacts the transcript names
//! (`Action::Verify`) and stores the outputs of `Action::Retain`, both through one
//! `RetentionSession` (`Store::begin_retention`) whose single record keeps every artifact the
//! retry refers to. The transcript file is only read.
//!
//! Summarizers:
//!
//! * `--harness NAME`: an agent CLI run with the registry invocation, its stream interpreted.
//!   The input goes on stdin where the harness reads its prompt there (Claude Code's `-p`
//!   without a prompt argument, Codex's `exec -`, OpenCode); the others take it as an argument,
//!   which Linux limits to 128 KiB, so a larger input is a local fit rejection for them. A
//!   failed turn the decoder classifies as a context-length failure permits the retry.
//! * `--summarizer CMD`: `/bin/sh -c CMD` with the input on stdin and a result sink
//!   (`$AGENTRUN_RESULT_SINK`). Exit 0: the summary is what it wrote to the sink, else its
//!   stdout. Non-zero: a context-length failure when stdout or stderr has a line that is exactly
//!   [`CONTEXT_LENGTH_MARKER`], any other failure otherwise.
//!
//! Exit codes: 0 with a summary; 1 when compaction failed (the transcript is unchanged in any
//! case); 125 when agentrun itself failed (unreadable or invalid transcript, store error).

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentrun_core::compaction::{
    Action, Attempt, AttemptResult, Compacted, Compaction, CompactionConfig,
    DEFAULT_MAX_SUMMARY_BYTES, Failed, Reference, SummarizerFailure, SummarizerInput,
};
use agentrun_core::harness::{
    FailureKind, Harness, HarnessExit, Interpretation, LaunchError, LaunchRequest, OutcomeStatus,
    Stdin,
};
use agentrun_core::page::ByteRange;
use agentrun_core::process::{Exit, ProcessResult, RunOptions, RunOutcome, StdinMode};
use agentrun_core::record::StreamRecord;
use agentrun_core::sink::ResultSink;
use agentrun_core::transcript::{Transcript, TranscriptLimits};
use agentrun_fs::{Retained, RetentionSession, Store};
use agentrun_process::exit_diagnostic;
use clap::{ArgGroup, Args};

use crate::interpret::Out;
use crate::settings::Settings;
use crate::{Failure, duration};

/// The line a `--summarizer` command prints (on stdout or stderr) with a non-zero exit when its
/// input was longer than its model's context window.
pub(crate) const CONTEXT_LENGTH_MARKER: &str = "agentrun:context-length-exceeded";

/// The longest single argument Linux passes to a program (`MAX_ARG_STRLEN`, 128 KiB with its
/// terminating NUL).
const MAX_ARG_BYTES: usize = 128 * 1024 - 1;

/// The largest harness stream interpreted.
const MAX_STREAM_BYTES: u64 = 64 << 20;

/// How much of a summarizer's stdout and stderr is searched for the marker.
const MARKER_SEARCH_BYTES: u64 = 1 << 20;

/// Arguments of `agentrun compact`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("summarizer_kind").required(true).args(["harness", "summarizer"])))]
pub(crate) struct CompactArgs {
    /// The transcript: JSON in the Anthropic Messages shape (`-` reads stdin). Never modified.
    #[arg(value_name = "TRANSCRIPT")]
    transcript: PathBuf,
    /// Summarize with this agent CLI: claude, grok, agy (antigravity), codex, muse, opencode,
    /// gemini.
    #[arg(long, value_name = "NAME", value_parser = parse_harness)]
    harness: Option<Harness>,
    /// The model the harness should use (passed verbatim).
    #[arg(long, value_name = "M", requires = "harness")]
    model: Option<String>,
    /// Summarize with this shell command: the rendered transcript on stdin, the summary on
    /// stdout or in $AGENTRUN_RESULT_SINK; on a too-long input it exits non-zero and prints a
    /// line `agentrun:context-length-exceeded`.
    #[arg(long, value_name = "CMD")]
    summarizer: Option<String>,
    /// Reject a summarizer input longer than this many bytes without running the summarizer
    /// (counts as a size failure: the pruned retry follows).
    #[arg(long, value_name = "N")]
    max_input_bytes: Option<usize>,
    /// Stop a summarizer run after this long (e.g. 5m); a timeout is an ordinary failure.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    timeout: Option<Duration>,
    /// Also write the compacted transcript (the new summary and the recent messages) to FILE,
    /// which must not exist (see --force) and is never the transcript itself.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Replace --output FILE when it exists (atomically: a new file renamed over it).
    #[arg(long, requires = "output")]
    force: bool,
    /// Print one JSON object: the summary, every attempt, the references of the retry and the
    /// compacted transcript (or the error and the attempts).
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_harness(s: &str) -> Result<Harness, String> {
    Harness::from_name(s).map_err(|e| e.to_string())
}

/// Who summarizes.
enum Summarizer {
    Harness {
        harness: Harness,
        model: Option<String>,
    },
    Command(String),
}

/// Runs `agentrun compact`.
pub(crate) fn run(settings: &Settings, args: CompactArgs) -> Result<ExitCode, Failure> {
    let (transcript, input) = load(&args.transcript)?;
    // Before anything runs: a summary that cannot be written is not worth its cost.
    if let Some(path) = &args.output {
        check_output(path, input, args.force)?;
        check_output_dir(path)?;
    }
    let store = settings.open_store()?;
    let summarizer = match (args.harness, args.summarizer.clone()) {
        (Some(harness), _) => Summarizer::Harness {
            harness,
            model: args.model.clone(),
        },
        (None, Some(cmd)) => Summarizer::Command(cmd),
        (None, None) => return Err(Failure::usage("give --harness NAME or --summarizer CMD")),
    };
    let sink_var = settings.sink_var(None).value;
    // A harness that takes its prompt as an argument cannot be given more than one argument
    // holds: that is a local fit rejection like --max-input-bytes.
    let argv_limit = match &summarizer {
        Summarizer::Harness { harness, .. } if !reads_prompt_on_stdin(*harness) => {
            // Grok gets the prompt joined to its option (`--single=PROMPT`).
            let prefix = if *harness == Harness::Grok {
                "--single=".len()
            } else {
                0
            };
            Some(MAX_ARG_BYTES - prefix)
        }
        _ => None,
    };
    let limit = match (args.max_input_bytes, argv_limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let config = CompactionConfig::default().max_input_bytes(limit);
    let mut machine = Compaction::new(&transcript, config);
    // One retention per compaction: it protects what it confirms and stores, and its one
    // record keeps every artifact the retry refers to.
    let mut retention: Option<RetentionSession> = None;
    let mut retained: Option<Retained> = None;
    let outcome = loop {
        match machine.poll_action() {
            Some(Action::Summarize(input)) => {
                progress(&format!(
                    "agentrun: {} attempt: summarizing {} bytes",
                    input.kind.as_str(),
                    input.text.len()
                ));
                let kind = input.kind;
                match summarize(&store, &summarizer, &sink_var, args.timeout, input)? {
                    Ok(answer) => machine.handle_summary(&answer),
                    Err(failure) => {
                        progress(&format!(
                            "agentrun: {} attempt failed: {}",
                            kind.as_str(),
                            describe(&failure)
                        ));
                        machine.handle_failure(failure)
                    }
                }
                .map_err(Failure::runtime)?;
            }
            Some(Action::Verify(claims)) => {
                let asked = claims.len();
                let session = open_retention(&store, &mut retention)?;
                let confirmed = session.confirm(claims).map_err(Failure::runtime)?;
                progress(&format!(
                    "agentrun: the transcript names {} artifact(s) for its tool output; {} hold \
                     exactly that output in this store",
                    asked,
                    confirmed.len()
                ));
                machine
                    .handle_verified(confirmed)
                    .map_err(Failure::runtime)?;
            }
            Some(Action::Retain(outputs)) => {
                progress(&format!(
                    "agentrun: the input did not fit; retaining {} tool output(s) as artifacts \
                     for one pruned retry",
                    outputs.len()
                ));
                let session = open_retention(&store, &mut retention)?;
                let result = session.retain(&outputs);
                let result = match (result, retention.take()) {
                    (Ok(()), Some(session)) => session.finish(),
                    (Err(e), _) => Err(e),
                    (Ok(()), None) => Ok(None),
                };
                let result = match result {
                    Ok(r) => {
                        retained = r;
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                };
                machine.handle_retained(result).map_err(Failure::runtime)?;
            }
            Some(Action::Done(done)) => break Ok(*done),
            Some(Action::Failed(failed)) => break Err(failed),
            Some(_) => {
                return Err(Failure::runtime(
                    "the compaction machine asked for something this agentrun does not know",
                ));
            }
            None => return Err(Failure::runtime("the compaction machine stalled")),
        }
    };
    let mut out = Out::new(io::stdout());
    match outcome {
        Ok(done) => {
            // A transcript that cannot be written (its directory went away meanwhile) does
            // not lose the summary that was paid for: it is still printed, then the failure
            // is the exit status.
            let written = match &args.output {
                Some(path) => write_transcript(path, input, args.force, &done.transcript),
                None => Ok(()),
            };
            if let Err(failed) = &written {
                progress(&format!(
                    "agentrun: error: {}; the summary is printed on stdout all the same",
                    failed.message
                ));
            }
            if args.json {
                out.line(&success_json(&done, retained.as_ref()).to_string())?;
            } else {
                for reference in &done.references {
                    progress(&format!(
                        "agentrun: {} -> agentrun read {}",
                        reference.tool_use_id, reference.uri
                    ));
                }
                out.line(&done.summary)?;
            }
            out.flush()?;
            written.map(|()| ExitCode::SUCCESS)
        }
        Err(failed) => {
            if args.json {
                out.line(&failure_json(&failed).to_string())?;
                out.flush()?;
            } else {
                progress(&format!("agentrun: error: {}", failed.error));
                progress("agentrun: the transcript is unchanged");
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// The compaction's retention, begun when first needed.
fn open_retention<'s>(
    store: &Store,
    retention: &'s mut Option<RetentionSession>,
) -> Result<&'s mut RetentionSession, Failure> {
    match retention {
        Some(session) => Ok(session),
        None => Ok(retention.insert(store.begin_retention().map_err(Failure::runtime)?)),
    }
}

/// A progress or diagnostic line on stderr (never stdout, which carries the summary).
fn progress(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(io::stderr().lock(), "{line}");
}

fn describe(failure: &SummarizerFailure) -> String {
    match failure {
        SummarizerFailure::ContextLength { detail } => {
            format!("context length exceeded ({detail})")
        }
        SummarizerFailure::DoesNotFit { detail } => format!("does not fit ({detail})"),
        SummarizerFailure::Other { detail } => detail.clone(),
        _ => "failed".to_owned(),
    }
}

/// The device and inode of a file: what names the same file whatever path (a link, a hard
/// link, `..`) leads to it.
type FileId = (u64, u64);

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt as _;
    (meta.dev(), meta.ino())
}

/// Reads and parses the transcript within the default limits, streaming: the bytes are never
/// held whole, only the transcript being built. A regular file larger than the limit is
/// refused from its size before a byte is read; a pipe or FIFO is read up to the limit and one
/// byte more, and is refused at its first byte that is not JSON or at the limit; a directory,
/// socket or device is refused by its type before anything is read. Also returns which file
/// it was read from (for stdin, the file or pipe stdin is), so `--output` can never be it.
fn load(path: &Path) -> Result<(Transcript, Option<FileId>), Failure> {
    let limits = TranscriptLimits::default();
    let cannot = |e: &dyn std::fmt::Display| {
        Failure::runtime(format!("cannot read {}: {e}", path.display()))
    };
    let file = if path == Path::new("-") {
        use std::os::fd::AsFd as _;
        io::stdin().as_fd().try_clone_to_owned().map(File::from)
    } else {
        // A FIFO opens without waiting and is read as stdin would be.
        let input = agentrun_fs::special::open_input(path).map_err(|e| cannot(&e))?;
        let kind = input.metadata().map_err(|e| cannot(&e))?.file_type();
        if std::os::unix::fs::FileTypeExt::is_char_device(&kind) {
            return Err(cannot(&"it is a character device, not a transcript"));
        }
        input.into_blocking()
    }
    .map_err(|e| cannot(&e))?;
    let meta = file.metadata().map_err(|e| cannot(&e))?;
    if meta.is_file() && meta.len() > limits.max_bytes as u64 {
        return Err(Failure::usage(format!(
            "{}: the transcript is {} bytes; at most {} bytes are accepted",
            path.display(),
            meta.len(),
            limits.max_bytes
        )));
    }
    let transcript = parse_stream(path, file, &limits)?;
    Ok((transcript, Some(file_id(&meta))))
}

/// Parses a transcript from `input`, reading at most `limits.max_bytes + 1` bytes.
fn parse_stream(
    path: &Path,
    input: impl Read,
    limits: &TranscriptLimits,
) -> Result<Transcript, Failure> {
    let limited = Limited {
        inner: input,
        left: limits.max_bytes as u64,
        over: false,
        error: None,
    };
    // Buffered above the limit, so serde_json's byte-at-a-time reads stay cheap.
    let mut reader = io::BufReader::with_capacity(64 * 1024, limited);
    let parsed = {
        let mut de = serde_json::Deserializer::from_reader(&mut reader);
        Transcript::from_deserializer(&mut de, limits).and_then(|t| {
            de.end()
                .map(|()| t)
                .map_err(|e| agentrun_core::transcript::TranscriptError::Json(e.to_string()))
        })
    };
    let limited = reader.into_inner();
    if limited.over {
        return Err(Failure::usage(format!(
            "{}: the transcript is more than {} bytes; at most {} bytes are accepted",
            path.display(),
            limits.max_bytes,
            limits.max_bytes
        )));
    }
    if let Some(e) = limited.error {
        return Err(Failure::runtime(format!(
            "cannot read {}: {e}",
            path.display()
        )));
    }
    parsed.map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// A reader that yields at most `left` bytes and fails (setting `over`) when its input has
/// more; it remembers a read error, so it is reported as one and not as invalid JSON.
struct Limited<R> {
    inner: R,
    left: u64,
    over: bool,
    error: Option<io::Error>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the limit: one more byte means the input is too large.
            let mut probe = [0u8; 1];
            return match self.read_inner(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.over = true;
                    Err(io::Error::other("the transcript is larger than the limit"))
                }
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.read_inner(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

impl<R: Read> Limited<R> {
    fn read_inner(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let copy = io::Error::new(e.kind(), e.to_string());
                    self.error = Some(e);
                    return Err(copy);
                }
            }
        }
    }
}

#[cfg(test)]
mod input_tests {
    use super::*;

    fn limits(max_bytes: usize) -> TranscriptLimits {
        TranscriptLimits {
            max_bytes,
            ..TranscriptLimits::default()
        }
    }

    #[test]
    fn a_stream_over_the_limit_is_refused_after_one_byte_more() {
        let doc = br#"[{"role":"user","content":"a"}]"#;
        // Exactly at the limit: read whole and parsed.
        match parse_stream(Path::new("-"), &doc[..], &limits(doc.len())) {
            Ok(t) => assert_eq!(t.messages.len(), 1),
            Err(e) => panic!("at the limit: {}", e.message),
        }
        // Whitespace past the limit: valid JSON so far, refused for its size.
        let mut long = doc.to_vec();
        long.extend_from_slice(b"    ");
        let e = parse_stream(Path::new("-"), &long[..], &limits(doc.len())).expect_err("long");
        assert!(e.message.contains("more than 31 bytes"), "{}", e.message);
        // An endless stream stops at the limit.
        let endless = io::repeat(b' ');
        let e = parse_stream(Path::new("-"), endless, &limits(1 << 20)).expect_err("endless");
        assert!(
            e.message.contains("more than 1048576 bytes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_read_error_is_reported_as_one() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("the disk is on fire"))
            }
        }
        let e = parse_stream(Path::new("t.json"), Broken, &limits(100)).expect_err("broken");
        assert!(
            e.message
                .contains("cannot read t.json: the disk is on fire"),
            "{}",
            e.message
        );
    }
}

/// Refuses an `--output` that is the transcript (by device and inode, so no other path to
/// it passes either), a directory, or an existing file without `--force`.
fn check_output(path: &Path, input: Option<FileId>, force: bool) -> Result<(), Failure> {
    let refuse = |why: String| Failure::usage(format!("--output {}: {why}", path.display()));
    // Following links: a link to the transcript is the transcript.
    let target = match std::fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(refuse(e.to_string())),
    };
    if let Some(meta) = &target {
        if input == Some(file_id(meta)) {
            return Err(refuse(
                "it is the transcript being compacted, which is never modified; write the \
                 compacted transcript to a new file"
                    .to_owned(),
            ));
        }
        if !meta.is_file() {
            return Err(refuse(format!(
                "it is {}, not a file",
                agentrun_fs::special::describe_file_type(meta.file_type())
            )));
        }
    }
    // A dangling link exists too: replacing it needs --force as well.
    let exists = target.is_some() || std::fs::symlink_metadata(path).is_ok();
    if exists && !force {
        return Err(refuse(
            "it already exists and is not overwritten; choose a new file, or pass --force to \
             replace it"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The directory `--output` is written in.
fn output_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A hidden file beside `path` (`.NAME.agentrun-PID.WHAT`), for a temporary file or a probe.
fn beside(path: &Path, what: &str) -> Result<std::path::PathBuf, Failure> {
    let name = path
        .file_name()
        .ok_or_else(|| Failure::usage(format!("--output {}: not a file name", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".agentrun-{}.{what}", std::process::id()));
    Ok(output_dir(path).join(tmp_name))
}

/// Refuses, before the summarizer runs, an `--output` whose directory is missing, is not a
/// directory, or does not let a file be created there (a probe file is created and removed
/// at once: this also catches a read-only file system, which permission bits do not show).
fn check_output_dir(path: &Path) -> Result<(), Failure> {
    let refuse = |why: String| Failure::usage(format!("--output {}: {why}", path.display()));
    let dir = output_dir(path);
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(meta) => {
            return Err(refuse(format!(
                "its directory {} is {}, not a directory",
                dir.display(),
                agentrun_fs::special::describe_file_type(meta.file_type())
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refuse(format!(
                "its directory {} does not exist; create it first",
                dir.display()
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            // A file where a directory of the path should be.
            return Err(refuse(format!(
                "its directory {} is not a directory",
                dir.display()
            )));
        }
        Err(e) => return Err(refuse(format!("its directory {}: {e}", dir.display()))),
    }
    let probe = beside(path, "probe")?;
    match File::options().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(refuse(format!(
            "no file can be created in its directory {}: {e}",
            dir.display()
        ))),
    }
}

/// Writes the compacted transcript through a temporary file in the same directory, then
/// moves it into place: a new name without `--force` (never replacing what appeared there
/// meanwhile), renamed over the old file with it (a link is replaced, never written
/// through). A failure leaves the old file as it was.
fn write_transcript(
    path: &Path,
    input: Option<FileId>,
    force: bool,
    transcript: &Transcript,
) -> Result<(), Failure> {
    use std::io::Write as _;
    let fail = |e: io::Error| Failure::runtime(format!("cannot write {}: {e}", path.display()));
    // Again at the end: the summarizer may have run for minutes.
    check_output(path, input, force)?;
    let tmp = beside(path, "tmp")?;
    let written = (|| {
        let mut file = File::options().write(true).create_new(true).open(&tmp)?;
        file.write_all(&transcript.to_json())?;
        file.sync_all()?;
        if force {
            std::fs::rename(&tmp, path)
        } else {
            // link(2) fails when the name exists: nothing that appeared meanwhile is replaced.
            // A file system without hard links gets the rename, after one more look.
            match std::fs::hard_link(&tmp, path) {
                Err(e)
                    if e.kind() != io::ErrorKind::AlreadyExists
                        && std::fs::symlink_metadata(path).is_err() =>
                {
                    std::fs::rename(&tmp, path)
                }
                linked => linked,
            }
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    written.map_err(fail)
}

/// Whether the harness reads its prompt on stdin when none is given as an argument.
fn reads_prompt_on_stdin(harness: Harness) -> bool {
    matches!(
        harness,
        Harness::Claude | Harness::Codex | Harness::OpenCode
    )
}

/// Placeholder for the prompt argument, replaced before the launch.
const PROMPT_SLOT: &str = "agentrun-compaction-prompt-slot";

/// The harness launch with the summarizer input as its prompt: on stdin where the harness
/// reads it there, else as the prompt argument.
fn harness_options(
    harness: Harness,
    model: &Option<String>,
    text: String,
) -> Result<RunOptions, LaunchError> {
    let request = LaunchRequest {
        prompt: PROMPT_SLOT.to_owned(),
        model: model.clone(),
        // A transcript is summarized wherever it is, not only inside a Git repository.
        skip_git_repo_check: true,
        ..LaunchRequest::default()
    };
    let invocation = harness.invocation(&request)?;
    let mut text = Some(text);
    let mut stdin = StdinMode::Null;
    if let Stdin::Prompt(_) = invocation.stdin {
        stdin = StdinMode::Bytes(text.take().unwrap_or_default().into_bytes());
    }
    let mut args = Vec::with_capacity(invocation.args.len());
    for arg in invocation.args {
        // The prompt is an argument of its own, or joined to its option (Grok's `--single=`).
        let Some(option) = arg.strip_suffix(PROMPT_SLOT) else {
            args.push(arg);
            continue;
        };
        let text = text.take().unwrap_or_default();
        match harness {
            // `claude -p` without a prompt argument reads the prompt from stdin; the `--` that
            // separated the prompt goes too, so nothing dangles after the options.
            Harness::Claude => {
                if args.last().is_some_and(|a| a == "--") {
                    args.pop();
                }
                stdin = StdinMode::Bytes(text.into_bytes());
            }
            // `codex exec -` reads the prompt from stdin.
            Harness::Codex => {
                args.push("-".to_owned());
                stdin = StdinMode::Bytes(text.into_bytes());
            }
            _ => args.push(format!("{option}{text}")),
        }
    }
    let mut options = RunOptions::new(&invocation.program)
        .args(&args)
        .stop_signals(harness.stop_signals().sequence)
        .stdin(stdin);
    for (key, value) in &invocation.env {
        options = options.env(key, value);
    }
    Ok(options)
}

/// Runs the summarizer once. The outer error is agentrun's own failure (the store); the inner
/// result is the summarizer's answer or how it failed.
fn summarize(
    store: &Store,
    summarizer: &Summarizer,
    sink_var: &str,
    timeout: Option<Duration>,
    input: SummarizerInput,
) -> Result<Result<Vec<u8>, SummarizerFailure>, Failure> {
    let kind = input.kind;
    // The input is moved into the child's stdin (or argument), never copied: it can be as
    // large as the transcript.
    let mut options = match summarizer {
        Summarizer::Harness { harness, model } => {
            harness_options(*harness, model, input.text).map_err(Failure::usage)?
        }
        Summarizer::Command(cmd) => RunOptions::new("/bin/sh")
            .arg("-c")
            .arg(cmd)
            .stdin(StdinMode::Bytes(input.text.into_bytes()))
            .sink_var(sink_var)
            .with_result_sink(ResultSink::Allocate)
            .sink_cap(DEFAULT_MAX_SUMMARY_BYTES as u64 + 1),
    };
    options = options.label(format!("compaction {} attempt", kind.as_str()));
    if let Some(t) = timeout {
        options = options.timeout(t);
    }
    options.validate().map_err(Failure::usage)?;
    let runner = agentrun_smol::Runner::new(store.clone());
    let result = match smol::block_on(runner.run(options).into_future()) {
        Ok(result) => result,
        Err(agentrun_smol::RunError::Spawn { program, source }) => {
            return Ok(Err(SummarizerFailure::Other {
                detail: format!("cannot run {}: {source}", program.to_string_lossy()),
            }));
        }
        Err(e) => return Err(Failure::runtime(e)),
    };
    if result.outcome != RunOutcome::Completed {
        return Ok(Err(SummarizerFailure::Other {
            detail: format!(
                "the summarizer was stopped ({})",
                if result.outcome.timed_out() {
                    "timeout"
                } else {
                    "interrupted"
                }
            ),
        }));
    }
    Ok(match summarizer {
        Summarizer::Harness { harness, .. } => harness_answer(store, *harness, &result)?,
        Summarizer::Command(_) => command_answer(store, &result)?,
    })
}

/// Interprets the harness's stdout: its final message, or how its turn failed.
fn harness_answer(
    store: &Store,
    harness: Harness,
    result: &ProcessResult,
) -> Result<Result<Vec<u8>, SummarizerFailure>, Failure> {
    let stream = match result.stdout() {
        Some(s) if s.bytes > MAX_STREAM_BYTES => {
            return Ok(Err(SummarizerFailure::Other {
                detail: format!(
                    "the {harness} stream is over {} MiB",
                    MAX_STREAM_BYTES >> 20
                ),
            }));
        }
        Some(s) => read_stream(store, result, s, 0, MAX_STREAM_BYTES)?,
        None => Vec::new(),
    };
    let mut interp = Interpretation::new(harness);
    for line in stream.split(|&b| b == b'\n') {
        let _ = interp.handle_line(line);
    }
    let exit = match result.exit {
        Some(Exit::Code(0)) => HarnessExit::Success,
        other => HarnessExit::Failed {
            diagnostic: exit_diagnostic(harness, other, result),
        },
    };
    let completion = interp.finish(exit).complete(None);
    let outcome = completion.outcome;
    Ok(match outcome.status {
        OutcomeStatus::Succeeded => Ok(outcome.final_message.unwrap_or_default().into_bytes()),
        OutcomeStatus::TurnFailed { diagnostic }
            if outcome.failure_kind == Some(FailureKind::ContextLength) =>
        {
            Err(SummarizerFailure::ContextLength { detail: diagnostic })
        }
        OutcomeStatus::TurnFailed { diagnostic }
        | OutcomeStatus::ExecutionFailed { diagnostic } => {
            Err(SummarizerFailure::Other { detail: diagnostic })
        }
        other => Err(SummarizerFailure::Other {
            detail: format!("{harness}: {other:?}"),
        }),
    })
}

/// A summarizer command's answer: the sink, else stdout, on exit 0; a classified failure
/// otherwise.
fn command_answer(
    store: &Store,
    result: &ProcessResult,
) -> Result<Result<Vec<u8>, SummarizerFailure>, Failure> {
    let stdout = match result.stdout() {
        Some(s) => read_stream(store, result, s, 0, MARKER_SEARCH_BYTES)?,
        None => Vec::new(),
    };
    if result.exit == Some(Exit::Code(0)) {
        return Ok(Ok(match &result.result {
            Some(answer) => answer.clone().into_bytes(),
            None => stdout,
        }));
    }
    let stderr = match result.stderr() {
        Some(s) => read_stream(
            store,
            result,
            s,
            s.bytes.saturating_sub(MARKER_SEARCH_BYTES),
            MARKER_SEARCH_BYTES,
        )?,
        None => Vec::new(),
    };
    let marked = [&stdout, &stderr].iter().any(|bytes| {
        bytes
            .split(|&b| b == b'\n')
            .any(|line| line.trim_ascii() == CONTEXT_LENGTH_MARKER.as_bytes())
    });
    let detail = exit_diagnostic("the summarizer", result.exit, result);
    Ok(Err(if marked {
        SummarizerFailure::ContextLength { detail }
    } else {
        SummarizerFailure::Other { detail }
    }))
}

/// Up to `limit` bytes of a captured stream from `offset`.
fn read_stream(
    store: &Store,
    result: &ProcessResult,
    stream: &StreamRecord,
    offset: u64,
    limit: u64,
) -> Result<Vec<u8>, Failure> {
    let uri = result.record.stream_uri(stream);
    let end = stream.bytes.min(offset.saturating_add(limit));
    let mut bytes = Vec::new();
    let mut at = offset;
    while at < end {
        let chunk = (end - at).min(agentrun_core::page::MAX_PAGE_BYTES as u64) as u32;
        let page = store
            .read_bytes(
                &uri,
                ByteRange {
                    offset: at,
                    limit: chunk,
                },
            )
            .map_err(|e| Failure::runtime(format!("cannot read the summarizer output: {e}")))?;
        if page.bytes.is_empty() {
            break;
        }
        at += page.bytes.len() as u64;
        bytes.extend_from_slice(&page.bytes);
    }
    Ok(bytes)
}

fn attempts_json(attempts: &[Attempt]) -> serde_json::Value {
    serde_json::to_value(attempts).unwrap_or_default()
}

fn retry_reason(attempts: &[Attempt]) -> Option<&'static str> {
    if attempts.len() < 2 {
        return None;
    }
    match attempts[0].result {
        AttemptResult::DoesNotFit { .. } => Some("local fit rejection"),
        AttemptResult::ContextLength { .. } => Some("context length exceeded"),
        _ => None,
    }
}

fn success_json(done: &Compacted, retained: Option<&Retained>) -> serde_json::Value {
    serde_json::json!({
        "summary": done.summary,
        "attempts": attempts_json(&done.attempts),
        "retried": done.attempts.len() > 1,
        "retry_reason": retry_reason(&done.attempts),
        "references": references_json(&done.references),
        "omitted_artifact_reads": done.omitted,
        "retained": retained.map(|r| serde_json::json!({
            "run_id": r.run_id,
            "stored": r.stored.iter().map(|d| format!("artifact://{d}")).collect::<Vec<_>>(),
            "kept": r.kept.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })),
        "transcript": done.transcript.to_value(),
    })
}

fn references_json(references: &[Reference]) -> serde_json::Value {
    serde_json::to_value(references).unwrap_or_default()
}

fn failure_json(failed: &Failed) -> serde_json::Value {
    serde_json::json!({
        "error": {
            "kind": "compaction",
            "message": failed.error.to_string(),
            "exit_code": 1,
        },
        "attempts": attempts_json(&failed.attempts),
        "retried": failed.attempts.len() > 1,
        "retry_reason": retry_reason(&failed.attempts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdin_text(options: &RunOptions) -> Option<&[u8]> {
        match &options.stdin {
            StdinMode::Bytes(b) => Some(b),
            _ => None,
        }
    }

    #[test]
    fn the_input_goes_on_stdin_where_the_harness_reads_its_prompt_there() {
        let model = Some("m".to_owned());
        for harness in [Harness::Claude, Harness::Codex, Harness::OpenCode] {
            let options = harness_options(harness, &model, "THE INPUT".to_owned()).unwrap();
            assert_eq!(stdin_text(&options), Some(&b"THE INPUT"[..]), "{harness}");
            assert!(
                !options
                    .args
                    .iter()
                    .any(|a| a == "THE INPUT" || a == PROMPT_SLOT),
                "{harness}: {:?}",
                options.args
            );
        }
        let claude = harness_options(Harness::Claude, &model, "x".to_owned()).unwrap();
        assert_ne!(
            claude.args.last().map(|a| a.as_os_str()),
            Some("--".as_ref())
        );
        let codex = harness_options(Harness::Codex, &model, "x".to_owned()).unwrap();
        assert_eq!(codex.args.last().map(|a| a.as_os_str()), Some("-".as_ref()));
        // The others take it as their prompt argument, limited to one argument's size.
        for harness in [Harness::Grok, Harness::Antigravity, Harness::Muse] {
            assert!(!reads_prompt_on_stdin(harness));
            let options = harness_options(harness, &model, "THE INPUT".to_owned()).unwrap();
            let prompt = match harness {
                Harness::Grok => "--single=THE INPUT",
                _ => "THE INPUT",
            };
            assert!(options.args.iter().any(|a| a == prompt), "{harness}");
            assert_eq!(stdin_text(&options), None);
        }
    }
}
