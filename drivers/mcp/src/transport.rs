//! The stdio transport: newline-delimited JSON-RPC with a bound on each incoming message and
//! a protocol error for every line that is not a message.
//!
//! rmcp's own async read/write transport drops unparsable lines and oversized messages
//! silently (it logs them). A client that sent one would then wait for an answer that never
//! comes; this transport answers instead, as JSON-RPC 2.0 asks: `-32700 Parse error` for a
//! line that is not JSON, `-32600 Invalid Request` for JSON that is not a message and for a
//! message over the size bound (with the request's id when the bounded prefix holds it, see
//! `id_in_prefix`), and it keeps serving. Oversized lines are skipped without being buffered
//! beyond the bound, so memory stays bounded whatever a client sends. Notifications get no answer, whatever is wrong with them.
//!
//! It also answers what rmcp would answer wrongly or not at all:
//!
//! - a known method with params of the wrong shape gets `-32602 Invalid params` naming what is
//!   wrong (rmcp reads such a request as an unknown custom method and answers `-32601`);
//! - a request other than `initialize` and `ping` before `initialize` is told that the session
//!   is not initialized (`-32600`), unless it carries the inline protocol metadata of the
//!   stateless lifecycle, which rmcp serves; a notification (or a response) before it is
//!   dropped with a line on stderr (rmcp would end the session on it);
//! - a request whose id is that of a request still in flight gets `-32600` naming the id: rmcp
//!   routes answers by id, so two requests with one id would lose one answer. Ids are
//!   therefore mapped: rmcp sees each request under a fresh id of its own, and answers go
//!   back under the client's. A cancelled request's id is free again at once (rmcp sends no
//!   answer to it), and the late end of the cancelled call cannot answer a new request that
//!   reuses the id. A cancellation of a request not in flight is dropped: it has nothing to
//!   stop, and the client's id could be one rmcp knows another request by.
//!
//! A `tools/call`'s `task` param, which rmcp's typed params drop, is kept in the request's
//! extensions for the task layer (`task_layer`).
//!
//! At end of input it calls the `on_end` hook at once, so that the server stops the calls
//! still running, and it reports the end to rmcp only once their answers were sent (or after
//! [`END_WAIT`]): rmcp waits only 5 s for answers after the end, then drops them.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{
    ClientNotification, ClientRequest, ErrorData, GetMeta, JsonRpcMessage, NumberOrString,
    RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use crate::render;

/// The default bound on one incoming JSON-RPC message (4 MiB): tool arguments are small; the
/// largest legitimate one is a `run` call's `stdin` text.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 << 20;

/// A line-delimited JSON-RPC transport over a reader and a writer (stdin and stdout for
/// `agentrun mcp`).
pub(crate) struct LineTransport<R, W> {
    read: R,
    line: Vec<u8>,
    max_line: usize,
    /// Skipping the rest of an oversized line (kept across `receive` calls: the service polls
    /// `receive` inside a `select!` and may drop it mid-line).
    skipping: bool,
    write: Arc<Mutex<Option<W>>>,
    /// The client's ids of the requests in flight and the ids rmcp knows them by.
    ids: IdMap,
    /// An `initialize` request (or a stateless request with inline metadata) went through.
    started: bool,
    /// Called once at end of input (or when reading fails).
    on_end: Option<Box<dyn FnOnce() + Send>>,
    /// Error replies being written (see `spawn_reply`).
    replies: tokio::task::JoinSet<()>,
    /// Set when input ended: until when the answers of calls in flight are waited for.
    end_deadline: Option<tokio::time::Instant>,
    /// [`END_WAIT`], or less in tests that never answer.
    end_wait: std::time::Duration,
}

/// How long, after input ended, the answers of the calls still in flight are waited for
/// (they were stopped; their output is being finalized). As long as the server waits for
/// their processes.
const END_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The ids of requests in flight: the client's, and the fresh one rmcp sees.
#[derive(Default)]
struct IdMap {
    by_client: HashMap<RequestId, RequestId>,
    by_internal: HashMap<RequestId, RequestId>,
    next: i64,
}

