//! Property tests of previews and hints: for arbitrary byte streams (invalid UTF-8, `\r\n`, no
//! final newline, lines far longer than `max_bytes`, multi-byte characters split at chunk
//! boundaries), arbitrary chunking, interleaving and limits, the checks of
//! [`agentrun_tests::checks::check_preview`] hold: exact previews and hints, the payload bound, and
//! recovery of every stream byte for byte by following the hints with `read` pages.

use agentrun_core::limits::MIN_PAYLOAD_BYTES;
use agentrun_core::{CaptureStatus, OutputDeclaration, PreviewLimits};
use agentrun_tests::checks::{Delta, PreviewCase, check_preview};
use proptest::prelude::*;
use proptest::sample::Index;

/// A fragment of stream content; concatenations cover every shape the preview must handle.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => "[a-z ]{0,12}".prop_map(String::into_bytes),
        3 => Just(b"\n".to_vec()),
        1 => Just(b"\r\n".to_vec()),
        2 => prop::sample::select(vec!["é", "€", "😀", "\u{10FFFF}"]).prop_map(|s| s.as_bytes().to_vec()),
        1 => (0x80u8..=0xff).prop_map(|b| vec![b]),
        // Truncated and surrogate sequences: invalid however the next bytes continue.
        1 => prop::sample::select(vec![&b"\xe2\x82"[..], b"\xf0\x9f\x98", b"\xc3", b"\xed\xa0\x80"])
            .prop_map(<[u8]>::to_vec),
        1 => (1usize..6000).prop_map(|n| vec![b'x'; n]),
    ]
}

/// A stream's content cut into chunks at arbitrary byte positions.
fn chunked_stream() -> impl Strategy<Value = Vec<Vec<u8>>> {
    (
        prop::collection::vec(piece(), 0..30),
        prop::collection::vec(any::<Index>(), 0..8),
    )
        .prop_map(|(pieces, cuts)| {
            let content = pieces.concat();
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(content.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.push(content.len());
            let mut start = 0;
            cuts.into_iter()
                .map(|end| {
                    let chunk = content[start..end].to_vec();
                    start = end;
                    chunk
                })
                .collect()
        })
}

fn limits(max_bytes: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = PreviewLimits> {
    (1u64..=60, max_bytes, 0u64..=5, 0usize..=200_000).prop_map(
        |(max_lines, max_bytes, tail_lines, extra)| PreviewLimits {
            max_lines,
            max_bytes,
            tail_lines,
            max_payload_bytes: MIN_PAYLOAD_BYTES + extra,
        },
    )
}

/// A case with `streams` named streams (0: single output), each stream's chunks interleaved in
/// an arbitrary order that keeps every stream's own order, plus display text and rejected
/// foreign chunks in between.
fn case(
    streams: std::ops::RangeInclusive<usize>,
    limits: impl Strategy<Value = PreviewLimits>,
) -> impl Strategy<Value = PreviewCase> {
    let streams = streams.prop_flat_map(|count| {
        (
            Just(count),
            prop::collection::vec(chunked_stream(), count.max(1)),
        )
    });
    (
        streams,
        prop::collection::vec(any::<Index>(), 0..64),
        limits,
        prop::sample::select(vec![
            CaptureStatus::Succeeded,
            CaptureStatus::Failed,
            CaptureStatus::Cancelled,
        ]),
        prop::collection::vec(prop_oneof![1u64..=3, 1u64..=2000], 1..4),
    )
        .prop_map(
            |((count, chunks), order, limits, status, page_limits)| PreviewCase {
                declaration: if count == 0 {
                    OutputDeclaration::Single
                } else {
                    OutputDeclaration::named((0..count).map(|i| format!("s{i}"))).unwrap()
                },
                limits,
                deltas: interleave(chunks, &order),
                status,
                page_limits,
            },
        )
}

fn interleave(chunks: Vec<Vec<Vec<u8>>>, order: &[Index]) -> Vec<Delta> {
    let mut queues: Vec<std::collections::VecDeque<Vec<u8>>> =
        chunks.into_iter().map(Into::into).collect();
    let mut deltas = Vec::new();
    let mut step = 0;
    loop {
        let open: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].is_empty())
            .collect();
        if open.is_empty() {
            return deltas;
        }
        let pick = order.get(step).map_or(0, |ix| ix.index(open.len()));
        match step % 7 {
            3 => deltas.push(Delta::Display(format!("progress {step}\n"))),
            5 => deltas.push(Delta::Foreign(step % 2 == 1)),
            _ => {}
        }
        deltas.push(Delta::Chunk(
            open[pick],
            queues[open[pick]].pop_front().unwrap(),
        ));
        step += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Single output: exact preview, exact hint, full recovery.
    #[test]
    fn single_stream_is_recoverable_byte_for_byte(case in case(0..=0, limits(1..=5000))) {
        check_preview(&case);
    }

    /// One to eight named streams, interleaved: each is independently exact and recoverable.
    #[test]
    fn named_streams_are_recoverable_byte_for_byte(case in case(1..=8, limits(1..=5000))) {
        check_preview(&case);
    }

    /// With `max_bytes` far above the payload bound's share, the rendering of 1 or 8 streams
    /// still fits `max_payload_bytes`.
    #[test]
    fn payload_bound_holds_with_large_max_bytes(
        case in prop_oneof![Just(1usize), Just(8usize)]
            .prop_flat_map(|n| case(n..=n, limits(100_000..=1 << 20)))
    ) {
        check_preview(&case);
    }
}
