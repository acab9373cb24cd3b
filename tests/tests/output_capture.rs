//! One readable test per guarantee of docs/output-streams.md (output streams, capture, previews and
//! hints). Each runs the full property check ([`check_preview`]) and then asserts the point it
//! is named for on the exact rendered text.

use agentrun_core::capture::CaptureError;
use agentrun_core::limits::MIN_PAYLOAD_BYTES;
use agentrun_core::page::{ByteRange, PageRequest, extract_bytes, extract_page};
use agentrun_core::record::RecordOutput;
use agentrun_core::stream::OutputChannelError;
use agentrun_core::{
    Capture, CaptureStatus, Digest, FullOutput, OutputChannel, OutputDeclaration, PreviewLimits,
    ResultRecord, StreamName,
};
use agentrun_tests::checks::{Delta, PreviewCase, PreviewOutcome, check_preview, hint};

fn run(
    declaration: OutputDeclaration,
    limits: PreviewLimits,
    deltas: Vec<Delta>,
) -> PreviewOutcome {
    check_preview(&PreviewCase {
        declaration,
        limits,
        deltas,
        status: CaptureStatus::Succeeded,
        page_limits: vec![1, 2000],
    })
}

fn chunk(stream: usize, bytes: &[u8]) -> Delta {
    Delta::Chunk(stream, bytes.to_vec())
}

fn named(names: &[&str]) -> OutputDeclaration {
    OutputDeclaration::named(names).unwrap()
}

fn manifest_of(outcome: &PreviewOutcome) -> Digest {
    match &outcome.record.output {
        RecordOutput::Named { manifest, .. } => *manifest,
        RecordOutput::Single { .. } => panic!("single output has no manifest"),
    }
}

fn lines(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect()
}

#[test]
fn single_output_has_no_heading_and_a_bare_uri_hint() {
    let limits = PreviewLimits {
        max_lines: 2,
        ..Default::default()
    };
    let out = run(
        OutputDeclaration::Single,
        limits,
        vec![chunk(0, b"a\nb\nc\n")],
    );
    let uri = format!("artifact://{}", Digest::of(b"a\nb\nc\n"));
    assert_eq!(out.rendered, format!("a\nb\n{}\n", hint(&uri, 2)));
}

#[test]
fn multiple_named_streams_render_in_declaration_order_with_manifest_hints() {
    let limits = PreviewLimits {
        max_lines: 1,
        ..Default::default()
    };
    let decl = named(&["stdout", "stderr"]);
    let out = run(decl, limits, vec![chunk(1, b"e1\n"), chunk(0, b"o1\no2\n")]);
    let m = manifest_of(&out);
    assert_eq!(
        out.rendered,
        format!(
            "[stdout]\no1\n{}\n\n[stderr]\ne1\n",
            hint(&format!("artifact://{m}/stdout"), 1)
        )
    );
}

#[test]
fn declared_empty_streams_are_kept() {
    let out = run(
        named(&["results", "diagnostics"]),
        PreviewLimits::default(),
        vec![],
    );
    assert_eq!(out.rendered, "[results]\n\n[diagnostics]\n");
    for s in out.record.streams() {
        assert_eq!((s.bytes, s.lines, s.sha256), (0, 0, Digest::of(b"")));
    }
    assert_eq!(
        out.record.artifacts().len(),
        3,
        "manifest plus both empty streams"
    );
}

#[test]
fn custom_named_streams_are_addressable() {
    let names = ["results.json", "diag_2-x", "A"];
    let limits = PreviewLimits {
        max_lines: 1,
        ..Default::default()
    };
    let deltas = (0..3).map(|i| chunk(i, b"first\nsecond\n")).collect();
    let out = run(named(&names), limits, deltas);
    let m = manifest_of(&out);
    for name in names {
        assert!(out.rendered.contains(&format!("[{name}]\nfirst\n")));
        assert!(
            out.rendered
                .contains(&hint(&format!("artifact://{m}/{name}"), 1))
        );
    }
}

