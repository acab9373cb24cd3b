//! `agentrun compact TRANSCRIPT (--harness NAME [--model M] | --summarizer CMD)
//! [--max-input-bytes N] [--json]`: summarize a whole agent transcript, retrying once with
//! tool output moved into artifacts when the summarizer's input is too large. The compaction
//! itself is the library's (`agentrun_process::Runner::compact`; the rules are in
//! docs/compaction.md); this module parses the arguments, reads the transcript (stdin for
//! `-`), guards `--output`, and prints.
//!
//! Summarizers: `--harness NAME` is an agent turn of that harness; `--summarizer CMD` runs
//! `/bin/sh -c CMD` as the library's command summarizer (input on stdin, the summary on stdout
//! or in `$AGENTRUN_RESULT_SINK`,
//! [`agentrun_process::CONTEXT_LENGTH_MARKER`] on a too-long input).
//!
//! Exit codes: 0 with a summary; 1 when compaction failed (the transcript is unchanged in any
//! case); 125 when agentrun itself failed (unreadable or invalid transcript, store error).

use agentrun_process::error_chain;
use std::fs::File;
use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentrun_core::compaction::{Attempt, Failed, Reference};
use agentrun_core::harness::Harness;
use agentrun_core::process::RunOptions;
use agentrun_core::transcript::Transcript;
use agentrun_fs::Retained;
use agentrun_process::{
    AgentOptions, CompactError, CompactOptions, CompactRun, Summarizer, TranscriptInput,
    TranscriptLoadError, load_transcript, load_transcript_file, retry_reason,
};
use clap::{ArgGroup, Args};

use crate::interpret::Out;
use crate::settings::Settings;
use crate::{Failure, duration};

/// Arguments of `agentrun compact`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("summarizer_kind").required(true).args(["harness", "summarizer"])))]
pub(crate) struct CompactArgs {
    /// The transcript: JSON in the Anthropic Messages shape (`-` reads stdin). Never modified.
    #[arg(value_name = "TRANSCRIPT")]
    transcript: PathBuf,
    /// Summarize with this agent CLI: claude, grok, agy (antigravity), codex, muse, opencode,
    /// qwen, pi, gemini.
    #[arg(long, value_name = "NAME", value_parser = crate::harness_arg::parse_harness)]
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

/// The exit code of a compaction that ran and failed (every attempt refused or broke); the
/// transcript is left unchanged. Printed in `--json`'s error as well.
const COMPACTION_FAILED: u8 = 1;

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
        (Some(harness), _) => {
            let mut agent = AgentOptions::new(harness, "");
            if let Some(model) = &args.model {
                agent = agent.model(model);
            }
            Summarizer::Agent(agent)
        }
        (None, Some(cmd)) => Summarizer::Command(RunOptions::new("/bin/sh").arg("-c").arg(cmd)),
        (None, None) => return Err(Failure::usage("give --harness NAME or --summarizer CMD")),
    };
    let mut options = CompactOptions::new(summarizer).sink_var(settings.sink_var(None).value);
    if let Some(n) = args.max_input_bytes {
        options = options.max_input_bytes(n);
    }
    if let Some(t) = args.timeout {
        options = options.timeout(t);
    }
    let runner = agentrun_smol::Runner::new(store);
    let outcome = smol::block_on(
        runner
            .compact(TranscriptInput::Parsed(transcript), options)
            .on_progress(|event| progress(&format!("agentrun: {event}")))
            .into_future(),
    );
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
                out.line(crate::json_out::document(&success_json(&done))?.trim_end())?;
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
        Err(CompactError::Compaction(failed)) => {
            if args.json {
                let json = failure_json(&failed, COMPACTION_FAILED);
                out.line(crate::json_out::document(&json)?.trim_end())?;
                out.flush()?;
            } else {
                progress(&format!("agentrun: error: {}", error_chain(&*failed)));
                progress("agentrun: the transcript is unchanged");
            }
            Ok(ExitCode::from(COMPACTION_FAILED))
        }
        Err(CompactError::Summarizer(e)) => Err(Failure::usage(error_chain(&e))),
        Err(CompactError::Transcript(e)) => Err(load_failure(&e)),
        Err(e) => Err(Failure::runtime(error_chain(&e))),
    }
}

/// A progress or diagnostic line on stderr (never stdout, which carries the summary).
fn progress(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// A transcript that cannot be read is agentrun's failure; one that is not a transcript
/// within the limits is the caller's. The message names its cause already.
fn load_failure(e: &TranscriptLoadError) -> Failure {
    if e.is_invalid_input() {
        Failure::usage(e)
    } else {
        Failure::runtime(e)
    }
}

/// The device and inode of a file: what names the same file whatever path (a link, a hard
/// link, `..`) leads to it.
type FileId = (u64, u64);

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt as _;
    (meta.dev(), meta.ino())
}

/// Reads the transcript (the library's streaming reader; stdin for `-`) and which file it
/// was read from (for stdin, the file or pipe stdin is), so `--output` can never be it.
fn load(path: &Path) -> Result<(Transcript, Option<FileId>), Failure> {
    let loaded = if path == Path::new("-") {
        use std::os::fd::AsFd as _;
        let stdin = io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .map_err(|e| Failure::runtime(format!("cannot read {}: {e}", path.display())))?;
        load_transcript_file(stdin, path)
    } else {
        load_transcript(path)
    }
    .map_err(|e| load_failure(&e))?;
    let id = file_id(&loaded.metadata);
    Ok((loaded.transcript, Some(id)))
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

/// `compact --json` after a summary: what it was, how it was reached, what was retained.
#[derive(serde::Serialize)]
struct Success<'a> {
    summary: &'a str,
    attempts: &'a [Attempt],
    retried: bool,
    retry_reason: Option<&'a str>,
    references: &'a [Reference],
    omitted_artifact_reads: usize,
    retained: Option<RetainedJson<'a>>,
    transcript: serde_json::Value,
}

#[derive(serde::Serialize)]
struct RetainedJson<'a> {
    run_id: &'a str,
    stored: Vec<String>,
    kept: Vec<String>,
}

fn success_json(done: &CompactRun) -> Success<'_> {
    Success {
        summary: &done.summary,
        attempts: &done.attempts,
        retried: done.attempts.len() > 1,
        retry_reason: done.retry_reason(),
        references: &done.references,
        omitted_artifact_reads: done.omitted_artifact_reads,
        retained: done.retained.as_ref().map(retained_json),
        transcript: done.transcript.to_value(),
    }
}

fn retained_json(r: &Retained) -> RetainedJson<'_> {
    RetainedJson {
        run_id: &r.run_id,
        stored: r.stored.iter().map(|d| format!("artifact://{d}")).collect(),
        kept: r.kept.iter().map(ToString::to_string).collect(),
    }
}

/// `compact --json` when compaction failed: the error in the shape of every command's, then
/// the attempts. `exit_code` is the code the process exits with, so the JSON and the status
/// agree.
#[derive(serde::Serialize)]
struct FailureJson<'a> {
    error: ErrorJson,
    attempts: &'a [Attempt],
    retried: bool,
    retry_reason: Option<&'a str>,
}

#[derive(serde::Serialize)]
struct ErrorJson {
    kind: &'static str,
    message: String,
    exit_code: u8,
}

fn failure_json(failed: &Failed, exit_code: u8) -> FailureJson<'_> {
    FailureJson {
        error: ErrorJson {
            kind: "compaction",
            message: error_chain(failed),
            exit_code,
        },
        attempts: &failed.attempts,
        retried: failed.attempts.len() > 1,
        retry_reason: retry_reason(&failed.attempts),
    }
}
