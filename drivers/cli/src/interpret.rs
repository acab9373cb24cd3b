//! `agentrun interpret`: decode a recorded (or live, piped) harness stream with
//! `agentrun_core::harness::Interpretation`.
//!
//! Streaming: the input is read in chunks and split into lines by the same bounded splitter
//! as the live `agent` path (`LineSplitter`, [`agentrun_process::MAX_LINE_BYTES`] per line), so
//! memory stays bounded whatever the input: a longer line is cut and reported as oversized
//! (its number and the bound, in the report's warnings and `oversized_lines`), not decoded,
//! and the rest of the stream is still decoded. The progress of a chunk's lines is printed,
//! and flushed before the next chunk is read (so a live reader never waits on buffered
//! output while the stream is quiet). At the end: the observed models, then the completion
//! (human form, or one JSON object per line with `--json`).

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use agentrun_core::harness::{
    Completion, Harness, HarnessExit, Interpretation, OutcomeStatus, TurnSummary, UsageScope,
};
use agentrun_core::lines::{Line, LineSplitter};
use clap::Args;

use crate::Failure;

/// Arguments of `agentrun interpret`.
#[derive(Debug, Args)]
pub(crate) struct InterpretArgs {
    /// The harness whose dialect the stream is in: claude, grok, agy (antigravity), codex,
    /// muse, opencode, qwen, pi, gemini.
    #[arg(long, value_name = "NAME", value_parser = crate::harness_arg::parse_harness)]
    harness: Harness,
    /// Enable the security policy: `Model: …` progress and sticky safeguard refusals.
    #[arg(long)]
    security: bool,
    /// The model the session requested (security wording; never an observation).
    #[arg(long, value_name = "M", requires = "security")]
    requested_model: Option<String>,
    /// The retained record to reconcile with (the Muse, Qwen Code, pi or Gemini CLI session
    /// log, the Codex session file, the OpenCode session export).
    #[arg(long, value_name = "FILE")]
    retained: Option<PathBuf>,
    /// Print JSON lines: `{"progress": …}` per progress line, then one completion object.
    #[arg(long)]
    pub(crate) json: bool,
    /// The stream to decode; `-` or absent for stdin.
    #[arg(value_name = "FILE|-")]
    input: Option<PathBuf>,
}

