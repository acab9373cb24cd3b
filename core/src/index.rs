//! The sparse line/block index written beside every artifact.
//!
//! An artifact is cut into fixed blocks of [`BLOCK_SIZE`] bytes. For each block the index keeps
//! the number of `\n` bytes before it and a CRC-32 of its bytes. That is enough to
//!
//! * find the block holding the start of any line by binary search (`O(log blocks)` entries
//!   read, whatever the offset), and
//! * check every byte a page returns at a cost proportional to the page, without re-hashing
//!   the artifact.
//!
//! The sidecar layout (all integers little-endian):
//!
//! ```text
//! header (80 bytes): magic "AGRIDX01" | block_size u32 | flags u32 | total_bytes u64
//!                    | newlines u64 | block_count u64 | sha256 [32] | reserved u32 | crc32 u32
//! entry  (16 bytes): newlines_before u64 | block_crc32 u32 | entry_crc32 u32
//! ```
//!
//! Every entry carries its own checksum (over its block number and fields), so a reader that
//! touches a few entries detects their corruption without reading the rest.

use std::collections::VecDeque;

use crate::digest::Digest;

/// Bytes per indexed block.
pub const BLOCK_SIZE: u32 = 64 * 1024;

/// Length of the encoded header.
pub const HEADER_LEN: usize = 80;

/// Length of one encoded entry.
pub const ENTRY_LEN: usize = 16;

const MAGIC: &[u8; 8] = b"AGRIDX01";

/// Why an index could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// Too short, wrong magic or a checksum mismatch in the header.
    #[error("index header is corrupt ({0})")]
    CorruptHeader(&'static str),
    /// An entry's own checksum does not match.
    #[error("index entry {0} is corrupt")]
    CorruptEntry(u64),
    /// The index describes another object than the one it sits beside.
    #[error("index does not describe this object ({0})")]
    Mismatch(&'static str),
}

/// The index header: what the whole artifact looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexHeader {
    /// Block size in bytes.
    pub block_size: u32,
    /// Artifact length.
    pub total_bytes: u64,
    /// Number of `\n` bytes in the artifact.
    pub newlines: u64,
    /// Whether the artifact is non-empty and its last byte is not `\n`.
    pub unterminated: bool,
    /// SHA-256 of the artifact.
    pub digest: Digest,
}

impl IndexHeader {
    /// Number of lines: a final segment without `\n` counts as a line; empty content has none.
    pub fn total_lines(&self) -> u64 {
        self.newlines + u64::from(self.unterminated)
    }

    /// Number of blocks (and index entries).
    pub fn block_count(&self) -> u64 {
        self.total_bytes.div_ceil(u64::from(self.block_size))
    }

    /// Byte range `[start, end)` of block `block`.
    pub fn block_range(&self, block: u64) -> (u64, u64) {
        let bs = u64::from(self.block_size);
        let start = block * bs;
        (start, (start + bs).min(self.total_bytes))
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&self.block_size.to_le_bytes());
        out[12..16].copy_from_slice(&u32::from(self.unterminated).to_le_bytes());
        out[16..24].copy_from_slice(&self.total_bytes.to_le_bytes());
        out[24..32].copy_from_slice(&self.newlines.to_le_bytes());
        out[32..40].copy_from_slice(&self.block_count().to_le_bytes());
        out[40..72].copy_from_slice(&self.digest.0);
        let crc = crc32fast::hash(&out[..76]);
        out[76..80].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks a header.
    pub fn decode(bytes: &[u8]) -> Result<Self, IndexError> {
        let bytes: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(IndexError::CorruptHeader("too short"))?;
        if &bytes[0..8] != MAGIC {
            return Err(IndexError::CorruptHeader("bad magic"));
        }
        if crc32fast::hash(&bytes[..76]) != u32::from_le_bytes(le(&bytes[76..80])) {
            return Err(IndexError::CorruptHeader("checksum mismatch"));
        }
        let flags = u32::from_le_bytes(le(&bytes[12..16]));
        let header = Self {
            block_size: u32::from_le_bytes(le(&bytes[8..12])),
            unterminated: flags & 1 == 1,
            total_bytes: u64::from_le_bytes(le(&bytes[16..24])),
            newlines: u64::from_le_bytes(le(&bytes[24..32])),
            digest: Digest(le(&bytes[40..72])),
        };
        if header.block_size == 0
            || flags > 1
            || u64::from_le_bytes(le(&bytes[32..40])) != header.block_count()
            || header.newlines > header.total_bytes
            || (header.total_bytes == 0 && header.unterminated)
        {
            return Err(IndexError::CorruptHeader("inconsistent fields"));
        }
        Ok(header)
    }
}

fn le<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

