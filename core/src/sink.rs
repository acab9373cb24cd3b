//! The clean result channel (docs/result-channel.md; a file, not the turn loop's prompt
//! [`Channel`](crate::turn::Channel)): what a caller asks for, and what reading the
//! sink found. Pure values and the pure classification of the bytes read; opening, checking and
//! reading the file is done by `agentrun_fs::sink`.
//!
//! The contract in one paragraph: on opt-in the runner exports `<var>=<path>` (default
//! [`DEFAULT_SINK_VAR`]) to the child and, after a normal exit, hands back the file's bytes
//! verbatim as `result` when they are a non-empty, valid UTF-8 regular file of at most the cap
//! (default [`DEFAULT_SINK_CAP`]). Every other case gives `result: None` and a
//! [`SinkOutcome`] saying why. Without opt-in the variable is removed from the child's
//! environment.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The variable the sink path is exported in unless the caller names another.
pub const DEFAULT_SINK_VAR: &str = "AGENTRUN_RESULT_SINK";

/// Every result-sink variable agentrun knows agents to honour: the default and
/// `AMPLIHACK_RESULT_SINK`. A child gets none of them unless it opted in under that name (a
/// value inherited from an ancestor would otherwise send its answer to a stranger's file).
pub const KNOWN_SINK_VARS: &[&str] = &[DEFAULT_SINK_VAR, "AMPLIHACK_RESULT_SINK"];

/// The default cap on the sink size: larger files are refused, never read into memory.
pub const DEFAULT_SINK_CAP: u64 = 16 << 20;

/// Variables the runner must not overwrite with the sink path: the child (or the dynamic
/// loader, the shell, the locale machinery) needs them for itself, and pointing them at a file
/// breaks the child in ways that look like unrelated failures (a "missing interpreter" for
/// `PATH`). Prefixes end with `_`.
const RESERVED_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "TERM", "LANG",
    "LANGUAGE", "TZ", "IFS", "ENV", "BASH_ENV", "CDPATH", "PS4", "LD_", "DYLD_", "LC_",
];

/// Why `name` cannot be the result-sink variable, or `None` when it can: it must be a portable
/// variable name (a letter or `_`, then letters, digits or `_`, at most 255 bytes) that the
/// child does not need for something else (`PATH`, `HOME`, `LD_*`, `DYLD_*`, `LC_*`, …).
pub fn sink_var_problem(name: &[u8]) -> Option<String> {
    let portable = !name.is_empty()
        && name.len() <= 255
        && !name[0].is_ascii_digit()
        && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_');
    if !portable {
        return Some(
            "it must be a letter or '_' followed by letters, digits or '_' (at most 255)"
                .to_owned(),
        );
    }
    let reserved = RESERVED_VARS.iter().find(|r| {
        if r.ends_with('_') {
            name.starts_with(r.as_bytes())
        } else {
            name == r.as_bytes()
        }
    });
    reserved.map(|r| {
        format!(
            "the program needs {} for itself, so it cannot carry the sink path; use a name of \
             your own such as AGENTRUN_RESULT_SINK",
            if r.ends_with('_') {
                format!("{r}*")
            } else {
                (*r).to_owned()
            }
        )
    })
}

/// Where the child's clean answer goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultSink {
    /// A fresh, unique path under a new owner-only (0700) runtime directory of the store,
    /// removed with its directory after the run.
    Allocate,
    /// This path; the caller owns its directory (and its permissions), and the file is left
    /// where it is after the run.
    Path(PathBuf),
}

/// The kind of a non-regular file found at the sink path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else.
    Other,
}

/// Why the sink was not read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NotReadReason {
    /// The wall-clock timeout stopped the child.
    TimedOut,
    /// The idle timeout stopped the child.
    IdleTimedOut,
    /// The caller stopped the run.
    Cancelled,
}

/// What reading the sink found. Only [`SinkOutcome::Read`] comes with `result: Some(..)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SinkOutcome {
    /// The caller did not opt in.
    NotRequested,
    /// The run did not end by a normal exit, so the sink was not read.
    NotRead {
        /// How the run ended instead.
        reason: NotReadReason,
    },
    /// Nothing exists at the sink path: the child did not write an answer.
    Unwritten,
    /// The file exists and is empty: treated as unwritten.
    Empty,
    /// The answer: this many bytes, returned verbatim.
    Read {
        /// Size of the answer in bytes.
        bytes: u64,
    },
    /// The file is larger than the cap; it was not read.
    Oversize {
        /// Its size (or `cap + 1` when it grew past the cap while being read).
        size: u64,
        /// The cap in force.
        cap: u64,
    },
    /// The file is not valid UTF-8.
    NotUtf8 {
        /// Its size in bytes.
        bytes: u64,
    },
    /// A symbolic link sits at the sink path; it was refused, not followed.
    Symlink,
    /// A regular file with more than one hard link sits at the sink path: it may be another
    /// file of the user's linked there, so it was refused, not read.
    HardLinked {
        /// Its link count.
        links: u64,
    },
    /// Something other than a regular file sits at the sink path.
    NotRegularFile {
        /// What it is.
        kind: FileKind,
    },
    /// The sink could not be inspected or read.
    Error {
        /// The I/O error, with the path.
        message: String,
    },
}

