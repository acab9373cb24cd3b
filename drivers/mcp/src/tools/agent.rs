//! The `agent` tool: one harness turn (Claude Code, Codex, …) through the library's agent
//! call, answered with what a delegating model needs: the final message, the models that
//! answered, how the session ended, and read hints for the harness's retained output.

use std::fmt::Write as _;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use agentrun_core::harness::{Harness, OutcomeStatus};
use agentrun_core::{ModelRead, ReadSyntax};
use agentrun_process::{AgentOptions, AgentRun};
use agentrun_tokio::Runner;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde_json::json;

use crate::args::{ArgError, Args};
use crate::progress::{Watch, report_progress};
use crate::render::{self, Answer, push_answer};
use crate::tools::{not_started, object, record_links, retain_text, stop_future, tool_error};
use crate::{MAX_TIMEOUT, McpServer};
use agentrun_core::stall::DEFAULT_STALL_TIMEOUT;

const AGENT_DESCRIPTION: &str = "\
Delegate a task to another coding agent CLI (claude, codex, opencode, gemini, grok, agy, muse, \
qwen, pi) and get \
its answer back bounded. The agent runs non-interactively with the prompt; the result gives \
its final message, the models that answered, whether the session succeeded, and \
`read(filePath=\"artifact://...\")` hints for its full retained output (its event stream and \
stderr), which the `read` tool pages. Only harnesses the server allows can run.";