#[test]
fn undeclared_chunks_are_rejected() {
    let c = Capture::new(named(&["results"]), PreviewLimits::default()).unwrap();
    let undeclared = OutputChannel::Named(StreamName::new("stdout").unwrap());
    assert!(matches!(
        c.resolve(&undeclared),
        Err(CaptureError::OutputChannel(
            OutputChannelError::Undeclared { .. }
        ))
    ));
    assert_eq!(
        c.resolve(&OutputChannel::Single),
        Err(CaptureError::OutputChannel(
            OutputChannelError::UnnamedOnNamed
        ))
    );
    let single = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    assert!(matches!(
        single.resolve(&undeclared),
        Err(CaptureError::OutputChannel(
            OutputChannelError::NamedOnSingle(_)
        ))
    ));
    // Rejected chunks leave no trace in the retained output.
    let out = run(
        named(&["results"]),
        PreviewLimits::default(),
        vec![
            chunk(0, b"kept\n"),
            Delta::Foreign(true),
            Delta::Foreign(false),
        ],
    );
    assert_eq!(out.rendered, "[results]\nkept\n");
}

#[test]
fn interleaved_deltas_stay_in_their_streams() {
    let deltas = vec![
        chunk(0, b"r1\n"),
        chunk(1, b"d1\n"),
        chunk(0, b"r2"),
        chunk(1, b"d2\n"),
        chunk(0, b"\n"),
    ];
    let out = run(
        named(&["results", "diagnostics"]),
        PreviewLimits::default(),
        deltas,
    );
    assert_eq!(
        out.streams,
        vec![b"r1\nr2\n".to_vec(), b"d1\nd2\n".to_vec()]
    );
    assert_eq!(out.rendered, "[results]\nr1\nr2\n\n[diagnostics]\nd1\nd2\n");
}

#[test]
fn display_never_enters_a_stream() {
    let deltas = vec![
        Delta::Display("compiling…\n".into()),
        chunk(0, b"out\n"),
        Delta::Display("done".into()),
    ];
    let out = run(OutputDeclaration::Single, PreviewLimits::default(), deltas);
    assert_eq!(out.record.display(), "compiling…\ndone");
    assert_eq!(out.rendered, "out\n");
    assert_eq!(out.record.streams()[0].sha256, Digest::of(b"out\n"));
}

#[test]
fn streamed_completion_finalizes_each_chunk_once() {
    let pieces: [&[u8]; 4] = [b"al", b"pha\nbe", b"ta\n", b"gamma"];
    let out = run(
        OutputDeclaration::Single,
        PreviewLimits::default(),
        pieces.iter().map(|p| chunk(0, p)).collect(),
    );
    let s = &out.record.streams()[0];
    assert_eq!((s.bytes, s.lines), (16, 3));
    assert_eq!(s.sha256, Digest::of(b"alpha\nbeta\ngamma"));
    assert_eq!(out.rendered, "alpha\nbeta\ngamma");
}

#[test]
fn full_completion_gives_the_same_record_as_streaming_the_same_bytes() {
    let limits = PreviewLimits {
        max_lines: 2,
        tail_lines: 1,
        ..Default::default()
    };
    let streamed = run(
        named(&["out", "err"]),
        limits,
        vec![chunk(0, &lines(9)), chunk(1, b"e\xff\n")],
    );

    let mut c = Capture::new(named(&["out", "err"]), limits).unwrap();
    let outputs = FullOutput::Named(vec![
        (StreamName::new("err").unwrap(), b"e\xff\n".to_vec()),
        (StreamName::new("out").unwrap(), lines(9)),
    ]);
    for (ix, bytes) in c.begin_full(outputs).unwrap() {
        c.handle_chunk(ix, &bytes);
    }
    let full =
        ResultRecord::from_summary("check".into(), &c.finish(None, CaptureStatus::Succeeded));
    assert_eq!(full, streamed.record);
    assert_eq!(full.render(), streamed.rendered);
}

