//! [`Interpretation`]: a harness's stream decoder wrapped in the shared model and security policy
//! (docs/interpretation.md). The policy consumes semantic [`Evidence`] only; it contains no JSON
//! parsing and no harness switch.
//!
//! # Driving order
//!
//! 1. [`Interpretation::new`] with the [`Harness`].
//! 2. Optionally [`Interpretation::for_security`] with the requested model, before or between
//!    lines. It enables (or resets) the security policy: the last progress model, the
//!    once-per-reset requested-model wording and the sticky refusal start over; observed
//!    models are kept and earlier evidence is not replayed.
//! 3. For every line of the harness's stdout, without its newline:
//!    [`Interpretation::handle_line`]. It returns the progress lines to show now: the
//!    decoder's ordinary progress first, then the security progress (`Model: …`). It never
//!    fails; an unknown or malformed line returns nothing and is counted. A line the caller's
//!    bounded splitter cut ([`Line::truncated`](crate::lines::Line::truncated)) goes to
//!    [`Interpretation::handle_oversized_line`] instead: it is reported as too long, not as
//!    unrecognized.
//!    The harness's stderr lines, when the driver has them (all, or a bounded tail), go to
//!    [`Interpretation::handle_stderr_line`], before the end: they classify a failure the
//!    stream does not (a harness that prints its API error only on stderr). The process's
//!    exit code, when it exited with one, goes to [`Interpretation::handle_exit_code`]
//!    before the end: a code that stands for an HTTP status classifies a failure the stream
//!    names no kind of.
//!    [`Interpretation::observed_models`] and [`Interpretation::refusal`] may be read at any
//!    time (e.g. to checkpoint a session log before completion).
//! 4. Then exactly one of:
//!    * the process ended: [`Interpretation::finish`] with the [`HarnessExit`] consumes the
//!      interpretation and returns [`Finished`]. If [`Finished::retained_request`] names a
//!      record, the caller reads it and parses it with
//!      [`RetainedKind::parse`](super::RetainedKind::parse); then [`Finished::complete`] with
//!      the record (`None` when absent or unreadable) returns the [`Completion`]: a
//!      [`Report`] and a separate [`Outcome`]. A present record replaces the stream models
//!      and usage, even when its model list is empty; an absent one keeps them.
//!    * the run was interrupted: [`Interpretation::interrupt`] consumes it and returns
//!      [`Interrupted`]: no report, no retained read, the observed models still readable.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use serde::Serialize;

use super::retained::{RetainedRecord, RetainedRequest};
use super::{
    Evidence, Facts, FailureKind, Harness, ModelScope, RefusalCategory, RetryAfter, StreamDecoder,
    Usage, UsageScope,
};

/// Most line numbers of oversized lines remembered (the count goes on).
pub const MAX_OVERSIZED_LINE_NUMBERS: usize = 32;

/// Lines longer than the line bound of the splitter that fed the interpretation. Each was cut,
/// so its kept prefix is not the event the harness wrote: it was not decoded. The lines after
/// it were.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OversizedLines {
    /// How many lines were too long.
    pub count: u64,
    /// The bound they exceeded, in bytes (the largest given, should callers differ).
    pub max_line_bytes: u64,
    /// Their line numbers (1-based, every fed line counted, blank ones too), in order; the
    /// first [`MAX_OVERSIZED_LINE_NUMBERS`].
    pub lines: Vec<u64>,
}

impl OversizedLines {
    /// The report's warning: which lines, and the bound.
    fn warning(&self) -> String {
        let mut numbers = self
            .lines
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        if self.count > self.lines.len() as u64 {
            numbers.push_str(", …");
        }
        let bound = if self.max_line_bytes.is_multiple_of(1 << 20) {
            format!("{} MiB", self.max_line_bytes >> 20)
        } else {
            format!("{} bytes", self.max_line_bytes)
        };
        if self.count == 1 {
            format!(
                "line {numbers} is longer than the line bound ({bound}): it was cut and not \
                 interpreted"
            )
        } else {
            format!(
                "{} lines are longer than the line bound ({bound}) (lines {numbers}): they were \
                 cut and not interpreted",
                self.count
            )
        }
    }
}

