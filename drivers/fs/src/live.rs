//! Runs in progress: the captures under `captures/<run_id>/`, listed and read while their
//! writer is still appending to them.
//!
//! A capture holds its `lock` (an exclusive `flock`) for its whole life, and removes its
//! directory (before releasing the lock) once the record is written. So a capture whose lock
//! is held is running; one whose lock is free was left by a writer that died. `live.json`,
//! written when the capture starts (and again when the command is known), says when it
//! started, the names of its streams, the command, its directory and label. Captures are always in the local
//! store (the spool of a shared store), so all of this is local.
//!
//! Callers never see the paths: [`Store::live_runs`] lists what the captures hold so far,
//! [`Store::follow_live`] opens one for reading as it grows.

use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{IoContext, IoError};
use crate::layout;
use crate::lock::GcLock;
use crate::names::{self, NameError};
use crate::special::{Links, open_regular};
use crate::store::{Store, StoreError};

/// The description of a capture in progress, in its directory.
pub(crate) const LIVE_FILE: &str = "live.json";

/// What `live.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LiveInfo {
    pub(crate) started_unix_ms: u64,
    /// `(file number, stream name)`: stream `name` is captured in `s<file number>`.
    pub(crate) streams: Vec<(usize, String)>,
    #[serde(default)]
    pub(crate) command: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    #[serde(default)]
    pub(crate) label: Option<String>,
}

impl LiveInfo {
    pub(crate) fn new(streams: Vec<(usize, String)>) -> Self {
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self {
            started_unix_ms,
            streams,
            command: None,
            cwd: None,
            label: None,
        }
    }

    /// Writes `live.json` in `dir` atomically (a temp file renamed over it), so a reader sees
    /// the old description or the new one, never half of one.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), IoError> {
        let path = dir.join(LIVE_FILE);
        let tmp = dir.join(format!("{LIVE_FILE}{}", layout::TEMP_SUFFIX));
        let bytes = serde_json::to_vec(self).map_err(|e| IoError::at("encode", &path, e.into()))?;
        let _ = fs::remove_file(&tmp);
        let mut file = layout::new_private_file().open(&tmp).at("create", &tmp)?;
        io::Write::write_all(&mut file, &bytes).at("write", &tmp)?;
        fs::rename(&tmp, &path).at("rename into place", &path)
    }
}

/// Whether a capture's writer is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LiveState {
    /// The writer holds the capture's lock: the run is in progress.
    Running,
    /// The lock is free but no record was written: the writer died (`agentrun gc` removes
    /// what it left).
    Abandoned,
}

impl LiveState {
    /// `running` or `abandoned`.
    pub fn as_str(self) -> &'static str {
        match self {
            LiveState::Running => "running",
            LiveState::Abandoned => "abandoned",
        }
    }
}

/// One stream of a run in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LiveStream {
    /// Its name (`stdout`, `stderr`; `output` for a run with one stream).
    pub name: String,
    /// The bytes captured so far.
    pub bytes: u64,
}

/// A run in progress (or abandoned by its writer), from its capture.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LiveRun {
    /// The run id its record will have.
    pub run_id: String,
    /// When the capture started.
    pub started: SystemTime,
    /// Whether its writer is still there.
    pub state: LiveState,
    /// The command, once the writer has said it.
    pub command: Option<Vec<String>>,
    /// The directory it runs in, once the writer has said it.
    pub cwd: Option<String>,
    /// Its label, if the writer gave one.
    pub label: Option<String>,
    /// What each stream holds so far, in declaration order.
    pub streams: Vec<LiveStream>,
}

/// A capture in progress opened for reading ([`Store::follow_live`]). It holds the stream
/// files open, so what the writer appended stays readable after the capture is published
/// and its directory removed.
#[derive(Debug)]
pub struct LiveFollower {
    run_id: String,
    lock: File,
    names: Vec<String>,
    files: Vec<File>,
}

impl LiveFollower {
    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The names of the streams, in declaration order (indexes for [`read_at`](Self::read_at)).
    pub fn stream_names(&self) -> &[String] {
        &self.names
    }

    /// The bytes stream `stream` holds so far.
    pub fn len(&self, stream: usize) -> Result<u64, IoError> {
        let name = Path::new(&self.names[stream]);
        Ok(self.files[stream].metadata().at("inspect", name)?.len())
    }

    /// Reads bytes of stream `stream` from `offset` into `buf`; how many (0 at the end so far).
    pub fn read_at(&self, stream: usize, offset: u64, buf: &mut [u8]) -> Result<usize, IoError> {
        let name = Path::new(&self.names[stream]);
        self.files[stream].read_at(buf, offset).at("read", name)
    }

