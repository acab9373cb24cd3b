//! The durable directory of a fan-out and its record. Blocking file code only; the decisions
//! are `agentrun_core::fanout::FanOut`'s.
//!
//! ```text
//! <store>/fanouts/<fanout id>/   0700
//!   record.json                  FanOutRecord, atomically replaced (written at the end)
//!   worktrees/<n>/               attempt n's git worktree or private copy (removed for
//!                                losers unless kept)
//!   state/<n>/                   attempt n's private harness state (a seeded CODEX_HOME)
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use agentrun_core::fanout::FanOutRecord;

use crate::atomic::write_atomic;
use crate::error::{IoContext, IoError};
use crate::layout;
use crate::store::{Store, StoreError};

/// The store's directory of fan-outs.
pub const FANOUTS_DIR: &str = "fanouts";
/// The record file in a fan-out's directory.
pub const RECORD_FILE: &str = "record.json";
/// The largest record read back (a record of thousands of attempts stays far below it).
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Why a fan-out directory or record cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FanOutDirError {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The directory is not private, not a directory, or someone else's.
    #[error(transparent)]
    NotPrivate(#[from] StoreError),
    /// The id cannot name a fan-out.
    #[error("{0:?} is not a fan-out id")]
    InvalidId(String),
    /// There is no fan-out record with this id.
    #[error("no fan-out {id} in the store ({} has no {RECORD_FILE})", .path.display())]
    NotFound {
        /// The id looked for.
        id: String,
        /// Its directory.
        path: PathBuf,
    },
    /// The work could not be run (the runtime's blocking job failed).
    #[error("the fan-out record could not be written")]
    Job(#[source] std::io::Error),
    /// The record cannot be read as one.
    #[error("the fan-out record {} is unusable: {reason}", .path.display())]
    BadRecord {
        /// The record file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A fan-out's directory in the store.
#[derive(Debug, Clone)]
pub struct FanOutDir {
    path: PathBuf,
}

/// A fresh fan-out id, `<unix-millis>-<pid>-<counter>` like run ids: unique, sortable, and
/// safe in a directory name and a git branch name.
#[must_use]
pub fn new_fanout_id() -> String {
    layout::new_run_id()
}

fn dir_of(store: &Store, id: &str) -> Result<PathBuf, FanOutDirError> {
    if !layout::valid_run_id(id) {
        return Err(FanOutDirError::InvalidId(id.to_owned()));
    }
    Ok(store.root().join(FANOUTS_DIR).join(id))
}

impl FanOutDir {
    /// Creates the directory of fan-out `id` in `store` (owner-only, with `worktrees/` and
    /// `state/`).
    pub fn create(store: &Store, id: &str) -> Result<FanOutDir, FanOutDirError> {
        let path = dir_of(store, id)?;
        let fanouts = store.root().join(FANOUTS_DIR);
        layout::create_private_dir(&fanouts)?;
        layout::create_private_dir(&path)?;
        layout::check_private_dir(&path)?;
        let dir = FanOutDir { path };
        for sub in ["worktrees", "state"] {
            layout::create_private_dir(&dir.path.join(sub))?;
        }
        Ok(dir)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where attempt `n`'s worktree (or private copy) goes.
    #[must_use]
    pub fn worktree(&self, n: usize) -> PathBuf {
        self.path.join("worktrees").join(n.to_string())
    }

    /// Attempt `n`'s private harness state directory, created owner-only.
    pub fn state(&self, n: usize) -> Result<PathBuf, FanOutDirError> {
        let path = self.path.join("state").join(n.to_string());
        layout::create_private_dir(&path)?;
        Ok(path)
    }

    /// Atomically replaces the record (temp file, fsync, rename, fsync directory).
    pub fn write_record(&self, record: &FanOutRecord) -> Result<(), FanOutDirError> {
        let mut json =
            serde_json::to_vec_pretty(record).map_err(|e| FanOutDirError::BadRecord {
                path: self.path.join(RECORD_FILE),
                reason: e.to_string(),
            })?;
        json.push(b'\n');
        write_atomic(&self.path, RECORD_FILE, &json)?;
        Ok(())
    }
}

/// Reads the record of fan-out `id` in `store`.
pub fn read_record(store: &Store, id: &str) -> Result<FanOutRecord, FanOutDirError> {
    let dir = dir_of(store, id)?;
    let path = dir.join(RECORD_FILE);
    // O_NOFOLLOW | O_NONBLOCK: a symlink or a FIFO in place of the record is refused without
    // waiting for a writer.
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FanOutDirError::NotFound {
                id: id.to_owned(),
                path: dir,
            });
        }
        Err(e) => return Err(IoError::at("open", &path, e).into()),
    };
    let kind = file.metadata().at("inspect", &path)?.file_type();
    if !kind.is_file() || kind.is_fifo() {
        return Err(FanOutDirError::BadRecord {
            path,
            reason: "not a regular file".to_owned(),
        });
    }
    let mut bytes = Vec::new();
    File::take(file, MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .at("read", &path)?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(FanOutDirError::BadRecord {
            path,
            reason: format!("larger than {} MiB", MAX_RECORD_BYTES >> 20),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| FanOutDirError::BadRecord {
        path,
        reason: e.to_string(),
    })
}

/// Whether `id` names a fan-out with a record in `store`.
#[must_use]
pub fn exists(store: &Store, id: &str) -> bool {
    dir_of(store, id).is_ok_and(|d| fs::symlink_metadata(d.join(RECORD_FILE)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrun_core::fanout::AttemptRecord;

    #[test]
    fn a_record_is_written_and_read_back_and_bad_ids_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        let id = new_fanout_id();
        let dir = FanOutDir::create(&store, &id).unwrap();
        assert!(!exists(&store, &id));
        assert!(matches!(
            read_record(&store, &id),
            Err(FanOutDirError::NotFound { .. })
        ));
        let record = FanOutRecord::new(
            id.clone(),
            vec![AttemptRecord::new("claude", Some("opus".into()))],
            Some(0),
        );
        dir.write_record(&record).unwrap();
        assert!(exists(&store, &id));
        assert_eq!(read_record(&store, &id).unwrap(), record);
        assert!(dir.worktree(3).starts_with(dir.path().join("worktrees")));
        assert!(dir.state(1).unwrap().is_dir());
        for bad in ["../x", "", "a/b"] {
            assert!(matches!(
                read_record(&store, bad),
                Err(FanOutDirError::InvalidId(_))
            ));
        }
        std::fs::write(dir.path().join(RECORD_FILE), "{").unwrap();
        assert!(matches!(
            read_record(&store, &id),
            Err(FanOutDirError::BadRecord { .. })
        ));
    }
}
