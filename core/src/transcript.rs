//! Agent transcripts in the Anthropic Messages shape, as compaction reads and writes them.
//!
//! A transcript is the active history of a model conversation: an optional prior summary, the
//! messages since (user and assistant, each a string or a list of content blocks), and
//! optionally where the *recent suffix* starts — the messages kept verbatim after the next
//! summary. Its JSON form is the Messages API's, so a request body or a saved conversation
//! loads without conversion:
//!
//! ```json
//! {
//!   "summary": "optional prior summary",
//!   "messages": [
//!     {"role": "user", "content": "Why does the build fail?"},
//!     {"role": "assistant", "content": [
//!       {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "make"}}]},
//!     {"role": "user", "content": [
//!       {"type": "tool_result", "tool_use_id": "toolu_1", "content": "error: …",
//!        "artifacts": ["artifact://<64 hex>"]}]}
//!   ],
//!   "recent_start": 2
//! }
//! ```
//!
//! A bare array of messages is accepted too. `summary`, `recent_start` and a tool result's
//! `artifacts` (public `artifact://` URIs said to hold the output; compaction checks them in
//! the store before relying on them) are agentrun's
//! additions; every other field, and every block type other than `text`, `tool_use` and
//! `tool_result`, is carried through untouched (JSON object key order is not kept).
//!
//! Parsing is bounded: the document size, message count and block count have limits
//! ([`TranscriptLimits`]) and JSON nesting is limited by the parser's recursion limit. It is
//! streaming: messages are converted one at a time as they are read, so no value tree of the
//! whole document exists beside the transcript ([`Transcript::from_deserializer`] reads from
//! any serde deserializer, such as one over a file reader).

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::uri::ArtifactUri;

/// Bounds of [`Transcript::from_json`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TranscriptLimits {
    /// Most bytes of JSON (default 1 GiB).
    pub max_bytes: usize,
    /// Most messages (default 1 000 000).
    pub max_messages: usize,
    /// Most content blocks over all messages (default 10 000 000).
    pub max_blocks: usize,
}

impl Default for TranscriptLimits {
    fn default() -> Self {
        Self {
            max_bytes: 1 << 30,
            max_messages: 1_000_000,
            max_blocks: 10_000_000,
        }
    }
}

/// Why a transcript was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranscriptError {
    /// The document is larger than [`TranscriptLimits::max_bytes`].
    #[error("the transcript is {size} bytes; at most {limit} bytes are accepted")]
    TooLarge {
        /// The document's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not JSON (or nested deeper than the parser's recursion limit).
    #[error("the transcript is not valid JSON: {0}")]
    Json(String),
    /// More messages than [`TranscriptLimits::max_messages`].
    #[error("the transcript has more than {0} messages")]
    TooManyMessages(usize),
    /// More content blocks than [`TranscriptLimits::max_blocks`].
    #[error("the transcript has more than {0} content blocks")]
    TooManyBlocks(usize),
    /// A value of the wrong shape; `at` is a JSON path such as `messages[3].content[1]`.
    #[error("{at}: {problem}")]
    Shape {
        /// Where.
        at: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// `recent_start` is past the last message.
    #[error("recent_start is {start}, but the transcript has only {len} messages")]
    RecentStartPastEnd {
        /// The boundary.
        start: usize,
        /// The number of messages.
        len: usize,
    },
    /// `recent_start` puts a tool call before the boundary and its result after it, so the
    /// kept suffix would hold a result without its call.
    #[error(
        "recent_start {start} separates tool call {id:?} (message {call}) from its result \
         (message {result}); move the boundary so that both sides keep whole pairs"
    )]
    SplitPair {
        /// The boundary.
        start: usize,
        /// The tool call id.
        id: String,
        /// The message index of the call.
        call: usize,
        /// The message index of the result.
        result: usize,
    },
}

/// Who wrote a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// `user` (tool results travel in user messages).
    User,
    /// `assistant`.
    Assistant,
    /// Any other role, carried through as spelled.
    Other(String),
}

impl Role {
    fn parse(s: &str) -> Self {
        match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => Role::Other(other.to_owned()),
        }
    }

    /// The role as the JSON spells it.
    pub fn as_str(&self) -> &str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Other(s) => s,
        }
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    pub content: Content,
    /// Every other field of the message object, untouched.
    pub extra: Map<String, Value>,
}

