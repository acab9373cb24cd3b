//! Preview limits (`[tool_output]` in the config file).

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

/// Largest accepted `max_payload_bytes` (and `max_bytes`): 16 MiB, far past any model's
/// context window. Bounding the limits bounds the memory of a capture (see
/// [`PreviewLimits::retained_head_bytes`] and [`PreviewLimits::tail_window_bytes`]).
pub const MAX_PAYLOAD_BYTES: usize = 16 << 20;

/// Largest accepted `max_lines` and `tail_lines`: a shown line takes at least one byte, so more
/// lines than payload bytes can never be shown.
pub const MAX_LINES: u64 = MAX_PAYLOAD_BYTES as u64;

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
    /// A byte limit above [`MAX_PAYLOAD_BYTES`].
    #[error("{which} is {value}; it must be at most {MAX_PAYLOAD_BYTES} (16 MiB)")]
    TooManyBytes {
        /// `"max_bytes"` or `"max_payload_bytes"`.
        which: &'static str,
        /// The value given.
        value: usize,
    },
    /// A live-display bound above
    /// [`MAX_DISPLAY_BYTES`](crate::capture::MAX_DISPLAY_BYTES)
    /// ([`Capture::with_display_bound`](crate::capture::Capture::with_display_bound)).
    #[error(
        "the live display bound is {0} bytes; it must be at most {max} (1 MiB)",
        max = crate::capture::MAX_DISPLAY_BYTES
    )]
    DisplayBoundTooLarge(usize),
    /// A line limit above [`MAX_LINES`].
    #[error("{which} is {value}; it must be at most {MAX_LINES}")]
    TooManyLines {
        /// `"max_lines"` or `"tail_lines"`.
        which: &'static str,
        /// The value given.
        value: u64,
    },
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
        for (which, value) in [
            ("max_bytes", self.max_bytes),
            ("max_payload_bytes", self.max_payload_bytes),
        ] {
            if value > MAX_PAYLOAD_BYTES {
                return Err(LimitsError::TooManyBytes { which, value });
            }
        }
        for (which, value) in [
            ("max_lines", self.max_lines),
            ("tail_lines", self.tail_lines),
        ] {
            if value > MAX_LINES {
                return Err(LimitsError::TooManyLines { which, value });
            }
        }
        Ok(())
    }

    /// Rendered-byte budget of each stream's preview (head plus tail) when `streams` streams
    /// share the payload bound. Never more than `max_bytes`.
    pub fn stream_budget(&self, streams: usize) -> usize {
        let streams = streams.clamp(1, MAX_STREAMS);
        let overhead = STATUS_OVERHEAD_BYTES + streams * STREAM_OVERHEAD_BYTES;
        let share = self.max_payload_bytes.saturating_sub(overhead) / streams;
        self.max_bytes.min(share)
    }

    /// Rendered-byte budget of a truncated stream's tail view: a quarter of its budget.
    pub fn tail_budget(&self, streams: usize) -> usize {
        self.stream_budget(streams) / 4
    }

    /// Bytes a capture keeps of a stream's end for the tail view (0 when it is off): the tail
    /// budget, since a raw byte never renders shorter, plus the byte before the tail's first
    /// line, which tells that a line starts there. The window is trimmed lazily, so it holds
    /// at most twice this while capturing.
    pub fn tail_window_bytes(&self, streams: usize) -> usize {
        if self.tail_lines == 0 {
            0
        } else {
            self.tail_budget(streams).saturating_add(1)
        }
    }

    /// Bytes a capture must keep in memory per stream (of `streams`) to render any preview
    /// under these limits: the stream's budget, since
    /// the raw prefix is never longer than its rendered form. Three bytes more let the preview
    /// tell an invalid sequence at the budget's edge (shown as U+FFFD) from the start of a
    /// character the next bytes complete (held back); without them it must hold both back and
    /// the preview is shorter than the longest prefix within the limits.
    pub fn retained_head_bytes(&self, streams: usize) -> usize {
        self.stream_budget(streams).saturating_add(3)
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

    #[test]
    fn limits_are_bounded_and_the_largest_accepted_ones_do_not_overflow() {
        let max = PreviewLimits {
            max_lines: MAX_LINES,
            max_bytes: MAX_PAYLOAD_BYTES,
            max_payload_bytes: MAX_PAYLOAD_BYTES,
            tail_lines: MAX_LINES,
        };
        assert_eq!(max.validate(), Ok(()));
        for streams in [0, 1, 8, usize::MAX] {
            let budget = max.stream_budget(streams);
            assert!(budget <= MAX_PAYLOAD_BYTES);
            assert_eq!(max.retained_head_bytes(streams), budget + 3);
            assert_eq!(max.tail_window_bytes(streams), budget / 4 + 1);
        }
        let refused = [
            (
                PreviewLimits {
                    max_bytes: MAX_PAYLOAD_BYTES + 1,
                    ..max
                },
                "max_bytes is 16777217; it must be at most 16777216 (16 MiB)",
            ),
            (
                PreviewLimits {
                    max_bytes: usize::MAX,
                    max_payload_bytes: usize::MAX,
                    ..max
                },
                "max_bytes is 18446744073709551615; it must be at most 16777216 (16 MiB)",
            ),
            (
                PreviewLimits {
                    max_payload_bytes: MAX_PAYLOAD_BYTES + 1,
                    ..max
                },
                "max_payload_bytes is 16777217; it must be at most 16777216 (16 MiB)",
            ),
            (
                PreviewLimits {
                    max_lines: u64::MAX,
                    ..max
                },
                "max_lines is 18446744073709551615; it must be at most 16777216",
            ),
            (
                PreviewLimits {
                    tail_lines: MAX_LINES + 1,
                    ..max
                },
                "tail_lines is 16777217; it must be at most 16777216",
            ),
        ];
        for (limits, message) in refused {
            assert_eq!(limits.validate().unwrap_err().to_string(), message);
        }
        // Unvalidated limits (e.g. from a record written elsewhere) still compute safely.
        let huge = PreviewLimits {
            max_lines: u64::MAX,
            max_bytes: usize::MAX,
            max_payload_bytes: usize::MAX,
            tail_lines: u64::MAX,
        };
        let budget = huge.stream_budget(1);
        assert_eq!(
            budget,
            usize::MAX - STATUS_OVERHEAD_BYTES - STREAM_OVERHEAD_BYTES
        );
        assert_eq!(huge.retained_head_bytes(1), budget + 3);
        assert_eq!(huge.tail_window_bytes(1), budget / 4 + 1);
    }
}
