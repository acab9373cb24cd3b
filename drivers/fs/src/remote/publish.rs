//! Publication of a spooled run to the bucket, in the crash-safe order of the
//! [module documentation](super): the lease, each object (sidecar, then bytes), the record.

use crate::atomic::fsync_dir;
use agentrun_core::index::{self, IndexEntry};

use super::*;

impl Remote {
    /// Publishes the run whose local record is `record` (its objects are in `spool`), then
    /// removes the local record. See the module documentation for the order.
    ///
    /// One publisher per run at a time, by a `flock` on the local record: `wait` blocks
    /// until another publisher of the run is done (then publishes what it left, if
    /// anything), else returns `Ok(false)` at once when one holds it. `Ok(false)` too when
    /// the spool no longer holds the record (published meanwhile).
    pub(crate) fn publish_run(
        self: &Arc<Self>,
        spool: &crate::Store,
        record: &ResultRecord,
        wait: bool,
    ) -> Result<bool, StoreError> {
        let local = spool.layout.record(&record.run_id);
        let Some(_publishing) = lock_record(&local, wait)? else {
            return Ok(false);
        };
        let mut digests: Vec<Digest> = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = record.artifacts();
        while let Some(d) = stack.pop() {
            if !seen.insert(d) {
                continue;
            }
            digests.push(d);
            // Kept manifests (a compaction's) root their streams: those must be there too.
            if let Ok(Some(m)) = spool.local_manifest(&d) {
                stack.extend(m.streams.iter().map(|s| s.sha256));
            }
        }
        let lease = Lease::acquire(self, &digests, None)?;
        crate::fault::point("remote: after the lease, before the objects");
        let mut old_hits = Vec::new();
        // Artifacts the record keeps that the spool cannot give (a compaction's references to
        // other runs' output, which only the bucket holds): nothing to upload, and nothing to
        // upload again below. A spool copy that does not open (its object gone or of another
        // size) is never uploaded.
        let mut bucket_only = HashSet::new();
        for digest in &digests {
            if spool.only_in_bucket(digest) {
                if !self.holds(digest) {
                    return Err(self.kept_but_missing(digest));
                }
                bucket_only.insert(*digest);
            } else if let Some(old) = self.publish_object(&spool.layout, digest)? {
                old_hits.push((*digest, old));
            }
        }
        // Old hits: confirmed only when every GC delete decided without our lease has landed.
        if !old_hits.is_empty() || !bucket_only.is_empty() {
            lease.settle();
            for (digest, _) in &old_hits {
                if self.head(&self.object_key(digest))?.is_none() {
                    // A GC took it meanwhile: we still have the bytes.
                    self.upload_object(&spool.layout, digest, Upload::Replace)?;
                }
            }
            self.confirm_bucket_only(&bucket_only)?;
        }
        crate::fault::point("remote: after the objects, before the record");
        let json = fs::read(&local).at("read", &local)?;
        let key = self.record_key(&record.run_id);
        let lease = if lease.lapsed() {
            // Renewals failed long enough that a GC may have stopped counting the lease: a
            // fresh one, then every object is confirmed as an old hit is.
            drop(lease);
            let fresh = Lease::acquire(self, &digests, None)?;
            fresh.settle();
            for digest in digests.iter().filter(|d| !bucket_only.contains(d)) {
                if self.head(&self.object_key(digest))?.is_none() {
                    self.upload_object(&spool.layout, digest, Upload::Replace)?;
                }
            }
            self.confirm_bucket_only(&bucket_only)?;
            fresh
        } else {
            lease
        };
        self.put(&key, json, PutMode::Overwrite)?;
        crate::fault::point("remote: after the record, before the lease is released");
        // Not deleted: a GC that listed the records before this one was written keeps
        // counting the lease until it ends.
        drop(lease);
        // The bucket has the run now; the spool's copy becomes garbage for the local gc.
        // Removed while the lock is held: a publisher waiting on it then finds it gone.
        // The mark after the record: a crash between the two leaves a mark naming no record
        // (swept by the spool's gc), never a spooled record that looks like a local run.
        if fs::remove_file(&local).is_ok() && fsync_dir(&spool.layout.records()).is_ok() {
            crate::outbox::clear(&spool.layout, &record.run_id);
        }
        Ok(true)
    }

    /// Whether the bucket holds `digest` whole: its index sidecar is sound and the object is
    /// there with the size the sidecar gives (a publisher that died between the two leaves
    /// only the sidecar).
    pub(crate) fn holds(self: &Arc<Self>, digest: &Digest) -> bool {
        let Ok((_, _, header)) = self.cached_index(digest) else {
            return false;
        };
        matches!(self.head(&self.object_key(digest)), Ok(Some(meta)) if meta.size == header.total_bytes)
    }

