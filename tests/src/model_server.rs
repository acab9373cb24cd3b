//! Scripted model servers on 127.0.0.1 for running the real agent CLIs offline.
//!
//! A [`ModelServer`] speaks one model API over plain HTTP/1.1 on `127.0.0.1:<free port>`:
//!
//! | [`Api`] | endpoint | used by |
//! |---|---|---|
//! | [`Api::AnthropicMessages`] | `POST /v1/messages` (SSE when `"stream": true`), `POST /v1/messages/count_tokens` | Claude Code (`ANTHROPIC_BASE_URL`) |
//! | [`Api::OpenAiResponses`] | `POST …/responses` (SSE) | Codex (`wire_api = "responses"`) |
//! | [`Api::OpenAiChat`] | `POST …/chat/completions` (SSE when `"stream": true`) | OpenCode (`@ai-sdk/openai-compatible`) |
//! | [`Api::Gemini`] | `POST …/models/<model>:streamGenerateContent?alt=sse` (SSE), `…:generateContent`, `…:countTokens` | Gemini CLI (`GOOGLE_GEMINI_BASE_URL`) |
//!
//! Every request a model endpoint receives is handed to the test's [`Script`], which decides
//! the [`Reply`]; the server renders it in the API's wire format. Replies are API-neutral, so
//! one script shape serves all three CLIs:
//!
//! * [`Reply::text`]: an answer; [`Reply::tool_call`] / [`Reply::tool_calls`]: tool calls the
//!   CLI executes for real (Claude's `Bash`/`Write`, Codex's `shell`, OpenCode's `bash`), after
//!   which it sends the next request carrying the tool results;
//! * [`Reply::rate_limited`] (HTTP 429; [`Reply::rate_limited_retry_after`] with a
//!   `Retry-After`), [`Reply::server_error`] (HTTP 500),
//!   [`Reply::prompt_too_long`] (HTTP 400, the real context-length error of the API),
//!   [`Reply::error`] for any other status; [`Reply::error_retry_after`] for an error with a
//!   given `Retry-After` header or none (the others send `retry-after: 0`);
//! * [`Reply::stream_error`]: HTTP 200, then an error event inside the stream (the real APIs'
//!   mid-stream failure, e.g. `overloaded_error`); [`Reply::disconnect`]: HTTP 200 and some
//!   text, then the connection is cut;
//! * [`Reply::Hang`]: no answer at all until the server is dropped (timeouts, Ctrl-C);
//! * [`Reply::status`]: any HTTP error status with the API's own error type for it and the
//!   retry headers of a real API: `retry-after` only when given (so a CLI backs off on its own
//!   schedule, or on the server's), no `x-should-retry` (the CLI decides whether to retry).
//!
//! [`Reply::with_usage`] and [`Reply::with_model`] set the token counts and the model name the
//! answer reports (by default the requested model and [`TokenUsage::default`]).
//!
//! Every request received (any path) is recorded: [`ModelServer::requests`] returns them, so a
//! test asserts what the CLI sent — the prompt ([`Request::user_texts`]), the tool results
//! ([`Request::tool_results`]), the model, headers. [`ModelServer::wait_for_requests`] blocks
//! until the CLI reached the model (e.g. before interrupting it).
//!
//! ```no_run
//! use agentrun_tests::model_server::{Api, ModelServer, Reply, replies};
//! use serde_json::json;
//!
//! let server = ModelServer::start(
//!     Api::AnthropicMessages,
//!     replies([
//!         Reply::tool_call("Bash", json!({"command": "echo hi > out.txt", "description": "write"})),
//!         Reply::text("done"),
//!     ]),
//! )
//! .unwrap();
//! // … run `claude` with ANTHROPIC_BASE_URL = server.url() (see `agent_clis::claude_env`) …
//! let requests = server.requests();
//! assert_eq!(requests[1].tool_results()[0].output, "");
//! ```
//!
//! A script is any `FnMut(&Request) -> Reply + Send`; [`replies`] answers with a fixed
//! sequence and then with an HTTP 500 naming the unexpected request, so a CLI that asks more
//! than the test planned fails visibly instead of hanging.
//!
//! Limits: request heads up to 64 KiB, bodies up to 64 MiB (`Content-Length` or chunked);
//! keep-alive connections; no TLS, no compression. The server listens on 127.0.0.1 only, and
//! everything stops when the [`ModelServer`] is dropped.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Longest request head (request line and headers).
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Largest request body.
const MAX_BODY_BYTES: usize = 64 << 20;
/// How often a held connection checks whether the server is shutting down.
const HOLD_POLL: Duration = Duration::from_millis(50);
/// How long a held ([`Reply::Hang`]) connection is kept at most, so a forgotten server cannot
/// keep a thread forever.
const MAX_HOLD: Duration = Duration::from_secs(600);

/// The model API a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Api {
    /// Anthropic Messages (`/v1/messages`), as used by Claude Code.
    AnthropicMessages,
    /// OpenAI Responses (`/responses`), as used by Codex.
    OpenAiResponses,
    /// OpenAI chat completions (`/chat/completions`), as used by OpenCode.
    OpenAiChat,
    /// The Gemini API (`/v1beta/models/<model>:streamGenerateContent?alt=sse` and
    /// `:generateContent`), as used by Gemini CLI. The model is in the path.
    Gemini,
}

/// One HTTP request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The API the server speaks (decides how [`Request::tool_results`] reads the body).
    pub api: Api,
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target, query included (`/v1/messages?beta=true`).
    pub path: String,
    /// Headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body as received.
    pub body: Vec<u8>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub json: Value,
    /// For model requests (those handed to the script): 0 for the first, 1 for the next, …
    pub model_index: Option<usize>,
}

