//! `agentrun mcp proxy`: any stdio MCP server behind bounded previews.
//!
//! The proxy relays JSON-RPC lines between the client (its own stdin/stdout) and a child
//! server (the child's stdin/stdout) as they are, so every request, response and
//! notification either side sends — progress, cancellation, list-changed, logging, the
//! child's own requests to the client (sampling, roots, elicitation) — passes unchanged and
//! without re-encoding. It steps in only where it must:
//!
//! - a `tools/call` result over the preview bounds is retained in the store (each text item
//!   as a stream, structured content as JSON) and replaced by the bounded preview with exact
//!   `read(filePath="artifact://…", offset=N)` hints; a result within them passes byte for
//!   byte;
//! - `tools/list` gains the `read` tool, and tools lose their `outputSchema` (a bounded result
//!   carries no structured content, so it would violate the schema), saying so in their
//!   description;
//! - `initialize` answers declare `tools` and `resources`; `artifact://` resources are read
//!   by the proxy, and the artifact templates are added to the child's;
//! - calls of `read` and reads of `artifact://` URIs are answered from the store.
//!
//! The proxy lives as long as both sides: when the client hangs up the child's stdin is
//! closed (and the child killed if it does not exit within a few seconds); when the child
//! exits, requests still waiting for it get an error answer and the proxy ends with the
//! child's status.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::capture::FullOutput;
use agentrun_core::stream::MAX_STREAMS;
use agentrun_core::{
    CaptureCompletion, CaptureStatus, ModelRead, OutputDeclaration, ReadSyntax, StreamName,
};
use rmcp::model::{JsonObject, ReadResourceRequestParams, ServerResult};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::McpServer;
use crate::handler::blocking;
use crate::tools;

/// How long a child whose stdin was closed (the client hung up) may take to exit before it
/// is killed.
const CHILD_EXIT_WAIT: Duration = Duration::from_secs(5);

/// What the description of a tool that declared an `outputSchema` says instead.
const NO_SCHEMA_NOTE: &str = "\n\n(Served through agentrun's proxy: a result over the preview \
bounds is replaced by a bounded preview with read(filePath=\"artifact://…\", offset=N) hints \
for the `read` tool, so this tool declares no output schema; its structured content, when \
bounded, is retained as JSON.)";

/// Why the proxy could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// No server command was given.
    #[error("no MCP server to proxy: give its command after `--`")]
    NoCommand,
    /// The child server did not start.
    #[error("cannot start the MCP server {program:?}")]
    Spawn {
        /// The program.
        program: OsString,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing a side failed.
    #[error("the proxy's connection failed")]
    Io(#[from] std::io::Error),
}

/// How the proxy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyEnd {
    /// The client hung up (or the proxy was told to stop); the child was then stopped.
    ClientGone,
    /// The child server exited first, with this status.
    ChildExited(ExitStatus),
}

/// What a request the proxy relayed to the child was, so that its answer can be adjusted.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Initialize,
    ToolsCall,
    ToolsList {
        first_page: bool,
    },
    Templates {
        first_page: bool,
    },
    /// Any other request: only answered with an error if the child exits first.
    Other,
}

/// A JSON-RPC id as a map key (its JSON text: `1` and `"1"` stay distinct).
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The parts of a message the relay looks at.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
}

struct State {
    server: McpServer,
    pending: Mutex<HashMap<String, (Value, Pending)>>,
    /// Whether the child declared `resources` (else the proxy answers the resource lists).
    child_resources: Mutex<bool>,
    to_client: mpsc::UnboundedSender<Vec<u8>>,
}

impl McpServer {
    /// Runs `command` (an MCP server on stdio) as a child and serves it to the client on
    /// standard input and output, bounded; see [`proxy`](Self::proxy).
    pub async fn proxy_stdio(
        self,
        command: &[OsString],
        stop: impl Future<Output = ()>,
    ) -> Result<ProxyEnd, ProxyError> {
        self.proxy(command, tokio::io::stdin(), tokio::io::stdout(), stop)
            .await
    }

