//! The `run` tool: its schema, argument checks and call.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use agentrun_core::process::{RunOptions, StdinMode};
use agentrun_core::sink::ResultSink;
use agentrun_tokio::{RunError, Runner};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde_json::json;

use crate::args::{ArgError, Args};
use crate::progress::{Watch, report_progress};
use crate::render::{self, Answer};
use crate::tools::{not_started, object, record_links, retain_text, stop_future, tool_error};
use crate::{Allow, Inner, MAX_TIMEOUT, McpServer};

const RUN_DESCRIPTION: &str = "\
Run a program and get its output back bounded, with nothing lost. The program is executed \
directly with its arguments (never through a shell: no pipes, redirections, globs or $VARS; \
to use them, run [\"sh\", \"-c\", \"...\"] if sh is allowed). stdout and stderr are retained \
in full; the result shows a bounded preview of each stream, and when a stream was cut, a hint \
`[Truncated. Read more: read(filePath=\"artifact://...\", offset=N)]` (byteOffset=B instead of \
offset for a line longer than a page): call the `read` tool with exactly those arguments to \
see the rest, page by page. The result ends with the \
exit status. With sink=true the program also gets a private file named in \
$AGENTRUN_RESULT_SINK; what it writes there comes back verbatim as its clean answer. Only \
programs the server allows can run.";

pub(crate) fn run_tool() -> Tool {
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

/// A validated `run` call.
struct RunCall {
    /// What runs: the executable `command[0]` was resolved to at start-up, or `command[0]`
    /// itself under `--allow-all`.
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
            None => program.into(),
        };
        let timeout = args
            .opt_u64("timeout_seconds", 1, MAX_TIMEOUT.as_secs())?
            .map_or(self.default_timeout, Duration::from_secs);
        Ok(RunCall {
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
}

impl McpServer {
    pub(crate) async fn call_run(
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
            Err(e) if let Some(spawn) = e.spawn_failure() => {
                return Ok(tool_error(not_started(&e, spawn)));
            }
            Err(e @ RunError::WorkingDirectory { .. }) => {
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
        let text = parts.text(&answer, max);
        // The links share what the text left of the payload bound, at most a quarter of it.
        let budget = max.saturating_sub(text.len()).min(max / 4);
        let mut content = vec![ContentBlock::text(text)];
        content.extend(record_links(inner, &result.record, budget).await);
        let mut out = CallToolResult::success(content);
        if inner.structured_content {
            out.structured_content = Some(render::bound_structured(
                render::run_json(&result, &answer),
                max,
            ));
        }
        Ok(out)
    }
}