impl IdMap {
    /// A fresh internal id for the client's `id`, or `None` if a request with that id is
    /// still in flight.
    fn admit(&mut self, id: &RequestId) -> Option<RequestId> {
        if self.by_client.contains_key(id) {
            return None;
        }
        self.next += 1;
        let internal = NumberOrString::Number(self.next);
        self.by_client.insert(id.clone(), internal.clone());
        self.by_internal.insert(internal.clone(), id.clone());
        Some(internal)
    }

    /// The internal id of a cancelled request, which is then no longer in flight: rmcp
    /// sends no answer to a cancelled request, so the client may use its id again.
    fn cancel(&mut self, id: &RequestId) -> Option<RequestId> {
        let internal = self.by_client.remove(id)?;
        self.by_internal.remove(&internal);
        Some(internal)
    }

    /// The client's id of an answer about to be sent; the request is no longer in flight.
    fn answered(&mut self, internal: &RequestId) -> Option<RequestId> {
        let id = self.by_internal.remove(internal)?;
        self.by_client.remove(&id);
        Some(id)
    }
}

/// What one bounded line read found.
enum Line {
    /// A whole line is in `self.line` (without its `\n`).
    Complete,
    /// The line exceeded the bound; it was skipped. `self.line` holds its first `max_line`
    /// bytes.
    Oversized,
    /// End of input.
    Eof,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub(crate) fn new(read: R, write: W, max_line: usize) -> Self {
        Self {
            read,
            line: Vec::new(),
            max_line,
            skipping: false,
            write: Arc::new(Mutex::new(Some(write))),
            ids: IdMap::default(),
            started: false,
            on_end: None,
            replies: tokio::task::JoinSet::new(),
            end_deadline: None,
            end_wait: END_WAIT,
        }
    }

    /// Calls `hook` once when input ends (the client hung up) or cannot be read.
    pub(crate) fn on_end(mut self, hook: impl FnOnce() + Send + 'static) -> Self {
        self.on_end = Some(Box::new(hook));
        self
    }

    /// Tests that deliver requests nobody answers end at once.
    #[cfg(test)]
    fn end_wait(mut self, wait: std::time::Duration) -> Self {
        self.end_wait = wait;
        self
    }

    fn ended(&mut self) {
        if let Some(hook) = self.on_end.take() {
            hook();
        }
        self.end_deadline = Some(tokio::time::Instant::now() + self.end_wait);
    }

