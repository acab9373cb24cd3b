//! Reads: line pages, byte ranges and whole artifacts, every returned byte verified.
//!
//! A read opens the object and its index sidecar, checks the index header against the object
//! (digest = name, length = file length), finds the first block it needs by binary search over
//! index entries (`O(log blocks)` 16-byte reads, whatever the offset) and reads whole blocks,
//! each checked against its entry's CRC-32 before any of its bytes is used. Corrupt data is
//! reported, never returned.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use agentrun_core::digest::StreamingDigest;
use agentrun_core::index::{
    self, BLOCK_SIZE, ENTRY_LEN, HEADER_LEN, IndexEntry, IndexHeader, after_nth_newline,
    block_of_newline, entry_offset,
};
use agentrun_core::page::{CursorState, PageCursor};
use agentrun_core::{
    ArtifactUri, BytePage, ByteRange, Continuation, Digest, Manifest, Page, PageError, PageRequest,
};

use crate::error::{IoContext, IoError};
use crate::layout::Layout;
use crate::special::{Links, OpenError, open_regular};
use crate::store::Store;

/// Largest object considered as a manifest. Manifests of at most 8 streams are well under
/// 2 KiB; the cap keeps a stream-segment read from loading a large artifact into memory.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// Blocks fetched per request when a remote object is streamed whole (4 MiB).
const COPY_WINDOW_BLOCKS: u64 = 64;

/// Where an object's bytes are read from. The index is always a local file (a remote
/// object's sidecar is immutable and cached locally by digest).
#[derive(Debug)]
pub(crate) enum Data {
    /// A file of the local store.
    File {
        /// The object file.
        file: File,
        /// Its path, for errors.
        path: PathBuf,
    },
    /// An object in a bucket, read by range requests.
    Remote(crate::remote::RemoteBlob),
}

/// Why a read failed. Each variant is a distinct situation with its own remedy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// No object with this digest is in the store.
    #[error(
        "artifact {0} is not in this store (it was never stored here or has been \
         garbage-collected); check the URI and which store is read"
    )]
    Missing(Digest),
    /// The object's bytes do not match its checksums.
    #[error(
        "artifact {digest} is corrupt: {detail}; its bytes are not returned (`agentrun verify` \
         lists every damaged object)"
    )]
    Corrupt {
        /// The object.
        digest: Digest,
        /// What does not match.
        detail: String,
    },
    /// The object's line index is missing or damaged, so the object cannot be read safely.
    #[error(
        "the line index of artifact {digest} is missing or corrupt: {detail}; the artifact \
         cannot be read safely (`agentrun verify` lists every damaged object)"
    )]
    CorruptIndex {
        /// The object.
        digest: Digest,
        /// What is wrong.
        detail: String,
    },
    /// A stream segment on an artifact that is not a manifest.
    #[error(
        "artifact {0} is not a manifest of named streams, so it has no stream segment; read \
         artifact://{0} without one"
    )]
    NotAManifest(Digest),
    /// The manifest declares no such stream.
    #[error("the manifest declares no stream \"{stream}\" (declared: {})", .declared.join(", "))]
    UnknownStream {
        /// The requested stream.
        stream: String,
        /// The declared streams, in order.
        declared: Vec<String>,
    },
    /// The request cannot be served (offset past the end, page over the size bound, …).
    #[error(transparent)]
    Page(#[from] PageError),
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A request to the object store failed (boxed: it is large, and rare).
    #[error(transparent)]
    Remote(Box<crate::remote::RemoteError>),
}

impl From<crate::remote::RemoteError> for ReadError {
    fn from(e: crate::remote::RemoteError) -> Self {
        ReadError::Remote(Box::new(e))
    }
}

impl Store {
    /// One page of whole lines of the artifact `uri` names.
    ///
    /// Costs `O(log n)` index entries plus the blocks covering the page, whatever the offset.
    pub fn read_page(&self, uri: &ArtifactUri, request: PageRequest) -> Result<Page, ReadError> {
        let object = self.open_object(&self.resolve(uri)?)?;
        object.page(request)
    }

    /// A byte range of the artifact `uri` names (for lines longer than a page).
    pub fn read_bytes(&self, uri: &ArtifactUri, range: ByteRange) -> Result<BytePage, ReadError> {
        let object = self.open_object(&self.resolve(uri)?)?;
        object.bytes(range)
    }

