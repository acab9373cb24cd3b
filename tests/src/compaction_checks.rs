//! The properties of compaction (transcript parsing, pruning and the retry machine) as functions
//! that panic only on a violation, shared by the property tests and the fuzz target.
//!
//! * [`check_prune`]: pairing intact, original unchanged, every reference resolves in the
//!   store to exactly the output it replaced (also when the transcript names artifacts of its
//!   own, right or wrong), artifact reads omitted, pruning idempotent, bounded output;
//! * [`check_machine`]: at most one retry, only after a size failure, the retry input is the
//!   pruned snapshot, the original is never changed, success keeps the recent suffix;
//! * [`CompactionInput`]: generated cases (a summarizer script, a transcript and the store it
//!   names artifacts in), decoded from bytes with `arbitrary`.

use std::collections::{HashMap, HashSet};

use agentrun_core::compaction::{
    ARTIFACT_READ_OMITTED, Action, AttemptKind, Claim, Compaction, CompactionConfig,
    DEFAULT_INSTRUCTIONS, Holds, Pruned, SummarizerFailure, claims, is_artifact_read, prune,
    reference_text, render,
};
use agentrun_core::digest::Digest;
use agentrun_core::transcript::{Block, Content, Message, Role, ToolResult, ToolUse, Transcript};
use agentrun_core::{ArtifactUri, StreamName};
use serde_json::{Map, Value, json};

/// A model of the artifact store: objects by the digest of their bytes (a real store never
/// holds anything else under a name) and manifests, each a map from stream names to objects.
#[derive(Debug, Clone, Default)]
pub struct ModelStore {
    /// Object bytes (as text) by digest.
    pub objects: HashMap<Digest, String>,
    /// Manifests by digest: stream name to object digest.
    pub manifests: HashMap<Digest, HashMap<String, Digest>>,
}

impl ModelStore {
    /// Stores `text` under its digest and returns its URI.
    pub fn put(&mut self, text: &str) -> ArtifactUri {
        let digest = Digest::of(text.as_bytes());
        self.objects.insert(digest, text.to_owned());
        ArtifactUri::new(digest)
    }

    /// What reading `uri` gives, as `agentrun read` resolves it.
    pub fn read(&self, uri: &ArtifactUri) -> Option<&str> {
        let object = match &uri.stream {
            None => uri.digest,
            Some(name) => *self.manifests.get(&uri.digest)?.get(name.as_str())?,
        };
        self.objects.get(&object).map(String::as_str)
    }

    /// The driver's check of one claim.
    pub fn confirms(&self, claim: &Claim) -> bool {
        match (self.read(&claim.uri), claim.holds) {
            (Some(text), Holds::Output(digest)) => Digest::of(text.as_bytes()) == digest,
            (Some(_), _) => true,
            (None, _) => false,
        }
    }

    /// The claims this store confirms.
    pub fn confirmed(&self, claims: &[Claim]) -> HashSet<Claim> {
        claims
            .iter()
            .filter(|c| self.confirms(c))
            .cloned()
            .collect()
    }

    /// This store after a retention.
    fn with(&self, pruned: &Pruned) -> ModelStore {
        let mut after = self.clone();
        for r in &pruned.retain {
            after.put(&r.text);
        }
        after
    }
}

