//! The `fanout` tool: several coding agents on one task at once through the library's
//! fan-out (`agentrun_tokio::Runner::fanout`), each in its own git worktree (or private copy),
//! each verified; the answer is the fan-out record: which attempt won, its branch and
//! worktree, and what each attempt reached.

use std::fmt::Write as _;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use agentrun_core::fanout::{FanOutRecord, Selection};
use agentrun_process::{AttemptSpec, FanOutEvent, FanOutOptions};
use agentrun_tokio::Runner;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde_json::json;

use crate::args::{ArgError, Args};
use crate::progress::{Watch, report_progress};
use crate::render;
use crate::tools::{object, stop_future, tool_error};
use crate::{MAX_TIMEOUT, McpServer};

const FANOUT_DESCRIPTION: &str = "\
Give one task to several coding agents at once (attempts \"harness\" or \"harness:model\", e.g. \
[\"claude:opus\", \"claude:sonnet\", \"codex\"]), each in its own git worktree on a new branch \
agentrun/<fanout id>/<n> (outside a repository: a private copy), so they never interfere. With \
`verify` (a shell command run in each attempt's worktree) the first attempt that passes wins \
and the others are stopped (select \"all\": every attempt runs to its end). The result names \
the winner's branch and worktree (kept, ready to merge) and what every attempt reached; the \
losers' worktrees are removed unless `keep`. The caller's workspace is never changed. Only \
harnesses the server allows can run, and `verify` needs `sh` allowed.";

