//! Artifact pages: line pages and byte ranges with continuation metadata.
//!
//! A [`PageCursor`] assembles one page from the bytes that follow the start of the requested
//! line, fed in any chunking. The store (agentrun-fs) finds that start through the line index
//! and feeds verified blocks; [`extract_page`] is the same logic over an in-memory artifact and
//! serves as the reference in tests.
//!
//! Driving order: [`PageCursor::new`] → [`PageCursor::handle_bytes`] until it returns
//! [`CursorState::Complete`] or the artifact ends → [`PageCursor::finish`].

use crate::continuation::{Continuation, ModelRead, ReadSyntax};

/// Largest page, in bytes (2 MiB). A page that would exceed it is an error, never truncated.
pub const MAX_PAGE_BYTES: usize = 2 << 20;

/// Default and largest line count of a page.
pub const MAX_PAGE_LINES: u32 = 2000;

/// Why a page request or extraction failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PageError {
    /// `limit` outside 1–2000.
    #[error("limit must be between 1 and {MAX_PAGE_LINES}, got {0}")]
    Limit(u64),
    /// Byte limit outside 1–2 MiB.
    #[error("byte limit must be between 1 and {MAX_PAGE_BYTES}, got {0}")]
    ByteLimit(u64),
    /// The offset lies past the last line.
    #[error("offset {offset} is past the end: the artifact has {total_lines} lines")]
    OffsetPastEnd {
        /// Requested offset.
        offset: u64,
        /// Lines in the artifact.
        total_lines: u64,
    },
    /// The byte offset lies past the end.
    #[error("byte offset {offset} is past the end: the artifact has {total_bytes} bytes")]
    ByteOffsetPastEnd {
        /// Requested byte offset.
        offset: u64,
        /// Bytes in the artifact.
        total_bytes: u64,
    },
    /// The page would exceed [`MAX_PAGE_BYTES`].
    #[error("resource limit: {}", page_advice(*.lines, *.offset, *.line_start_byte))]
    PageTooLarge {
        /// First line of the page.
        offset: u64,
        /// Lines that fit within the bound, fewer than asked for (0: line `offset` alone
        /// exceeds it).
        lines: u64,
        /// Byte offset of the first line that did not fit, for a byte-range read.
        line_start_byte: u64,
    },
}

fn page_advice(fitting: u64, offset: u64, line_start_byte: u64) -> String {
    if fitting == 0 {
        format!(
            "line {offset} alone is longer than the {MAX_PAGE_BYTES}-byte page bound; read it in \
             pieces with byte ranges starting at byte offset {line_start_byte}"
        )
    } else {
        format!(
            "the lines asked for from line {offset} exceed the {MAX_PAGE_BYTES}-byte page \
             bound; only the first {fitting} fit: ask for at most {fitting} (limit {fitting})"
        )
    }
}

/// A validated line-page request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Zero-based first line.
    pub offset: u64,
    /// Most lines to return, 1–2000.
    pub limit: u32,
    /// Whether fewer lines are returned when `limit` lines exceed [`MAX_PAGE_BYTES`]
    /// ([`up_to`](Self::up_to)) instead of an error.
    fit: bool,
}

impl PageRequest {
    /// Validates the limit.
    pub fn new(offset: u64, limit: u64) -> Result<Self, PageError> {
        match u32::try_from(limit) {
            Ok(l) if (1..=MAX_PAGE_LINES).contains(&l) => Ok(Self {
                offset,
                limit: l,
                fit: false,
            }),
            _ => Err(PageError::Limit(limit)),
        }
    }

    /// At most `limit` lines from `offset`, fewer when they would exceed the page bound: what
    /// a reader following a continuation asks for, so that a page of long lines is served
    /// rather than refused. Line `offset` alone over the bound is still refused
    /// ([`PageError::PageTooLarge`] with `lines: 0`); a continuation never points there.
    pub fn up_to(offset: u64, limit: u64) -> Result<Self, PageError> {
        Ok(Self {
            fit: true,
            ..Self::new(offset, limit)?
        })
    }
}

