//! Reading a record file: the one way every record is read (by [`Store::record`],
//! [`Store::recent_runs`], GC and verify), bounded by
//! [`MAX_RECORD_BYTES`](agentrun_core::record::MAX_RECORD_BYTES).
//!
//! [`Store::record`]: crate::Store::record
//! [`Store::recent_runs`]: crate::Store::recent_runs

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use agentrun_core::record::MAX_RECORD_BYTES;
use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::error::{IoContext, IoError};
use crate::gc::describe_type;
use crate::store::StoreError;

/// The bytes of a record file, and what `fstat` said about the file they were read from.
#[derive(Debug)]
pub(crate) struct RecordFile {
    pub(crate) bytes: Vec<u8>,
    pub(crate) meta: fs::Metadata,
}

/// Reads the record file at `path`, refusing one larger than [`MAX_RECORD_BYTES`].
///
/// A missing file is a [`StoreError::Io`] of kind `NotFound` ([`is_not_found`]); anything but a
/// regular file (a directory, a FIFO, a symbolic link: the store writes none of these) is
/// [`StoreError::CorruptRecord`].
pub(crate) fn read(path: &Path) -> Result<RecordFile, StoreError> {
    read_bounded(path, MAX_RECORD_BYTES)
}

/// Whether a [`read`] failed because the file is not there (removed by a concurrent GC, or
/// never written).
pub(crate) fn is_not_found(e: &StoreError) -> bool {
    matches!(e, StoreError::Io(io) if io.kind() == io::ErrorKind::NotFound)
}

/// [`read`] with the limit as a parameter, so tests can exercise it on small files.
fn read_bounded(path: &Path, limit: u64) -> Result<RecordFile, StoreError> {
    let not_a_record = |meta: &fs::Metadata| StoreError::CorruptRecord {
        path: path.to_owned(),
        detail: format!("it is {}, not a record file", describe_type(meta)),
    };
    // No final symlink followed, and no waiting for a writer on a FIFO: both are refused below.
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        // ELOOP: a symlink; ENXIO: a socket. Say which from the entry itself.
        Err(e)
            if [Errno::LOOP, Errno::NXIO]
                .map(|n| Some(n.raw_os_error()))
                .contains(&e.raw_os_error()) =>
        {
            let meta = fs::symlink_metadata(path).at("inspect", path)?;
            return Err(not_a_record(&meta));
        }
        Err(e) => return Err(IoError::at("open", path, e).into()),
    };
    let meta = file.metadata().at("inspect", path)?;
    if !meta.is_file() {
        return Err(not_a_record(&meta));
    }
    let too_large = |size: u64| StoreError::RecordTooLarge {
        path: path.to_owned(),
        size,
        limit,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    // Sized from fstat (at most the limit); one byte past the limit shows a file that grew
    // since, or whose size fstat does not tell.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    File::take(file, limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .at("read", path)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(RecordFile { bytes, meta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_at_the_limit_is_read_and_one_byte_more_is_refused_by_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r.json");
        fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap().bytes, b"0123456789");
        let err = read_bounded(&path, 9).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::RecordTooLarge {
                    size: 10,
                    limit: 9,
                    ..
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains("is 10 bytes, more than the 9 bytes"),
            "{message}"
        );
    }

    #[test]
    fn a_file_longer_than_its_size_says_is_refused_after_limit_plus_one_bytes() {
        // procfs files report size 0 and hold more: the reader stops at the limit all the
        // same, as for a file that grows after it was inspected.
        let path = Path::new("/proc/self/status");
        let err = read_bounded(path, 16).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::RecordTooLarge {
                    size: 17,
                    limit: 16,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo.json");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RWXU).unwrap();
        let link = tmp.path().join("link.json");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        for (path, what) in [
            (&fifo, "a special file"),
            (&link, "a symbolic link"),
            (&tmp.path().to_owned(), "a directory"),
        ] {
            let err = read(path).unwrap_err();
            assert!(
                matches!(&err, StoreError::CorruptRecord { detail, .. } if detail.contains(what)),
                "{path:?}: {err:?}"
            );
        }
        let missing = read(&tmp.path().join("gone.json")).unwrap_err();
        assert!(is_not_found(&missing), "{missing:?}");
    }
}