/// Runs `agentrun interpret`.
pub(crate) fn run(args: InterpretArgs) -> Result<ExitCode, Failure> {
    // The retained file must be a regular file; opened (and judged) before the stream is
    // read, so that a FIFO or a directory there is refused at once, not after the stream.
    let retained_file = match &args.retained {
        Some(path) => Some(
            agentrun_fs::special::open_regular_file(path)
                .map_err(|e| Failure::runtime(format!("--retained {}: {e}", path.display())))?
                .0,
        ),
        None => None,
    };
    let input: Box<dyn Read> = match args.input.as_deref() {
        None => Box::new(io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(io::stdin().lock()),
        Some(p) => {
            // A FIFO (a live stream piped in by name) opens without waiting and is read as
            // stdin would be; a directory or a socket is refused by its type.
            let cannot =
                |e: &dyn std::fmt::Display| Failure::runtime(format!("{}: {e}", p.display()));
            let file = agentrun_fs::special::open_input(p)
                .map_err(|e| cannot(&e))?
                .into_blocking()
                .map_err(|e| cannot(&e))?;
            Box::new(file)
        }
    };
    let mut input = input;
    let mut interp = Interpretation::new(args.harness);
    if args.security {
        interp.for_security(args.requested_model.as_deref());
    }
    let stdout = io::stdout();
    let mut out = Out::new(io::BufWriter::with_capacity(64 * 1024, stdout.lock()));
    let mut splitter = LineSplitter::new(agentrun_process::MAX_LINE_BYTES);
    // The read buffer starts on a page boundary: the allocator's large blocks start 16 bytes
    // into a page, and on the benchmark machine the kernel copied a read into such a buffer
    // at a third of the speed of an aligned one (docs/benchmarks.md).
    const CHUNK: usize = 256 * 1024;
    let mut storage = vec![0u8; CHUNK + 4096];
    let at = storage.as_ptr().align_offset(4096);
    let at = if at < 4096 { at } else { 0 };
    let chunk = &mut storage[at..at + CHUNK];
    let mut failed: Option<Failure> = None;
    loop {
        let n = match input.read(chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::runtime(format!("reading the stream: {e}"))),
        };
        splitter.push(&chunk[..n], |line| {
            feed(&mut interp, &mut out, args.json, &mut failed, line);
        });
        // The chunk's progress goes out before the next read, which may wait on a live
        // stream: a reader sees each line's progress as soon as the line has arrived.
        if failed.is_none()
            && let Err(f) = out.flush()
        {
            failed = Some(f);
        }
        if let Some(f) = failed.take() {
            return Err(f);
        }
    }
    splitter.finish(|line| feed(&mut interp, &mut out, args.json, &mut failed, line));
    if let Some(f) = failed.take() {
        return Err(f);
    }
    let finished = interp.finish(HarnessExit::Success);
    let retained = match (finished.retained_request(), &args.retained) {
        (Some(request), Some(path)) => {
            let mut bytes = Vec::new();
            if let Some(mut file) = retained_file {
                file.read_to_end(&mut bytes)
                    .map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))?;
            }
            match request.kind.parse(request.session_id.as_deref(), &bytes) {
                Ok(record) => Some(record),
                Err(e) => {
                    say!("agentrun: warning: {}: {e}; ignoring it", path.display());
                    None
                }
            }
        }
        (None, Some(path)) => {
            say!(
                "agentrun: warning: {} has no retained record; ignoring {}",
                args.harness,
                path.display()
            );
            None
        }
        _ => None,
    };
    let models = finished.observed_models().to_vec();
    let omitted = finished.observed_models_omitted();
    let completion = finished.complete(retained);
    if args.json {
        let summary = TurnSummary::new(args.harness, &models, Some(&completion))
            .with_observed_models_omitted(omitted);
        out.line(&serde_json::to_string(&summary).map_err(Failure::runtime)?)?;
    } else {
        out.line(&human(&models, omitted, &completion, false))?;
    }
    out.flush()?;
    // As `agent` exits: 0 only for a session that succeeded, so a script (or `&&`) can tell a
    // failed, refused or cut-off recording from a good one without parsing the report.
    Ok(if completion.outcome.status == OutcomeStatus::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Decodes one line and prints its progress; after a write error only decodes (the error is
/// reported once the chunk is done).
fn feed<W: Write>(
    interp: &mut Interpretation,
    out: &mut Out<W>,
    json: bool,
    failed: &mut Option<Failure>,
    line: Line<'_>,
) {
    // A cut line is only a prefix of the event: reported as too long, never decoded.
    if line.truncated {
        interp.handle_oversized_line(agentrun_process::MAX_LINE_BYTES);
        return;
    }
    let progress = interp.handle_line(line.bytes);
    if failed.is_none()
        && let Err(f) = out.progress_buffered(&progress, json)
    {
        *failed = Some(f);
    }
}

/// The human completion: observed models, status, session, summary, killed work,
/// diagnostics, warnings, then the final message (no trailing newline). With `resumable`
/// (a run that knows whether it resumed a session), a usage that is not all the run's own —
/// a resumed session's running totals — gets a `usage:` line saying so.
pub(crate) fn human(models: &[String], omitted: u64, c: &Completion, resumable: bool) -> String {
    let mut s = String::new();
    s.push_str(&models_line(models, omitted));
    s.push('\n');
    if c.report.retained {
        s.push_str(&format!(
            "models (retained record): {}\n",
            model_list(&c.report.models, c.report.models_omitted)
        ));
    }
    // The failure kind, when known, right after what failed: `turn failed (rate_limited): …`.
    let kind = c
        .outcome
        .failure_kind
        .map_or_else(String::new, |k| format!(" ({k})"));
    let status = match &c.outcome.status {
        OutcomeStatus::Succeeded => "succeeded".to_owned(),
        OutcomeStatus::TurnFailed { diagnostic } => format!("turn failed{kind}: {diagnostic}"),
        OutcomeStatus::ExecutionFailed { diagnostic } => {
            format!("execution failed{kind}: {diagnostic}")
        }
        OutcomeStatus::Refused { category } => format!("refused ({category})"),
    };
    s.push_str(&format!("status: {status}\n"));
    if let Some(id) = &c.outcome.session_id {
        s.push_str(&format!("session: {id}\n"));
    }
    if let Some(summary) = &c.report.summary {
        s.push_str(&format!("summary: {summary}\n"));
    }
    if let Some(u) = &c.report.usage
        && resumable
        && (u.tokens_scope != UsageScope::Run
            || (u.cost_usd.is_some() && u.cost_scope != UsageScope::Run))
    {
        s.push_str(&format!("usage: {}\n", u.line()));
    }
    for k in &c.outcome.killed_work {
        s.push_str(&format!("killed: {k}\n"));
    }
    for d in &c.report.diagnostics {
        s.push_str(&format!("diagnostic: {d}\n"));
    }
    for w in &c.report.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    if let Some(m) = &c.outcome.final_message {
        s.push_str("final message:\n");
        s.push_str(m);
        if !m.ends_with('\n') {
            s.push('\n');
        }
    }
    s.pop();
    s
}

/// `observed models: a, b` (or `(none)`), with `(and N more)` when models were left out.
pub(crate) fn models_line(models: &[String], omitted: u64) -> String {
    format!("observed models: {}", model_list(models, omitted))
}

/// `a, b`, `a, b (and N more)` or `(none)`.
fn model_list(models: &[String], omitted: u64) -> String {
    let mut s = if models.is_empty() {
        "(none)".to_owned()
    } else {
        models.join(", ")
    };
    if omitted > 0 {
        s.push_str(&format!(" (and {omitted} more)"));
    }
    s
}

/// Stdout that ends quietly on a closed pipe (`agentrun interpret … | head`).
pub(crate) struct Out<W: Write> {
    inner: W,
    closed: bool,
}

impl<W: Write> Out<W> {
    /// Wraps a writer.
    pub(crate) fn new(inner: W) -> Self {
        Self {
            inner,
            closed: false,
        }
    }

    /// Prints one line's progress (plain, or `{"progress": …}` with `json`) and flushes, so
    /// a live reader sees it now.
    pub(crate) fn progress(&mut self, progress: &[String], json: bool) -> Result<(), Failure> {
        if progress.is_empty() {
            return Ok(());
        }
        self.progress_buffered(progress, json)?;
        self.flush()
    }

    /// [`Out::progress`] without the flush: for a caller that flushes before it waits for
    /// more input.
    pub(crate) fn progress_buffered(
        &mut self,
        progress: &[String],
        json: bool,
    ) -> Result<(), Failure> {
        for p in progress {
            if json {
                self.line(&serde_json::json!({ "progress": p }).to_string())?;
            } else {
                self.line(p)?;
            }
        }
        Ok(())
    }

    /// Writes `text` and a newline.
    pub(crate) fn line(&mut self, text: &str) -> Result<(), Failure> {
        if self.closed {
            return Ok(());
        }
        let r = self
            .inner
            .write_all(text.as_bytes())
            .and_then(|()| self.inner.write_all(b"\n"));
        self.check(r)
    }

    /// Flushes.
    pub(crate) fn flush(&mut self) -> Result<(), Failure> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.check(r)
    }

    fn check(&mut self, r: io::Result<()>) -> Result<(), Failure> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(Failure::stdout_write(e)),
            Ok(()) => Ok(()),
        }
    }
}
