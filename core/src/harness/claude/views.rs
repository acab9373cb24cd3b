//! The borrowed views of Claude-dialect frames the decoder reads (through the scan's index,
//! or from a parsed value): only the fields it uses, every other one skipped.

use serde::Deserialize;
use serde_json::Value;

use crate::harness::json::lenient::{self, Bool, NonNull, Obj, Seq, Str};
use crate::harness::scan;

/// The fields of an `assistant` frame the decoder reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct AssistantFrame<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Str<'a>,
    pub(super) parent_tool_use_id: NonNull,
    pub(super) is_api_error_message: Bool,
    /// An API-error message's kind (`rate_limit`, `authentication_failed`, …).
    #[serde(borrow)]
    pub(super) error: Str<'a>,
    #[serde(borrow)]
    pub(super) message: Obj<Message<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Message<'a> {
    #[serde(borrow)]
    pub(super) model: Str<'a>,
    pub(super) is_api_error_message: Bool,
    #[serde(borrow)]
    pub(super) content: Seq<Block<'a>>,
    /// Qwen's token counts of this request (any value counts as present, as in the value
    /// read).
    pub(super) usage: lenient::Present<QwenUsage>,
}

/// The counts of a Qwen assistant message's `usage`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct QwenUsage {
    pub(super) input_tokens: lenient::U64,
    pub(super) cache_read_input_tokens: lenient::U64,
    pub(super) output_tokens: lenient::U64,
    pub(super) reasoning_tokens: lenient::U64,
}

/// The fields of a `system/init` frame the decoder reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct InitFrame<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Str<'a>,
    #[serde(borrow)]
    pub(super) subtype: Str<'a>,
    #[serde(borrow)]
    pub(super) session_id: Str<'a>,
    #[serde(rename = "apiKeySource", borrow)]
    pub(super) api_key_source: Str<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Block<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Str<'a>,
    #[serde(borrow)]
    pub(super) name: Str<'a>,
    #[serde(borrow)]
    pub(super) input: Obj<ToolInput<'a>>,
}

/// The text blocks of an API-error `assistant` frame: read again only for such a frame, so
/// that the first read ([`AssistantFrame`]) skips the text of every other one (most of an
/// assistant frame's bytes, and the decoder has no other use for them).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ErrorTextFrame<'a> {
    #[serde(borrow)]
    pub(super) message: Obj<ErrorTextMessage<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ErrorTextMessage<'a> {
    #[serde(borrow)]
    pub(super) content: Seq<TextBlock<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct TextBlock<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Str<'a>,
    #[serde(borrow)]
    pub(super) text: Str<'a>,
}

/// Where an assistant frame was read from, for the second read of an API error's text.
#[derive(Clone, Copy)]
pub(super) enum FrameSource<'l, 'c, 's> {
    Line(&'l [u8], Option<&'c scan::Checked<'l, 's>>),
    Value(&'l Value),
}

impl AssistantFrame<'_> {
    /// Whether the frame stands for an API error rather than a model's answer (the harness
    /// sets `is_api_error_message` on the frame or its message).
    pub(super) fn is_api_error(&self) -> bool {
        self.is_api_error_message.0 == Some(true)
            || (self.message.0.as_ref()).is_some_and(|m| m.is_api_error_message.0 == Some(true))
    }

    /// The text of the main loop's API-error frame read from `source` (its text blocks
    /// joined by newlines); `None` for any other frame, or one without text.
    pub(super) fn error_text(&self, source: FrameSource<'_, '_, '_>) -> Option<String> {
        if self.parent_tool_use_id.0 || !self.is_api_error() {
            return None;
        }
        source.text()
    }
}

impl FrameSource<'_, '_, '_> {
    /// The frame's text blocks, joined by newlines; `None` when it has none.
    pub(super) fn text(self) -> Option<String> {
        let frame = match self {
            FrameSource::Line(line, checked) => {
                lenient::from_checked::<ErrorTextFrame<'_>>(line, checked)
            }
            FrameSource::Value(v) => lenient::from_value::<ErrorTextFrame<'_>>(v),
        }?;
        let message = frame.message.0?;
        let text: Vec<&str> = message
            .content
            .0
            .iter()
            .filter(|b| b.kind.get() == Some("text"))
            .filter_map(|b| b.text.get())
            .collect();
        (!text.is_empty()).then(|| text.join("\n"))
    }
}

/// The tool input fields progress lines use.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ToolInput<'a> {
    #[serde(borrow)]
    pub(super) command: Str<'a>,
    #[serde(borrow)]
    pub(super) skill: Str<'a>,
    #[serde(borrow)]
    pub(super) name: Str<'a>,
    #[serde(borrow)]
    pub(super) file_path: Str<'a>,
    #[serde(borrow)]
    pub(super) absolute_path: Str<'a>,
    #[serde(borrow)]
    pub(super) pattern: Str<'a>,
    #[serde(borrow)]
    pub(super) description: Str<'a>,
    #[serde(borrow)]
    pub(super) url: Str<'a>,
    #[serde(borrow)]
    pub(super) query: Str<'a>,
}
