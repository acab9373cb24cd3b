//! Listing recorded runs, newest first.

use std::fs;
use std::io;
use std::time::SystemTime;

use agentrun_core::ResultRecord;

use crate::error::IoError;
use crate::store::{Store, StoreError, parse_record};

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

impl Store {
    /// The `limit` most recent runs, newest first (run ids sort by start time). A record
    /// removed by a concurrent GC is skipped; a corrupt one is an error naming it.
    pub fn recent_runs(&self, limit: usize) -> Result<Vec<RunEntry>, StoreError> {
        let ids = self.records()?;
        let mut runs = Vec::new();
        for run_id in ids.into_iter().rev() {
            if runs.len() == limit {
                break;
            }
            let path = self.layout.record(&run_id);
            let (bytes, finished) = match read_with_mtime(&path) {
                Ok(found) => found,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(IoError::at("read", &path, e).into()),
            };
            let record = parse_record(&path, &bytes)?;
            runs.push(RunEntry {
                run_id,
                finished,
                record,
            });
        }
        Ok(runs)
    }
}

fn read_with_mtime(path: &std::path::Path) -> io::Result<(Vec<u8>, SystemTime)> {
    let file = fs::File::open(path)?;
    let modified = file.metadata()?.modified()?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut &file, &mut bytes)?;
    Ok((bytes, modified))
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
        assert!(store.recent_runs(10).unwrap().is_empty());
        let ids: Vec<String> = (0..3)
            .map(|i| capture(&store, format!("run {i}\n").as_bytes()).run_id)
            .collect();
        let runs = store.recent_runs(2).unwrap();
        let listed: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()]);
        assert_eq!(runs[0].record.streams()[0].bytes, 6);
    }
}