impl Default for PageRequest {
    fn default() -> Self {
        Self {
            offset: 0,
            limit: MAX_PAGE_LINES,
            fit: false,
        }
    }
}

/// One page of whole stored lines, exactly as stored, with continuation metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// First line of the page.
    pub offset: u64,
    /// Lines in the page.
    pub lines: u64,
    /// Lines in the artifact.
    pub total_lines: u64,
    /// First line not returned, when more remain.
    pub next_offset: Option<u64>,
    /// Where reading continues: line `next_offset`, or its first byte when that line alone is
    /// longer than a page (the store decides this from the line index), or the end.
    pub continuation: Continuation,
    /// The stored bytes.
    pub bytes: Vec<u8>,
}

impl Page {
    /// The page as model-facing text: content decoded lossily, then one continuation line.
    /// Pages are self-paginating output: callers return this as is, without retaining it as
    /// a new artifact or truncating it again.
    pub fn to_model_text(&self, uri: &crate::uri::ArtifactUri) -> String {
        let mut out = String::from_utf8_lossy(&self.bytes).into_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        match self.continuation {
            Continuation::End => {
                out.push_str(&format!("[End of artifact: {} lines]", self.total_lines));
            }
            at => out.push_str(&format!(
                "[Lines {}-{} of {}. Read more: {}]",
                self.offset,
                self.offset + self.lines.saturating_sub(1),
                self.total_lines,
                ModelRead.read_call(uri, at)
            )),
        }
        out
    }
}

/// Whether a cursor wants more bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CursorState {
    /// The page is not full yet.
    NeedMore,
    /// The page holds `limit` lines; feed nothing more.
    Complete,
}

/// Assembles one page from the bytes starting at its first line.
#[derive(Debug)]
pub struct PageCursor {
    request: PageRequest,
    total_lines: u64,
    start_byte: u64,
    bytes: Vec<u8>,
    lines: u64,
    /// Bytes of the whole lines taken so far (`bytes` may end inside a line).
    whole: usize,
    /// A fitting request stopped at the page bound.
    full: bool,
}

impl PageCursor {
    /// A cursor for `request` on an artifact of `total_lines` lines whose line
    /// `request.offset` starts at byte `start_byte`.
    pub fn new(request: PageRequest, total_lines: u64, start_byte: u64) -> Result<Self, PageError> {
        if request.offset > total_lines {
            return Err(PageError::OffsetPastEnd {
                offset: request.offset,
                total_lines,
            });
        }
        Ok(Self {
            request,
            total_lines,
            start_byte,
            bytes: Vec::new(),
            lines: 0,
            whole: 0,
            full: false,
        })
    }

    /// Feeds the next bytes. Bytes after the page's last line are ignored.
    pub fn handle_bytes(&mut self, mut chunk: &[u8]) -> Result<CursorState, PageError> {
        let limit = u64::from(self.request.limit);
        while self.lines < limit && !self.full && !chunk.is_empty() {
            let (take, ends_line) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if self.bytes.len() + take > MAX_PAGE_BYTES {
                if self.request.fit && self.lines > 0 {
                    // The lines that fit, without the start of the one that does not.
                    self.bytes.truncate(self.whole);
                    self.full = true;
                    break;
                }
                return Err(self.too_large());
            }
            self.bytes.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if ends_line {
                self.lines += 1;
                self.whole = self.bytes.len();
            }
        }
        Ok(if self.lines >= limit || self.full {
            CursorState::Complete
        } else {
            CursorState::NeedMore
        })
    }

    fn too_large(&self) -> PageError {
        let line_start = match memchr::memrchr(b'\n', &self.bytes) {
            Some(i) if self.lines > 0 => i as u64 + 1,
            _ => 0,
        };
        PageError::PageTooLarge {
            offset: self.request.offset,
            lines: self.lines,
            line_start_byte: self.start_byte + line_start,
        }
    }