    /// What to do with a parsed message: deliver it (with its id mapped), drop it (`None`),
    /// or answer it here with an error.
    fn admit(
        &mut self,
        mut message: RxJsonRpcMessage<RoleServer>,
    ) -> Result<Option<RxJsonRpcMessage<RoleServer>>, (ErrorData, RequestId)> {
        if !self.started && !matches!(message, JsonRpcMessage::Request(_)) {
            // rmcp ends the session when its first message is not `initialize`; a
            // notification (or a stray response) gets no answer anyway, so it is dropped and
            // the session can still start. Logged on stderr, which is the server's log.
            let what = match &message {
                JsonRpcMessage::Notification(n) => {
                    let value = serde_json::to_value(&n.notification).unwrap_or_default();
                    let method = value["method"].as_str().unwrap_or("?");
                    format!("notification `{}`", render::clip(method, 100))
                }
                _ => "response".to_owned(),
            };
            tracing::warn!("dropped a {what} sent before `initialize`");
            // A client that closed our stderr must not end the session.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "agentrun mcp: ignored a {what} sent before `initialize`"
            );
            return Ok(None);
        }
        match &mut message {
            JsonRpcMessage::Request(request) => {
                if let Some(error) = request_error(&request.request, self.started) {
                    return Err((error, request.id.clone()));
                }
                let Some(internal) = self.ids.admit(&request.id) else {
                    return Err((
                        ErrorData::invalid_request(
                            format!(
                                "duplicate request id {}: a request with this id is still in \
                                 flight; give every request an id of its own",
                                shown_id(&request.id)
                            ),
                            None,
                        ),
                        request.id.clone(),
                    ));
                };
                // `ping` (and `server/discover`) may come before the session starts without
                // starting it; anything else that got here starts it.
                if !matches!(
                    request.request,
                    ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_)
                ) {
                    self.started = true;
                }
                request.id = internal;
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &mut notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    match self.ids.cancel(id) {
                        Some(internal) => cancelled.params.request_id = Some(internal),
                        // Not in flight (answered already, such as the `tools/call` that made
                        // a task, or never sent): nothing to cancel, and passed on as it is
                        // the client's id could name another request under rmcp's numbering.
                        None => return Ok(None),
                    }
                }
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
        Ok(Some(message))
    }

    /// Reads one line into `self.line` without letting it grow past the bound. Cancel-safe:
    /// a partial line stays in `self.line` for the next call.
    async fn read_line(&mut self) -> io::Result<Line> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(Line::Eof);
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let mut oversized = false;
            if self.skipping {
                if newline.is_some() {
                    self.skipping = false;
                }
            } else if self.line.len() + take > self.max_line + 1 {
                // `+ 1`: the newline itself does not count against the bound. What fits under
                // the bound stays in `self.line` as the prefix the request id is read from.
                let room = self.max_line.saturating_sub(self.line.len());
                self.line.extend_from_slice(&available[..room.min(take)]);
                self.skipping = newline.is_none();
                oversized = true;
            } else {
                self.line.extend_from_slice(&available[..take]);
            }
            self.read.consume(take);
            if oversized {
                return Ok(Line::Oversized);
            }
            if newline.is_some() && !self.skipping && !self.line.is_empty() {
                self.line.pop();
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                return Ok(Line::Complete);
            }
        }
    }

    /// Writes one message as a line. Errors mean the client is gone.
    async fn write_message(
        write: &Mutex<Option<W>>,
        message: &TxJsonRpcMessage<RoleServer>,
    ) -> io::Result<()> {
        let bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
        Self::write_line(write, bytes).await
    }

    /// Writes one serialized message and the newline after it.
    async fn write_line(write: &Mutex<Option<W>>, mut bytes: Vec<u8>) -> io::Result<()> {
        bytes.push(b'\n');
        let mut guard = write.lock().await;
        let Some(w) = guard.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the transport is closed",
            ));
        };
        w.write_all(&bytes).await?;
        w.flush().await
    }

    /// Answers a line that is not a usable message, on a task of its own: rmcp polls
    /// `receive` in a `select!` and drops it when another event comes first, and a reply
    /// written from inside it would then be lost, or cut off mid-line. The task writes the
    /// whole line under the writer's lock; `close` waits for the replies still being written.
    fn spawn_reply(&mut self, error: ErrorData, id: Option<RequestId>) {
        while self.replies.try_join_next().is_some() {}
        let reply = self.reply_error(error, id);
        self.replies.spawn(async move {
            // A client that stopped reading cannot be told; its input ends the session.
            if let Err(e) = reply.await {
                tracing::debug!("an error reply was not written: {e}");
            }
        });
    }

    /// Writes the answer to a line that is not a usable message. Takes only the writer, so
    /// the future does not borrow the reader (which need not be `Sync`).
    fn reply_error(
        &self,
        error: ErrorData,
        id: Option<RequestId>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let write = self.write.clone();
        async move {
            let message = TxJsonRpcMessage::<RoleServer>::error(error, id);
            let mut value = serde_json::to_value(&message).map_err(io::Error::other)?;
            // The SDK leaves an unknown id out; JSON-RPC 2.0 wants the member, as null.
            if let Some(object) = value.as_object_mut() {
                object.entry("id").or_insert(serde_json::Value::Null);
            }
            Self::write_line(
                &write,
                serde_json::to_vec(&value).map_err(io::Error::other)?,
            )
            .await
        }
    }
}

