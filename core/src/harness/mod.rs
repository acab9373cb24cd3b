//! Harness stream interpretation (SPEC §8 and §12): six agent CLIs behind one evidence
//! interface.
//!
//! * [`Harness`] is the registry: for each of Claude Code, Grok, Antigravity (`agy`), Codex,
//!   Muse and OpenCode it gives the launch [`Invocation`] for a [`LaunchRequest`], the
//!   [`StopSignals`] and a [`StreamDecoder`].
//! * A [`StreamDecoder`] turns one raw line into a [`StreamUpdate`] (progress lines plus
//!   semantic [`Evidence`]) and, consumed, into the completion [`Facts`]. All protocol
//!   knowledge of a dialect lives in its decoder; Claude and Grok share one Claude-shaped
//!   decoder with private dialect differences.
//! * [`Interpretation`] is the one interface callers use: it feeds lines to the decoder,
//!   applies the evidence to the shared model and security policy, and completes into a
//!   report and an outcome (see its documentation for the driving order).
//! * [`retained`] holds the pure parsers of the retained records (the Muse session log and the
//!   OpenCode session export); reading them is the driver's job.
//!
//! Nothing here performs I/O: lines come in as `&[u8]`, values come out.

use std::collections::BTreeSet;
use std::fmt;

mod antigravity;
mod claude;
mod codex;
#[doc(hidden)]
pub mod fuzzing;
mod gemini;
pub mod interpretation;
mod json;
mod muse;
mod opencode;
pub mod progress;
pub mod retained;
mod usage;

pub use interpretation::{
    Completion, Finished, HarnessExit, Interrupted, Outcome, OutcomeStatus, OversizedLines, Report,
    TurnSummary, UNFINISHED, UNREADABLE_END,
};
pub use json::{MAX_JSON_DEPTH, MAX_JSON_DOCUMENT_VALUES, MAX_JSON_VALUES};
pub use retained::{RetainedError, RetainedKind, RetainedRecord, RetainedRequest};
pub use usage::{Usage, UsageLedger, UsageScope};

/// The one interface callers use; see [`interpretation::Interpretation`].
pub use interpretation::Interpretation;

/// One of the six supported agent CLIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Harness {
    /// Claude Code (`claude -p --output-format stream-json`).
    Claude,
    /// Grok CLI (`grok --output-format streaming-messages-json`, or its ACP `streaming-json`).
    Grok,
    /// Antigravity (`agy -p --output-format stream-json`).
    Antigravity,
    /// OpenAI Codex (`codex exec --json`).
    Codex,
    /// Muse (`muse exec --json`).
    Muse,
    /// OpenCode (`opencode run --format json`).
    OpenCode,
    /// Gemini CLI (`gemini --output-format stream-json`).
    Gemini,
}

/// Error for a harness name that is not in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown harness {0:?}; expected one of claude, grok, agy (antigravity), codex, muse, opencode, \
     gemini"
)]
pub struct UnknownHarness(pub String);

impl Harness {
    /// All harnesses, in registry order.
    pub const ALL: [Harness; 7] = [
        Harness::Claude,
        Harness::Grok,
        Harness::Antigravity,
        Harness::Codex,
        Harness::Muse,
        Harness::OpenCode,
        Harness::Gemini,
    ];

