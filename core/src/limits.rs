//! Preview limits (`[tool_output]`, SPEC §3).

use serde::{Deserialize, Serialize};

use crate::stream::MAX_STREAMS;

/// Bytes reserved per stream for its heading, hint, tail omission line and separators when the
/// payload bound is split between streams. Generous on purpose: the real overhead is measured,
/// this only guarantees that a minimal preview always fits.
pub const STREAM_OVERHEAD_BYTES: usize = 768;

/// Bytes reserved for the status line of an incomplete result.
pub const STATUS_OVERHEAD_BYTES: usize = 512;

/// The smallest accepted payload bound: every stream of the largest declaration keeps its
/// overhead plus at least 256 bytes of preview.
pub const MIN_PAYLOAD_BYTES: usize =
    STATUS_OVERHEAD_BYTES + MAX_STREAMS * (STREAM_OVERHEAD_BYTES + 256);

/// Per-stream and aggregate bounds of the model-facing rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewLimits {
    /// Most lines shown per stream (default 2000).
    pub max_lines: u64,
    /// Most preview bytes shown per stream (default 51200).
    pub max_bytes: usize,
    /// Bound on the whole rendered result, headings and hints included (default 1 MiB).
    pub max_payload_bytes: usize,
    /// Lines of tail view after the head of a truncated stream; 0 disables it (default).
    pub tail_lines: u64,
}

impl Default for PreviewLimits {
    fn default() -> Self {
        Self {
            max_lines: 2000,
            max_bytes: 51_200,
            max_payload_bytes: 1 << 20,
            tail_lines: 0,
        }
    }
}

/// Why limits were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// `max_lines` is 0.
    #[error("max_lines must be at least 1")]
    ZeroLines,
    /// `max_bytes` is 0.
    #[error("max_bytes must be at least 1")]
    ZeroBytes,
    /// The payload bound cannot hold the largest declaration's headings and hints.
    #[error("max_payload_bytes is {0}; it must be at least {MIN_PAYLOAD_BYTES}")]
    PayloadTooSmall(usize),
}

impl PreviewLimits {
    /// Checks the limits can always be honoured.
    pub fn validate(&self) -> Result<(), LimitsError> {
        if self.max_lines == 0 {
            return Err(LimitsError::ZeroLines);
        }
        if self.max_bytes == 0 {
            return Err(LimitsError::ZeroBytes);
        }
        if self.max_payload_bytes < MIN_PAYLOAD_BYTES {
            return Err(LimitsError::PayloadTooSmall(self.max_payload_bytes));
        }
        Ok(())
    }

    /// Rendered-byte budget of each stream's preview (head plus tail) when `streams` streams
    /// share the payload bound. Never more than `max_bytes`.
    pub fn stream_budget(&self, streams: usize) -> usize {
        let streams = streams.max(1);
        let share = self
            .max_payload_bytes
            .saturating_sub(STATUS_OVERHEAD_BYTES + streams * STREAM_OVERHEAD_BYTES)
            / streams;
        self.max_bytes.min(share)
    }

    /// Bytes a capture must keep in memory per stream to render any preview under these limits:
    /// the raw prefix is never longer than its rendered form. Three bytes more let the preview
    /// tell an invalid sequence at the budget's edge (shown as U+FFFD) from the start of a
    /// character the next bytes complete (held back); without them it must hold both back and
    /// the preview is shorter than the longest prefix within the limits.
    pub fn retained_head_bytes(&self) -> usize {
        self.max_bytes.min(self.max_payload_bytes) + 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let l = PreviewLimits::default();
        assert_eq!(
            (l.max_lines, l.max_bytes, l.max_payload_bytes, l.tail_lines),
            (2000, 51200, 1 << 20, 0)
        );
        assert_eq!(l.validate(), Ok(()));
        assert_eq!(l.stream_budget(8), 51200);
    }

    #[test]
    fn budget_shrinks_so_the_payload_fits() {
        let l = PreviewLimits {
            max_bytes: 1 << 20,
            ..Default::default()
        };
        let b = l.stream_budget(8);
        assert!(8 * (b + STREAM_OVERHEAD_BYTES) + STATUS_OVERHEAD_BYTES <= l.max_payload_bytes);
        assert!(b >= 256);
        let tight = PreviewLimits {
            max_payload_bytes: MIN_PAYLOAD_BYTES,
            ..l
        };
        assert_eq!(tight.validate(), Ok(()));
        assert_eq!(tight.stream_budget(8), 256);
        assert_eq!(
            PreviewLimits {
                max_payload_bytes: MIN_PAYLOAD_BYTES - 1,
                ..l
            }
            .validate(),
            Err(LimitsError::PayloadTooSmall(MIN_PAYLOAD_BYTES - 1))
        );
    }
}