#[test]
fn full_completion_after_streamed_chunks_is_rejected_as_mixed_mode() {
    let mut c = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    let ix = c.resolve(&OutputChannel::Single).unwrap().unwrap();
    c.handle_chunk(ix, b"streamed");
    assert_eq!(
        c.begin_full(FullOutput::Single(b"again".to_vec())),
        Err(CaptureError::MixedCompletion)
    );
    let s = c.finish(None, CaptureStatus::Succeeded);
    assert_eq!(
        s.streams[0].digest,
        Digest::of(b"streamed"),
        "nothing was resupplied"
    );
}

#[test]
fn streams_truncate_independently() {
    let limits = PreviewLimits {
        max_lines: 3,
        max_bytes: 12,
        ..Default::default()
    };
    let decl = named(&["short", "many", "wide"]);
    let deltas = vec![
        chunk(0, b"ok\n"),
        chunk(1, &lines(10)),
        chunk(2, &[b'w'; 40]),
    ];
    let out = run(decl, limits, deltas);
    let m = manifest_of(&out);
    let s = out.record.streams();
    assert!(!s[0].preview.truncated);
    assert_eq!(
        (s[1].preview.text.as_str(), s[1].preview.newlines),
        ("line 0\nline ", 1)
    );
    assert_eq!((s[2].preview.text.len(), s[2].preview.newlines), (12, 0));
    assert!(
        out.rendered
            .contains(&hint(&format!("artifact://{m}/many"), 1))
    );
    assert!(
        out.rendered
            .contains(&hint(&format!("artifact://{m}/wide"), 0))
    );
    assert!(!out.rendered.contains(&format!("artifact://{m}/short")));
}

#[test]
fn payload_bound_holds_for_eight_streams() {
    let names: Vec<String> = (0..8).map(|i| format!("stream{i}")).collect();
    for tail_lines in [0, 5] {
        let limits = PreviewLimits {
            max_lines: 100_000,
            max_bytes: 1 << 20,
            max_payload_bytes: MIN_PAYLOAD_BYTES,
            tail_lines,
        };
        let big: Vec<u8> = "€ is three bytes\n".repeat(4000).into_bytes();
        let deltas = (0..8).map(|i| chunk(i, &big)).collect();
        let out = run(OutputDeclaration::named(&names).unwrap(), limits, deltas);
        assert!(
            out.rendered.len() <= MIN_PAYLOAD_BYTES,
            "{} bytes",
            out.rendered.len()
        );
        assert!(
            out.record
                .streams()
                .iter()
                .all(|s| s.preview.truncated && !s.preview.text.is_empty())
        );
    }
}

#[test]
fn multibyte_characters_split_at_every_chunk_boundary_are_intact() {
    let content = "aé€😀\n€😀é\n".repeat(3).into_bytes();
    for split in 0..=content.len() {
        for max_bytes in [1, 2, 3, 4, 5, 7, 9, 100] {
            let limits = PreviewLimits {
                max_bytes,
                ..Default::default()
            };
            let deltas = vec![chunk(0, &content[..split]), chunk(0, &content[split..])];
            let out = run(OutputDeclaration::Single, limits, deltas);
            let text = &out.record.streams()[0].preview.text;
            assert!(
                !text.contains('\u{FFFD}'),
                "split {split}, max_bytes {max_bytes}: {text:?}"
            );
        }
    }
    // One byte per chunk as well.
    let deltas = content.iter().map(|b| chunk(0, &[*b])).collect();
    let out = run(
        OutputDeclaration::Single,
        PreviewLimits {
            max_bytes: 6,
            ..Default::default()
        },
        deltas,
    );
    assert_eq!(out.record.streams()[0].preview.text, "aé€");
}

/// Found by fuzzing: the capture kept exactly `max_bytes` bytes, so a truncated 4-byte
/// sequence at the edge could not be told from a character the next bytes complete, and the
/// preview held it back although its U+FFFD fits.
#[test]
fn an_invalid_sequence_at_the_budget_edge_is_shown() {
    let limits = PreviewLimits {
        max_bytes: 6,
        ..Default::default()
    };
    let out = run(
        OutputDeclaration::Single,
        limits,
        vec![chunk(0, b"\xe2\x82\xac\xf0\x9f\x98abc\n")],
    );
    assert_eq!(out.record.streams()[0].preview.text, "€\u{FFFD}");
    // A character the next bytes do complete is still held back whole.
    let out = run(
        OutputDeclaration::Single,
        limits,
        vec![chunk(0, "€😀abc\n".as_bytes())],
    );
    assert_eq!(out.record.streams()[0].preview.text, "€");
}