    /// The canonical short name (`claude`, `grok`, `agy`, `codex`, `muse`, `opencode`).
    pub fn name(self) -> &'static str {
        match self {
            Harness::Claude => "claude",
            Harness::Grok => "grok",
            Harness::Antigravity => "agy",
            Harness::Codex => "codex",
            Harness::Muse => "muse",
            Harness::OpenCode => "opencode",
            Harness::Gemini => "gemini",
        }
    }

    /// Looks a harness up by name, case-insensitively; `antigravity` is an alias of `agy`.
    pub fn from_name(name: &str) -> Result<Harness, UnknownHarness> {
        let lower = name.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "claude" | "claude-code" => Harness::Claude,
            "grok" => Harness::Grok,
            "agy" | "antigravity" => Harness::Antigravity,
            "codex" => Harness::Codex,
            "muse" => Harness::Muse,
            "opencode" => Harness::OpenCode,
            "gemini" | "gemini-cli" => Harness::Gemini,
            _ => return Err(UnknownHarness(name.to_owned())),
        })
    }

    /// The launch invocation for a prompt with optional model, effort and resume id.
    /// Options a harness has no flag for (effort for Antigravity and Muse) are left out.
    ///
    /// The prompt is data, never a flag or a subcommand: it comes after `--` (Claude Code,
    /// Antigravity, Codex, Muse), joined to its option as `--single=PROMPT` (Grok), or on
    /// stdin (OpenCode), so a prompt such as `-x`, `--help me`, `help` or `resume` reaches the
    /// model verbatim.
    ///
    /// # Errors
    /// [`LaunchError::InvalidModel`] when the model is empty, starts with `-` (it would be read
    /// as a flag), holds a control character or is longer than 256 characters.
    /// [`LaunchError::EffortUnsupported`] for Gemini CLI, which takes no effort on its command
    /// line (its thinking is configured per model in its settings).
    /// [`LaunchError::InvalidEffort`] when the effort could be read as something else than an
    /// effort: Codex gets it inside a TOML string (`-c model_reasoning_effort="E"`), so it
    /// must be a lowercase word (`[a-z]+`); the others get it as an argument of its own, which
    /// must be a word of lowercase letters, digits, `-` and `_` not starting with `-`.
    pub fn invocation(self, request: &LaunchRequest) -> Result<Invocation, LaunchError> {
        if let Some(effort) = &request.effort {
            check_effort(self, effort)?;
        }
        if let Some(model) = &request.model {
            check_model(self, model)?;
        }
        let mut args: Vec<String> = Vec::new();
        let mut env = Vec::new();
        let mut stdin = Stdin::Null;
        let push = |args: &mut Vec<String>, flag: &str, value: &Option<String>| {
            if let Some(v) = value {
                args.push(flag.to_owned());
                args.push(v.clone());
            }
        };
        let program = match self {
            Harness::Claude => {
                args.extend(
                    ["-p", "--output-format", "stream-json", "--verbose"].map(String::from),
                );
                push(&mut args, "--model", &request.model);
                push(&mut args, "--effort", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--resume", &request.resume);
                args.push("--".to_owned());
                args.push(request.prompt.clone());
                "claude"
            }
            Harness::Grok => {
                args.extend(["--output-format", "streaming-messages-json"].map(String::from));
                push(&mut args, "-m", &request.model);
                push(&mut args, "--reasoning-effort", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "-r", &request.resume);
                // `-p, --single <PROMPT>`: joined to the long option with `=`, the prompt is
                // its value even when it starts with `-` (a separate `-p -x` would be read
                // as the flag `-x` by most argument parsers).
                args.push(format!("--single={}", request.prompt));
                env.push(("GROK_DISABLE_AUTOUPDATER".to_owned(), "1".to_owned()));
                "grok"
            }
            Harness::Antigravity => {
                args.extend(["-p", "--output-format", "stream-json"].map(String::from));
                push(&mut args, "--model", &request.model);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--conversation", &request.resume);
                args.push("--".to_owned());
                args.push(request.prompt.clone());
                env.push(("AGY_CLI_DISABLE_AUTO_UPDATE".to_owned(), "true".to_owned()));
                "agy"
            }
            Harness::Codex => {
                args.extend(["exec", "--json"].map(String::from));
                if request.skip_git_repo_check {
                    args.push("--skip-git-repo-check".to_owned());
                }
                push(&mut args, "-m", &request.model);
                if let Some(effort) = &request.effort {
                    args.push("-c".to_owned());
                    args.push(format!("model_reasoning_effort=\"{effort}\""));
                }
                args.extend(request.harness_args.iter().cloned());
                if let Some(id) = &request.resume {
                    args.push("resume".to_owned());
                    args.push(id.clone());
                }
                args.push("--".to_owned());
                args.push(request.prompt.clone());
                "codex"
            }
            Harness::Muse => {
                args.extend(["exec", "--json"].map(String::from));
                push(&mut args, "--model", &request.model);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--session-id", &request.resume);
                args.push("--".to_owned());
                args.push(request.prompt.clone());
                env.push(("MUSE_NO_AUTO_UPDATE".to_owned(), "1".to_owned()));
                "muse"
            }
            Harness::OpenCode => {
                args.extend(["run", "--format", "json"].map(String::from));
                push(&mut args, "-m", &request.model);
                push(&mut args, "--variant", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "-s", &request.resume);
                stdin = Stdin::Prompt(request.prompt.clone());
                env.push(("OPENCODE_DISABLE_AUTOUPDATE".to_owned(), "1".to_owned()));
                "opencode"
            }
            Harness::Gemini => {
                gemini::launch(request, &mut args, &mut env)?;
                "gemini"
            }
        };
        Ok(Invocation {
            program: program.to_owned(),
            args,
            env,
            stdin,
        })
    }

    /// How a driver stops this harness: send the signals in order, waiting the driver's grace
    /// period between them, then kill the process group. Codex gets SIGINT first (it ends
    /// its turn and writes its session file on it); the others SIGTERM.
    pub fn stop_signals(self) -> StopSignals {
        match self {
            Harness::Codex => StopSignals {
                sequence: &[StopSignal::Interrupt, StopSignal::Terminate],
            },
            Harness::Claude
            | Harness::Grok
            | Harness::Antigravity
            | Harness::Muse
            | Harness::OpenCode
            | Harness::Gemini => StopSignals {
                sequence: &[StopSignal::Terminate],
            },
        }
    }

    /// A fresh stream decoder for this harness's dialect.
    pub fn decoder(self) -> Box<dyn StreamDecoder + Send> {
        match self {
            Harness::Claude => Box::new(claude::ClaudeDecoder::new(claude::Dialect::Claude)),
            Harness::Grok => Box::new(claude::ClaudeDecoder::new(claude::Dialect::Grok)),
            Harness::Antigravity => Box::new(antigravity::AgyDecoder::default()),
            Harness::Codex => Box::new(codex::CodexDecoder::default()),
            Harness::Muse => Box::new(muse::MuseDecoder::default()),
            Harness::OpenCode => Box::new(opencode::OpenCodeDecoder::default()),
            Harness::Gemini => Box::new(gemini::GeminiDecoder::default()),
        }
    }

    /// The retained record that is authoritative for models and usage when readable, if the
    /// harness has one.
    pub fn retained_kind(self) -> Option<RetainedKind> {
        match self {
            Harness::Muse => Some(RetainedKind::MuseSessionLog),
            Harness::OpenCode => Some(RetainedKind::OpenCodeExport),
            Harness::Codex => Some(RetainedKind::CodexSession),
            Harness::Gemini => Some(RetainedKind::GeminiSessionLog),
            _ => None,
        }
    }
}

