//! The artifact store as MCP resources: templates, the recent runs, and `resources/read`.

use agentrun_core::page::{ByteRange, MAX_PAGE_BYTES, MAX_PAGE_LINES, PageError, PageRequest};
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

/// A run offered by `resources/list`.
#[derive(Debug, Clone)]
pub(crate) struct RecentRun {
    pub(crate) uri: String,
    pub(crate) name: String,
    pub(crate) description: String,
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

    pub(crate) fn recent_resources(&self) -> ListResourcesResult {
        let recent = self
            .inner
            .recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let resources = recent
            .into_iter()
            .rev()
            .map(|run| {
                Resource::new(run.uri, run.name)
                    .with_description(run.description)
                    .with_mime_type("application/json")
            })
            .collect();
        ListResourcesResult::with_all_items(resources)
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
