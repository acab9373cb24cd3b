use super::*;

fn named(names: &[&str]) -> OutputDeclaration {
    OutputDeclaration::named(names).unwrap()
}

fn ch(name: &str) -> OutputChannel {
    OutputChannel::Named(StreamName::new(name).unwrap())
}

fn feed(c: &mut Capture, channel: &OutputChannel, bytes: &[u8]) -> Result<(), CaptureError> {
    if let Some(ix) = c.resolve(channel)? {
        c.handle_chunk(ix, bytes);
    }
    Ok(())
}

#[test]
fn interleaved_deltas_stay_in_their_streams_and_display_stays_out() {
    let mut c = Capture::new(named(&["results", "diagnostics"]), PreviewLimits::default()).unwrap();
    feed(&mut c, &ch("results"), b"r1\n").unwrap();
    c.handle_display("working…");
    feed(&mut c, &ch("diagnostics"), b"d1\n").unwrap();
    feed(&mut c, &ch("results"), b"r2\n").unwrap();
    assert!(matches!(
        feed(&mut c, &ch("stdout"), b"x"),
        Err(CaptureError::OutputChannel(_))
    ));
    assert!(matches!(
        feed(&mut c, &OutputChannel::Single, b"x"),
        Err(CaptureError::OutputChannel(_))
    ));
    let s = c.finish(None, CaptureStatus::Succeeded);
    assert_eq!(s.streams[0].head, b"r1\nr2\n");
    assert_eq!(s.streams[1].head, b"d1\n");
    assert_eq!(s.streams[0].digest, Digest::of(b"r1\nr2\n"));
    assert_eq!((s.streams[0].bytes, s.streams[0].lines), (6, 2));
    assert_eq!(s.display, "working…");
    assert!(!s.incomplete());
    let m = s.manifest().unwrap();
    assert_eq!(
        m.names().iter().map(StreamName::as_str).collect::<Vec<_>>(),
        ["results", "diagnostics"]
    );
}

#[test]
fn final_display_replaces_the_live_display() {
    let mut c = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    c.handle_display("a");
    c.handle_display("b");
    let s = c.finish(Some("done".into()), CaptureStatus::Succeeded);
    assert_eq!(s.display, "done");
}

#[test]
fn live_display_is_bounded_and_keeps_the_newest_text() {
    let mut d = LiveDisplay::new(8);
    d.push("0123456");
    d.push("é9ab");
    assert!(d.as_str().len() <= 8);
    assert!(d.as_str().ends_with("9ab"));
    assert!(d.dropped());
}

#[test]
fn mixed_mode_is_rejected_and_full_output_is_validated() {
    let mut c = Capture::new(OutputDeclaration::stdout_stderr(), PreviewLimits::default()).unwrap();
    feed(&mut c, &ch("stdout"), b"x").unwrap();
    assert_eq!(
        c.begin_full(FullOutput::Named(vec![])),
        Err(CaptureError::MixedCompletion)
    );
    let mut c = Capture::new(OutputDeclaration::stdout_stderr(), PreviewLimits::default()).unwrap();
    let out = StreamName::new("stdout").unwrap();
    assert_eq!(
        c.begin_full(FullOutput::Named(vec![
            (out.clone(), vec![]),
            (out.clone(), vec![])
        ])),
        Err(CaptureError::DuplicateFullOutput(out.clone()))
    );
    assert!(c.begin_full(FullOutput::Single(vec![])).is_err());
    let feeds = c
        .begin_full(FullOutput::Named(vec![(out, b"all".to_vec())]))
        .unwrap();
    let stdout = c.declaration().indexes().next().unwrap();
    assert_eq!(feeds, vec![(stdout, b"all".to_vec())]);
}

#[test]
fn a_full_output_is_supplied_exactly_once() {
    let mut c = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    assert!(c.begin_full(FullOutput::Single(b"ab".to_vec())).is_ok());
    assert_eq!(
        c.begin_full(FullOutput::Single(b"ab".to_vec())),
        Err(CaptureError::FullSuppliedTwice)
    );
    assert_eq!(
        c.resolve(&OutputChannel::Single),
        Err(CaptureError::FullSuppliedTwice)
    );
}

#[test]
fn a_stream_index_of_another_capture_is_refused_whatever_its_size() {
    let two = Capture::new(OutputDeclaration::stdout_stderr(), PreviewLimits::default()).unwrap();
    let one = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    let stderr = two.resolve(&ch("stderr")).unwrap().unwrap();
    assert_eq!(two.check_stream(stderr), Ok(()));
    assert_eq!(
        one.check_stream(stderr),
        Err(CaptureError::ForeignStream {
            index: 1,
            streams: 1
        })
    );
    let own = one.resolve(&OutputChannel::Single).unwrap().unwrap();
    assert_eq!(one.check_stream(own), Ok(()));
    assert_ne!(own, two.declaration().indexes().next().unwrap());
}

