//! Pruning: the private snapshot a retry summarizes (rules 3 to 6), the claims a transcript
//! makes about its own artifacts, and the references that replace tool output.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::digest::Digest;
use crate::transcript::{Block, Content, Message, ToolResult, ToolUse, Transcript};
use crate::uri::ArtifactUri;

#[cfg(doc)]
use super::Action;

/// What replaces an artifact read's output in the retry input.
pub const ARTIFACT_READ_OMITTED: &str = "[artifact read output omitted for compaction]";

/// The name of the tool whose artifact reads are recognized.
pub const READ_TOOL: &str = "read";

/// The argument of [`READ_TOOL`] holding the path or URI.
pub const FILE_PATH_ARG: &str = "filePath";

/// The reference that replaces an ordinary tool output in the retry input.
pub fn reference_text(uri: &ArtifactUri) -> String {
    format!("[tool output retained for compaction; read it with read(filePath=\"{uri}\")]")
}

/// Whether a call is an artifact read: tool [`READ_TOOL`] with an object argument whose
/// [`FILE_PATH_ARG`] is a string that parses as a public artifact URI.
pub fn is_artifact_read(call: &ToolUse) -> bool {
    call.name == READ_TOOL
        && call
            .input
            .as_object()
            .and_then(|args| args.get(FILE_PATH_ARG))
            .and_then(Value::as_str)
            .is_some_and(|path| ArtifactUri::parse(path).is_ok())
}

/// One tool output to store before the retry, under the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// `Digest::of(text.as_bytes())`: the artifact the references name.
    pub digest: Digest,
    /// The output.
    pub text: String,
}

/// Where an ordinary tool output was replaced by a reference in the retry input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The call id of the replaced result.
    pub tool_use_id: String,
    /// The message index.
    pub message: usize,
    /// The block index within the message.
    pub block: usize,
    /// The artifact the reference names.
    pub uri: String,
    /// Whether the output already had this artifact (nothing new was retained for it).
    pub existing: bool,
}

/// The private snapshot a retry summarizes, and what it needs stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    /// The transcript with ordinary outputs replaced by references and artifact-read outputs
    /// by [`ARTIFACT_READ_OMITTED`].
    pub snapshot: Transcript,
    /// The outputs to store, deduplicated by digest, in first-seen order.
    pub retain: Vec<Retention>,
    /// Every reference made, in transcript order.
    pub references: Vec<Reference>,
    /// How many artifact-read outputs were omitted.
    pub omitted: usize,
}

/// What an artifact a tool result names must hold for the retry to refer to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Holds {
    /// Exactly the bytes with this digest: the result's output (`Digest::of` its
    /// [`ToolResult::output_text`]).
    Output(Digest),
    /// Anything readable: the result is already a compaction reference to the artifact (its
    /// content is exactly [`reference_text`] of its `artifacts`, as in a pruned snapshot), so
    /// the reference stands as it is once it resolves.
    Readable,
}

/// An artifact a tool result already names (its `artifacts`), which the retry refers to only
/// once the caller has checked it in the store ([`Action::Verify`]). A transcript is input like
/// any other: its `artifacts` may name nothing, or something else than its output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    /// The artifact, as the transcript names it.
    pub uri: ArtifactUri,
    /// What reading it must give.
    pub holds: Holds,
}

/// The claims of one ordinary result: one per artifact it names.
fn result_claims(result: &ToolResult) -> Vec<Claim> {
    if result.artifacts.is_empty() {
        return Vec::new();
    }
    let already_pruned = matches!(
        &result.content,
        Some(Value::String(text)) if *text == references_text(&result.artifacts)
    );
    let holds = if already_pruned {
        Holds::Readable
    } else {
        Holds::Output(Digest::of(result.output_text().as_bytes()))
    };
    result
        .artifacts
        .iter()
        .map(|uri| Claim {
            uri: uri.clone(),
            holds,
        })
        .collect()
}

