//! Crash-safe writes: every file becomes visible under its final name only after its bytes are
//! on disk.
//!
//! The pattern is always: write a temporary file in the same file system, `fsync` it, `rename`
//! it into place, `fsync` the directory. A SIGKILL (or power loss) at any point leaves either
//! no file under the final name or the complete one, never a partial one.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use agentrun_core::Digest;

use crate::error::{IoContext, IoError};
use crate::layout::{self, Layout, TEMP_SUFFIX};

/// Makes the entries of `dir` (creations, renames, removals) durable.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), IoError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .at("sync directory", dir)
}

/// Writes a new owner-only file holding `bytes` and syncs it. The file must not exist.
pub(crate) fn write_new_file(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let mut f = layout::new_private_file().open(path).at("create", path)?;
    f.write_all(bytes).at("write", path)?;
    f.sync_all().at("sync", path)
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
    write_new_file(&tmp, bytes)?;
    fs::rename(&tmp, &target).at("rename into place", &target)?;
    fsync_dir(dir)
}

/// What [`publish_object`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    /// The object was new and is now in place.
    New,
    /// The object already existed (dedupe hit); its mtime was refreshed.
    Deduplicated,
}

/// Moves a synced capture file (`data`) and its synced index (`index`) into
/// `objects/` under `digest`, index first: an object is never visible without its index.
///
/// The caller must hold the GC lock shared and must have `fsync`ed both files: the rename is
/// what makes the name claim "these bytes hash to this digest", so it comes last.
pub(crate) fn publish_object(
    layout: &Layout,
    digest: &Digest,
    data: &Path,
    index: &Path,
) -> Result<Published, IoError> {
    let dir = layout.object_dir(digest);
    layout::create_private_dir(&dir)?;
    let object = layout.object(digest);
    let object_idx = layout.index(digest);
    let object_exists = layout::exists(&object)?;
    if !object_exists || !layout::exists(&object_idx)? {
        fs::rename(index, &object_idx).at("publish index", &object_idx)?;
        fsync_dir(&dir)?;
    }
    if object_exists {
        // Dedupe hit. Refresh the mtime so the object counts as young again for the grace
        // period; the temp files are dropped with the capture directory.
        let f = File::options()
            .write(true)
            .open(&object)
            .at("open", &object)?;
        f.set_modified(SystemTime::now())
            .at("refresh the mtime of", &object)?;
        return Ok(Published::Deduplicated);
    }
    fs::rename(data, &object).at("publish object", &object)?;
    fsync_dir(&dir)?;
    Ok(Published::New)
}
