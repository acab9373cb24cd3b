//! Rendering a transcript as the summarizer's input: the instructions, then tagged text.

use std::fmt::Write;

use serde_json::Value;

use crate::transcript::{Block, Content, Transcript};

/// What the summarizer is asked to do; the rendered transcript follows it.
pub const DEFAULT_INSTRUCTIONS: &str = "\
Summarize the conversation below so that the summary can replace it in a model's context \
window. Keep the goal, the decisions and their reasons, the facts established, the files, \
commands and identifiers involved, what is unfinished and the next steps. Tool output \
replaced by a read(filePath=\"artifact://...\") reference can be read back later with that \
call: keep the references that matter. Answer with the summary only.";

/// Renders the summarizer input: instructions, then the transcript as tagged text.
///
/// Two passes: the first only counts the bytes, so the text is allocated once at its exact
/// size. The input can be as large as the transcript, and a string grown by doubling holds up
/// to twice its length, with the old and the new buffer both alive while it moves.
pub fn render(instructions: &str, transcript: &Transcript) -> String {
    let mut count = Count(0);
    render_into(&mut count, instructions, transcript);
    let mut out = String::with_capacity(count.0);
    render_into(&mut out, instructions, transcript);
    out
}

/// A `fmt::Write` that only counts bytes.
struct Count(usize);

impl Write for Count {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

fn render_into(out: &mut impl Write, instructions: &str, transcript: &Transcript) {
    // Writing to a `String` or a `Count` never fails.
    let _ = out.write_str(instructions);
    let _ = out.write_str("\n\n<transcript>\n");
    if let Some(summary) = &transcript.summary {
        let _ = out.write_str("[summary of the earlier conversation]\n");
        push_line(out, summary);
    }
    for message in &transcript.messages {
        let _ = writeln!(out, "[{}]", message.role.as_str());
        match &message.content {
            Content::Text(s) => push_line(out, s),
            Content::Blocks(blocks) => {
                for block in blocks {
                    render_block(out, block);
                }
            }
        }
    }
    let _ = out.write_str("</transcript>\n");
}

fn push_line(out: &mut impl Write, s: &str) {
    let _ = out.write_str(s);
    if !s.ends_with('\n') {
        let _ = out.write_char('\n');
    }
}

fn render_block(out: &mut impl Write, block: &Block) {
    match block {
        Block::Text { text, .. } => push_line(out, text),
        Block::ToolUse(call) => {
            let _ = writeln!(out, "[tool call {} id={}]", call.name, call.id);
            push_line(out, &call.input.to_string());
        }
        Block::ToolResult(result) => {
            let error = if result.is_error == Some(true) {
                " error"
            } else {
                ""
            };
            let _ = writeln!(out, "[tool result id={}{error}]", result.tool_use_id);
            push_line(out, &result.output_text());
        }
        Block::Other(v) => {
            let kind = v.get("type").and_then(Value::as_str).unwrap_or("unknown");
            match ["text", "thinking"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
            {
                Some(text) => {
                    let _ = writeln!(out, "[{kind}]");
                    push_line(out, text);
                }
                None => {
                    let _ = writeln!(out, "[{kind} block]");
                }
            }
        }
    }
}