    /// The page. Call after [`CursorState::Complete`] or when the artifact has ended.
    pub fn finish(self) -> Page {
        let mut lines = self.lines;
        if self.bytes.last().is_some_and(|&b| b != b'\n') {
            lines += 1; // the unterminated final line of the artifact
        }
        let end = self.request.offset + lines;
        let next_offset = (end < self.total_lines).then_some(end);
        Page {
            offset: self.request.offset,
            lines,
            total_lines: self.total_lines,
            next_offset,
            continuation: next_offset.map_or(Continuation::End, Continuation::Line),
            bytes: self.bytes,
        }
    }
}

/// Line count of `content` (a final segment without `\n` is a line).
pub fn count_lines(content: &[u8]) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', content).count() as u64;
    newlines + u64::from(content.last().is_some_and(|&b| b != b'\n'))
}

/// Byte offset where line `line` starts (`content.len()` for the line after the last).
pub fn line_start(content: &[u8], line: u64) -> Option<usize> {
    if line == 0 {
        return Some(0);
    }
    crate::index::after_nth_newline(content, line)
        .or_else(|| (line == count_lines(content)).then_some(content.len()))
}

/// Reference page extraction over a whole in-memory artifact.
pub fn extract_page(content: &[u8], request: PageRequest) -> Result<Page, PageError> {
    let total = count_lines(content);
    if request.offset > total {
        return Err(PageError::OffsetPastEnd {
            offset: request.offset,
            total_lines: total,
        });
    }
    let start = line_start(content, request.offset).unwrap_or(content.len());
    let mut cursor = PageCursor::new(request, total, start as u64)?;
    cursor.handle_bytes(&content[start..])?;
    let mut page = cursor.finish();
    if let Some(next) = page.next_offset {
        let from = start + page.bytes.len();
        let to = line_start(content, next + 1).unwrap_or(content.len());
        page.continuation = Continuation::at_line(next, from as u64, to as u64, from as u64);
    }
    Ok(page)
}

/// A validated byte-range request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub offset: u64,
    /// Most bytes, 1 to [`MAX_PAGE_BYTES`].
    pub limit: u32,
}

impl ByteRange {
    /// Validates the limit.
    pub fn new(offset: u64, limit: u64) -> Result<Self, PageError> {
        match u32::try_from(limit) {
            Ok(l) if l >= 1 && l as usize <= MAX_PAGE_BYTES => Ok(Self { offset, limit: l }),
            _ => Err(PageError::ByteLimit(limit)),
        }
    }

    /// The `[start, end)` range clipped to an artifact of `total_bytes`, or the error for an
    /// offset past the end (an offset exactly at the end gives an empty range).
    pub fn clip(&self, total_bytes: u64) -> Result<(u64, u64), PageError> {
        if self.offset > total_bytes {
            return Err(PageError::ByteOffsetPastEnd {
                offset: self.offset,
                total_bytes,
            });
        }
        Ok((
            self.offset,
            (self.offset + u64::from(self.limit)).min(total_bytes),
        ))
    }
}

/// A byte range of an artifact with continuation metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytePage {
    /// First byte returned.
    pub offset: u64,
    /// Bytes in the artifact.
    pub total_bytes: u64,
    /// First byte not returned, when more remain.
    pub next_byte_offset: Option<u64>,
    /// The stored bytes.
    pub bytes: Vec<u8>,
}

impl BytePage {
    /// Where reading continues: the next byte, or the end.
    pub fn continuation(&self) -> Continuation {
        self.next_byte_offset
            .map_or(Continuation::End, Continuation::Byte)
    }

    /// Wraps the bytes read for a clipped range.
    pub fn new(offset: u64, total_bytes: u64, bytes: Vec<u8>) -> Self {
        let end = offset + bytes.len() as u64;
        Self {
            offset,
            total_bytes,
            next_byte_offset: (end < total_bytes).then_some(end),
            bytes,
        }
    }
}