impl fmt::Display for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Harness {
    type Err = UnknownHarness;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Harness::from_name(s)
    }
}

/// Longest accepted reasoning effort.
const MAX_EFFORT_CHARS: usize = 64;

/// Whether `effort` can be passed to `harness` without being read as something else.
/// Longest model name accepted, in characters.
const MAX_MODEL_CHARS: usize = 256;

/// A model goes out as the value of its own argument (`--model M`, `-m M`): it must not be
/// readable as a flag, and a model supplied by another model (the MCP `agent` tool) must not
/// smuggle control characters into a harness's argument parser.
fn check_model(harness: Harness, model: &str) -> Result<(), LaunchError> {
    let ok = !model.is_empty()
        && !model.starts_with('-')
        && !model.chars().any(char::is_control)
        && model.chars().count() <= MAX_MODEL_CHARS;
    if ok {
        Ok(())
    } else {
        Err(LaunchError::InvalidModel {
            harness,
            model: model.chars().take(MAX_MODEL_CHARS).collect(),
        })
    }
}

fn check_effort(harness: Harness, effort: &str) -> Result<(), LaunchError> {
    let (ok, expected) = match harness {
        // Codex's effort is interpolated into a TOML string: letters only, so no quote,
        // backslash or newline can end the string early.
        Harness::Codex => (
            !effort.is_empty() && effort.bytes().all(|b| b.is_ascii_lowercase()),
            "expected a lowercase word such as minimal, low, medium, high or xhigh",
        ),
        _ => (
            effort
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && effort.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                }),
            "expected a word of lowercase letters, digits, '-' and '_' such as low, medium or high",
        ),
    };
    if ok && effort.chars().count() <= MAX_EFFORT_CHARS {
        Ok(())
    } else {
        Err(LaunchError::InvalidEffort {
            harness,
            effort: effort.chars().take(MAX_EFFORT_CHARS).collect(),
            expected,
        })
    }
}