/// Checks every pruning property on `t`, whose claims are checked against `store`.
pub fn check_prune(t: &Transcript, store: &ModelStore) {
    let before = t.clone();
    let verified = store.confirmed(&claims(t));
    let pruned = prune(t, &verified);
    assert_eq!(t, &before, "prune changed the original");
    let snapshot = &pruned.snapshot;
    assert_eq!(snapshot.summary, t.summary);
    assert_eq!(snapshot.recent_start, t.recent_start);
    assert_eq!(snapshot.messages.len(), t.messages.len());

    let retained: HashSet<Digest> = pruned.retain.iter().map(|r| r.digest).collect();
    assert_eq!(retained.len(), pruned.retain.len(), "retained twice");
    for r in &pruned.retain {
        assert_eq!(Digest::of(r.text.as_bytes()), r.digest);
    }
    let after = store.with(&pruned);
    let mut calls: HashMap<&str, &ToolUse> = HashMap::new();
    let mut omitted = 0;
    let mut references = 0;
    for (original, pruned_message) in t.messages.iter().zip(&snapshot.messages) {
        assert_eq!(original.role, pruned_message.role);
        assert_eq!(original.extra, pruned_message.extra);
        let (a, b) = (original.blocks(), pruned_message.blocks());
        assert_eq!(a.len(), b.len(), "a block was added or removed");
        if let (Content::Text(x), Content::Text(y)) = (&original.content, &pruned_message.content) {
            assert_eq!(x, y);
        }
        for (block, pruned_block) in a.iter().zip(b) {
            match (block, pruned_block) {
                (Block::ToolUse(call), _) => {
                    assert_eq!(block, pruned_block, "a tool call changed");
                    calls.insert(&call.id, call);
                }
                (Block::ToolResult(r), Block::ToolResult(p)) => {
                    // Pairing: the result still answers the same call.
                    assert_eq!(r.tool_use_id, p.tool_use_id);
                    let artifact_read = calls
                        .get(r.tool_use_id.as_str())
                        .is_some_and(|c| is_artifact_read(c));
                    if artifact_read {
                        omitted += 1;
                        assert_eq!(p.content, Some(Value::from(ARTIFACT_READ_OMITTED)));
                        assert!(p.extra.is_empty() && p.artifacts.is_empty());
                        assert_eq!(p.is_error, None);
                    } else {
                        references += check_reference(r, p, &after);
                    }
                }
                (Block::ToolResult(_), _) => panic!("a tool result changed its kind"),
                _ => assert_eq!(block, pruned_block, "a non-tool block changed"),
            }
        }
    }
    assert_eq!(pruned.omitted, omitted);
    assert_eq!(pruned.references.len(), references);
    for reference in &pruned.references {
        let uri = ArtifactUri::parse(&reference.uri).expect("a public URI");
        if reference.existing {
            // Reused: it was in the store before, nothing new was stored for it.
            assert!(
                store.read(&uri).is_some(),
                "an existing reference to nothing"
            );
        } else {
            assert!(uri.stream.is_none() && retained.contains(&uri.digest));
        }
    }
    // The marker is never retained in place of an artifact read's output.
    let original_outputs: Vec<String> = results(t).map(|r| r.output_text().into_owned()).collect();
    for r in &pruned.retain {
        assert!(
            original_outputs.contains(&r.text),
            "retained something that is no original output"
        );
    }
    let retained_bytes: usize = pruned.retain.iter().map(|r| r.text.len()).sum();
    let output_bytes: usize = original_outputs.iter().map(String::len).sum();
    assert!(retained_bytes <= output_bytes, "retention is not bounded");

    // Idempotent: the snapshot, checked against the store after the retention, prunes to
    // itself and retains nothing more.
    let twice = prune(snapshot, &after.confirmed(&claims(snapshot)));
    assert_eq!(&twice.snapshot, snapshot, "prune(prune(t)) != prune(t)");
    assert!(twice.retain.is_empty());
    // The snapshot survives its JSON form.
    let limits = agentrun_core::transcript::TranscriptLimits::default();
    let reparsed = Transcript::from_json(&snapshot.to_json(), &limits)
        .expect("a snapshot is a valid transcript");
    assert_eq!(&reparsed, snapshot);
}

/// An ordinary result: every reference of its pruned form resolves in the store after the
/// retention to exactly the output it replaced, unless the result was a reference already (then
/// it stands as it was, and resolves). Returns the number of references.
fn check_reference(r: &ToolResult, p: &ToolResult, after: &ModelStore) -> usize {
    assert_eq!(p.is_error, r.is_error);
    assert_eq!(p.extra, r.extra);
    assert!(
        !p.artifacts.is_empty(),
        "an ordinary output was not referenced"
    );
    let text: Vec<String> = p.artifacts.iter().map(reference_text).collect();
    assert_eq!(p.content, Some(Value::from(text.join("\n"))));
    let output = r.output_text();
    let reads: Vec<Option<&str>> = p.artifacts.iter().map(|u| after.read(u)).collect();
    if !reads.iter().all(|read| *read == Some(output.as_ref())) {
        // Only a result that was a reference already may point elsewhere.
        assert_eq!(
            p, r,
            "a reference does not resolve to the output it replaced"
        );
        assert!(
            reads.iter().all(Option::is_some),
            "a reference does not resolve"
        );
    }
    p.artifacts.len()
}