/// Why a line is not a message, and what to answer (`None`: a notification, answered by
/// nothing).
fn classify_bad_line(
    line: &[u8],
    error: &serde_json::Error,
) -> Option<(ErrorData, Option<RequestId>)> {
    let value: serde_json::Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(_) => {
            return Some((
                ErrorData::parse_error(
                    format!(
                        "not JSON: {error}; send one JSON-RPC 2.0 message per line, UTF-8 encoded"
                    ),
                    None,
                ),
                None,
            ));
        }
    };
    let id = value.get("id").cloned();
    let has_method = value.get("method").is_some();
    if id.is_none() && has_method {
        // A notification: JSON-RPC never answers those, even malformed ones.
        return None;
    }
    let id = id.and_then(|id| serde_json::from_value::<RequestId>(id).ok());
    // A request whose only fault is params that are not an object: the params are invalid
    // (every MCP method takes an object), the request itself is well formed.
    if let (Some(method), Some(params)) = (
        value.get("method").and_then(serde_json::Value::as_str),
        value.get("params"),
    ) && id.is_some()
        && value.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0")
        && !params.is_object()
        && !params.is_null()
    {
        return Some((
            ErrorData::invalid_params(
                format!(
                    "invalid params for `{}`: MCP params are a JSON object, not {}",
                    crate::render::clip(method, 100),
                    crate::render::clip(&params.to_string(), 80)
                ),
                None,
            ),
            id,
        ));
    }
    Some((
        ErrorData::invalid_request(
            format!(
                "not a valid JSON-RPC 2.0 message: {error}; a request needs \"jsonrpc\": \"2.0\", \
                 an \"id\" (string or integer), a \"method\" and, for most methods, \"params\""
            ),
            None,
        ),
        id,
    ))
}

/// An id as the client wrote it, for messages (a huge string id is cut).
fn shown_id(id: &RequestId) -> String {
    match id {
        NumberOrString::Number(n) => n.to_string(),
        NumberOrString::String(s) => {
            let shown = serde_json::to_string(&**s).unwrap_or_default();
            crate::render::clip(&shown, 200)
        }
    }
}

/// The error for a request that cannot be served as it is: a known method with invalid
/// params, or a request before the session is initialized.
fn request_error(request: &ClientRequest, started: bool) -> Option<ErrorData> {
    if let ClientRequest::CustomRequest(custom) = request
        && let Some(reason) = invalid_params(&custom.method, custom.params.as_ref())
    {
        return Some(ErrorData::invalid_params(
            format!(
                "invalid params for `{}`: {reason}",
                crate::render::clip(&custom.method, 100)
            ),
            None,
        ));
    }
    let lifecycle = matches!(
        request,
        ClientRequest::InitializeRequest(_)
            | ClientRequest::PingRequest(_)
            | ClientRequest::DiscoverRequest(_)
    );
    // A stateless client names its protocol version in every request's `_meta`: rmcp
    // serves (or refuses) those itself.
    if !started && !lifecycle && request.get_meta().protocol_version().is_none() {
        return Some(ErrorData::invalid_request(
            format!(
                "the session is not initialized: send an `initialize` request first, then \
                 the `notifications/initialized` notification; only `ping` may come before \
                 it (this request was `{}`)",
                crate::render::clip(request.method(), 100)
            ),
            None,
        ));
    }
    None
}

/// Why `params` do not fit `method`, when it is a method this server knows (rmcp reads a
/// known method whose params do not parse as a custom request).
fn invalid_params(method: &str, params: Option<&serde_json::Value>) -> Option<String> {
    use rmcp::model::{
        CallToolRequest, CompleteRequest, GetPromptRequest, InitializeRequest, ListPromptsRequest,
        ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest, ReadResourceRequest,
    };
    fn check<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Option<String> {
        Some(match serde_json::from_value::<T>(value) {
            Err(e) => e.to_string(),
            // The method's own type takes it, but the request as a whole did not parse.
            Ok(_) => "the params do not have the shape the method takes".to_owned(),
        })
    }
    let mut value = serde_json::json!({ "method": method });
    if let Some(params) = params {
        value["params"] = params.clone();
    }
    match method {
        "initialize" => check::<InitializeRequest>(value),
        "tools/call" => check::<CallToolRequest>(value),
        "tools/list" => check::<ListToolsRequest>(value),
        "resources/read" => check::<ReadResourceRequest>(value),
        "resources/list" => check::<ListResourcesRequest>(value),
        "resources/templates/list" => check::<ListResourceTemplatesRequest>(value),
        "prompts/get" => check::<GetPromptRequest>(value),
        "prompts/list" => check::<ListPromptsRequest>(value),
        "completion/complete" => check::<CompleteRequest>(value),
        "ping" => Some("`ping` takes no params, or an object".to_owned()),
        _ => None,
    }
}