/// The `fanout` tool's definition.
pub(crate) fn fanout_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "attempts": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "One entry per attempt: a harness name, optionally followed by `:` and the model, e.g. \"claude:opus\"."
            },
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "The task every attempt gets (with `auto`: the objective)."
            },
            "verify": {
                "type": "string",
                "description": "A shell command run in each attempt's worktree after it finishes; exit 0 means the attempt passed, e.g. \"cargo test\"."
            },
            "select": {
                "type": "string",
                "enum": ["first-verified", "all"],
                "description": "first-verified (default): the first attempt that passes wins and the others are stopped; all: every attempt runs to its end."
            },
            "jobs": {
                "type": "integer",
                "minimum": 1,
                "maximum": 64,
                "description": "At most this many attempts at once (default: all of them, at most 8)."
            },
            "auto": {
                "type": "boolean",
                "description": "Each attempt is a whole auto-mode session (clarify, plan, execute, evaluate) instead of one agent run."
            },
            "max_turns": {
                "type": "integer",
                "minimum": 3,
                "maximum": 1000,
                "description": "With auto: each session's last turn."
            },
            "keep": {
                "type": "boolean",
                "description": "Keep every attempt's worktree and branch, not only the winner's."
            },
            "harness_args": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Arguments passed verbatim to every attempt's harness, before the prompt."
            },
            "cwd": {
                "type": "string",
                "description": "The workspace (default: the server's directory)."
            },
            "timeout_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT.as_secs(),
                "description": "Stop each attempt's agent after this many seconds (default: the server's timeout)."
            }
        },
        "required": ["attempts", "prompt"],
        "additionalProperties": false
    });
    Tool::new("fanout", FANOUT_DESCRIPTION, object(schema)).annotate(
        ToolAnnotations::with_title("Race several coding agents on one task")
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

/// The options of a valid `fanout` call, with each attempt's timeout.
fn parse_fanout(
    server: &McpServer,
    map: &JsonObject,
) -> Result<(FanOutOptions, Duration), ArgError> {
    let args = Args::new(
        "fanout",
        map,
        &[
            "attempts",
            "prompt",
            "verify",
            "select",
            "jobs",
            "auto",
            "max_turns",
            "keep",
            "harness_args",
            "cwd",
            "timeout_seconds",
        ],
    )?;
    let attempts = args
        .string_array("attempts", r#"["claude:opus", "codex"]"#)?
        .iter()
        .map(|a| AttemptSpec::parse(a).map_err(|e| ArgError(format!("`fanout` attempt: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let prompt = args.string("prompt")?;
    if prompt.trim().is_empty() {
        return Err(ArgError("`fanout` argument `prompt` is empty".to_owned()));
    }
    // Each harness's own program (claude, codex, …) is what must be allowed.
    for attempt in &attempts {
        server.inner.check_allowed(attempt.harness.name())?;
    }
    let timeout = args
        .opt_u64("timeout_seconds", 1, MAX_TIMEOUT.as_secs())?
        .map_or(server.inner.default_timeout, Duration::from_secs);
    let mut options = FanOutOptions::new(attempts, prompt).timeout(timeout);
    if let Some(verify) = args.opt_string("verify")? {
        // A verification is a shell command: it may run only where the shell may.
        server.inner.check_allowed("sh")?;
        options = options.verify(verify);
    }
    if let Some(select) = args.opt_string("select")? {
        let select =
            Selection::from_name(select).map_err(|e| ArgError(format!("`fanout`: {e}")))?;
        options = options.select(select);
    }
    if let Some(jobs) = args.opt_u64("jobs", 1, 64)? {
        options = options.jobs(usize::try_from(jobs).unwrap_or(64));
    }
    if let Some(auto) = args.opt_bool("auto")? {
        options = options.auto(auto);
    }
    if let Some(turns) = args.opt_u64("max_turns", 3, 1000)? {
        options = options.max_turns(u32::try_from(turns).unwrap_or(1000));
    }
    if let Some(keep) = args.opt_bool("keep")? {
        options = options.keep(keep);
    }
    if map.contains_key("harness_args") {
        for arg in args.string_array("harness_args", r#"["--permission-mode", "acceptEdits"]"#)? {
            options = options.harness_arg(arg);
        }
    }
    if let Some(dir) = args.opt_string("cwd")? {
        options = options.workspace(dir);
    }
    if let Some(path) = &server.inner.child_path {
        options = options.env("PATH", path);
    }
    Ok((options, timeout))
}

/// The text of a `fanout` result: the winner first, then one line per attempt.
fn summary(record: &FanOutRecord) -> String {
    let mut s = String::new();
    match record
        .winner
        .and_then(|w| record.attempts.get(w).map(|a| (w, a)))
    {
        Some((w, a)) => {
            let _ = write!(s, "[Fan-out {}: attempt {w} won", record.fanout_id);
            if let Some(branch) = &a.branch {
                let _ = write!(s, "; branch {branch} (merge it with `git merge {branch}`)");
            }
            if let Some(path) = &a.worktree {
                let _ = write!(s, "; worktree {path}");
            }
            s.push_str("]\n");
        }
        None => {
            let _ = writeln!(s, "[Fan-out {}: no attempt won]", record.fanout_id);
        }
    }
    for (n, a) in record.attempts.iter().enumerate() {
        let label = match &a.model {
            Some(m) => format!("{}:{m}", a.harness),
            None => a.harness.clone(),
        };
        let _ = write!(
            s,
            "{n}. {} — {}",
            render::clip(&label, 200),
            a.status.as_str()
        );
        match a.verified {
            Some(true) => s.push_str(", verified"),
            Some(false) => {
                let code = a.verification.as_ref().and_then(|v| v.exit_code);
                let _ = write!(s, ", verification failed (exit {code:?})");
            }
            None => {}
        }
        if let Some(c) = a.changes {
            let _ = write!(
                s,
                ", {} files (+{} -{})",
                c.files, c.insertions, c.deletions
            );
        }
        if let Some(kind) = a.failure_kind {
            let _ = write!(s, ", {}", kind.as_str());
        }
        s.push('\n');
    }
    s
}

impl McpServer {
    pub(crate) async fn call_fanout(
        &self,
        map: &JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let (options, timeout) = match parse_fanout(self, map) {
            Ok(parsed) => parsed,
            Err(e) => return Ok(e.into()),
        };
        let watch = Arc::new(Watch::default());
        let events = {
            let watch = watch.clone();
            move |event: FanOutEvent<'_>| {
                if let FanOutEvent::Progress { attempt, line } = event {
                    watch.progress_line(&format!("[{attempt}] {line}"));
                }
            }
        };
        let runner = Runner::new(self.inner.store.clone());
        let run = runner
            .fanout(options)
            .on_event(events)
            .stop_on(stop_future(&self.inner, &context))
            .into_future();
        let report = report_progress(&context, &watch, timeout);
        let run = tokio::select! {
            run = run => run,
            never = report => match never {},
        };
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                return Ok(tool_error(format!(
                    "the fan-out could not run: {}",
                    agentrun_tokio::error_chain(&e)
                )));
            }
        };
        let max = self.inner.limits.max_payload_bytes;
        let mut text = summary(&run.record);
        for (n, why) in &run.errors {
            let _ = writeln!(text, "[attempt {n}: {}]", render::clip(why, 500));
        }
        if let Some(e) = &run.record_error {
            let _ = writeln!(
                text,
                "[the record could not be kept: {}]",
                agentrun_tokio::error_chain(e)
            );
        }
        let mut out = CallToolResult::success(vec![ContentBlock::text(render::fit(text, max))]);
        out.is_error = Some(run.record.winner.is_none());
        if self.inner.structured_content {
            out.structured_content = serde_json::to_value(&run.record)
                .ok()
                .map(|value| render::bound_structured(value, max));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(allow: &[&str]) -> McpServer {
        let dir = tempfile::tempdir().unwrap();
        let store = agentrun_fs::Store::open(dir.keep().join("store")).unwrap();
        let mut builder = McpServer::builder(store);
        if allow.is_empty() {
            builder = builder.allow_all();
        }
        for program in allow {
            builder = builder.allow(*program);
        }
        builder.build().unwrap()
    }

    fn parse(server: &McpServer, args: serde_json::Value) -> Result<FanOutOptions, ArgError> {
        parse_fanout(server, args.as_object().unwrap()).map(|(o, _)| o)
    }

    #[test]
    fn attempts_are_parsed_and_bad_ones_named() {
        let s = server(&[]);
        let o = parse(
            &s,
            json!({"attempts": ["claude:opus", "codex"], "prompt": "fix", "select": "all"}),
        )
        .unwrap();
        assert_eq!(o.attempts().len(), 2);
        let err = parse(&s, json!({"attempts": ["nope"], "prompt": "fix"})).unwrap_err();
        assert!(err.0.starts_with("`fanout` attempt:"), "{}", err.0);
        let err = parse(&s, json!({"attempts": [], "prompt": "fix"})).unwrap_err();
        assert!(err.0.contains("non-empty array"), "{}", err.0);
        let err = parse(
            &s,
            json!({"attempts": ["codex"], "prompt": "x", "select": "best"}),
        )
        .unwrap_err();
        assert!(err.0.contains("unknown selection"), "{}", err.0);
    }

    #[test]
    fn harnesses_and_the_verification_shell_must_be_allowed() {
        let s = server(&["git"]);
        let err = parse(&s, json!({"attempts": ["claude"], "prompt": "fix"})).unwrap_err();
        assert!(err.0.contains("`claude` is not allowed"), "{}", err.0);
        assert!(fanout_tool().input_schema.contains_key("properties"));
    }
}
