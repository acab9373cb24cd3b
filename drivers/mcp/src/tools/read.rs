//! The `read` tool: pages of retained output by artifact URI.

use agentrun_core::ArtifactUri;
use agentrun_core::page::{ByteRange, MAX_PAGE_LINES, PageRequest};
use agentrun_tokio::Runner;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool, ToolAnnotations};
use serde_json::json;

use crate::McpServer;
use crate::args::{ArgError, Args};
use crate::render;
use crate::tools::{object, tool_error};

const READ_DESCRIPTION: &str = "\
Read retained output by its artifact URI: the filePath from a `[Truncated. Read more: \
read(filePath=\"artifact://...\", offset=N)]` hint (artifact://<64 hex digits> or \
artifact://<64 hex digits>/<stream>). Returns whole lines exactly as stored, from line \
`offset` (zero-based, default 0), at most `limit` lines (1-2000; default: up to 2000, as many \
as fit 2 MiB), then a line saying which lines these were and the read call for the next page. \
For a single line too long for a page, read bytes instead with byteOffset (and byteLimit, at \
most 2097152); hints name it when needed. Reads only artifact URIs, never files.";

pub(crate) fn read_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "filePath": {
                "type": "string",
                "pattern": "^artifact://[0-9a-f]{64}(/[A-Za-z0-9._-]{1,64})?$",
                "description": "The artifact URI from a read hint, e.g. artifact://<64 hex digits>/stdout."
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Zero-based first line (default 0): the offset from the hint."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_PAGE_LINES,
                "description": "Most lines to return (default and maximum 2000)."
            },
            "byteOffset": {
                "type": "integer",
                "minimum": 0,
                "description": "Read bytes from this byte offset instead of lines (for a line longer than a page). Not with offset/limit."
            },
            "byteLimit": {
                "type": "integer",
                "minimum": 1,
                "maximum": agentrun_core::page::MAX_PAGE_BYTES,
                "description": "Most bytes to return with byteOffset (default 1048576)."
            }
        },
        "required": ["filePath"],
        "additionalProperties": false
    });
    Tool::new("read", READ_DESCRIPTION, object(schema)).annotate(
        ToolAnnotations::with_title("Read retained output by artifact URI")
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

/// What a `read` call asks for.
struct ReadCall {
    uri: ArtifactUri,
    range: ReadRange,
}

enum ReadRange {
    Lines(PageRequest),
    Bytes(ByteRange),
}

/// Parses an artifact URI as `what`, with the grammar in the error.
pub(crate) fn parse_uri(text: &str, what: &str) -> Result<ArtifactUri, ArgError> {
    // Echoed in the error: a huge one is cut.
    let shown = render::clip(text, 200);
    if !ArtifactUri::is_artifact_scheme(text) {
        return Err(ArgError(format!(
            "{what} {shown:?} is not an artifact URI; this server reads only artifact URIs \
             (artifact://<64 lowercase hex digits> or artifact://<64 lowercase hex \
             digits>/<stream>), exactly as given in a `[Truncated. Read more: ...]` hint; it \
             reads no files"
        )));
    }
    ArtifactUri::parse(text).map_err(|e| {
        ArgError(format!(
            "{what} {shown:?} is not a valid artifact URI: {e}; the form is artifact://<64 \
             lowercase hex digits> or artifact://<64 lowercase hex digits>/<stream>, copied \
             exactly from a read hint"
        ))
    })
}

fn parse_read(map: &JsonObject) -> Result<ReadCall, ArgError> {
    let args = Args::new(
        "read",
        map,
        &["filePath", "offset", "limit", "byteOffset", "byteLimit"],
    )?;
    let uri = parse_uri(args.string("filePath")?, "`read` argument `filePath`")?;
    let offset = args.opt_u64("offset", 0, u64::MAX)?;
    let limit = args.opt_u64("limit", 1, u64::from(MAX_PAGE_LINES))?;
    let byte_offset = args.opt_u64("byteOffset", 0, u64::MAX)?;
    let byte_limit = args.opt_u64("byteLimit", 1, agentrun_core::page::MAX_PAGE_BYTES as u64)?;
    let range = match byte_offset {
        Some(_) if offset.is_some() || limit.is_some() => {
            return Err(ArgError(
                "`read` takes either lines (offset, limit) or bytes (byteOffset, byteLimit), \
                 not both; drop one pair"
                    .to_owned(),
            ));
        }
        Some(byte_offset) => ReadRange::Bytes(
            ByteRange::new(byte_offset, byte_limit.unwrap_or(1 << 20))
                .map_err(|e| ArgError(format!("`read`: {e}")))?,
        ),
        None if byte_limit.is_some() => {
            return Err(ArgError(
                "`read` argument `byteLimit` needs `byteOffset` (use byteOffset=0 to start at \
                 the beginning)"
                    .to_owned(),
            ));
        }
        // Without a limit, "a page": as many lines as fit, so that following a continuation
        // is never refused for lines that are long together.
        None => ReadRange::Lines(
            match limit {
                Some(limit) => PageRequest::new(offset.unwrap_or(0), limit),
                None => PageRequest::up_to(offset.unwrap_or(0), u64::from(MAX_PAGE_LINES)),
            }
            .map_err(|e| ArgError(format!("`read`: {e}")))?,
        ),
    };
    Ok(ReadCall { uri, range })
}

impl McpServer {
    pub(crate) async fn call_read(&self, map: &JsonObject) -> Result<CallToolResult, ErrorData> {
        let request = match parse_read(map) {
            Ok(request) => request,
            Err(e) => return Ok(e.into()),
        };
        let runner = Runner::new(self.inner.store.clone());
        let uri = &request.uri;
        // (stored bytes, continuation line, structured metadata) of a line or byte page.
        let read = match request.range {
            ReadRange::Lines(page_request) => {
                runner.read_page(uri, page_request).await.map(|page| {
                    let continuation = render::page_continuation(uri, &page);
                    let json = render::page_json(uri, &page);
                    (page.bytes, continuation, json)
                })
            }
            ReadRange::Bytes(range) => runner.read_bytes(uri, range).await.map(|page| {
                let continuation = render::byte_continuation(uri, &page);
                let json = render::byte_page_json(uri, &page);
                (page.bytes, continuation, json)
            }),
        };
        let (bytes, continuation, json) = match read {
            Ok(read) => read,
            Err(e) => return Ok(tool_error(render::read_error(&request.uri, &e))),
        };
        // The page goes back as stored: the first block is the page alone, never cut again and
        // never retained as a new artifact; the second says where it ends.
        let mut out = CallToolResult::success(vec![
            ContentBlock::text(String::from_utf8_lossy(&bytes).into_owned()),
            ContentBlock::text(continuation),
        ]);
        if self.inner.structured_content {
            out.structured_content = Some(json);
        }
        Ok(out)
    }
}