/// One block's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Number of `\n` bytes before the block starts.
    pub newlines_before: u64,
    /// CRC-32 of the block's bytes.
    pub crc: u32,
}

impl IndexEntry {
    /// Encodes the entry of block `block`.
    pub fn encode(&self, block: u64) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        out[0..8].copy_from_slice(&self.newlines_before.to_le_bytes());
        out[8..12].copy_from_slice(&self.crc.to_le_bytes());
        let crc = entry_crc(block, &out[..12]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks the entry of block `block`.
    pub fn decode(block: u64, bytes: &[u8]) -> Result<Self, IndexError> {
        let bytes = bytes
            .get(..ENTRY_LEN)
            .ok_or(IndexError::CorruptEntry(block))?;
        if entry_crc(block, &bytes[..12]) != u32::from_le_bytes(le(&bytes[12..16])) {
            return Err(IndexError::CorruptEntry(block));
        }
        Ok(Self {
            newlines_before: u64::from_le_bytes(le(&bytes[0..8])),
            crc: u32::from_le_bytes(le(&bytes[8..12])),
        })
    }
}

/// CRC-32 of one block's bytes: the value its [`IndexEntry::crc`] must hold. Readers check
/// every block they return against it.
pub fn block_crc(block: &[u8]) -> u32 {
    crc32fast::hash(block)
}

fn entry_crc(block: u64, fields: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&block.to_le_bytes());
    h.update(fields);
    h.finalize()
}

/// Byte offset of entry `block` inside the sidecar.
pub fn entry_offset(block: u64) -> u64 {
    HEADER_LEN as u64 + block * ENTRY_LEN as u64
}