    /// Streams the whole artifact `uri` names to `out`, block by block, each block verified
    /// before it is written. Returns the bytes written. After the last block the SHA-256 of
    /// everything written is compared with the name too; a mismatch is reported as
    /// [`ReadError::Corrupt`] (the caller must then discard the output).
    pub fn copy_to(&self, uri: &ArtifactUri, out: &mut dyn io::Write) -> Result<u64, ReadError> {
        let object = self.open_object(&self.resolve(uri)?)?;
        let mut hasher = StreamingDigest::default();
        let mut buf = Vec::new();
        for block in 0..object.header.block_count() {
            // A remote object is fetched a window of blocks per request; memory stays bounded
            // by the window.
            if block % COPY_WINDOW_BLOCKS == 0 {
                object.prefetch(block, block + COPY_WINDOW_BLOCKS - 1);
            }
            object.block(block, &mut buf)?;
            hasher.update(&buf);
            out.write_all(&buf)
                .map_err(|e| IoError::bare("write the artifact to the output", e))?;
        }
        out.flush()
            .map_err(|e| IoError::bare("write the artifact to the output", e))?;
        if hasher.finish() != object.digest {
            return Err(object.corrupt("its content does not hash to its name".to_owned()));
        }
        Ok(object.header.total_bytes)
    }