    /// After a lease naming `digests` has settled: each is still in the bucket, else the
    /// record that would keep it is refused (its bytes are not on this machine to put back).
    fn confirm_bucket_only(&self, digests: &HashSet<Digest>) -> Result<(), StoreError> {
        for digest in digests {
            if self.head(&self.object_key(digest))?.is_none() {
                return Err(self.kept_but_missing(digest));
            }
        }
        Ok(())
    }

    fn kept_but_missing(&self, digest: &Digest) -> StoreError {
        StoreError::KeptArtifactMissing {
            url: self.url().to_owned(),
            digest: *digest,
        }
    }

    /// A lease naming objects that only the bucket holds, before they are checked: once it
    /// has settled ([`Lease::settle`]) no GC deletes them while it is renewed. A compaction
    /// holds one from the moment it confirms references to other runs' output until its
    /// record is in the bucket.
    pub(crate) fn protect(self: &Arc<Self>, digests: &[Digest]) -> Result<Lease, StoreError> {
        let lease = Lease::acquire(self, digests, None)?;
        lease.settle();
        Ok(lease)
    }

    /// Puts `digest`'s sidecar and object unless an intact copy is there. Returns the age
    /// of an existing copy that is old enough for a GC to collect (a hit that needs
    /// confirming), `None` otherwise.
    pub(crate) fn publish_object(
        self: &Arc<Self>,
        spool: &Layout,
        digest: &Digest,
    ) -> Result<Option<Duration>, StoreError> {
        let local_idx_path = spool.index(digest);
        let local_idx = fs::read(&local_idx_path).at("read", &local_idx_path)?;
        let object_path = spool.object(digest);
        let len = fs::metadata(&object_path).at("read", &object_path)?.len();
        let okey = self.object_key(digest);
        let Some(blocks) = SpoolBlocks::new(&local_idx, digest, len) else {
            // A damaged spool sidecar: a sound copy in the bucket is the hit, and nothing is
            // put over it; without one, the run cannot be published from this spool.
            if let Some(meta) = self.head(&okey)?
                && self.holds(digest)
            {
                return Ok(hit_age(&meta));
            }
            return Err(spool_damaged(&local_idx_path));
        };
        let header = blocks.header;
        // Twice at most: a copy another publisher created between our look and our
        // conditional put is judged as any existing copy is.
        for _ in 0..2 {
            let Some(meta) = self.head(&okey)? else {
                if self.upload_object(spool, digest, Upload::New)? {
                    return Ok(None);
                }
                continue;
            };
            let ikey = self.index_key(digest);
            let same_index = self.get_all(&ikey)?.is_some_and(|b| b[..] == local_idx[..]);
            // Up to the multipart threshold the stored bytes are compared with ours too (one
            // GET): a flipped byte in the bucket is replaced, and a damaged spool copy (an old
            // one a compaction keeps) never replaces a sound bucket copy. Larger copies are
            // checked by size and sidecar only; `verify` checks every block of every object.
            let same_bytes = || -> Result<bool, StoreError> {
                if header.total_bytes > MULTIPART_THRESHOLD {
                    return Ok(true);
                }
                let path = spool.object(digest);
                let ours = fs::read(&path).at("read", &path)?;
                Ok(match self.get_all(&okey)? {
                    Some(theirs) if theirs[..] == ours[..] => true,
                    Some(theirs) if Digest::of(&ours) != *digest => {
                        if Digest::of(&theirs) != *digest {
                            return Err(spool_damaged(&path));
                        }
                        true
                    }
                    _ => false,
                })
            };
            if same_index && meta.size == header.total_bytes && same_bytes()? {
                return Ok(hit_age(&meta));
            }
            // A damaged copy (different size or sidecar): replaced.
            self.upload_object(spool, digest, Upload::Replace)?;
            return Ok(None);
        }
        // Created by another publisher, then gone again (a GC's delete of an older copy
        // landing after it): ours goes up.
        self.upload_object(spool, digest, Upload::Replace)?;
        Ok(None)
    }