/// The name Claude gives answers it synthesized itself; never a model.
pub const SYNTHETIC_MODEL: &str = "<synthetic>";

/// Whether a model name may be reported: not empty (after trimming) and not `<synthetic>`.
pub(crate) fn is_reportable_model(name: &str) -> bool {
    let t = name.trim();
    !t.is_empty() && t != SYNTHETIC_MODEL
}

/// Most distinct models a model list keeps (observed on the stream, or from a retained
/// record). A session uses a handful; a stream naming more is hostile or broken, and every
/// name kept is memory and output. Later distinct names are only counted
/// ([`Report::models_omitted`], [`Interpretation::observed_models_omitted`]).
pub const MAX_MODELS: usize = 64;

/// Longest model name kept, in bytes (launch requests refuse names over 256 characters). A
/// longer name is cut at a character boundary at most this many bytes in and ends with
/// [`MODEL_NAME_CUT`]; the cut name is the model's identity (two names that agree on their
/// first bytes are one model).
pub const MAX_MODEL_NAME_BYTES: usize = 256;

/// What ends a model name cut at [`MAX_MODEL_NAME_BYTES`].
pub const MODEL_NAME_CUT: &str = "…";

/// The trimmed, bounded form of a reportable model name.
fn bounded_model_name(name: &str) -> String {
    let name = name.trim();
    if name.len() <= MAX_MODEL_NAME_BYTES {
        return name.to_owned();
    }
    let mut end = MAX_MODEL_NAME_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = String::with_capacity(end + MODEL_NAME_CUT.len());
    cut.push_str(&name[..end]);
    cut.push_str(MODEL_NAME_CUT);
    cut
}

/// An ordered, deduplicated, bounded list of model names: first-seen order, at most
/// [`MAX_MODELS`] kept, the distinct names beyond counted. Adding is O(1) (a set beside the
/// list), so a stream of many distinct names costs linear time.
#[derive(Clone, Default)]
pub(crate) struct ModelList {
    kept: Vec<String>,
    index: HashSet<String>,
    /// 64-bit hashes of the distinct names not kept (8 bytes each, not the names): enough to
    /// count them; two names colliding would be counted once (chance about n²/2⁶⁵).
    omitted: HashSet<u64>,
}

impl std::fmt::Debug for ModelList {
    // The names kept and the count, not the hashes of every name left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelList")
            .field("kept", &self.kept)
            .field("omitted", &self.omitted())
            .finish()
    }
}

impl ModelList {
    /// Adds `name` (trimmed and bounded) unless it is not reportable; returns the stored
    /// form for a reportable name, kept or not.
    pub(crate) fn add(&mut self, name: &str) -> Option<String> {
        if !is_reportable_model(name) {
            return None;
        }
        let name = bounded_model_name(name);
        if !self.index.contains(&name) {
            if self.kept.len() < MAX_MODELS {
                self.index.insert(name.clone());
                self.kept.push(name.clone());
            } else {
                // A fixed-key hasher: the count must not depend on the process.
                let mut h = std::hash::DefaultHasher::new();
                name.hash(&mut h);
                self.omitted.insert(h.finish());
            }
        }
        Some(name)
    }

    /// The names kept, in first-seen order.
    pub(crate) fn kept(&self) -> &[String] {
        &self.kept
    }

    /// How many distinct names were not kept.
    pub(crate) fn omitted(&self) -> u64 {
        self.omitted.len() as u64
    }

    /// The kept names and the omitted count.
    pub(crate) fn into_parts(self) -> (Vec<String>, u64) {
        let omitted = self.omitted();
        (self.kept, omitted)
    }
}

/// The optional security policy's state.
#[derive(Debug, Clone, Default)]
struct Security {
    requested_model: Option<String>,
    last_progress_model: Option<String>,
    fallback_shown: bool,
    refusal: Option<RefusalCategory>,
}

/// A harness stream being interpreted. See the module documentation for the driving order.
pub struct Interpretation {
    harness: Harness,
    decoder: Box<dyn StreamDecoder + Send>,
    models: ModelList,
    security: Option<Security>,
    lines: u64,
    oversized: Option<OversizedLines>,
    new_session: bool,
    /// The failure kind the last classifiable stderr line named.
    stderr_kind: Option<FailureKind>,
    /// The failure kind of the HTTP status the harness's exit code stands for.
    exit_kind: Option<FailureKind>,
}

