//! The `compact` tool: the library's compaction call (`Runner::compact`) on a transcript file,
//! its summarizer an allowed harness or an allowed command, answered with the summary and a
//! read hint for every artifact the compaction retained.

use agentrun_process::error_chain;
use std::fmt::Write as _;
use std::future::IntoFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentrun_core::compaction::{Attempt, AttemptResult, Failed};
use agentrun_core::harness::Harness;
use agentrun_core::process::RunOptions;
use agentrun_core::{ArtifactUri, Continuation, ModelRead, ReadSyntax};
use agentrun_process::{
    AgentOptions, CompactError, CompactEvent, CompactOptions, CompactRun, Summarizer,
    TranscriptInput,
};
use agentrun_tokio::Runner;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, JsonObject, Resource, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::args::{ArgError, Args};
use crate::progress::{Watch, report_progress};
use crate::render::{self, push_answer};
use crate::tools::{object, retain_text, stop_future, tool_error};
use crate::{MAX_TIMEOUT, McpServer};

const COMPACT_DESCRIPTION: &str = "\
Compact a conversation transcript (a JSON file in the Anthropic Messages shape: \
{\"messages\": [...], \"summary\"?, \"recent_start\"?}) into a summary that can replace it. \
The whole history is summarized first; only when that input is too large for the summarizer \
is it retried, once, with every tool output moved into an artifact and replaced by a \
read(filePath=\"artifact://...\") reference. The summarizer is an agent CLI (`harness`, with \
an optional `model`) or a program (`summarizer`, an argv array: it gets the input on stdin \
and answers on stdout, or prints a line `agentrun:context-length-exceeded` and exits non-zero \
when the input is too long). The result gives the summary and a read hint for each retained \
tool output, which the `read` tool pages. The transcript file is only read. Only harnesses \
and programs the server allows can run.";

/// The `compact` tool's definition.
pub(crate) fn compact_tool() -> Tool {
    let names: Vec<&str> = Harness::ALL.iter().map(|h| h.name()).collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "transcriptPath": {
                "type": "string",
                "minLength": 1,
                "description": "The transcript file to compact (relative paths are the server's working directory's). Never modified."
            },
            "harness": {
                "type": "string",
                "enum": names,
                "description": "Summarize with this agent CLI. Give this or `summarizer`."
            },
            "model": {
                "type": "string",
                "description": "With `harness`: the model to request, passed verbatim (default: the agent's)."
            },
            "summarizer": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "Summarize with this program and its arguments, e.g. [\"llm\", \"-m\", \"gpt-4o-mini\"] (never through a shell). Give this or `harness`."
            },
            "maxInputBytes": {
                "type": "integer",
                "minimum": 1,
                "description": "Reject a summarizer input longer than this without running the summarizer; counts as too large (the pruned retry follows)."
            },
            "timeout_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT.as_secs(),
                "description": "Stop each summarizer run after this many seconds (default: the server's timeout)."
            }
        },
        "required": ["transcriptPath"],
        "additionalProperties": false
    });
    Tool::new("compact", COMPACT_DESCRIPTION, object(schema)).annotate(
        ToolAnnotations::with_title("Compact a transcript into a summary")
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(true),
    )
}

/// A valid `compact` call.
struct CompactCall {
    transcript: PathBuf,
    options: CompactOptions,
    timeout: Duration,
}