    /// Uploads the sidecar, then the object, once both are checked against each other: the
    /// sidecar whole (header and every entry's own checksum), the object block by block
    /// against the sidecar's CRC-32s as it is read (and, up to the multipart threshold,
    /// against its SHA-256), so a spool copy damaged on disk is never put in the bucket; a
    /// multipart upload that finds a damaged block is aborted.
    ///
    /// [`Upload::New`] puts a single-request object with `PutMode::Create` (the bucket
    /// stores identical bytes once even when two machines race) and returns `false`, having
    /// written nothing but the sidecar, when a copy is already there. A multipart upload
    /// cannot be made conditional through `object_store`: it always completes (identical
    /// bytes over identical bytes, the name being their digest).
    pub(crate) fn upload_object(
        &self,
        spool: &Layout,
        digest: &Digest,
        upload: Upload,
    ) -> Result<bool, StoreError> {
        let idx_path = spool.index(digest);
        let idx = Bytes::from(fs::read(&idx_path).at("read", &idx_path)?);
        let path = spool.object(digest);
        let mut file = File::open(&path).at("open", &path)?;
        let len = file.metadata().at("read", &path)?.len();
        let Some(blocks) = SpoolBlocks::new(&idx, digest, len) else {
            return Err(spool_damaged(&idx_path));
        };
        self.put(&self.index_key(digest), idx.clone(), PutMode::Overwrite)?;
        crate::fault::point("remote: after an index sidecar, before its object");
        let key = self.object_key(digest);
        if len <= MULTIPART_THRESHOLD {
            let mut bytes = Vec::with_capacity(len as usize);
            file.read_to_end(&mut bytes).at("read", &path)?;
            if !blocks.check(0, &bytes) || Digest::of(&bytes) != *digest {
                return Err(spool_damaged(&path));
            }
            return Ok(match upload {
                Upload::New => self.put_new(&key, bytes)?,
                Upload::Replace => self.put(&key, bytes, PutMode::Overwrite)?,
            });
        }
        let result: Result<(), StoreError> = self.block_on(async {
            let mut upload = self
                .client
                .put_multipart(&key)
                .await
                .map_err(|e| self.err("start a multipart upload of", &key, e))?;
            // Each part is read into a buffer of its own and handed over whole (no copy), at
            // most PARTS_IN_FLIGHT being sent while the next is read: memory stays at
            // PARTS_IN_FLIGHT + 1 parts. The parts are tasks, so they go on sending whenever
            // this loop waits.
            let mut parts = tokio::task::JoinSet::new();
            let part_error = |e| self.err("upload a part of", &key, e);
            let sent = async {
                let mut offset = 0u64;
                loop {
                    let mut part = vec![0u8; blocks.read_size(PART_SIZE)];
                    let n = read_full(&mut file, &mut part).at("read", &path)?;
                    if n == 0 {
                        break;
                    }
                    part.truncate(n);
                    if !blocks.check(offset, &part) {
                        return Err(spool_damaged(&path));
                    }
                    offset += n as u64;
                    while parts.len() >= PARTS_IN_FLIGHT {
                        joined(parts.join_next().await).map_err(part_error)?;
                    }
                    parts.spawn(upload.put_part(PutPayload::from(part)));
                    // On this one-thread runtime a task runs only while this loop waits: let
                    // the new part start sending before the next is read.
                    tokio::task::yield_now().await;
                }
                if offset != len {
                    return Err(spool_damaged(&path));
                }
                while let Some(done) = parts.join_next().await {
                    joined(Some(done)).map_err(part_error)?;
                }
                Ok(())
            }
            .await;
            // Best effort on failure: every part task ended first (none lands after the
            // abort), then the upload aborted; what a crash leaves unfinished is removed by
            // the bucket's lifecycle rule (see the guide).
            if let Err(e) = sent {
                parts.shutdown().await;
                let _ = upload.abort().await;
                return Err(e);
            }
            if let Err(e) = upload.complete().await {
                let _ = upload.abort().await;
                return Err(self.err("complete the multipart upload of", &key, e).into());
            }
            Ok(())
        });
        result.map(|()| true)
    }

    /// A conditional put (`PutMode::Create`): `false` when the key exists. A server that
    /// cannot do conditional writes (`AWS_CONDITIONAL_PUT=disabled`) gets a plain put, which
    /// for content-addressed bytes stores the same thing.
    fn put_new(&self, key: &ObjPath, bytes: Vec<u8>) -> Result<bool, RemoteError> {
        // Shared, not copied, by the retry.
        let payload = PutPayload::from(bytes);
        match self.put(key, payload.clone(), PutMode::Create) {
            Err(e) if matches!(*e.source, object_store::Error::NotImplemented { .. }) => {
                self.put(key, payload, PutMode::Overwrite)
            }
            created => created,
        }
    }
}

