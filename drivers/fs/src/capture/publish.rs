//! Ending a capture: sealing the stream files, publishing the objects under the protection
//! of the GC lock, writing the record, and taking objects back when it cannot be written.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use agentrun_core::capture::CaptureSummary;
use agentrun_core::digest::StreamingDigest;
use agentrun_core::index::{BlockIndexer, HEADER_LEN, IndexEntry};
use agentrun_core::record::MAX_RECORD_BYTES;
use agentrun_core::stream::StreamIndex;
use agentrun_core::{
    Capture, CaptureCompletion, CaptureError, CaptureStatus, Digest, ResultRecord,
};

use super::pipeline::*;
use super::session::*;
use crate::atomic::{Published, fsync_dir, publish_object, write_atomic};
use crate::error::{IoContext, IoError};
use crate::layout::{self, RECORD_SUFFIX};
use crate::lock::GcLock;
use crate::reserve::*;
use crate::store::StoreError;

impl CaptureSession {
    /// Grows the reserve by `bytes`, best effort (see [`minimal_record`] for what a record
    /// that does not fit keeps).
    fn grow_reserve(&mut self, bytes: u64) {
        if let Some(reserve) = self.reserve.as_mut() {
            let _ = reserve.grow_to(reserve.len + bytes);
        }
    }

    /// Makes the record keep these artifacts too (GC roots them with the output). The caller
    /// must have them protected by this session ([`protect_more`](Self::protect_more)) or
    /// published through it ([`finish_kept_by`](Self::finish_kept_by)).
    pub(crate) fn keep(&mut self, digests: impl IntoIterator<Item = Digest>) {
        // A set, not a search of the list per digest: a record may keep tens of thousands.
        let mut seen: HashSet<Digest> = self.keeps.iter().copied().collect();
        let before = self.keeps.len();
        for digest in digests {
            if seen.insert(digest) {
                self.keeps.push(digest);
            }
        }
        // Room for the record's list of them. Best effort: kept artifacts are part of the
        // minimal record, and a record that then finds the disk full fails publication
        // without taking any object back.
        let added = (self.keeps.len() - before) as u64 * KEEP_JSON_BYTES;
        self.grow_reserve(added);
    }

    /// Adds digests to this live capture's protection: no GC removes them while the session
    /// lives, so a record written by it may reference them. All of them in one write and one
    /// sync: protect a whole batch at once rather than one digest per call.
    pub(crate) fn protect_more(&mut self, digests: &[Digest]) -> Result<(), StoreError> {
        let _gc = GcLock::shared(&self.store.layout)?;
        self.protect_new(digests)
    }

