//! Harness stream interpretation (docs/interpretation.md): nine agent CLIs behind one evidence
//! interface.
//!
//! * [`Harness`] is the registry: for each of Claude Code, Grok, Antigravity (`agy`), Codex,
//!   Muse, OpenCode, Qwen Code, pi and Gemini CLI it gives the launch [`Invocation`] for a [`LaunchRequest`], the
//!   [`StopSignals`] and a [`StreamDecoder`].
//! * A [`StreamDecoder`] turns one raw line into a [`StreamUpdate`] (progress lines plus
//!   semantic [`Evidence`]) and, consumed, into the completion [`Facts`]. All protocol
//!   knowledge of a dialect lives in its decoder; Claude, Grok and Qwen Code share one
//!   Claude-shaped decoder with private dialect differences.
//! * [`Interpretation`] is the one interface callers use: it feeds lines to the decoder,
//!   applies the evidence to the shared model and security policy, and completes into a
//!   report and an outcome (see its documentation for the driving order).
//! * Launching lives in `launch` (the invocation, the model and effort checks, the stop
//!   signals); decoding in `decode` (the decoder seam, evidence, facts, format drift). Both are
//!   re-exported here.
//! * [`failure`] is the one classifier of API failures (an HTTP status, the wordings the
//!   harnesses pass through, `Retry-After`) every dialect decodes its failures with.
//! * [`retained`] holds the pure parsers of the retained records (the Muse session log and the
//!   OpenCode session export); reading them is the driver's job.
//!
//! Nothing here performs I/O: lines come in as `&[u8]`, values come out.

use std::fmt;

mod antigravity;
mod claude;
mod codex;
mod decode;
pub mod failure;
#[cfg(any(fuzzing, test, feature = "fuzz-bodies"))]
#[doc(hidden)]
pub mod fuzzing;
mod gemini;
pub mod interpretation;
mod json;
mod launch;
mod muse;
mod opencode;
mod pi;
pub mod progress;
pub mod retained;
mod scan;
mod usage;

pub use interpretation::{
    Completion, Finished, HarnessExit, Interrupted, Outcome, OutcomeStatus, OversizedLines, Report,
    TurnSummary, UNFINISHED, UNREADABLE_END,
};
pub use json::{MAX_JSON_DEPTH, MAX_JSON_DOCUMENT_VALUES, MAX_JSON_VALUES};
pub use retained::{RetainedError, RetainedKind, RetainedRecord, RetainedRequest};
pub use usage::{Usage, UsageLedger, UsageScope};

pub(crate) use decode::Drift;
pub use decode::{
    Evidence, Facts, FailureKind, MAX_UNKNOWN_TYPES, ModelScope, RefusalCategory, RetryAfter,
    StreamDecoder, StreamUpdate,
};
pub use launch::{
    Invocation, LaunchError, LaunchRequest, MAX_ARG_BYTES, PromptDelivery, Stdin, StopSignal,
    StopSignals, plausible_session_id,
};

/// The one interface callers use; see [`interpretation::Interpretation`].
pub use interpretation::Interpretation;

/// One of the supported agent CLIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    /// Qwen Code (`qwen --output-format stream-json`).
    Qwen,
    /// pi (`pi --mode json`).
    Pi,
    /// Gemini CLI (`gemini --output-format stream-json`).
    Gemini,
}

/// Error for a harness name that is not in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown harness {0:?}; expected one of claude, grok, agy (antigravity), codex, muse, opencode, \
     qwen, pi, gemini"
)]
pub struct UnknownHarness(pub String);

impl Harness {
    /// All harnesses, in registry order.
    pub const ALL: [Harness; 9] = [
        Harness::Claude,
        Harness::Grok,
        Harness::Antigravity,
        Harness::Codex,
        Harness::Muse,
        Harness::OpenCode,
        Harness::Qwen,
        Harness::Pi,
        Harness::Gemini,
    ];

    /// The canonical short name (`claude`, `grok`, `agy`, `codex`, `muse`, `opencode`, `qwen`,
    /// `pi`, `gemini`).
    pub fn name(self) -> &'static str {
        match self {
            Harness::Claude => "claude",
            Harness::Grok => "grok",
            Harness::Antigravity => "agy",
            Harness::Codex => "codex",
            Harness::Muse => "muse",
            Harness::OpenCode => "opencode",
            Harness::Qwen => "qwen",
            Harness::Pi => "pi",
            Harness::Gemini => "gemini",
        }
    }

    /// Whether the harness can resume its own session: read from its invocation, which
    /// passes a resume id on with the harness's resume flag (so a harness added to the
    /// registry answers by how it is launched, never by a list kept beside it).
    pub fn resumes_sessions(self) -> bool {
        const PROBE: &str = "agentrun-resume-probe";
        let request = LaunchRequest {
            prompt: "p".to_owned(),
            resume: Some(PROBE.to_owned()),
            ..LaunchRequest::default()
        };
        self.invocation(&request)
            .is_ok_and(|inv| inv.args.iter().any(|arg| arg.contains(PROBE)))
    }

    /// Looks a harness up by name, case-insensitively; `antigravity` is an alias of `agy`,
    /// `qwen-code` of `qwen`, `gemini-cli` of `gemini`.
    pub fn from_name(name: &str) -> Result<Harness, UnknownHarness> {
        let lower = name.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "claude" | "claude-code" => Harness::Claude,
            "grok" => Harness::Grok,
            "agy" | "antigravity" => Harness::Antigravity,
            "codex" => Harness::Codex,
            "muse" => Harness::Muse,
            "opencode" => Harness::OpenCode,
            "qwen" | "qwen-code" => Harness::Qwen,
            "pi" => Harness::Pi,
            "gemini" | "gemini-cli" => Harness::Gemini,
            _ => return Err(UnknownHarness(name.to_owned())),
        })
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
            Harness::Qwen => Box::new(claude::ClaudeDecoder::new(claude::Dialect::Qwen)),
            Harness::Pi => Box::new(pi::PiDecoder::default()),
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
            Harness::Qwen => Some(RetainedKind::QwenSessionLog),
            Harness::Pi => Some(RetainedKind::PiSessionLog),
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

    #[test]
    fn every_registered_harness_resumes_its_sessions() {
        for harness in Harness::ALL {
            assert!(harness.resumes_sessions(), "{harness}");
        }
    }
}