impl std::fmt::Debug for Interpretation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interpretation")
            .field("harness", &self.harness)
            .field("models", &self.models)
            .field("security", &self.security)
            .field("lines", &self.lines)
            .field("oversized", &self.oversized)
            .field("new_session", &self.new_session)
            .field("stderr_kind", &self.stderr_kind)
            .field("exit_kind", &self.exit_kind)
            .finish_non_exhaustive()
    }
}

impl Interpretation {
    /// A new interpretation with the harness's decoder; security policy off.
    pub fn new(harness: Harness) -> Self {
        Self {
            harness,
            decoder: harness.decoder(),
            models: ModelList::default(),
            security: None,
            lines: 0,
            oversized: None,
            new_session: false,
            stderr_kind: None,
            exit_kind: None,
        }
    }

    /// The run started a new harness session (it resumed none), so every figure the harness
    /// reports is this run's own. Without this call the completion's usage says, per the
    /// harness, which figures may be the resumed session's running totals
    /// ([`Harness::usage_scopes_after_resume`](super::Harness::usage_scopes_after_resume)).
    pub fn started_new_session(&mut self) {
        self.new_session = true;
    }

    /// The harness being interpreted.
    pub fn harness(&self) -> Harness {
        self.harness
    }

    /// Enables or resets the security policy for a session that requested `requested_model`
    /// (`None`: the harness default). Keeps observed models; does not replay earlier evidence
    /// (an earlier refusal is not enforced, an earlier model is printed again only when it
    /// is observed again).
    pub fn for_security(&mut self, requested_model: Option<&str>) {
        self.security = Some(Security {
            requested_model: requested_model
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
            ..Security::default()
        });
    }

    /// Whether the security policy is enabled.
    pub fn security_enabled(&self) -> bool {
        self.security.is_some()
    }

    /// Lines fed so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Feeds one line (without its newline) and returns the progress lines to show now:
    /// ordinary progress, then security progress. Each is a single line (control characters
    /// are shown escaped).
    pub fn handle_line(&mut self, line: &[u8]) -> Vec<String> {
        self.lines += 1;
        let update = self.decoder.condense(line);
        let mut progress = update.progress;
        for evidence in update.evidence {
            self.apply(evidence, &mut progress);
        }
        progress
            .into_iter()
            .map(super::progress::single_line)
            .collect()
    }

    /// Feeds a line longer than `max_line_bytes`, which the caller's bounded splitter cut
    /// ([`Line::truncated`](crate::lines::Line::truncated)); its kept bytes are not needed.
    /// The line counts as a fed line but is not decoded: a prefix of an event is not the event,
    /// and reading it as a malformed one would report format drift that is not there. It is
    /// reported as oversized instead ([`Facts::oversized_lines`], [`Report::oversized_lines`]
    /// and a warning naming the line and the bound).
    pub fn handle_oversized_line(&mut self, max_line_bytes: usize) {
        self.lines += 1;
        let o = self.oversized.get_or_insert(OversizedLines {
            count: 0,
            max_line_bytes: 0,
            lines: Vec::new(),
        });
        o.count += 1;
        o.max_line_bytes = o.max_line_bytes.max(max_line_bytes as u64);
        if o.lines.len() < MAX_OVERSIZED_LINE_NUMBERS {
            o.lines.push(self.lines);
        }
    }

    /// Feeds one line the harness wrote to stderr (without its newline; lossy UTF-8). Nothing
    /// is kept of it but the failure kind it names (an HTTP status, a rate limit, a refused
    /// connection, a bad key), the last one named winning: it classifies a failed turn or run
    /// whose stream names no kind of its own. A success stays a success, whatever stderr says.
    pub fn handle_stderr_line(&mut self, line: &[u8]) {
        if let Some(kind) = super::failure::classify(None, &String::from_utf8_lossy(line)) {
            self.stderr_kind = Some(kind);
        }
    }

