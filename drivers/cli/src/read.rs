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
    /// `artifact://<sha256>` or `artifact://<sha256>/<stream>`.
    #[arg(value_name = "URI")]
    uri: String,
    /// Zero-based first line [default: 0].
    #[arg(long, value_name = "N")]
    offset: Option<u64>,
    /// Lines to read, 1-2000 [default: 2000, fewer if 2000 lines exceed the 2 MiB page bound].
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Read bytes instead of lines, from this byte offset (for lines longer than a page).
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

/// Runs `agentrun read`.
pub(crate) fn read(settings: &Settings, args: ReadArgs) -> Result<ExitCode, Failure> {
    let uri = parse_uri(&args.uri)?;
    let store = settings.store_to_read()?;
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
        let json = serde_json::json!({
            "uri": uri.to_string(),
            "offset": page.offset,
            "lines": page.lines,
            "total_lines": page.total_lines,
            "next_offset": page.next_offset,
            "next": page.continuation.to_json(),
            "content": String::from_utf8_lossy(&page.bytes),
            "content_is_utf8": std::str::from_utf8(&page.bytes).is_ok(),
        });
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
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

/// `lines 0-1999 of 5000; next: agentrun read URI --offset 2000 [--limit L]`.
fn line_status(page: &Page, uri: &ArtifactUri, limit: Option<u64>) -> String {
    let keep_limit = limit.map_or(String::new(), |l| format!(" --limit {l}"));
    let total = plural(page.total_lines, "line", "lines");
    if page.lines == 0 {
        return format!(
            "agentrun: no lines at offset {} of {total} (end)",
            page.offset
        );
    }
    let last = page.offset + page.lines - 1;
    match page.continuation {
        Continuation::End => format!("agentrun: lines {}-{last} of {total} (end)", page.offset),
        // The next line alone is longer than a page: bytes, without the line limit.
        at @ Continuation::Byte(_) => format!(
            "agentrun: lines {}-{last} of {total}; next: {}",
            page.offset,
            CliRead.read_call(uri, at)
        ),
        at => format!(
            "agentrun: lines {}-{last} of {total}; next: {}{keep_limit}",
            page.offset,
            CliRead.read_call(uri, at)
        ),
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
    let end = page.offset + page.bytes.len() as u64;
    if json {
        let json = serde_json::json!({
            "uri": uri.to_string(),
            "byte_offset": page.offset,
            "bytes": page.bytes.len(),
            "total_bytes": page.total_bytes,
            "next_byte_offset": page.next_byte_offset,
            "next": page.continuation().to_json(),
            "content": String::from_utf8_lossy(&page.bytes),
            "content_is_utf8": std::str::from_utf8(&page.bytes).is_ok(),
        });
        write_or_quiet(out, format!("{json:#}\n").as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    write_or_quiet(out, &page.bytes)?;
    let total = plural(page.total_bytes, "byte", "bytes");
    let keep_limit = limit.map_or(String::new(), |l| format!(" --byte-limit {l}"));
    match page.continuation() {
        Continuation::End => say!("agentrun: bytes {}-{end} of {total} (end)", page.offset),
        at => say!(
            "agentrun: bytes {}-{end} of {total}; next: {}{keep_limit}",
            page.offset,
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
