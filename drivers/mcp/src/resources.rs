//! The artifact store as MCP resources: templates, every run of the store, and
//! `resources/read`.

use agentrun_core::page::{ByteRange, MAX_PAGE_BYTES, MAX_PAGE_LINES, PageError, PageRequest};
use agentrun_core::record::{RecordOutput, ResultRecord};
use agentrun_core::{BytePage, Page};
use agentrun_fs::ReadError;
use rmcp::model::{
    ErrorData, JsonObject, ListResourceTemplatesResult, ListResourcesResult, MetaObject,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};
use serde_json::json;

use crate::McpServer;
use crate::handler::blocking;
use crate::render;
use crate::tools::read::parse_uri;

/// How many runs one `resources/list` page offers.
const LIST_PAGE: usize = 50;

/// The cursor of the page after the run `run_id`: opaque to clients (the id, hex-encoded
/// behind a version tag), so that none relies on its shape.
fn cursor_after(run_id: &str) -> String {
    let hex: String = run_id.bytes().map(|b| format!("{b:02x}")).collect();
    format!("runs1-{hex}")
}

/// The run id a cursor continues after, or `None` when it is not one this server made.
fn run_after(cursor: &str) -> Option<String> {
    let hex = cursor.strip_prefix("runs1-")?;
    if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 512 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let id = String::from_utf8(bytes?).ok()?;
    id.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        .then_some(id)
}

/// One record as a resource: its output (the manifest for named output), named after its
/// command when it has one.
fn record_resource(record: &ResultRecord) -> Resource {
    let program = record
        .run
        .as_ref()
        .and_then(|run| run.command.first())
        .map(|p| render::clip(p, 200));
    let name = match &program {
        Some(program) => format!("{program} (run {})", record.run_id),
        None => format!("run {}", record.run_id),
    };
    let counts: Vec<String> = record
        .streams()
        .iter()
        .map(|s| {
            let name = s.name.as_ref().map_or("output", |n| n.as_str());
            format!("{name} {} lines, {} bytes", s.lines, s.bytes)
        })
        .collect();
    let (what, mime) = match &record.output {
        RecordOutput::Named { .. } => ("Output manifest", "application/json"),
        RecordOutput::Single { .. } => ("Output", "text/plain"),
    };
    let description = match &program {
        Some(program) => format!("{what} of `{program}`: {}", counts.join(", ")),
        None => format!("{what}: {}", counts.join(", ")),
    };
    let mut resource = Resource::new(record.output_uri().to_string(), name)
        .with_description(description)
        .with_mime_type(mime);
    if let RecordOutput::Single { stream } = &record.output {
        resource = resource.with_size(stream.bytes);
    }
    resource
}

/// The first page of a resource: lines, or bytes when its first line is longer than a page.
enum First {
    Lines(Page),
    Bytes(BytePage),
}

