//! Reads: distinct errors, corruption detection, offsets independent of cost, long lines.

mod common;

use std::fs;

use agentrun_core::page::{MAX_PAGE_BYTES, extract_bytes, extract_page};
use agentrun_core::record::RecordOutput;
use agentrun_core::{ArtifactUri, ByteRange, Digest, PageError, PageRequest, StreamName};
use agentrun_fs::ReadError;
use common::*;

#[test]
fn missing_and_non_manifest_and_unknown_stream_are_distinct_errors() {
    let (_tmp, store) = store();
    let absent = Digest::of(b"never stored");
    let err = store
        .read_page(&uri(absent), PageRequest::default())
        .unwrap_err();
    assert!(
        matches!(err, ReadError::Missing(d) if d == absent),
        "{err:?}"
    );
    assert!(matches!(
        store.manifest(&absent),
        Err(ReadError::Missing(_))
    ));

    let single = capture_single(&store, b"plain\n", 100);
    let d = Digest::of(b"plain\n");
    let stream_uri = ArtifactUri::stream(d, StreamName::new("stdout").unwrap());
    let err = store
        .read_page(&stream_uri, PageRequest::default())
        .unwrap_err();
    assert!(
        matches!(err, ReadError::NotAManifest(x) if x == d),
        "{err:?}"
    );
    assert!(err.to_string().contains("not a manifest"));
    drop(single);

    let named = capture_named(&store, &[("stdout", b"o\n"), ("stderr", b"e\n")]);
    let RecordOutput::Named { manifest, .. } = named.output else {
        panic!()
    };
    let u = ArtifactUri::stream(manifest, StreamName::new("results").unwrap());
    let err = store.read_page(&u, PageRequest::default()).unwrap_err();
    match &err {
        ReadError::UnknownStream { stream, declared } => {
            assert_eq!(stream, "results");
            assert_eq!(declared, &["stdout", "stderr"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("declared: stdout, stderr"),
        "{err}"
    );

    let err = store
        .read_page(&uri(d), PageRequest::new(5, 1).unwrap())
        .unwrap_err();
    assert!(
        matches!(err, ReadError::Page(PageError::OffsetPastEnd { .. })),
        "{err:?}"
    );
    let err = store
        .read_bytes(&uri(d), ByteRange::new(7, 1).unwrap())
        .unwrap_err();
    assert!(
        matches!(err, ReadError::Page(PageError::ByteOffsetPastEnd { .. })),
        "{err:?}"
    );
}

#[test]
fn a_missing_truncated_or_foreign_index_is_corrupt_index() {
    let (_tmp, store) = store();
    capture_single(&store, b"a\nb\n", 100);
    capture_single(&store, b"other\n", 100);
    let d = Digest::of(b"a\nb\n");
    let idx = index_path(&store, &d);
    let saved = fs::read(&idx).unwrap();

    fs::remove_file(&idx).unwrap();
    let err = store
        .read_page(&uri(d), PageRequest::default())
        .unwrap_err();
    assert!(matches!(err, ReadError::CorruptIndex { .. }), "{err:?}");
    assert!(err.to_string().contains("missing"), "{err}");

    fs::write(&idx, &saved[..40]).unwrap();
    assert!(matches!(
        store.read_page(&uri(d), PageRequest::default()),
        Err(ReadError::CorruptIndex { .. })
    ));

    fs::write(
        &idx,
        fs::read(index_path(&store, &Digest::of(b"other\n"))).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        store.read_page(&uri(d), PageRequest::default()),
        Err(ReadError::CorruptIndex { .. })
    ));

    // A truncated object no longer matches its intact index: the object is what is corrupt.
    fs::write(&idx, &saved).unwrap();
    fs::write(object_path(&store, &d), b"a\n").unwrap();
    let err = store
        .read_bytes(&uri(d), ByteRange::new(0, 1).unwrap())
        .unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("truncated"), "{err}");

    // An object replaced by a directory is a corrupt artifact, not data.
    let p = object_path(&store, &d);
    fs::remove_file(&p).unwrap();
    fs::create_dir(&p).unwrap();
    let err = store
        .read_page(&uri(d), PageRequest::default())
        .unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("is a directory"), "{err}");
}

#[test]
fn a_flipped_object_byte_is_never_returned() {
    let (_tmp, store) = store();
    let content = b"alpha\nbeta\ngamma\ndelta\n".to_vec();
    capture_single(&store, &content, 3);
    let d = Digest::of(&content);
    let path = object_path(&store, &d);
    for at in 0..content.len() as u64 {
        flip(&path, at, 0x01);
        for offset in 0..=4 {
            for limit in [1, 2, 2000] {
                let r = store.read_page(&uri(d), PageRequest::new(offset, limit).unwrap());
                assert!(
                    matches!(r, Err(ReadError::Corrupt { .. })),
                    "flip {at} page {offset}/{limit}: {r:?}"
                );
            }
        }
        let r = store.read_bytes(&uri(d), ByteRange::new(at, 1).unwrap());
        assert!(matches!(r, Err(ReadError::Corrupt { .. })), "{r:?}");
        assert!(store.copy_to(&uri(d), &mut Vec::new()).is_err());
        flip(&path, at, 0x01);
    }
    assert_eq!(read_all_pages(&store, &uri(d), 1).unwrap(), content);
}

