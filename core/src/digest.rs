//! SHA-256 content addresses.

use std::fmt;

/// A SHA-256 digest naming an artifact by its content.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

/// Why a digest string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// Not exactly 64 bytes long.
    #[error("a digest is 64 lowercase hex digits; this one is {0} bytes long")]
    Length(usize),
    /// A character other than `0-9a-f`.
    #[error("a digest is lowercase hex (0-9, a-f); found {0:?}")]
    NotLowerHex(char),
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self(sha2::Sha256::digest(bytes).into())
    }

    /// Parses exactly 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Result<Self, DigestError> {
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return Err(DigestError::Length(bytes.len()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (nibble(pair[0], hex)? << 4) | nibble(pair[1], hex)?;
        }
        Ok(Self(out))
    }

    /// The 64-digit lowercase hex form.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
    }
}

fn nibble(b: u8, whole: &str) -> Result<u8, DigestError> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(DigestError::NotLowerHex(
            whole
                .chars()
                .find(|c| !matches!(c, '0'..='9' | 'a'..='f'))
                .unwrap_or('?'),
        )),
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl std::str::FromStr for Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_hex(s)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Digest::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// Incremental SHA-256 over a stream fed in chunks.
#[derive(Clone, Default)]
pub struct StreamingDigest(sha2::Sha256);

impl fmt::Debug for StreamingDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StreamingDigest")
    }
}

impl StreamingDigest {
    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        sha2::Digest::update(&mut self.0, bytes);
    }

    /// The digest of everything added.
    pub fn finish(self) -> Digest {
        Digest(sha2::Digest::finalize(self.0).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector_and_round_trip() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::from_hex(&d.to_hex()), Ok(d));
        let mut s = StreamingDigest::default();
        s.update(b"a");
        s.update(b"bc");
        assert_eq!(s.finish(), d);
    }

    #[test]
    fn rejects_non_canonical_hex() {
        let upper = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD";
        assert_eq!(Digest::from_hex(upper), Err(DigestError::NotLowerHex('B')));
        assert_eq!(
            Digest::from_hex(&"a".repeat(63)),
            Err(DigestError::Length(63))
        );
        assert_eq!(
            Digest::from_hex(&"a".repeat(65)),
            Err(DigestError::Length(65))
        );
        assert!(matches!(
            Digest::from_hex(&"g".repeat(64)),
            Err(DigestError::NotLowerHex('g'))
        ));
        // 64 bytes but multi-byte characters: never panics on a char boundary.
        assert!(Digest::from_hex(&"é".repeat(32)).is_err());
    }
}