    /// Runs `command` as a child MCP server and relays between it and the client on
    /// `read`/`write` (newline-delimited JSON-RPC) until either side ends or `stop`
    /// resolves. Tool results over this server's preview limits are retained in its store
    /// and replaced by their bounded previews; `read` and `artifact://` resources are served
    /// from the store.
    pub async fn proxy<R, W>(
        self,
        command: &[OsString],
        read: R,
        write: W,
        stop: impl Future<Output = ()>,
    ) -> Result<ProxyEnd, ProxyError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (program, args) = command.split_first().ok_or(ProxyError::NoCommand)?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ProxyError::Spawn {
                program: program.clone(),
                source,
            })?;
        let (Some(mut child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take())
        else {
            unreachable!("both were piped")
        };

        let (to_client, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
        let state = Arc::new(State {
            server: self,
            pending: Mutex::new(HashMap::new()),
            child_resources: Mutex::new(false),
            to_client,
        });

        // One writer to the client: answers from the child and from the proxy interleave
        // as whole lines.
        let writer = tokio::spawn(async move {
            let mut write = write;
            while let Some(mut line) = outgoing.recv().await {
                line.push(b'\n');
                if write.write_all(&line).await.is_err() || write.flush().await.is_err() {
                    break;
                }
            }
        });

        // The child's messages, adjusted where needed, to the client.
        let from_child = {
            let state = state.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(child_out);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match lines.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    strip_newline(&mut line);
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let out = from_child_line(&state, std::mem::take(&mut line)).await;
                    if state.to_client.send(out).is_err() {
                        break;
                    }
                }
            })
        };

        // The client's messages: most to the child, `read` and artifact reads answered here.
        let from_client = {
            let state = state.clone();
            async move {
                let mut lines = BufReader::new(read);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match lines.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let forward = match client_line(&state, &line) {
                        Some(forward) => forward,
                        None => continue,
                    };
                    if !forward {
                        continue;
                    }
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    if child_in.write_all(&line).await.is_err() || child_in.flush().await.is_err() {
                        break;
                    }
                }
                // Closing the child's stdin is how a stdio server is told the client left.
                drop(child_in);
            }
        };

        let mut stop = std::pin::pin!(stop);
        let mut from_child = from_child;
        let end = tokio::select! {
            () = from_client => ProxyEnd::ClientGone,
            () = stop.as_mut() => ProxyEnd::ClientGone,
            _ = &mut from_child => {
                let status = child.wait().await?;
                ProxyEnd::ChildExited(status)
            }
        };
        match end {
            ProxyEnd::ClientGone => {
                // The client's side is closed (dropped with `from_client`); give the child a
                // moment to exit on its own, then kill it.
                if tokio::time::timeout(CHILD_EXIT_WAIT, child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
                from_child.abort();
            }
            ProxyEnd::ChildExited(status) => {
                // Requests the child will never answer get an error instead of silence.
                let pending: Vec<_> = state
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .drain()
                    .map(|(_, (id, _))| id)
                    .collect();
                for id in pending {
                    let _ = state.to_client.send(error_line(
                        &id,
                        -32603,
                        &format!("the proxied MCP server exited ({status}) before answering"),
                    ));
                }
            }
        }
        drop(state);
        // Everything queued for the client is written before the proxy ends.
        let _ = writer.await;
        Ok(end)
    }
}

fn strip_newline(line: &mut Vec<u8>) {
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
}

fn error_line(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let value = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    serde_json::to_vec(&value).unwrap_or_default()
}

fn result_line(id: &Value, result: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap_or_default()
}