#[test]
fn a_flipped_byte_in_a_large_object_fails_exactly_the_reads_that_cover_it() {
    let (_tmp, store) = store();
    let content = lines(30_000);
    capture_single(&store, &content, 65_536);
    let d = Digest::of(&content);
    let path = object_path(&store, &d);
    let at = 200_000u64; // inside block 3
    flip(&path, at, 0x01);
    let mut offset = 0;
    let mut failed = 0;
    loop {
        let req = PageRequest::new(offset, 500).unwrap();
        let want = extract_page(&content, req).unwrap();
        match store.read_page(&uri(d), req) {
            Ok(page) => assert_eq!(page, want),
            Err(ReadError::Corrupt { .. }) => failed += 1,
            Err(e) => panic!("{e:?}"),
        }
        match want.next_offset {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert!(failed >= 1);
    // Every byte range covering the flipped byte fails; others are exact.
    for start in (0..content.len() as u64).step_by(4099) {
        let range = ByteRange::new(start, 10_000).unwrap();
        match store.read_bytes(&uri(d), range) {
            Ok(page) => {
                assert!(!(start..start + 10_000).contains(&at));
                assert_eq!(page, extract_bytes(&content, range).unwrap());
            }
            Err(ReadError::Corrupt { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let r = store.read_bytes(&uri(d), ByteRange::new(at, 1).unwrap());
    assert!(matches!(r, Err(ReadError::Corrupt { .. })));
}

#[test]
fn a_flipped_index_byte_is_never_wrong_data() {
    let (_tmp, store) = store();
    let content = b"one\ntwo\nthree\n".to_vec();
    capture_single(&store, &content, 5);
    let d = Digest::of(&content);
    let idx = index_path(&store, &d);
    let len = fs::metadata(&idx).unwrap().len();
    for at in 0..len {
        flip(&idx, at, 0x01);
        for offset in 0..=3 {
            let r = store.read_page(&uri(d), PageRequest::new(offset, 2).unwrap());
            assert!(
                matches!(
                    r,
                    Err(ReadError::CorruptIndex { .. } | ReadError::Corrupt { .. })
                ),
                "flip {at} offset {offset}: {r:?}"
            );
        }
        let r = store.read_bytes(&uri(d), ByteRange::new(0, 100).unwrap());
        assert!(matches!(
            r,
            Err(ReadError::CorruptIndex { .. } | ReadError::Corrupt { .. })
        ));
        flip(&idx, at, 0x01);
    }
}

#[test]
fn a_corrupt_manifest_is_reported_not_followed() {
    let (_tmp, store) = store();
    let named = capture_named(&store, &[("stdout", b"o\n")]);
    let RecordOutput::Named { manifest, .. } = named.output else {
        panic!()
    };
    flip(&object_path(&store, &manifest), 20, 0x01);
    let u = ArtifactUri::stream(manifest, StreamName::new("stdout").unwrap());
    let err = store.read_page(&u, PageRequest::default()).unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { .. }), "{err:?}");
}

#[test]
fn a_line_longer_than_a_page_is_readable_by_byte_ranges() {
    let (_tmp, store) = store();
    let mut content = b"short\n".to_vec();
    content.extend(std::iter::repeat_n(b'y', MAX_PAGE_BYTES + 100));
    content.extend_from_slice(b"\ntail\n");
    capture_single(&store, &content, 1 << 20);
    let d = Digest::of(&content);
    let err = store
        .read_page(&uri(d), PageRequest::new(1, 1).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::Page(PageError::PageTooLarge {
                lines: 0,
                line_start_byte: 6,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("byte offset 6"), "{err}");
    let page = store
        .read_page(&uri(d), PageRequest::new(2, 1).unwrap())
        .unwrap();
    assert_eq!(page.bytes, b"tail\n");
    let mut rebuilt = Vec::new();
    let mut offset = 0;
    loop {
        let p = store
            .read_bytes(
                &uri(d),
                ByteRange::new(offset, MAX_PAGE_BYTES as u64).unwrap(),
            )
            .unwrap();
        rebuilt.extend_from_slice(&p.bytes);
        match p.next_byte_offset {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert_eq!(rebuilt, content);
}

#[test]
fn empty_artifacts_read_as_empty_pages() {
    let (_tmp, store) = store();
    let record = capture_single(&store, b"", 1);
    let page = store
        .read_page(&record.output_uri(), PageRequest::default())
        .unwrap();
    assert_eq!(
        (page.bytes.len(), page.total_lines, page.next_offset),
        (0, 0, None)
    );
    let bytes = store
        .read_bytes(&record.output_uri(), ByteRange::new(0, 10).unwrap())
        .unwrap();
    assert!(bytes.bytes.is_empty());
}
