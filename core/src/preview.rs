//! Bounded, exact previews of a stream.
//!
//! A preview is the longest exact byte prefix of a stream within a line limit and a rendered
//! byte budget, never cut inside a UTF-8 character. Bytes are decoded only here, for display:
//! each maximal invalid sequence renders as U+FFFD (3 bytes), exactly as
//! [`String::from_utf8_lossy`] does, so budgets are measured on what the model receives.

use crate::capture::TailWindow;

/// Where a head preview ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadCut {
    /// Raw stream bytes in the preview (a prefix of the stream).
    pub raw_len: usize,
    /// Length of the rendered (lossily decoded) preview.
    pub rendered_len: usize,
    /// `\n` bytes in the preview: the zero-based index of the first line not shown in full.
    pub newlines: u64,
}

/// Cuts the head preview out of `head`, a prefix of the stream (`head_is_stream` when it is the
/// whole stream: only then may a trailing incomplete UTF-8 sequence be shown, as U+FFFD).
pub fn cut_head(head: &[u8], head_is_stream: bool, max_rendered: usize, max_lines: u64) -> HeadCut {
    let mut cut = HeadCut {
        raw_len: 0,
        rendered_len: 0,
        newlines: 0,
    };
    if max_lines == 0 {
        return cut;
    }
    let mut chunks = head.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        for c in chunk.valid().chars() {
            let len = c.len_utf8();
            if cut.rendered_len + len > max_rendered {
                return cut;
            }
            cut.raw_len += len;
            cut.rendered_len += len;
            if c == '\n' {
                cut.newlines += 1;
                if cut.newlines == max_lines {
                    return cut;
                }
            }
        }
        let invalid = chunk.invalid();
        if invalid.is_empty() {
            continue;
        }
        let at_end = chunks.peek().is_none() && cut.raw_len + invalid.len() == head.len();
        let may_continue = std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
        if at_end && !head_is_stream && may_continue {
            // The next stream bytes may complete this character: never split it.
            return cut;
        }
        if cut.rendered_len + 3 > max_rendered {
            return cut;
        }
        cut.raw_len += invalid.len();
        cut.rendered_len += 3;
    }
    cut
}

/// The tail view chosen from a tail window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    /// Offset into the window where the tail starts (a line start).
    pub window_offset: usize,
    /// Zero-based line index of the tail's first line.
    pub first_line: u64,
    /// Lines in the tail.
    pub lines: u64,
    /// Rendered length.
    pub rendered_len: usize,
}

/// Picks at most `max_lines` whole last lines of the stream from `window`, all after line
/// `after_line` (the first line the head did not show in full), within `max_rendered` rendered
/// bytes. `total_lines` is the stream's line count. Returns `None` when no line qualifies.
pub fn cut_tail(
    window: &TailWindow,
    total_lines: u64,
    after_line: u64,
    max_lines: u64,
    max_rendered: usize,
) -> Option<TailCut> {
    let bytes = &window.bytes;
    // Line starts inside the window, with their line index: after each `\n` that is not the
    // last byte, and the window start itself when it is the stream start.
    let stream_start = (window.start == 0).then_some((0usize, window.newlines_before));
    let after_newlines = memchr::memchr_iter(b'\n', bytes)
        .enumerate()
        .filter(|&(_, i)| i + 1 < bytes.len())
        .map(|(k, i)| (i + 1, window.newlines_before + k as u64 + 1));
    let starts: Vec<(usize, u64)> = stream_start.into_iter().chain(after_newlines).collect();
    let mut best = None;
    let (mut end, mut rendered, mut taken) = (bytes.len(), 0usize, 0u64);
    for &(start, line) in starts.iter().rev() {
        if taken == max_lines || line <= after_line || line >= total_lines {
            break;
        }
        rendered += String::from_utf8_lossy(&bytes[start..end]).len();
        if rendered > max_rendered {
            break;
        }
        taken += 1;
        end = start;
        best = Some(TailCut {
            window_offset: start,
            first_line: line,
            lines: taken,
            rendered_len: rendered,
        });
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_a_character() {
        let s = "aé€😀\n".as_bytes();
        for budget in 0..s.len() + 2 {
            let cut = cut_head(s, true, budget, 10);
            assert!(
                std::str::from_utf8(&s[..cut.raw_len]).is_ok(),
                "budget {budget}"
            );
            assert!(cut.rendered_len <= budget);
        }
        assert_eq!(cut_head(s, true, 3, 10).raw_len, 3); // "aé"
    }

    #[test]
    fn lines_limit_stops_after_the_last_full_line() {
        let cut = cut_head(b"a\nb\nc\n", true, 100, 2);
        assert_eq!((cut.raw_len, cut.newlines), (4, 2));
        let cut = cut_head(b"a\nbbbb", true, 4, 5);
        assert_eq!((cut.raw_len, cut.newlines), (4, 1)); // partial line "bb"
    }

    #[test]
    fn invalid_bytes_render_as_replacement_characters() {
        let bytes = b"ok\xff\xfe\n";
        let cut = cut_head(bytes, true, 100, 10);
        assert_eq!(cut.raw_len, bytes.len());
        assert_eq!(cut.rendered_len, String::from_utf8_lossy(bytes).len());
        // A trailing incomplete sequence is held back unless the head is the whole stream.
        let euro = "€".as_bytes();
        assert_eq!(cut_head(&euro[..2], false, 100, 10).raw_len, 0);
        assert_eq!(cut_head(&euro[..2], true, 100, 10).raw_len, 2);
    }

    #[test]
    fn tail_takes_whole_last_lines_after_the_head() {
        let window = TailWindow {
            bytes: b"x\nl7\nl8\nl9".to_vec(),
            start: 100,
            newlines_before: 6,
        };
        let t = cut_tail(&window, 10, 0, 2, 100).unwrap();
        assert_eq!((t.window_offset, t.first_line, t.lines), (5, 8, 2));
        assert_eq!(&window.bytes[t.window_offset..], b"l8\nl9");
        let t = cut_tail(&window, 10, 0, 5, 100).unwrap();
        assert_eq!((t.window_offset, t.first_line, t.lines), (2, 7, 3)); // "x" is partial
        assert_eq!(cut_tail(&window, 10, 9, 5, 100), None);
        assert_eq!(cut_tail(&window, 10, 0, 5, 5).unwrap().lines, 2);
        assert_eq!(cut_tail(&window, 10, 0, 5, 4).unwrap().lines, 1);
        let terminated = TailWindow {
            bytes: b"a\nb\n".to_vec(),
            start: 0,
            newlines_before: 0,
        };
        let t = cut_tail(&terminated, 2, 0, 5, 100).unwrap();
        assert_eq!((t.window_offset, t.first_line, t.lines), (2, 1, 1));
    }
}