    /// The harness process exited with `code`. Nothing is kept of it but the failure kind of
    /// the HTTP status it stands for ([`Harness::http_status_of_exit`]: Gemini CLI exits with
    /// a failed request's status modulo 256, and passes a 429's or a 503's message on without
    /// the API's body, so without its status). That kind classifies a failed turn or run
    /// whose stream names none, before anything stderr named; a success stays a success.
    pub fn handle_exit_code(&mut self, code: i32) {
        self.exit_kind = self
            .harness
            .http_status_of_exit(code)
            .and_then(super::failure::kind_of_status);
    }

    fn apply(&mut self, evidence: Evidence, progress: &mut Vec<String>) {
        match evidence {
            Evidence::ObservedModel { name, scope } => {
                // Trimmed (`" m "` and `"m"` are one model) and bounded; a name beyond the
                // cap of the list is still shown as progress, it is what the session runs on.
                let Some(name) = self.models.add(&name) else {
                    return;
                };
                if let Some(sec) = &mut self.security
                    && scope == ModelScope::MainLoop
                    && sec.last_progress_model.as_deref() != Some(name.as_str())
                {
                    progress.push(format!("Model: {name}"));
                    sec.last_progress_model = Some(name);
                }
            }
            Evidence::RequestedModelFallback => {
                if let Some(sec) = &mut self.security
                    && !sec.fallback_shown
                {
                    sec.fallback_shown = true;
                    progress.push(match &sec.requested_model {
                        Some(m) => format!("Model: {m} (requested)"),
                        None => "Model: Harness default (no Model requested)".to_owned(),
                    });
                }
            }
            Evidence::Refusal(category) => {
                if let Some(sec) = &mut self.security
                    && sec.refusal.is_none()
                {
                    sec.refusal = Some(category);
                }
            }
        }
    }

    /// The usage the stream reported so far (for a budget checked while the turn runs);
    /// `None` before any, and for dialects that report usage only at the end.
    pub fn usage_so_far(&self) -> Option<&Usage> {
        self.decoder.usage_so_far()
    }

    /// The observed models so far: first-seen order, deduplicated, without empty names or
    /// `<synthetic>`, at most [`MAX_MODELS`], each at most [`MAX_MODEL_NAME_BYTES`] (plus
    /// [`MODEL_NAME_CUT`]). Requested models never appear here.
    pub fn observed_models(&self) -> &[String] {
        self.models.kept()
    }

    /// How many distinct observed models [`Interpretation::observed_models`] left out (beyond
    /// [`MAX_MODELS`]).
    pub fn observed_models_omitted(&self) -> u64 {
        self.models.omitted()
    }

    /// The sticky safeguard refusal seen since security was last enabled or reset; always
    /// `None` while security is off.
    pub fn refusal(&self) -> Option<RefusalCategory> {
        self.security.as_ref().and_then(|s| s.refusal)
    }

    /// The process ended: consumes the interpretation and completes the decoder.
    pub fn finish(self, exit: HarnessExit) -> Finished {
        let refusal = self.refusal();
        let mut facts = self.decoder.complete();
        facts.oversized_lines = self.oversized;
        let (models, models_omitted) = self.models.into_parts();
        Finished {
            harness: self.harness,
            facts,
            models,
            models_omitted,
            refusal,
            exit,
            new_session: self.new_session,
            stderr_kind: self.stderr_kind,
            exit_kind: self.exit_kind,
            lines: self.lines,
        }
    }

    /// The run was interrupted: no report and no retained read; the models stay readable.
    pub fn interrupt(self) -> Interrupted {
        let (models, models_omitted) = self.models.into_parts();
        Interrupted {
            models,
            models_omitted,
        }
    }
}

/// How the harness process ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessExit {
    /// Exit status 0 (or no process: a recorded stream).
    Success,
    /// The process failed (non-zero exit, signal, spawn failure).
    Failed {
        /// What the driver knows (exit code, stderr tail).
        diagnostic: String,
    },
}

/// An interrupted interpretation: only the models observed before the interruption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    models: Vec<String>,
    models_omitted: u64,
}

impl Interrupted {
    /// The models observed before the interruption.
    pub fn observed_models(&self) -> &[String] {
        &self.models
    }