/// A tool result the CLI sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The id of the tool call it answers.
    pub call_id: String,
    /// The result text (text blocks joined with newlines).
    pub output: String,
    /// Whether the CLI marked it as an error (Anthropic `is_error`; always false elsewhere).
    pub is_error: bool,
}

impl Request {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The requested model (`model` in the body; for the Gemini API the `<model>` of
    /// `…/models/<model>:method` in the path).
    pub fn model(&self) -> Option<&str> {
        if self.api == Api::Gemini {
            let path = self.path.split('?').next().unwrap_or("");
            let (_, rest) = path.rsplit_once("/models/")?;
            return rest.split(':').next().filter(|m| !m.is_empty());
        }
        self.json.get("model").and_then(Value::as_str)
    }

    /// Whether the client asked for a streamed answer.
    pub fn wants_stream(&self) -> bool {
        match self.api {
            // The Responses API streams unless told otherwise; Codex always streams.
            Api::OpenAiResponses => self.json.get("stream").and_then(Value::as_bool) != Some(false),
            Api::Gemini => self.path.contains(":streamGenerateContent"),
            _ => self.json.get("stream").and_then(Value::as_bool) == Some(true),
        }
    }

    /// The body as text (lossy), for `contains` checks.
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The conversation items of the body: Anthropic/chat `messages`, Responses `input`,
    /// Gemini `contents`.
    fn items(&self) -> &[Value] {
        let key = match self.api {
            Api::OpenAiResponses => "input",
            Api::Gemini => "contents",
            _ => "messages",
        };
        self.json
            .get(key)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Every tool result in the conversation sent, in order: Anthropic `tool_result` blocks,
    /// Responses `function_call_output` / `custom_tool_call_output` items, chat `role: "tool"`
    /// messages.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        let mut out = Vec::new();
        for item in self.items() {
            match self.api {
                Api::AnthropicMessages => {
                    for block in content_blocks(item) {
                        if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                            out.push(ToolResult {
                                call_id: str_of(block, "tool_use_id"),
                                output: text_of(block.get("content")),
                                is_error: block.get("is_error").and_then(Value::as_bool)
                                    == Some(true),
                            });
                        }
                    }
                }
                Api::OpenAiResponses => {
                    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
                    if kind == "function_call_output" || kind == "custom_tool_call_output" {
                        out.push(ToolResult {
                            call_id: str_of(item, "call_id"),
                            output: text_of(item.get("output")),
                            is_error: false,
                        });
                    }
                }
                Api::OpenAiChat => {
                    if item.get("role").and_then(Value::as_str) == Some("tool") {
                        out.push(ToolResult {
                            call_id: str_of(item, "tool_call_id"),
                            output: text_of(item.get("content")),
                            is_error: false,
                        });
                    }
                }
                Api::Gemini => {
                    for part in gemini_parts(item) {
                        let Some(response) = part.get("functionResponse") else {
                            continue;
                        };
                        let result = response.get("response").unwrap_or(&Value::Null);
                        let output = match result.get("output").or_else(|| result.get("error")) {
                            Some(Value::String(s)) => s.clone(),
                            Some(other) => other.to_string(),
                            None => result.to_string(),
                        };
                        out.push(ToolResult {
                            call_id: match str_of(response, "id") {
                                id if id.is_empty() => str_of(response, "name"),
                                id => id,
                            },
                            is_error: result.get("error").is_some(),
                            output,
                        });
                    }
                }
            }
        }
        out
    }