    /// The manifest stored under `digest`, or `None` if that object is not a manifest.
    pub fn manifest(&self, digest: &Digest) -> Result<Option<Manifest>, ReadError> {
        let object = self.open_object(digest)?;
        if object.header.total_bytes > MAX_MANIFEST_BYTES {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(object.header.total_bytes as usize);
        let mut buf = Vec::new();
        for block in 0..object.header.block_count() {
            object.block(block, &mut buf)?;
            bytes.extend_from_slice(&buf);
        }
        // Small enough to check in full: what decides where stream reads go must be exact.
        if Digest::of(&bytes) != *digest {
            return Err(object.corrupt("its content does not hash to its name".to_owned()));
        }
        Ok(Manifest::parse(&bytes).ok())
    }

    /// Whether the object `digest` is present and its index describes it (the checks every
    /// read starts with): in the local root (of a shared store: its spool, whose objects the
    /// publication of a record uploads) or in the bucket.
    pub(crate) fn readable(&self, digest: &Digest) -> bool {
        Object::open(&self.layout, digest).is_ok()
            || self.remote.as_ref().is_some_and(|r| r.holds(digest))
    }

    /// Whether only the bucket of a shared store holds `digest` (not the local spool).
    pub(crate) fn only_in_bucket(&self, digest: &Digest) -> bool {
        self.remote.is_some() && Object::open(&self.layout, digest).is_err()
    }

    /// Opens `digest` where this store keeps its objects: the local root, or the bucket (by
    /// range reads, with the index sidecar cached locally). Every read below is written once
    /// against [`Object`], whichever holds the bytes.
    pub(crate) fn open_object(&self, digest: &Digest) -> Result<Object, ReadError> {
        self.with_backend(|backend| backend.open_object(digest))
    }

    /// The digest of the object a URI reads: itself, or the selected stream of a manifest.
    pub(crate) fn resolve(&self, uri: &ArtifactUri) -> Result<Digest, ReadError> {
        let Some(stream) = &uri.stream else {
            return Ok(uri.digest);
        };
        let manifest = self
            .manifest(&uri.digest)?
            .ok_or(ReadError::NotAManifest(uri.digest))?;
        match manifest.stream(stream) {
            Some(entry) => Ok(entry.sha256),
            None => Err(ReadError::UnknownStream {
                stream: stream.to_string(),
                declared: manifest.names().iter().map(ToString::to_string).collect(),
            }),
        }
    }
}

/// An open object with its checked index header.
#[derive(Debug)]
pub(crate) struct Object {
    digest: Digest,
    data: Data,
    index_path: PathBuf,
    index: File,
    pub(crate) header: IndexHeader,
    /// Index entries and blocks read so far, for the cost tests.
    #[cfg(test)]
    reads: std::cell::Cell<(u64, u64)>,
}

impl Object {
    /// Opens `digest`'s object and index and checks that the index describes the object.
    pub(crate) fn open(layout: &Layout, digest: &Digest) -> Result<Self, ReadError> {
        let path = layout.object(digest);
        let corrupt = |detail: String| ReadError::Corrupt {
            digest: *digest,
            detail,
        };
        // Never waiting on a FIFO or a device someone put in the store: refused by type.
        let (file, meta) = match open_regular(&path, Links::Refuse) {
            Ok(opened) => opened,
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ReadError::Missing(*digest));
            }
            Err(OpenError::NotRegular("a symbolic link")) => {
                return Err(corrupt(format!(
                    "{} is a symbolic link, not the store's own file",
                    path.display()
                )));
            }
            Err(OpenError::NotRegular(what)) => {
                return Err(corrupt(format!(
                    "{} is {what}, not a regular file",
                    path.display()
                )));
            }
            Err(OpenError::Io(e)) => return Err(IoError::at("open", &path, e).into()),
        };
        let index_path = layout.index(digest);
        let bad_index = |detail: String| ReadError::CorruptIndex {
            digest: *digest,
            detail,
        };
        let (index, index_meta) = match open_regular(&index_path, Links::Refuse) {
            Ok(opened) => opened,
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Err(bad_index("the index file is missing".to_owned()));
            }
            Err(OpenError::NotRegular("a symbolic link")) => {
                return Err(bad_index("the index is a symbolic link".to_owned()));
            }
            Err(OpenError::NotRegular(what)) => {
                return Err(bad_index(format!(
                    "the index is {what}, not a regular file"
                )));
            }
            Err(OpenError::Io(e)) => return Err(IoError::at("open", &index_path, e).into()),
        };
        let mut raw = [0u8; HEADER_LEN];
        match index.read_exact_at(&mut raw, 0) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(bad_index("the index file is truncated".to_owned()));
            }
            Err(e) => return Err(IoError::at("read", &index_path, e).into()),
        }
        let header = IndexHeader::decode(&raw).map_err(|e| bad_index(e.to_string()))?;
        if header.digest != *digest {
            return Err(bad_index(format!(
                "it describes artifact {}",
                header.digest
            )));
        }
        if header.total_bytes != meta.len() {
            // The header passed its own checksum and names this object: the index is sound,
            // so it is the object whose length changed (truncated, or appended to).
            return Err(corrupt(format!(
                "the object has {} bytes but its index records {}; the object was {}",
                meta.len(),
                header.total_bytes,
                if meta.len() < header.total_bytes {
                    "truncated"
                } else {
                    "appended to"
                }
            )));
        }
        if header.block_size != BLOCK_SIZE {
            return Err(bad_index(format!(
                "unexpected block size {}",
                header.block_size
            )));
        }
        let index_len = index_meta.len();
        let expected = HEADER_LEN as u64 + header.block_count() * ENTRY_LEN as u64;
        if index_len != expected {
            return Err(bad_index(format!(
                "it has {index_len} bytes, expected {expected}"
            )));
        }
        Ok(Self {
            digest: *digest,
            data: Data::File { file, path },
            index_path,
            index,
            header,
            #[cfg(test)]
            reads: std::cell::Cell::new((0, 0)),
        })
    }

    /// An object whose bytes are in a bucket; `index` is its cached sidecar, already checked
    /// against `digest` by [`check_index`].
    pub(crate) fn remote(
        digest: Digest,
        blob: crate::remote::RemoteBlob,
        index_path: PathBuf,
        index: File,
        header: IndexHeader,
    ) -> Self {
        Self {
            digest,
            data: Data::Remote(blob),
            index_path,
            index,
            header,
            #[cfg(test)]
            reads: std::cell::Cell::new((0, 0)),
        }
    }

    /// Tells a remote object that blocks `first..=last` (clamped to the object) are about to
    /// be read, so it fetches them with one range request. Local objects read in place.
    pub(crate) fn prefetch(&self, first: u64, last: u64) {
        if let Data::Remote(blob) = &self.data {
            let count = self.header.block_count();
            if first < count {
                blob.want(&self.header, first, last.min(count - 1));
            }
        }
    }

    /// The range requests made so far (remote objects; 0 for local ones).
    #[cfg(test)]
    pub(crate) fn requests(&self) -> u64 {
        match &self.data {
            Data::Remote(blob) => blob.requests(),
            Data::File { .. } => 0,
        }
    }

    fn corrupt(&self, detail: String) -> ReadError {
        ReadError::Corrupt {
            digest: self.digest,
            detail,
        }
    }

    /// The checked index entry of `block`.
    pub(crate) fn entry(&self, block: u64) -> Result<IndexEntry, ReadError> {
        #[cfg(test)]
        self.reads.set((self.reads.get().0 + 1, self.reads.get().1));
        let mut raw = [0u8; ENTRY_LEN];
        self.index
            .read_exact_at(&mut raw, entry_offset(block))
            .at("read", &self.index_path)?;
        IndexEntry::decode(block, &raw).map_err(|e| ReadError::CorruptIndex {
            digest: self.digest,
            detail: e.to_string(),
        })
    }

    /// Reads `block` into `buf` and checks it against its entry's CRC; returns the entry.
    pub(crate) fn block(&self, block: u64, buf: &mut Vec<u8>) -> Result<IndexEntry, ReadError> {
        let entry = self.entry(block)?;
        #[cfg(test)]
        self.reads.set((self.reads.get().0, self.reads.get().1 + 1));
        let (start, end) = self.header.block_range(block);
        buf.resize((end - start) as usize, 0);
        let complete = match &self.data {
            Data::File { file, path } => match file.read_exact_at(buf, start) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => false,
                Err(e) => return Err(IoError::at("read", path, e).into()),
            },
            Data::Remote(blob) => blob.read_exact_at(&self.header, buf, start)?,
        };
        if !complete {
            return Err(self.corrupt(format!("the object ends inside block {block}")));
        }
        if index::block_crc(buf) != entry.crc {
            return Err(self.corrupt(format!(
                "bytes {start}..{end} (block {block}) do not match their checksum"
            )));
        }
        Ok(entry)
    }

    /// A line page, for the tests that count an object's requests.
    #[cfg(test)]
    pub(crate) fn page_for_tests(&self, request: PageRequest) -> Result<Page, ReadError> {
        self.page(request)
    }

    /// A line page; see [`Store::read_page`].
    fn page(&self, request: PageRequest) -> Result<Page, ReadError> {
        let header = &self.header;
        let total_lines = header.total_lines();
        if request.offset > total_lines {
            return Err(PageError::OffsetPastEnd {
                offset: request.offset,
                total_lines,
            }
            .into());
        }
        let mut buf = Vec::new();
        if matches!(self.data, Data::Remote(_)) {
            // One range request for the whole page: its first and last block come from the
            // (local) index, and a page is at most MAX_PAGE_BYTES.
            let first = block_of_newline(header, request.offset, |b| self.entry(b))?.unwrap_or(0);
            let end_line = request.offset + u64::from(request.limit);
            let last = block_of_newline(header, end_line, |b| self.entry(b))?
                .unwrap_or(header.block_count().saturating_sub(1));
            let span = agentrun_core::page::MAX_PAGE_BYTES as u64 / u64::from(header.block_size);
            self.prefetch(first, last.min(first + span + 1));
        }
        let (first_block, mut skip, mut loaded) = self.find_line(request.offset, &mut buf)?;
        let start_byte =
            (first_block * u64::from(header.block_size) + skip as u64).min(header.total_bytes);
        let mut cursor = PageCursor::new(request, total_lines, start_byte)?;
        // The block `buf` holds after the loop, if any.
        let mut held = loaded.then_some(first_block);
        for block in first_block..header.block_count() {
            if !loaded {
                self.block(block, &mut buf)?;
            }
            held = Some(block);
            loaded = false;
            let state = cursor.handle_bytes(&buf[skip..])?;
            skip = 0;
            if state == CursorState::Complete {
                break;
            }
        }
        let mut page = cursor.finish();
        if let Some(next) = page.next_offset {
            let start = start_byte + page.bytes.len() as u64;
            let end = self.line_end(next, start, held.map(|b| (b, buf.as_slice())))?;
            page.continuation = Continuation::at_line(next, start, end, start);
        }
        Ok(page)
    }

    /// Where line `line`, which starts at byte `start`, ends (or a bound past its end that
    /// decides whether it fits a page): the end of the artifact when that is within a page,
    /// else its newline in `held` (a block already read) when there, else from the index.
    /// A line longer than a page is continued by bytes, since a line read of it is refused.
    fn line_end(
        &self,
        line: u64,
        start: u64,
        held: Option<(u64, &[u8])>,
    ) -> Result<u64, ReadError> {
        let header = &self.header;
        if header.total_bytes - start <= agentrun_core::page::MAX_PAGE_BYTES as u64
            || line + 1 >= header.total_lines()
        {
            return Ok(header.total_bytes);
        }
        let block_size = u64::from(header.block_size);
        if let Some((block, bytes)) = held {
            let from = start.saturating_sub(block * block_size) as usize;
            if start >= block * block_size
                && from <= bytes.len()
                && let Some(i) = bytes[from..].iter().position(|&b| b == b'\n')
            {
                return Ok(block * block_size + (from + i + 1) as u64);
            }
        }
        let mut buf = Vec::new();
        let (block, skip, _) = self.find_line(line + 1, &mut buf)?;
        Ok(block * block_size + skip as u64)
    }

    /// Where line `line` (at most the line count) starts: `(block, offset in the block,
    /// whether `buf` holds that block)`. Line 0 starts at byte 0; the line after the last one
    /// starts at the end.
    fn find_line(&self, line: u64, buf: &mut Vec<u8>) -> Result<(u64, usize, bool), ReadError> {
        // Just after the line-th newline.
        match block_of_newline(&self.header, line, |b| self.entry(b))? {
            Some(block) => {
                let entry = self.block(block, buf)?;
                let k = line - entry.newlines_before;
                let skip = after_nth_newline(buf, k).ok_or_else(|| ReadError::CorruptIndex {
                    digest: self.digest,
                    detail: format!("block {block} has fewer newlines than its entry claims"),
                })?;
                Ok((block, skip, true))
            }
            None if line == 0 => Ok((0, 0, false)),
            None => Ok((self.header.block_count(), 0, false)),
        }
    }

    /// A byte range; see [`Store::read_bytes`].
    fn bytes(&self, range: ByteRange) -> Result<BytePage, ReadError> {
        let (start, end) = range.clip(self.header.total_bytes)?;
        let block_size = u64::from(self.header.block_size);
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut buf = Vec::new();
        let mut block = start / block_size;
        self.prefetch(block, end.saturating_sub(1) / block_size);
        while block * block_size < end {
            self.block(block, &mut buf)?;
            let (block_start, block_end) = self.header.block_range(block);
            let from = (start.max(block_start) - block_start) as usize;
            let to = (end.min(block_end) - block_start) as usize;
            out.extend_from_slice(&buf[from..to]);
            block += 1;
        }
        Ok(BytePage::new(start, self.header.total_bytes, out))
    }
}