    /// How many distinct observed models were left out (beyond [`MAX_MODELS`]).
    pub fn observed_models_omitted(&self) -> u64 {
        self.models_omitted
    }
}

/// A finished stream, waiting for the optional retained record.
#[derive(Debug)]
pub struct Finished {
    harness: Harness,
    facts: Facts,
    models: Vec<String>,
    models_omitted: u64,
    refusal: Option<RefusalCategory>,
    exit: HarnessExit,
    new_session: bool,
    stderr_kind: Option<FailureKind>,
    exit_kind: Option<FailureKind>,
    lines: u64,
}

impl Finished {
    /// The retained record the caller should read before [`Finished::complete`], if the
    /// harness has one.
    pub fn retained_request(&self) -> Option<RetainedRequest> {
        self.harness.retained_kind().map(|kind| RetainedRequest {
            kind,
            session_id: self.facts.session_id.clone(),
        })
    }

    /// The models observed on the stream (before retained reconciliation).
    pub fn observed_models(&self) -> &[String] {
        &self.models
    }

    /// How many distinct observed models were left out (beyond [`MAX_MODELS`]).
    pub fn observed_models_omitted(&self) -> u64 {
        self.models_omitted
    }

    /// The session id from the stream.
    pub fn session_id(&self) -> Option<&str> {
        self.facts.session_id.as_deref()
    }

