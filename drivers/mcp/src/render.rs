//! What the model reads: run results, pages and their continuation lines.

use std::fmt::Write as _;
use std::time::Duration;

use agentrun_core::page::MAX_PAGE_BYTES;
use agentrun_core::process::{Exit, ProcessResult, RunOutcome};
use agentrun_core::{
    ArtifactUri, BytePage, Continuation, ModelRead, Page, PageError, ReadSyntax, ResultRecord,
};
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

/// The most bytes of an error result's text: under the smallest payload bound, so that an
/// error echoing what the client sent (a huge program name) is bounded whatever the limits.
pub(crate) const MAX_ERROR_BYTES: usize = 4096;

/// The most bytes of a diagnostic in an `agent` status line (the rest is in the retained
/// output, whose read hints follow).
const MAX_DIAGNOSTIC_BYTES: usize = 2048;

/// The most bytes of an `agent` summary.
const MAX_SUMMARY_BYTES: usize = 512;

/// The most bytes of the `[Models: …]` line, and of one model name in it.
const MAX_MODELS_BYTES: usize = 1024;
const MAX_MODEL_NAME_BYTES: usize = 128;

/// The most model names in structured content.
pub(crate) const MAX_MODELS: usize = 32;

/// The heading of an answer block, beside its text (`[Clean answer (…), verbatim:]\n`).
const ANSWER_HEADING_BYTES: usize = 128;

/// The start of a `run` result, before the clean answer, and its status line: what the
/// answer block has to fit beside.
pub(crate) struct RunParts {
    head: String,
    status: String,
}

impl RunParts {
    pub(crate) fn new(result: &ProcessResult, timeout: Duration) -> Self {
        let mut head = result.model_text();
        if !head.is_empty() && !head.ends_with('\n') {
            head.push('\n');
        }
        RunParts {
            head,
            status: status_line(result, timeout),
        }
    }

    /// Bytes left for the answer block under the payload bound `max`.
    pub(crate) fn room(&self, max: usize) -> usize {
        max.saturating_sub(self.head.len() + self.status.len())
    }

    /// The text of a `run` result: the output previews with their read hints, the clean
    /// answer, then one status line; never longer than `max`.
    pub(crate) fn text(self, answer: &Answer, max: usize) -> String {
        let room = self.room(max);
        let mut out = self.head;
        push_answer(
            &mut out,
            answer,
            "Clean answer (the program's result sink)",
            "clean answer",
            room,
        );
        out.push_str(&self.status);
        fit(out, max)
    }
}

/// Whether a text of `len` bytes is shown inline in an answer block with `room` bytes (and
/// at most `max_bytes`, the per-stream preview bound); else it is retained.
pub(crate) fn fits_inline(len: usize, room: usize, max_bytes: usize) -> bool {
    len <= max_bytes && len + ANSWER_HEADING_BYTES <= room
}

/// Appends `answer` under a heading naming `what` (`[Final message:]`, …) in at most `room`
/// bytes: the text itself, or its bounded preview and read hint when it was retained, or
/// only the read hint when the preview does not fit; `[No <missing>: why]` when there is
/// none.
pub(crate) fn push_answer(
    out: &mut String,
    answer: &Answer,
    what: &str,
    missing: &str,
    room: usize,
) {
    let mut block = match answer {
        Answer::NotRequested => return,
        Answer::Missing(why) => format!("[No {missing}: {}]\n", clip(why, MAX_DIAGNOSTIC_BYTES)),
        Answer::Inline(text) => {
            let mut block = format!("[{what}, verbatim:]\n{text}");
            if !block.ends_with('\n') {
                block.push('\n');
            }
            block
        }
        Answer::Retained(record) => {
            let mut block = format!("[{what}, over the preview bound:]\n{}", record.render());
            if !block.ends_with('\n') {
                block.push('\n');
            }
            if block.len() > room {
                block = retained_hint(record, what);
            }
            block
        }
    };
    // An inline answer was chosen to fit (`fits_inline`) and a hint line is a few hundred
    // bytes, within what every payload bound leaves; a block that still does not fit is cut
    // here rather than the status line after it.
    if block.len() > room {
        block = clip(&block, room.saturating_sub(1));
        block.push('\n');
    }
    out.push_str(&block);
}