impl SinkOutcome {
    /// Classifies the bytes read from a regular file under `cap`: `bytes` must hold at most
    /// `cap + 1` bytes (one more than the cap proves the file is oversize without reading the
    /// rest). Returns the outcome and, for [`SinkOutcome::Read`], the answer verbatim.
    pub fn classify(bytes: Vec<u8>, cap: u64) -> (SinkOutcome, Option<String>) {
        let len = bytes.len() as u64;
        if len > cap {
            return (SinkOutcome::Oversize { size: len, cap }, None);
        }
        if bytes.is_empty() {
            return (SinkOutcome::Empty, None);
        }
        match String::from_utf8(bytes) {
            Ok(text) => (SinkOutcome::Read { bytes: len }, Some(text)),
            Err(_) => (SinkOutcome::NotUtf8 { bytes: len }, None),
        }
    }

    /// A short human description (`"read 12 bytes"`, `"unwritten"`, …).
    pub fn describe(&self) -> String {
        match self {
            Self::NotRequested => "not requested".to_owned(),
            Self::NotRead { reason } => match reason {
                NotReadReason::TimedOut => "not read (timed out)".to_owned(),
                NotReadReason::IdleTimedOut => "not read (idle timeout)".to_owned(),
                NotReadReason::Cancelled => "not read (the run was cancelled)".to_owned(),
            },
            Self::Unwritten => "unwritten".to_owned(),
            Self::Empty => "empty (treated as unwritten)".to_owned(),
            Self::Read { bytes } => format!("read {bytes} bytes"),
            Self::Oversize { size, cap } => {
                format!("refused: {size} bytes is over the cap of {cap} bytes")
            }
            Self::NotUtf8 { bytes } => format!("refused: {bytes} bytes of invalid UTF-8"),
            Self::Symlink => "refused: a symbolic link".to_owned(),
            Self::HardLinked { links } => {
                format!("refused: a file with {links} hard links (possibly another file)")
            }
            Self::NotRegularFile { kind } => format!("refused: not a regular file ({kind:?})"),
            Self::Error { message } => format!("error: {message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_is_verbatim_and_bounded() {
        let (o, r) = SinkOutcome::classify(b" \r\n\x1b[31m{}\n".to_vec(), 100);
        assert_eq!(o, SinkOutcome::Read { bytes: 11 });
        assert_eq!(r.as_deref(), Some(" \r\n\x1b[31m{}\n"));
        assert_eq!(
            SinkOutcome::classify(Vec::new(), 10),
            (SinkOutcome::Empty, None)
        );
        assert_eq!(
            SinkOutcome::classify(vec![b'x'; 11], 10),
            (SinkOutcome::Oversize { size: 11, cap: 10 }, None)
        );
        assert_eq!(
            SinkOutcome::classify(vec![b'x'; 10], 10).0,
            SinkOutcome::Read { bytes: 10 }
        );
        assert_eq!(
            SinkOutcome::classify(vec![0xff, 0xfe], 10),
            (SinkOutcome::NotUtf8 { bytes: 2 }, None)
        );
    }

    #[test]
    fn outcomes_serialize_with_an_outcome_tag() {
        let json = serde_json::to_string(&SinkOutcome::NotRegularFile {
            kind: FileKind::Fifo,
        })
        .unwrap();
        assert_eq!(json, r#"{"outcome":"not_regular_file","kind":"fifo"}"#);
        let back: SinkOutcome = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back,
            SinkOutcome::NotRegularFile {
                kind: FileKind::Fifo
            }
        );
    }

    #[test]
    fn sink_variables_the_child_needs_or_cannot_name_are_refused() {
        for ok in [
            "AGENTRUN_RESULT_SINK",
            "AMPLIHACK_RESULT_SINK",
            "_X",
            "a1",
            "PATHS",
            "LDX",
        ] {
            assert_eq!(sink_var_problem(ok.as_bytes()), None, "{ok}");
        }
        for reserved in [
            "PATH",
            "HOME",
            "LD_PRELOAD",
            "LD_",
            "DYLD_INSERT_LIBRARIES",
            "LC_ALL",
        ] {
            let why = sink_var_problem(reserved.as_bytes()).unwrap();
            assert!(why.contains("needs"), "{reserved}: {why}");
            assert!(why.contains("AGENTRUN_RESULT_SINK"), "{reserved}: {why}");
        }
        assert!(
            sink_var_problem(b"LD_PRELOAD")
                .unwrap()
                .contains("needs LD_* for itself")
        );
        let long = "X".repeat(256);
        for bad in ["", "1X", "A-B", "A=B", "A B", "A\0", long.as_str()] {
            let why = sink_var_problem(bad.as_bytes()).unwrap();
            assert!(why.contains("a letter or '_'"), "{bad:?}: {why}");
        }
    }
}
