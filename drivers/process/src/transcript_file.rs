//! Reading a transcript file for compaction: streamed through a buffer within
//! [`TranscriptLimits`], never held whole (only the transcript being built is).
//!
//! A regular file larger than the limit is refused from its size before a byte is read; a
//! pipe or FIFO is read up to the limit and one byte more, and is refused at its first byte
//! that is not JSON or at the limit; a directory, socket, terminal or character device is
//! refused by its type before anything is read.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use agentrun_core::transcript::{Transcript, TranscriptError, TranscriptLimits};
use agentrun_fs::special::InputError;

/// A transcript read from a file, with the metadata of the file it was read from (so a caller
/// writing a compacted transcript can refuse to write over it, whatever path leads to it).
#[derive(Debug)]
#[non_exhaustive]
pub struct LoadedTranscript {
    /// The transcript.
    pub transcript: Transcript,
    /// The file it was read from.
    pub metadata: Metadata,
}

/// Why a transcript could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TranscriptLoadError {
    /// The file cannot be opened, or is of a type that is not read (a directory, a socket).
    #[error("cannot read {}: {source}", .path.display())]
    Open {
        /// The path as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: InputError,
    },
    /// The file is a character device (`/dev/zero`), never a transcript.
    #[error("cannot read {}: it is a character device, not a transcript", .path.display())]
    CharacterDevice {
        /// The path as given.
        path: PathBuf,
    },
    /// A regular file larger than the limit, refused from its size.
    #[error(
        "{}: the transcript is {bytes} bytes; at most {max} bytes are accepted",
        .path.display()
    )]
    TooLarge {
        /// The path as given.
        path: PathBuf,
        /// The file's size.
        bytes: u64,
        /// The limit.
        max: usize,
    },
    /// A stream that went on past the limit.
    #[error(
        "{}: the transcript is more than {max} bytes; at most {max} bytes are accepted",
        .path.display()
    )]
    OverLimit {
        /// The path as given.
        path: PathBuf,
        /// The limit.
        max: usize,
    },
    /// Reading failed.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The path as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The bytes are not a transcript (not JSON, the wrong shape, outside the limits).
    #[error("{}: {source}", .path.display())]
    Invalid {
        /// The path as given.
        path: PathBuf,
        /// Where and why.
        #[source]
        source: TranscriptError,
    },
}

impl TranscriptLoadError {
    /// Whether the caller gave something that is not a transcript within the limits (as
    /// opposed to a file that could not be read).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            TranscriptLoadError::TooLarge { .. }
                | TranscriptLoadError::OverLimit { .. }
                | TranscriptLoadError::Invalid { .. }
        )
    }
}

/// Reads the transcript at `path` within the default limits. A FIFO opens without waiting
/// for a writer and is read as a pipe.
pub fn load_transcript(path: &Path) -> Result<LoadedTranscript, TranscriptLoadError> {
    let open = |source: InputError| TranscriptLoadError::Open {
        path: path.to_owned(),
        source,
    };
    let input = agentrun_fs::special::open_input(path).map_err(open)?;
    let kind = input.metadata().map_err(|e| open(e.into()))?.file_type();
    if std::os::unix::fs::FileTypeExt::is_char_device(&kind) {
        return Err(TranscriptLoadError::CharacterDevice {
            path: path.to_owned(),
        });
    }
    let file = input.into_blocking().map_err(|e| open(e.into()))?;
    load_transcript_file(file, path)
}

/// Reads a transcript from an open file (stdin, for example) within the default limits;
/// `name` names it in errors.
pub fn load_transcript_file(
    file: File,
    name: &Path,
) -> Result<LoadedTranscript, TranscriptLoadError> {
    let limits = TranscriptLimits::default();
    let metadata = file
        .metadata()
        .map_err(|source| TranscriptLoadError::Read {
            path: name.to_owned(),
            source,
        })?;
    if metadata.is_file() && metadata.len() > limits.max_bytes as u64 {
        return Err(TranscriptLoadError::TooLarge {
            path: name.to_owned(),
            bytes: metadata.len(),
            max: limits.max_bytes,
        });
    }
    let transcript = parse_transcript(file, name, &limits)?;
    Ok(LoadedTranscript {
        transcript,
        metadata,
    })
}