    /// Whether the writer still holds the capture: `false` once it has finished (the record
    /// is then written) or died (then there is no record).
    pub fn is_running(&self) -> Result<bool, IoError> {
        match self.lock.try_lock() {
            Ok(()) => {
                let _ = self.lock.unlock();
                Ok(false)
            }
            Err(TryLockError::WouldBlock) => Ok(true),
            Err(TryLockError::Error(e)) => {
                Err(IoError::at("probe the lock of", Path::new(&self.run_id), e))
            }
        }
    }
}

/// A capture directory opened: its lock, description and stream files.
struct Opened {
    lock: File,
    info: LiveInfo,
    files: Vec<File>,
}

/// Opens the capture in `dir`; `None` when it is gone (published or removed meanwhile) or is
/// still being set up (no description yet).
fn open_capture(dir: &Path) -> Result<Option<Opened>, IoError> {
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    let lock_path = dir.join("lock");
    let lock = match open_regular(&lock_path, Links::Refuse).map_err(crate::special::into_io) {
        Ok((f, _)) => f,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(IoError::at("open", &lock_path, e)),
    };
    let info_path = dir.join(LIVE_FILE);
    let text = match open_regular(&info_path, Links::Refuse)
        .map_err(crate::special::into_io)
        .and_then(|(f, _)| io::read_to_string(f))
    {
        Ok(text) => text,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(IoError::at("read", &info_path, e)),
    };
    let info: LiveInfo = serde_json::from_str(&text).map_err(|e| {
        IoError::at(
            "parse",
            &info_path,
            io::Error::new(io::ErrorKind::InvalidData, e),
        )
    })?;
    let mut files = Vec::with_capacity(info.streams.len());
    for (i, _) in &info.streams {
        let path = dir.join(format!("s{i}"));
        match open_regular(&path, Links::Refuse).map_err(crate::special::into_io) {
            Ok((f, _)) => files.push(f),
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(IoError::at("open", &path, e)),
        }
    }
    Ok(Some(Opened { lock, info, files }))
}

fn state_of(lock: &File, dir: &Path) -> Result<LiveState, IoError> {
    match lock.try_lock() {
        Ok(()) => {
            let _ = lock.unlock();
            Ok(LiveState::Abandoned)
        }
        Err(TryLockError::WouldBlock) => Ok(LiveState::Running),
        Err(TryLockError::Error(e)) => Err(IoError::at("probe the lock in", dir, e)),
    }
}

