//! Where reading continues after what was shown, and the model's syntax for it.
//!
//! A [`Continuation`] is decided once, by whoever knows the stream's line lengths: the record
//! when a capture finishes (from the retained head and the first newline after it), a line
//! page when the store serves it (from the line index). Front ends only render it, each in its
//! own syntax: the model's `read(...)` call ([`ModelRead`], here because every front end shows
//! the model the same text), the command line's `agentrun read` options and MCP page metadata
//! (in their crates). A line offset is chosen whenever the first line not shown in full fits a
//! page; a line longer than a page ([`MAX_PAGE_BYTES`]) is continued by byte offset, at the first
//! byte not shown, since a line read of it would be refused.

use serde::{Deserialize, Serialize};

use crate::page::MAX_PAGE_BYTES;
use crate::uri::ArtifactUri;

/// Where reading continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "at", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Continuation {
    /// Read lines from this zero-based line: the first line not shown in full.
    Line(u64),
    /// Read bytes from this byte offset: the first byte not shown, inside (or at the start
    /// of) a line too long for a page.
    Byte(u64),
    /// Everything was shown.
    End,
}

impl Continuation {
    /// The continuation after `shown` bytes of a stream of `total` bytes, of which `newlines`
    /// are `\n`, when the first line not shown in full starts at byte `line_start` and ends
    /// (its `\n` included) at byte `line_end` (exclusive; the stream's end for an unterminated
    /// last line).
    pub fn after(shown: u64, total: u64, newlines: u64, line_start: u64, line_end: u64) -> Self {
        if shown >= total {
            Self::End
        } else {
            Self::at_line(newlines, line_start, line_end, shown)
        }
    }

    /// The continuation to `line`, which spans bytes `[start, end)`: the line itself, or byte
    /// `resume` (its first byte not shown) when it alone is longer than a page, since a line
    /// read of it would be refused.
    pub fn at_line(line: u64, start: u64, end: u64, resume: u64) -> Self {
        if end.saturating_sub(start) > MAX_PAGE_BYTES as u64 {
            Self::Byte(resume)
        } else {
            Self::Line(line)
        }
    }

    /// The continuation as page metadata names it, the same in every front end's JSON:
    /// `{"offset": N}` for lines, `{"byteOffset": B}` for bytes, `null` at the end.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Self::Line(line) => serde_json::json!({ "offset": line }),
            Self::Byte(byte) => serde_json::json!({ "byteOffset": byte }),
            Self::End => serde_json::Value::Null,
        }
    }
}

/// A syntax that names a read of an artifact from a continuation: one per front end.
pub trait ReadSyntax {
    /// The call or command that reads `uri` from `at` (never called with
    /// [`Continuation::End`]).
    fn read_call(&self, uri: &ArtifactUri, at: Continuation) -> String;
}

/// The model's read tool: `read(filePath="artifact://…", offset=N)`, or `byteOffset=B`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelRead;

impl ReadSyntax for ModelRead {
    fn read_call(&self, uri: &ArtifactUri, at: Continuation) -> String {
        match at {
            Continuation::Byte(byte) => format!("read(filePath=\"{uri}\", byteOffset={byte})"),
            Continuation::Line(line) => format!("read(filePath=\"{uri}\", offset={line})"),
            Continuation::End => format!("read(filePath=\"{uri}\", offset=0)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Digest;

    #[test]
    fn a_line_longer_than_a_page_continues_at_the_first_byte_not_shown() {
        let page = MAX_PAGE_BYTES as u64;
        assert_eq!(Continuation::after(10, 10, 3, 8, 10), Continuation::End);
        assert_eq!(Continuation::after(5, 100, 1, 2, 9), Continuation::Line(1));
        assert_eq!(
            Continuation::after(5, 3 * page, 0, 0, page),
            Continuation::Line(0),
            "a line of exactly a page is read by lines"
        );
        assert_eq!(
            Continuation::after(5, 3 * page, 0, 0, page + 1),
            Continuation::Byte(5)
        );
    }

    #[test]
    fn the_json_shape_names_lines_bytes_or_null() {
        assert_eq!(
            Continuation::Line(3).to_json(),
            serde_json::json!({"offset": 3})
        );
        assert_eq!(
            Continuation::Byte(9).to_json(),
            serde_json::json!({"byteOffset": 9})
        );
        assert_eq!(Continuation::End.to_json(), serde_json::Value::Null);
    }

    #[test]
    fn the_model_syntax_names_lines_or_bytes() {
        let uri = ArtifactUri::new(Digest::of(b"x"));
        assert_eq!(
            ModelRead.read_call(&uri, Continuation::Line(7)),
            format!("read(filePath=\"{uri}\", offset=7)")
        );
        assert_eq!(
            ModelRead.read_call(&uri, Continuation::Byte(51200)),
            format!("read(filePath=\"{uri}\", byteOffset=51200)")
        );
    }
}