/// Why a [`LaunchRequest`] cannot be turned into an [`Invocation`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The model name could be read as a flag, or is not a name at all.
    #[error(
        "invalid model {model:?} for {harness}: expected a model name (not empty, not starting \
         with '-', no control characters, at most 256 characters)"
    )]
    InvalidModel {
        /// The harness.
        harness: Harness,
        /// The model (at most its first 256 characters).
        model: String,
    },
    /// The reasoning effort is not a plain word (it could be read as a flag or break out of
    /// the configuration value it is passed in).
    #[error("invalid reasoning effort {effort:?} for {harness}: {expected}")]
    InvalidEffort {
        /// The harness.
        harness: Harness,
        /// The effort (at most its first 64 characters).
        effort: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The harness has no way to take a reasoning effort at launch.
    #[error("{harness} cannot take a reasoning effort at launch: {why}")]
    EffortUnsupported {
        /// The harness.
        harness: Harness,
        /// Why, and what to do instead.
        why: &'static str,
    },
}

/// What to launch: a prompt with optional model, effort and resume id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchRequest {
    /// The prompt.
    pub prompt: String,
    /// The requested model, passed verbatim.
    pub model: Option<String>,
    /// The requested reasoning effort, passed verbatim.
    pub effort: Option<String>,
    /// A session id to resume.
    pub resume: Option<String>,
    /// Arguments passed verbatim after the harness's own flags, before the resume id and
    /// the prompt (e.g. a permission mode, so the agent may edit files non-interactively).
    pub harness_args: Vec<String>,
    /// Codex only: run outside a Git repository (`--skip-git-repo-check`); Codex refuses to
    /// otherwise. Ignored by the other harnesses.
    pub skip_git_repo_check: bool,
}

impl LaunchRequest {
    /// Whether the run may continue an earlier session of `harness`: a resume id, or harness
    /// arguments that resume one behind the request's back (Claude Code's `--continue` or
    /// `--resume`, Codex's `resume`, OpenCode's `--continue` or `--session`, …). When it may,
    /// the harness's running totals must not be taken for the run's own; a false alarm only
    /// labels the run's own figures as running totals.
    pub fn may_resume(&self, harness: Harness) -> bool {
        let flags: &[&str] = match harness {
            Harness::Claude => &["--continue", "-c", "--resume", "-r"],
            Harness::Codex => &["resume", "--last"],
            Harness::OpenCode => &["--continue", "-c", "--session", "-s"],
            Harness::Gemini => &["--resume", "-r", "--session-file"],
            _ => &["--continue", "--resume", "--session", "resume"],
        };
        self.resume.is_some()
            || self.harness_args.iter().any(|arg| {
                let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
                flags.contains(&name)
            })
    }
}

/// A launch invocation: program, arguments, fixed environment and stdin. Values only: the
/// driver spawns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Program name, looked up on `PATH` by the driver.
    pub program: String,
    /// Arguments after the program name.
    pub args: Vec<String>,
    /// Fixed environment added to the inherited one.
    pub env: Vec<(String, String)>,
    /// What the child reads on stdin.
    pub stdin: Stdin,
}

impl From<Invocation> for crate::process::RunOptions {
    /// The process options that launch `invocation`: program, arguments, fixed environment
    /// and stdin (the prompt written then closed, or null). Stop signals, timeouts and the
    /// rest stay at their defaults.
    fn from(invocation: Invocation) -> Self {
        let mut options = crate::process::RunOptions::new(&invocation.program)
            .args(&invocation.args)
            .stdin(match invocation.stdin {
                Stdin::Null => crate::process::StdinMode::Null,
                Stdin::Prompt(prompt) => crate::process::StdinMode::Bytes(prompt.into_bytes()),
            });
        for (key, value) in &invocation.env {
            options = options.env(key, value);
        }
        options
    }
}

/// The child's stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`.
    Null,
    /// The prompt, written once and then closed.
    Prompt(String),
}

/// One stop signal, without naming an OS binding (the driver maps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopSignal {
    /// `SIGINT`: let the CLI finish its session record.
    Interrupt,
    /// `SIGTERM`.
    Terminate,
}

/// The signals a driver sends, in order, before killing the process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignals {
    /// The signals, in order.
    pub sequence: &'static [StopSignal],
}

/// How far an observed model's evidence reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelScope {
    /// The main loop answered with it: attribution and eligible for security progress.
    MainLoop,
    /// Attribution only (a delegated agent, result usage).
    AttributionOnly,
}