    /// The text of every user message in the conversation sent, in order (text blocks of one
    /// message joined with newlines). The CLI's own context (instructions, reminders) shows up
    /// here too; look for the prompt with `contains` or `ends_with`.
    pub fn user_texts(&self) -> Vec<String> {
        if self.api == Api::Gemini {
            return self
                .items()
                .iter()
                .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
                .map(|item| {
                    gemini_parts(item)
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .filter(|t| !t.is_empty())
                .collect();
        }
        self.items()
            .iter()
            .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
            .map(|item| {
                content_blocks(item)
                    .iter()
                    .filter_map(|b| {
                        let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
                        matches!(kind, "text" | "input_text")
                            .then(|| b.get("text").and_then(Value::as_str))
                            .flatten()
                    })
                    .chain(item.get("content").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect()
    }

    /// The text of every model turn in the conversation sent (Gemini `role: "model"`
    /// contents; Anthropic and chat `assistant` messages), in order: what a resumed session
    /// sends back of its earlier turns.
    pub fn assistant_texts(&self) -> Vec<String> {
        let role = if self.api == Api::Gemini {
            "model"
        } else {
            "assistant"
        };
        self.items()
            .iter()
            .filter(|item| item.get("role").and_then(Value::as_str) == Some(role))
            .map(|item| match self.api {
                Api::Gemini => gemini_parts(item)
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => text_of(item.get("content")),
            })
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// Whether any user message's text contains `needle` in full.
    pub fn has_user_text(&self, needle: &str) -> bool {
        self.user_texts().iter().any(|t| t.contains(needle))
    }
}

/// The parts of a Gemini content (`{role, parts[]}`).
fn gemini_parts(content: &Value) -> &[Value] {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The content blocks of a message (an array `content`; a string content has none).
fn content_blocks(message: &Value) -> &[Value] {
    message
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// A string, or the texts of an array of text blocks joined with newlines.
fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Token counts an answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenUsage {
    /// Input tokens not read from the cache.
    pub input: u64,
    /// Input tokens read from the cache (reported separately by Anthropic, included in the
    /// input by OpenAI).
    pub cached: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Reasoning tokens (OpenAI only; part of `output`).
    pub reasoning: u64,
}

impl Default for TokenUsage {
    fn default() -> Self {
        TokenUsage {
            input: 100,
            cached: 0,
            output: 10,
            reasoning: 0,
        }
    }
}

/// One part of an answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Part {
    /// Assistant text.
    Text(String),
    /// A tool call the CLI executes.
    ToolCall {
        /// The call id (generated when built with [`Reply::tool_call`]).
        id: String,
        /// The tool's name as the CLI knows it (`Bash`, `shell`, `bash`, …).
        name: String,
        /// The tool's arguments.
        input: Value,
    },
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Text and tool calls, in order.
    pub parts: Vec<Part>,
    /// The token counts reported.
    pub usage: TokenUsage,
    /// The model name reported; `None` echoes the requested model.
    pub model: Option<String>,
}

/// An API error: HTTP status and the API's error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (429, 500, 400, …).
    pub status: u16,
    /// The error type (`rate_limit_error`, `api_error`, `invalid_request_error`, …).
    pub kind: String,
    /// The message.
    pub message: String,
    /// The `code` of OpenAI errors (`context_length_exceeded`, `rate_limit_exceeded`, …).
    pub code: Option<String>,
    /// `x-should-retry: true|false` — clients built on the official SDKs follow it; `false`
    /// makes a CLI give up at once instead of backing off.
    pub should_retry: Option<bool>,
}

/// What the server answers to one model request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// HTTP 200 with the answer (streamed when asked).
    Answer(Answer),
    /// An HTTP error status with the API's error body.
    Error(ApiError),
    /// HTTP 200, the stream starts, then an error event arrives inside it.
    StreamError(ApiError),
    /// HTTP 200, the stream starts with this much text, then the connection is cut.
    Disconnect {
        /// The text sent before the cut.
        text: String,
    },
    /// No answer: the connection is held open until the server is dropped.
    Hang,
    /// An HTTP error status with the API's error body, sending `Retry-After: <value>` when
    /// `retry_after` is given and no retry header at all when it is not (instead of the
    /// `retry-after: 0` every other error carries).
    ErrorRetryAfter {
        /// The error.
        error: ApiError,
        /// The `Retry-After` value (seconds or an HTTP-date), or none.
        retry_after: Option<String>,
    },
}

impl Reply {
    /// An answer with one text part.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Answer(Answer {
            parts: vec![Part::Text(text.into())],
            usage: TokenUsage::default(),
            model: None,
        })
    }

    /// An answer with one tool call (id generated from the request index).
    pub fn tool_call(name: impl Into<String>, input: Value) -> Reply {
        Reply::tool_calls([(name, input)])
    }

    /// An answer with several tool calls, executed by the CLI before its next request.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Reply {
        Reply::Answer(Answer {
            parts: calls
                .into_iter()
                .map(|(name, input)| Part::ToolCall {
                    id: String::new(),
                    name: name.into(),
                    input,
                })
                .collect(),
            usage: TokenUsage::default(),
            model: None,
        })
    }

    /// Any API error.
    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::Error(ApiError {
            status,
            kind: kind.to_owned(),
            message: message.to_owned(),
            code: None,
            should_retry: None,
        })
    }

    /// Any API error with the `Retry-After` header `retry_after` (none when `None`); the CLI's
    /// own retry policy applies (no `x-should-retry`).
    pub fn error_retry_after(
        status: u16,
        kind: &str,
        message: &str,
        retry_after: Option<&str>,
    ) -> Reply {
        Reply::ErrorRetryAfter {
            error: ApiError {
                status,
                kind: kind.to_owned(),
                message: message.to_owned(),
                code: None,
                should_retry: None,
            },
            retry_after: retry_after.map(str::to_owned),
        }
    }

    /// HTTP 429 (`rate_limit_error`), with `x-should-retry: false` so the CLI reports it
    /// instead of backing off.
    pub fn rate_limited() -> Reply {
        Reply::Error(ApiError {
            status: 429,
            kind: "rate_limit_error".to_owned(),
            message: "Number of request tokens has exceeded your per-minute rate limit".to_owned(),
            code: Some("rate_limit_exceeded".to_owned()),
            should_retry: Some(false),
        })
    }

    /// HTTP 429 (`rate_limit_error`) with `retry-after: SECS` (and `x-should-retry: false`,
    /// so the CLI reports it rather than waiting itself).
    pub fn rate_limited_retry_after(secs: u64) -> Reply {
        match Reply::rate_limited() {
            Reply::Error(error) => Reply::ErrorRetryAfter {
                error,
                retry_after: Some(secs.to_string()),
            },
            other => other,
        }
    }

    /// HTTP 500 (`api_error`), with `x-should-retry: false`.
    pub fn server_error() -> Reply {
        Reply::Error(ApiError {
            status: 500,
            kind: "api_error".to_owned(),
            message: "Internal server error".to_owned(),
            code: None,
            should_retry: Some(false),
        })
    }

    /// The API's context-length error. Anthropic: HTTP 400 `invalid_request_error`
    /// `prompt is too long: N tokens > M maximum`; OpenAI: HTTP 400 `invalid_request_error`
    /// with code `context_length_exceeded`.
    pub fn prompt_too_long(tokens: u64, maximum: u64) -> Reply {
        Reply::Error(ApiError {
            status: 400,
            kind: "invalid_request_error".to_owned(),
            message: format!("prompt is too long: {tokens} tokens > {maximum} maximum"),
            code: Some("context_length_exceeded".to_owned()),
            should_retry: Some(false),
        })
    }

    /// HTTP 200, then the API's `overloaded_error` (OpenAI: `server_error`) inside the stream.
    pub fn stream_error() -> Reply {
        Reply::StreamError(ApiError {
            status: 529,
            kind: "overloaded_error".to_owned(),
            message: "Overloaded".to_owned(),
            code: Some("server_error".to_owned()),
            should_retry: Some(false),
        })
    }

