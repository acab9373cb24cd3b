//! What the model reads: run results, pages and their continuation lines.

use std::fmt::Write as _;
use std::time::Duration;

use agentrun_core::page::MAX_PAGE_BYTES;
use agentrun_core::process::{Exit, ProcessResult, RunOutcome};
use agentrun_core::{ArtifactUri, BytePage, Page, PageError, ResultRecord};
use agentrun_fs::ReadError;
use serde_json::{Value, json};

/// `text` cut to at most `max` bytes at a character boundary, `…` marking the cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// The clean answer of a run, as shown to the model.
pub(crate) enum Answer {
    /// No sink was requested.
    NotRequested,
    /// Short enough to show in full.
    Inline(String),
    /// Over the preview bound: retained as its own artifact, shown as preview and hint.
    Retained(Box<ResultRecord>),
    /// The sink was requested but gave no answer; says why.
    Missing(String),
}

/// The text of a `run` result: the output previews with their read hints, the clean answer,
/// then one status line.
pub(crate) fn run_text(result: &ProcessResult, answer: &Answer, timeout: Duration) -> String {
    let mut out = result.model_text();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    push_answer(
        &mut out,
        answer,
        "Clean answer (the program's result sink)",
        "clean answer",
    );
    out.push_str(&status_line(result, timeout));
    out
}

/// Appends `answer` under a heading naming `what` (`[Final message:]`, …): the text itself,
/// or its bounded preview and read hint when it was retained; `[No <missing>: why]` when
/// there is none.
pub(crate) fn push_answer(out: &mut String, answer: &Answer, what: &str, missing: &str) {
    let body = match answer {
        Answer::NotRequested => return,
        Answer::Missing(why) => {
            let _ = writeln!(out, "[No {missing}: {why}]");
            return;
        }
        Answer::Inline(text) => {
            let _ = writeln!(out, "[{what}, verbatim:]");
            text.clone()
        }
        Answer::Retained(record) => {
            let _ = writeln!(out, "[{what}, over the preview bound:]");
            record.render()
        }
    };
    out.push_str(&body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
}

/// One line: how the run ended and how long it took.
fn status_line(result: &ProcessResult, timeout: Duration) -> String {
    let took = format!("{:.1}s", result.duration.as_secs_f64());
    match (result.outcome, result.exit) {
        (RunOutcome::TimedOut | RunOutcome::IdleTimedOut, _) => format!(
            "[Timed out after {}s: the process group was stopped; the output above is what it \
             wrote until then]",
            timeout.as_secs()
        ),
        (RunOutcome::Cancelled, _) => {
            "[Cancelled: the process group was stopped; the output above is what it wrote until \
             then]"
                .to_owned()
        }
        (_, Some(Exit::Code(code))) => format!("[Exit code {code} after {took}]"),
        (_, Some(Exit::Signal(signal))) => {
            format!("[Killed by signal {signal} after {took}]")
        }
        (_, None) => format!("[Ended after {took}; the exit status is unknown]"),
    }
}

/// The structured content of a `run` result: the library's serialization of the result (the
/// object `agentrun run --json` prints), with `result` as shown to the model (`null` when
/// the answer was over the bound) and `result_artifact`, the answer's own URI in that case.
pub(crate) fn run_json(result: &ProcessResult, answer: &Answer) -> Value {
    let (answer_text, answer_record) = match answer {
        Answer::Inline(text) => (Some(text.as_str()), None),
        Answer::Retained(record) => (None, Some(record)),
        Answer::NotRequested | Answer::Missing(_) => (None, None),
    };
    let mut value =
        serde_json::to_value(result).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    value["result"] = json!(answer_text);
    value["result_artifact"] = json!(answer_record.map(|r| r.output_uri().to_string()));
    value
}

/// The continuation line of a line page: where the next page starts, or the end.
pub(crate) fn page_continuation(uri: &ArtifactUri, page: &Page) -> String {
    let mut line = match page.next_offset {
        Some(next) => format!(
            "[Lines {}-{} of {}. Read more: read(filePath=\"{uri}\", offset={next})]",
            page.offset,
            page.offset + page.lines.saturating_sub(1),
            page.total_lines
        ),
        None if page.lines == 0 => format!(
            "[No lines at offset {}: the artifact has {} lines]",
            page.offset, page.total_lines
        ),
        None => format!(
            "[Lines {}-{} of {}: end of artifact]",
            page.offset,
            page.offset + page.lines - 1,
            page.total_lines
        ),
    };
    push_lossy_note(&mut line, &page.bytes);
    line
}

/// The continuation line of a byte page.
pub(crate) fn byte_continuation(uri: &ArtifactUri, page: &BytePage) -> String {
    let end = page.offset + page.bytes.len() as u64;
    let mut line = match page.next_byte_offset {
        Some(next) => format!(
            "[Bytes {}-{end} of {}. Read more: read(filePath=\"{uri}\", byteOffset={next})]",
            page.offset, page.total_bytes
        ),
        None => format!(
            "[Bytes {}-{end} of {}: end of artifact]",
            page.offset, page.total_bytes
        ),
    };
    push_lossy_note(&mut line, &page.bytes);
    line
}

fn push_lossy_note(line: &mut String, bytes: &[u8]) {
    if std::str::from_utf8(bytes).is_err() {
        line.push_str(
            "\n[Note: the page is not valid UTF-8 (or a byte range cut a character); invalid \
             bytes are shown as U+FFFD. The stored bytes are unchanged.]",
        );
    }
}

/// The structured content of a line page (the page text itself is the first content block).
pub(crate) fn page_json(uri: &ArtifactUri, page: &Page) -> Value {
    json!({
        "uri": uri.to_string(),
        "offset": page.offset,
        "lines": page.lines,
        "bytes": page.bytes.len(),
        "total_lines": page.total_lines,
        "next_offset": page.next_offset,
        "content_is_utf8": std::str::from_utf8(&page.bytes).is_ok(),
    })
}

/// The structured content of a byte page.
pub(crate) fn byte_page_json(uri: &ArtifactUri, page: &BytePage) -> Value {
    json!({
        "uri": uri.to_string(),
        "byte_offset": page.offset,
        "bytes": page.bytes.len(),
        "total_bytes": page.total_bytes,
        "next_byte_offset": page.next_byte_offset,
        "content_is_utf8": std::str::from_utf8(&page.bytes).is_ok(),
    })
}

/// A read failure in the tool's own terms (`byteOffset=`, not command-line flags).
pub(crate) fn read_error(uri: &ArtifactUri, error: &ReadError) -> String {
    match error {
        ReadError::Page(PageError::PageTooLarge {
            offset,
            lines: 0,
            line_start_byte,
        }) => format!(
            "line {offset} of {uri} alone is longer than the {MAX_PAGE_BYTES}-byte page bound; \
             read it in pieces: read(filePath=\"{uri}\", byteOffset={line_start_byte}, \
             byteLimit=1048576), then continue from the next byteOffset"
        ),
        ReadError::Page(PageError::PageTooLarge { lines, .. }) => {
            format!("{error} (read(filePath=\"{uri}\", offset=…, limit={lines}))")
        }
        other => other.to_string(),
    }
}