fn parse_compact(server: &McpServer, map: &JsonObject) -> Result<CompactCall, ArgError> {
    let inner = &server.inner;
    let args = Args::new(
        "compact",
        map,
        &[
            "transcriptPath",
            "harness",
            "model",
            "summarizer",
            "maxInputBytes",
            "timeout_seconds",
        ],
    )?;
    let transcript = args.string("transcriptPath")?;
    if transcript.is_empty() || transcript.contains('\0') {
        return Err(ArgError(
            "`compact` argument `transcriptPath` must name a file (non-empty, no NUL byte)"
                .to_owned(),
        ));
    }
    let timeout = args
        .opt_u64("timeout_seconds", 1, MAX_TIMEOUT.as_secs())?
        .map_or(inner.default_timeout, Duration::from_secs);
    let harness = args.opt_string("harness")?;
    let model = args.opt_string("model")?;
    let summarizer = match (harness, map.contains_key("summarizer")) {
        (Some(_), true) | (None, false) => {
            return Err(ArgError(
                "`compact` needs exactly one summarizer: `harness` (an agent CLI such as \
                 \"claude\") or `summarizer` (a program and its arguments)"
                    .to_owned(),
            ));
        }
        (Some(name), false) => {
            let harness =
                Harness::from_name(name).map_err(|e| ArgError(format!("`compact`: {e}")))?;
            let mut agent = AgentOptions::new(harness, "");
            if let Some(model) = model {
                agent = agent.model(model);
            }
            // The harness's own program (claude, codex, …) is what must be allowed; a model
            // the harness would misread is the caller's mistake, reported as one.
            let program = agent
                .run_options()
                .map_err(|e| ArgError(format!("`compact`: {e}")))?
                .get_program()
                .to_owned();
            if let Some(executable) = inner.check_allowed(&program.to_string_lossy())? {
                agent = agent.program(executable);
            }
            if let Some(path) = &inner.child_path {
                agent = agent.env("PATH", path);
            }
            Summarizer::Agent(agent)
        }
        (None, true) => {
            if model.is_some() {
                return Err(ArgError(
                    "`compact` argument `model` goes with `harness`; a `summarizer` program \
                     takes its model in its own arguments"
                        .to_owned(),
                ));
            }
            let mut argv = args.string_array("summarizer", "[\"llm\", \"-m\", \"gpt-4o-mini\"]")?;
            let program = argv.remove(0);
            if program.is_empty() || argv.iter().chain([&program]).any(|a| a.contains('\0')) {
                return Err(ArgError(
                    "`compact` argument `summarizer` must name a program (non-empty, no NUL \
                     byte in it or its arguments)"
                        .to_owned(),
                ));
            }
            let executable = match inner.check_allowed(&program)? {
                Some(path) => path.into_os_string(),
                None => program.into(),
            };
            let mut command = RunOptions::new(executable).args(&argv);
            if let Some(path) = &inner.child_path {
                command = command.env("PATH", path);
            }
            Summarizer::Command(command)
        }
    };
    let mut options = CompactOptions::new(summarizer).timeout(timeout);
    if let Some(n) = args.opt_u64("maxInputBytes", 1, u64::MAX)? {
        options = options.max_input_bytes(usize::try_from(n).unwrap_or(usize::MAX));
    }
    Ok(CompactCall {
        transcript: PathBuf::from(transcript),
        options,
        timeout,
    })
}

/// One line per attempt, for the result.
fn attempts_text(attempts: &[Attempt]) -> String {
    let mut out = String::new();
    for attempt in attempts {
        let result = match &attempt.result {
            AttemptResult::Summarized => "summarized".to_owned(),
            AttemptResult::DoesNotFit { detail } => format!("did not fit ({detail})"),
            AttemptResult::ContextLength { detail } => {
                format!(
                    "too long for the summarizer ({})",
                    render::diagnostic(detail)
                )
            }
            AttemptResult::Failed { detail } => format!("failed ({})", render::diagnostic(detail)),
            AttemptResult::InvalidSummary { detail } => format!("not a usable summary ({detail})"),
            other => format!("{other:?}"),
        };
        let _ = writeln!(
            out,
            "[{} attempt: {} bytes of input, {result}]",
            attempt.kind.as_str(),
            attempt.input_bytes
        );
    }
    out
}

/// The read hints of a successful compaction: one per reference of the retry input, then the
/// artifacts the compaction's record keeps besides.
fn hints_text(done: &CompactRun) -> String {
    let mut out = String::new();
    let from_start = |uri: &ArtifactUri| ModelRead.read_call(uri, Continuation::Line(0));
    for reference in &done.references {
        // A reference names an artifact the compaction wrote itself, so it always parses.
        let read = ArtifactUri::parse(&reference.uri)
            .map_or_else(|_| reference.uri.clone(), |uri| from_start(&uri));
        let _ = writeln!(
            out,
            "[tool output of {} retained: {read}]",
            render::clip(&reference.tool_use_id, 128),
        );
    }
    if let Some(retained) = &done.retained {
        for uri in &retained.kept {
            if !done.references.iter().any(|r| r.uri == uri.to_string()) {
                let _ = writeln!(out, "[also kept: {}]", from_start(uri));
            }
        }
        let _ = writeln!(
            out,
            "[The compaction's record {} keeps these {} artifact(s) together]",
            retained.run_id,
            retained.kept.len()
        );
    }
    out
}

