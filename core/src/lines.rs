//! [`LineSplitter`]: turns arbitrary output chunks into lines with bounded memory per line.
//!
//! A driver that taps a child's stdout live (e.g. to interpret an agent's JSON lines while it
//! runs) receives chunks cut anywhere, not lines. The splitter reassembles lines across chunks
//! and keeps at most `max_line_bytes` of an unfinished line; the rest of an over-long line is
//! dropped and the line is delivered with [`Line::truncated`] set (the full bytes are in the
//! captured artifact).
//!
//! # Driving order
//!
//! 1. [`LineSplitter::new`] with the longest line to keep.
//! 2. For every chunk: [`LineSplitter::push`]; the callback receives every line completed by
//!    the chunk, in order, without its `\n` (and without a `\r` before it).
//! 3. At end of output: [`LineSplitter::finish`] delivers a last line that had no newline.

/// One line of output, without its line terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// The line's bytes (at most the splitter's `max_line_bytes`).
    pub bytes: &'a [u8],
    /// Whether bytes beyond `max_line_bytes` were dropped.
    pub truncated: bool,
}

/// Reassembles lines from chunks; memory is bounded by `max_line_bytes`.
#[derive(Debug, Clone)]
pub struct LineSplitter {
    buf: Vec<u8>,
    max_line_bytes: usize,
    truncated: bool,
    lines: u64,
    truncated_lines: u64,
}

impl LineSplitter {
    /// A splitter keeping at most `max_line_bytes` of each line (at least 1).
    pub fn new(max_line_bytes: usize) -> Self {
        Self {
            buf: Vec::new(),
            max_line_bytes: max_line_bytes.max(1),
            truncated: false,
            lines: 0,
            truncated_lines: 0,
        }
    }

    /// Feeds one chunk; `on_line` receives each line the chunk completes, in order.
    pub fn push(&mut self, mut chunk: &[u8], mut on_line: impl FnMut(Line<'_>)) {
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            let (head, rest) = (&chunk[..end], &chunk[end + 1..]);
            chunk = rest;
            if self.buf.is_empty() && !self.truncated {
                // The common case: the whole line is in this chunk; no copy.
                let truncated = head.len() > self.max_line_bytes;
                let bytes = &head[..head.len().min(self.max_line_bytes)];
                self.deliver(bytes, truncated, &mut on_line);
            } else {
                self.append(head);
                let buf = std::mem::take(&mut self.buf);
                let truncated = std::mem::take(&mut self.truncated);
                self.deliver(&buf, truncated, &mut on_line);
                self.buf = buf;
                self.buf.clear();
            }
        }
        self.append(chunk);
    }

    /// The output ended: delivers a last line without a newline, if any.
    pub fn finish(mut self, mut on_line: impl FnMut(Line<'_>)) {
        if !self.buf.is_empty() || self.truncated {
            let buf = std::mem::take(&mut self.buf);
            let truncated = self.truncated;
            self.deliver(&buf, truncated, &mut on_line);
        }
    }

    /// Lines delivered so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Lines delivered truncated so far.
    pub fn truncated_lines(&self) -> u64 {
        self.truncated_lines
    }

    /// The longest line kept, in bytes.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = self.max_line_bytes - self.buf.len();
        if bytes.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn deliver(&mut self, bytes: &[u8], truncated: bool, on_line: &mut impl FnMut(Line<'_>)) {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        self.lines += 1;
        if truncated {
            self.truncated_lines += 1;
        }
        on_line(Line { bytes, truncated });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], max: usize) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        let mut s = LineSplitter::new(max);
        for c in chunks {
            s.push(c, |l| out.push((l.bytes.to_vec(), l.truncated)));
        }
        s.finish(|l| out.push((l.bytes.to_vec(), l.truncated)));
        out
    }

    #[test]
    fn lines_are_reassembled_across_chunks() {
        let got = split(&[b"ab", b"c\nde", b"f\r\n\n", b"tail"], 100);
        let want: Vec<(Vec<u8>, bool)> = vec![
            (b"abc".to_vec(), false),
            (b"def".to_vec(), false),
            (b"".to_vec(), false),
            (b"tail".to_vec(), false),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn every_split_point_gives_the_same_lines() {
        let text: &[u8] = b"one\r\ntwo\n\nthree is longer\nfour";
        let whole = split(&[text], 8);
        for cut in 0..=text.len() {
            assert_eq!(split(&[&text[..cut], &text[cut..]], 8), whole, "cut {cut}");
        }
        assert_eq!(whole[2], (b"".to_vec(), false));
        assert_eq!(whole[3], (b"three is".to_vec(), true));
    }

    #[test]
    fn memory_is_bounded_by_the_longest_kept_line() {
        let mut s = LineSplitter::new(16);
        let mut seen = Vec::new();
        for _ in 0..1000 {
            s.push(&[b'x'; 4096], |_| panic!("no newline yet"));
            assert!(s.buf.capacity() <= 64);
        }
        s.push(b"\nok\n", |l| seen.push((l.bytes.len(), l.truncated)));
        assert_eq!(seen, vec![(16, true), (2, false)]);
        assert_eq!((s.lines(), s.truncated_lines()), (2, 1));
    }
}