/// A message's content: the string shorthand or a list of blocks.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Content {
    /// `"content": "…"`.
    Text(String),
    /// `"content": [ … ]`.
    Blocks(Vec<Block>),
}

/// A content block.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Block {
    /// `{"type": "text", "text": …}`.
    Text {
        /// The text.
        text: String,
        /// Every other field, untouched.
        extra: Map<String, Value>,
    },
    /// `{"type": "tool_use", …}`: a tool call.
    ToolUse(ToolUse),
    /// `{"type": "tool_result", …}`: a tool's output, paired to its call by id.
    ToolResult(ToolResult),
    /// Any other block (images, thinking, server tools, …), carried through untouched.
    Other(Value),
}

/// A tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// The call id its result refers to.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The structured arguments (`input`), as sent: any JSON value.
    pub input: Value,
    /// Every other field, untouched.
    pub extra: Map<String, Value>,
}

/// A tool result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_use_id: String,
    /// The output: a string, a list of content blocks, or absent.
    pub content: Option<Value>,
    /// `is_error`, when present.
    pub is_error: Option<bool>,
    /// Artifacts said to hold this output (`artifacts`): input like the rest, so compaction
    /// checks them in the store before referring to them.
    pub artifacts: Vec<ArtifactUri>,
    /// Every other field (metadata, attachments, messages the tool emitted), untouched.
    pub extra: Map<String, Value>,
}

impl ToolResult {
    /// The output as text: a string as is; a list of only `text` blocks as their texts joined
    /// by newlines; anything else (images, unknown blocks) as its compact JSON, so no part of
    /// the output is lost when it is retained.
    pub fn output_text(&self) -> Cow<'_, str> {
        match &self.content {
            None => Cow::Borrowed(""),
            Some(Value::String(s)) => Cow::Borrowed(s),
            Some(Value::Array(blocks)) => {
                let texts: Option<Vec<&str>> = blocks
                    .iter()
                    .map(|b| match (b.get("type"), b.get("text")) {
                        (Some(Value::String(t)), Some(Value::String(text)))
                            if t == "text" && b.as_object().is_some_and(|o| o.len() == 2) =>
                        {
                            Some(text.as_str())
                        }
                        _ => None,
                    })
                    .collect();
                match texts {
                    Some(texts) if texts.len() == 1 => Cow::Borrowed(texts[0]),
                    Some(texts) => Cow::Owned(texts.join("\n")),
                    None => Cow::Owned(Value::Array(blocks.clone()).to_string()),
                }
            }
            Some(other) => Cow::Owned(other.to_string()),
        }
    }
}

/// An agent transcript: prior summary, messages, recent-suffix boundary.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transcript {
    /// The summary of the history before `messages`, if an earlier compaction made one.
    pub summary: Option<String>,
    /// The active history, oldest first.
    pub messages: Vec<Message>,
    /// Index of the first message kept verbatim after the next summary; `None`: none kept.
    pub recent_start: Option<usize>,
    /// Every other top-level field (`model`, `system`, …), untouched.
    pub extra: Map<String, Value>,
}

impl Transcript {
    /// Parses the JSON form (see the module documentation) within `limits`. The document's
    /// value tree is never built: messages are converted one at a time as they are read
    /// ([`Transcript::from_deserializer`]).
    pub fn from_json(bytes: &[u8], limits: &TranscriptLimits) -> Result<Self, TranscriptError> {
        if bytes.len() > limits.max_bytes {
            return Err(TranscriptError::TooLarge {
                size: bytes.len(),
                limit: limits.max_bytes,
            });
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let transcript = Self::from_deserializer(&mut de, limits)?;
        de.end().map_err(|e| TranscriptError::Json(e.to_string()))?;
        Ok(transcript)
    }

    /// Parses the JSON form from any serde deserializer (a caller streaming a file uses
    /// `serde_json::Deserializer::from_reader`, and checks the input's size and the end of
    /// the document itself). Each message is read as a value and converted before the next
    /// is read, so the memory needed is the transcript's and one message's, not a value tree
    /// of the whole document beside it; [`TranscriptLimits::max_messages`] and
    /// [`TranscriptLimits::max_blocks`] stop the read as soon as they are exceeded. An error
    /// of the deserializer itself (syntax, recursion limit, a read error of its source) is
    /// [`TranscriptError::Json`].
    pub fn from_deserializer<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
        limits: &TranscriptLimits,
    ) -> Result<Self, TranscriptError> {
        let mut parse = stream::Parse {
            limits,
            error: None,
        };
        match serde::de::DeserializeSeed::deserialize(stream::Top(&mut parse), deserializer) {
            Ok((messages, extra)) => Self::assemble(messages, extra),
            Err(e) => Err(parse
                .error
                .take()
                .unwrap_or_else(|| TranscriptError::Json(e.to_string()))),
        }
    }

