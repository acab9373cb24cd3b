//! The MCP request handlers: tool list and calls, resource templates and reads.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrun_core::capture::FullOutput;
use agentrun_core::page::{ByteRange, MAX_PAGE_LINES, PageRequest};
use agentrun_core::process::{ProcessResult, RunOptions, StdinMode};
use agentrun_core::sink::ResultSink;
use agentrun_core::{ArtifactUri, CaptureCompletion, CaptureStatus, OutputDeclaration};
use agentrun_tokio::{RunError, Runner};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    MetaObject, PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::args::{ArgError, Args};
use crate::render::{self, Answer};
use crate::{Allow, Inner, MAX_TIMEOUT, McpServer, RECENT_RUNS};

/// How often a run reports progress to a client that asked for it.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long the server waits, after the client left, for stopped runs to be finalized.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

/// A run offered by `resources/list`.
#[derive(Debug, Clone)]
pub(crate) struct RecentRun {
    uri: String,
    name: String,
    description: String,
}

/// Counts a call in flight for as long as it lives.
struct CallGuard(Arc<Inner>);

impl CallGuard {
    fn new(inner: &Arc<Inner>) -> Self {
        inner.calls.send_modify(|n| *n += 1);
        Self(inner.clone())
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.calls.send_modify(|n| *n -= 1);
    }
}

/// Waits (bounded) until no call is in flight.
pub(crate) async fn wait_for_calls(inner: &Inner) {
    let mut calls = inner.calls.subscribe();
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, calls.wait_for(|n| *n == 0)).await;
}

const RUN_DESCRIPTION: &str = "\
Run a program and get its output back bounded, with nothing lost. The program is executed \
directly with its arguments (never through a shell: no pipes, redirections, globs or $VARS; \
to use them, run [\"sh\", \"-c\", \"...\"] if sh is allowed). stdout and stderr are retained \
in full; the result shows a bounded preview of each stream, and when a stream was cut, a hint \
`[Truncated. Read more: read(filePath=\"artifact://...\", offset=N)]`: call the `read` tool \
with exactly that filePath and offset to see the rest, page by page. The result ends with the \
exit status. With sink=true the program also gets a private file named in \
$AGENTRUN_RESULT_SINK; what it writes there comes back verbatim as its clean answer. Only \
programs the server allows can run.";

const READ_DESCRIPTION: &str = "\
Read retained output by its artifact URI: the filePath from a `[Truncated. Read more: \
read(filePath=\"artifact://...\", offset=N)]` hint (artifact://<64 hex digits> or \
artifact://<64 hex digits>/<stream>). Returns whole lines exactly as stored, from line \
`offset` (zero-based, default 0), at most `limit` lines (1-2000, default 2000), then a line \
saying which lines these were and the offset of the next page. For a single line too long for \
a page, read bytes instead with byteOffset (and byteLimit, at most 2097152). Reads only \
artifact URIs, never files.";

pub(crate) fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are JSON objects"),
    }
}