fn results(t: &Transcript) -> impl Iterator<Item = &ToolResult> {
    t.messages
        .iter()
        .flat_map(Message::blocks)
        .filter_map(|b| match b {
            Block::ToolResult(r) => Some(r),
            _ => None,
        })
}

/// How the scripted summarizer answers one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum Answer {
    /// A valid summary.
    Summary,
    /// The provider's context-length error.
    ContextLength,
    /// The caller's own fit check failed.
    DoesNotFit,
    /// Any other failure.
    Other,
    /// An empty answer.
    Empty,
    /// Bytes that are not UTF-8.
    NotText,
}

/// A scripted run of the machine.
#[derive(Debug, Clone)]
pub struct Script {
    /// The answer to the first and the second summarizer run.
    pub answers: [Answer; 2],
    /// The local fit limit.
    pub max_input_bytes: Option<usize>,
    /// Whether storing the retained outputs succeeds.
    pub retention_ok: bool,
}

/// Drives the machine through `script`, with `store` answering its checks, and checks its
/// properties.
pub fn check_machine(t: &Transcript, store: &ModelStore, script: &Script) {
    let verified = store.confirmed(&claims(t));
    let before = t.clone();
    let config = CompactionConfig::default().max_input_bytes(script.max_input_bytes);
    let mut machine = Compaction::new(t, config);
    let mut runs: Vec<AttemptKind> = Vec::new();
    let mut retained = false;
    let mut checked = false;
    let mut size_failure_seen = false;
    let mut outcome = None;
    for _ in 0..16 {
        let Some(action) = machine.poll_action() else {
            panic!("the machine stalled without an outcome");
        };
        // A local fit rejection is a size failure the machine saw by itself.
        size_failure_seen |= machine.attempts().iter().any(|a| {
            matches!(
                a.result,
                agentrun_core::compaction::AttemptResult::DoesNotFit { .. }
            )
        });
        match action {
            Action::Summarize(input) => {
                if input.kind == AttemptKind::Retry {
                    assert!(size_failure_seen, "a retry without a size failure");
                    let expected = render(DEFAULT_INSTRUCTIONS, &prune(t, &verified).snapshot);
                    assert_eq!(input.text, expected, "the retry input is not the snapshot");
                } else {
                    assert_eq!(input.text, render(DEFAULT_INSTRUCTIONS, t));
                }
                if let Some(limit) = script.max_input_bytes {
                    assert!(input.text.len() <= limit, "an input over the fit limit");
                }
                let answer = script.answers[runs.len().min(1)];
                runs.push(input.kind);
                match answer {
                    Answer::Summary => machine.handle_summary(b" the summary ").unwrap(),
                    Answer::Empty => machine.handle_summary(b"").unwrap(),
                    Answer::NotText => machine.handle_summary(&[0xc3, 0x28]).unwrap(),
                    Answer::ContextLength | Answer::DoesNotFit | Answer::Other => {
                        let detail = "x".to_owned();
                        size_failure_seen |= answer != Answer::Other;
                        machine
                            .handle_failure(match answer {
                                Answer::ContextLength => {
                                    SummarizerFailure::ContextLength { detail }
                                }
                                Answer::DoesNotFit => SummarizerFailure::DoesNotFit { detail },
                                _ => SummarizerFailure::Other { detail },
                            })
                            .unwrap();
                    }
                }
            }
            Action::Verify(asked) => {
                assert!(
                    size_failure_seen && !checked && !retained,
                    "a check out of turn"
                );
                checked = true;
                assert_eq!(asked, claims(t), "not the transcript's claims");
                machine.handle_verified(store.confirmed(&asked)).unwrap();
            }
            Action::Retain(outputs) => {
                assert!(!retained, "retained twice");
                retained = true;
                assert_eq!(checked, !claims(t).is_empty(), "retained before the check");
                assert_eq!(outputs, prune(t, &verified).retain);
                machine
                    .handle_retained(if script.retention_ok {
                        Ok(())
                    } else {
                        Err("disk full".into())
                    })
                    .unwrap();
            }
            Action::Done(done) => {
                outcome = Some(Ok(done));
                break;
            }
            Action::Failed(failed) => {
                outcome = Some(Err(failed));
                break;
            }
            other => panic!("unknown action {other:?}"),
        }
    }
    assert_eq!(machine.poll_action(), None, "an action after the outcome");
    assert!(runs.len() <= 2, "more than one retry");
    assert!(!runs.starts_with(&[AttemptKind::Retry, AttemptKind::Retry]));
    if script.answers[0] == Answer::Other && script.max_input_bytes.is_none() {
        assert!(!retained, "a non-size failure pruned");
        assert_eq!(runs, [AttemptKind::First]);
    }
    assert_eq!(t, &before, "the machine changed the original");
    match outcome.expect("an outcome within 16 steps") {
        Ok(done) => {
            assert_eq!(done.summary, "the summary");
            assert_eq!(done.transcript.summary.as_deref(), Some("the summary"));
            assert_eq!(done.transcript.messages, t.recent_suffix());
            assert!(done.attempts.len() <= 2);
        }
        Err(failed) => assert!(failed.attempts.len() <= 2),
    }
}

