//! Stream names and output declarations.
//!
//! One validator, [`StreamName::new`], serves both tool declarations and the stream segment of
//! an [`ArtifactUri`](crate::uri::ArtifactUri), so a name that can be declared can always be
//! addressed and vice versa.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The longest stream name, in bytes.
pub const MAX_STREAM_NAME_LEN: usize = 64;

/// The most streams one declaration may have. Bounds memory (one preview per stream) and the
/// number of headings in a rendered result.
pub const MAX_STREAMS: usize = 8;

/// Why a stream name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamNameError {
    /// The name has no bytes.
    #[error("stream name is empty")]
    Empty,
    /// The name is longer than [`MAX_STREAM_NAME_LEN`].
    #[error("stream name is {len} bytes long; the limit is {MAX_STREAM_NAME_LEN}")]
    TooLong {
        /// Length of the refused name.
        len: usize,
    },
    /// The name is `.` or `..`, which would read as path traversal inside a URI.
    #[error("stream name {0:?} is reserved (it reads as path traversal)")]
    Traversal(String),
    /// The name holds a byte outside `[A-Za-z0-9._-]`.
    #[error("stream name {name:?} contains {byte:?}; allowed are A-Z, a-z, 0-9, '.', '_' and '-'")]
    InvalidByte {
        /// The refused name, lossily decoded.
        name: String,
        /// The first offending character.
        byte: char,
    },
}

/// A validated stream name: 1–64 bytes of `[A-Za-z0-9._-]`, never `.` or `..`.
///
/// Such a name is safe as a single URI path segment and as a file name component.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamName(String);

impl StreamName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, StreamNameError> {
        if name.is_empty() {
            return Err(StreamNameError::Empty);
        }
        if name.len() > MAX_STREAM_NAME_LEN {
            return Err(StreamNameError::TooLong { len: name.len() });
        }
        if name == "." || name == ".." {
            return Err(StreamNameError::Traversal(name.to_owned()));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(StreamNameError::InvalidByte {
                name: name.to_owned(),
                byte: c,
            });
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for StreamName {
    type Err = StreamNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl serde::Serialize for StreamName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for StreamName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        StreamName::new(&s).map_err(serde::de::Error::custom)
    }
}

/// Why an output declaration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeclarationError {
    /// A named declaration listed no streams.
    #[error("a named output declaration needs at least one stream")]
    NoStreams,
    /// More than [`MAX_STREAMS`] streams were declared.
    #[error("{count} streams declared; at most {MAX_STREAMS} are allowed")]
    TooManyStreams {
        /// How many were declared.
        count: usize,
    },
    /// A name appears twice.
    #[error("stream {0:?} is declared twice")]
    Duplicate(String),
    /// A name is invalid.
    #[error(transparent)]
    InvalidName(#[from] StreamNameError),
}

/// What a tool produces: one unnamed output, or named streams in rendering order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputDeclaration {
    /// One output channel without a name; rendered without a heading.
    Single,
    /// Named streams; declaration order is rendering and manifest order.
    Named(Vec<StreamName>),
}