/// A resource link for each artifact the compaction kept (the retained tool outputs first), as
/// many as fit `budget` bytes of serialized content: a client that follows links reads them
/// with `resources/read`, one that does not has the same URIs in the read hints.
fn resource_links(done: &CompactRun, budget: usize) -> Vec<ContentBlock> {
    let mut uris: Vec<(String, String)> = done
        .references
        .iter()
        .map(|r| {
            let name = format!("tool output of {}", render::clip(&r.tool_use_id, 128));
            (r.uri.clone(), name)
        })
        .collect();
    if let Some(retained) = &done.retained {
        for uri in &retained.kept {
            let uri = uri.to_string();
            if !uris.iter().any(|(u, _)| *u == uri) {
                uris.push((uri, "artifact kept by the compaction".to_owned()));
            }
        }
    }
    let mut left = budget;
    let mut links = Vec::new();
    for (uri, name) in uris {
        let link = ContentBlock::resource_link(
            Resource::new(uri, name).with_mime_type("text/plain; charset=utf-8"),
        );
        let size = serde_json::to_string(&link).map_or(usize::MAX, |s| s.len() + 1);
        if size > left {
            break;
        }
        left -= size;
        links.push(link);
    }
    links
}

fn success_json(done: &CompactRun, summary_artifact: Option<String>) -> Value {
    json!({
        "summary": done.summary,
        "summary_artifact": summary_artifact,
        "attempts": serde_json::to_value(&done.attempts).unwrap_or_default(),
        "retried": done.attempts.len() > 1,
        "retry_reason": done.retry_reason(),
        "references": done.references.iter().map(|r| json!({
            "tool_use_id": r.tool_use_id,
            "message": r.message,
            "block": r.block,
            "uri": r.uri,
            "existing": r.existing,
            "read": {"filePath": r.uri, "offset": 0},
        })).collect::<Vec<_>>(),
        "omitted_artifact_reads": done.omitted_artifact_reads,
        "retained": done.retained.as_ref().map(|r| json!({
            "run_id": r.run_id,
            "stored": r.stored.iter().map(|d| format!("artifact://{d}")).collect::<Vec<_>>(),
            "kept": r.kept.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })),
    })
}

fn failure_json(failed: &Failed, message: &str) -> Value {
    json!({
        "error": message,
        "attempts": serde_json::to_value(&failed.attempts).unwrap_or_default(),
        "retried": failed.attempts.len() > 1,
        "retry_reason": agentrun_process::retry_reason(&failed.attempts),
    })
}