fn run_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "The program and its arguments, e.g. [\"cargo\", \"test\", \"--workspace\"]. An allowed name runs the executable the server found for it in PATH at start-up."
            },
            "cwd": {
                "type": "string",
                "description": "Working directory (default: the server's)."
            },
            "stdin": {
                "type": "string",
                "description": "Text given to the program on standard input, then end of file (default: no input)."
            },
            "timeout_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT.as_secs(),
                "description": "Stop the program (its whole process group) after this many seconds. Default: the server's (10 minutes unless configured)."
            },
            "sink": {
                "type": "boolean",
                "description": "Give the program a clean result channel: a private file whose path is in $AGENTRUN_RESULT_SINK. What it writes there is returned verbatim as its answer."
            }
        },
        "required": ["command"],
        "additionalProperties": false
    });
    Tool::new("run", RUN_DESCRIPTION, object(schema)).annotate(
        ToolAnnotations::with_title("Run a program with bounded, pageable output")
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

fn read_tool() -> Tool {
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

/// An error result the model reads (not a protocol error: clients show those opaquely).
pub(crate) fn tool_error(message: impl Into<String>) -> CallToolResult {
    // Errors echo what the client sent (a program name, a path): bounded whatever it was.
    let message = render::clip(&message.into(), render::MAX_ERROR_BYTES);
    CallToolResult::error(vec![ContentBlock::text(message)])
}

impl From<ArgError> for CallToolResult {
    fn from(e: ArgError) -> Self {
        tool_error(e.0)
    }
}

/// A validated `run` call.
struct RunCall {
    program: String,
    /// What runs: the executable `program` was resolved to at start-up, or `program` itself
    /// under `--allow-all`.
    executable: std::ffi::OsString,
    args: Vec<String>,
    cwd: Option<String>,
    stdin: Option<String>,
    timeout: Duration,
    sink: bool,
}

impl Inner {
    fn parse_run(&self, map: &JsonObject) -> Result<RunCall, ArgError> {
        let args = Args::new(
            "run",
            map,
            &["command", "cwd", "stdin", "timeout_seconds", "sink"],
        )?;
        let mut command = args.string_array("command", "[\"cargo\", \"test\"]")?;
        let program = command.remove(0);
        if program.is_empty() || program.contains('\0') {
            return Err(ArgError(
                "`run` argument `command[0]` must name a program (non-empty, no NUL byte)"
                    .to_owned(),
            ));
        }
        if let Some(bad) = command.iter().find(|a| a.contains('\0')) {
            return Err(ArgError(format!(
                "`run` argument `command` holds an argument with a NUL byte: {bad:?}"
            )));
        }
        let executable = match self.check_allowed(&program)? {
            Some(path) => path.into_os_string(),
            None => program.clone().into(),
        };
        let timeout = args
            .opt_u64("timeout_seconds", 1, MAX_TIMEOUT.as_secs())?
            .map_or(self.default_timeout, Duration::from_secs);
        Ok(RunCall {
            program,
            executable,
            args: command,
            cwd: args.opt_string("cwd")?.map(str::to_owned),
            stdin: args.opt_string("stdin")?.map(str::to_owned),
            timeout,
            sink: args.opt_bool("sink")?.unwrap_or(false),
        })
    }

    /// Whether `program` may run, and the executable it was resolved to (`None`: any
    /// program may run, and runs as given).
    pub(crate) fn check_allowed(
        &self,
        program: &str,
    ) -> Result<Option<std::path::PathBuf>, ArgError> {
        if let Allow::Programs(set) = &self.allow
            && let Some(found) = set.get(program)
        {
            return match found {
                Ok(path) => Ok(Some(path.clone())),
                Err(why) => Err(ArgError(format!(
                    "`{program}` is allowed on this server but cannot run: it was not found \
                     when the server started ({why}). The user has to make it available and \
                     restart the server"
                ))),
            };
        }
        // The name is echoed back to the model: a huge one is cut.
        let shown = render::clip(program, 200);
        let program = shown.as_str();
        match &self.allow {
            Allow::All => Ok(None),
            Allow::Programs(set) if set.is_empty() => Err(ArgError(format!(
                "`{program}` is not allowed: this server allows no program to run. The user \
                 can allow it by adding `--allow {program}` to the server's command line"
            ))),
            Allow::Programs(set) => Err(ArgError(format!(
                "`{program}` is not allowed on this server; the allowed programs are: {}. Use \
                 one of them, exactly as written (or the user can add `--allow {program}` to \
                 the server's command line)",
                set.keys().cloned().collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn remember(&self, result: &ProcessResult, program: &str) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let record = &result.record;
        let counts: Vec<String> = record
            .streams()
            .iter()
            .map(|s| {
                let name = s.name.as_ref().map_or("output", |n| n.as_str());
                format!("{name} {} lines", s.lines)
            })
            .collect();
        recent.push(RecentRun {
            uri: record.output_uri().to_string(),
            name: format!("{program} (run {})", record.run_id),
            description: format!("Output manifest of `{program}`: {}", counts.join(", ")),
        });
        let excess = recent.len().saturating_sub(RECENT_RUNS);
        recent.drain(..excess);
    }
}

/// Blocking store work on tokio's blocking pool; a panic there is an internal error.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorData::internal_error(format!("a blocking task failed: {e}"), None))
}

/// A text for the model (a clean answer, a final message): shown in full when it is within
/// the preview bound and the `room` its result has left, else kept as its own artifact so
/// that the model sees a bounded preview (or only a read hint) for the rest.
pub(crate) async fn retain_text(
    inner: &Inner,
    text: String,
    room: usize,
) -> Result<Answer, ErrorData> {
    if render::fits_inline(text.len(), room, inner.limits.max_bytes) {
        return Ok(Answer::Inline(text));
    }
    let (store, limits) = (inner.store.clone(), inner.limits);
    blocking(move || {
        let retained = store
            .begin_capture(OutputDeclaration::Single, limits)
            .and_then(|session| {
                session.finish(CaptureCompletion::Full {
                    display: None,
                    status: CaptureStatus::Succeeded,
                    outputs: FullOutput::Single(text.into_bytes()),
                })
            });
        match retained {
            Ok(record) => Answer::Retained(Box::new(record)),
            Err(e) => Answer::Missing(format!(
                "it is over the preview bound and retaining it failed: {e}"
            )),
        }
    })
    .await
}

/// Resolves when the call is cancelled by the client or the connection ends.
pub(crate) fn stop_future(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
) -> impl Future<Output = ()> + Send + 'static {
    let mut shutdown = inner.shutdown.subscribe();
    let cancelled = context.ct.clone();
    async move {
        tokio::select! {
            () = cancelled.cancelled() => {}
            _ = shutdown.wait_for(|gone| *gone) => {}
        }
    }
}

impl McpServer {
    async fn call_run(
        &self,
        map: &JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let inner = &self.inner;
        let call = match inner.parse_run(map) {
            Ok(call) => call,
            Err(e) => return Ok(e.into()),
        };
        let mut options = RunOptions::new(&call.executable)
            .args(&call.args)
            .limits(inner.limits)
            .timeout(call.timeout);
        if let Some(dir) = &call.cwd {
            options = options.current_dir(dir);
        }
        if let Some(path) = &inner.child_path {
            options = options.env("PATH", path);
        }
        if let Some(text) = call.stdin {
            options = options.stdin(StdinMode::Bytes(text.into_bytes()));
        }
        if call.sink {
            options = options.with_result_sink(ResultSink::Allocate);
        }
        if let Err(e) = options.validate() {
            return Ok(tool_error(format!("`run` cannot start: {e}")));
        }

        let watch = Arc::new(Watch::default());
        let observer = {
            let watch = watch.clone();
            move |chunk: &[u8]| watch.add(chunk)
        };
        let runner = Runner::new(inner.store.clone());
        let run = runner
            .run(options)
            .observe_stdout(observer)
            .stop_on(stop_future(inner, &context))
            .into_future();
        let progress = report_progress(&context, &watch, call.timeout);
        let result = tokio::select! {
            result = run => result,
            never = progress => match never {},
        };
        let result = match result {
            Ok(result) => result,
            Err(e @ (RunError::Spawn { .. } | RunError::WorkingDirectory { .. })) => {
                return Ok(tool_error(e.to_string()));
            }
            Err(e) => return Ok(tool_error(format!("the run failed: {e}"))),
        };
        let parts = render::RunParts::new(&result, call.timeout);
        let max = inner.limits.max_payload_bytes;
        let answer = match (&result.result, call.sink) {
            (_, false) => Answer::NotRequested,
            (Some(text), true) => retain_text(inner, text.clone(), parts.room(max)).await?,
            (None, true) => Answer::Missing(format!(
                "the result sink was {}; the stdout preview above is the fallback",
                result.sink.describe()
            )),
        };
        inner.remember(&result, &call.program);
        let mut out = CallToolResult::success(vec![ContentBlock::text(parts.text(&answer, max))]);
        if inner.structured_content {
            out.structured_content = Some(render::bound_structured(
                render::run_json(&result, &answer),
                max,
            ));
        }
        Ok(out)
    }

    async fn call_read(&self, map: &JsonObject) -> Result<CallToolResult, ErrorData> {
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

/// What a running call has shown so far, for progress messages: stdout bytes and lines, and
/// the latest progress line of an agent.
#[derive(Default)]
pub(crate) struct Watch {
    bytes: AtomicU64,
    lines: AtomicU64,
    last_line: Mutex<Option<String>>,
}

impl Watch {
    /// Counts a stdout chunk.
    pub(crate) fn add(&self, chunk: &[u8]) {
        self.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        let newlines = chunk.iter().filter(|&&b| b == b'\n').count();
        self.lines.fetch_add(newlines as u64, Ordering::Relaxed);
    }

    /// Notes an agent's latest progress line.
    pub(crate) fn progress_line(&self, line: &str) {
        // A progress line can quote a harness's event (a model name): bounded.
        *self.last_line.lock().unwrap_or_else(|e| e.into_inner()) = Some(render::clip(line, 1024));
    }

    fn message(&self, elapsed: Duration) -> String {
        let last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        match last.as_deref() {
            Some(line) => format!("running for {}s; latest: {line}", elapsed.as_secs()),
            None => format!(
                "running for {}s; stdout so far: {} lines, {} bytes",
                elapsed.as_secs(),
                self.lines.load(Ordering::Relaxed),
                self.bytes.load(Ordering::Relaxed)
            ),
        }
    }
}

/// Sends a progress notification every [`PROGRESS_EVERY`] while the call lasts, when the
/// client asked for progress (a `progressToken` in the request). Progress is the elapsed time
/// against the timeout; the message says what the call has shown so far. Never returns.
pub(crate) async fn report_progress(
    context: &RequestContext<RoleServer>,
    watch: &Watch,
    timeout: Duration,
) -> std::convert::Infallible {
    let Some(token) = context.meta.get_progress_token() else {
        return std::future::pending().await;
    };
    let start = Instant::now();
    let mut ticks =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        ticks.tick().await;
        let elapsed = start.elapsed();
        let mut param = ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64())
            .with_total(timeout.as_secs_f64());
        param.message = Some(watch.message(elapsed));
        // A client that went away cannot be told; the call goes on until it is stopped.
        let _ = context.peer.notify_progress(param).await;
    }
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
fn parse_uri(text: &str, what: &str) -> Result<ArtifactUri, ArgError> {
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
        None => ReadRange::Lines(
            PageRequest::new(
                offset.unwrap_or(0),
                limit.unwrap_or(u64::from(MAX_PAGE_LINES)),
            )
            .map_err(|e| ArgError(format!("`read`: {e}")))?,
        ),
    };
    Ok(ReadCall { uri, range })
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_instructions(
            "agentrun runs programs with their whole output retained and shows you a bounded \
             preview per stream. When a preview was cut, the result says `[Truncated. Read \
             more: read(filePath=\"artifact://...\", offset=N)]`: call this server's `read` \
             tool with that filePath and offset to continue, page by page, until the line \
             that says the artifact ended.",
        );
        info.server_info = Implementation::new("agentrun", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            run_tool(),
            read_tool(),
            crate::agent::agent_tool(),
            crate::tools::compact::compact_tool(),
        ]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match name {
            "run" => Some(run_tool()),
            "read" => Some(read_tool()),
            "agent" => Some(crate::agent::agent_tool()),
            "compact" => Some(crate::tools::compact::compact_tool()),
            _ => None,
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _call = CallGuard::new(&self.inner);
        let empty = JsonObject::new();
        let map = request.arguments.as_ref().unwrap_or(&empty);
        let result = match request.name.as_ref() {
            "run" => self.call_run(map, context).await?,
            "read" => self.call_read(map).await?,
            "agent" => self.call_agent(map, context).await?,
            "compact" => self.call_compact(map, context).await?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool {:?}; this server's tools are: run, read, agent, compact",
                        render::clip(other, 200)
                    ),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
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
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
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
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let _call = CallGuard::new(&self.inner);
        let uri = parse_uri(&request.uri, "resource URI").map_err(|e| {
            ErrorData::invalid_params(render::clip(&e.0, render::MAX_ERROR_BYTES), None)
        })?;
        let store = self.inner.store.clone();
        let read_uri = uri.clone();
        let first = PageRequest::new(0, u64::from(MAX_PAGE_LINES))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let page = blocking(move || {
            let page = store.read_page(&read_uri, first)?;
            // A bare digest may name a manifest: say so with the JSON media type.
            let manifest = read_uri.stream.is_none() && store.manifest(&read_uri.digest)?.is_some();
            Ok::<_, agentrun_fs::ReadError>((page, manifest))
        })
        .await?;
        let (page, manifest) = match page {
            Ok(found) => found,
            Err(e @ agentrun_fs::ReadError::Missing(_)) => {
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
        meta.insert("totalLines".into(), json!(page.total_lines));
        meta.insert("lines".into(), json!(page.lines));
        meta.insert("nextOffset".into(), json!(page.next_offset));
        meta.insert(
            "contentIsUtf8".into(),
            json!(std::str::from_utf8(&page.bytes).is_ok()),
        );
        meta.insert(
            "continuation".into(),
            json!(render::page_continuation(&uri, &page)),
        );
        let mime = if manifest {
            "application/json"
        } else {
            "text/plain"
        };
        let contents =
            ResourceContents::text(String::from_utf8_lossy(&page.bytes), uri.to_string())
                .with_mime_type(mime)
                .with_meta(MetaObject(meta));
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