const DIGEST: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

/// Most messages of a generated transcript.
pub const MAX_MESSAGES: usize = 64;

/// A generated compaction case, decoded with `arbitrary`: the summarizer's script, then a
/// transcript whose tool calls and results reach the artifact-read, pairing and
/// named-artifact cases that random JSON rarely does. Messages alternate user and assistant;
/// past [`MAX_MESSAGES`] they are ignored.
#[derive(Debug, Clone, PartialEq, Eq, arbitrary::Arbitrary)]
pub struct CompactionInput {
    /// How the summarizer answers and what the driver checks.
    pub script: ScriptInput,
    /// Whether the transcript carries a prior summary.
    pub summary: bool,
    /// The recent-suffix boundary (dropped when it would split a call from its result or lies
    /// past the end).
    pub recent_start: Option<u8>,
    /// The messages.
    pub messages: Vec<MessageInput>,
}

/// A summarizer script: see [`Script`].
#[derive(Debug, Clone, PartialEq, Eq, arbitrary::Arbitrary)]
pub struct ScriptInput {
    /// The answers to the first and the second run.
    pub answers: [Answer; 2],
    /// The local fit limit, `700 + 8 v` bytes: around the size of small rendered
    /// transcripts, so both sides of the check occur.
    pub fit_limit: Option<u8>,
    /// Whether storing the retained outputs fails.
    pub retention_fails: bool,
}

impl ScriptInput {
    /// The script.
    pub fn script(&self) -> Script {
        Script {
            answers: self.answers,
            max_input_bytes: self.fit_limit.map(|v| 700 + usize::from(v) * 8),
            retention_ok: !self.retention_fails,
        }
    }
}

/// One message: string content, or up to three blocks (none: string content).
#[derive(Debug, Clone, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum MessageInput {
    /// `"message <i>"` as string content.
    Text,
    /// Block content.
    Blocks(Vec<BlockInput>),
}

/// One content block. Call and result ids are `c<id % 6>`, so ids collide and calls go
/// unanswered.
#[derive(Debug, Clone, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum BlockInput {
    /// A text block.
    Text(TextInput),
    /// A tool call.
    Call {
        /// Its id.
        id: u8,
        /// The tool.
        tool: ToolInput,
        /// Its arguments.
        args: ArgsInput,
    },
    /// A tool result.
    Result {
        /// The id of the call it answers.
        id: u8,
        /// Its content.
        content: ContentInput,
        /// Whether it carries a `metadata` field.
        metadata: bool,
        /// Its `is_error`.
        is_error: Option<bool>,
        /// The artifacts it names.
        artifacts: ArtifactsInput,
    },
    /// A block of a kind compaction does not know (a thinking block).
    Other {
        /// The id in its signature.
        id: u8,
    },
}