impl McpServer {
    pub(crate) async fn call_compact(
        &self,
        map: &JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match parse_compact(self, map) {
            Ok(call) => call,
            Err(e) => return Ok(e.into()),
        };
        let watch = Arc::new(Watch::default());
        let progress = {
            let watch = watch.clone();
            move |event: &CompactEvent| watch.progress_line(&event.to_string())
        };
        let runner = Runner::new(self.inner.store.clone());
        let compaction = runner
            .compact(TranscriptInput::Path(call.transcript), call.options)
            .on_progress(progress)
            .into_future();
        let stop = stop_future(&self.inner, &context);
        let report = report_progress(&context, &watch, call.timeout);
        // A cancelled call drops the compaction: its summarizer run is stopped with it (the
        // driver's drop guard stops the process group) and nothing is compacted.
        let outcome = tokio::select! {
            outcome = compaction => outcome,
            () = stop => return Ok(tool_error("`compact` was cancelled; the transcript is unchanged")),
            never = report => match never {},
        };
        let max = self.inner.limits.max_payload_bytes;
        match outcome {
            Ok(done) => {
                let head = format!("[Compaction succeeded]\n{}", attempts_text(&done.attempts));
                let tail = hints_text(&done);
                let room = max.saturating_sub(head.len() + tail.len());
                let answer = retain_text(&self.inner, done.summary.clone(), room).await?;
                let mut text = head;
                push_answer(&mut text, &answer, "Summary", "summary", room);
                text.push_str(&tail);
                let text = render::fit(text, max);
                // The links share what the text left of the payload bound, at most a quarter
                // of it: a result stays within the bound however many artifacts were kept.
                let links = resource_links(&done, max.saturating_sub(text.len()).min(max / 4));
                let mut content = vec![ContentBlock::text(text)];
                content.extend(links);
                let mut out = CallToolResult::success(content);
                if self.inner.structured_content {
                    let artifact = match &answer {
                        render::Answer::Retained(record) => Some(record.output_uri().to_string()),
                        _ => None,
                    };
                    out.structured_content =
                        Some(render::bound_structured(success_json(&done, artifact), max));
                }
                Ok(out)
            }
            Err(CompactError::Compaction(failed)) => {
                let message = error_chain(&*failed);
                let text = format!(
                    "[Compaction failed: {}; the transcript is unchanged]\n{}",
                    render::clip(&message, render::MAX_ERROR_BYTES),
                    attempts_text(&failed.attempts)
                );
                let mut out =
                    CallToolResult::error(vec![ContentBlock::text(render::fit(text, max))]);
                if self.inner.structured_content {
                    out.structured_content = Some(render::bound_structured(
                        failure_json(&failed, &message),
                        max,
                    ));
                }
                Ok(out)
            }
            Err(e) => Ok(tool_error(format!(
                "`compact` cannot run: {}",
                error_chain(&e)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: Value, allow: &[&str]) -> Result<CompactCall, ArgError> {
        let dir = tempfile::tempdir().unwrap();
        let store = agentrun_fs::Store::open(dir.path().join("store")).unwrap();
        let mut builder = McpServer::builder(store);
        for a in allow {
            builder = builder.allow(*a);
        }
        let server = builder.build().unwrap();
        parse_compact(&server, args.as_object().unwrap())
    }

    #[test]
    fn exactly_one_summarizer_is_required() {
        let none = parse(json!({"transcriptPath": "t.json"}), &["sh"])
            .err()
            .unwrap();
        assert!(none.0.contains("exactly one summarizer"), "{}", none.0);
        let both = parse(
            json!({"transcriptPath": "t.json", "harness": "claude", "summarizer": ["sh"]}),
            &["sh", "claude"],
        )
        .err()
        .unwrap();
        assert!(both.0.contains("exactly one summarizer"), "{}", both.0);
    }

    #[test]
    fn the_summarizer_program_must_be_allowed() {
        let refused = parse(
            json!({"transcriptPath": "t.json", "summarizer": ["llm", "-m", "x"]}),
            &["sh"],
        )
        .err()
        .unwrap();
        assert!(refused.0.contains("`llm` is not allowed"), "{}", refused.0);
        let refused = parse(
            json!({"transcriptPath": "t.json", "harness": "codex"}),
            &["sh"],
        )
        .err()
        .unwrap();
        assert!(
            refused.0.contains("`codex` is not allowed"),
            "{}",
            refused.0
        );
        assert!(
            parse(
                json!({"transcriptPath": "t.json", "summarizer": ["sh", "-c", "cat"]}),
                &["sh"]
            )
            .is_ok()
        );
    }

    #[test]
    fn a_model_goes_with_a_harness_only() {
        let e = parse(
            json!({"transcriptPath": "t.json", "summarizer": ["sh"], "model": "m"}),
            &["sh"],
        )
        .err()
        .unwrap();
        assert!(e.0.contains("`model` goes with `harness`"), "{}", e.0);
        let e = parse(
            json!({"transcriptPath": "t.json", "harness": "claude", "model": "-x"}),
            &["claude"],
        )
        .err()
        .unwrap();
        assert!(e.0.contains("invalid model"), "{}", e.0);
    }
}