/// The age of an existing copy counted as a hit when it is old enough for a GC to collect
/// (the hit then needs confirming), `None` otherwise.
fn hit_age(meta: &object_store::ObjectMeta) -> Option<Duration> {
    let modified: SystemTime = meta.last_modified.into();
    let age = SystemTime::now()
        .duration_since(modified)
        .unwrap_or_default();
    let safe = MIN_GRACE.saturating_sub(2 * CLOCK_SKEW + HIT_WAIT);
    (age >= safe).then_some(age)
}

/// How [`Remote::upload_object`] writes the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upload {
    /// No copy was there when we looked: created only if still absent.
    New,
    /// A damaged copy, or one a GC took: overwritten.
    Replace,
}

/// A spool sidecar that describes its object (`digest`, `len` bytes) and is sound whole,
/// against which the object's bytes are checked as they are read.
struct SpoolBlocks<'a> {
    idx: &'a [u8],
    header: IndexHeader,
}

impl<'a> SpoolBlocks<'a> {
    fn new(idx: &'a [u8], digest: &Digest, len: u64) -> Option<Self> {
        let header = IndexHeader::decode(idx).ok()?;
        let entries = usize::try_from(header.block_count()).ok()?;
        let sound = header.block_size == BLOCK_SIZE
            && header.digest == *digest
            && header.total_bytes == len
            && idx.len() == HEADER_LEN + entries * ENTRY_LEN
            && (0..header.block_count()).all(|b| Self::entry(idx, b).is_some());
        sound.then_some(Self { idx, header })
    }

    fn entry(idx: &[u8], block: u64) -> Option<IndexEntry> {
        let at = usize::try_from(index::entry_offset(block)).ok()?;
        IndexEntry::decode(block, idx.get(at..)?).ok()
    }

    /// The largest number of whole blocks that fits in `limit` bytes (one block at least).
    fn read_size(&self, limit: usize) -> usize {
        let bs = self.header.block_size as usize;
        (limit / bs).max(1) * bs
    }

    /// Whether `bytes`, read at `offset` (a block boundary), match their blocks' CRC-32s.
    fn check(&self, offset: u64, bytes: &[u8]) -> bool {
        let bs = u64::from(self.header.block_size);
        if !offset.is_multiple_of(bs) || offset + bytes.len() as u64 > self.header.total_bytes {
            return false;
        }
        bytes
            .chunks(bs as usize)
            .zip(offset / bs..)
            .all(|(chunk, block)| {
                let (start, end) = self.header.block_range(block);
                chunk.len() as u64 == end - start
                    && Self::entry(self.idx, block)
                        .is_some_and(|e| e.crc == index::block_crc(chunk))
            })
    }
}

/// A spool copy that does not match its name or its sidecar: never put in the bucket.
fn spool_damaged(path: &FsPath) -> StoreError {
    IoError::at(
        "publish",
        path,
        io::Error::other(
            "the spool's copy is damaged on disk (it does not match its name or its index)",
        ),
    )
    .into()
}

/// The outcome of a finished part upload task (a panic or a cancellation is an error too).
fn joined(
    done: Option<Result<object_store::Result<()>, tokio::task::JoinError>>,
) -> object_store::Result<()> {
    match done {
        None => Ok(()),
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(object_store::Error::Generic {
            store: "multipart upload",
            source: Box::new(e),
        }),
    }
}

/// Removes the spool's record of `run_id`, then its outbox mark, unless a publisher holds
/// it: `false` then. [`StoreError::UnknownRun`] when it is not there.
pub(crate) fn discard_local_record(spool: &Layout, run_id: &str) -> Result<bool, StoreError> {
    let local = &spool.record(run_id);
    let Some(_held) = lock_record(local, false)? else {
        // Held by a publisher, or not there (never, or published meanwhile).
        return if local.exists() {
            Ok(false)
        } else {
            Err(StoreError::UnknownRun(run_id.to_owned()))
        };
    };
    fs::remove_file(local).at("remove", local)?;
    // The record's removal durable first: a mark that outlives it is swept, a record that
    // outlives its mark would look like a local run.
    fsync_dir(&spool.records())?;
    crate::outbox::clear(spool, run_id);
    Ok(true)
}

/// The `flock` of one run's publication, on its local record; `None` when the record is gone
/// (published) or, without `wait`, another publisher holds it.
fn lock_record(local: &FsPath, wait: bool) -> Result<Option<File>, StoreError> {
    let file = match File::open(local) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IoError::at("open", local, e).into()),
    };
    if wait {
        file.lock().at("lock", local)?;
    } else {
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(IoError::at("lock", local, e).into());
            }
        }
    }
    // Locked, but perhaps only after its publisher removed it: then there is nothing to do.
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().at("read", local)?;
    match fs::metadata(local) {
        Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => Ok(Some(file)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(IoError::at("read", local, e).into()),
    }
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