impl Store {
    /// The ids of the capture directories, oldest first (run ids sort by start time).
    fn capture_ids(&self) -> Result<Vec<String>, IoError> {
        let dir = self.layout.captures();
        let mut ids = Vec::new();
        for entry in fs::read_dir(&dir).at("list", &dir)? {
            let entry = entry.at("list", &dir)?;
            if let Some(id) = entry
                .file_name()
                .to_str()
                .filter(|id| layout::valid_run_id(id))
            {
                ids.push(id.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// The runs in progress in this store, oldest first: each capture with what its streams
    /// hold so far, and whether its writer is still there ([`LiveState`]). A capture that
    /// finishes (or is removed) while it is listed is left out, as is one whose record is
    /// already written.
    pub fn live_runs(&self) -> Result<Vec<LiveRun>, StoreError> {
        // Shared with GC: it neither removes an abandoned capture nor holds its lock while
        // the lock is probed here, and no capture is between "created" and "locked".
        let _gc = GcLock::shared(&self.layout)?;
        let mut runs = Vec::new();
        for run_id in self.capture_ids()? {
            let dir = self.layout.capture(&run_id);
            let Some(opened) = open_capture(&dir)? else {
                continue;
            };
            if layout::exists(&self.layout.record(&run_id))? {
                continue;
            }
            let mut streams = Vec::with_capacity(opened.files.len());
            for ((_, name), file) in opened.info.streams.iter().zip(&opened.files) {
                let bytes = file.metadata().at("inspect", &dir)?.len();
                streams.push(LiveStream {
                    name: name.clone(),
                    bytes,
                });
            }
            runs.push(LiveRun {
                state: state_of(&opened.lock, &dir)?,
                started: UNIX_EPOCH + Duration::from_millis(opened.info.started_unix_ms),
                command: opened.info.command,
                cwd: opened.info.cwd,
                label: opened.info.label,
                streams,
                run_id,
            });
        }
        Ok(runs)
    }

    /// Opens the capture of run `run_id` for reading as it grows; `None` when the run has no
    /// capture (it finished, or never started).
    pub fn follow_live(&self, run_id: &str) -> Result<Option<LiveFollower>, StoreError> {
        if !layout::valid_run_id(run_id) {
            return Ok(None);
        }
        let _gc = GcLock::shared(&self.layout)?;
        let Some(opened) = open_capture(&self.layout.capture(run_id))? else {
            return Ok(None);
        };
        Ok(Some(LiveFollower {
            run_id: run_id.to_owned(),
            lock: opened.lock,
            names: opened.info.streams.into_iter().map(|(_, n)| n).collect(),
            files: opened.files,
        }))
    }

    /// Like [`Store::resolve_run`], among the recorded runs and the runs in progress: `last`
    /// is the newest of either, a prefix must match exactly one.
    pub fn resolve_run_or_live(&self, name: &str) -> Result<String, NameError> {
        let mut ids = self.records()?;
        ids.extend(self.capture_ids().map_err(StoreError::from)?);
        ids.sort();
        ids.dedup();
        if name == names::LAST {
            return ids.pop().ok_or(NameError::NoRuns);
        }
        names::check(name)?;
        let runs = names::matching(ids, name);
        names::one(name, runs, Vec::new(), "run", "runs").map(|n| match n {
            names::Named::Run(id) | names::Named::Session(id) => id,
        })
    }
}

#[cfg(test)]
mod tests {
    use agentrun_core::{
        CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits,
        StreamName,
    };

    use super::*;

    fn named(name: &str) -> OutputChannel {
        OutputChannel::Named(StreamName::new(name).unwrap())
    }

    #[test]
    fn a_capture_in_progress_is_listed_and_read_as_it_grows_until_it_is_published() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        assert!(store.live_runs().unwrap().is_empty());
        let mut session = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        session.announce_run(
            &["echo".to_owned(), "hi".to_owned()],
            Some("/tmp/work"),
            Some("nightly"),
        );
        let out = session.resolve(&named("stdout")).unwrap();
        session.write(out, b"one\n").unwrap();
        let id = session.run_id().to_owned();

        let live = store.live_runs().unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].run_id, id);
        assert_eq!(live[0].state, LiveState::Running);
        assert_eq!(
            live[0].command.as_deref(),
            Some(&["echo".to_owned(), "hi".to_owned()][..])
        );
        assert_eq!(live[0].cwd.as_deref(), Some("/tmp/work"));
        assert_eq!(live[0].label.as_deref(), Some("nightly"));
        let sizes: Vec<(&str, u64)> = live[0]
            .streams
            .iter()
            .map(|s| (s.name.as_str(), s.bytes))
            .collect();
        assert_eq!(sizes, [("stdout", 4), ("stderr", 0)]);
        assert_eq!(store.resolve_run_or_live("last").unwrap(), id);
        assert_eq!(store.resolve_run_or_live(&id[..10]).unwrap(), id);

        let follower = store.follow_live(&id).unwrap().unwrap();
        assert_eq!(follower.stream_names(), ["stdout", "stderr"]);
        assert!(follower.is_running().unwrap());
        session.write(out, b"two\n").unwrap();
        let mut buf = [0u8; 64];
        let n = follower.read_at(0, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"one\ntwo\n");

        session
            .finish(CaptureCompletion::Streamed {
                display: None,
                status: CaptureStatus::Succeeded,
            })
            .unwrap();
        // Finished: no longer listed, the follower sees the end and still reads every byte.
        assert!(store.live_runs().unwrap().is_empty());
        assert!(!follower.is_running().unwrap());
        let n = follower.read_at(0, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"one\ntwo\n");
        assert!(store.follow_live(&id).unwrap().is_none());
        assert_eq!(store.resolve_run_or_live("last").unwrap(), id);
    }

    #[test]
    fn a_capture_whose_lock_is_free_is_listed_as_abandoned() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        // What a writer that died leaves: the directory, its lock file (no longer held),
        // its description and a stream file.
        let dir = store.layout.capture("0000000000001-0000001-000000");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("lock"), b"").unwrap();
        fs::write(dir.join("s0"), b"partial").unwrap();
        LiveInfo::new(vec![(0, "output".to_owned())])
            .write(&dir)
            .unwrap();
        let live = store.live_runs().unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].state, LiveState::Abandoned);
        assert_eq!(live[0].streams[0].bytes, 7);
        let follower = store.follow_live(&live[0].run_id).unwrap().unwrap();
        assert!(!follower.is_running().unwrap());
    }
}
