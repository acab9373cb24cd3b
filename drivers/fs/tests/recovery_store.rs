//! The recovery property through the store: capture with agentrun-fs, take the rendered model
//! text, and follow every hint with `Store::read_page` along `next_offset` (and byte ranges
//! for a line longer than a page), manifest stream URIs included: the shown prefix plus what
//! the reads return is every stream byte for byte. The tail view is checked against the same
//! reads, and the manifest against the streams.

mod common;

use agentrun_core::page::MAX_PAGE_BYTES;
use agentrun_core::{
    ArtifactUri, ByteRange, Continuation, Manifest, ModelRead, OutputChannel, OutputDeclaration,
    PageError, PageRequest, PreviewLimits, ReadSyntax, ResultRecord,
};
use agentrun_fs::{ReadError, Store};
use common::*;
use proptest::prelude::*;

/// Reads `uri` from line `offset` to the end: pages of `limit` lines along `next_offset`; a
/// line longer than a page is read in byte ranges up to and including its newline.
fn read_from(store: &Store, uri: &ArtifactUri, mut offset: u64, limit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        match store.read_page(uri, PageRequest::new(offset, limit).unwrap()) {
            Ok(page) => {
                out.extend_from_slice(&page.bytes);
                match page.next_offset {
                    Some(next) => offset = next,
                    None => return out,
                }
            }
            Err(ReadError::Page(PageError::PageTooLarge {
                lines: 0,
                line_start_byte,
                ..
            })) => {
                let mut at = line_start_byte;
                loop {
                    let range = ByteRange::new(at, MAX_PAGE_BYTES as u64).unwrap();
                    let piece = store.read_bytes(uri, range).unwrap();
                    match memchr_newline(&piece.bytes) {
                        Some(end) => {
                            out.extend_from_slice(&piece.bytes[..=end]);
                            break;
                        }
                        None => out.extend_from_slice(&piece.bytes),
                    }
                    match piece.next_byte_offset {
                        Some(next) => at = next,
                        None => return out,
                    }
                }
                offset += 1;
            }
            Err(ReadError::Page(PageError::PageTooLarge { lines, .. })) => {
                // Fewer lines fit: ask for exactly those.
                let page = store
                    .read_page(uri, PageRequest::new(offset, lines).unwrap())
                    .unwrap();
                out.extend_from_slice(&page.bytes);
                offset += page.lines;
                if page.next_offset.is_none() {
                    return out;
                }
            }
            Err(e) => panic!("read {uri} at {offset}: {e}"),
        }
    }
}

/// Reads `uri` from byte `at` to the end in byte ranges.
fn bytes_from(store: &Store, uri: &ArtifactUri, mut at: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let range = ByteRange::new(at, MAX_PAGE_BYTES as u64).unwrap();
        let piece = store.read_bytes(uri, range).unwrap();
        out.extend_from_slice(&piece.bytes);
        match piece.next_byte_offset {
            Some(next) => at = next,
            None => return out,
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// The prefix of `text` up to and including its `n`-th newline.
fn through_newline(text: &[u8], n: u64) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let end = text
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(n as usize - 1)
        .map(|(i, _)| i + 1)
        .expect("the preview holds the hint's newlines");
    &text[..end]
}

/// Checks the recovery property of one captured record against the original streams.
fn check(store: &Store, record: &ResultRecord, originals: &[Vec<u8>], page_limit: u64) {
    let text = record.render();
    let rendered = text.as_bytes();
    assert!(rendered.len() <= record.limits.max_payload_bytes);
    let named = record.streams().len() > 1 || record.streams()[0].name.is_some();
    let mut pos = 0;
    for (i, (stream, original)) in record.streams().iter().zip(originals).enumerate() {
        if named {
            let heading = format!(
                "{}[{}]\n",
                if i > 0 { "\n" } else { "" },
                stream.name.as_ref().unwrap()
            );
            assert!(
                rendered[pos..].starts_with(heading.as_bytes()),
                "heading of stream {i}"
            );
            pos += heading.len();
        }
        // The rendered preview bytes, taken from the model text itself.
        let shown = &rendered[pos..pos + stream.preview.text.len()];
        assert_eq!(shown, stream.preview.text.as_bytes());
        pos += shown.len();
        if !stream.preview.truncated {
            assert_eq!(shown, &original[..], "an untruncated stream is shown whole");
            if named && i + 1 < originals.len() && !shown.is_empty() && !shown.ends_with(b"\n") {
                pos += 1;
            }
            continue;
        }
        if !shown.is_empty() && !shown.ends_with(b"\n") {
            pos += 1;
        }
        let uri = record.stream_uri(stream);
        let n = stream.preview.newlines;
        let at = stream.continuation();
        let hint = format!(
            "[Truncated. Read more: {}]\n",
            ModelRead.read_call(&uri, at)
        );
        assert!(
            rendered[pos..].starts_with(hint.as_bytes()),
            "hint of stream {i}"
        );
        pos += hint.len();
        // Following the hint reproduces the stream: from the first line not shown in full, or,
        // when that line is longer than a page, from the first byte not shown.
        let recovered = match at {
            Continuation::Byte(byte) => {
                assert_eq!(
                    byte, stream.preview.raw_bytes,
                    "stream {i} continues by byte"
                );
                let mut recovered = original[..byte as usize].to_vec();
                recovered.extend(bytes_from(store, &uri, byte));
                recovered
            }
            _ => {
                let mut recovered = through_newline(shown, n).to_vec();
                recovered.extend(read_from(store, &uri, n, page_limit));
                recovered
            }
        };
        assert_eq!(recovered, *original, "stream {i} recovered through {uri}");
        if let Some(tail) = &stream.tail {
            let omission = format!(
                "[Lines {}-{} not shown in full; the last {} lines follow]\n",
                n + 1,
                tail.first_line,
                tail.lines
            );
            assert!(
                rendered[pos..].starts_with(omission.as_bytes()),
                "tail of stream {i}"
            );
            pos += omission.len();
            let last = read_from(store, &uri, tail.first_line, page_limit);
            assert_eq!(tail.text.as_bytes(), &last[..], "tail of stream {i}");
            assert!(rendered[pos..].starts_with(&last));
            pos += last.len();
        }
    }
    assert_eq!(pos, rendered.len(), "nothing else in the rendering");
    // The manifest names every stream with its digest and counts.
    if let agentrun_core::record::RecordOutput::Named { manifest, .. } = &record.output {
        let digest = *manifest;
        let json = read_from(store, &ArtifactUri::new(digest), 0, 2000);
        let manifest = Manifest::parse(&json).unwrap();
        for (entry, original) in manifest.streams.iter().zip(originals) {
            assert_eq!(entry.sha256, agentrun_core::Digest::of(original));
            assert_eq!(entry.bytes, original.len() as u64);
            let via_stream = read_from(
                store,
                &ArtifactUri::stream(digest, entry.name.clone()),
                0,
                2000,
            );
            assert_eq!(&via_stream, original);
        }
    }
}

/// Valid UTF-8 text (so the rendered preview is the raw prefix) with lines of widely varying
/// length, empty lines, `\r`, multi-byte characters, and an optional unterminated last line.
fn stream_content() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((0usize..400, 0u8..4), 0..300),
        any::<bool>(),
    )
        .prop_map(|(lines, terminated)| {
            let mut out = String::new();
            for (len, kind) in lines {
                let unit = ["x", "é", "€\r", "😀"][kind as usize];
                out.push_str(&unit.repeat(len / unit.len().max(1)));
                out.push('\n');
            }
            if !terminated {
                out.push_str("end");
            }
            out.into_bytes()
        })
}