/// Opens a store file for reading without following a final symlink: the store's files are
/// its own, never links to elsewhere.
/// `O_NONBLOCK`: a FIFO put in place of a store file opens at once instead of waiting for a
/// writer (the callers then refuse it by type; on a regular file the flag changes nothing).
pub(crate) fn open_no_follow(path: &std::path::Path) -> io::Result<File> {
    use rustix::fs::OFlags;
    File::options()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)
}

/// Reads a small object whole, without its index (GC and verify use this to recognise
/// manifests even when an index is damaged). `None` when the object is larger than
/// [`MAX_MANIFEST_BYTES`].
pub(crate) fn read_small(path: &std::path::Path) -> Result<Option<Vec<u8>>, IoError> {
    let (file, _) = open_regular(path, Links::Refuse)
        .map_err(|e| IoError::at("open", path, crate::special::into_io(e)))?;
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .at("read", path)?;
    Ok((bytes.len() as u64 <= MAX_MANIFEST_BYTES).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use agentrun_core::{
        CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits,
    };

    use super::*;

    #[test]
    fn page_cost_does_not_grow_with_the_offset() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let mut s = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let line = [b'z'; 99];
        let mut content = Vec::new();
        for _ in 0..80_000 {
            content.extend_from_slice(&line);
            content.push(b'\n');
        }
        s.write_channel(&OutputChannel::Single, &content).unwrap();
        s.finish(CaptureCompletion::Streamed {
            display: None,
            status: CaptureStatus::Succeeded,
        })
        .unwrap();
        let object = Object::open(&store.layout, &Digest::of(&content)).unwrap();
        let blocks = object.header.block_count(); // 123 blocks of 64 KiB
        assert!(blocks > 100);
        let log = u64::from(64 - blocks.leading_zeros());
        for offset in [0u64, 1, 40_000, 79_990] {
            object.reads.set((0, 0));
            let page = object.page(PageRequest::new(offset, 10).unwrap()).unwrap();
            assert_eq!(page.lines, 10.min(80_000 - offset));
            let (entries, read_blocks) = object.reads.get();
            // Binary search + the entries of the blocks read; one or two blocks for 1000 bytes.
            assert!(
                entries <= log + 2 + read_blocks,
                "offset {offset}: {entries} entries"
            );
            assert!(read_blocks <= 2, "offset {offset}: {read_blocks} blocks");
        }
        object.reads.set((0, 0));
        let range = ByteRange::new(5_000_000, 100).unwrap();
        assert_eq!(object.bytes(range).unwrap().bytes.len(), 100);
        assert_eq!(object.reads.get(), (1, 1));
    }
}