#[test]
fn a_same_size_capture_refuses_the_index_and_records_nothing() {
    // Same declaration, same positions: only the issuer tells the indexes apart.
    let decl = OutputDeclaration::stdout_stderr();
    let a = Capture::new(decl.clone(), PreviewLimits::default()).unwrap();
    let mut b = Capture::new(decl, PreviewLimits::default()).unwrap();
    for foreign in a.declaration().indexes() {
        let err = b.check_stream(foreign).unwrap_err();
        assert_eq!(
            err,
            CaptureError::ForeignStream {
                index: foreign.get(),
                streams: 2
            }
        );
        assert!(
            err.to_string().contains("issued by another capture"),
            "{err}"
        );
    }
    let b_stdout = b.resolve(&ch("stdout")).unwrap().unwrap();
    let a_stdout = a.resolve(&ch("stdout")).unwrap().unwrap();
    assert_eq!(a_stdout.get(), b_stdout.get());
    assert_ne!(a_stdout, b_stdout);
    let wrote = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        b.handle_chunk(a_stdout, b"wrong capture\n");
    }));
    assert!(wrote.is_err(), "a foreign index must not reach a stream");
    let s = b.finish(None, CaptureStatus::Succeeded);
    assert!(
        s.streams
            .iter()
            .all(|st| st.bytes == 0 && st.head.is_empty())
    );
    assert!(s.faults.is_empty());
}

proptest::proptest! {
    /// Whatever the declarations and however many captures, a capture accepts exactly the
    /// indexes it issued, and bytes sent with its own indexes land in their own streams.
    #[test]
    fn a_capture_accepts_only_the_indexes_it_issued(
        sizes in proptest::collection::vec(1usize..=crate::stream::MAX_STREAMS, 2..5),
        writes in proptest::collection::vec((0usize..5, 0usize..8), 0..20),
    ) {
        let mut captures: Vec<Capture> = sizes
            .iter()
            .map(|&n| {
                let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
                Capture::new(named(&names.iter().map(String::as_str).collect::<Vec<_>>()),
                    PreviewLimits::default()).unwrap()
            })
            .collect();
        for (c, capture) in captures.iter().enumerate() {
            for (o, other) in captures.iter().enumerate() {
                for ix in other.declaration().indexes() {
                    let checked = capture.check_stream(ix);
                    if c == o {
                        proptest::prop_assert_eq!(checked, Ok(()));
                    } else {
                        proptest::prop_assert_eq!(checked, Err(CaptureError::ForeignStream {
                            index: ix.get(),
                            streams: sizes[c],
                        }));
                    }
                }
            }
        }
        let mut expected: Vec<Vec<u64>> = sizes.iter().map(|&n| vec![0; n]).collect();
        for (c, stream) in writes {
            let c = c % captures.len();
            let stream = stream % sizes[c];
            let ix = captures[c].resolve(&ch(&format!("s{stream}"))).unwrap().unwrap();
            captures[c].handle_chunk(ix, b"x\n");
            expected[c][stream] += 2;
        }
        for (capture, expected) in captures.into_iter().zip(expected) {
            let s = capture.finish(None, CaptureStatus::Succeeded);
            let got: Vec<u64> = s.streams.iter().map(|st| st.bytes).collect();
            proptest::prop_assert_eq!(got, expected);
        }
    }
}

#[test]
fn faults_past_the_bound_are_counted_and_said_not_dropped() {
    let mut c = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    let out = c.resolve(&OutputChannel::Single).unwrap().unwrap();
    for i in 0..MAX_FAULTS + 5 {
        c.handle_capture_error((i == 0).then_some(out), &format!("fault {i}"));
    }
    let s = c.finish(None, CaptureStatus::Succeeded);
    assert!(s.incomplete());
    assert_eq!(s.faults.len(), MAX_FAULTS + 1);
    assert_eq!(
        s.faults[MAX_FAULTS - 1].message,
        format!("fault {}", MAX_FAULTS - 1)
    );
    assert_eq!(
        s.faults[MAX_FAULTS].message,
        "5 more capture faults happened; only the first 32 are kept"
    );
    // At the bound exactly, nothing is said to be missing.
    let mut c = Capture::new(OutputDeclaration::Single, PreviewLimits::default()).unwrap();
    for _ in 0..MAX_FAULTS {
        c.handle_capture_error(None, "x");
    }
    assert_eq!(
        c.finish(None, CaptureStatus::Failed).faults.len(),
        MAX_FAULTS
    );
}