/// A safeguard refusal category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusalCategory {
    /// Claude's cyber safeguard (`claude-cyber`).
    ClaudeCyber,
    /// Codex's cybersecurity safeguard (`codex-cyber`).
    CodexCyber,
}

impl RefusalCategory {
    /// The stable name (`claude-cyber`, `codex-cyber`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCategory::ClaudeCyber => "claude-cyber",
            RefusalCategory::CodexCyber => "codex-cyber",
        }
    }
}

impl fmt::Display for RefusalCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Semantic evidence a decoder extracts from one line. Exactly three variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// A model that actually answered.
    ObservedModel {
        /// The model name as the stream spells it (the policy drops empty and `<synthetic>`).
        name: String,
        /// Main-loop or attribution-only.
        scope: ModelScope,
    },
    /// The stream carries no model: the requested model (or the harness default) applies.
    RequestedModelFallback,
    /// A safeguard refusal.
    Refusal(RefusalCategory),
}

/// A turn failure a decoder can tell apart from the others, because a caller reacts to it
/// differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The request did not fit the model's context window (Claude Code's `prompt_too_long`
    /// result, Codex's "ran out of room in the model's context window", OpenCode's
    /// `ContextOverflowError`). A summarizer failing this way may be retried with less input.
    ContextLength,
}

/// What one line condenses to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamUpdate {
    /// Ordinary progress lines, in order.
    pub progress: Vec<String>,
    /// Evidence, in order.
    pub evidence: Vec<Evidence>,
}

impl StreamUpdate {
    /// True when the update carries nothing.
    pub fn is_empty(&self) -> bool {
        self.progress.is_empty() && self.evidence.is_empty()
    }
}

/// The completion facts of a decoder, before the shared policy and retained reconciliation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The harness session id, when the stream supplied one.
    pub session_id: Option<String>,
    /// The final message (the answer).
    pub final_message: Option<String>,
    /// The diagnostic of a failed terminal turn; `None` when the turn did not fail.
    pub failure: Option<String>,
    /// What kind of failure [`Facts::failure`] is, when the dialect says so; `None` for an
    /// unclassified failure or no failure.
    pub failure_kind: Option<FailureKind>,
    /// Work the harness killed or left unfinished (task descriptions or commands).
    pub killed_work: Vec<String>,
    /// The human summary (`N turns, $X.XX`, token counts, …).
    pub summary: Option<String>,
    /// Token and cost usage, when the stream reported it.
    pub usage: Option<Usage>,
    /// Non-fatal diagnostics (Codex top-level `error` events, error items, …).
    pub diagnostics: Vec<String>,
    /// Whether a terminal event (result, turn end, …) was seen.
    pub terminal_seen: bool,
    /// Lines that were not a recognizable event of the dialect (malformed JSON, non-objects,
    /// unknown types).
    pub unrecognized_lines: u64,
    /// Lines longer than the caller's line bound, which its bounded splitter cut: they were
    /// not decoded, and are not counted in [`Facts::unrecognized_lines`]. `None` when every
    /// line fitted. Set by [`Interpretation`], not by the decoders.
    pub oversized_lines: Option<OversizedLines>,
    /// The unknown event types seen, sorted (bounded).
    pub unknown_types: Vec<String>,
    /// Lines nested deeper than [`json::MAX_JSON_DEPTH`](MAX_JSON_DEPTH) or holding more than
    /// [`MAX_JSON_VALUES`] values: not parsed (a value tree of such a line costs many times
    /// its size), not counted in [`Facts::unrecognized_lines`].
    pub over_budget_lines: u64,
}

/// A stream decoder: one per dialect, fed one raw line at a time.
///
/// `condense` never fails: an unknown or malformed line yields an empty update and is counted
/// in [`Facts::unrecognized_lines`]. Evidence is extracted before any progress or completion
/// guard, so a repeated init or a delegated result still reports its evidence.
pub trait StreamDecoder {
    /// Condenses one line (without its newline; may be non-UTF-8, truncated or huge).
    fn condense(&mut self, line: &[u8]) -> StreamUpdate;
    /// Consumes the decoder and returns the completion facts.
    fn complete(self: Box<Self>) -> Facts;
}

/// Most distinct unknown event types remembered for the drift warning.
pub const MAX_UNKNOWN_TYPES: usize = 32;
/// Longest unknown event type remembered, in characters.
const MAX_UNKNOWN_TYPE_CHARS: usize = 64;

