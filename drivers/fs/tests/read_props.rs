//! Property: store reads equal the core's reference extraction on the same bytes.

mod common;

use agentrun_core::page::{extract_bytes, extract_page};
use agentrun_core::{ByteRange, Digest, PageRequest};
use common::*;
use proptest::prelude::*;

/// Content of up to a few blocks, with lines of widely varying length (including empty lines,
/// `\r` and an optional unterminated last line).
fn content() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((0usize..3000, any::<u8>()), 0..120),
        any::<bool>(),
    )
        .prop_map(|(lines, terminated)| {
            let mut out = Vec::new();
            for (len, fill) in lines {
                let fill = if fill == b'\n' { b'\r' } else { fill };
                out.extend(std::iter::repeat_n(fill, len));
                out.push(b'\n');
            }
            if !terminated {
                out.extend_from_slice(b"end");
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reads_equal_the_reference(
        content in content(),
        chunk in 1usize..100_000,
        requests in prop::collection::vec((0u64..130, 1u64..40, 0u64..400_000, 1u64..100_000), 1..12),
    ) {
        let (_tmp, store) = store();
        capture_single(&store, &content, chunk);
        let u = uri(Digest::of(&content));
        for (offset, limit, byte_offset, byte_limit) in requests {
            let req = PageRequest::new(offset, limit).unwrap();
            let got = store.read_page(&u, req).map_err(|e| e.to_string());
            let want = extract_page(&content, req).map_err(|e| e.to_string());
            prop_assert_eq!(got, want);
            let range = ByteRange::new(byte_offset % (content.len() as u64 + 2), byte_limit).unwrap();
            let got = store.read_bytes(&u, range).map_err(|e| e.to_string());
            let want = extract_bytes(&content, range).map_err(|e| e.to_string());
            prop_assert_eq!(got, want);
        }
    }
}