    /// [`protect_more`](Self::protect_more) with the GC lock already held: appends the digests
    /// not protected yet. A GC reads `protect` under the exclusive lock, so it sees all of
    /// them or none, and none of them can be removed after this returns.
    fn protect_new(&mut self, digests: &[Digest]) -> Result<(), StoreError> {
        let mut new = Vec::new();
        let mut seen = HashSet::new();
        for digest in digests {
            if !self.protected.contains(digest) && seen.insert(*digest) {
                new.push(*digest);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        protect(&self.dir.path, &new)?;
        self.protected.extend(new);
        Ok(())
    }

    /// Ends the capture like [`finish`](Self::finish) (streamed, succeeded) but writes no
    /// record: what it publishes is protected by `keeper`, a live session whose record will
    /// keep it (a digest the keeper protects already costs no further write). Returns the
    /// digest of the output (single output only).
    pub(crate) fn finish_kept_by(self, keeper: &mut CaptureSession) -> Result<Digest, StoreError> {
        let record = self.finalize(None, CaptureStatus::Succeeded, Some(keeper))?;
        Ok(record.output_uri().digest)
    }

    /// Ends the capture: finalizes every stream, publishes the artifacts (and the manifest of
    /// named output), persists the record, then removes the capture directory.
    ///
    /// A [`CaptureCompletion::Full`] after streamed chunks is refused with
    /// [`StoreError::Capture`] (mixed completion modes). Capture faults do not fail `finish`:
    /// the record is marked incomplete and the accepted bytes are published.
    pub fn finish(mut self, completion: CaptureCompletion) -> Result<ResultRecord, StoreError> {
        let display_error = |display: &Option<String>| {
            display
                .as_deref()
                .and_then(|d| Capture::check_final_display(d).err())
        };
        let (display, status) = match completion {
            CaptureCompletion::Streamed { display, status } => (display, status),
            CaptureCompletion::Full {
                display,
                status,
                outputs,
            } => {
                let begun = self.accepting().capture.begin_full(outputs);
                match begun {
                    Ok(feeds) => {
                        for (ix, bytes) in feeds {
                            // A write fault is recorded in the machine (the record will say
                            // incomplete); the other outputs are still captured.
                            let _ = self.write(ix, &bytes);
                        }
                        (display, status)
                    }
                    Err(error) => {
                        let fits = display_error(&display).is_none();
                        let display = display.filter(|_| fits);
                        return self.reject_completion(error, display);
                    }
                }
            }
        };
        if let Some(error) = display_error(&display) {
            // Refused like a completion that does not fit, after the outputs: what was
            // streamed, or given in full, is kept.
            return self.reject_completion(error, None);
        }
        self.finalize(display, status, None)
    }

    /// Refuses a completion, but keeps what was streamed before it: as a failed, incomplete
    /// run (with `display`, else the live display), whose run id the error names.
    fn reject_completion(
        self,
        error: CaptureError,
        display: Option<String>,
    ) -> Result<ResultRecord, StoreError> {
        self.accepting()
            .capture
            .handle_capture_error(None, &error.to_string());
        let run_id = self.run_id.clone();
        self.finalize(display, CaptureStatus::Failed, None)?;
        Err(StoreError::CompletionRejected { error, run_id })
    }

    /// Publishes the output and writes the record, or with `keeper` (a live capture whose
    /// record will keep the output) publishes under the keeper's protection and writes no
    /// record.
    fn finalize(
        mut self,
        display: Option<String>,
        status: CaptureStatus,
        keeper: Option<&mut CaptureSession>,
    ) -> Result<ResultRecord, StoreError> {
        // The pieces still in the hashers: accepted, or their fault recorded. Then the threads
        // stop, and the machine is this thread's alone.
        let all: Vec<StreamIndex> = self.accepting().capture.declaration().indexes().collect();
        for ix in all {
            let _ = self.settle(ix);
            self.streams[ix.get()].hasher = None;
            // Its last write-back starts are made before the file is sealed.
            self.streams[ix.get()].writeback = None;
        }
        // A final display is text the reserve did not count yet: room for it, best effort (a
        // record that then does not fit is written without it, see `minimal_record`).
        if let Some(text) = &display {
            self.grow_reserve(text.len() as u64 * JSON_GROWTH);
        }
        let CaptureSession {
            store,
            run_id,
            accepting,
            checked: _,
            mut streams,
            run: run_info,
            keeps,
            protected: _,
            live: _,
            mut reserve,
            mut dir,
        } = self;
        // A hasher that panicked may have left the machine half way through a piece: then
        // every stream is checked against its capture file before anything is published.
        let poisoned = accepting.is_poisoned();
        let accepting = Arc::try_unwrap(accepting).map_err(|_| {
            let e = io::Error::other("a capture hasher thread is still running");
            IoError::at("finish the capture in", &dir.path, e)
        })?;
        let Accepting {
            capture,
            mut indexes,
            counts: _,
        } = accepting
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let summary = capture.finish(display, status);
        let layout = &store.layout;
        let kept_by_keeper = keeper.is_some();
        // The objects this capture put in place for the first time, with their mtime: should
        // the record not be written after all for a reason other than a full disk, they are
        // taken out again (`unpublish`), so no object is left that nothing points at.
        let mut fresh: Vec<(Digest, Option<SystemTime>)> = Vec::new();
        let publishing_since = SystemTime::now();
        // The object being published when publication failed: its index may be in place.
        let mut attempted = None;
        let mut gc = None;
        // Every step that writes gets a piece of the reserve back if it finds the disk full,
        // and is tried again (`with_room`); the reserve itself becomes the record.
        let published = (|| {
            for ((files, index), s) in streams.iter_mut().zip(&mut indexes).zip(&summary.streams) {
                index.broken |= poisoned;
                with_room(&mut reserve, || seal_stream(files, index, s))?;
            }
            let manifest = with_room(&mut reserve, || write_manifest(&dir.path, &summary))?;
            gc = Some(GcLock::shared(layout)?);
            let mut digests: Vec<Digest> = summary.streams.iter().map(|s| s.digest).collect();
            digests.extend(manifest.as_ref().map(|(d, _, _)| *d));
            match keeper {
                Some(keeper) => with_room(&mut reserve, || keeper.protect_new(&digests))?,
                None => with_room(&mut reserve, || protect(&dir.path, &digests))?,
            }
            // Each digest once: two streams with the same bytes (both empty, say) are one
            // object, and a second publication would count this capture's own object as a
            // dedupe hit.
            let mut seen = HashSet::new();
            let mut publish =
                |reserve: &mut Option<Reserve>, digest: &Digest, data: &Path, index: &Path| {
                    if !seen.insert(*digest) {
                        return Ok::<(), StoreError>(());
                    }
                    attempted = Some(*digest);
                    let published =
                        with_room(reserve, || Ok(publish_object(layout, digest, data, index)?))?;
                    if published == Published::New {
                        let mtime = fs::metadata(layout.object(digest)).and_then(|m| m.modified());
                        fresh.push((*digest, mtime.ok()));
                    }
                    attempted = None;
                    Ok(())
                };
            for ((files, index), s) in streams.iter().zip(&indexes).zip(&summary.streams) {
                publish(&mut reserve, &s.digest, &files.data_path, &index.path)?;
            }
            if let Some((digest, data, index)) = &manifest {
                publish(&mut reserve, digest, data, index)?;
            }
            // The record goes last: once it exists, everything it references is published.
            // It is written before the GC lock and the capture lock (the protection) are
            // released.
            let mut record = ResultRecord::from_summary(run_id.clone(), &summary);
            record.run = run_info;
            record.set_keeps(keeps);
            if kept_by_keeper {
                return Ok(record);
            }
            // A shared store's run is marked as waiting for its bucket before its record
            // exists, so the spool never holds a record of it that looks like a local run.
            if let Some(remote) = &store.remote {
                with_room(&mut reserve, || {
                    Ok(crate::outbox::mark(layout, &run_id, remote.identity())?)
                })?;
            }
            let name = format!("{run_id}{RECORD_SUFFIX}");
            let json = record_json(layout, &run_id, &record)?;
            let written = match reserve.as_ref() {
                Some(room) => room.become_record(&layout.records(), &name, &json),
                None => write_atomic(&layout.records(), &name, &json),
            };
            match written {
                Ok(()) => {}
                // The full record needed more than the room set aside (previews of control
                // bytes, a long display): the minimal one fits it.
                Err(e) if is_no_space(&e.source) => {
                    record = minimal_record(&record);
                    let json = record_json(layout, &run_id, &record)?;
                    match reserve.as_ref() {
                        Some(room) => room.become_record(&layout.records(), &name, &json)?,
                        None => write_atomic(&layout.records(), &name, &json)?,
                    }
                }
                Err(e) => return Err(e.into()),
            }
            // The reserve is the record now.
            reserve = None;
            crate::fault::point("after the record, before the capture directory is removed");
            Ok(record)
        })();
        if let Some(reserve) = reserve.take() {
            reserve.release();
        }
        match &published {
            // On a full disk nothing is taken back and the capture directory is kept: what
            // was published, and what was not yet, stays on disk. A later `agentrun gc`
            // removes it once nothing holds its lock.
            Err(e) if store_no_space(e) => dir.keep = true,
            // A keeper's objects stay protected by it; its caller decides about them.
            Err(_) if !kept_by_keeper => {
                drop(gc.take());
                unpublish(layout, &dir.path, &fresh, attempted, publishing_since);
            }
            _ => {}
        }
        drop(gc);
        drop((streams, indexes));
        drop(dir);
        let record = published?;
        // A shared store: the run is in the spool now, complete and crash-safe; then it goes
        // to the bucket (objects, then the record). A failure leaves it in the spool.
        if !kept_by_keeper && let Some(remote) = &store.remote {
            remote
                .publish_run(&store, &record, true)
                .map_err(|e| match e {
                    // The bucket refused or could not be reached: publishing later can mend that.
                    // Anything else (a kept artifact gone, a damaged spool copy) is said as it is.
                    e @ StoreError::Remote(_) => StoreError::NotPublished {
                        run_id: record.run_id.clone(),
                        url: remote.url().to_owned(),
                        source: Box::new(e),
                    },
                    e => e,
                })?;
        }
        Ok(record)
    }
}

/// Runs a publication step; each time it finds the disk full, a piece of the reserve is given
/// back and it is tried again, until the reserve has nothing more to give (every step can be
/// run again after a failure).
pub(super) fn with_room<T>(
    reserve: &mut Option<Reserve>,
    mut step: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    loop {
        match step() {
            Err(e) if store_no_space(&e) && reserve.as_mut().is_some_and(Reserve::give_back) => {}
            done => return done,
        }
    }
}

/// The record's JSON, refused if its own reader would refuse it.
fn record_json(
    layout: &layout::Layout,
    run_id: &str,
    record: &ResultRecord,
) -> Result<Vec<u8>, StoreError> {
    let json = serde_json::to_vec_pretty(record).map_err(io::Error::other);
    let json = json.at("serialize the record of", &layout.record(run_id))?;
    // Every field is bounded where it enters, so this never refuses; it guarantees that no
    // record is written that its own reader would refuse.
    if json.len() as u64 > MAX_RECORD_BYTES {
        return Err(StoreError::RecordTooLarge {
            path: layout.record(run_id),
            size: json.len() as u64,
            limit: MAX_RECORD_BYTES,
        });
    }
    Ok(json)
}

/// Takes back the objects a capture published for the first time (`fresh`, each with the
/// mtime it had then) when its record could not be written: no record points at them, and on
/// a full disk they hold the room the next run needs. Best effort; what is left is an ordinary
/// unreferenced object that GC removes after the grace period.
///
/// Under the exclusive GC lock, so no publication is half done meanwhile. The objects are kept
/// if anything else may refer to one of them: another live capture protects it (a compaction
/// that confirmed it, a capture about to publish it), a record written since publication
/// began names it (a capture that found it as a dedupe hit, and finished), or its mtime
/// changed (a dedupe hit refreshes it). The index of `attempted`, the object whose
/// publication failed, is removed if that object is not there.
pub(super) fn unpublish(
    layout: &layout::Layout,
    own: &Path,
    fresh: &[(Digest, Option<SystemTime>)],
    attempted: Option<Digest>,
    since: SystemTime,
) {
    if fresh.is_empty() && attempted.is_none() {
        return;
    }
    let Ok(_gc) = GcLock::exclusive(layout) else {
        return;
    };
    // No publication is half done now: an index without its object is an orphan.
    if let Some(digest) = attempted
        && matches!(fs::symlink_metadata(layout.object(&digest)), Err(e) if e.kind() == io::ErrorKind::NotFound)
    {
        let _ = fs::remove_file(layout.index(&digest));
        let _ = fsync_dir(&layout.object_dir(&digest));
    }
    let Ok(mut protected) = crate::gc::live_protected(layout, own) else {
        return;
    };
    // Coarse timestamps (a second on some file systems) are allowed for.
    let since = since
        .checked_sub(std::time::Duration::from_secs(2))
        .unwrap_or(since);
    let Some(recent) = recent_record_artifacts(layout, since) else {
        return;
    };
    protected.extend(recent);
    // A protected manifest roots its streams, so one of them protected elsewhere keeps all.
    if fresh.iter().any(|(digest, _)| protected.contains(digest)) {
        return;
    }
    for (digest, mtime) in fresh {
        let object = layout.object(digest);
        let unchanged = fs::symlink_metadata(&object)
            .and_then(|m| m.modified())
            .ok()
            .is_some_and(|now| Some(now) == *mtime);
        if !unchanged {
            continue;
        }
        // The object before its index, as GC does: an object is never visible without it.
        if fs::remove_file(&object).is_ok() {
            let _ = fs::remove_file(layout.index(digest));
        }
    }
    if let Some(dir) = fresh.first().map(|(d, _)| layout.object_dir(d)) {
        let _ = fsync_dir(&dir);
    }
}

/// Every artifact named by a record modified at or after `since`; `None` if one of those
/// records cannot be read (then nothing may be taken back).
fn recent_record_artifacts(layout: &layout::Layout, since: SystemTime) -> Option<HashSet<Digest>> {
    let mut artifacts = HashSet::new();
    for entry in fs::read_dir(layout.records()).ok()? {
        let path = entry.ok()?.path();
        if !path.to_str().is_some_and(|p| p.ends_with(RECORD_SUFFIX)) {
            continue;
        }
        let modified = fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .ok()?;
        if modified < since {
            continue;
        }
        let file = crate::record_file::read(&path).ok()?;
        let record = ResultRecord::from_json(&file.bytes).ok()?;
        artifacts.extend(record.artifacts());
    }
    Some(artifacts)
}

/// Makes a stream's capture file and index temp file final. They are made durable only if
/// they are published (see [`publish_object`]): a deduplicated stream's files are dropped.
pub(super) fn seal_stream(
    files: &mut StreamFiles,
    index: &mut IndexFile,
    s: &agentrun_core::capture::StreamSummary,
) -> Result<(), StoreError> {
    // The file must hold exactly the accepted bytes: a failed write may have left extra bytes.
    let len = files.data.metadata().at("inspect", &files.data_path)?.len();
    if len < s.bytes {
        return Err(StoreError::CaptureFileTruncated {
            path: files.data_path.clone(),
            expected: s.bytes,
        });
    }
    if len > s.bytes {
        let f = OpenOptions::new().write(true).open(&files.data_path);
        f.and_then(|f| f.set_len(s.bytes))
            .at("truncate", &files.data_path)?;
    }
    let header = s.index_header.encode();
    crate::fault::fail_io("sealing a stream").at("write", &index.path)?;
    let complete =
        index.entries_written + s.index_entries.len() as u64 == s.index_header.block_count();
    if index.broken || !complete {
        rebuild_index(&files.data_path, index, s.digest)?;
    } else {
        let mut tail = Vec::with_capacity(s.index_entries.len() * agentrun_core::index::ENTRY_LEN);
        for (k, entry) in s.index_entries.iter().enumerate() {
            tail.extend_from_slice(&entry.encode(index.entries_written + k as u64));
        }
        let written = index
            .file
            .write_all(&tail)
            .and_then(|()| index.file.write_all_at(&header, 0));
        if let Err(e) = written {
            // Part of the entries may be in the file: sealing again rebuilds the index.
            index.broken = true;
            return Err(IoError::at("write", &index.path, e).into());
        }
    }
    Ok(())
}

/// Rewrites a stream's index from its capture file, after the incremental index was lost to a
/// write error (or a hasher thread stopped half way). Also checks that the file still hashes
/// to the digest the machine computed: nothing is published under a digest its bytes do not
/// have.
fn rebuild_index(path: &Path, index_file: &IndexFile, digest: Digest) -> Result<(), StoreError> {
    let mut data = File::open(path).at("open", path)?;
    let mut indexer = BlockIndexer::default();
    let mut hasher = StreamingDigest::default();
    let mut buf = vec![0u8; agentrun_core::index::BLOCK_SIZE as usize];
    let mut entries: Vec<IndexEntry> = Vec::new();
    let idx_path = &index_file.path;
    // Rewritten in place and cut to length at the end, not truncated first: on a full disk
    // the blocks it has are the room it needs.
    let mut index = OpenOptions::new()
        .write(true)
        .open(idx_path)
        .at("open", idx_path)?;
    index.write_all(&[0u8; HEADER_LEN]).at("write", idx_path)?;
    let mut block = 0u64;
    loop {
        let n = data.read(&mut buf).at("read", path)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        indexer.update(&buf[..n]);
        entries.extend(std::iter::from_fn(|| indexer.poll_entry()));
        for e in entries.drain(..) {
            index.write_all(&e.encode(block)).at("write", idx_path)?;
            block += 1;
        }
    }
    if hasher.finish() != digest {
        let e = io::Error::other("the capture file no longer matches the bytes accepted");
        return Err(IoError::at("rebuild the index of", path, e).into());
    }
    let (rest, header) = indexer.finish(digest);
    for e in rest {
        index.write_all(&e.encode(block)).at("write", idx_path)?;
        block += 1;
    }
    let len = HEADER_LEN as u64 + block * agentrun_core::index::ENTRY_LEN as u64;
    index.set_len(len).at("truncate", idx_path)?;
    index.seek(SeekFrom::Start(0)).at("seek", idx_path)?;
    index.write_all(&header.encode()).at("write", idx_path)?;
    Ok(())
}

/// Writes the manifest of named output and its index into the capture directory.
fn write_manifest(
    dir: &Path,
    summary: &CaptureSummary,
) -> Result<Option<(Digest, PathBuf, PathBuf)>, StoreError> {
    let Some(manifest) = summary.manifest() else {
        return Ok(None);
    };
    let bytes = manifest.to_bytes();
    let digest = Digest::of(&bytes);
    let data = dir.join("m");
    let index = dir.join("m.idx");
    let sidecar = agentrun_core::index::encode_index_of(&bytes, agentrun_core::index::BLOCK_SIZE);
    crate::fault::fail_io("writing the manifest").at("write", &data)?;
    write_in_place(&data, &bytes)?;
    write_in_place(&index, &sidecar)?;
    Ok(Some((digest, data, index)))
}

/// Makes `path` (created by [`preallocate`], or created now) hold exactly `bytes`, written
/// from its start into the blocks it has, so that writing it again after a full disk replaces
/// what an attempt left (synced only if published, see [`publish_object`]).
fn write_in_place(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(layout::FILE_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .at("open", path)?;
    file.write_all_at(bytes, 0).at("write", path)?;
    file.set_len(bytes.len() as u64).at("truncate", path)
}

/// Appends the digests about to be published to the capture's `protect` file.
///
/// Not synced: GC reads `protect` only of a capture whose lock is held, that is of a
/// process running on this machine now, which sees the page cache; after a crash no lock is
/// held and the file means nothing.
pub(super) fn protect(dir: &Path, digests: &[Digest]) -> Result<(), StoreError> {
    let path = dir.join("protect");
    let mut f = layout::append_private_file(&path)?;
    let text: String = digests.iter().map(|d| format!("{d}\n")).collect();
    let before = f.metadata().at("inspect", &path)?.len();
    let written =
        crate::fault::fail_io("protecting the digests").and_then(|()| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        // No half line is left for GC to read: an attempt again appends whole lines.
        let _ = f.set_len(before);
        return Err(IoError::at("write", &path, e).into());
    }
    Ok(())
}