    /// Completes with the retained record (`None`: absent or unreadable; ignored for
    /// harnesses without one).
    pub fn complete(self, retained: Option<RetainedRecord>) -> Completion {
        let Finished {
            harness,
            facts,
            models,
            models_omitted,
            refusal,
            exit,
            new_session,
            stderr_kind,
            exit_kind,
            lines,
        } = self;
        // What the figures count: a new session's are the run's own; a resumed one's are what
        // the harness reports after a resume.
        let (tokens_scope, cost_scope) = if new_session {
            (UsageScope::Run, UsageScope::Run)
        } else {
            harness.usage_scopes_after_resume()
        };
        let scoped = |mut u: Usage| {
            u.tokens_scope = tokens_scope;
            u.cost_scope = cost_scope;
            u
        };
        let mut warnings = Vec::new();
        if facts.unrecognized_lines > 0 {
            let mut w = format!(
                "{} unrecognized line{}",
                facts.unrecognized_lines,
                if facts.unrecognized_lines == 1 {
                    ""
                } else {
                    "s"
                }
            );
            if !facts.unknown_types.is_empty() {
                w.push_str(&format!(
                    " (unknown event types: {})",
                    facts.unknown_types.join(", ")
                ));
            }
            w.push_str(&format!("; the {harness} stream format may have changed"));
            warnings.push(w);
        }
        if let Some(o) = &facts.oversized_lines {
            warnings.push(o.warning());
        }
        let over_budget = over_budget_warning(facts.over_budget_lines);
        if let Some(w) = &over_budget {
            warnings.push(w.clone());
        }
        let mut report = Report {
            oversized_lines: facts.oversized_lines,
            warnings,
            diagnostics: facts.diagnostics,
            summary: facts.summary,
            models,
            models_omitted,
            usage: facts.usage.map(scoped),
            retained: false,
            session_usage: None,
        };
        let mut final_message = facts.final_message;
        let mut failure = facts.failure;
        let mut stream_kind = facts.failure_kind;
        if let Some(kind) = harness.retained_kind() {
            match retained {
                Some(record) => {
                    report.retained = true;
                    // A supplementary record leaves the stream's models, and its usage when
                    // it has some.
                    let usage = match record.usage {
                        Some(_) if record.supplementary && report.usage.is_some() => None,
                        usage => usage,
                    };
                    if !record.supplementary {
                        report.models = record.models;
                        report.models_omitted = record.models_omitted;
                    }
                    let recounted = usage.is_some() || record.usage_baseline.is_some();
                    if let Some(usage) = usage {
                        report.usage = Some(scoped(usage));
                    }
                    // The baseline is the running total before this run: the tokens are a
                    // running total whatever the session.
                    if let (Some(before), Some(usage)) = (&record.usage_baseline, &mut report.usage)
                    {
                        usage.tokens_scope = UsageScope::Session;
                        report.session_usage = Some(usage.clone());
                        *usage = usage.since(before);
                    }
                    if recounted {
                        report.summary = report.usage.as_ref().map(Usage::summary);
                    }
                    if record.final_message.is_some() {
                        final_message = record.final_message;
                    }
                    // A failure only the record reports is classified like the stream's: by the
                    // kind the record's parser read (a status it carries), else its wording.
                    if failure.is_none()
                        && let Some(text) = record.failure
                    {
                        stream_kind = record
                            .failure_kind
                            .or_else(|| super::failure::classify(None, &text));
                        failure = Some(text);
                    }
                }
                // The Codex and Gemini streams are complete without their session files.
                None if kind.optional() => {}
                None => report.warnings.push(format!(
                    "{} was not available; models and usage come from the stream",
                    kind.description()
                )),
            }
        }
        // Every status but a success carries the kind when it is known: the stream's own (or
        // the retained record's), else the status the exit code stands for, else what stderr
        // named; a stream cut off before its terminal event is `cut_off` (a failed
        // process that printed nothing at all never started one: it is not cut off).
        let cut_off = (!facts.terminal_seen).then_some(FailureKind::CutOff);
        let (status, failure_kind) = if let Some(category) = refusal {
            (
                OutcomeStatus::Refused { category },
                Some(FailureKind::Refused),
            )
        } else if let Some(diagnostic) = failure {
            (
                OutcomeStatus::TurnFailed { diagnostic },
                stream_kind.or(exit_kind).or(stderr_kind),
            )
        } else if let HarnessExit::Failed { diagnostic } = exit {
            (
                OutcomeStatus::ExecutionFailed { diagnostic },
                exit_kind.or(stderr_kind).or(cut_off.filter(|_| lines > 0)),
            )
        } else if !facts.terminal_seen {
            // Every dialect ends a finished session with a terminal event; a stream cut off
            // before it (a crash, a killed pipe, a partial log) is not a verified success.
            // When lines were too long to decode, the terminal event may be among them: the
            // session is then not known to have finished, rather than known not to have.
            let diagnostic = match (&report.oversized_lines, &over_budget) {
                (Some(o), _) => format!("{UNREADABLE_END}: {}", o.warning()),
                (None, Some(w)) => format!("{UNREADABLE_END}: {w}"),
                (None, None) => UNFINISHED.to_owned(),
            };
            (OutcomeStatus::TurnFailed { diagnostic }, cut_off)
        } else {
            (OutcomeStatus::Succeeded, None)
        };
        let retry_after = facts
            .retry_after
            .filter(|_| failure_kind.is_some_and(FailureKind::is_retryable));
        Completion {
            report,
            outcome: Outcome {
                failure_kind,
                retry_after,
                session_id: facts.session_id,
                final_message,
                killed_work: facts.killed_work,
                terminal_seen: facts.terminal_seen,
                status,
            },
        }
    }
}

/// What an interpretation found, as JSON: `harness`, `observed_models`, then the completion's
/// `report` and `outcome` (absent when the session was interrupted). The final object of
/// `agentrun interpret --json`, and the head of `agentrun agent --json`.
#[derive(Debug, Clone, Copy, Serialize)]
#[non_exhaustive]
pub struct TurnSummary<'a> {
    /// The harness (serialized by name).
    #[serde(serialize_with = "harness_name")]
    pub harness: Harness,
    /// The models observed on the stream.
    pub observed_models: &'a [String],
    /// How many distinct observed models `observed_models` left out (beyond [`MAX_MODELS`]);
    /// absent from JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub observed_models_omitted: u64,
    /// The completion, `None` when the session was interrupted.
    #[serde(flatten)]
    pub completion: Option<&'a Completion>,
}

impl<'a> TurnSummary<'a> {
    /// The summary of a turn of `harness`.
    pub fn new(
        harness: Harness,
        observed_models: &'a [String],
        completion: Option<&'a Completion>,
    ) -> Self {
        Self {
            harness,
            observed_models,
            observed_models_omitted: 0,
            completion,
        }
    }

    /// Says how many distinct observed models `observed_models` left out.
    pub fn with_observed_models_omitted(mut self, omitted: u64) -> Self {
        self.observed_models_omitted = omitted;
        self
    }
}