/// Text of a text block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum TextInput {
    /// `hello`.
    Hello,
    /// Empty.
    Empty,
    /// Text that looks like an artifact URI.
    ArtifactLike,
    /// Non-ASCII text.
    Unicode,
}

/// The tool a call names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum ToolInput {
    /// `read`, the artifact-reading tool.
    Read,
    /// `bash`.
    Bash,
    /// `Read`, another tool (names are case-sensitive).
    ReadCapitalized,
    /// `cat`.
    Cat,
}

/// The arguments of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum ArgsInput {
    /// `filePath` an artifact, with an offset.
    ArtifactAtOffset,
    /// `filePath` a stream of an artifact.
    ArtifactStream,
    /// `filePath` a local file.
    LocalPath,
    /// The arguments as a JSON string holding an artifact `filePath`.
    ArgsAsString,
    /// `filePath` an invalid artifact URI.
    BadUri,
    /// An artifact under `file_path` instead of `filePath`.
    SnakeCaseKey,
    /// `null`.
    Null,
}

/// The content of a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum ContentInput {
    /// No content.
    None,
    /// `"output <n>"`.
    Text(u8),
    /// Two text blocks.
    TextBlocks,
    /// An image block.
    Image,
    /// The artifact-read omission marker.
    Omitted,
}

/// The artifacts a result names, and what the store holds for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum ArtifactsInput {
    /// None.
    None,
    /// An artifact holding exactly the output.
    Exact,
    /// A digest nothing holds.
    Dangling,
    /// An artifact holding other bytes.
    OtherBytes,
    /// A manifest stream holding exactly the output.
    ManifestStream,
    /// A manifest stream whose object is not stored (unless another result stores the same
    /// bytes).
    ManifestUnstoredObject,
    /// A manifest that lacks the named stream.
    ManifestWrongStream,
    /// A right and a dangling one together.
    RightAndDangling,
    /// The result as a pruned snapshot has it: its content the reference text of an artifact
    /// that holds an earlier output.
    PrunedRight,
    /// The same with a dangling artifact.
    PrunedDangling,
}

impl CompactionInput {
    /// The transcript and the store it names artifacts in.
    pub fn case(&self) -> (Transcript, ModelStore) {
        let mut store = ModelStore::default();
        let messages = self
            .messages
            .iter()
            .take(MAX_MESSAGES)
            .enumerate()
            .map(|(i, m)| Message {
                role: if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                content: match m {
                    MessageInput::Blocks(blocks) if !blocks.is_empty() => Content::Blocks(
                        blocks
                            .iter()
                            .take(3)
                            .map(|b| block(b, &mut store))
                            .collect(),
                    ),
                    _ => Content::Text(format!("message {i}")),
                },
                extra: Map::new(),
            })
            .collect();
        let mut t = Transcript {
            summary: self.summary.then(|| "prior summary".to_owned()),
            messages,
            recent_start: self.recent_start.map(usize::from),
            extra: Map::new(),
        };
        if t.check_recent_start().is_err() {
            t.recent_start = None;
        }
        (t, store)
    }
}

