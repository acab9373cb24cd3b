//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use agentrun_core::{
    ArtifactUri, CaptureCompletion, CaptureStatus, Digest, OutputChannel, OutputDeclaration,
    PageRequest, PreviewLimits, ResultRecord, StreamName,
};
use agentrun_fs::{ReadError, Store};
use tempfile::TempDir;

pub fn store() -> (TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store")).unwrap();
    (tmp, store)
}

pub fn done() -> CaptureCompletion {
    CaptureCompletion::Streamed {
        display: None,
        status: CaptureStatus::Succeeded,
    }
}

/// Captures `content` as single output, fed in chunks of `chunk` bytes.
pub fn capture_single(store: &Store, content: &[u8], chunk: usize) -> ResultRecord {
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    for c in content.chunks(chunk.max(1)) {
        s.write_channel(&OutputChannel::Single, c).unwrap();
    }
    s.finish(done()).unwrap()
}

/// Captures named streams (declared in the given order), each written in one chunk.
pub fn capture_named(store: &Store, streams: &[(&str, &[u8])]) -> ResultRecord {
    let names: Vec<&str> = streams.iter().map(|(n, _)| *n).collect();
    let decl = OutputDeclaration::named(&names).unwrap();
    let mut s = store.begin_capture(decl, PreviewLimits::default()).unwrap();
    for (name, bytes) in streams {
        s.write_channel(&named(name), bytes).unwrap();
    }
    s.finish(done()).unwrap()
}

pub fn named(name: &str) -> OutputChannel {
    OutputChannel::Named(StreamName::new(name).unwrap())
}

pub fn uri(digest: Digest) -> ArtifactUri {
    ArtifactUri::new(digest)
}

/// Follows `next_offset` from line 0 and concatenates the pages.
pub fn read_all_pages(store: &Store, uri: &ArtifactUri, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let page = store.read_page(uri, PageRequest::new(offset, limit).unwrap())?;
        out.extend_from_slice(&page.bytes);
        match page.next_offset {
            Some(n) => offset = n,
            None => return Ok(out),
        }
    }
}

pub fn object_path(store: &Store, digest: &Digest) -> PathBuf {
    let hex = digest.to_hex();
    store.root().join("objects").join(&hex[..2]).join(&hex[2..])
}

pub fn index_path(store: &Store, digest: &Digest) -> PathBuf {
    let mut p = object_path(store, digest).into_os_string();
    p.push(".idx");
    p.into()
}

/// Lines `line <i> …` of varying length, `n` of them.
pub fn lines(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("line {i} {}\n", "x".repeat(i % 97)).into_bytes())
        .collect()
}

/// XORs the byte at `at` of the file at `path` with `mask`: a corruption in place.
pub fn flip(path: &Path, at: u64, mask: u8) {
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, at).unwrap();
}