/// Format-drift bookkeeping shared by the decoders.
#[derive(Debug, Clone, Default)]
pub(crate) struct Drift {
    unrecognized: u64,
    over_budget: u64,
    unknown: BTreeSet<String>,
}

impl Drift {
    /// A line that is not a JSON object of the dialect.
    pub(crate) fn malformed(&mut self) {
        self.unrecognized += 1;
    }

    /// Parses `line` as an event object: a blank line is `None` and not counted; a line past
    /// the JSON budget is `None` and counted as such; anything else that is not a JSON object
    /// is `None` and counted as unrecognized.
    pub(crate) fn object(&mut self, line: &[u8]) -> Option<serde_json::Value> {
        self.object_or_partial(line, None)
    }

    /// [`Drift::object`], except that a line past the value budget whose type is one of
    /// `partial.types` yields the object of only the fields `partial` names
    /// ([`json::parse_partial`]), still counted as past the budget: a large item or result
    /// must still end its item or its turn.
    pub(crate) fn object_or_partial(
        &mut self,
        line: &[u8],
        partial: Option<&json::Partial>,
    ) -> Option<serde_json::Value> {
        match json::parse(line) {
            json::Line::Blank => None,
            json::Line::Malformed => {
                self.malformed();
                None
            }
            json::Line::OverBudget => {
                self.over_budget += 1;
                partial.and_then(|p| json::parse_partial(line, p))
            }
            json::Line::Object(v) => Some(v),
        }
    }

    /// A well-formed line of an unknown event type.
    pub(crate) fn unknown(&mut self, kind: &str) {
        self.unrecognized += 1;
        if self.unknown.len() < MAX_UNKNOWN_TYPES || self.unknown.contains(kind) {
            self.unknown
                .insert(kind.chars().take(MAX_UNKNOWN_TYPE_CHARS).collect());
        }
    }

