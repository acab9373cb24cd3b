//! Listing recorded runs, newest first.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

impl RunEntry {
    /// When the run started: the time in its id (ids begin with the capture's start, in
    /// milliseconds since the Unix epoch), else the record's own start, else when it finished.
    pub fn started(&self) -> SystemTime {
        run_id_started(&self.run_id)
            .or_else(|| {
                let run = self.record.run.as_ref()?;
                Some(UNIX_EPOCH + Duration::from_millis(run.started_unix_ms))
            })
            .unwrap_or(self.finished)
    }
}

/// The start time in a run id made by the store (`<unix-millis>-<pid>-<counter>`); `None`
/// for an id of another shape.
pub fn run_id_started(run_id: &str) -> Option<SystemTime> {
    let (millis, rest) = run_id.split_once('-')?;
    if millis.len() != 13 || !millis.bytes().all(|b| b.is_ascii_digit()) || rest.is_empty() {
        return None;
    }
    Some(UNIX_EPOCH + Duration::from_millis(millis.parse().ok()?))
}

/// Whether listing goes on past a record whose id says it started at `started`: runs are
/// listed newest first, so once one started before `since`, every later one did too.
pub(crate) fn before(since: Option<SystemTime>, run_id: &str) -> bool {
    matches!((since, run_id_started(run_id)), (Some(since), Some(started)) if started < since)
}

impl RunListing {
    /// Adds `entry` if it started at or after `since` and `keep` says so.
    pub(crate) fn offer(
        &mut self,
        entry: RunEntry,
        since: Option<SystemTime>,
        keep: &mut dyn FnMut(&RunEntry) -> bool,
    ) {
        if since.is_none_or(|since| entry.started() >= since) && keep(&entry) {
            self.runs.push(entry);
        }
    }

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
        self.recent_runs_where(limit, None, |_| true)
    }

    /// Like [`recent_runs`](Self::recent_runs), listing only the runs that started at or
    /// after `since` ([`RunEntry::started`]) and that `keep` accepts: the `limit` most recent
    /// of those. Records are read newest first until `limit` runs are found or a run started
    /// before `since`. A record that cannot be read is listed among the unreadable (and counts
    /// towards `limit`) whatever the filter, since nobody can tell whether it would match.
    pub fn recent_runs_where(
        &self,
        limit: usize,
        since: Option<SystemTime>,
        mut keep: impl FnMut(&RunEntry) -> bool,
    ) -> Result<RunListing, StoreError> {
        self.with_backend(|backend| recent_runs(backend, limit, since, &mut keep))
    }
}

/// [`Store::recent_runs_where`] on one backend.
fn recent_runs(
    backend: &dyn Backend,
    limit: usize,
    since: Option<SystemTime>,
    keep: &mut dyn FnMut(&RunEntry) -> bool,
) -> Result<RunListing, StoreError> {
    let mut listing = RunListing::default();
    for run_id in record_ids(backend)?.into_iter().rev() {
        if listing.runs.len() + listing.unreadable.len() == limit || before(since, &run_id) {
            break;
        }
        let path = backend.record_location(&run_id);
        let read = backend.read_record(&run_id).and_then(|stored| {
            stored
                .map(|s| Ok((parse_record(&path, &s.bytes)?, s.modified)))
                .transpose()
        });
        match read {
            Ok(Some((record, finished))) => listing.offer(
                RunEntry {
                    run_id,
                    finished,
                    record,
                },
                since,
                keep,
            ),
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
    fn a_filter_lists_the_most_recent_runs_that_match() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        let ids: Vec<String> = ["a\n", "bb\n", "c\n", "dd\n"]
            .iter()
            .map(|out| capture(&store, out.as_bytes()).run_id)
            .collect();
        let long = |r: &RunEntry| r.record.streams()[0].bytes == 3;
        let listed = |l: RunListing| l.runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
        let all = store.recent_runs_where(10, None, long).unwrap();
        assert_eq!(listed(all), [ids[3].clone(), ids[1].clone()]);
        let one = store.recent_runs_where(1, None, long).unwrap();
        assert_eq!(listed(one), [ids[3].clone()]);
        // Every run started after the epoch, none after a time to come.
        let since_epoch = store.recent_runs_where(10, Some(UNIX_EPOCH), |_| true);
        assert_eq!(since_epoch.unwrap().runs.len(), 4);
        let later = SystemTime::now() + Duration::from_secs(3600);
        let none = store.recent_runs_where(10, Some(later), |_| true).unwrap();
        assert!(none.runs.is_empty());
    }

    #[test]
    fn the_start_time_is_read_from_a_run_id() {
        assert_eq!(
            run_id_started("1764512345123-0004821-000000"),
            Some(UNIX_EPOCH + Duration::from_millis(1_764_512_345_123))
        );
        for other in [
            "",
            "abc",
            "1764512345123",
            "176451234512-1",
            "17645123451x3-1",
        ] {
            assert_eq!(run_id_started(other), None, "{other:?}");
        }
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
