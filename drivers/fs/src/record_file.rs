//! Reading a record file: the one way every record is read (by [`Store::record`],
//! [`Store::recent_runs`], GC and verify), bounded by
//! [`MAX_RECORD_BYTES`](agentrun_core::record::MAX_RECORD_BYTES).
//!
//! [`Store::record`]: crate::Store::record
//! [`Store::recent_runs`]: crate::Store::recent_runs

use std::fs;
use std::io;
use std::path::Path;

use agentrun_core::record::MAX_RECORD_BYTES;

use crate::error::IoError;
use crate::special::{Links, RegularReadError, read_regular};
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
    // No final symlink followed, and no waiting for a writer on a FIFO: both are refused.
    match read_regular(path, Links::Refuse, limit) {
        Ok((bytes, meta)) => Ok(RecordFile { bytes, meta }),
        Err(RegularReadError::NotRegular(what)) => Err(StoreError::CorruptRecord {
            path: path.to_owned(),
            detail: format!("it is {what}, not a record file"),
        }),
        Err(RegularReadError::TooLarge(size)) => Err(StoreError::RecordTooLarge {
            path: path.to_owned(),
            size,
            limit,
        }),
        Err(RegularReadError::Open(e)) => Err(IoError::at("open", path, e).into()),
        Err(RegularReadError::Read(e)) => Err(IoError::at("read", path, e).into()),
    }
}

#[cfg(test)]
mod tests {
    use agentrun_core::capture::{MAX_DISPLAY_BYTES, MAX_FAULT_BYTES, MAX_FAULTS};
    use agentrun_core::limits::{MAX_LINES, MAX_PAYLOAD_BYTES};
    use agentrun_core::process::{Exit, MAX_COMMAND_BYTES, RunInfo, RunOutcome};
    use agentrun_core::record::MAX_KEEPS;
    use agentrun_core::stream::{MAX_STREAM_NAME_LEN, MAX_STREAMS};
    use agentrun_core::{
        CaptureCompletion, CaptureStatus, Digest, OutputChannel, OutputDeclaration, PreviewLimits,
        StreamName,
    };

    use super::*;
    use crate::Store;

    /// The writer side of the bound: a record with every field at its largest, of the bytes
    /// that grow most in JSON (control bytes, six bytes each), is written and read back.
    #[test]
    fn a_record_at_every_maximum_is_written_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let limits = PreviewLimits {
            max_lines: MAX_LINES,
            max_bytes: MAX_PAYLOAD_BYTES,
            max_payload_bytes: MAX_PAYLOAD_BYTES,
            tail_lines: MAX_LINES,
        };
        let names: Vec<String> = (0..MAX_STREAMS)
            .map(|i| format!("{i}{}", "n".repeat(MAX_STREAM_NAME_LEN - 1)))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut session = store
            .begin_capture(OutputDeclaration::named(&names).unwrap(), limits)
            .unwrap();
        // Lines of control bytes, past each stream's budget so head and tail are both full.
        let mut line = vec![1u8; 4095];
        line.push(b'\n');
        let body = line.repeat(limits.stream_budget(MAX_STREAMS) / line.len() + 2);
        for name in &names {
            let channel = OutputChannel::Named(StreamName::new(name).unwrap());
            session.write_channel(&channel, &body).unwrap();
        }
        let control = |n: usize| "\u{1}".repeat(n);
        for _ in 0..MAX_FAULTS + 1 {
            session
                .record_fault(None, &control(MAX_FAULT_BYTES))
                .unwrap();
        }
        // Empty words cost the most per counted byte: quotes, comma, newline and indentation.
        let mut command = vec![String::new(); MAX_COMMAND_BYTES - 1];
        command[0] = "p".to_owned();
        session
            .describe_run(RunInfo {
                command,
                outcome: RunOutcome::Completed,
                exit: Some(Exit::Code(i32::MIN)),
                started_unix_ms: u64::MAX,
                duration_ms: u64::MAX,
                cwd: Some(control(agentrun_core::process::MAX_CWD_BYTES)),
                label: Some(control(agentrun_core::process::MAX_LABEL_BYTES)),
            })
            .unwrap();
        session.keep((0..MAX_KEEPS as u64).map(|i| Digest::of(&i.to_le_bytes())));
        let record = session
            .finish(CaptureCompletion::Streamed {
                display: Some(control(MAX_DISPLAY_BYTES)),
                status: CaptureStatus::Succeeded,
            })
            .unwrap();
        assert!(record.streams().iter().all(|s| s.tail.is_some()));
        let path = store.layout.record(&record.run_id);
        let size = fs::metadata(&path).unwrap().len();
        // Near the bound, and within it.
        assert!(size > MAX_RECORD_BYTES * 3 / 4, "{size}");
        assert_eq!(store.record(&record.run_id).unwrap(), record);
    }

    #[test]
    fn fields_past_their_bound_are_refused_where_they_enter_and_nothing_is_lost() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let mut session = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        session
            .write_channel(&OutputChannel::Single, b"kept\n")
            .unwrap();
        let err = session
            .describe_run(RunInfo {
                command: vec!["x".repeat(MAX_COMMAND_BYTES)],
                outcome: RunOutcome::Completed,
                exit: None,
                started_unix_ms: 0,
                duration_ms: 0,
                cwd: None,
                label: None,
            })
            .unwrap_err();
        assert!(
            matches!(err, StoreError::CommandTooLong { bytes } if bytes == MAX_COMMAND_BYTES + 1),
            "{err:?}"
        );
        let label = agentrun_core::process::MAX_LABEL_BYTES + 1;
        let err = session
            .describe_run(RunInfo {
                command: vec!["x".to_owned()],
                outcome: RunOutcome::Completed,
                exit: None,
                started_unix_ms: 0,
                duration_ms: 0,
                cwd: None,
                label: Some("l".repeat(label)),
            })
            .unwrap_err();
        assert!(
            matches!(err, StoreError::RunFieldTooLong { what: "label", bytes, .. } if bytes == label),
            "{err:?}"
        );
        let err = session
            .finish(CaptureCompletion::Streamed {
                display: Some("d".repeat(MAX_DISPLAY_BYTES + 1)),
                status: CaptureStatus::Succeeded,
            })
            .unwrap_err();
        let StoreError::CompletionRejected { error, run_id } = &err else {
            panic!("{err:?}");
        };
        assert!(
            matches!(error, agentrun_core::CaptureError::DisplayTooLong { bytes }
                if *bytes == MAX_DISPLAY_BYTES + 1),
            "{err:?}"
        );
        // The output is kept, marked incomplete, with the reason and no run description.
        let record = store.record(run_id).unwrap();
        assert!(record.incomplete);
        assert!(
            record.faults[0].message.contains("final display"),
            "{record:?}"
        );
        assert_eq!(record.streams()[0].preview.text, "kept\n");
        assert!(record.run.is_none());
        assert_eq!(record.display(), "");

        // A full completion's outputs are kept too when its display is refused.
        let session = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let err = session
            .finish(CaptureCompletion::Full {
                display: Some("d".repeat(MAX_DISPLAY_BYTES + 1)),
                status: CaptureStatus::Succeeded,
                outputs: agentrun_core::FullOutput::Single(b"given in full\n".to_vec()),
            })
            .unwrap_err();
        let StoreError::CompletionRejected { run_id, .. } = &err else {
            panic!("{err:?}");
        };
        let record = store.record(run_id).unwrap();
        assert!(record.incomplete);
        assert_eq!(record.streams()[0].preview.text, "given in full\n");
        assert_eq!(record.display(), "");
    }

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
            (&fifo, "a FIFO"),
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