/// The warning for lines past the JSON budget, if any.
fn over_budget_warning(count: u64) -> Option<String> {
    let limits = format!(
        "nesting deeper than {} or more than {} values",
        super::MAX_JSON_DEPTH,
        super::MAX_JSON_VALUES
    );
    match count {
        0 => None,
        1 => Some(format!(
            "1 line exceeds the JSON budget ({limits}): it was not interpreted in full"
        )),
        n => Some(format!(
            "{n} lines exceed the JSON budget ({limits}): they were not interpreted in full"
        )),
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn harness_name<S: serde::Serializer>(harness: &Harness, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(harness.name())
}

/// The diagnostic of a session whose stream ended without its terminal event, while nothing
/// else failed.
pub const UNFINISHED: &str = "the stream ended without a final result: the session did not finish";

/// The start of the diagnostic of a session whose stream had no terminal event it could read
/// and lines too long to decode (which may have held it); the oversized-lines warning follows.
pub const UNREADABLE_END: &str = "no final result could be read";

/// The completion of an interpretation: what to report, separate from how the session ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    /// Warnings, diagnostics, summary, models and usage.
    pub report: Report,
    /// Session id, final message, killed work and status.
    pub outcome: Outcome,
}

/// The report part of a completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Warnings (format drift, oversized lines, a missing retained record).
    pub warnings: Vec<String>,
    /// Non-fatal diagnostics the harness printed.
    pub diagnostics: Vec<String>,
    /// The human summary (`N turns, $X.XX`, token counts).
    pub summary: Option<String>,
    /// The models: observed on the stream, or the retained record's when it was present; at
    /// most [`MAX_MODELS`].
    pub models: Vec<String>,
    /// How many distinct models [`Report::models`] left out (beyond [`MAX_MODELS`]); absent
    /// from JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub models_omitted: u64,
    /// Usage, when known.
    pub usage: Option<Usage>,
    /// Whether a retained record replaced the stream's models.
    pub retained: bool,
    /// Lines too long to interpret (also named in a warning); absent from JSON when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversized_lines: Option<OversizedLines>,
    /// The harness session's running totals as the harness reported them, when `usage` is
    /// this run's own share computed from them and a baseline read before the run (Codex,
    /// from its session file). What a ledger over several runs of the session should record:
    /// it also holds what runs that reported nothing (stopped ones) spent. Absent from JSON
    /// when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_usage: Option<Usage>,
}

/// The outcome part of a completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The harness session id.
    pub session_id: Option<String>,
    /// The final message.
    pub final_message: Option<String>,
    /// Work killed or left unfinished.
    pub killed_work: Vec<String>,
    /// Whether the stream had a terminal event. A stream without one is still decoded (its
    /// session id, final message so far, usage), but unless something else failed first its
    /// status is [`OutcomeStatus::TurnFailed`], kind [`FailureKind::CutOff`], with the
    /// diagnostic [`UNFINISHED`] (or
    /// [`UNREADABLE_END`] when lines too long to decode may have held the terminal event).
    pub terminal_seen: bool,
    /// How the session ended.
    pub status: OutcomeStatus,
    /// The kind of failure, for every status but [`OutcomeStatus::Succeeded`] when it is
    /// known: the stream's (or, where it names none, stderr's) for a failed turn or run,
    /// [`FailureKind::CutOff`] for a stream that ended without its terminal event,
    /// [`FailureKind::Refused`] for a refusal. Never on a success; absent from JSON when
    /// `None` (a failure nothing classified).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// When a retryable failure passes, when the harness said so (only with a
    /// [`FailureKind::is_retryable`] kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<RetryAfter>,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum OutcomeStatus {
    /// The session succeeded.
    Succeeded,
    /// The terminal turn failed.
    TurnFailed {
        /// Why.
        diagnostic: String,
    },
    /// The process failed without a turn failure.
    ExecutionFailed {
        /// What the driver reported.
        diagnostic: String,
    },
    /// The security policy saw a safeguard refusal.
    Refused {
        /// The refusal category.
        category: RefusalCategory,
    },
}

impl Serialize for RefusalCategory {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
