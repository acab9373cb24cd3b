//! Decoding a harness stream: the [`StreamDecoder`] seam one dialect implements, what one
//! line condenses to ([`StreamUpdate`], [`Evidence`]), the completion [`Facts`] with their
//! [`FailureKind`], and the format-drift bookkeeping the decoders share.

use std::collections::BTreeSet;
use std::fmt;

use super::{OversizedLines, Usage, json};

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

/// Why a turn failed, one set for every harness, so a caller reacts to the kind (retry a rate
/// limit, shrink the input of a context overflow, stop on a bad key) without parsing any
/// harness's wording. Absent on success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The API refused the request for its rate or quota (HTTP 429).
    RateLimited,
    /// The API is overloaded (HTTP 529 or 503, "high demand").
    Overloaded,
    /// Another server-side API error (5xx).
    ServerError,
    /// The credentials were missing, invalid or not allowed (HTTP 401, 403).
    Auth,
    /// The request did not fit the model's context window (Claude Code's `prompt_too_long`
    /// result, Codex's "ran out of room in the model's context window", OpenCode's
    /// `ContextOverflowError`). A summarizer failing this way may be retried with less input.
    ContextLength,
    /// A safeguard refused the work (the security policy's refusal evidence).
    Refused,
    /// The harness's permission mode refused a tool the turn needed.
    PermissionDenied,
    /// The API could not be reached (connection refused, DNS, TLS, reset).
    Network,
    /// The stream ended without its terminal event (a crash, a killed pipe, a partial log).
    CutOff,
    /// agentrun stopped the harness because no event line arrived for the stall timeout.
    Stalled,
    /// agentrun stopped the harness, or started no further turn, because a cost or token
    /// budget was spent.
    Budget,
}

impl FailureKind {
    /// Every kind, in declaration order.
    pub const ALL: [FailureKind; 11] = [
        FailureKind::RateLimited,
        FailureKind::Overloaded,
        FailureKind::ServerError,
        FailureKind::Auth,
        FailureKind::ContextLength,
        FailureKind::Refused,
        FailureKind::PermissionDenied,
        FailureKind::Network,
        FailureKind::CutOff,
        FailureKind::Stalled,
        FailureKind::Budget,
    ];

    /// The stable name, as in JSON (`rate_limited`, `context_length`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::RateLimited => "rate_limited",
            FailureKind::Overloaded => "overloaded",
            FailureKind::ServerError => "server_error",
            FailureKind::Auth => "auth",
            FailureKind::ContextLength => "context_length",
            FailureKind::Refused => "refused",
            FailureKind::PermissionDenied => "permission_denied",
            FailureKind::Network => "network",
            FailureKind::CutOff => "cut_off",
            FailureKind::Stalled => "stalled",
            FailureKind::Budget => "budget",
        }
    }

    /// Whether waiting and resuming the same session may succeed: a rate limit or an
    /// overload passes; every other kind would fail the same way again.
    pub fn is_retryable(self) -> bool {
        matches!(self, FailureKind::RateLimited | FailureKind::Overloaded)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When the harness said a retryable failure passes, as the stream gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RetryAfter {
    /// Wait this many milliseconds (a `Retry-After` header in seconds, Claude's
    /// `retry_delay_ms`).
    DelayMs(u64),
    /// The limit resets at this Unix time, in seconds (a reset timestamp).
    ResetAtUnixSecs(u64),
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
    /// When a retryable failure passes, when the stream said so.
    pub retry_after: Option<RetryAfter>,
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
    /// line fitted. Set by [`Interpretation`](super::Interpretation), not by the decoders.
    pub oversized_lines: Option<OversizedLines>,
    /// The unknown event types seen, sorted (bounded).
    pub unknown_types: Vec<String>,
    /// Lines nested deeper than [`json::MAX_JSON_DEPTH`](super::MAX_JSON_DEPTH) or holding more than
    /// [`MAX_JSON_VALUES`](super::MAX_JSON_VALUES) values: not parsed (a value tree of such a line costs many times
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
    /// The usage the stream reported so far, for a budget checked while the turn runs
    /// (`None`: none yet, or the dialect reports usage only at its end).
    fn usage_so_far(&self) -> Option<&Usage> {
        None
    }
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