impl OutputDeclaration {
    /// Declares named streams, validating every name, uniqueness and the stream count.
    pub fn named<I, S>(names: I) -> Result<Self, DeclarationError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut streams: Vec<StreamName> = Vec::new();
        for name in names {
            let name = StreamName::new(name.as_ref())?;
            if streams.contains(&name) {
                return Err(DeclarationError::Duplicate(name.0));
            }
            streams.push(name);
            if streams.len() > MAX_STREAMS {
                return Err(DeclarationError::TooManyStreams {
                    count: streams.len(),
                });
            }
        }
        if streams.is_empty() {
            return Err(DeclarationError::NoStreams);
        }
        Ok(Self::Named(streams))
    }

    /// The conventional process declaration: `stdout` then `stderr`.
    pub fn stdout_stderr() -> Self {
        Self::Named(vec![
            StreamName("stdout".into()),
            StreamName("stderr".into()),
        ])
    }

    /// Number of channels (1 for single output).
    pub fn channel_count(&self) -> usize {
        match self {
            Self::Single => 1,
            Self::Named(names) => names.len(),
        }
    }

    /// Position of the channel a chunk addresses, or why it may not be addressed. Only a
    /// capture turns a position into a [`StreamIndex`] (see [`BoundDeclaration`]).
    pub(crate) fn position(&self, channel: &OutputChannel) -> Result<usize, OutputChannelError> {
        match (self, channel) {
            (Self::Single, OutputChannel::Single) => Ok(0),
            (Self::Single, OutputChannel::Named(name)) => {
                Err(OutputChannelError::NamedOnSingle(name.clone()))
            }
            (Self::Named(_), OutputChannel::Single) => Err(OutputChannelError::UnnamedOnNamed),
            (Self::Named(names), OutputChannel::Named(name)) => names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| OutputChannelError::Undeclared {
                    name: name.clone(),
                    declared: names.clone(),
                }),
        }
    }

    /// Name of a channel (`None` for single output), by the index's position.
    pub fn name(&self, index: StreamIndex) -> Option<&StreamName> {
        self.name_at(index.position)
    }

    pub(crate) fn name_at(&self, position: usize) -> Option<&StreamName> {
        match self {
            Self::Single => None,
            Self::Named(names) => names.get(position),
        }
    }
}

/// Which capture issued a [`StreamIndex`]. Every capture takes a fresh one from a
/// process-wide counter (no clock, no randomness), so two captures never share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Issuer(u64);

impl Issuer {
    /// A fresh issuer. 2^64 captures would be needed before one repeats.
    pub(crate) fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// An output declaration as one capture holds it
/// ([`Capture::declaration`](crate::capture::Capture::declaration)): it reads like the
/// [`OutputDeclaration`] (it dereferences to it), and the [`StreamIndex`]es it issues are
/// accepted by that capture only. An index handed to another capture, even one with as many
/// streams, is refused there
/// ([`CaptureError::ForeignStream`](crate::capture::CaptureError::ForeignStream)) instead of
/// addressing that capture's stream at the same position.
#[derive(Debug)]
pub struct BoundDeclaration {
    declaration: OutputDeclaration,
    issuer: Issuer,
}

impl BoundDeclaration {
    /// Binds `declaration` to a fresh issuer.
    pub(crate) fn new(declaration: OutputDeclaration) -> Self {
        Self {
            declaration,
            issuer: Issuer::fresh(),
        }
    }

    /// Index of the channel a chunk addresses, or why it may not be addressed.
    pub fn resolve(&self, channel: &OutputChannel) -> Result<StreamIndex, OutputChannelError> {
        self.declaration.position(channel).map(|p| self.index(p))
    }

    /// Every stream of the declaration, in order.
    pub fn indexes(&self) -> impl Iterator<Item = StreamIndex> + use<> {
        let issuer = self.issuer;
        (0..self.declaration.channel_count()).map(move |position| StreamIndex { issuer, position })
    }

    /// Whether this declaration issued `index`.
    pub fn issued(&self, index: StreamIndex) -> bool {
        index.issuer == self.issuer
    }

    /// The plain declaration.
    pub fn declaration(&self) -> &OutputDeclaration {
        &self.declaration
    }

    pub(crate) fn into_declaration(self) -> OutputDeclaration {
        self.declaration
    }

    /// The index of `position`; the caller knows the position is declared.
    pub(crate) fn index(&self, position: usize) -> StreamIndex {
        debug_assert!(position < self.declaration.channel_count());
        StreamIndex {
            issuer: self.issuer,
            position,
        }
    }
}

impl std::ops::Deref for BoundDeclaration {
    type Target = OutputDeclaration;
    fn deref(&self) -> &OutputDeclaration {
        &self.declaration
    }
}

/// Position of a channel within the declaration of the capture that issued it. Only a capture
/// makes one ([`Capture::resolve`](crate::capture::Capture::resolve) and its
/// [`BoundDeclaration`]'s `resolve` and `indexes`), and the index remembers which capture that
/// was: it always names a declared stream of that capture and is refused by every other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamIndex {
    issuer: Issuer,
    position: usize,
}

impl StreamIndex {
    /// The position, for indexing a driver's per-stream state (0 for single output).
    pub fn get(self) -> usize {
        self.position
    }
}