#[test]
fn invalid_utf8_is_shown_as_replacement_and_stored_raw() {
    let content = b"ok\xff\n\xe2\x82";
    let out = run(
        OutputDeclaration::Single,
        PreviewLimits::default(),
        vec![chunk(0, content)],
    );
    assert_eq!(out.rendered, "ok\u{FFFD}\n\u{FFFD}");
    assert_eq!(out.record.streams()[0].sha256, Digest::of(content));
}

#[test]
fn crlf_is_content_and_a_final_segment_is_a_line() {
    let content = b"a\r\nb\r\nlast";
    let limits = PreviewLimits {
        max_lines: 1,
        ..Default::default()
    };
    let out = run(OutputDeclaration::Single, limits, vec![chunk(0, content)]);
    let s = &out.record.streams()[0];
    assert_eq!((s.lines, s.preview.text.as_str()), (3, "a\r\n"));
    let page = extract_page(content, PageRequest::new(1, 5).unwrap()).unwrap();
    assert_eq!(
        (page.bytes.as_slice(), page.next_offset),
        (&b"b\r\nlast"[..], None)
    );
}

#[test]
fn a_line_cut_by_the_byte_limit_is_re_read_from_its_start() {
    let content = b"ab\ncdefgh\nij\n";
    let limits = PreviewLimits {
        max_bytes: 5,
        ..Default::default()
    };
    let out = run(OutputDeclaration::Single, limits, vec![chunk(0, content)]);
    let uri = format!("artifact://{}", Digest::of(content));
    assert_eq!(out.rendered, format!("ab\ncd\n{}\n", hint(&uri, 1)));
    let page = extract_page(content, PageRequest::new(1, 2000).unwrap()).unwrap();
    assert_eq!(page.bytes, b"cdefgh\nij\n");
}

#[test]
fn a_line_longer_than_max_bytes_is_recoverable_by_pages_and_byte_ranges() {
    let mut content = vec![b'x'; 200_000];
    content.extend_from_slice(b"\nend\n");
    let out = run(
        OutputDeclaration::Single,
        PreviewLimits::default(),
        vec![chunk(0, &content)],
    );
    let p = &out.record.streams()[0].preview;
    assert_eq!((p.raw_bytes, p.newlines), (51_200, 0));
    let mut read = Vec::new();
    let mut offset = 0;
    while let Ok(page) = extract_bytes(&content, ByteRange::new(offset, 65_536).unwrap()) {
        read.extend_from_slice(&page.bytes);
        match page.next_byte_offset {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(read, content);
}

#[test]
fn the_tail_view_shows_the_exact_last_lines() {
    let limits = PreviewLimits {
        max_lines: 2,
        tail_lines: 2,
        ..Default::default()
    };
    let out = run(
        OutputDeclaration::Single,
        limits,
        vec![chunk(0, &lines(10)), chunk(0, b"error: boom")],
    );
    assert!(
        out.rendered.ends_with(
            "[Lines 3-9 not shown in full; the last 2 lines follow]\nline 9\nerror: boom"
        ),
        "{}",
        out.rendered
    );
}

#[test]
fn incomplete_runs_say_so_and_keep_their_output() {
    for status in [CaptureStatus::Failed, CaptureStatus::Cancelled] {
        let out = check_preview(&PreviewCase {
            declaration: OutputDeclaration::Single,
            limits: PreviewLimits::default(),
            deltas: vec![chunk(0, b"partial")],
            status,
            page_limits: vec![],
        });
        assert_eq!(
            out.rendered,
            format!("[Incomplete output: the run {}]\npartial", status.as_str())
        );
    }
}