/// Looks at one line from the client: `Some(true)` to forward it to the child,
/// `Some(false)` when the proxy answers it itself, `None` for a blank line.
fn client_line(state: &Arc<State>, line: &[u8]) -> Option<bool> {
    let text = line.trim_ascii();
    if text.is_empty() {
        return None;
    }
    // Anything that is not one JSON-RPC object (a batch, a malformed line) is the child's to
    // answer, as it would be without the proxy.
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(text) else {
        return Some(true);
    };
    let (Some(id), Some(method)) = (
        message.get("id").cloned(),
        message.get("method").and_then(Value::as_str),
    ) else {
        return Some(true);
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let has_cursor = params.get("cursor").is_some_and(|c| !c.is_null());
    let child_resources = *state
        .child_resources
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let kind = match method {
        "tools/call" if params.get("name").and_then(Value::as_str) == Some("read") => {
            let state = state.clone();
            tokio::spawn(async move {
                let empty = JsonObject::new();
                let map = params
                    .get("arguments")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                let line = match state.server.call_read(map).await {
                    Ok(result) => {
                        result_line(&id, serde_json::to_value(result).unwrap_or_default())
                    }
                    Err(e) => error_line(&id, i64::from(e.code.0), &e.message),
                };
                let _ = state.to_client.send(line);
            });
            return Some(false);
        }
        "resources/read"
            if params
                .get("uri")
                .and_then(Value::as_str)
                .is_some_and(|uri| uri.starts_with("artifact://")) =>
        {
            let state = state.clone();
            tokio::spawn(async move {
                let line = match serde_json::from_value::<ReadResourceRequestParams>(params) {
                    Err(e) => error_line(&id, -32602, &format!("invalid resources/read: {e}")),
                    Ok(request) => match state.server.read_resource_page(request).await {
                        Ok(result) => result_line(
                            &id,
                            serde_json::to_value(ServerResult::from(result)).unwrap_or_default(),
                        ),
                        Err(e) => error_line(&id, i64::from(e.code.0), &e.message),
                    },
                };
                let _ = state.to_client.send(line);
            });
            return Some(false);
        }
        "resources/templates/list" if !child_resources => {
            let templates = if has_cursor {
                json!({"resourceTemplates": []})
            } else {
                serde_json::to_value(McpServer::templates()).unwrap_or_default()
            };
            let _ = state.to_client.send(result_line(&id, templates));
            return Some(false);
        }
        "resources/list" if !child_resources => {
            let state = state.clone();
            let cursor = params
                .get("cursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            tokio::spawn(async move {
                let line = match state.server.list_store_resources(cursor).await {
                    Ok(result) => {
                        result_line(&id, serde_json::to_value(result).unwrap_or_default())
                    }
                    Err(e) => error_line(&id, i64::from(e.code.0), &e.message),
                };
                let _ = state.to_client.send(line);
            });
            return Some(false);
        }
        "initialize" => Pending::Initialize,
        "tools/call" => Pending::ToolsCall,
        "tools/list" => Pending::ToolsList {
            first_page: !has_cursor,
        },
        "resources/templates/list" => Pending::Templates {
            first_page: !has_cursor,
        },
        _ => Pending::Other,
    };
    state
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id_key(&id), (id, kind));
    Some(true)
}

/// One line from the child, as the client gets it.
async fn from_child_line(state: &Arc<State>, line: Vec<u8>) -> Vec<u8> {
    let Ok(head) = serde_json::from_slice::<Head>(&line) else {
        return line;
    };
    // Requests and notifications of the child pass; so do answers to the client's answers.
    let (Some(id), None) = (head.id, head.method) else {
        return line;
    };
    let Some((_, kind)) = state
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id_key(&id))
    else {
        return line;
    };
    match kind {
        Pending::Other => line,
        Pending::ToolsCall => bound_tool_result(state, line).await,
        Pending::Initialize => adjust(line, |result| {
            let caps = result.entry("capabilities").or_insert_with(|| json!({}));
            if let Some(caps) = caps.as_object_mut() {
                caps.entry("tools").or_insert_with(|| json!({}));
                let had = caps.contains_key("resources");
                *state
                    .child_resources
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = had;
                caps.entry("resources").or_insert_with(|| json!({}));
            }
            let note = "Results over the client's size limits are shown as a bounded preview \
                        with read(filePath=\"artifact://...\", offset=N) hints: call the `read` \
                        tool with that filePath and offset to page the rest.";
            let instructions = match result.get("instructions").and_then(Value::as_str) {
                Some(theirs) => format!("{theirs}\n\n{note}"),
                None => note.to_owned(),
            };
            result.insert("instructions".into(), json!(instructions));
        }),
        Pending::ToolsList { first_page } => adjust(line, |result| {
            let Some(Value::Array(list)) = result.get_mut("tools") else {
                return;
            };
            list.retain(|tool| {
                let shadowed = tool.get("name").and_then(Value::as_str) == Some("read");
                if shadowed {
                    tracing::warn!("the proxied server's own `read` tool is hidden by agentrun's");
                }
                !shadowed
            });
            for tool in list.iter_mut() {
                let Some(tool) = tool.as_object_mut() else {
                    continue;
                };
                if tool.remove("outputSchema").is_some() {
                    let description = tool
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    tool.insert(
                        "description".into(),
                        json!(format!("{description}{NO_SCHEMA_NOTE}")),
                    );
                }
            }
            if first_page {
                list.push(serde_json::to_value(tools::read::read_tool()).unwrap_or_default());
            }
        }),
        Pending::Templates { first_page } => adjust(line, |result| {
            if !first_page {
                return;
            }
            let ours = serde_json::to_value(McpServer::templates()).unwrap_or_default();
            if let (Some(Value::Array(list)), Some(Value::Array(add))) = (
                result.get_mut("resourceTemplates"),
                ours.get("resourceTemplates"),
            ) {
                list.extend(add.iter().cloned());
            }
        }),
    }
}

