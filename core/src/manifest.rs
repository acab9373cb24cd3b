//! The manifest of named output: stream names mapped to their artifacts, in
//! declaration order, as deterministic JSON.
//!
//! The encoding is canonical (fixed key order, no insignificant whitespace), so identical
//! outputs give identical manifest digests, and [`Manifest::parse`] accepts only canonical
//! bytes: an artifact is a manifest exactly when it parses.

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::stream::{MAX_STREAMS, StreamName};

/// The format tag every manifest carries.
pub const MANIFEST_FORMAT: &str = "agentrun.manifest.v1";

/// One stream of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// Declared name.
    pub name: StreamName,
    /// Content address of the stream's artifact.
    pub sha256: Digest,
    /// Length in bytes.
    pub bytes: u64,
    /// Line count.
    pub lines: u64,
}

/// Named output: one entry per declared stream, in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    format: String,
    /// The streams, in declaration order.
    pub streams: Vec<ManifestEntry>,
}

/// Why bytes are not a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Not manifest JSON at all.
    #[error("not an agentrun manifest")]
    NotAManifest,
    /// Manifest-shaped JSON that breaks a rule.
    #[error("invalid manifest: {0}")]
    Invalid(&'static str),
}

impl Manifest {
    /// A manifest of `streams` in the given (declaration) order.
    pub fn new(streams: Vec<ManifestEntry>) -> Self {
        Self {
            format: MANIFEST_FORMAT.to_owned(),
            streams,
        }
    }

    /// The canonical encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        // serde_json writes struct fields in declaration order without whitespace, which is
        // exactly the canonical form; the struct field order is therefore part of the format.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses canonical manifest bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestError> {
        if !bytes.starts_with(b"{\"format\":\"agentrun.manifest.v1\"") {
            return Err(ManifestError::NotAManifest);
        }
        let manifest: Self =
            serde_json::from_slice(bytes).map_err(|_| ManifestError::Invalid("malformed JSON"))?;
        if manifest.streams.is_empty() || manifest.streams.len() > MAX_STREAMS {
            return Err(ManifestError::Invalid("stream count out of range"));
        }
        for (i, e) in manifest.streams.iter().enumerate() {
            if manifest.streams[..i].iter().any(|o| o.name == e.name) {
                return Err(ManifestError::Invalid("duplicate stream name"));
            }
            if e.lines > e.bytes {
                return Err(ManifestError::Invalid("more lines than bytes"));
            }
        }
        if manifest.to_bytes() != bytes {
            return Err(ManifestError::Invalid("not in canonical form"));
        }
        Ok(manifest)
    }

    /// The entry of stream `name`.
    pub fn stream(&self, name: &StreamName) -> Option<&ManifestEntry> {
        self.streams.iter().find(|e| &e.name == name)
    }

    /// The declared names, in order.
    pub fn names(&self) -> Vec<StreamName> {
        self.streams.iter().map(|e| e.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest::new(vec![
            ManifestEntry {
                name: StreamName::new("stdout").unwrap(),
                sha256: Digest::of(b"a\n"),
                bytes: 2,
                lines: 1,
            },
            ManifestEntry {
                name: StreamName::new("stderr").unwrap(),
                sha256: Digest::of(b""),
                bytes: 0,
                lines: 0,
            },
        ])
    }

    #[test]
    fn encoding_is_canonical_and_round_trips() {
        let bytes = sample().to_bytes();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(
            text.starts_with(
                r#"{"format":"agentrun.manifest.v1","streams":[{"name":"stdout","sha256":""#
            ),
            "{text}"
        );
        assert!(!text.contains(' ') && !text.contains('\n'));
        assert_eq!(Manifest::parse(&bytes), Ok(sample()));
        assert_eq!(Digest::of(&sample().to_bytes()), Digest::of(&bytes));
    }

    #[test]
    fn non_manifests_and_non_canonical_forms_are_refused() {
        assert_eq!(Manifest::parse(b"hello"), Err(ManifestError::NotAManifest));
        assert_eq!(
            Manifest::parse(b"{\"streams\":[]}"),
            Err(ManifestError::NotAManifest)
        );
        let pretty = serde_json::to_vec_pretty(&sample()).unwrap();
        assert!(Manifest::parse(&pretty).is_err());
        let text = String::from_utf8(sample().to_bytes()).unwrap();
        let dup = text.replace("\"stderr\"", "\"stdout\"");
        assert_eq!(
            Manifest::parse(dup.as_bytes()),
            Err(ManifestError::Invalid("duplicate stream name"))
        );
        let extra = text.replacen("\"bytes\":2", "\"bytes\":2,\"x\":1", 1);
        assert!(Manifest::parse(extra.as_bytes()).is_err());
        let truncated = &text.as_bytes()[..text.len() - 3];
        assert!(Manifest::parse(truncated).is_err());
    }
}
