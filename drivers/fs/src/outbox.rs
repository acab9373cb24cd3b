//! The spool's outbox: which of the spool's records wait for which bucket.
//!
//! A shared store's spool is a local store's layout under the local home, and the same home
//! may also be used as a local store, or as the spool of other buckets. So a run captured for
//! a bucket is marked, `outbox/<run_id>` holding the bucket's [identity](mark), durably
//! before its record is written; the mark goes after the spool's record does (published, or
//! given up). [`Store::unpublished`](crate::Store::unpublished) lists only the records marked
//! for its bucket: a local run, or one waiting for another bucket, is never sent to this one.
//!
//! A crash between the mark and the record, or between the record's removal and the mark's,
//! leaves a mark that names no record: the spool's `gc` removes it.

use std::fs;
use std::io;

use crate::atomic::{fsync_dir, write_atomic};
use crate::error::{IoContext, IoError};
use crate::layout::{self, Layout, TEMP_SUFFIX};
use crate::special::{Links, RegularReadError, read_regular};
use crate::store::StoreError;

/// Longest mark read back: a header and the longest store identity.
const MAX_MARK_BYTES: u64 = 4096;

/// The first line of every mark: what it is, and its format's version.
const HEADER: &str = "agentrun outbox mark 1\n";

/// Marks `run_id` as waiting for the store `identity` (one line, at most
/// [`MAX_IDENTITY_BYTES`](crate::remote::MAX_IDENTITY_BYTES)), durably. The caller holds the
/// GC lock shared (so the spool's `gc` never sees the mark before the record exists).
pub(crate) fn mark(layout: &Layout, run_id: &str, identity: &str) -> Result<(), IoError> {
    debug_assert!(identity.len() <= crate::remote::MAX_IDENTITY_BYTES && !identity.contains('\n'));
    let dir = layout.outbox();
    if !layout::exists(&dir)? {
        layout::create_private_dir(&dir)?;
        fsync_dir(layout.root())?;
    }
    write_atomic(&dir, run_id, format!("{HEADER}{identity}\n").as_bytes())
}