fn references_text(uris: &[ArtifactUri]) -> String {
    uris.iter()
        .map(reference_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `visit(message, block, result)` for every tool result that is not the output of an
/// artifact read (the results [`prune`] refers to), in transcript order.
fn ordinary_results<'t>(
    transcript: &'t Transcript,
    mut visit: impl FnMut(usize, usize, &'t ToolResult),
) {
    let mut artifact_read: HashMap<&str, bool> = HashMap::new();
    for (i, message) in transcript.messages.iter().enumerate() {
        for (j, block) in message.blocks().iter().enumerate() {
            match block {
                Block::ToolUse(call) => {
                    artifact_read.insert(&call.id, is_artifact_read(call));
                }
                Block::ToolResult(result)
                    if artifact_read.get(result.tool_use_id.as_str()) != Some(&true) =>
                {
                    visit(i, j, result);
                }
                _ => {}
            }
        }
    }
}

/// Every artifact the transcript's tool results already name, with what it must hold, without
/// repeats, in transcript order: what the caller checks before [`prune`] may refer to them.
pub fn claims(transcript: &Transcript) -> Vec<Claim> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    ordinary_results(transcript, |_, _, result| {
        for claim in result_claims(result) {
            if seen.insert(claim.clone()) {
                out.push(claim);
            }
        }
    });
    out
}

/// Builds the pruned snapshot of `transcript` (rules 3 to 6). `verified` holds the
/// [`claims`] the store confirmed: a result's own `artifacts` are referred to only when every
/// one of them is confirmed; otherwise its output is retained and referred to like any other,
/// so every reference resolves to exactly the output it replaced. Pure and idempotent: pruning
/// the snapshot again (with the claims of the snapshot confirmed by the store after the
/// retention) gives the same snapshot and nothing more to retain.
pub fn prune(transcript: &Transcript, verified: &HashSet<Claim>) -> Pruned {
    let mut retain = Vec::new();
    let mut retained: HashSet<Digest> = HashSet::new();
    let mut references = Vec::new();
    let mut omitted = 0;
    // Call id -> whether that call (the latest with the id, before the result) is an artifact
    // read. Results answer calls made before them.
    let mut artifact_read: HashMap<&str, bool> = HashMap::new();
    let mut messages = Vec::with_capacity(transcript.messages.len());
    for (i, message) in transcript.messages.iter().enumerate() {
        let content = match &message.content {
            Content::Text(s) => Content::Text(s.clone()),
            Content::Blocks(blocks) => Content::Blocks(
                blocks
                    .iter()
                    .enumerate()
                    .map(|(j, block)| match block {
                        Block::ToolUse(call) => {
                            artifact_read.insert(&call.id, is_artifact_read(call));
                            block.clone()
                        }
                        Block::ToolResult(result) => {
                            if artifact_read.get(result.tool_use_id.as_str()) == Some(&true) {
                                omitted += 1;
                                Block::ToolResult(omit(result))
                            } else {
                                let (pruned, made) =
                                    refer(result, verified, &mut retain, &mut retained);
                                references.extend(made.into_iter().map(|(uri, existing)| {
                                    Reference {
                                        tool_use_id: result.tool_use_id.clone(),
                                        message: i,
                                        block: j,
                                        uri,
                                        existing,
                                    }
                                }));
                                Block::ToolResult(pruned)
                            }
                        }
                        other => other.clone(),
                    })
                    .collect(),
            ),
        };
        messages.push(Message {
            role: message.role.clone(),
            content,
            extra: message.extra.clone(),
        });
    }
    Pruned {
        snapshot: Transcript {
            summary: transcript.summary.clone(),
            messages,
            recent_start: transcript.recent_start,
            extra: transcript.extra.clone(),
        },
        retain,
        references,
        omitted,
    }
}

/// Rule 4 and 6: only the pairing survives.
fn omit(result: &ToolResult) -> ToolResult {
    ToolResult {
        tool_use_id: result.tool_use_id.clone(),
        content: Some(Value::String(ARTIFACT_READ_OMITTED.to_owned())),
        is_error: None,
        artifacts: Vec::new(),
        extra: Map::new(),
    }
}

/// Rule 3: the output is replaced by references to its artifacts when the store confirmed
/// every one; otherwise it gets its own (queued for retention). Returns the pruned block and
/// `(uri, existing)` per reference.
fn refer(
    result: &ToolResult,
    verified: &HashSet<Claim>,
    retain: &mut Vec<Retention>,
    retained: &mut HashSet<Digest>,
) -> (ToolResult, Vec<(String, bool)>) {
    let claims = result_claims(result);
    let confirmed = !claims.is_empty() && claims.iter().all(|c| verified.contains(c));
    let artifacts = if confirmed {
        result.artifacts.clone()
    } else {
        let text = result.output_text();
        let digest = Digest::of(text.as_bytes());
        if retained.insert(digest) {
            retain.push(Retention {
                digest,
                text: text.into_owned(),
            });
        }
        vec![ArtifactUri::new(digest)]
    };
    let made = artifacts
        .iter()
        .map(|u| (u.to_string(), confirmed))
        .collect();
    (
        ToolResult {
            tool_use_id: result.tool_use_id.clone(),
            content: Some(Value::String(references_text(&artifacts))),
            is_error: result.is_error,
            artifacts,
            extra: result.extra.clone(),
        },
        made,
    )
}
