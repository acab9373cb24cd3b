//! Compaction with one pruned retry: summarize a whole transcript, and when the summarizer's
//! input is too large, retry once with tool output turned into artifact references.
//!
//! # The rules
//!
//! 1. The first attempt summarizes the entire active history: the prior summary, every message
//!    and the recent suffix that is kept afterwards. Nothing outside the transcript is added.
//! 2. Only a size failure of the summarizer's own input permits a retry, and only one: the
//!    caller's local fit check (see [`CompactionConfig::max_input_bytes`]) or the provider's
//!    context-length error. Why compaction started (even a parent context overflow) and every
//!    other failure never lead to pruning.
//! 3. The retry input is a private pruned snapshot ([`prune`]): every ordinary tool output,
//!    whatever its size or recency, is replaced by a `read(filePath="artifact://…")` reference
//!    to an artifact holding exactly it. Output whose `artifacts` the store confirms
//!    ([`Action::Verify`]: present, readable, holding exactly that output) refers to those;
//!    any other output, including one whose `artifacts` name nothing or something else, is
//!    retained first.
//! 4. The output of an *artifact read* — a call of the tool `read` whose parsed `filePath`
//!    argument is an `artifact://` URI — is not retained again: its content and every other
//!    field of its result block (metadata, attachments, messages the tool emitted) are
//!    dropped, for every stream and any size. Call/result pairing stays intact.
//! 5. Recognition is structural: the arguments must be a JSON object whose `filePath` parses
//!    with [`ArtifactUri::parse`](crate::uri::ArtifactUri::parse). A filesystem `read`, arguments that are a string containing
//!    `artifact://`, another tool with such a `filePath`, malformed arguments: all ordinary.
//! 6. An artifact read's output becomes [`ARTIFACT_READ_OMITTED`]; that marker is never
//!    itself retained.
//! 7. Nothing is mutated: the machine only borrows the transcript. A failure, an empty or
//!    non-text answer, or an invalid summary leaves the caller's context as it was; the snapshot
//!    is private to the retry and produces no durable events.
//! 8. Every reference uses the public read syntax, `read(filePath="artifact://<digest>")`.
//!
//! # Driving order
//!
//! ```text
//! let mut c = Compaction::new(&transcript, config);
//! loop {
//!     match c.poll_action() {
//!         Some(Action::Summarize(input)) => run the summarizer on input.text, then
//!             c.handle_summary(&stdout)  or  c.handle_failure(failure),
//!         Some(Action::Verify(claims))   => check each claim in the store, then
//!             c.handle_verified(the confirmed claims),
//!         Some(Action::Retain(outputs))  => store every output under its digest (the
//!             digest of its bytes) and keep them with the confirmed claims, then
//!             c.handle_retained(result),
//!         Some(Action::Done(compacted))  => use compacted.summary; stop,
//!         Some(Action::Failed(failed))   => keep the original context; stop,
//!         None                           => a handle_* call is due (or the machine finished),
//!     }
//! }
//! ```
//!
//! [`Action::Verify`] and [`Action::Retain`] come in that order before the retry's
//! [`Action::Summarize`]: the first only when the transcript names artifacts, the second
//! whenever the retry refers to any (its list of outputs to store may be empty), so the caller
//! can keep everything the retry refers to together. There is no timer: the caller bounds the summarizer's run time and
//! reports a timeout as an ordinary failure. `handle_*` calls out of order are refused with
//! [`StateError`] and change nothing.

mod machine;
mod prune;
mod render;

pub use machine::{
    Action, Attempt, AttemptKind, AttemptResult, Compacted, Compaction, CompactionConfig,
    CompactionError, DEFAULT_MAX_SUMMARY_BYTES, Failed, RetentionFailure, StateError,
    SummarizerFailure, SummarizerInput, Trigger,
};
pub use prune::{
    ARTIFACT_READ_OMITTED, Claim, FILE_PATH_ARG, Holds, Pruned, READ_TOOL, Reference, Retention,
    claims, is_artifact_read, prune, reference_text,
};
pub use render::{DEFAULT_INSTRUCTIONS, render};
