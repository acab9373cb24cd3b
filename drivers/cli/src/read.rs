//! `agentrun read`: page an artifact. The page's raw bytes go to stdout; the continuation
//! (`next: agentrun read …`, keeping the caller's `--limit` / `--byte-limit`) goes to stderr.
//!
//! Every hint printed is a command that works: a line too long for a page is continued by
//! byte range, a page of many lines that would be too large is shortened to the lines that
//! fit (unless the caller chose `--limit`), and reading a run's manifest instead of one of its
//! streams names the streams.

use std::io;
use std::process::ExitCode;

use agentrun_core::page::{ByteRange, MAX_PAGE_BYTES, PageError, PageRequest};
use agentrun_core::{ArtifactUri, Continuation, Page, ReadSyntax};
use agentrun_fs::{ReadError, Store};
use clap::Args;

use crate::failure::{Failure, plural, write_or_quiet};
use crate::settings::Settings;

/// Lines read when `--limit` is not given.
const DEFAULT_LIMIT: u64 = 2000;
/// Bytes read when `--byte-limit` is not given.
const DEFAULT_BYTE_LIMIT: u64 = 1 << 20;

/// Arguments of `agentrun read`.
#[derive(Debug, Args)]
pub(crate) struct ReadArgs {
    /// `artifact://<sha256>`, `artifact://<sha256>/<stream>`, or RUN/STREAM: a run's stream
    /// (`last/stdout`, `<run id>/stderr`; RUN is a run id, a unique prefix of one, or `last`).
    #[arg(value_name = "URI|RUN/STREAM")]
    uri: String,
    /// Zero-based first line: the number of lines to skip [default: 0]. The lines printed on
    /// stderr are numbered from 1, so `--offset 5 --limit 10` reads lines 6-15 and the next
    /// page's offset is the last line number shown.
    #[arg(long, value_name = "N")]
    offset: Option<u64>,
    /// Lines to read, 1-2000 [default: 2000, fewer if 2000 lines exceed the 2 MiB page bound].
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Read bytes instead of lines, from this zero-based byte offset (for lines longer than a
    /// page); byte numbers on stderr are 1-based, like line numbers.
    #[arg(long, value_name = "N", conflicts_with_all = ["offset", "limit", "all"])]
    byte_offset: Option<u64>,
    /// Bytes to read with --byte-offset, 1-2097152 [default: 1048576].
    #[arg(long, value_name = "N", requires = "byte_offset")]
    byte_limit: Option<u64>,
    /// Write the whole artifact, exactly as stored.
    #[arg(long, conflicts_with_all = ["offset", "limit"])]
    all: bool,
    /// Print the page and its metadata as one JSON object.
    #[arg(long, conflicts_with = "all")]
    pub(crate) json: bool,
}

/// The command line's read syntax: `agentrun read URI --offset N` (bare for line 0, the
/// default), or `agentrun read URI --byte-offset B`.
pub(crate) struct CliRead;

impl ReadSyntax for CliRead {
    fn read_call(&self, uri: &ArtifactUri, at: Continuation) -> String {
        match at {
            Continuation::Byte(byte) => format!("agentrun read {uri} --byte-offset {byte}"),
            Continuation::Line(line) if line > 0 => format!("agentrun read {uri} --offset {line}"),
            _ => format!("agentrun read {uri}"),
        }
    }
}

fn parse_uri(s: &str) -> Result<ArtifactUri, Failure> {
    ArtifactUri::parse(s).map_err(|e| Failure::usage(format!("{s:?}: {e}")))
}

/// What `read` was asked for: an artifact URI, parsed strictly, or RUN/STREAM, resolved in the
/// store to that run's stream URI (which the continuation on stderr then names).
fn target(store: &Store, s: &str) -> Result<ArtifactUri, Failure> {
    if s.starts_with("artifact:") {
        return parse_uri(s);
    }
    let Some((run, stream)) = s.split_once('/') else {
        return Err(Failure::usage(format!(
            "{s:?} is neither an artifact URI (artifact://<sha256>[/<stream>]) nor RUN/STREAM \
             (e.g. last/stdout)"
        )));
    };
    let run_id = store.resolve_run(run).map_err(|e| match e {
        agentrun_fs::NameError::Invalid(_) => Failure::usage(format!(
            "{s:?}: {e}; read takes artifact://<sha256>[/<stream>] or RUN/STREAM"
        )),
        e => Failure::runtime(e),
    })?;
    let record = store.record(&run_id).map_err(Failure::runtime)?;
    let names = || {
        record
            .streams()
            .iter()
            .map(|s| s.name.as_ref().map_or("output", |n| n.as_str()).to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let found = record
        .streams()
        .iter()
        .find(|st| st.name.as_ref().map_or("output", |n| n.as_str()) == stream);
    match found {
        Some(found) => Ok(record.stream_uri(found)),
        None => Err(Failure::usage(format!(
            "run {run_id} has no stream {stream:?}; its streams: {}",
            names()
        ))),
    }
}

/// Runs `agentrun read`.
pub(crate) fn read(settings: &Settings, args: ReadArgs) -> Result<ExitCode, Failure> {
    // A malformed URI is refused before the store is looked at.
    if args.uri.starts_with("artifact:") {
        parse_uri(&args.uri)?;
    }
    let store = settings.store_to_read()?;
    let uri = target(&store, &args.uri)?;
    let mut out = io::stdout().lock();
    if args.all {
        return match store.copy_to(&uri, &mut out) {
            Ok(_) => Ok(ExitCode::SUCCESS),
            // The reader went away (`… --all | head`): stop reading, quietly.
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
            Err(e) => Err(read_failure(&store, &uri, e)),
        };
    }
    if let Some(offset) = args.byte_offset {
        return read_bytes(&store, &uri, offset, args.byte_limit, args.json, &mut out);
    }
    let offset = args.offset.unwrap_or(0);
    // Without --limit the caller asked for "a page", not a number of lines: the lines that
    // fit the page bound.
    let request = match args.limit {
        Some(limit) => PageRequest::new(offset, limit),
        None => PageRequest::up_to(offset, DEFAULT_LIMIT),
    }
    .map_err(Failure::usage)?;
    let page = store
        .read_page(&uri, request)
        .map_err(|e| read_failure(&store, &uri, e))?;
    if args.json {
        #[derive(serde::Serialize)]
        struct Lines {
            offset: u64,
            lines: u64,
            total_lines: u64,
            next_offset: Option<u64>,
        }
        let position = Lines {
            offset: page.offset,
            lines: page.lines,
            total_lines: page.total_lines,
            next_offset: page.next_offset,
        };
        let json = PageJson::new(&uri, position, page.continuation, &page.bytes);
        write_or_quiet(&mut out, crate::json_out::document(&json)?.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    write_or_quiet(&mut out, &page.bytes)?;
    say!("{}", line_status(&page, &uri, args.limit));
    if offset == 0
        && uri.stream.is_none()
        && let Some(note) = manifest_note(&store, &uri)
    {
        say!("agentrun: {note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `lines 1-2000 of 5000; next: agentrun read URI --offset 2000 [--limit L]`: line numbers for
/// people (1-based, both ends included) while `--offset` is the zero-based offset, the number
/// of lines skipped, so a page's last line number is the next page's offset.
fn line_status(page: &Page, uri: &ArtifactUri, limit: Option<u64>) -> String {
    let keep_limit = limit.map_or(String::new(), |l| format!(" --limit {l}"));
    let total = plural(page.total_lines, "line", "lines");
    if page.lines == 0 {
        return format!(
            "agentrun: no lines at offset {} of {total} (end)",
            page.offset
        );
    }
    let (first, last) = (page.offset + 1, page.offset + page.lines);
    match page.continuation {
        Continuation::End => format!("agentrun: lines {first}-{last} of {total} (end)"),
        // The next line alone is longer than a page: bytes, without the line limit.
        at @ Continuation::Byte(_) => format!(
            "agentrun: lines {first}-{last} of {total}; next: {}",
            CliRead.read_call(uri, at)
        ),
        at => format!(
            "agentrun: lines {first}-{last} of {total}; next: {}{keep_limit}",
            CliRead.read_call(uri, at)
        ),
    }
}

/// `read --json`: the URI, where the page is (its lines or bytes), where reading continues, and
/// the page's content.
#[derive(serde::Serialize)]
struct PageJson<'a, P> {
    uri: String,
    #[serde(flatten)]
    position: P,
    next: serde_json::Value,
    content: std::borrow::Cow<'a, str>,
    content_is_utf8: bool,
}

impl<'a, P> PageJson<'a, P> {
    fn new(uri: &ArtifactUri, position: P, next: Continuation, bytes: &'a [u8]) -> Self {
        Self {
            uri: uri.to_string(),
            position,
            next: next.to_json(),
            content: String::from_utf8_lossy(bytes),
            content_is_utf8: std::str::from_utf8(bytes).is_ok(),
        }
    }
}

fn read_bytes(
    store: &Store,
    uri: &ArtifactUri,
    offset: u64,
    limit: Option<u64>,
    json: bool,
    out: &mut impl io::Write,
) -> Result<ExitCode, Failure> {
    let range =
        ByteRange::new(offset, limit.unwrap_or(DEFAULT_BYTE_LIMIT)).map_err(Failure::usage)?;
    let page = store
        .read_bytes(uri, range)
        .map_err(|e| read_failure(store, uri, e))?;
    // As for lines: byte numbers for people, 1-based and inclusive (`bytes 1-1048576`), and
    // the zero-based --byte-offset of the next page is the last byte number.
    let end = page.offset + page.bytes.len() as u64;
    if json {
        #[derive(serde::Serialize)]
        struct Bytes {
            byte_offset: u64,
            bytes: usize,
            total_bytes: u64,
            next_byte_offset: Option<u64>,
        }
        let position = Bytes {
            byte_offset: page.offset,
            bytes: page.bytes.len(),
            total_bytes: page.total_bytes,
            next_byte_offset: page.next_byte_offset,
        };
        let json = PageJson::new(uri, position, page.continuation(), &page.bytes);
        write_or_quiet(out, crate::json_out::document(&json)?.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    write_or_quiet(out, &page.bytes)?;
    let total = plural(page.total_bytes, "byte", "bytes");
    let keep_limit = limit.map_or(String::new(), |l| format!(" --byte-limit {l}"));
    match page.continuation() {
        Continuation::End if page.bytes.is_empty() => say!(
            "agentrun: no bytes at byte offset {} of {total} (end)",
            page.offset
        ),
        Continuation::End => say!("agentrun: bytes {}-{end} of {total} (end)", page.offset + 1),
        at => say!(
            "agentrun: bytes {}-{end} of {total}; next: {}{keep_limit}",
            page.offset + 1,
            CliRead.read_call(uri, at)
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// A read error in the CLI's words: the commands that work instead.
fn read_failure(store: &Store, uri: &ArtifactUri, e: ReadError) -> Failure {
    let message = match &e {
        ReadError::Page(PageError::OffsetPastEnd {
            offset,
            total_lines,
        }) => {
            let mut m = format!(
                "offset {offset} is past the end of {uri}: it has {}",
                plural(*total_lines, "line", "lines")
            );
            match manifest_note(store, uri) {
                Some(note) => m.push_str(&format!("; {note}")),
                None if *total_lines > 0 => m.push_str(&format!(
                    "; the last page starts at --offset {}",
                    total_lines.saturating_sub(DEFAULT_LIMIT)
                )),
                None => {}
            }
            m
        }
        ReadError::Page(PageError::ByteOffsetPastEnd {
            offset,
            total_bytes,
        }) => format!(
            "byte offset {offset} is past the end of {uri}: it has {}",
            plural(*total_bytes, "byte", "bytes")
        ),
        ReadError::Page(PageError::PageTooLarge {
            offset,
            lines: 0,
            line_start_byte,
        }) => format!(
            "line {offset} of {uri} alone is longer than a page ({} MiB); read it in pieces: \
             {}",
            MAX_PAGE_BYTES >> 20,
            CliRead.read_call(uri, Continuation::Byte(*line_start_byte))
        ),
        ReadError::Page(PageError::PageTooLarge { offset, lines, .. }) => format!(
            "the requested lines from line {offset} of {uri} exceed the {} MiB page bound; \
             {} fit: agentrun read {uri} --offset {offset} --limit {lines}",
            MAX_PAGE_BYTES >> 20,
            plural(*lines, "line", "lines")
        ),
        ReadError::Missing(_) => format!("{e} (--store DIR or AGENTRUN_HOME)"),
        _ => e.to_string(),
    };
    Failure::runtime(message)
}

/// For a bare URI naming a run's manifest: which streams it has and how to read one.
fn manifest_note(store: &Store, uri: &ArtifactUri) -> Option<String> {
    if uri.stream.is_some() {
        return None;
    }
    let manifest = store.manifest(&uri.digest).ok()??;
    let names: Vec<String> = manifest.names().iter().map(|n| n.to_string()).collect();
    let first = names.first()?;
    Some(format!(
        "{uri} is the manifest of a run's streams ({}), not its output; read one with: \
         agentrun read {uri}/{first}",
        names.join(", ")
    ))
}