/// One line saying where a retained answer is, for a result with no room for its preview.
fn retained_hint(record: &ResultRecord, what: &str) -> String {
    match record.streams().first() {
        Some(stream) => format!(
            "[{what}: {} bytes in {} lines, more than this result has room for. Read it: \
             {}]\n",
            stream.bytes,
            stream.lines,
            ModelRead.read_call(&record.stream_uri(stream), stream.start())
        ),
        None => format!("[{what}: retained as {}]\n", record.output_uri()),
    }
}

/// `text` within `max` bytes: a last guard, cutting at a character boundary with a marker.
/// The parts of every result are bounded so that it is never needed.
pub(crate) fn fit(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const MARK: &str = "\n[Result cut at the payload bound]\n";
    let mut out = clip(&text, max.saturating_sub(MARK.len()));
    out.push_str(MARK);
    out
}

/// A diagnostic for a status line, bounded.
pub(crate) fn diagnostic(text: &str) -> String {
    clip(text, MAX_DIAGNOSTIC_BYTES)
}

/// A summary for a status line, bounded.
pub(crate) fn summary(text: &str) -> String {
    clip(text, MAX_SUMMARY_BYTES)
}

/// The `[Models: …]` line: the first names (each cut to a bounded length) that fit the line's
/// bound, and how many more there were (`omitted`: those the interpretation already left out
/// past its own cap).
pub(crate) fn models_line(models: &[String], omitted: u64) -> String {
    let mut line = String::from("[Models: ");
    let mut shown = 0;
    for model in models {
        let name = clip(model, MAX_MODEL_NAME_BYTES);
        // Room for the separator, the name and the `, and N more]` ending.
        if line.len() + name.len() + 40 > MAX_MODELS_BYTES {
            break;
        }
        if shown > 0 {
            line.push_str(", ");
        }
        line.push_str(&name);
        shown += 1;
    }
    let rest = (models.len() - shown) as u64 + omitted;
    if rest > 0 {
        let _ = write!(line, "{}and {rest} more", if shown > 0 { ", " } else { "" });
    }
    line.push_str("]\n");
    line
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

/// Strings are cut to no fewer bytes than this before whole fields are dropped: a URI, a
/// digest, a model name or a status stays whole.
const MIN_STRING_BYTES: usize = 256;

/// `value` (a result's structured content) serialized within `max` bytes, like the text
/// content: some clients give the model the structured content instead of the text, so it is
/// bounded by the same payload bound. First every long string is cut (with `…`) to the most
/// bytes that fit, noted in `strings_cut_at`; when even strings of [`MIN_STRING_BYTES`] do
/// not fit, the largest strings and arrays holding no artifact URI are dropped (set to
/// `null`), largest first, each named by its JSON pointer in `omitted_fields`. URIs, numbers
/// and booleans (the counts) are kept; the text content says the rest.
pub(crate) fn bound_structured(mut value: Value, max: usize) -> Value {
    if json_len(&value) <= max || !value.is_object() {
        return value;
    }
    // The largest string cap that fits, by bisection over [MIN_STRING_BYTES, longest].
    let longest = longest_string(&value);
    let (mut lo, mut hi) = (MIN_STRING_BYTES, longest);
    let mut best = None;
    while lo <= hi && lo < longest {
        let mid = lo + (hi - lo) / 2;
        let mut cut = value.clone();
        cap_strings(&mut cut, mid);
        cut["strings_cut_at"] = json!(mid);
        if json_len(&cut) <= max {
            best = Some(cut);
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if let Some(cut) = best {
        return cut;
    }
    cap_strings(&mut value, MIN_STRING_BYTES);
    value["strings_cut_at"] = json!(MIN_STRING_BYTES);
    let mut omitted: Vec<String> = Vec::new();
    loop {
        value["omitted_fields"] = json!(omitted);
        if json_len(&value) <= max {
            return value;
        }
        let mut largest = None;
        largest_droppable(&value, &mut String::new(), &mut largest);
        let Some((_, pointer)) = largest else { break };
        if let Some(field) = value.pointer_mut(&pointer) {
            *field = Value::Null;
        }
        omitted.push(pointer);
    }
    // Only URIs and counts are left and they still do not fit: keep the URIs that do.
    let mut uris = Vec::new();
    collect_uris(&value, &mut uris);
    let mut last = json!({"omitted_fields": [""], "artifacts": []});
    for uri in uris {
        last["artifacts"]
            .as_array_mut()
            .expect("an array")
            .push(json!(uri));
        if json_len(&last) > max {
            last["artifacts"].as_array_mut().expect("an array").pop();
            break;
        }
    }
    last
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

fn is_uri(s: &str) -> bool {
    s.starts_with("artifact://")
}

fn longest_string(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(longest_string).max().unwrap_or(0),
        Value::Object(map) => map.values().map(longest_string).max().unwrap_or(0),
        _ => 0,
    }
}

/// Cuts every string but artifact URIs to at most `max` bytes.
fn cap_strings(value: &mut Value, max: usize) {
    match value {
        Value::String(s) if s.len() > max && !is_uri(s) => *s = clip(s, max),
        Value::Array(items) => items.iter_mut().for_each(|v| cap_strings(v, max)),
        Value::Object(map) => map.values_mut().for_each(|v| cap_strings(v, max)),
        _ => {}
    }
}

fn contains_uri(value: &Value) -> bool {
    match value {
        Value::String(s) => is_uri(s),
        Value::Array(items) => items.iter().any(contains_uri),
        Value::Object(map) => map.values().any(contains_uri),
        _ => false,
    }
}

/// The largest string or array under `value` that holds no artifact URI, as (serialized
/// size, JSON pointer). Objects are searched, never dropped whole: their counts stay.
fn largest_droppable(value: &Value, at: &mut String, best: &mut Option<(usize, String)>) {
    let mut consider = |value: &Value, at: &str| {
        let len = json_len(value);
        // `null` and tiny values gain nothing from being named in `omitted_fields`.
        if len > 16 && best.as_ref().is_none_or(|(b, _)| len > *b) && !contains_uri(value) {
            *best = Some((len, at.to_owned()));
        }
    };
    match value {
        Value::String(_) => consider(value, at),
        Value::Array(items) => {
            consider(value, at);
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                let _ = write!(at, "/{i}");
                largest_droppable(item, at, best);
                at.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                if key == "omitted_fields" {
                    continue;
                }
                let len = at.len();
                at.push('/');
                at.push_str(&key.replace('~', "~0").replace('/', "~1"));
                largest_droppable(item, at, best);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

fn collect_uris(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if is_uri(s) && !out.contains(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_uris(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_uris(v, out)),
        _ => {}
    }
}

/// The continuation line of a line page: where the next page starts, or the end.
pub(crate) fn page_continuation(uri: &ArtifactUri, page: &Page) -> String {
    let mut line = match page.continuation {
        Continuation::End if page.lines == 0 => format!(
            "[No lines at offset {}: the artifact has {} lines]",
            page.offset, page.total_lines
        ),
        Continuation::End => format!(
            "[Lines {}-{} of {}: end of artifact]",
            page.offset,
            page.offset + page.lines - 1,
            page.total_lines
        ),
        at => format!(
            "[Lines {}-{} of {}. Read more: {}]",
            page.offset,
            page.offset + page.lines.saturating_sub(1),
            page.total_lines,
            ModelRead.read_call(uri, at)
        ),
    };
    push_lossy_note(&mut line, &page.bytes);
    line
}

/// The continuation line of a byte page.
pub(crate) fn byte_continuation(uri: &ArtifactUri, page: &BytePage) -> String {
    let end = page.offset + page.bytes.len() as u64;
    let mut line = match page.continuation() {
        Continuation::End => format!(
            "[Bytes {}-{end} of {}: end of artifact]",
            page.offset, page.total_bytes
        ),
        at => format!(
            "[Bytes {}-{end} of {}. Read more: {}]",
            page.offset,
            page.total_bytes,
            ModelRead.read_call(uri, at)
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
        "next": page.continuation.to_json(),
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
        "next": page.continuation().to_json(),
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
             read it in pieces: {}, then continue from the next byteOffset",
            ModelRead.read_call(uri, Continuation::Byte(*line_start_byte))
        ),
        ReadError::Page(PageError::PageTooLarge { lines, .. }) => {
            format!("{error} (read(filePath=\"{uri}\", offset=…, limit={lines}))")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_line_is_bounded_and_counts_the_rest() {
        let many: Vec<String> = (0..20_000).map(|i| format!("model-{i}")).collect();
        let line = models_line(&many, 0);
        assert!(line.len() <= MAX_MODELS_BYTES, "{}", line.len());
        assert!(line.starts_with("[Models: model-0, model-1, "), "{line}");
        let shown = line.matches("model-").count();
        assert!(
            line.ends_with(&format!(", and {} more]\n", 20_000 - shown)),
            "{line}"
        );
        // Those the interpretation did not keep are counted too.
        let line = models_line(&many[..2], 7);
        assert_eq!(line, "[Models: model-0, model-1, and 7 more]\n");

        let huge = vec!["m".repeat(5_000_000), "small".to_owned()];
        let line = models_line(&huge, 0);
        assert!(line.len() <= MAX_MODELS_BYTES, "{}", line.len());
        assert!(line.contains("m…, small]"), "{line}");
        assert_eq!(models_line(&["a".to_owned()], 0), "[Models: a]\n");
    }

    #[test]
    fn structured_content_is_cut_then_dropped_but_keeps_uris_and_counts() {
        let uri = format!("artifact://{}/stdout", "a".repeat(64));
        let small = json!({"uri": uri, "lines": 3});
        assert_eq!(
            bound_structured(small.clone(), 8704),
            small,
            "what fits is unchanged"
        );

        // One long string: cut to what is left.
        let long = json!({"uri": uri, "lines": 3, "text": "x".repeat(100_000)});
        let cut = bound_structured(long, 8704);
        assert!(json_len(&cut) <= 8704);
        assert!(
            json_len(&cut) > 8000,
            "the room is used: {}",
            json_len(&cut)
        );
        assert_eq!((&cut["uri"], &cut["lines"]), (&json!(uri), &json!(3)));
        assert!(cut["strings_cut_at"].is_number(), "{cut}");

        // Many names: even at the smallest cut they do not fit; the lists are dropped.
        let names: Vec<String> = (0..32).map(|i| format!("{i}{}", "m".repeat(200))).collect();
        let many = json!({"uri": uri, "count": 7, "a": names, "b": {"models": names}});
        let dropped = bound_structured(many, 8704);
        assert!(json_len(&dropped) <= 8704, "{}", json_len(&dropped));
        assert_eq!(dropped["uri"], json!(uri));
        assert_eq!(dropped["count"], json!(7));
        let omitted = dropped["omitted_fields"].as_array().unwrap();
        assert!(omitted.contains(&json!("/a")), "{dropped}");
        assert!(dropped["a"].is_null());

        // Nothing but URIs, more than fit: the URIs that fit.
        let uris: Vec<String> = (0..200).map(|i| format!("{uri}{i}")).collect();
        let last = bound_structured(json!({ "artifacts": uris }), 8704);
        assert!(json_len(&last) <= 8704);
        assert_eq!(last["omitted_fields"], json!([""]));
        assert_eq!(last["artifacts"][0], json!(format!("{uri}0")));
    }

    #[test]
    fn clip_and_fit_cut_at_character_boundaries() {
        assert_eq!(clip("héllo", 10), "héllo");
        assert_eq!(clip("ééééé", 6), "é…", "the mark counts against the bound");
        let fitted = fit("x".repeat(10_000), 8704);
        assert!(fitted.len() <= 8704 && fitted.ends_with("[Result cut at the payload bound]\n"));
    }
}