/// The `"id"` of a request from the first bytes of its line, when they hold it whole: a
/// top-level member before anything the prefix cuts off (clients write `jsonrpc`, `id` and
/// `method` before `params`, so an oversized request's id is almost always there). Scans
/// the object's members without parsing their values: one pass over at most the bound.
/// `None` when the prefix is not the start of an object, the id comes after the cut, or it
/// is not a string or an integer; the error then carries a null id, as JSON-RPC 2.0 asks
/// when the id cannot be determined.
fn id_in_prefix(prefix: &[u8]) -> Option<RequestId> {
    let text = prefix.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(prefix);
    let mut at = skip_space(text, 0);
    if text.get(at) != Some(&b'{') {
        return None;
    }
    loop {
        at = skip_space(text, at + 1);
        if text.get(at) != Some(&b'"') {
            return None; // `}` (no id) or not JSON.
        }
        let key_end = string_end(text, at)?;
        let key = &text[at..key_end];
        at = skip_space(text, key_end);
        if text.get(at) != Some(&b':') {
            return None;
        }
        let value = skip_space(text, at + 1);
        let value_end = value_end(text, value)?;
        if key == b"\"id\"" {
            return serde_json::from_slice(&text[value..value_end]).ok();
        }
        at = skip_space(text, value_end);
        if text.get(at) != Some(&b',') {
            return None;
        }
    }
}

fn skip_space(text: &[u8], mut at: usize) -> usize {
    while text.get(at).is_some_and(|b| b" \t\r\n".contains(b)) {
        at += 1;
    }
    at
}

/// The index just past the string starting at `text[start] == '"'`, if it ends in `text`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        match *text.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