impl McpServer {
    pub(crate) fn templates() -> ListResourceTemplatesResult {
        ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("artifact://{digest}", "artifact")
                .with_title("Retained output")
                .with_description(
                    "A retained artifact by its SHA-256 digest: one run's output, or the \
                     manifest of its named streams (JSON). Reading it returns the first page \
                     (2000 lines at most); _meta says the total and the next offset for the \
                     `read` tool.",
                ),
            ResourceTemplate::new("artifact://{digest}/{stream}", "artifact-stream")
                .with_title("Retained output stream")
                .with_description(
                    "One named stream (stdout, stderr, ...) of a manifest. Reading it returns \
                     the first page; _meta says the total and the next offset.",
                ),
        ])
    }

    /// `resources/list`: every run of the store, newest first, [`LIST_PAGE`] at a time. A
    /// cursor names the last run of the page before, so runs made meanwhile do not shift the
    /// pages still to come; a cursor this server did not make is `-32602`.
    pub(crate) async fn list_store_resources(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let after = match cursor {
            None => None,
            Some(cursor) => Some(run_after(&cursor).ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "invalid cursor {:?}: pass the nextCursor of an earlier resources/list \
                         answer, or none for the first page",
                        render::clip(&cursor, 200)
                    ),
                    None,
                )
            })?),
        };
        let store = self.inner.store.clone();
        blocking(move || {
            let ids = store
                .records()
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            // Newest first: run ids sort by start time.
            let older = ids.iter().rev().filter(|id| {
                after
                    .as_ref()
                    .is_none_or(|after| id.as_str() < after.as_str())
            });
            let mut resources = Vec::new();
            let mut last = None;
            let mut more = false;
            for id in older {
                if resources.len() == LIST_PAGE {
                    more = true;
                    break;
                }
                last = Some(id.clone());
                // A record removed or rewritten meanwhile (GC) is left out, not an error.
                if let Ok(record) = store.record(id) {
                    resources.push(record_resource(&record));
                }
            }
            let mut result = ListResourcesResult::with_all_items(resources);
            result.next_cursor = more.then(|| last.map(|id| cursor_after(&id))).flatten();
            Ok(result)
        })
        .await?
    }

    pub(crate) async fn read_resource_page(
        &self,
        request: ReadResourceRequestParams,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = parse_uri(&request.uri, "resource URI").map_err(|e| {
            ErrorData::invalid_params(render::clip(&e.0, render::MAX_ERROR_BYTES), None)
        })?;
        let store = self.inner.store.clone();
        let read_uri = uri.clone();
        let first = PageRequest::up_to(0, u64::from(MAX_PAGE_LINES))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let page = blocking(move || {
            let page = match store.read_page(&read_uri, first) {
                Ok(page) => First::Lines(page),
                // A first line longer than a page: its first bytes, continued by byte offset.
                Err(ReadError::Page(PageError::PageTooLarge { lines: 0, .. })) => {
                    let range = ByteRange::new(0, MAX_PAGE_BYTES as u64)?;
                    First::Bytes(store.read_bytes(&read_uri, range)?)
                }
                Err(e) => return Err(e),
            };
            // A bare digest may name a manifest: say so with the JSON media type.
            let manifest = read_uri.stream.is_none() && store.manifest(&read_uri.digest)?.is_some();
            Ok::<_, ReadError>((page, manifest))
        })
        .await?;
        let (page, manifest) = match page {
            Ok(found) => found,
            Err(e @ ReadError::Missing(_)) => {
                return Err(ErrorData::resource_not_found(
                    e.to_string(),
                    Some(json!({"uri": request.uri})),
                ));
            }
            Err(e) => {
                return Err(ErrorData::internal_error(
                    render::read_error(&uri, &e),
                    None,
                ));
            }
        };
        let mut meta = JsonObject::new();
        let bytes = match page {
            First::Lines(page) => {
                meta.insert("totalLines".into(), json!(page.total_lines));
                meta.insert("lines".into(), json!(page.lines));
                meta.insert("nextOffset".into(), json!(page.next_offset));
                meta.insert("next".into(), page.continuation.to_json());
                meta.insert(
                    "continuation".into(),
                    json!(render::page_continuation(&uri, &page)),
                );
                page.bytes
            }
            First::Bytes(page) => {
                meta.insert("totalBytes".into(), json!(page.total_bytes));
                meta.insert("bytes".into(), json!(page.bytes.len()));
                meta.insert("nextByteOffset".into(), json!(page.next_byte_offset));
                meta.insert("next".into(), page.continuation().to_json());
                meta.insert(
                    "continuation".into(),
                    json!(render::byte_continuation(&uri, &page)),
                );
                page.bytes
            }
        };
        meta.insert(
            "contentIsUtf8".into(),
            json!(std::str::from_utf8(&bytes).is_ok()),
        );
        let mime = if manifest {
            "application/json"
        } else {
            "text/plain"
        };
        let contents = ResourceContents::text(String::from_utf8_lossy(&bytes), uri.to_string())
            .with_mime_type(mime)
            .with_meta(MetaObject(meta));
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