/// Parses a transcript from `input`, reading at most `limits.max_bytes + 1` bytes; `name`
/// names it in errors. For bytes in memory, pass a slice.
pub fn parse_transcript(
    input: impl Read,
    name: &Path,
    limits: &TranscriptLimits,
) -> Result<Transcript, TranscriptLoadError> {
    let limited = Limited {
        inner: input,
        left: limits.max_bytes as u64,
        over: false,
        error: None,
    };
    // Buffered above the limit, so serde_json's byte-at-a-time reads stay cheap.
    let mut reader = io::BufReader::with_capacity(64 * 1024, limited);
    let parsed = {
        let mut de = serde_json::Deserializer::from_reader(&mut reader);
        Transcript::from_deserializer(&mut de, limits).and_then(|t| {
            de.end()
                .map(|()| t)
                .map_err(|e| TranscriptError::Json(e.to_string()))
        })
    };
    let limited = reader.into_inner();
    if limited.over {
        return Err(TranscriptLoadError::OverLimit {
            path: name.to_owned(),
            max: limits.max_bytes,
        });
    }
    if let Some(source) = limited.error {
        return Err(TranscriptLoadError::Read {
            path: name.to_owned(),
            source,
        });
    }
    parsed.map_err(|source| TranscriptLoadError::Invalid {
        path: name.to_owned(),
        source,
    })
}

/// A reader that yields at most `left` bytes and fails (setting `over`) when its input has
/// more; it remembers a read error, so it is reported as one and not as invalid JSON.
struct Limited<R> {
    inner: R,
    left: u64,
    over: bool,
    error: Option<io::Error>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the limit: one more byte means the input is too large.
            let mut probe = [0u8; 1];
            return match self.read_inner(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.over = true;
                    Err(io::Error::other("the transcript is larger than the limit"))
                }
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.read_inner(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

impl<R: Read> Limited<R> {
    fn read_inner(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let copy = io::Error::new(e.kind(), e.to_string());
                    self.error = Some(e);
                    return Err(copy);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: usize) -> TranscriptLimits {
        TranscriptLimits {
            max_bytes,
            ..TranscriptLimits::default()
        }
    }

    #[test]
    fn a_stream_over_the_limit_is_refused_after_one_byte_more() {
        let doc = br#"[{"role":"user","content":"a"}]"#;
        // Exactly at the limit: read whole and parsed.
        match parse_transcript(&doc[..], Path::new("-"), &limits(doc.len())) {
            Ok(t) => assert_eq!(t.messages.len(), 1),
            Err(e) => panic!("at the limit: {e}"),
        }
        // Whitespace past the limit: valid JSON so far, refused for its size.
        let mut long = doc.to_vec();
        long.extend_from_slice(b"    ");
        let e = parse_transcript(&long[..], Path::new("-"), &limits(doc.len())).expect_err("long");
        assert!(e.to_string().contains("more than 31 bytes"), "{e}");
        assert!(e.is_invalid_input());
        // An endless stream stops at the limit.
        let endless = io::repeat(b' ');
        let e = parse_transcript(endless, Path::new("-"), &limits(1 << 20)).expect_err("endless");
        assert!(e.to_string().contains("more than 1048576 bytes"), "{e}");
    }

    #[test]
    fn a_read_error_is_reported_as_one() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("the disk is on fire"))
            }
        }
        let e = parse_transcript(Broken, Path::new("t.json"), &limits(100)).expect_err("broken");
        assert!(
            e.to_string()
                .contains("cannot read t.json: the disk is on fire"),
            "{e}"
        );
        assert!(!e.is_invalid_input());
        assert!(std::error::Error::source(&e).is_some());
    }
}