/// The `agent` tool's definition.
pub(crate) fn agent_tool() -> Tool {
    let names: Vec<&str> = Harness::ALL.iter().map(|h| h.name()).collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "harness": {
                "type": "string",
                "enum": names,
                "description": "The agent CLI to run."
            },
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "The task, as you would type it to that agent."
            },
            "model": {
                "type": "string",
                "description": "The model to request, passed to the agent verbatim (default: the agent's)."
            },
            "effort": {
                "type": "string",
                "description": "The reasoning effort to request: a plain lowercase word such as \"low\", \"medium\" or \"high\" (claude, grok, codex; opencode gets it as its variant, pi as its thinking level; qwen and gemini take none and refuse it)."
            },
            "cwd": {
                "type": "string",
                "description": "The directory the agent works in (default: the server's)."
            },
            "timeout_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT.as_secs(),
                "description": "Stop the agent after this many seconds (default: the server's timeout)."
            },
            "stall_timeout_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_TIMEOUT.as_secs(),
                "description": "Stop the agent when it emitted no event for this many seconds; the turn then fails as `stalled` (default 600; 0: never)."
            }
        },
        "required": ["harness", "prompt"],
        "additionalProperties": false
    });
    Tool::new("agent", AGENT_DESCRIPTION, object(schema)).annotate(
        ToolAnnotations::with_title("Delegate to another coding agent")
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

/// The options of a valid `agent` call, with its timeout.
fn parse_agent(server: &McpServer, map: &JsonObject) -> Result<(AgentOptions, Duration), ArgError> {
    let args = Args::new(
        "agent",
        map,
        &[
            "harness",
            "prompt",
            "model",
            "effort",
            "cwd",
            "timeout_seconds",
            "stall_timeout_seconds",
        ],
    )?;
    let name = args.string("harness")?;
    let harness = Harness::from_name(name).map_err(|e| ArgError(format!("`agent`: {e}")))?;
    let prompt = args.string("prompt")?;
    if prompt.trim().is_empty() {
        return Err(ArgError("`agent` argument `prompt` is empty".to_owned()));
    }
    let timeout = args
        .opt_u64("timeout_seconds", 1, MAX_TIMEOUT.as_secs())?
        .map_or(server.inner.default_timeout, Duration::from_secs);
    let stall = args
        .opt_u64("stall_timeout_seconds", 0, MAX_TIMEOUT.as_secs())?
        .map_or(DEFAULT_STALL_TIMEOUT, Duration::from_secs);
    let mut options = AgentOptions::new(harness, prompt)
        .timeout(timeout)
        .stall_timeout(stall);
    if let Some(model) = args.opt_string("model")? {
        options = options.model(model);
    }
    if let Some(effort) = args.opt_string("effort")? {
        options = options.effort(effort);
    }
    if let Some(dir) = args.opt_string("cwd")? {
        options = options.current_dir(dir);
    }
    // The harness's own program (claude, codex, …) is what must be allowed.
    // An effort that is not a plain word is the caller's mistake, reported as one.
    let program = options
        .run_options()
        .map_err(|e| ArgError(format!("`agent`: {e}")))?
        .get_program()
        .to_owned();
    if let Some(executable) = server.inner.check_allowed(&program.to_string_lossy())? {
        options = options.program(executable);
    }
    if let Some(path) = &server.inner.child_path {
        options = options.env("PATH", path);
    }
    Ok((options, timeout))
}

/// An `agent` result around its final message: the status and models lines before it, the
/// read hints of the retained streams after it. Every part is bounded, so that the final
/// message gets what is left of the payload bound.
struct AgentParts {
    head: String,
    tail: String,
}

impl AgentParts {
    fn new(turn: &AgentRun, timeout: Duration) -> Self {
        let mut head = String::new();
        let name = turn.harness.name();
        match (&turn.completion, turn.stopped()) {
            (_, Some(outcome)) if outcome.timed_out() => {
                let _ = writeln!(
                    head,
                    "[Agent {name} timed out after {}s and was stopped]",
                    timeout.as_secs()
                );
            }
            (_, Some(_)) => {
                let _ = writeln!(head, "[Agent {name} was cancelled and stopped]");
            }
            (Some(completion), None) => {
                // The failure kind, when known: `failed (rate_limited): …`.
                let kind = completion
                    .outcome
                    .failure_kind
                    .map_or_else(String::new, |k| format!(" ({k})"));
                let status = match &completion.outcome.status {
                    OutcomeStatus::Succeeded => "succeeded".to_owned(),
                    OutcomeStatus::TurnFailed { diagnostic } => {
                        format!("failed{kind}: {}", render::diagnostic(diagnostic))
                    }
                    OutcomeStatus::ExecutionFailed { diagnostic } => {
                        format!("failed to run{kind}: {}", render::diagnostic(diagnostic))
                    }
                    other => render::diagnostic(&format!("ended: {other:?}")),
                };
                let _ = write!(head, "[Agent {name} {status}");
                if let Some(summary) = &completion.report.summary {
                    let _ = write!(head, "; {}", render::summary(summary));
                }
                head.push_str("]\n");
            }
            (None, None) => {
                let _ = writeln!(head, "[Agent {name} ended without a completion]");
            }
        }
        let (models, omitted) = match &turn.completion {
            Some(c) if !c.report.models.is_empty() => (&c.report.models, c.report.models_omitted),
            _ => (&turn.observed_models, turn.observed_models_omitted),
        };
        if !models.is_empty() {
            head.push_str(&render::models_line(models, omitted));
        }
        let mut tail = String::new();
        let record = &turn.process.record;
        for stream in record.streams() {
            let name = stream.name.as_ref().map_or("output", |n| n.as_str());
            let _ = writeln!(
                tail,
                "[{name} retained ({} lines, {} bytes): {}]",
                stream.lines,
                stream.bytes,
                ModelRead.read_call(&record.stream_uri(stream), stream.start())
            );
        }
        AgentParts { head, tail }
    }

    /// Bytes left for the final message under the payload bound `max`.
    fn room(&self, max: usize) -> usize {
        max.saturating_sub(self.head.len() + self.tail.len())
    }

    /// The text of an `agent` result, never longer than `max`.
    fn text(self, answer: &Answer, max: usize) -> String {
        let room = self.room(max);
        let mut out = self.head;
        push_answer(&mut out, answer, "Final message", "final message", room);
        out.push_str(&self.tail);
        render::fit(out, max)
    }
}

/// The structured content of an `agent` result: the turn's JSON with its model lists cut to
/// [`render::MAX_MODELS`] names (each bounded; `observed_models_omitted` and
/// `models_omitted` count the rest, including those the interpretation did not keep), every string cut to the preview bound, and
/// `final_message_artifact` naming the final message's own artifact when it was retained.
/// The caller bounds the whole with [`render::bound_structured`].
fn agent_json(turn: &AgentRun, answer: &Answer, max_bytes: usize) -> Option<serde_json::Value> {
    let mut value = serde_json::to_value(turn).ok()?;
    // A final message too large for the text is there as its own artifact: say which.
    if let Answer::Retained(record) = answer {
        value["final_message_artifact"] = json!(record.output_uri().to_string());
    }
    bound_models(&mut value, "observed_models");
    if let Some(report) = value.get_mut("report") {
        bound_models(report, "models");
    }
    bound_strings(&mut value, max_bytes);
    Some(value)
}

fn bound_models(object: &mut serde_json::Value, key: &str) {
    let Some(serde_json::Value::Array(models)) = object.get_mut(key) else {
        return;
    };
    let omitted = models.len().saturating_sub(render::MAX_MODELS);
    models.truncate(render::MAX_MODELS);
    for model in models.iter_mut() {
        if let serde_json::Value::String(name) = model {
            *name = render::clip(name, 128);
        }
    }
    if omitted > 0 {
        // Added to what the interpretation itself left out past its own cap.
        let field = format!("{key}_omitted");
        let before = object.get(&field).and_then(serde_json::Value::as_u64);
        object[field] = json!(before.unwrap_or(0) + omitted as u64);
    }
}

fn bound_strings(value: &mut serde_json::Value, max: usize) {
    match value {
        serde_json::Value::String(s) if s.len() > max => *s = render::clip(s, max),
        serde_json::Value::Array(items) => {
            for item in items {
                bound_strings(item, max);
            }
        }
        serde_json::Value::Object(map) => {
            for (_, item) in map.iter_mut() {
                bound_strings(item, max);
            }
        }
        _ => {}
    }
}

impl McpServer {
    pub(crate) async fn call_agent(
        &self,
        map: &JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let (options, timeout) = match parse_agent(self, map) {
            Ok(parsed) => parsed,
            Err(e) => return Ok(e.into()),
        };
        let watch = Arc::new(Watch::default());
        let progress = {
            let watch = watch.clone();
            move |line: &str| watch.progress_line(line)
        };
        let runner = Runner::new(self.inner.store.clone());
        let turn = runner
            .agent(options)
            .on_progress(progress)
            .stop_on(stop_future(&self.inner, &context))
            .into_future();
        let report = report_progress(&context, &watch, timeout);
        let turn = tokio::select! {
            turn = turn => turn,
            never = report => match never {},
        };
        let turn = match turn {
            Ok(turn) => turn,
            Err(agentrun_tokio::AgentError::Run(e)) if let Some(spawn) = e.spawn_failure() => {
                return Ok(tool_error(not_started(&e, spawn)));
            }
            Err(e) => return Ok(tool_error(format!("the agent could not run: {e}"))),
        };
        let final_message = turn
            .completion
            .as_ref()
            .and_then(|c| c.outcome.final_message.clone());
        let parts = AgentParts::new(&turn, timeout);
        let max = self.inner.limits.max_payload_bytes;
        let answer = match final_message {
            Some(text) => retain_text(&self.inner, text, parts.room(max)).await?,
            None => Answer::Missing("the agent gave none".to_owned()),
        };
        let text = parts.text(&answer, max);
        let budget = max.saturating_sub(text.len()).min(max / 4);
        let links = record_links(&self.inner, &turn.process.record, budget).await;
        let mut out = CallToolResult::success([vec![ContentBlock::text(text)], links].concat());
        out.is_error = Some(!turn.succeeded());
        if self.inner.structured_content {
            out.structured_content = agent_json(&turn, &answer, self.inner.limits.max_bytes)
                .map(|value| render::bound_structured(value, max));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(effort: &str) -> Result<(AgentOptions, Duration), ArgError> {
        let dir = tempfile::tempdir().unwrap();
        let store = agentrun_fs::Store::open(dir.path().join("store")).unwrap();
        let server = McpServer::builder(store).allow_all().build().unwrap();
        let args = serde_json::json!({"harness": "codex", "prompt": "fix it", "effort": effort});
        parse_agent(&server, args.as_object().unwrap())
    }

    #[test]
    fn a_model_supplied_effort_must_be_a_plain_word() {
        assert!(call("high").is_ok());
        // Codex gets the effort inside a TOML string: a quote must not end it.
        let err = call("high\" model_provider=\"elsewhere").unwrap_err();
        assert!(
            err.0.starts_with("`agent`: invalid reasoning effort"),
            "{}",
            err.0
        );
        assert!(call("-x").is_err());
    }

    #[test]
    fn the_gemini_harness_is_offered_and_refuses_an_effort() {
        let schema = serde_json::Value::Object((*agent_tool().input_schema).clone());
        let names = &schema["properties"]["harness"]["enum"];
        assert!(
            names.as_array().unwrap().iter().any(|n| n == "gemini"),
            "{names}"
        );
        let dir = tempfile::tempdir().unwrap();
        let store = agentrun_fs::Store::open(dir.path().join("store")).unwrap();
        let server = McpServer::builder(store).allow_all().build().unwrap();
        let parse = |args: serde_json::Value| parse_agent(&server, args.as_object().unwrap());
        let (options, _) = parse(serde_json::json!({"harness": "gemini", "prompt": "-x"})).unwrap();
        assert_eq!(options.harness(), Harness::Gemini);
        let err = parse(serde_json::json!({"harness": "gemini", "prompt": "p", "effort": "high"}))
            .unwrap_err();
        assert!(
            err.0.contains("gemini takes no reasoning effort"),
            "{}",
            err.0
        );
    }
}