/// The channel a delta addresses: which stream of the output a chunk belongs to (not the
/// clean result channel of [`crate::sink`], nor the turn loop's [`crate::turn::Channel`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OutputChannel {
    /// The unnamed channel of a single-output declaration.
    Single,
    /// A declared named stream.
    Named(StreamName),
}

/// Why a chunk's channel does not fit the declaration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputChannelError {
    /// The stream was not declared.
    #[error("stream \"{name}\" was not declared (declared: {})", list(declared))]
    Undeclared {
        /// The addressed name.
        name: StreamName,
        /// The declared names, in order.
        declared: Vec<StreamName>,
    },
    /// A named chunk was sent to a single-output declaration.
    #[error("chunk names stream \"{0}\" but the output is declared single")]
    NamedOnSingle(StreamName),
    /// An unnamed chunk was sent to a named declaration.
    #[error("chunk has no stream name but the output declares named streams")]
    UnnamedOnNamed,
}

pub(crate) fn list(names: &[StreamName]) -> String {
    names
        .iter()
        .map(StreamName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_generic_names() {
        for ok in [
            "stdout",
            "stderr",
            "results",
            "diagnostics",
            "a",
            "A.b_c-9",
            "..a",
            "a..b",
        ] {
            assert_eq!(StreamName::new(ok).unwrap().as_str(), ok);
        }
        assert!(StreamName::new(&"x".repeat(64)).is_ok());
    }

    #[test]
    fn rejects_bad_names() {
        assert_eq!(StreamName::new(""), Err(StreamNameError::Empty));
        assert_eq!(
            StreamName::new(&"x".repeat(65)),
            Err(StreamNameError::TooLong { len: 65 })
        );
        assert!(matches!(
            StreamName::new("."),
            Err(StreamNameError::Traversal(_))
        ));
        assert!(matches!(
            StreamName::new(".."),
            Err(StreamNameError::Traversal(_))
        ));
        for bad in [
            "a/b", "a\\b", "a b", "a\nb", "a%2e", "é", "a?b", "a#b", "\0",
        ] {
            assert!(
                matches!(
                    StreamName::new(bad),
                    Err(StreamNameError::InvalidByte { .. })
                ),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn declarations_validate_count_duplicates_and_order() {
        let decl = OutputDeclaration::named(["results", "diagnostics"]).unwrap();
        let OutputDeclaration::Named(names) = &decl else {
            panic!()
        };
        assert_eq!(names[0].as_str(), "results");
        assert_eq!(names[1].as_str(), "diagnostics");
        assert_eq!(
            OutputDeclaration::named(["a", "a"]),
            Err(DeclarationError::Duplicate("a".into()))
        );
        assert_eq!(
            OutputDeclaration::named(Vec::<&str>::new()),
            Err(DeclarationError::NoStreams)
        );
        let nine: Vec<String> = (0..9).map(|i| format!("s{i}")).collect();
        assert_eq!(
            OutputDeclaration::named(&nine),
            Err(DeclarationError::TooManyStreams { count: 9 })
        );
        assert!(OutputDeclaration::named(&nine[..8]).is_ok());
        assert!(matches!(
            OutputDeclaration::named(["ok", "b/d"]),
            Err(DeclarationError::InvalidName(_))
        ));
    }

    #[test]
    fn channels_resolve_only_to_declared_streams() {
        let decl = OutputDeclaration::stdout_stderr();
        let stderr = OutputChannel::Named(StreamName::new("stderr").unwrap());
        assert_eq!(decl.position(&stderr), Ok(1));
        let err = decl
            .position(&OutputChannel::Named(StreamName::new("results").unwrap()))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "stream \"results\" was not declared (declared: stdout, stderr)"
        );
        assert_eq!(
            decl.position(&OutputChannel::Single),
            Err(OutputChannelError::UnnamedOnNamed)
        );
        assert!(matches!(
            OutputDeclaration::Single.position(&stderr),
            Err(OutputChannelError::NamedOnSingle(_))
        ));
        assert_eq!(
            OutputDeclaration::Single.position(&OutputChannel::Single),
            Ok(0)
        );
    }
}