/// Reference byte-range extraction over a whole in-memory artifact.
pub fn extract_bytes(content: &[u8], range: ByteRange) -> Result<BytePage, PageError> {
    let (start, end) = range.clip(content.len() as u64)?;
    Ok(BytePage::new(
        start,
        content.len() as u64,
        content[start as usize..end as usize].to_vec(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(offset: u64, limit: u64) -> PageRequest {
        PageRequest::new(offset, limit).unwrap()
    }

    #[test]
    fn limits_are_validated() {
        assert_eq!(PageRequest::new(0, 0), Err(PageError::Limit(0)));
        assert_eq!(PageRequest::new(0, 2001), Err(PageError::Limit(2001)));
        assert!(PageRequest::new(0, 1).is_ok() && PageRequest::new(0, 2000).is_ok());
        assert_eq!(ByteRange::new(0, 0), Err(PageError::ByteLimit(0)));
        assert!(ByteRange::new(0, MAX_PAGE_BYTES as u64 + 1).is_err());
    }

    #[test]
    fn pages_hold_whole_lines_with_continuation() {
        let content = b"a\nbb\r\nccc\nd";
        let p = extract_page(content, req(0, 2)).unwrap();
        assert_eq!(
            (p.bytes.as_slice(), p.lines, p.total_lines, p.next_offset),
            (&b"a\nbb\r\n"[..], 2, 4, Some(2))
        );
        let p = extract_page(content, req(2, 2000)).unwrap();
        assert_eq!(
            (p.bytes.as_slice(), p.lines, p.next_offset),
            (&b"ccc\nd"[..], 2, None)
        );
        let p = extract_page(content, req(4, 10)).unwrap();
        assert_eq!((p.bytes.len(), p.lines, p.next_offset), (0, 0, None));
        assert_eq!(
            extract_page(content, req(5, 10)),
            Err(PageError::OffsetPastEnd {
                offset: 5,
                total_lines: 4
            })
        );
        assert_eq!(extract_page(b"", req(0, 1)).unwrap().total_lines, 0);
    }

    #[test]
    fn oversized_pages_are_errors_that_say_what_to_do() {
        let mut content = vec![b'x'; 10];
        content.push(b'\n');
        content.extend(std::iter::repeat_n(b'y', MAX_PAGE_BYTES + 5));
        let err = extract_page(&content, req(0, 2)).unwrap_err();
        assert_eq!(
            err,
            PageError::PageTooLarge {
                offset: 0,
                lines: 1,
                line_start_byte: 11
            }
        );
        assert!(
            err.to_string().contains(
                "the lines asked for from line 0 exceed the 2097152-byte page bound; only the \
                 first 1 fit: ask for at most 1 (limit 1)"
            ),
            "{err}"
        );
        let err = extract_page(&content, req(1, 1)).unwrap_err();
        assert_eq!(
            err,
            PageError::PageTooLarge {
                offset: 1,
                lines: 0,
                line_start_byte: 11
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("line 1 alone is longer than"), "{msg}");
        assert!(msg.contains("starting at byte offset 11"), "{msg}");
        assert!(!msg.contains("0 lines"), "{msg}");
    }

    #[test]
    fn byte_ranges_clip_and_continue() {
        let p = extract_bytes(b"hello", ByteRange::new(1, 3).unwrap()).unwrap();
        assert_eq!(
            (p.bytes.as_slice(), p.next_byte_offset),
            (&b"ell"[..], Some(4))
        );
        let p = extract_bytes(b"hello", ByteRange::new(5, 3).unwrap()).unwrap();
        assert_eq!((p.bytes.len(), p.next_byte_offset), (0, None));
        assert!(extract_bytes(b"hello", ByteRange::new(6, 3).unwrap()).is_err());
    }
}