/// The index just past the value starting at `start`, if the prefix holds all of it and
/// the byte that ends it (so a number is known to be whole).
fn value_end(text: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = start;
    loop {
        match *text.get(at)? {
            b'"' => {
                at = string_end(text, at)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => depth -= 1,
            b',' | b'}' | b']' if depth == 0 => return (at > start).then_some(at),
            b' ' | b'\t' | b'\r' | b'\n' if depth == 0 && at > start => return Some(at),
            _ => {}
        }
        at += 1;
        if depth == 0 && matches!(text[at - 1], b'}' | b']') {
            // A whole object or array value: it ends here.
            return Some(at);
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // An answer goes back under the client's id (server-to-client requests keep theirs).
        match &mut item {
            JsonRpcMessage::Response(response) => {
                if let Some(id) = self.ids.answered(&response.id) {
                    response.id = id;
                }
            }
            JsonRpcMessage::Error(error) => {
                if let Some(id) = error.id.as_ref().and_then(|id| self.ids.answered(id)) {
                    error.id = Some(id);
                }
            }
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => {}
        }
        let write = self.write.clone();
        async move { Self::write_message(&write, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(deadline) = self.end_deadline {
                // Input ended and the calls still in flight were told to stop: end the
                // session only once they are answered (rmcp gives up on answers 5 s after
                // this returns `None`, less than a stopped program's grace). Each answer is
                // an event that drops this future; the next call looks again.
                if !self.ids.by_client.is_empty() {
                    tokio::time::sleep_until(deadline).await;
                }
                return None;
            }
            match self.read_line().await {
                Ok(Line::Complete) => {}
                Ok(Line::Oversized) => {
                    tracing::warn!(max = self.max_line, "skipped an oversized request");
                    let error = ErrorData::invalid_request(
                        format!(
                            "request larger than {} bytes: skipped; send smaller requests (for \
                             large input to a program, write it to a file the program reads)",
                            self.max_line
                        ),
                        None,
                    );
                    let id = id_in_prefix(&self.line);
                    self.line.clear();
                    self.spawn_reply(error, id);
                    continue;
                }
                Ok(Line::Eof) => {
                    self.ended();
                    continue;
                }
                Err(e) => {
                    tracing::error!("reading requests failed: {e}");
                    self.ended();
                    continue;
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&line);
            if text.iter().all(u8::is_ascii_whitespace) {
                self.line = line;
                self.line.clear();
                continue;
            }
            let parsed =
                serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text).map(|mut message| {
                    // rmcp's `tools/call` params have no `task`: it is kept beside them.
                    if let JsonRpcMessage::Request(request) = &mut message
                        && let ClientRequest::CallToolRequest(call) = &mut request.request
                        && let Some(param) = crate::task_layer::task_param(text)
                    {
                        call.extensions.insert(param);
                    }
                    message
                });
            let reply = match &parsed {
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!("unusable incoming line: {e}");
                    classify_bad_line(text, e)
                }
            };
            self.line = line;
            self.line.clear();
            match (parsed, reply) {
                (Ok(message), _) => match self.admit(message) {
                    Ok(Some(message)) => return Some(message),
                    Ok(None) => {}
                    Err((error, id)) => {
                        self.spawn_reply(error, Some(id));
                    }
                },
                (Err(_), Some((error, id))) => {
                    self.spawn_reply(error, id);
                }
                (Err(_), None) => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        while self.replies.join_next().await.is_some() {}
        let mut guard = self.write.lock().await;
        if let Some(mut w) = guard.take() {
            w.shutdown().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, BufReader};

    /// Feeds `input` to a transport and collects the messages it delivers and the bytes it
    /// writes back.
    async fn exchange(input: &[u8], max: usize) -> (Vec<String>, String) {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server);
        let mut transport = LineTransport::new(BufReader::new(read), write, max)
            .end_wait(std::time::Duration::ZERO);
        client.write_all(input).await.unwrap();
        client.shutdown().await.unwrap();
        let mut methods = Vec::new();
        while let Some(message) = transport.receive().await {
            let value = serde_json::to_value(&message).unwrap();
            methods.push(value["method"].as_str().unwrap_or("?").to_owned());
        }
        transport.close().await.unwrap();
        let mut written = String::new();
        client.read_to_string(&mut written).await.unwrap();
        (methods, written)
    }

    #[tokio::test]
    async fn bad_lines_get_errors_and_the_stream_goes_on() {
        let input = concat!(
            "{not json\n",
            "\n",
            "[1, 2]\n",
            "{\"jsonrpc\":\"2.0\",\"id\":7}\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\",\"params\":5}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n",
        );
        let (methods, written) = exchange(input.as_bytes(), 1024).await;
        assert_eq!(methods, ["ping"]);
        let replies: Vec<serde_json::Value> = written
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(replies.len(), 3, "{written}");
        assert_eq!(replies[0]["error"]["code"], -32700);
        let null = Some(&serde_json::Value::Null);
        assert_eq!(
            replies[0].get("id"),
            null,
            "an unknown id is null, not left out"
        );
        assert_eq!(replies[1].get("id"), null);
        assert_eq!(replies[1]["error"]["code"], -32600);
        assert_eq!(replies[2]["error"]["code"], -32600);
        assert_eq!(replies[2]["id"], 7, "the id of a bad request is echoed");
    }

    /// End of input calls the stop hook at once, before the receive loop waits for the
    /// answers of the calls in flight and long before it returns. In paused (virtual) time:
    /// the hook must come with no time passed at all, and the loop must still be waiting.
    #[tokio::test(start_paused = true)]
    async fn end_of_input_calls_the_stop_hook_before_waiting_for_answers() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server);
        let (tx, mut hook) = tokio::sync::oneshot::channel();
        let mut transport =
            LineTransport::new(BufReader::new(read), write, 1 << 16).on_end(move || {
                let _ = tx.send(tokio::time::Instant::now());
            });
        let start = tokio::time::Instant::now();
        // A request in flight: delivered, never answered here.
        client
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":\
                  {\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\
                  \"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n",
            )
            .await
            .unwrap();
        assert!(transport.receive().await.is_some());
        client.shutdown().await.unwrap();
        let receive = transport.receive();
        tokio::pin!(receive);
        tokio::select! {
            biased;
            _ = &mut receive => panic!("the receive loop ended before the stop hook was called"),
            at = &mut hook => assert_eq!(
                at.unwrap(),
                start,
                "the stop hook waited before it was called"
            ),
        }
        // Then the loop waits for the answer in flight, up to its bound, before it ends.
        assert!(receive.await.is_none());
        assert!(start.elapsed() >= END_WAIT, "{:?}", start.elapsed());
    }

    #[tokio::test]
    async fn a_cancellation_of_a_request_not_in_flight_is_dropped() {
        let input = concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":",
            "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},",
            "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n",
            // Id 1 is what rmcp knows the request above by; the client never sent an id 1.
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",",
            "\"params\":{\"requestId\":1}}\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",",
            "\"params\":{\"requestId\":7}}\n",
        );
        let (methods, _) = exchange(input.as_bytes(), 1024).await;
        assert_eq!(
            methods,
            ["initialize", "notifications/cancelled"],
            "only the cancellation of the request in flight is delivered"
        );
    }

    #[tokio::test]
    async fn notifications_before_initialize_are_dropped() {
        let input = concat!(
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":",
            "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},",
            "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
        );
        let (methods, written) = exchange(input.as_bytes(), 1024).await;
        assert_eq!(
            methods,
            ["initialize", "notifications/initialized"],
            "only the notification after `initialize` is delivered"
        );
        assert!(
            written.is_empty(),
            "a notification is never answered: {written}"
        );
    }

    #[tokio::test]
    async fn an_oversized_request_is_answered_with_its_id_when_the_prefix_holds_it() {
        let pad = "x".repeat(10_000);
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":41,\"method\":\"tools/call\",\"params\":{{\"a\":\"{pad}\"}}}}\n\
             {{ \"jsonrpc\" : \"2.0\", \"meta\": {{\"k\": [1, {{\"id\": 9}}], \"s\": \"}}\\\"\"}}, \"id\" : \"req-7\", \"params\":\"{pad}\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{{\"a\":\"{pad}\"}},\"id\":43}}\n"
        );
        let (methods, written) = exchange(input.as_bytes(), 1024).await;
        assert!(methods.is_empty(), "{methods:?}");
        let replies: Vec<serde_json::Value> = written
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(replies.len(), 3, "{written}");
        assert!(
            replies.iter().all(|r| r["error"]["code"] == -32600),
            "{written}"
        );
        assert_eq!(replies[0]["id"], 41, "the id before the cut is echoed");
        assert_eq!(
            replies[1]["id"], "req-7",
            "nested ids and strings are skipped"
        );
        assert_eq!(
            replies[2].get("id"),
            Some(&serde_json::Value::Null),
            "an id after the cut is unknown"
        );
    }

    #[test]
    fn ids_are_read_only_from_whole_top_level_members() {
        let id = |s: &str| id_in_prefix(s.as_bytes()).map(|id| serde_json::to_value(id).unwrap());
        assert_eq!(id(r#"{"id":12,"method""#), Some(serde_json::json!(12)));
        assert_eq!(id(r#"{"id":12"#), None, "the number may go on");
        assert_eq!(id(r#"{"id":"a\"b", "#), Some(serde_json::json!("a\"b")));
        assert_eq!(id(r#"{"id":"abc"#), None);
        assert_eq!(id(r#"{"p":[{"id":1}],"id":2,"#), Some(serde_json::json!(2)));
        assert_eq!(id(r#"{"id":null,"#), None);
        assert_eq!(id(r#"{"id":1.5,"#), None);
        assert_eq!(id(r#"[{"id":1},"#), None);
        assert_eq!(id(r#"{"method":"x","params":{"#), None);
        assert_eq!(id(""), None);
    }

    #[tokio::test]
    async fn oversized_requests_are_skipped_without_buffering() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}\n",
            "x".repeat(10_000)
        );
        let exact = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";
        let input = format!("{big}{exact}\n");
        let (methods, written) = exchange(input.as_bytes(), exact.len()).await;
        assert_eq!(methods, ["ping"], "the message at the bound is delivered");
        assert!(
            written.contains("-32600") && written.contains("larger than"),
            "{written}"
        );
    }
}
