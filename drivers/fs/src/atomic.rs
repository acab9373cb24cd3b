//! Crash-safe writes: every file becomes visible under its final name only after its bytes are
//! on disk.
//!
//! The pattern is always: write a temporary file in the same file system, `fsync` it, `rename`
//! it into place, `fsync` the directory. A SIGKILL (or power loss) at any point leaves either
//! no file under the final name or the complete one, never a partial one.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use agentrun_core::Digest;
use agentrun_core::index::{self, ENTRY_LEN, HEADER_LEN, IndexEntry, IndexHeader};

use crate::error::{IoContext, IoError};
use crate::fault;
use crate::layout::{self, Layout, TEMP_SUFFIX};

/// Makes the entries of `dir` (creations, renames, removals) durable.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), IoError> {
    fault::point("before a directory sync");
    File::open(dir)
        .and_then(|d| d.sync_all())
        .at("sync directory", dir)?;
    fault::point("after a directory sync");
    Ok(())
}

/// Makes a file's bytes durable.
pub(crate) fn sync_file(file: &File, path: &Path) -> Result<(), IoError> {
    fault::point("before a file sync");
    file.sync_all().at("sync", path)?;
    fault::point("after a file sync");
    Ok(())
}

/// Makes the bytes of the file at `path` (one of this process's capture files) durable
/// (`fsync` through a read-only handle syncs the file's data all the same).
fn sync_path(path: &Path) -> Result<(), IoError> {
    let file = crate::read::open_no_follow(path).at("open", path)?;
    sync_file(&file, path)
}

/// Renames `from` to `to` (atomically replacing what is there).
fn rename(from: &Path, to: &Path, what: &'static str) -> Result<(), IoError> {
    fault::point("before a rename");
    fs::rename(from, to).at(what, to)?;
    fault::point("after a rename");
    Ok(())
}

/// Writes a new owner-only file holding `bytes` and syncs it. The file must not exist.
pub(crate) fn write_new_file(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let mut f = layout::new_private_file().open(path).at("create", path)?;
    f.write_all(bytes).at("write", path)?;
    sync_file(&f, path)
}

/// Replaces `dir/name` atomically with `bytes` (temp file + fsync + rename + fsync dir).
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), IoError> {
    let tmp = dir.join(format!("{name}{TEMP_SUFFIX}"));
    let target = dir.join(name);
    // A temp file left by a crashed writer of the same name is garbage: replace it.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(IoError::at("remove stale temporary file", &tmp, e));
        }
        _ => {}
    }
    // A temp file that could not be written whole (a full disk) is removed at once: it is
    // garbage, and holds room the caller may need for what it does about the error.
    let written = write_new_file(&tmp, bytes)
        .and_then(|()| fault::fail_io("writing a file atomically").at("write", &tmp));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    rename(&tmp, &target, "rename into place")?;
    fsync_dir(dir)
}

/// What [`publish_object`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    /// The object was new and is now in place.
    New,
    /// An intact copy already existed (dedupe hit); its mtime was refreshed.
    Deduplicated,
    /// A copy already existed but did not read back as these bytes (truncated, a flipped
    /// byte, a damaged or missing index, wrong file type or mode); it was replaced by the
    /// fresh capture.
    Repaired,
}

/// Moves a synced capture file (`data`) and its synced index (`index`) into
/// `objects/` under `digest`, index first: an object is never visible without its index.
///
/// On a dedupe hit the stored copy is checked against the fresh capture before the fresh
/// bytes are dropped: a run must never publish a reference to bytes that do not read back.
/// The fresh capture was hashed as it was written, so it is the good copy; a stored copy that
/// differs is replaced by renames (atomic: a reader that opened the old file keeps reading
/// it, a new reader sees the new one).
///
/// The caller must hold the GC lock shared. Each file is `fsync`ed here, just before the
/// rename that publishes it (the rename is what makes the name claim "these bytes hash to
/// this digest", so it comes last); a dedupe hit drops the fresh files unsynced, since they
/// are never published and the capture directory holding them is garbage after a crash.
pub(crate) fn publish_object(
    layout: &Layout,
    digest: &Digest,
    data: &Path,
    index: &Path,
) -> Result<Published, IoError> {
    let dir = layout.object_dir(digest);
    if !layout::exists(&dir)? {
        layout::create_private_dir(&dir)?;
        // The new `objects/<2 hex>` entry must be durable before a record names what is in it.
        if let Some(objects) = dir.parent() {
            fault::point("before syncing a new object directory's parent");
            fsync_dir(objects)?;
        }
    }
    let object = layout.object(digest);
    let object_idx = layout.index(digest);
    let published = if !layout::exists(&object)? {
        Published::New
    } else if stored_copy_is_intact(&object, &object_idx, index) {
        // Refresh the mtime so the object counts as young again for the grace period; the
        // temp files are dropped with the capture directory. Setting explicit times needs
        // ownership, not write access (futimens), so a read-only handle does it: an object
        // someone made read-only (0400) is still deduplicated.
        let f = crate::read::open_no_follow(&object).at("open", &object)?;
        fault::point("before refreshing the mtime of a deduplicated object");
        f.set_modified(SystemTime::now())
            .at("refresh the mtime of", &object)?;
        // Another process may have renamed it into place and not yet synced the directory:
        // the record about to name it must not become durable before the object's entry.
        let found = (*digest, f.metadata().at("inspect", &object)?.ino());
        if !layout.synced_objects().contains(&found) {
            fsync_dir(&dir)?;
            layout.synced_objects().insert(found);
        }
        return Ok(Published::Deduplicated);
    } else {
        Published::Repaired
    };
    // A publication tried again after a full disk may have moved the index already.
    let moved = !layout::exists(index)? && layout::exists(&object_idx)?;
    if !moved {
        sync_path(index)?;
        clear_directory(&object_idx)?;
        fault::fail_io("publishing an index").at("publish index", &object_idx)?;
        rename(index, &object_idx, "publish index")?;
        fsync_dir(&dir)?;
    }
    sync_path(data)?;
    clear_directory(&object)?;
    fault::fail_io("publishing an object").at("publish object", &object)?;
    rename(data, &object, "publish object")?;
    fsync_dir(&dir)?;
    if let Ok(meta) = fs::symlink_metadata(&object) {
        layout.synced_objects().insert((*digest, meta.ino()));
    }
    Ok(published)
}

