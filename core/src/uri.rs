//! The public artifact URI grammar.
//!
//! ```text
//! artifact-uri = "artifact://" digest [ "/" stream-name ]
//! digest       = 64 lowercase hex digits
//! stream-name  = 1*64 ( ALPHA / DIGIT / "." / "_" / "-" ), not "." or ".."
//! ```
//!
//! Nothing else is accepted: no query, fragment, percent-encoding, uppercase, whitespace,
//! trailing slash, empty or extra segment. Parsing and [`Display`](std::fmt::Display)
//! round-trip exactly.

use std::fmt;

use crate::digest::{Digest, DigestError};
use crate::stream::{StreamName, StreamNameError};

/// The scheme prefix of every public artifact URI.
pub const SCHEME: &str = "artifact://";

/// A parsed `artifact://<digest>[/<stream>]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArtifactUri {
    /// The artifact's content address (for a stream URI: the manifest's).
    pub digest: Digest,
    /// The selected stream of a manifest, if any.
    pub stream: Option<StreamName>,
}

/// Why a string is not a valid artifact URI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UriError {
    /// The string does not start with `artifact://`.
    #[error("not an artifact URI: it must start with \"artifact://\"")]
    Scheme,
    /// `?` or `#` present.
    #[error("artifact URIs take no query or fragment")]
    QueryOrFragment,
    /// `%` present.
    #[error("artifact URIs take no percent-encoding")]
    PercentEncoding,
    /// Whitespace or a control character present.
    #[error("artifact URIs contain no whitespace or control characters")]
    Whitespace,
    /// The digest part is wrong.
    #[error("invalid artifact digest: {0}")]
    Digest(#[from] DigestError),
    /// The URI ends in `/`.
    #[error("artifact URIs have no trailing slash")]
    TrailingSlash,
    /// More than one path segment after the digest.
    #[error("artifact URIs have at most one segment after the digest (a stream name)")]
    ExtraSegment,
    /// The stream segment is invalid.
    #[error("invalid stream segment: {0}")]
    Stream(#[from] StreamNameError),
}

impl ArtifactUri {
    /// A URI for the whole artifact.
    pub fn new(digest: Digest) -> Self {
        Self {
            digest,
            stream: None,
        }
    }

    /// A URI for one stream of a manifest.
    pub fn stream(manifest: Digest, stream: StreamName) -> Self {
        Self {
            digest: manifest,
            stream: Some(stream),
        }
    }

    /// Parses the public grammar; see the module documentation.
    pub fn parse(s: &str) -> Result<Self, UriError> {
        let rest = s.strip_prefix(SCHEME).ok_or(UriError::Scheme)?;
        if rest.contains(['?', '#']) {
            return Err(UriError::QueryOrFragment);
        }
        if rest.contains('%') {
            return Err(UriError::PercentEncoding);
        }
        if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(UriError::Whitespace);
        }
        let (digest, stream) = match rest.split_once('/') {
            None => (rest, None),
            Some((digest, stream)) => (digest, Some(stream)),
        };
        let digest = Digest::from_hex(digest)?;
        let stream = match stream {
            None => None,
            Some("") => return Err(UriError::TrailingSlash),
            Some(s) if s.ends_with('/') => return Err(UriError::TrailingSlash),
            Some(s) if s.contains('/') => return Err(UriError::ExtraSegment),
            Some(s) => Some(StreamName::new(s)?),
        };
        Ok(Self { digest, stream })
    }

    /// Whether `s` claims the artifact scheme, so that callers dispatch it to artifact reads
    /// (and report a parse error) instead of treating it as a filesystem path.
    pub fn is_artifact_scheme(s: &str) -> bool {
        s.starts_with(SCHEME)
    }

    /// The same artifact without a stream segment.
    pub fn without_stream(&self) -> Self {
        Self::new(self.digest)
    }
}

impl fmt::Display for ArtifactUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.digest)?;
        if let Some(stream) = &self.stream {
            write!(f, "/{stream}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ArtifactUri {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn parses_and_round_trips() {
        for s in [format!("artifact://{D}"), format!("artifact://{D}/stdout")] {
            let uri = ArtifactUri::parse(&s).unwrap();
            assert_eq!(uri.to_string(), s);
        }
        let uri = ArtifactUri::parse(&format!("artifact://{D}/results")).unwrap();
        assert_eq!(uri.stream.unwrap().as_str(), "results");
    }

    #[test]
    fn rejects_everything_outside_the_grammar() {
        let cases: Vec<(String, UriError)> = vec![
            (
                format!("artifact://{}", D.to_uppercase()),
                UriError::Digest(DigestError::NotLowerHex('B')),
            ),
            (
                format!("artifact://{}", &D[..63]),
                UriError::Digest(DigestError::Length(63)),
            ),
            (
                format!("artifact://{D}a"),
                UriError::Digest(DigestError::Length(65)),
            ),
            (format!("artifact://{D}?x=1"), UriError::QueryOrFragment),
            (format!("artifact://{D}#frag"), UriError::QueryOrFragment),
            (format!("artifact://{D}/%2e%2e"), UriError::PercentEncoding),
            (
                format!("artifact://{D}/.."),
                UriError::Stream(StreamNameError::Traversal("..".into())),
            ),
            (
                format!("artifact://{D}/."),
                UriError::Stream(StreamNameError::Traversal(".".into())),
            ),
            (format!("artifact://{D}/"), UriError::TrailingSlash),
            (format!("artifact://{D}/stdout/"), UriError::TrailingSlash),
            (format!("artifact://{D}/stdout/x"), UriError::ExtraSegment),
            (format!("artifact://{D}/../x"), UriError::ExtraSegment),
            (format!("artifact://{D} "), UriError::Whitespace),
            (
                format!("artifact://sha256/{D}"),
                UriError::Digest(DigestError::Length(6)),
            ),
            (format!("ARTIFACT://{D}"), UriError::Scheme),
            (format!("file://{D}"), UriError::Scheme),
            (
                "artifact://".to_string(),
                UriError::Digest(DigestError::Length(0)),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(ArtifactUri::parse(&input), Err(expected), "{input:?}");
        }
    }
}
