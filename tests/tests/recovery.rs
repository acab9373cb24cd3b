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
    chunked(prop::collection::vec(piece(), 0..30), 8)
}

/// The concatenation of `pieces`, cut at up to `cuts` arbitrary byte positions.
fn chunked(
    pieces: impl Strategy<Value = Vec<Vec<u8>>>,
    cuts: usize,
) -> impl Strategy<Value = Vec<Vec<u8>>> {
    (pieces, prop::collection::vec(any::<Index>(), 0..cuts)).prop_map(|(pieces, cuts)| {
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

// ---------------------------------------------------------------------------------------------
// Following the rendered hints through the store, over-long lines included
// ---------------------------------------------------------------------------------------------

use agentrun_core::page::{ByteRange, MAX_PAGE_BYTES, PageRequest};
use agentrun_core::{CaptureCompletion, Continuation, OutputChannel, ResultRecord};
use agentrun_fs::Store;
use agentrun_tests::checks::reference_line_start;

/// A fragment of stream content with lines around and far over the page bound.
fn piece_or_long_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => piece(),
        1 => prop::sample::select(vec![
            MAX_PAGE_BYTES - 2,
            MAX_PAGE_BYTES - 1,
            MAX_PAGE_BYTES,
            MAX_PAGE_BYTES + 1,
            2 * MAX_PAGE_BYTES + 5,
        ])
        .prop_map(|n| vec![b'x'; n]),
    ]
}

/// Streams (1 for single output) with their chunks, and the limits they are captured with.
fn long_line_case() -> impl Strategy<Value = (usize, Vec<Vec<Vec<u8>>>, PreviewLimits, Vec<u64>)> {
    let stream = || chunked(prop::collection::vec(piece_or_long_line(), 0..12), 6);
    (0usize..=3).prop_flat_map(move |count| {
        (
            Just(count),
            prop::collection::vec(stream(), count.max(1)),
            // Previews up to a few pages: line 0 may then be shown in full yet be too long
            // for a line page.
            prop_oneof![
                limits(1..=5000),
                limits(MAX_PAGE_BYTES - 2..=3 * MAX_PAGE_BYTES)
            ],
            prop::collection::vec(prop_oneof![1u64..=3, 1u64..=2000], 1..4),
        )
    })
}

/// The `read(filePath="<uri>", offset=N)` or `byteOffset=B` call in `text`, which must name
/// `uri` at most once.
fn parse_read_call(text: &str, uri: &str) -> Option<Continuation> {
    let key = format!("read(filePath=\"{uri}\", ");
    assert!(text.matches(&key).count() <= 1, "{uri} hinted twice");
    let rest = &text[text.find(&key)? + key.len()..];
    let (name, rest) = rest.split_once('=')?;
    let number: u64 = rest[..rest.find(')')?].parse().ok()?;
    match name {
        "offset" => Some(Continuation::Line(number)),
        "byteOffset" => Some(Continuation::Byte(number)),
        other => panic!("unknown read argument {other:?}"),
    }
}

/// Follows the hint rendered for `stream` and then each page's rendered continuation
/// through the store, checking that no read fails, none skips a byte, none re-reads a page
/// bound of bytes already held, and that the bytes held at the end are the stream's.
fn follow_hints(
    store: &Store,
    record: &ResultRecord,
    index: usize,
    content: &[u8],
    page_limits: &[u64],
) {
    let rendered = record.render();
    let stream = &record.streams()[index];
    let uri = record.stream_uri(stream).to_string();
    let artifact = record.stream_uri(stream);
    // Reading from the start (the hint of a compacted or replayed artifact) is never refused.
    match stream.start() {
        Continuation::Line(0) => {
            let request = PageRequest::up_to(0, 2000).unwrap();
            store
                .read_page(&artifact, request)
                .unwrap_or_else(|e| panic!("reading {uri} from its start: {e}"));
        }
        Continuation::Byte(0) => assert!(
            reference_line_start(content, 1) > MAX_PAGE_BYTES,
            "{uri} starts by byte though line 0 fits a page"
        ),
        other => panic!("{uri} starts at {other:?}"),
    }
    let mut held = content[..stream.preview.raw_bytes as usize].to_vec();
    let mut at = match parse_read_call(&rendered, &uri) {
        Some(at) => at,
        None => {
            assert!(
                !stream.preview.truncated,
                "a cut preview of {uri} has no hint"
            );
            Continuation::End
        }
    };
    let mut limits = page_limits.iter().chain(&[2000]).cycle();
    loop {
        match at {
            Continuation::End => break,
            Continuation::Line(line) => {
                let start = reference_line_start(content, line);
                assert!(start <= held.len(), "line {line} skips bytes not shown");
                assert!(
                    held.len() - start < MAX_PAGE_BYTES,
                    "line {line} re-reads {} bytes already shown",
                    held.len() - start
                );
                let request = PageRequest::up_to(line, *limits.next().unwrap()).unwrap();
                let page = store
                    .read_page(&artifact, request)
                    .unwrap_or_else(|e| panic!("following offset={line} of {uri}: {e}"));
                held.truncate(start);
                held.extend_from_slice(&page.bytes);
                let text = page.to_model_text(&artifact);
                let last = text.rsplit('\n').next().unwrap_or_default();
                at = parse_read_call(last, &uri).unwrap_or_else(|| {
                    assert!(last.starts_with("[End of artifact"), "{last}");
                    Continuation::End
                });
                if let Continuation::Line(next) = at {
                    assert!(next > line, "offset={next} does not advance from {line}");
                }
            }
            Continuation::Byte(byte) => {
                assert_eq!(
                    byte,
                    held.len() as u64,
                    "byteOffset={byte} is not the next byte"
                );
                let range = ByteRange::new(byte, MAX_PAGE_BYTES as u64).unwrap();
                let page = store
                    .read_bytes(&artifact, range)
                    .unwrap_or_else(|e| panic!("following byteOffset={byte} of {uri}: {e}"));
                held.extend_from_slice(&page.bytes);
                at = page.continuation();
            }
            other => panic!("unknown continuation {other:?}"),
        }
    }
    assert!(
        held == content,
        "the hints of {uri} do not reproduce the stream"
    );
}

proptest! {
    // Each case writes up to tens of MiB through a real store.
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The record's hints, then each page's continuation, followed through the store,
    /// reproduce every stream byte for byte, lines longer than a page included.
    #[test]
    fn following_the_rendered_hints_through_the_store_recovers_every_stream(
        (count, streams, limits, page_limits) in long_line_case()
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        let declaration = if count == 0 {
            OutputDeclaration::Single
        } else {
            OutputDeclaration::named((0..count).map(|i| format!("s{i}"))).unwrap()
        };
        let mut session = store.begin_capture(declaration.clone(), limits).unwrap();
        let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
        for step in 0..longest {
            for (i, chunks) in streams.iter().enumerate() {
                let Some(chunk) = chunks.get(step) else { continue };
                let channel = if count == 0 {
                    OutputChannel::Single
                } else {
                    OutputChannel::Named(agentrun_core::StreamName::new(&format!("s{i}")).unwrap())
                };
                session.write_channel(&channel, chunk).unwrap();
            }
        }
        let record = session
            .finish(CaptureCompletion::Streamed { display: None, status: CaptureStatus::Succeeded })
            .unwrap();
        for (i, chunks) in streams.iter().enumerate() {
            follow_hints(&store, &record, i, &chunks.concat(), &page_limits);
        }
    }
}