fn limits() -> impl Strategy<Value = PreviewLimits> {
    (1u64..60, 1usize..6000, 0u64..5).prop_map(|(max_lines, max_bytes, tail_lines)| PreviewLimits {
        max_lines,
        max_bytes,
        tail_lines,
        ..PreviewLimits::default()
    })
}

fn capture(
    store: &Store,
    names: &[&str],
    streams: &[Vec<u8>],
    limits: PreviewLimits,
    chunk: usize,
) -> ResultRecord {
    let decl = if names.is_empty() {
        OutputDeclaration::Single
    } else {
        OutputDeclaration::named(names).unwrap()
    };
    let mut s = store.begin_capture(decl, limits).unwrap();
    // Interleave the streams chunk by chunk, as a process's pipes would.
    let mut at = 0;
    while streams.iter().any(|b| at < b.len()) {
        for (i, bytes) in streams.iter().enumerate() {
            if at < bytes.len() {
                let piece = &bytes[at..(at + chunk).min(bytes.len())];
                let channel = if names.is_empty() {
                    OutputChannel::Single
                } else {
                    named(names[i])
                };
                s.write_channel(&channel, piece).unwrap();
            }
        }
        at += chunk;
    }
    s.finish(done()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn following_the_hints_through_the_store_reproduces_every_stream(
        streams in prop::collection::vec(stream_content(), 1..4),
        single in any::<bool>(),
        limits in limits(),
        chunk in 1usize..70_000,
        page_limit in 1u64..50,
    ) {
        let (_tmp, store) = store();
        let names: Vec<&str> = if single { vec![] } else { ["stdout", "stderr", "results"][..streams.len()].to_vec() };
        let streams = if single { streams[..1].to_vec() } else { streams };
        let record = capture(&store, &names, &streams, limits, chunk);
        check(&store, &record, &streams, page_limit);
    }
}

#[test]
fn lines_longer_than_a_page_are_recovered_through_byte_ranges() {
    let (_tmp, store) = store();
    let mut long = b"short\n".to_vec();
    long.extend(std::iter::repeat_n(b'y', MAX_PAGE_BYTES * 2 + 17));
    long.extend_from_slice(b"\nafter\n");
    long.extend(std::iter::repeat_n(b'z', MAX_PAGE_BYTES + 1)); // unterminated
    let limits = PreviewLimits {
        max_lines: 1,
        tail_lines: 1,
        ..PreviewLimits::default()
    };
    for names in [&[][..], &["stdout", "stderr"][..]] {
        let streams: Vec<Vec<u8>> = if names.is_empty() {
            vec![long.clone()]
        } else {
            vec![long.clone(), b"e\n".to_vec()]
        };
        let record = capture(&store, names, &streams, limits, 1 << 20);
        check(&store, &record, &streams, 2000);
    }
}
