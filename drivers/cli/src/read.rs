//! `agentrun read`: page an artifact.

use std::io;
use std::process::ExitCode;

use agentrun_core::ArtifactUri;
use agentrun_core::page::{ByteRange, PageRequest};
use agentrun_fs::{ReadError, Store};
use clap::Args;

use crate::failure::{Failure, write_or_quiet};

#[derive(Debug, Args)]
pub(crate) struct ReadArgs {
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

fn parse_uri(s: &str) -> Result<ArtifactUri, Failure> {
    ArtifactUri::parse(s).map_err(|e| Failure::usage(format!("{s:?}: {e}")))
}

pub(crate) fn read(store: &Store, args: ReadArgs) -> Result<ExitCode, Failure> {
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