    /// HTTP `status` as the real API sends it: its error type and message for the status
    /// (429 `rate_limit_error`, 529 `overloaded_error`, 401 `authentication_error`, 403
    /// `permission_error`, other 5xx `api_error`, else `invalid_request_error`), `retry-after:
    /// <secs>` only when `retry_after_secs` is given, and no `x-should-retry`.
    pub fn status(status: u16, retry_after_secs: Option<u64>) -> Reply {
        let (kind, message) = match status {
            429 => (
                "rate_limit_error",
                "This request would exceed your rate limit",
            ),
            529 => ("overloaded_error", "Overloaded"),
            401 => ("authentication_error", "invalid x-api-key"),
            403 => ("permission_error", "Your API key does not have permission"),
            503 => ("api_error", "Service Unavailable"),
            500..=599 => ("api_error", "Internal server error"),
            _ => ("invalid_request_error", "Invalid request"),
        };
        Reply::ErrorRetryAfter {
            error: ApiError {
                status,
                kind: kind.to_owned(),
                message: message.to_owned(),
                code: None,
                should_retry: None,
            },
            retry_after: retry_after_secs.map(|s| s.to_string()),
        }
    }

    /// HTTP 200 and `text`, then the connection is cut mid-stream.
    pub fn disconnect(text: impl Into<String>) -> Reply {
        Reply::Disconnect { text: text.into() }
    }

    /// Sets the token counts of an answer (other replies are returned unchanged).
    pub fn with_usage(mut self, usage: TokenUsage) -> Reply {
        if let Reply::Answer(a) = &mut self {
            a.usage = usage;
        }
        self
    }

    /// Sets the model name an answer reports (other replies are returned unchanged).
    pub fn with_model(mut self, model: impl Into<String>) -> Reply {
        if let Reply::Answer(a) = &mut self {
            a.model = Some(model.into());
        }
        self
    }
}

/// Decides the reply to each model request.
pub trait Script: Send + 'static {
    /// The reply to `request` (its `model_index` says how many model requests came before).
    fn reply(&mut self, request: &Request) -> Reply;
}

impl<F: FnMut(&Request) -> Reply + Send + 'static> Script for F {
    fn reply(&mut self, request: &Request) -> Reply {
        self(request)
    }
}

/// A script answering with `replies` in order, then with HTTP 500 (`x-should-retry: false`)
/// naming the request it did not expect.
pub fn replies(replies: impl IntoIterator<Item = Reply>) -> impl Script {
    let mut queue: VecDeque<Reply> = replies.into_iter().collect();
    move |request: &Request| {
        queue.pop_front().unwrap_or_else(|| {
            Reply::Error(ApiError {
                status: 500,
                kind: "api_error".to_owned(),
                message: format!(
                    "the test script has no reply for model request {} ({})",
                    request.model_index.unwrap_or(0),
                    request.path
                ),
                code: None,
                should_retry: Some(false),
            })
        })
    }
}

/// What the connection threads share with the [`ModelServer`].
struct Shared {
    api: Api,
    script: Mutex<Box<dyn Script>>,
    requests: Mutex<Vec<Request>>,
    arrived: Condvar,
    model_requests: Mutex<usize>,
    shutdown: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking script must not hide the requests from the test that reads them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A scripted model server on 127.0.0.1; stops when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer")
            .field("addr", &self.addr)
            .field("api", &self.shared.api)
            .finish()
    }
}

impl ModelServer {
    /// Starts a server for `api` on `127.0.0.1:0`, answering model requests with `script`.
    pub fn start(api: Api, script: impl Script) -> io::Result<ModelServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            api,
            script: Mutex::new(Box::new(script)),
            requests: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            model_requests: Mutex::new(0),
            shutdown: AtomicBool::new(false),
        });
        let accept_shared = shared.clone();
        let acceptor = thread::Builder::new()
            .name(format!("model-server-{}", addr.port()))
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(ModelServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `http://127.0.0.1:PORT` — the base URL without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.shared.requests).clone()
    }

    /// The requests handed to the script, in order.
    pub fn model_requests(&self) -> Vec<Request> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.model_index.is_some())
            .cloned()
            .collect()
    }

    /// Waits until at least `n` model requests arrived, or `timeout` passed; true when they
    /// did. For synchronising with the CLI (e.g. interrupt it once it is waiting on the
    /// model), never for asserting speed.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut count = lock(&self.shared.model_requests);
        while *count < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            count = self
                .shared
                .arrived
                .wait_timeout(count, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        // Connections are detached: a held one notices the shutdown within HOLD_POLL.
        let _ = thread::Builder::new()
            .name("model-server-conn".to_owned())
            .spawn(move || {
                let _ = serve_connection(stream, &shared);
            });
    }
}

/// Why a connection ends early.
enum Ended {
    /// The peer closed it, or sent something that is not HTTP/1.1 within the limits.
    Closed,
}

impl From<io::Error> for Ended {
    fn from(_: io::Error) -> Self {
        Ended::Closed
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> Result<(), Ended> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(mut request) = read_request(&mut reader, shared.api)? else {
            return Ok(());
        };
        let is_model = is_model_endpoint(shared.api, &request);
        let reply = if is_model {
            let index = {
                let mut count = lock(&shared.model_requests);
                *count += 1;
                *count - 1
            };
            request.model_index = Some(index);
            // Recorded before the script runs, so a test waiting on it sees the request even
            // when the reply is to hang.
            lock(&shared.requests).push(request.clone());
            shared.arrived.notify_all();
            Some(lock(&shared.script).reply(&request))
        } else {
            lock(&shared.requests).push(request.clone());
            None
        };
        let keep_open = match reply {
            Some(reply) => respond(&mut writer, shared, &request, reply)?,
            None => respond_other(&mut writer, shared.api, &request)?,
        };
        if !keep_open || request.header("connection") == Some("close") {
            return Ok(());
        }
    }
}

