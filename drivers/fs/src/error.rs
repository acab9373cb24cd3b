//! The I/O error shared by every fallible store operation: what was being done, to which path.

use std::io;
use std::path::{Path, PathBuf};

/// An I/O failure with the operation and the path it concerned, so a user can act on it.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op}{}: {source}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
pub struct IoError {
    /// What was being done ("open", "rename", "write the artifact to the output", …).
    pub op: &'static str,
    /// The path concerned, when there is one.
    pub path: Option<PathBuf>,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

impl IoError {
    /// An error about `path`.
    pub(crate) fn at(op: &'static str, path: &Path, source: io::Error) -> Self {
        Self {
            op,
            path: Some(path.to_owned()),
            source,
        }
    }

    /// An error without a path (for example writing to a caller's output).
    pub(crate) fn bare(op: &'static str, source: io::Error) -> Self {
        Self {
            op,
            path: None,
            source,
        }
    }

    /// The kind of the underlying error (e.g. to recognise a broken pipe).
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
}

/// Attaches an operation and a path to `io::Result`s.
pub(crate) trait IoContext<T> {
    /// Wraps the error with `op` and `path`.
    fn at(self, op: &'static str, path: &Path) -> Result<T, IoError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, op: &'static str, path: &Path) -> Result<T, IoError> {
        self.map_err(|e| IoError::at(op, path, e))
    }
}