/// `line` (a response) with its `result` object changed by `change`; an error response or
/// one that does not parse passes unchanged.
fn adjust(line: Vec<u8>, change: impl FnOnce(&mut JsonObject)) -> Vec<u8> {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    let Some(Value::Object(result)) = message.get_mut("result") else {
        return line;
    };
    change(result);
    serde_json::to_vec(&message).unwrap_or(line)
}

/// Whether a `tools/call` answer of `line_len` bytes with this result is within the preview
/// bounds: the whole answer within the payload bound, each text item and the structured
/// content within the per-stream bounds.
fn fits(result: &JsonObject, line_len: usize, limits: &agentrun_core::PreviewLimits) -> bool {
    if line_len > limits.max_payload_bytes {
        return false;
    }
    let texts_fit = texts(result).iter().all(|text| {
        text.len() <= limits.max_bytes
            && text.bytes().filter(|b| *b == b'\n').count() as u64 <= limits.max_lines
    });
    let structured_fits = result
        .get("structuredContent")
        .is_none_or(|s| s.to_string().len() <= limits.max_bytes);
    texts_fit && structured_fits
}

/// The text items of a tool result, in order.
fn texts(result: &JsonObject) -> Vec<&str> {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|item| item.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|item| item.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// A `tools/call` answer as the client gets it: unchanged when within the bounds, else with
/// its text items and structured content retained and replaced by their bounded preview.
async fn bound_tool_result(state: &Arc<State>, line: Vec<u8>) -> Vec<u8> {
    let limits = state.server.inner.limits;
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    let Some(Value::Object(result)) = message.get("result") else {
        return line;
    };
    if fits(result, line.len(), &limits) {
        return line;
    }
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let mut result = result.clone();

    // The streams: one per text item (the last takes the rest when there are more than a
    // record holds). The structured content (usually the text again, as JSON) is retained
    // on its own, so that the preview spends its bytes on the text and names it in one line.
    let structured = result.remove("structuredContent");
    let mut bodies: Vec<String> = texts(&result).into_iter().map(str::to_owned).collect();
    if bodies.len() > MAX_STREAMS {
        let rest = bodies.split_off(MAX_STREAMS - 1).join("\n");
        bodies.push(rest);
    }
    let outputs: Vec<(StreamName, Vec<u8>)> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, text)| (stream_name(&format!("text-{}", i + 1)), text.into_bytes()))
        .collect();
    let others: Vec<Value> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|item| item.get("type").and_then(Value::as_str) != Some("text"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();

    let store = state.server.inner.store.clone();
    let retained = blocking(move || {
        let capture = |declaration, outputs| {
            store
                .begin_capture(declaration, limits)
                .and_then(|session| {
                    session.finish(CaptureCompletion::Full {
                        display: None,
                        status: CaptureStatus::Succeeded,
                        outputs,
                    })
                })
        };
        let texts = (!outputs.is_empty()).then(|| {
            let names = outputs.iter().map(|(name, _)| name.clone()).collect();
            capture(OutputDeclaration::Named(names), FullOutput::Named(outputs))
        });
        let structured = structured.map(|value| {
            let json = serde_json::to_vec_pretty(&value).unwrap_or_default();
            capture(OutputDeclaration::Single, FullOutput::Single(json))
        });
        (texts, structured)
    })
    .await;
    let mut preview = String::new();
    match retained {
        Ok((texts, structured)) => {
            match texts {
                Some(Ok(record)) => preview.push_str(&record.render()),
                Some(Err(e)) => {
                    let _ = writeln!(
                        preview,
                        "[The result's text was over the preview bounds and retaining it \
                         failed: {e}; it is not shown]"
                    );
                }
                None => {}
            }
            match structured {
                Some(Ok(record)) => {
                    // A blank line after the text's previews, as between them.
                    if !preview.is_empty() {
                        while !preview.ends_with("\n\n") {
                            preview.push('\n');
                        }
                    }
                    if let Some(stream) = record.streams().first() {
                        let _ = writeln!(
                            preview,
                            "[Structured content: {} bytes of JSON, retained. Read it: {}]",
                            stream.bytes,
                            ModelRead.read_call(&record.stream_uri(stream), stream.start())
                        );
                    }
                }
                Some(Err(e)) => {
                    let _ = writeln!(
                        preview,
                        "[The structured content was over the preview bounds and retaining it \
                         failed: {e}; it is not shown]"
                    );
                }
                None => {}
            }
        }
        Err(e) => {
            let _ = writeln!(
                preview,
                "[The result was over the preview bounds: {}]",
                e.message
            );
        }
    }
    // Non-text items (images, resource links) follow the preview while the answer stays
    // within the payload bound; the rest are named, not sent.
    let mut budget = limits.max_payload_bytes.saturating_sub(preview.len() + 256);
    let mut content = vec![json!({"type": "text", "text": preview})];
    for item in others {
        let len = item.to_string().len();
        if len <= budget {
            budget -= len;
            content.push(item);
        } else {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("item");
            content.push(json!({
                "type": "text",
                "text": format!("[A {kind} item of {len} bytes is left out: over the payload bound]")
            }));
        }
    }
    result.insert("content".into(), Value::Array(content));
    result_line(&id, Value::Object(result))
}