/// The objects of one store that this process published, or found and synced, and whose
/// directory it has synced since, by digest and inode (an object GC removed and another
/// process published again is another file): a dedupe hit on one of them needs no directory
/// sync of its own. Bounded: when full it starts over (a forgotten entry only costs a
/// directory sync).
#[derive(Debug, Default)]
pub(crate) struct SyncedObjects(Mutex<HashSet<(Digest, u64)>>);

impl SyncedObjects {
    const MAX: usize = 4096;

    fn contains(&self, object: &(Digest, u64)) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(object)
    }

    fn insert(&self, object: (Digest, u64)) {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if set.len() >= Self::MAX {
            set.clear();
        }
        set.insert(object);
    }

    /// Forgets everything, as a process that published nothing would know (tests).
    #[cfg(test)]
    pub(crate) fn forget(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// Removes a directory sitting where a file is about to be renamed (a rename cannot replace
/// a directory with a file). Anything else at `path` is replaced by the rename itself.
fn clear_directory(path: &Path) -> Result<(), IoError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path).at("remove the directory at", path),
        _ => Ok(()),
    }
}

/// Whether the stored object and its index read back exactly as the fresh capture would:
/// both owner-only regular files (not symlinks), the stored index byte for byte equal to the
/// fresh one (it is determined by the content: header with digest, length and line count, one
/// entry per block), and every stored block matching the CRC-32 of its fresh entry, which
/// also proves the object's length.
///
/// Costs one sequential read of the stored copy (CRC-32 runs far faster than the disk), not a
/// re-hash. Any error reading the stored copy counts as damage: replacing it with the fresh
/// copy is always safe.
fn stored_copy_is_intact(object: &Path, stored_index: &Path, fresh_index: &Path) -> bool {
    let check = || -> io::Result<bool> {
        let fresh_len = fs::metadata(fresh_index)?.len();
        let mut fresh = io::BufReader::with_capacity(COMPARE_CHUNK, File::open(fresh_index)?);
        let mut stored = io::BufReader::with_capacity(
            COMPARE_CHUNK,
            open_private_file(stored_index, Some(fresh_len))?,
        );
        let mut raw = [0u8; HEADER_LEN];
        fresh.read_exact(&mut raw)?;
        let header = IndexHeader::decode(&raw).map_err(io::Error::other)?;
        let object = open_private_file(object, Some(header.total_bytes))?;
        let mut stored_raw = [0u8; HEADER_LEN];
        stored.read_exact(&mut stored_raw)?;
        if stored_raw != raw {
            return Ok(false);
        }
        let mut buf = vec![0u8; header.block_size as usize];
        let (mut fresh_entry, mut stored_entry) = ([0u8; ENTRY_LEN], [0u8; ENTRY_LEN]);
        for block in 0..header.block_count() {
            fresh.read_exact(&mut fresh_entry)?;
            stored.read_exact(&mut stored_entry)?;
            if fresh_entry != stored_entry {
                return Ok(false);
            }
            let entry = IndexEntry::decode(block, &fresh_entry).map_err(io::Error::other)?;
            let (start, end) = header.block_range(block);
            let buf = &mut buf[..(end - start) as usize];
            object.read_exact_at(buf, start)?;
            if index::block_crc(buf) != entry.crc {
                return Ok(false);
            }
        }
        Ok(true)
    };
    check().unwrap_or(false)
}

/// Read size when comparing a stored index with a fresh one.
const COMPARE_CHUNK: usize = 64 * 1024;

/// Opens `path` for reading without following a symlink and checks that it is a regular
/// file with no group or other access and, when given, exactly `len` bytes long.
fn open_private_file(path: &Path, len: Option<u64>) -> io::Result<File> {
    let file = crate::read::open_no_follow(path)?;
    let meta = file.metadata()?;
    let ok = meta.is_file()
        && meta.permissions().mode() & 0o077 == 0
        && len.is_none_or(|len| meta.len() == len);
    if ok {
        Ok(file)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an owner-only regular file of the expected length",
        ))
    }
}