    /// Converts a parsed JSON value (moved, so large strings are not copied).
    pub fn from_value(value: Value, limits: &TranscriptLimits) -> Result<Self, TranscriptError> {
        let (messages, extra) = match value {
            Value::Array(messages) => (messages, Map::new()),
            Value::Object(mut top) => match top.remove("messages") {
                Some(Value::Array(messages)) => (messages, top),
                Some(_) => return Err(shape("messages", "expected an array of messages")),
                None => return Err(shape("$", "expected a \"messages\" array")),
            },
            _ => {
                return Err(shape(
                    "$",
                    "expected an array of messages or an object with \"messages\"",
                ));
            }
        };
        if messages.len() > limits.max_messages {
            return Err(TranscriptError::TooManyMessages(limits.max_messages));
        }
        let mut blocks = 0usize;
        let messages = messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| parse_message(i, m, &mut blocks, limits))
            .collect::<Result<Vec<_>, _>>()?;
        Self::assemble(messages, extra)
    }

    /// The transcript of converted messages and the other top-level fields (`summary` and
    /// `recent_start` among them).
    fn assemble(
        messages: Vec<Message>,
        mut extra: Map<String, Value>,
    ) -> Result<Self, TranscriptError> {
        let summary = match extra.remove("summary") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(shape("summary", "expected a string")),
        };
        let recent_start = match extra.remove("recent_start") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| shape("recent_start", "expected a message index"))?,
            ),
        };
        let transcript = Transcript {
            summary,
            messages,
            recent_start,
            extra,
        };
        transcript.check_recent_start()?;
        Ok(transcript)
    }

    /// The messages kept verbatim after the next summary.
    pub fn recent_suffix(&self) -> &[Message] {
        match self.recent_start {
            Some(start) => self.messages.get(start..).unwrap_or(&[]),
            None => &[],
        }
    }

    /// Checks that `recent_start` is in range and does not split a call from its result.
    pub fn check_recent_start(&self) -> Result<(), TranscriptError> {
        let Some(start) = self.recent_start else {
            return Ok(());
        };
        if start > self.messages.len() {
            return Err(TranscriptError::RecentStartPastEnd {
                start,
                len: self.messages.len(),
            });
        }
        let mut calls: HashMap<&str, usize> = HashMap::new();
        for (i, message) in self.messages.iter().enumerate() {
            for block in message.blocks() {
                match block {
                    Block::ToolUse(call) if i < start => {
                        calls.insert(&call.id, i);
                    }
                    Block::ToolResult(result) if i >= start => {
                        if let Some(&call) = calls.get(result.tool_use_id.as_str()) {
                            return Err(TranscriptError::SplitPair {
                                start,
                                id: result.tool_use_id.clone(),
                                call,
                                result: i,
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The JSON form: always an object with `messages`, plus `summary` and `recent_start`
    /// when set.
    pub fn to_value(&self) -> Value {
        let mut top = self.extra.clone();
        if let Some(summary) = &self.summary {
            top.insert("summary".into(), Value::String(summary.clone()));
        }
        top.insert(
            "messages".into(),
            Value::Array(self.messages.iter().map(Message::to_value).collect()),
        );
        if let Some(start) = self.recent_start {
            top.insert("recent_start".into(), Value::from(start));
        }
        Value::Object(top)
    }

    /// The JSON form as bytes.
    pub fn to_json(&self) -> Vec<u8> {
        self.to_value().to_string().into_bytes()
    }
}

impl Message {
    /// The content blocks (none for the string shorthand).
    pub fn blocks(&self) -> &[Block] {
        match &self.content {
            Content::Text(_) => &[],
            Content::Blocks(blocks) => blocks,
        }
    }

    /// The JSON form.
    pub fn to_value(&self) -> Value {
        let mut m = self.extra.clone();
        m.insert("role".into(), Value::String(self.role.as_str().to_owned()));
        let content = match &self.content {
            Content::Text(s) => Value::String(s.clone()),
            Content::Blocks(blocks) => Value::Array(blocks.iter().map(Block::to_value).collect()),
        };
        m.insert("content".into(), content);
        Value::Object(m)
    }
}

impl Block {
    /// The JSON form.
    pub fn to_value(&self) -> Value {
        match self {
            Block::Text { text, extra } => {
                let mut m = extra.clone();
                m.insert("type".into(), "text".into());
                m.insert("text".into(), Value::String(text.clone()));
                Value::Object(m)
            }
            Block::ToolUse(call) => {
                let mut m = call.extra.clone();
                m.insert("type".into(), "tool_use".into());
                m.insert("id".into(), Value::String(call.id.clone()));
                m.insert("name".into(), Value::String(call.name.clone()));
                m.insert("input".into(), call.input.clone());
                Value::Object(m)
            }
            Block::ToolResult(result) => {
                let mut m = result.extra.clone();
                m.insert("type".into(), "tool_result".into());
                m.insert(
                    "tool_use_id".into(),
                    Value::String(result.tool_use_id.clone()),
                );
                if let Some(content) = &result.content {
                    m.insert("content".into(), content.clone());
                }
                if let Some(is_error) = result.is_error {
                    m.insert("is_error".into(), Value::Bool(is_error));
                }
                if !result.artifacts.is_empty() {
                    m.insert(
                        "artifacts".into(),
                        result
                            .artifacts
                            .iter()
                            .map(|u| Value::String(u.to_string()))
                            .collect(),
                    );
                }
                Value::Object(m)
            }
            Block::Other(v) => v.clone(),
        }
    }
}

fn shape(at: impl Into<String>, problem: &str) -> TranscriptError {
    TranscriptError::Shape {
        at: at.into(),
        problem: problem.to_owned(),
    }
}

fn parse_message(
    i: usize,
    value: Value,
    blocks: &mut usize,
    limits: &TranscriptLimits,
) -> Result<Message, TranscriptError> {
    let at = || format!("messages[{i}]");
    let Value::Object(mut m) = value else {
        return Err(shape(at(), "expected a message object"));
    };
    let role = match m.remove("role") {
        Some(Value::String(role)) => Role::parse(&role),
        _ => return Err(shape(at(), "expected a \"role\" string")),
    };
    let content = match m.remove("content") {
        Some(Value::String(s)) => Content::Text(s),
        Some(Value::Array(items)) => {
            *blocks = blocks.saturating_add(items.len());
            if *blocks > limits.max_blocks {
                return Err(TranscriptError::TooManyBlocks(limits.max_blocks));
            }
            Content::Blocks(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(j, b)| parse_block(&format!("messages[{i}].content[{j}]"), b))
                    .collect::<Result<_, _>>()?,
            )
        }
        _ => {
            return Err(shape(
                at(),
                "expected \"content\": a string or an array of blocks",
            ));
        }
    };
    Ok(Message {
        role,
        content,
        extra: released(m),
    })
}

/// `m`, or a new empty map when `m` is empty: a parsed object keeps its allocated node after
/// its known keys are removed (hundreds of bytes each, several per message), and a new empty
/// map allocates nothing.
fn released(m: Map<String, Value>) -> Map<String, Value> {
    if m.is_empty() { Map::new() } else { m }
}

fn parse_block(at: &str, value: Value) -> Result<Block, TranscriptError> {
    let Value::Object(mut m) = value else {
        return Err(shape(at, "expected a content block object"));
    };
    let kind = match m.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        _ => return Err(shape(at, "expected a \"type\" string")),
    };
    match kind {
        "text" => match m.remove("text") {
            Some(Value::String(text)) => {
                m.remove("type");
                Ok(Block::Text {
                    text,
                    extra: released(m),
                })
            }
            // A text block without text is not ours to judge: carried through as it came.
            other => {
                if let Some(v) = other {
                    m.insert("text".into(), v);
                }
                Ok(Block::Other(Value::Object(m)))
            }
        },
        "tool_use" => {
            m.remove("type");
            let id = take_string(&mut m, "id")
                .ok_or_else(|| shape(at, "a tool_use block needs an \"id\" string"))?;
            let name = take_string(&mut m, "name")
                .ok_or_else(|| shape(at, "a tool_use block needs a \"name\" string"))?;
            let input = m.remove("input").unwrap_or(Value::Object(Map::new()));
            Ok(Block::ToolUse(ToolUse {
                id,
                name,
                input,
                extra: released(m),
            }))
        }
        "tool_result" => {
            m.remove("type");
            let tool_use_id = take_string(&mut m, "tool_use_id")
                .ok_or_else(|| shape(at, "a tool_result block needs a \"tool_use_id\" string"))?;
            let content = match m.remove("content") {
                None | Some(Value::Null) => None,
                Some(c @ (Value::String(_) | Value::Array(_))) => Some(c),
                Some(_) => {
                    return Err(shape(
                        at,
                        "a tool_result's \"content\" is a string or an array of blocks",
                    ));
                }
            };
            let is_error = match m.remove("is_error") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(b)) => Some(b),
                Some(_) => return Err(shape(at, "\"is_error\" is a boolean")),
            };
            let artifacts = match m.remove("artifacts") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(uris)) => uris
                    .iter()
                    .map(|u| {
                        u.as_str()
                            .ok_or_else(|| shape(at, "\"artifacts\" holds artifact:// URI strings"))
                            .and_then(|s| {
                                ArtifactUri::parse(s)
                                    .map_err(|e| shape(at, &format!("invalid artifact {s:?}: {e}")))
                            })
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(shape(at, "\"artifacts\" is an array of URIs")),
            };
            Ok(Block::ToolResult(ToolResult {
                tool_use_id,
                content,
                is_error,
                artifacts,
                extra: released(m),
            }))
        }
        _ => Ok(Block::Other(Value::Object(m))),
    }
}

/// The streaming reader behind [`Transcript::from_deserializer`]: serde seeds that convert
/// each message as soon as it is read.
mod stream {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use super::{Message, TranscriptError, TranscriptLimits, parse_message, shape};

    /// The limits, and the transcript error that stopped the read (the deserializer's own
    /// error only carries text).
    pub(super) struct Parse<'l> {
        pub(super) limits: &'l TranscriptLimits,
        pub(super) error: Option<TranscriptError>,
    }

    impl Parse<'_> {
        fn fail<E: de::Error>(&mut self, e: TranscriptError) -> E {
            let text = e.to_string();
            self.error = Some(e);
            E::custom(text)
        }
    }

    /// The document: an array of messages, or an object with `messages`.
    pub(super) struct Top<'a, 'l>(pub(super) &'a mut Parse<'l>);

    /// The messages and every other top-level field.
    type Parts = (Vec<Message>, Map<String, Value>);

    impl<'de> DeserializeSeed<'de> for Top<'_, '_> {
        type Value = Parts;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Parts, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// Implements every visitor method but `visit_seq` and `visit_map` as a shape error.
    macro_rules! other_values_fail {
        ($at:expr, $problem:expr) => {
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Err(self.0.fail(shape($at, $problem)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Err(self.0.fail(shape($at, $problem)))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Err(self.0.fail(shape($at, $problem)))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Err(self.0.fail(shape($at, $problem)))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Err(self.0.fail(shape($at, $problem)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Err(self.0.fail(shape($at, $problem)))
            }
        };
    }

    const TOP_PROBLEM: &str = "expected an array of messages or an object with \"messages\"";

    impl<'de> Visitor<'de> for Top<'_, '_> {
        type Value = Parts;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(TOP_PROBLEM)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Parts, A::Error> {
            Ok((messages(self.0, seq)?, Map::new()))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts, A::Error> {
            let mut extra = Map::new();
            let mut list = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == "messages" {
                    // A repeated key replaces the earlier value, as in a parsed object.
                    list = Some(map.next_value_seed(Messages(&mut *self.0))?);
                } else {
                    extra.insert(key, map.next_value::<Value>()?);
                }
            }
            match list {
                Some(list) => Ok((list, extra)),
                None => Err(self.0.fail(shape("$", "expected a \"messages\" array"))),
            }
        }
        other_values_fail!("$", TOP_PROBLEM);
    }

    /// The `messages` array.
    struct Messages<'a, 'l>(&'a mut Parse<'l>);

    impl<'de> DeserializeSeed<'de> for Messages<'_, '_> {
        type Value = Vec<Message>;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<Message>, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Messages<'_, '_> {
        type Value = Vec<Message>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<Message>, A::Error> {
            messages(self.0, seq)
        }
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<Message>, A::Error> {
            Err(self
                .0
                .fail(shape("messages", "expected an array of messages")))
        }
        other_values_fail!("messages", "expected an array of messages");
    }

    /// Reads the messages one value at a time, converting each before reading the next.
    fn messages<'de, A: SeqAccess<'de>>(
        parse: &mut Parse<'_>,
        mut seq: A,
    ) -> Result<Vec<Message>, A::Error> {
        let mut out = Vec::new();
        let mut blocks = 0usize;
        while let Some(value) = seq.next_element::<Value>()? {
            if out.len() >= parse.limits.max_messages {
                return Err(parse.fail(TranscriptError::TooManyMessages(parse.limits.max_messages)));
            }
            match parse_message(out.len(), value, &mut blocks, parse.limits) {
                Ok(message) => out.push(message),
                Err(e) => return Err(parse.fail(e)),
            }
        }
        Ok(out)
    }
}

fn take_string(m: &mut Map<String, Value>, key: &str) -> Option<String> {
    match m.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            // Put it back so an error path leaves nothing half-taken (the caller errors anyway).
            m.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Transcript, TranscriptError> {
        Transcript::from_json(s.as_bytes(), &TranscriptLimits::default())
    }

    #[test]
    fn round_trips_the_messages_shape_with_unknown_fields_and_blocks() {
        let doc = serde_json::json!({
            "model": "m",
            "summary": "before",
            "messages": [
                {"role": "user", "content": "hi", "id": 7},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "text", "text": "ok", "citations": null},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"filePath": "/a"}, "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "image", "source": {}}], "is_error": false, "meta": 1}
                ]}
            ],
            "recent_start": 1
        });
        let t = Transcript::from_value(doc.clone(), &TranscriptLimits::default()).unwrap();
        assert_eq!(t.summary.as_deref(), Some("before"));
        assert_eq!(t.recent_suffix().len(), 2);
        assert!(matches!(t.messages[1].blocks()[0], Block::Other(_)));
        assert_eq!(t.to_value(), doc);
    }

    #[test]
    fn a_bare_array_is_a_transcript_without_summary() {
        let t = parse(r#"[{"role":"user","content":"x"}]"#).unwrap();
        assert_eq!(t.messages.len(), 1);
        assert_eq!(t.summary, None);
    }

    #[test]
    fn malformed_documents_get_located_errors() {
        let cases = [
            (r#"{"messages": 1}"#, "messages: expected an array"),
            (r#"[{"content":"x"}]"#, "messages[0]: expected a \"role\""),
            (
                r#"[{"role":"user","content":[{"type":"tool_use","name":"x"}]}]"#,
                "messages[0].content[0]: a tool_use block needs an \"id\"",
            ),
            (
                r#"[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","artifacts":["artifact://x"]}]}]"#,
                "messages[0].content[0]: invalid artifact",
            ),
            (
                r#"[{"role":"user","content":[7]}]"#,
                "expected a content block",
            ),
        ];
        for (doc, expected) in cases {
            let err = parse(doc).unwrap_err().to_string();
            assert!(err.contains(expected), "{doc}: {err}");
        }
        assert!(matches!(parse("[").unwrap_err(), TranscriptError::Json(_)));
    }

    #[test]
    fn limits_are_enforced() {
        let limits = TranscriptLimits {
            max_bytes: 10,
            ..Default::default()
        };
        assert!(matches!(
            Transcript::from_json(b"[                  ]", &limits),
            Err(TranscriptError::TooLarge {
                size: 20,
                limit: 10
            })
        ));
        let limits = TranscriptLimits {
            max_messages: 1,
            ..Default::default()
        };
        let two = br#"[{"role":"user","content":"a"},{"role":"user","content":"b"}]"#;
        assert_eq!(
            Transcript::from_json(two, &limits),
            Err(TranscriptError::TooManyMessages(1))
        );
        let limits = TranscriptLimits {
            max_blocks: 1,
            ..Default::default()
        };
        let blocks = br#"[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]"#;
        assert_eq!(
            Transcript::from_json(blocks, &limits),
            Err(TranscriptError::TooManyBlocks(1))
        );
        let deep = "[".repeat(10_000);
        assert!(matches!(parse(&deep), Err(TranscriptError::Json(_))));
    }

    /// The read stops at the first message over the limit, before the rest of the document
    /// is even read: a later syntax error is never reached (a whole-document parse would
    /// report it first).
    #[test]
    fn limits_stop_the_read_where_they_are_exceeded() {
        let limits = TranscriptLimits {
            max_messages: 1,
            ..Default::default()
        };
        let doc = br#"[{"role":"user","content":"a"},{"role":"user","content":"b"}, !!! not json"#;
        assert_eq!(
            Transcript::from_json(doc, &limits),
            Err(TranscriptError::TooManyMessages(1))
        );
        let doc = br#"{"messages":[{"content":"no role"}], !!!"#;
        let err = Transcript::from_json(doc, &TranscriptLimits::default()).unwrap_err();
        assert!(err.to_string().starts_with("messages[0]:"), "{err}");
    }

    /// The streaming read gives what the value conversion gives, from bytes or a reader.
    #[test]
    fn streaming_matches_the_value_conversion() {
        let limits = TranscriptLimits::default();
        for doc in [
            r#"[]"#,
            r#"[{"role":"user","content":"a"}]"#,
            r#"{"model":"m","summary":"s","messages":[{"role":"assistant","x":1,"content":[
                {"type":"tool_use","id":"t","name":"bash","input":{"c":[1,2]}},
                {"type":"thinking","thinking":"…"}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"o"}]}],
                "recent_start":2,"extra":{"deep":[[[]]]}}"#,
            // A repeated key: the last value wins, as in a parsed object.
            r#"{"messages":[{"role":"user","content":"first"}],"messages":[],"summary":"s"}"#,
        ] {
            let streamed = Transcript::from_json(doc.as_bytes(), &limits).expect(doc);
            let value: Value = serde_json::from_str(doc).expect(doc);
            assert_eq!(
                streamed,
                Transcript::from_value(value, &limits).expect(doc),
                "{doc}"
            );
            let mut de = serde_json::Deserializer::from_reader(doc.as_bytes());
            let read = Transcript::from_deserializer(&mut de, &limits).expect(doc);
            de.end().expect(doc);
            assert_eq!(read, streamed, "{doc}");
        }
        for bad in [
            r#"{"messages":{}}"#,
            r#"{"messages":"x"}"#,
            r#"{"messages":null}"#,
        ] {
            let err = Transcript::from_json(bad.as_bytes(), &limits).unwrap_err();
            assert!(
                err.to_string().starts_with("messages: expected an array"),
                "{bad}: {err}"
            );
        }
        for bad in [r#"{}"#, r#""x""#, "7", "null", "true"] {
            let err = Transcript::from_json(bad.as_bytes(), &limits).unwrap_err();
            assert!(
                matches!(err, TranscriptError::Shape { ref at, .. } if at == "$"),
                "{bad}: {err}"
            );
        }
        let err = Transcript::from_json(b"[] []", &limits).unwrap_err();
        assert!(matches!(err, TranscriptError::Json(_)), "{err}");
    }

    #[test]
    fn recent_start_must_not_split_a_pair() {
        let doc = r#"{"messages":[
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"bash","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}
        ],"recent_start":1}"#;
        assert!(matches!(
            parse(doc),
            Err(TranscriptError::SplitPair {
                start: 1,
                call: 0,
                result: 1,
                ..
            })
        ));
        let past = r#"{"messages":[],"recent_start":3}"#;
        assert_eq!(
            parse(past),
            Err(TranscriptError::RecentStartPastEnd { start: 3, len: 0 })
        );
    }

    #[test]
    fn output_text_keeps_everything() {
        let r = |content: Value| ToolResult {
            tool_use_id: "t".into(),
            content: Some(content),
            is_error: None,
            artifacts: vec![],
            extra: Map::new(),
        };
        assert_eq!(r(Value::from("abc")).output_text(), "abc");
        let texts = serde_json::json!([{"type":"text","text":"a"},{"type":"text","text":"b"}]);
        assert_eq!(r(texts).output_text(), "a\nb");
        let image =
            serde_json::json!([{"type":"text","text":"a"},{"type":"image","source":{"data":"x"}}]);
        assert_eq!(r(image.clone()).output_text(), image.to_string());
    }
}