fn stream_name(name: &str) -> StreamName {
    StreamName::new(name).unwrap_or_else(|_| unreachable!("{name} is a valid stream name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrun_core::PreviewLimits;
    use agentrun_fs::Store;

    fn state(dir: &std::path::Path) -> Arc<State> {
        let limits = PreviewLimits {
            max_lines: 10,
            max_bytes: 1000,
            max_payload_bytes: 64 * 1024,
            tail_lines: 0,
        };
        let server = McpServer::builder(Store::open(dir.join("store")).unwrap())
            .limits(limits)
            .build()
            .unwrap();
        let (to_client, _) = mpsc::unbounded_channel();
        Arc::new(State {
            server,
            pending: Mutex::new(HashMap::new()),
            child_resources: Mutex::new(false),
            to_client,
        })
    }

    fn answer(result: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 7, "result": result})).unwrap()
    }

    #[tokio::test]
    async fn a_result_within_the_bounds_is_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path());
        // Key order and spacing the proxy would not produce itself.
        let line = br#"{"result": {"content":[{"type":"text","text":"one\ntwo"}],"structuredContent":{"a":1}}, "jsonrpc":"2.0","id":7}"#.to_vec();
        assert_eq!(bound_tool_result(&state, line.clone()).await, line);
    }

    #[tokio::test]
    async fn every_text_item_is_a_stream_and_the_first_hint_names_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path());
        let big: String = (0..50).map(|i| format!("line {i}\n")).collect();
        // More text items than a record holds: the last stream takes the rest.
        let mut content = vec![json!({"type": "text", "text": "short"})];
        content.push(json!({"type": "text", "text": big}));
        for i in 0..9 {
            content.push(json!({"type": "text", "text": format!("item {i}")}));
        }
        content.push(json!({"type": "image", "data": "aGk=", "mimeType": "image/png"}));
        let line = answer(json!({
            "content": content,
            "structuredContent": {"lines": 50},
            "isError": true,
        }));
        let out: Value = serde_json::from_slice(&bound_tool_result(&state, line).await).unwrap();
        assert_eq!(out["id"], json!(7));
        let result = &out["result"];
        assert_eq!(result["isError"], json!(true));
        assert!(result.get("structuredContent").is_none());
        let content = result["content"].as_array().unwrap();
        assert_eq!(content.len(), 2, "{content:?}");
        assert_eq!(content[1]["type"], json!("image"));
        let text = content[0]["text"].as_str().unwrap();
        let first = text.find("artifact://").unwrap();
        let uri_end = first + text[first..].find('"').unwrap();
        assert!(
            text[first..uri_end].ends_with("/text-2"),
            "the first hint is the first truncated text item's: {text}"
        );
        assert!(text.starts_with("[text-1]\nshort\n"), "{text}");
        assert!(
            text.contains("[text-8]\nitem 5\nitem 6\nitem 7\nitem 8\n"),
            "{text}"
        );
        assert!(text.contains("[Structured content: "), "{text}");
    }
}