fn is_model_endpoint(api: Api, request: &Request) -> bool {
    let path = request.path.split('?').next().unwrap_or("");
    request.method == "POST"
        && match api {
            Api::AnthropicMessages => path.ends_with("/messages"),
            Api::OpenAiResponses => path.ends_with("/responses"),
            Api::OpenAiChat => path.ends_with("/chat/completions"),
            Api::Gemini => {
                path.ends_with(":streamGenerateContent") || path.ends_with(":generateContent")
            }
        }
}

/// Reads one request; `None` when the peer closed the connection between requests.
fn read_request(reader: &mut BufReader<TcpStream>, api: Api) -> Result<Option<Request>, Ended> {
    let mut head_bytes = 0usize;
    let mut line = String::new();
    let n = read_line(reader, &mut line, &mut head_bytes)?;
    if n == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(Ended::Closed);
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if read_line(reader, &mut line, &mut head_bytes)? == 0 {
            return Err(Ended::Closed);
        }
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if trimmed.is_empty() {
            break;
        }
        let Some((name, value)) = trimmed.split_once(':') else {
            return Err(Ended::Closed);
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(reader)?
    } else {
        let len: usize = header("content-length")
            .map(|v| v.parse().map_err(|_| Ended::Closed))
            .transpose()?
            .unwrap_or(0);
        if len > MAX_BODY_BYTES {
            return Err(Ended::Closed);
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Ok(Some(Request {
        api,
        method,
        path,
        headers,
        body,
        json,
        model_index: None,
    }))
}

/// Reads one line of the head, failing past [`MAX_HEAD_BYTES`] in all.
fn read_line(
    reader: &mut BufReader<TcpStream>,
    line: &mut String,
    head_bytes: &mut usize,
) -> Result<usize, Ended> {
    let left = MAX_HEAD_BYTES.saturating_sub(*head_bytes) as u64;
    let n = reader.by_ref().take(left + 1).read_line(line)?;
    *head_bytes += n;
    if *head_bytes > MAX_HEAD_BYTES {
        return Err(Ended::Closed);
    }
    Ok(n)
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> Result<Vec<u8>, Ended> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        let mut budget = 0;
        read_line(reader, &mut line, &mut budget)?;
        let size_text = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16).map_err(|_| Ended::Closed)?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                line.clear();
                if read_line(reader, &mut line, &mut budget)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(Ended::Closed);
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// Writes a complete (non-streamed) response; true when the connection stays open.
fn write_full(
    w: &mut TcpStream,
    status: u16,
    extra_headers: &[(&str, String)],
    body: &[u8],
) -> io::Result<bool> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    for (name, value) in extra_headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()?;
    Ok(true)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// A streamed (chunked) SSE response in progress.
struct Sse<'a> {
    w: &'a mut TcpStream,
}

impl<'a> Sse<'a> {
    fn start(w: &'a mut TcpStream) -> io::Result<Self> {
        w.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
              transfer-encoding: chunked\r\n\r\n",
        )?;
        Ok(Sse { w })
    }

    /// One SSE event (`event:` line only when `name` is given), sent as one chunk.
    fn event(&mut self, name: Option<&str>, data: &str) -> io::Result<()> {
        let mut text = String::new();
        if let Some(name) = name {
            text.push_str(&format!("event: {name}\n"));
        }
        text.push_str(&format!("data: {data}\n\n"));
        write!(self.w, "{:x}\r\n{text}\r\n", text.len())?;
        self.w.flush()
    }

    /// Ends the body; the connection stays usable.
    fn finish(self) -> io::Result<bool> {
        self.w.write_all(b"0\r\n\r\n")?;
        self.w.flush()?;
        Ok(true)
    }

    /// Cuts the connection mid-body.
    fn cut(self) -> io::Result<bool> {
        self.w.flush()?;
        let _ = self.w.shutdown(std::net::Shutdown::Both);
        Ok(false)
    }
}

/// Answers a request that is not a model request: Anthropic's token counting, else 404.
fn respond_other(w: &mut TcpStream, api: Api, request: &Request) -> io::Result<bool> {
    let path = request.path.split('?').next().unwrap_or("");
    if api == Api::Gemini && path.ends_with(":countTokens") {
        let tokens = (request.body.len() / 4) as u64;
        return write_full(
            w,
            200,
            &[],
            json!({ "totalTokens": tokens }).to_string().as_bytes(),
        );
    }
    if api == Api::AnthropicMessages && path.ends_with("/messages/count_tokens") {
        let tokens = (request.body.len() / 4) as u64;
        return write_full(
            w,
            200,
            &[],
            json!({ "input_tokens": tokens }).to_string().as_bytes(),
        );
    }
    let error = ApiError {
        status: 404,
        kind: "not_found_error".to_owned(),
        message: format!("no such endpoint on the test model server: {path}"),
        code: None,
        should_retry: Some(false),
    };
    write_error(w, api, &error)
}

fn error_body(api: Api, e: &ApiError) -> Value {
    match api {
        Api::AnthropicMessages => json!({
            "type": "error",
            "error": { "type": e.kind, "message": e.message },
        }),
        Api::OpenAiResponses | Api::OpenAiChat => json!({
            "error": { "type": e.kind, "message": e.message, "code": e.code, "param": null },
        }),
        Api::Gemini => {
            // The Gemini API's error: the HTTP status, a message and the RPC status name.
            let status = match e.status {
                400 => "INVALID_ARGUMENT",
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                404 => "NOT_FOUND",
                429 => "RESOURCE_EXHAUSTED",
                503 | 529 => "UNAVAILABLE",
                _ => "INTERNAL",
            };
            let message = if e.code.as_deref() == Some("context_length_exceeded") {
                // The API's own wording for an over-long request.
                let numbers: Vec<&str> = e
                    .message
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|n| !n.is_empty())
                    .collect();
                format!(
                    "The input token count ({}) exceeds the maximum number of tokens allowed ({}).",
                    numbers.first().unwrap_or(&"0"),
                    numbers.get(1).unwrap_or(&"0")
                )
            } else {
                e.message.clone()
            };
            json!({ "error": { "code": e.status, "message": message, "status": status } })
        }
    }
}