    /// Moves the counts into the facts.
    pub(crate) fn into_facts(self, facts: &mut Facts) {
        facts.unrecognized_lines = self.unrecognized;
        facts.over_budget_lines = self.over_budget;
        facts.unknown_types = self.unknown.into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_summary_names_the_harness_and_flattens_the_completion() {
        let mut interp = Interpretation::new(Harness::OpenCode);
        interp.handle_line(br#"{"type":"step_start","sessionID":"ses_1"}"#);
        let finished = interp.finish(HarnessExit::Success);
        let models = vec!["m1".to_owned()];
        let completion = finished.complete(None);
        let json = serde_json::to_value(TurnSummary::new(
            Harness::OpenCode,
            &models,
            Some(&completion),
        ))
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "harness": "opencode",
                "observed_models": ["m1"],
                "report": serde_json::to_value(&completion.report).unwrap(),
                "outcome": serde_json::to_value(&completion.outcome).unwrap(),
            })
        );
        let interrupted =
            serde_json::to_value(TurnSummary::new(Harness::Claude, &models, None)).unwrap();
        assert_eq!(
            interrupted,
            serde_json::json!({"harness": "claude", "observed_models": ["m1"]})
        );
    }

    fn with_effort(harness: Harness, effort: &str) -> Result<Invocation, LaunchError> {
        harness.invocation(&LaunchRequest {
            prompt: "p".into(),
            effort: Some(effort.into()),
            ..LaunchRequest::default()
        })
    }

    #[test]
    fn codex_accepts_only_a_lowercase_word_as_its_effort() {
        for effort in ["minimal", "low", "high", "xhigh"] {
            let inv = with_effort(Harness::Codex, effort).unwrap();
            assert!(
                inv.args
                    .contains(&format!("model_reasoning_effort=\"{effort}\""))
            );
        }
        for effort in [
            "",
            "high\" model=\"x",
            "high\nmodel = \"x\"",
            "High",
            "x-high",
            "-x",
            "high ",
        ] {
            let err = with_effort(Harness::Codex, effort).unwrap_err();
            let LaunchError::InvalidEffort { harness, .. } = &err else {
                panic!("{err}");
            };
            assert_eq!(*harness, Harness::Codex);
            assert!(err.to_string().contains("lowercase word"), "{err}");
        }
    }

    #[test]
    fn a_model_that_could_be_read_as_a_flag_is_refused() {
        for harness in Harness::ALL {
            let with_model = |model: &str| {
                harness.invocation(&LaunchRequest {
                    prompt: "hi".to_owned(),
                    model: Some(model.to_owned()),
                    ..LaunchRequest::default()
                })
            };
            for model in [
                "claude-sonnet-4-6",
                "gpt-5.1-codex",
                "openai/gpt-4.1",
                "m x",
            ] {
                let invocation = with_model(model).unwrap();
                assert!(
                    invocation.args.iter().any(|a| a == model),
                    "{harness} {model}"
                );
            }
            for model in ["", "-x", "--help", "a\nb", &"m".repeat(257)] {
                let err = with_model(model).unwrap_err();
                assert!(
                    matches!(err, LaunchError::InvalidModel { .. }),
                    "{harness} {model:?}: {err}"
                );
            }
        }
    }

    #[test]
    fn an_effort_that_could_be_read_as_a_flag_is_refused() {
        for harness in [Harness::Claude, Harness::Grok, Harness::OpenCode] {
            for effort in ["max", "xhigh", "thinking-2", "level_3"] {
                assert!(with_effort(harness, effort).is_ok(), "{harness} {effort}");
            }
            for effort in ["", "-x", "--help", "high now", "a\"b", &"a".repeat(65)] {
                let err = with_effort(harness, effort).unwrap_err();
                assert!(
                    err.to_string().starts_with("invalid reasoning effort"),
                    "{err}"
                );
            }
        }
        // The message quotes at most 64 characters of a long effort.
        let err = with_effort(Harness::Claude, &"a".repeat(1000)).unwrap_err();
        assert!(err.to_string().len() < 300, "{err}");
    }

    #[test]
    fn harness_args_that_resume_a_session_are_recognized() {
        let with_args = |args: &[&str]| LaunchRequest {
            harness_args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..LaunchRequest::default()
        };
        let resumed = [
            (Harness::Claude, &["--continue"][..]),
            (
                Harness::Claude,
                &["--permission-mode", "acceptEdits", "-r", "S"],
            ),
            (Harness::Claude, &["--resume=S"]),
            (Harness::Codex, &["resume", "--last"]),
            (Harness::OpenCode, &["--session=ses_1"]),
            (Harness::Muse, &["--resume", "S"]),
        ];
        for (h, args) in resumed {
            assert!(with_args(args).may_resume(h), "{h:?} {args:?}");
        }
        let fresh = [
            (Harness::Claude, &["--permission-mode", "acceptEdits"][..]),
            (
                Harness::Codex,
                &["-c", "model_reasoning_effort=high", "--full-auto"],
            ),
            (Harness::OpenCode, &[]),
        ];
        for (h, args) in fresh {
            assert!(!with_args(args).may_resume(h), "{h:?} {args:?}");
        }
        let by_id = LaunchRequest {
            resume: Some("S".into()),
            ..LaunchRequest::default()
        };
        assert!(by_id.may_resume(Harness::Grok));
    }

    #[test]
    fn grok_gets_the_prompt_joined_to_its_long_option() {
        for prompt in ["-x", "--help", "--help me", "help", "a=b", ""] {
            let inv = Harness::Grok
                .invocation(&LaunchRequest {
                    prompt: prompt.into(),
                    resume: Some("S".into()),
                    ..LaunchRequest::default()
                })
                .unwrap();
            assert_eq!(inv.args.last().unwrap(), &format!("--single={prompt}"));
            assert!(!inv.args.iter().any(|a| a == prompt || a == "-p"));
        }
    }

    #[test]
    fn harness_args_go_after_the_flags_and_before_resume_and_prompt() {
        let request = LaunchRequest {
            prompt: "do it".into(),
            model: Some("m".into()),
            resume: Some("S".into()),
            harness_args: vec!["--permission-mode".into(), "acceptEdits".into()],
            ..LaunchRequest::default()
        };
        for harness in Harness::ALL {
            let inv = harness.invocation(&request).unwrap();
            let at = |s: &str| inv.args.iter().position(|a| a == s);
            let extra = at("--permission-mode").expect("harness args passed");
            assert_eq!(inv.args[extra + 1], "acceptEdits", "{harness}");
            let resume = at("S").expect("resume id passed");
            assert!(extra < resume, "{harness}: {:?}", inv.args);
            if let Some(prompt) = at("do it") {
                assert!(extra < prompt, "{harness}: {:?}", inv.args);
            }
            let model = at("m").expect("model passed");
            assert!(model < extra, "{harness}: {:?}", inv.args);
        }
    }
}
