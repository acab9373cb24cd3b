//! Listing recorded runs, newest first.

use std::time::SystemTime;

use agentrun_core::ResultRecord;

use crate::backend::Backend;
use crate::store::{Store, StoreError, parse_record, record_ids};

/// One recorded run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunEntry {
    /// The run id (`agentrun show RUN_ID`).
    pub run_id: String,
    /// When the record was written: the end of the run.
    pub finished: SystemTime,
    /// The record.
    pub record: ResultRecord,
}

/// A record among the most recent that could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub struct UnreadableRun {
    /// The run id its file is named after.
    pub run_id: String,
    /// Why it could not be read: [`StoreError::CorruptRecord`],
    /// [`StoreError::RecordFormatUnknown`], [`StoreError::RecordTooLarge`] or an I/O error.
    pub error: StoreError,
}

/// What [`Store::recent_runs`] found: the runs it read, and the records it could not read.
/// One damaged record never hides the others.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RunListing {
    /// The runs read, newest first.
    pub runs: Vec<RunEntry>,
    /// The records that could not be read, newest first.
    pub unreadable: Vec<UnreadableRun>,
}

impl RunListing {
    /// Whether every record listed was read.
    pub fn is_complete(&self) -> bool {
        self.unreadable.is_empty()
    }
}

impl Store {
    /// The `limit` most recent records, newest first (run ids sort by start time): each one
    /// read is in [`RunListing::runs`], each one that cannot be read (corrupt, of a format
    /// this version does not read, too large, unreadable) in [`RunListing::unreadable`] with
    /// why. A record removed by a concurrent GC is skipped. `Err` only when `records/` itself
    /// cannot be listed.
    pub fn recent_runs(&self, limit: usize) -> Result<RunListing, StoreError> {
        self.with_backend(|backend| recent_runs(backend, limit))
    }
}

/// [`Store::recent_runs`] on one backend.
fn recent_runs(backend: &dyn Backend, limit: usize) -> Result<RunListing, StoreError> {
    let mut listing = RunListing::default();
    for run_id in record_ids(backend)?.into_iter().rev() {
        if listing.runs.len() + listing.unreadable.len() == limit {
            break;
        }
        let path = backend.record_location(&run_id);
        let read = backend.read_record(&run_id).and_then(|stored| {
            stored
                .map(|s| Ok((parse_record(&path, &s.bytes)?, s.modified)))
                .transpose()
        });
        match read {
            Ok(Some((record, finished))) => listing.runs.push(RunEntry {
                run_id,
                finished,
                record,
            }),
            // Removed by a concurrent GC.
            Ok(None) => {}
            Err(error) => listing.unreadable.push(UnreadableRun { run_id, error }),
        }
    }
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use agentrun_core::{
        CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits,
    };

    use super::*;

    fn capture(store: &Store, bytes: &[u8]) -> ResultRecord {
        let mut session = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        session
            .write_channel(&OutputChannel::Single, bytes)
            .unwrap();
        session
            .finish(CaptureCompletion::Streamed {
                display: None,
                status: CaptureStatus::Succeeded,
            })
            .unwrap()
    }

    #[test]
    fn lists_newest_first_up_to_the_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        assert!(store.recent_runs(10).unwrap().runs.is_empty());
        let ids: Vec<String> = (0..3)
            .map(|i| capture(&store, format!("run {i}\n").as_bytes()).run_id)
            .collect();
        let runs = store.recent_runs(2).unwrap().runs;
        let listed: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()]);
        assert_eq!(runs[0].record.streams()[0].bytes, 6);
    }

    #[test]
    fn one_bad_record_is_reported_beside_the_runs_that_read() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        let old = capture(&store, b"old\n").run_id;
        let newer = capture(&store, b"newer\n").run_id;
        let records = store.root().join("records");
        // Between the two good ones: a truncated record, an unknown format, an oversized file
        // (sparse: no disk space), all newer than `old` and older than `newer`.
        let truncated = format!("{old}-1");
        let bytes = std::fs::read(records.join(format!("{newer}.json"))).unwrap();
        std::fs::write(
            records.join(format!("{truncated}.json")),
            &bytes[..bytes.len() / 2],
        )
        .unwrap();
        let future = format!("{old}-2");
        std::fs::write(
            records.join(format!("{future}.json")),
            br#"{"format": "agentrun.record.v9"}"#,
        )
        .unwrap();
        let huge = format!("{old}-3");
        std::fs::File::create(records.join(format!("{huge}.json")))
            .unwrap()
            .set_len(agentrun_core::record::MAX_RECORD_BYTES + 1)
            .unwrap();

        let listing = store.recent_runs(10).unwrap();
        assert!(!listing.is_complete());
        let read: Vec<&str> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(read, [newer.as_str(), old.as_str()]);
        let bad: Vec<(&str, &StoreError)> = listing
            .unreadable
            .iter()
            .map(|u| (u.run_id.as_str(), &u.error))
            .collect();
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(
            matches!(bad[0], (id, StoreError::RecordTooLarge { .. }) if id == huge),
            "{bad:?}"
        );
        assert!(
            matches!(bad[1], (id, StoreError::RecordFormatUnknown { format, .. })
                if id == future && format == "agentrun.record.v9"),
            "{bad:?}"
        );
        assert!(
            matches!(bad[2], (id, StoreError::CorruptRecord { .. }) if id == truncated),
            "{bad:?}"
        );
        // The limit counts every record listed, read or not: the newest two.
        let two = store.recent_runs(2).unwrap();
        assert_eq!(two.runs.len(), 1);
        assert_eq!(two.unreadable.len(), 1);
        // Reading it by id gives the same error.
        assert!(matches!(
            store.record(&huge),
            Err(StoreError::RecordTooLarge { .. })
        ));
    }
}