/// Finds the block holding the `n`-th newline (1-based), i.e. the block where line `n` starts
/// or the block whose end it starts at. `entry` fetches one decoded entry; it is called
/// `O(log blocks)` times. Returns `None` when the artifact has fewer than `n` newlines.
pub fn block_of_newline<E>(
    header: &IndexHeader,
    n: u64,
    mut entry: impl FnMut(u64) -> Result<IndexEntry, E>,
) -> Result<Option<u64>, E> {
    if n == 0 || n > header.newlines {
        return Ok(None);
    }
    // Largest block whose newlines_before < n; block 0 always has newlines_before == 0.
    let (mut lo, mut hi) = (0u64, header.block_count());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if entry(mid)?.newlines_before < n {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// Position just after the `k`-th (1-based) `\n` of `block`, or `None` if it has fewer.
pub fn after_nth_newline(block: &[u8], k: u64) -> Option<usize> {
    let k = usize::try_from(k).ok()?.checked_sub(1)?;
    memchr::memchr_iter(b'\n', block).nth(k).map(|i| i + 1)
}

/// Builds the index of an artifact incrementally, one chunk at a time.
///
/// Driving order: [`update`](Self::update) with each chunk, then drain
/// [`poll_entry`](Self::poll_entry) until `None` (completed blocks, in order), and at the end
/// [`finish`](Self::finish) for the last partial block's entry and the header.
#[derive(Debug, Clone)]
pub struct BlockIndexer {
    block_size: u32,
    in_block: u32,
    block_newlines_before: u64,
    newlines: u64,
    total_bytes: u64,
    last_byte: Option<u8>,
    crc: crc32fast::Hasher,
    ready: VecDeque<IndexEntry>,
}

impl Default for BlockIndexer {
    fn default() -> Self {
        Self::new(BLOCK_SIZE)
    }
}

impl BlockIndexer {
    /// An indexer with a custom block size (tests use small blocks).
    pub fn new(block_size: u32) -> Self {
        assert!(block_size > 0, "block size must be positive");
        Self {
            block_size,
            in_block: 0,
            block_newlines_before: 0,
            newlines: 0,
            total_bytes: 0,
            last_byte: None,
            crc: crc32fast::Hasher::new(),
            ready: VecDeque::new(),
        }
    }

    /// Feeds the next chunk of the artifact.
    pub fn update(&mut self, mut bytes: &[u8]) {
        if let Some(&b) = bytes.last() {
            self.last_byte = Some(b);
        }
        while !bytes.is_empty() {
            let room = (self.block_size - self.in_block) as usize;
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.crc.update(now);
            self.newlines += memchr::memchr_iter(b'\n', now).count() as u64;
            self.in_block += now.len() as u32;
            self.total_bytes += now.len() as u64;
            if self.in_block == self.block_size {
                self.close_block();
            }
            bytes = rest;
        }
    }

    fn close_block(&mut self) {
        let crc = std::mem::replace(&mut self.crc, crc32fast::Hasher::new()).finalize();
        self.ready.push_back(IndexEntry {
            newlines_before: self.block_newlines_before,
            crc,
        });
        self.block_newlines_before = self.newlines;
        self.in_block = 0;
    }

    /// The next completed block's entry, in block order.
    #[must_use]
    pub fn poll_entry(&mut self) -> Option<IndexEntry> {
        self.ready.pop_front()
    }

    /// Bytes fed so far.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Newlines fed so far.
    pub fn newlines(&self) -> u64 {
        self.newlines
    }

    /// Lines fed so far (a final segment without `\n` counts).
    pub fn lines(&self) -> u64 {
        self.newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    /// Closes the last partial block. Returns the entries not yet polled (in order) and the
    /// header for the artifact whose digest is `digest`.
    pub fn finish(mut self, digest: Digest) -> (Vec<IndexEntry>, IndexHeader) {
        if self.in_block > 0 {
            self.close_block();
        }
        let header = IndexHeader {
            block_size: self.block_size,
            total_bytes: self.total_bytes,
            newlines: self.newlines,
            unterminated: self.last_byte.is_some_and(|b| b != b'\n'),
            digest,
        };
        (self.ready.into_iter().collect(), header)
    }
}

/// Encodes the complete sidecar of `bytes` (used for small artifacts such as manifests, and as
/// the reference in tests).
pub fn encode_index_of(bytes: &[u8], block_size: u32) -> Vec<u8> {
    let mut indexer = BlockIndexer::new(block_size);
    indexer.update(bytes);
    let (entries, header) = indexer.finish(Digest::of(bytes));
    let mut out = header.encode().to_vec();
    for (i, e) in entries.iter().enumerate() {
        out.extend_from_slice(&e.encode(i as u64));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(sidecar: &[u8]) -> (IndexHeader, Vec<IndexEntry>) {
        let header = IndexHeader::decode(sidecar).unwrap();
        let es = (0..header.block_count())
            .map(|b| IndexEntry::decode(b, &sidecar[entry_offset(b) as usize..]).unwrap())
            .collect();
        (header, es)
    }

    #[test]
    fn header_and_entries_round_trip_and_detect_corruption() {
        let data = b"one\ntwo\nthree\nfour";
        let sidecar = encode_index_of(data, 4);
        let (header, es) = entries(&sidecar);
        assert_eq!(header.total_bytes, 18);
        assert_eq!(header.newlines, 3);
        assert_eq!(header.total_lines(), 4);
        assert_eq!(es.len(), 5);
        assert_eq!(es[1].newlines_before, 1); // "one\n" is block 0
        for i in 0..sidecar.len() {
            let mut bad = sidecar.clone();
            bad[i] ^= 0x20;
            let header_ok = IndexHeader::decode(&bad).is_ok();
            let entries_ok =
                (0..5).all(|b| IndexEntry::decode(b, &bad[entry_offset(b) as usize..]).is_ok());
            assert!(!(header_ok && entries_ok), "flip at {i} went unnoticed");
        }
    }

    #[test]
    fn chunking_does_not_change_the_index() {
        let data: Vec<u8> = (0..5000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let whole = encode_index_of(&data, 100);
        let mut ix = BlockIndexer::new(100);
        let mut polled = Vec::new();
        for chunk in data.chunks(37) {
            ix.update(chunk);
            polled.extend(std::iter::from_fn(|| ix.poll_entry()));
        }
        let (rest, header) = ix.finish(Digest::of(&data));
        polled.extend(rest);
        let mut streamed = header.encode().to_vec();
        for (i, e) in polled.iter().enumerate() {
            streamed.extend_from_slice(&e.encode(i as u64));
        }
        assert_eq!(streamed, whole);
    }

    #[test]
    fn finds_the_block_of_any_line_start() {
        let data: Vec<u8> = (0..3000u32)
            .flat_map(|i| ("x".repeat((i % 13) as usize) + "\n").into_bytes())
            .collect();
        let sidecar = encode_index_of(&data, 64);
        let (header, es) = entries(&sidecar);
        let newline_positions: Vec<usize> = memchr::memchr_iter(b'\n', &data).collect();
        for n in [1u64, 2, 17, 1000, 2999, 3000] {
            let block = block_of_newline(&header, n, |b| Ok::<_, ()>(es[b as usize]))
                .unwrap()
                .unwrap();
            let (start, end) = header.block_range(block);
            let k = n - es[block as usize].newlines_before;
            let pos = after_nth_newline(&data[start as usize..end as usize], k).unwrap();
            assert_eq!(start as usize + pos, newline_positions[n as usize - 1] + 1);
        }
        assert_eq!(
            block_of_newline(&header, 3001, |b| Ok::<_, ()>(es[b as usize])).unwrap(),
            None
        );
        assert_eq!(
            block_of_newline(&header, 0, |b| Ok::<_, ()>(es[b as usize])).unwrap(),
            None
        );
    }
}