/// The bucket identity `run_id`'s mark names; `None` when the run has no mark (a local run).
pub(crate) fn destination(layout: &Layout, run_id: &str) -> Result<Option<String>, StoreError> {
    let path = layout.outbox_entry(run_id);
    let corrupt = |detail: String| StoreError::CorruptOutboxMark {
        path: path.clone(),
        detail,
    };
    let bytes = match read_regular(&path, Links::Refuse, MAX_MARK_BYTES) {
        Ok((bytes, _)) => bytes,
        Err(RegularReadError::NotRegular(what)) => {
            return Err(corrupt(format!("it is {what}, not a file agentrun wrote")));
        }
        Err(RegularReadError::TooLarge(_)) => {
            return Err(corrupt(format!("it is longer than {MAX_MARK_BYTES} bytes")));
        }
        Err(RegularReadError::Open(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(RegularReadError::Open(e)) => return Err(IoError::at("open", &path, e).into()),
        Err(RegularReadError::Read(e)) => return Err(IoError::at("read", &path, e).into()),
    };
    let text = String::from_utf8(bytes).map_err(|_| corrupt("it is not UTF-8".to_owned()))?;
    text.strip_prefix(HEADER)
        .and_then(|rest| rest.strip_suffix('\n'))
        .filter(|identity| !identity.is_empty() && !identity.contains('\n'))
        .map(|identity| Some(identity.to_owned()))
        .ok_or_else(|| corrupt("it is not an outbox mark this agentrun writes".to_owned()))
}

/// Removes `run_id`'s mark, once its spool record is gone. A mark already gone is fine.
pub(crate) fn clear(layout: &Layout, run_id: &str) {
    // Best effort: a mark left behind names no record, and the spool's gc removes it.
    let _ = fs::remove_file(layout.outbox_entry(run_id));
}

/// Removes the marks that name no record, and temporary files of interrupted marks. The
/// caller holds the GC lock exclusively: no capture is between its mark and its record.
/// Returns how many entries were removed.
pub(crate) fn sweep(layout: &Layout) -> Result<u64, IoError> {
    let dir = layout.outbox();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(IoError::at("list", &dir, e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.at("list", &dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = match name.strip_suffix(TEMP_SUFFIX) {
            Some(run_id) => layout::valid_run_id(run_id),
            None => layout::valid_run_id(name) && !layout::exists(&layout.record(name))?,
        };
        // Only regular files agentrun names are its own; anything else is left where it is.
        if stale && entry.file_type().at("read", &entry.path())?.is_file() {
            match fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(IoError::at("remove", &entry.path(), e)),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> (tempfile::TempDir, Layout) {
        let tmp = tempfile::tempdir().unwrap();
        let layout = Layout::new(tmp.path().to_owned());
        fs::create_dir(layout.records()).unwrap();
        (tmp, layout)
    }

    #[test]
    fn a_mark_reads_back_and_a_run_without_one_has_no_destination() {
        let (_tmp, layout) = layout();
        assert_eq!(destination(&layout, "r1").unwrap(), None);
        mark(&layout, "r1", "s3://b/p").unwrap();
        assert_eq!(
            destination(&layout, "r1").unwrap().as_deref(),
            Some("s3://b/p")
        );
        clear(&layout, "r1");
        assert_eq!(destination(&layout, "r1").unwrap(), None);
    }

    #[test]
    fn a_mark_that_is_not_a_small_file_is_refused() {
        let (_tmp, layout) = layout();
        mark(&layout, "r1", "s3://b/p").unwrap();
        fs::write(layout.outbox_entry("r2"), vec![b'x'; 5000]).unwrap();
        fs::create_dir(layout.outbox_entry("r3")).unwrap();
        std::os::unix::fs::symlink(layout.outbox_entry("r1"), layout.outbox_entry("r4")).unwrap();
        fs::write(layout.outbox_entry("r5"), [0xff, 0xfe]).unwrap();
        // A bare URL (no header), an empty identity, two lines.
        fs::write(layout.outbox_entry("r6"), "s3://b/p").unwrap();
        fs::write(layout.outbox_entry("r7"), format!("{HEADER}\n")).unwrap();
        fs::write(
            layout.outbox_entry("r8"),
            format!("{HEADER}s3://a\ns3://b\n"),
        )
        .unwrap();
        for (run, says) in [
            ("r2", "longer than 4096 bytes"),
            ("r3", "a directory"),
            ("r4", "a symbolic link"),
            ("r5", "not UTF-8"),
            ("r6", "not an outbox mark"),
            ("r7", "not an outbox mark"),
            ("r8", "not an outbox mark"),
        ] {
            let err = destination(&layout, run).unwrap_err();
            assert!(
                matches!(&err, StoreError::CorruptOutboxMark { .. })
                    && err.to_string().contains(says),
                "{run}: {err}"
            );
        }
    }

    #[test]
    fn sweep_removes_marks_without_records_and_nothing_else() {
        let (_tmp, layout) = layout();
        for run in ["kept", "stale"] {
            mark(&layout, run, "s3://b").unwrap();
        }
        fs::write(layout.record("kept"), b"{}").unwrap();
        fs::write(layout.outbox().join(format!("cut{TEMP_SUFFIX}")), b"s3").unwrap();
        fs::write(layout.outbox().join("not a run id!"), b"mine").unwrap();
        fs::create_dir(layout.outbox().join("dir")).unwrap();
        assert_eq!(sweep(&layout).unwrap(), 2);
        let mut left: Vec<String> = fs::read_dir(layout.outbox())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["dir", "kept", "not a run id!"]);
        // No outbox at all: nothing to do.
        let (_tmp, empty) = self::layout();
        assert_eq!(sweep(&empty).unwrap(), 0);
    }
}