fn write_error(w: &mut TcpStream, api: Api, e: &ApiError) -> io::Result<bool> {
    // Clients that retry anyway (OpenCode's session loop retries 5xx and 429 up to five
    // times) retry at once instead of backing off for a minute.
    write_error_with(
        w,
        api,
        e,
        &[
            ("retry-after", "0".to_owned()),
            ("retry-after-ms", "0".to_owned()),
        ],
    )
}

/// An error response with `retry` as its retry headers.
fn write_error_with(
    w: &mut TcpStream,
    api: Api,
    e: &ApiError,
    retry: &[(&str, String)],
) -> io::Result<bool> {
    let mut headers = vec![("request-id", "req_test".to_owned())];
    if let Some(retry) = e.should_retry {
        headers.push(("x-should-retry", retry.to_string()));
    }
    headers.extend(retry.iter().cloned());
    write_full(
        w,
        e.status,
        &headers,
        error_body(api, e).to_string().as_bytes(),
    )
}

/// Answers a model request; true when the connection stays open.
fn respond(
    w: &mut TcpStream,
    shared: &Shared,
    request: &Request,
    reply: Reply,
) -> io::Result<bool> {
    let index = request.model_index.unwrap_or(0);
    match reply {
        Reply::Error(e) => write_error(w, shared.api, &e),
        Reply::ErrorRetryAfter { error, retry_after } => {
            let retry: Vec<(&str, String)> = retry_after
                .into_iter()
                .map(|v| ("retry-after", v))
                .collect();
            write_error_with(w, shared.api, &error, &retry)
        }
        Reply::Hang => {
            let until = Instant::now() + MAX_HOLD;
            while !shared.shutdown.load(Ordering::SeqCst) && Instant::now() < until {
                thread::sleep(HOLD_POLL);
            }
            let _ = w.shutdown(std::net::Shutdown::Both);
            Ok(false)
        }
        Reply::Answer(mut answer) => {
            for (n, part) in answer.parts.iter_mut().enumerate() {
                if let Part::ToolCall { id, .. } = part
                    && id.is_empty()
                {
                    *id = call_id(shared.api, index, n);
                }
            }
            let model = answer
                .model
                .clone()
                .or_else(|| request.model().map(str::to_owned))
                .unwrap_or_else(|| "test-model".to_owned());
            let encoder = Encoder {
                api: shared.api,
                index,
                model,
            };
            if request.wants_stream() {
                let mut sse = Sse::start(w)?;
                encoder.stream(&mut sse, &answer)?;
                sse.finish()
            } else {
                write_full(w, 200, &[], encoder.whole(&answer).to_string().as_bytes())
            }
        }
        Reply::StreamError(e) => {
            let encoder = Encoder {
                api: shared.api,
                index,
                model: request.model().unwrap_or("test-model").to_owned(),
            };
            let mut sse = Sse::start(w)?;
            encoder.stream_error(&mut sse, &e)?;
            sse.finish()
        }
        Reply::Disconnect { text } => {
            let encoder = Encoder {
                api: shared.api,
                index,
                model: request.model().unwrap_or("test-model").to_owned(),
            };
            let mut sse = Sse::start(w)?;
            encoder.stream_partial(&mut sse, &text)?;
            sse.cut()
        }
    }
}

fn call_id(api: Api, index: usize, n: usize) -> String {
    match api {
        Api::AnthropicMessages => format!("toolu_{index:02}{n:02}"),
        Api::OpenAiResponses | Api::OpenAiChat | Api::Gemini => format!("call_{index:02}{n:02}"),
    }
}

/// Renders replies in one API's wire format.
struct Encoder {
    api: Api,
    index: usize,
    model: String,
}

impl Encoder {
    fn message_id(&self) -> String {
        match self.api {
            Api::AnthropicMessages => format!("msg_test_{:04}", self.index),
            Api::OpenAiResponses => format!("resp_test_{:04}", self.index),
            Api::OpenAiChat => format!("chatcmpl-test-{:04}", self.index),
            Api::Gemini => format!("gemini-test-{:04}", self.index),
        }
    }

    fn anthropic_usage(usage: &TokenUsage, output: u64) -> Value {
        json!({
            "input_tokens": usage.input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": usage.cached,
            "output_tokens": output,
        })
    }