fn block(input: &BlockInput, store: &mut ModelStore) -> Block {
    let id = |id: &u8| format!("c{}", id % 6);
    match input {
        BlockInput::Text(text) => Block::Text {
            text: match text {
                TextInput::Hello => "hello",
                TextInput::Empty => "",
                TextInput::ArtifactLike => "artifact://x",
                TextInput::Unicode => "ünïcode ✓",
            }
            .to_owned(),
            extra: Map::new(),
        },
        BlockInput::Call {
            id: call,
            tool,
            args,
        } => {
            let name = match tool {
                ToolInput::Read => "read",
                ToolInput::Bash => "bash",
                ToolInput::ReadCapitalized => "Read",
                ToolInput::Cat => "cat",
            };
            let uri = format!("artifact://{DIGEST}");
            let args = match args {
                ArgsInput::ArtifactAtOffset => json!({"filePath": uri, "offset": 0}),
                ArgsInput::ArtifactStream => json!({"filePath": format!("{uri}/stdout")}),
                ArgsInput::LocalPath => json!({"filePath": "/etc/hosts"}),
                ArgsInput::ArgsAsString => Value::String(format!("{{\"filePath\":\"{uri}\"}}")),
                ArgsInput::BadUri => json!({"filePath": "artifact://BAD"}),
                ArgsInput::SnakeCaseKey => json!({"file_path": uri}),
                ArgsInput::Null => Value::Null,
            };
            Block::ToolUse(ToolUse {
                id: id(call),
                name: name.to_owned(),
                input: args,
                extra: Map::new(),
            })
        }
        BlockInput::Result {
            id: call,
            content,
            metadata,
            is_error,
            artifacts: kind,
        } => {
            let content = match content {
                ContentInput::None => None,
                ContentInput::Text(n) => Some(Value::from(format!("output {n}"))),
                ContentInput::TextBlocks => {
                    Some(json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))
                }
                ContentInput::Image => Some(json!([{"type": "image", "source": {"data": "AAAA"}}])),
                ContentInput::Omitted => Some(Value::from(ARTIFACT_READ_OMITTED)),
            };
            let mut extra = Map::new();
            if *metadata {
                extra.insert("metadata".into(), json!({"lines": 3}));
            }
            let mut result = ToolResult {
                tool_use_id: id(call),
                content,
                is_error: *is_error,
                artifacts: Vec::new(),
                extra,
            };
            artifacts(&mut result, *kind, store);
            Block::ToolResult(result)
        }
        BlockInput::Other { id: signature } => {
            Block::Other(json!({"type": "thinking", "thinking": "hmm", "signature": id(signature)}))
        }
    }
}

/// Gives `result` the artifacts `kind` names, and puts what they hold into `store`.
fn artifacts(result: &mut ToolResult, kind: ArtifactsInput, store: &mut ModelStore) {
    let output = result.output_text().into_owned();
    let stdout = || StreamName::new("stdout").expect("a valid name");
    let manifest = |store: &mut ModelStore, streams: &[(&str, Digest)]| {
        let digest = Digest::of(format!("manifest {streams:?}").as_bytes());
        let map = streams.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect();
        store.manifests.insert(digest, map);
        digest
    };
    let dangling = ArtifactUri::new(Digest::of(b"nothing holds this"));
    result.artifacts = match kind {
        ArtifactsInput::None => Vec::new(),
        ArtifactsInput::Exact => vec![store.put(&output)],
        ArtifactsInput::Dangling => vec![dangling],
        ArtifactsInput::OtherBytes => vec![store.put(&format!("not {output}"))],
        ArtifactsInput::ManifestStream => {
            let object = store.put(&output).digest;
            vec![ArtifactUri::stream(
                manifest(store, &[("stdout", object)]),
                stdout(),
            )]
        }
        ArtifactsInput::ManifestUnstoredObject => {
            let object = Digest::of(output.as_bytes());
            vec![ArtifactUri::stream(
                manifest(store, &[("stdout", object)]),
                stdout(),
            )]
        }
        ArtifactsInput::ManifestWrongStream => {
            let object = store.put(&output).digest;
            let stderr = StreamName::new("stderr").expect("a valid name");
            vec![ArtifactUri::stream(
                manifest(store, &[("stdout", object)]),
                stderr,
            )]
        }
        ArtifactsInput::RightAndDangling => vec![store.put(&output), dangling],
        ArtifactsInput::PrunedRight | ArtifactsInput::PrunedDangling => {
            let uri = if kind == ArtifactsInput::PrunedRight {
                store.put("an output pruned earlier")
            } else {
                dangling
            };
            result.content = Some(Value::from(reference_text(&uri)));
            vec![uri]
        }
    };
}