#[test]
fn a_final_display_is_bounded() {
    let bound = |bytes| {
        Capture::with_display_bound(OutputDeclaration::Single, PreviewLimits::default(), bytes)
            .map(|_| ())
    };
    assert_eq!(bound(MAX_DISPLAY_BYTES), Ok(()));
    assert_eq!(
        bound(MAX_DISPLAY_BYTES + 1),
        Err(LimitsError::DisplayBoundTooLarge(MAX_DISPLAY_BYTES + 1))
    );
    assert_eq!(
        Capture::check_final_display(&"d".repeat(MAX_DISPLAY_BYTES)),
        Ok(())
    );
    assert_eq!(
        Capture::check_final_display(&"d".repeat(MAX_DISPLAY_BYTES + 1)),
        Err(CaptureError::DisplayTooLong {
            bytes: MAX_DISPLAY_BYTES + 1
        })
    );
}

#[test]
fn capture_faults_mark_incomplete_and_stop_the_stream() {
    let mut c = Capture::new(OutputDeclaration::stdout_stderr(), PreviewLimits::default()).unwrap();
    feed(&mut c, &ch("stdout"), b"kept\n").unwrap();
    let mut ixs = c.declaration().indexes();
    let (stdout, stderr) = (ixs.next().unwrap(), ixs.next().unwrap());
    c.handle_capture_error(Some(stdout), "No space left on device");
    assert_eq!(c.resolve(&ch("stdout")), Ok(None));
    assert_eq!(c.resolve(&ch("stderr")), Ok(Some(stderr)));
    let s = c.finish(None, CaptureStatus::Succeeded);
    assert!(s.incomplete());
    assert_eq!(s.faults[0].stream.as_ref().unwrap().as_str(), "stdout");
    assert_eq!(s.streams[0].head, b"kept\n");
}

#[test]
fn head_is_bounded_by_lines_and_bytes() {
    let limits = PreviewLimits {
        max_lines: 2,
        max_bytes: 10,
        ..Default::default()
    };
    let mut c = Capture::new(OutputDeclaration::Single, limits).unwrap();
    for chunk in [&b"a\nb"[..], b"\nc\nd\n"] {
        feed(&mut c, &OutputChannel::Single, chunk).unwrap();
    }
    let s = c.finish(None, CaptureStatus::Succeeded);
    assert_eq!(s.streams[0].head, b"a\nb\n");
    let mut c = Capture::new(OutputDeclaration::Single, limits).unwrap();
    feed(&mut c, &OutputChannel::Single, &[b'x'; 100]).unwrap();
    // max_bytes plus the 3 bytes of UTF-8 lookahead.
    assert_eq!(
        c.finish(None, CaptureStatus::Failed).streams[0].head.len(),
        13
    );
}

#[test]
fn tail_window_tracks_the_end() {
    let limits = PreviewLimits {
        max_bytes: 4,
        tail_lines: 2,
        ..Default::default()
    };
    let mut c = Capture::new(OutputDeclaration::Single, limits).unwrap();
    for chunk in [&b"ab\ncd\n"[..], b"ef\ngh\n", b"ij"] {
        feed(&mut c, &OutputChannel::Single, chunk).unwrap();
    }
    let t = c.finish(None, CaptureStatus::Succeeded).streams[0]
        .tail
        .clone()
        .unwrap();
    // The window holds the tail budget (a quarter of 4) plus one byte.
    assert_eq!(limits.tail_window_bytes(1), 2);
    assert_eq!(t.bytes, b"ij");
    assert_eq!(t.start, 12);
    assert_eq!(t.newlines_before, 4);
}

#[test]
fn the_tail_window_stays_within_twice_its_size_for_any_chunking() {
    let limits = PreviewLimits {
        max_bytes: 4000,
        tail_lines: 10,
        ..Default::default()
    };
    let cap = limits.tail_window_bytes(1);
    assert_eq!(cap, 1001);
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    for chunk in [1usize, 7, 999, 1000, 1001, 1002, 5000, 100_000] {
        let mut c = Capture::new(OutputDeclaration::Single, limits).unwrap();
        let ix = c.resolve(&OutputChannel::Single).unwrap().unwrap();
        for piece in data.chunks(chunk) {
            c.handle_chunk(ix, piece);
            let tail = &c.streams[0].tail.as_ref().unwrap().window;
            assert!(tail.bytes.len() <= 2 * cap, "chunk {chunk}");
            assert!(tail.bytes.capacity() <= 4 * cap + 64, "chunk {chunk}");
        }
        let t = c.finish(None, CaptureStatus::Succeeded).streams[0]
            .tail
            .clone()
            .unwrap();
        assert_eq!(t.bytes, &data[data.len() - cap..], "chunk {chunk}");
        assert_eq!(t.start, (data.len() - cap) as u64);
        let before = &data[..data.len() - cap];
        assert_eq!(
            t.newlines_before,
            before.iter().filter(|&&b| b == b'\n').count() as u64
        );
    }
}
