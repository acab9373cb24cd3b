//! The store-wide GC lock.
//!
//! `gc.lock` is an advisory `flock`: publishers (finishing captures, creating capture
//! directories) hold it shared for the few renames they do; GC holds it exclusive for its whole
//! mark-and-sweep. So GC never observes a half-published capture, a capture directory whose
//! lock is not yet taken, or a record that is about to be written, and publishers never see an
//! object vanish between "it exists" (dedupe) and "the record points at it".

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;

use crate::error::{IoContext, IoError};
use crate::layout::{FILE_MODE, Layout};

/// A held `gc.lock`; released when dropped (closing the file releases the `flock`).
#[derive(Debug)]
pub(crate) struct GcLock {
    _file: File,
}

impl GcLock {
    /// Blocks until the lock is held shared (no GC running).
    pub(crate) fn shared(layout: &Layout) -> Result<Self, IoError> {
        let (file, path) = open(layout)?;
        file.lock_shared().at("take the shared GC lock", &path)?;
        Ok(Self { _file: file })
    }

    /// Blocks until the lock is held exclusive (no publisher and no other GC running).
    pub(crate) fn exclusive(layout: &Layout) -> Result<Self, IoError> {
        let (file, path) = open(layout)?;
        file.lock().at("take the exclusive GC lock", &path)?;
        Ok(Self { _file: file })
    }
}

fn open(layout: &Layout) -> Result<(File, std::path::PathBuf), IoError> {
    let path = layout.gc_lock();
    // A fresh open file description per lock: flock conflicts between descriptions even inside
    // one process, so a GC and a publisher in the same process still exclude each other.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(&path)
        .at("open", &path)?;
    Ok((file, path))
}