    fn stop_reason(answer: &Answer) -> &'static str {
        let calls = answer
            .parts
            .iter()
            .any(|p| matches!(p, Part::ToolCall { .. }));
        if calls { "tool_use" } else { "end_turn" }
    }

    /// The non-streamed answer.
    fn whole(&self, answer: &Answer) -> Value {
        match self.api {
            Api::AnthropicMessages => {
                let content: Vec<Value> = answer
                    .parts
                    .iter()
                    .map(|p| match p {
                        Part::Text(t) => json!({"type": "text", "text": t}),
                        Part::ToolCall { id, name, input } => {
                            json!({"type": "tool_use", "id": id, "name": name, "input": input})
                        }
                    })
                    .collect();
                json!({
                    "id": self.message_id(), "type": "message", "role": "assistant",
                    "model": self.model, "content": content,
                    "stop_reason": Self::stop_reason(answer), "stop_sequence": null,
                    "usage": Self::anthropic_usage(&answer.usage, answer.usage.output),
                })
            }
            Api::OpenAiResponses => self.response_object(answer, "completed"),
            Api::OpenAiChat => {
                let text: String = answer
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.as_str()),
                        Part::ToolCall { .. } => None,
                    })
                    .collect();
                let calls = self.chat_tool_calls(answer);
                let mut message = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    message["tool_calls"] = Value::Array(calls);
                }
                json!({
                    "id": self.message_id(), "object": "chat.completion", "created": 0,
                    "model": self.model,
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": self.chat_finish(answer)}],
                    "usage": self.chat_usage(&answer.usage),
                })
            }
            Api::Gemini => self.gemini_chunk(&self.gemini_parts(answer), Some(&answer.usage)),
        }
    }

    /// The Gemini parts of an answer: `{text}` and `{functionCall{name, args}}` (no call id:
    /// the real API leaves it out, and the CLI makes its own).
    fn gemini_parts(&self, answer: &Answer) -> Vec<Value> {
        answer
            .parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => json!({"text": t}),
                Part::ToolCall { name, input, .. } => {
                    json!({"functionCall": {"name": name, "args": input}})
                }
            })
            .collect()
    }

    /// One `GenerateContentResponse`: a candidate with `parts`, finished (`finishReason`,
    /// `usageMetadata`) when `usage` is given.
    fn gemini_chunk(&self, parts: &[Value], usage: Option<&TokenUsage>) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut chunk = json!({"modelVersion": self.model, "responseId": self.message_id()});
        if let Some(u) = usage {
            candidate["finishReason"] = json!("STOP");
            let prompt = u.input + u.cached;
            let candidates = u.output - u.reasoning.min(u.output);
            let mut meta = json!({
                "promptTokenCount": prompt,
                "candidatesTokenCount": candidates,
                "totalTokenCount": prompt + u.output,
            });
            if u.cached > 0 {
                meta["cachedContentTokenCount"] = json!(u.cached);
            }
            if u.reasoning > 0 {
                meta["thoughtsTokenCount"] = json!(u.reasoning.min(u.output));
            }
            chunk["usageMetadata"] = meta;
        }
        chunk["candidates"] = json!([candidate]);
        chunk
    }

    /// The streamed answer.
    fn stream(&self, sse: &mut Sse<'_>, answer: &Answer) -> io::Result<()> {
        match self.api {
            Api::AnthropicMessages => {
                self.anthropic_start(sse, &answer.usage)?;
                for (i, part) in answer.parts.iter().enumerate() {
                    match part {
                        Part::Text(t) => self.anthropic_text_block(sse, i, t, true)?,
                        Part::ToolCall { id, name, input } => {
                            let start = json!({"type": "content_block_start", "index": i,
                                "content_block": {"type": "tool_use", "id": id, "name": name,
                                                  "input": {}}});
                            sse.event(Some("content_block_start"), &start.to_string())?;
                            let delta = json!({"type": "content_block_delta", "index": i,
                                "delta": {"type": "input_json_delta",
                                          "partial_json": input.to_string()}});
                            sse.event(Some("content_block_delta"), &delta.to_string())?;
                            let stop = json!({"type": "content_block_stop", "index": i});
                            sse.event(Some("content_block_stop"), &stop.to_string())?;
                        }
                    }
                }
                let delta = json!({"type": "message_delta",
                    "delta": {"stop_reason": Self::stop_reason(answer), "stop_sequence": null},
                    "usage": {"output_tokens": answer.usage.output}});
                sse.event(Some("message_delta"), &delta.to_string())?;
                sse.event(Some("message_stop"), r#"{"type":"message_stop"}"#)
            }
            Api::OpenAiResponses => {
                let mut seq = 0u64;
                self.responses_start(sse, &mut seq)?;
                let mut items = Vec::new();
                for (i, part) in answer.parts.iter().enumerate() {
                    let item = self.response_item(i, part);
                    let added = json!({"type": "response.output_item.added",
                        "output_index": i, "item": item});
                    self.responses_event(sse, &mut seq, added)?;
                    if let Part::Text(t) = part {
                        let delta = json!({"type": "response.output_text.delta",
                            "item_id": item["id"], "output_index": i, "content_index": 0,
                            "delta": t});
                        self.responses_event(sse, &mut seq, delta)?;
                    }
                    let done = json!({"type": "response.output_item.done",
                        "output_index": i, "item": item});
                    self.responses_event(sse, &mut seq, done)?;
                    items.push(item);
                }
                let completed = json!({"type": "response.completed",
                    "response": self.response_object(answer, "completed")});
                self.responses_event(sse, &mut seq, completed)
            }
            Api::OpenAiChat => {
                let id = self.message_id();
                let chunk = |delta: Value, finish: Value| {
                    json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                           "model": self.model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                sse.event(
                    None,
                    &chunk(json!({"role": "assistant", "content": ""}), Value::Null).to_string(),
                )?;
                for part in &answer.parts {
                    if let Part::Text(t) = part {
                        sse.event(None, &chunk(json!({"content": t}), Value::Null).to_string())?;
                    }
                }
                for (n, call) in self.chat_tool_calls(answer).into_iter().enumerate() {
                    let mut call = call;
                    call["index"] = json!(n);
                    sse.event(
                        None,
                        &chunk(json!({"tool_calls": [call]}), Value::Null).to_string(),
                    )?;
                }
                sse.event(
                    None,
                    &chunk(json!({}), json!(self.chat_finish(answer))).to_string(),
                )?;
                let usage = json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                    "model": self.model, "choices": [],
                    "usage": self.chat_usage(&answer.usage)});
                sse.event(None, &usage.to_string())?;
                sse.event(None, "[DONE]")
            }
            Api::Gemini => {
                // Each part in a chunk of its own, then an empty chunk that finishes the
                // candidate and reports the usage, as the API streams.
                for part in self.gemini_parts(answer) {
                    sse.event(None, &self.gemini_chunk(&[part], None).to_string())?;
                }
                sse.event(
                    None,
                    &self.gemini_chunk(&[], Some(&answer.usage)).to_string(),
                )
            }
        }
    }

    fn anthropic_start(&self, sse: &mut Sse<'_>, usage: &TokenUsage) -> io::Result<()> {
        let start = json!({"type": "message_start", "message": {
            "id": self.message_id(), "type": "message", "role": "assistant",
            "model": self.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": Self::anthropic_usage(usage, 1)}});
        sse.event(Some("message_start"), &start.to_string())
    }

    fn anthropic_text_block(
        &self,
        sse: &mut Sse<'_>,
        index: usize,
        text: &str,
        close: bool,
    ) -> io::Result<()> {
        let start = json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}});
        sse.event(Some("content_block_start"), &start.to_string())?;
        let delta = json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text}});
        sse.event(Some("content_block_delta"), &delta.to_string())?;
        if close {
            let stop = json!({"type": "content_block_stop", "index": index});
            sse.event(Some("content_block_stop"), &stop.to_string())?;
        }
        Ok(())
    }

    /// Starts a stream, then reports `e` inside it.
    fn stream_error(&self, sse: &mut Sse<'_>, e: &ApiError) -> io::Result<()> {
        match self.api {
            Api::AnthropicMessages => {
                self.anthropic_start(sse, &TokenUsage::default())?;
                sse.event(Some("error"), &error_body(self.api, e).to_string())
            }
            Api::OpenAiResponses => {
                let mut seq = 0;
                self.responses_start(sse, &mut seq)?;
                let failed = json!({"type": "response.failed", "response": {
                    "id": self.message_id(), "object": "response", "status": "failed",
                    "model": self.model, "output": [],
                    "error": {"code": e.code.as_deref().unwrap_or(&e.kind),
                              "message": e.message}}});
                self.responses_event(sse, &mut seq, failed)
            }
            Api::OpenAiChat | Api::Gemini => sse.event(None, &error_body(self.api, e).to_string()),
        }
    }

    /// Starts a stream and sends `text`, without ending anything.
    fn stream_partial(&self, sse: &mut Sse<'_>, text: &str) -> io::Result<()> {
        match self.api {
            Api::AnthropicMessages => {
                self.anthropic_start(sse, &TokenUsage::default())?;
                self.anthropic_text_block(sse, 0, text, false)
            }
            Api::OpenAiResponses => {
                let mut seq = 0;
                self.responses_start(sse, &mut seq)?;
                let item = self.response_item(0, &Part::Text(String::new()));
                let added = json!({"type": "response.output_item.added", "output_index": 0,
                    "item": item});
                self.responses_event(sse, &mut seq, added)?;
                let delta = json!({"type": "response.output_text.delta", "item_id": item["id"],
                    "output_index": 0, "content_index": 0, "delta": text});
                self.responses_event(sse, &mut seq, delta)
            }
            Api::OpenAiChat => {
                let chunk = json!({"id": self.message_id(), "object": "chat.completion.chunk",
                    "created": 0, "model": self.model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                 "finish_reason": null}]});
                sse.event(None, &chunk.to_string())
            }
            Api::Gemini => sse.event(
                None,
                &self
                    .gemini_chunk(&[json!({"text": text})], None)
                    .to_string(),
            ),
        }
    }

    fn responses_event(
        &self,
        sse: &mut Sse<'_>,
        seq: &mut u64,
        mut event: Value,
    ) -> io::Result<()> {
        event["sequence_number"] = json!(*seq);
        *seq += 1;
        let name = event["type"].as_str().unwrap_or("").to_owned();
        sse.event(Some(&name), &event.to_string())
    }

    fn responses_start(&self, sse: &mut Sse<'_>, seq: &mut u64) -> io::Result<()> {
        let response = json!({"id": self.message_id(), "object": "response",
            "created_at": 0, "status": "in_progress", "model": self.model, "output": []});
        self.responses_event(
            sse,
            seq,
            json!({"type": "response.created", "response": response}),
        )?;
        self.responses_event(
            sse,
            seq,
            json!({"type": "response.in_progress", "response": response}),
        )
    }

    fn response_item(&self, i: usize, part: &Part) -> Value {
        match part {
            Part::Text(t) => json!({"type": "message", "id": format!("msg_{:04}_{i}", self.index),
                "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": t, "annotations": []}]}),
            Part::ToolCall { id, name, input } => json!({"type": "function_call",
                "id": format!("fc_{:04}_{i}", self.index), "status": "completed",
                "call_id": id, "name": name, "arguments": input.to_string()}),
        }
    }

    fn response_object(&self, answer: &Answer, status: &str) -> Value {
        let output: Vec<Value> = answer
            .parts
            .iter()
            .enumerate()
            .map(|(i, p)| self.response_item(i, p))
            .collect();
        let u = &answer.usage;
        json!({"id": self.message_id(), "object": "response", "created_at": 0,
        "status": status, "model": self.model, "output": output,
        "usage": {
            "input_tokens": u.input + u.cached,
            "input_tokens_details": {"cached_tokens": u.cached},
            "output_tokens": u.output,
            "output_tokens_details": {"reasoning_tokens": u.reasoning},
            "total_tokens": u.input + u.cached + u.output,
        }})
    }

    fn chat_tool_calls(&self, answer: &Answer) -> Vec<Value> {
        answer
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall { id, name, input } => Some(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}})),
                Part::Text(_) => None,
            })
            .collect()
    }

    fn chat_finish(&self, answer: &Answer) -> &'static str {
        match Self::stop_reason(answer) {
            "tool_use" => "tool_calls",
            _ => "stop",
        }
    }

    fn chat_usage(&self, u: &TokenUsage) -> Value {
        json!({"prompt_tokens": u.input + u.cached, "completion_tokens": u.output,
               "total_tokens": u.input + u.cached + u.output,
               "prompt_tokens_details": {"cached_tokens": u.cached},
               "completion_tokens_details": {"reasoning_tokens": u.reasoning}})
    }
}
