//! Result sinks (the clean result channel, docs/result-channel.md): allocation under the store's
//! runtime directory, the bounded, verbatim read, and removal. The values (`ResultSink`,
//! `SinkOutcome`) and the classification of the bytes read are in `agentrun_core::sink`; this
//! module does the file work once for every driver.
//!
//! The read never follows a symbolic link, never blocks on a FIFO, never opens a controlling
//! terminal and never reads more than `cap + 1` bytes:
//!
//! 1. `open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)` (for an allocated
//!    sink `openat` in the runtime directory opened at allocation, so swapping the directory
//!    for a link redirects nothing): a symlink at the path fails with `ELOOP` (refused as
//!    [`SinkOutcome::Symlink`]), a FIFO opens without waiting for a writer;
//! 2. `fstat` on the opened descriptor (not the path, so a swap after the open changes
//!    nothing): anything but a regular file is [`SinkOutcome::NotRegularFile`], a file with
//!    more than one hard link [`SinkOutcome::HardLinked`]; a size over the cap is
//!    [`SinkOutcome::Oversize`] without reading a byte;
//! 3. read at most `cap + 1` bytes (a file growing under the read is still bounded), then
//!    [`SinkOutcome::classify`].

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use agentrun_core::sink::{FileKind, ResultSink, SinkOutcome};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::Store;
use crate::error::{IoContext, IoError};
use crate::layout::DIR_MODE;

/// Prefix of a runtime directory being removed (renamed aside first, see `remove_owned`).
const REMOVING_PREFIX: &str = ".removing-";

/// How many times removal is retried while a leftover process keeps adding entries.
const REMOVE_ATTEMPTS: usize = 50;

/// File name of a runner-allocated sink inside its runtime directory.
const SINK_FILE: &str = "result";

/// The sink of one run: the path exported to the child, and for a runner-allocated sink the
/// runtime directory that holds it. Dropping it removes an allocated sink with its directory
/// (best effort); a caller-supplied path is never touched.
#[derive(Debug)]
pub struct PreparedSink {
    path: PathBuf,
    /// The runtime directory the runner created (`runtime/<run_id>`), if it allocated.
    owned_dir: Option<PathBuf>,
    /// That directory, opened when it was created: the read looks the sink up in it, so a
    /// child that swaps the directory for a link to another one cannot redirect the read.
    dir_fd: Option<OwnedFd>,
}

impl PreparedSink {
    /// The path exported to the child.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the runner allocated the path (and removes it).
    pub fn is_allocated(&self) -> bool {
        self.owned_dir.is_some()
    }

    /// Reads the sink verbatim under `cap` (see the module documentation).
    pub fn read(&self, cap: u64) -> (SinkOutcome, Option<String>) {
        match &self.dir_fd {
            Some(dir) => read_with(
                |flags| rustix::fs::openat(dir, SINK_FILE, flags, Mode::empty()),
                || rustix::fs::statat(dir, SINK_FILE, AtFlags::SYMLINK_NOFOLLOW).ok(),
                &self.path,
                cap,
            ),
            None => read_sink(&self.path, cap),
        }
    }

    /// Removes an allocated sink and its runtime directory, whatever the child left there
    /// (a file, a FIFO, a directory tree, a symlink: links are removed, never followed).
    pub fn remove(mut self) -> Result<(), IoError> {
        self.remove_owned()
    }

    fn remove_owned(&mut self) -> Result<(), IoError> {
        let Some(dir) = self.owned_dir.take() else {
            return Ok(());
        };
        // A process the run left behind may still be writing or swapping links at the sink
        // path. Move the directory aside first (one atomic rename): the path the child knows
        // stops resolving, so nothing new appears under it, and the run's own name is free
        // whatever happens next.
        let aside = match dir.file_name() {
            Some(name) => {
                let mut aside = std::ffi::OsString::from(REMOVING_PREFIX);
                aside.push(name);
                dir.with_file_name(aside)
            }
            None => dir.clone(),
        };
        let target = match fs::rename(&dir, &aside) {
            Ok(()) => aside,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) => dir,
        };
        // A writer holding the directory open can still add entries between the listing and
        // the final rmdir (ENOTEMPTY): try again, a bounded number of times.
        let mut last = None;
        for _ in 0..REMOVE_ATTEMPTS {
            match fs::remove_dir_all(&target) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        let e = last.unwrap_or_else(|| io::Error::other("no attempt made"));
        // Owner-only and no longer named after the run; `agentrun gc` removes it later.
        Err(IoError::at(
            "remove the result-sink directory (a process is still writing in it; gc removes it later)",
            &target,
            e,
        ))
    }
}

impl Drop for PreparedSink {
    fn drop(&mut self) {
        let _ = self.remove_owned();
    }
}

impl Store {
    /// Prepares the result sink of run `run_id`: for [`ResultSink::Allocate`] a fresh
    /// owner-only (0700) directory `runtime/<run_id>/` (created exclusively, so never shared
    /// with another run) and the path `runtime/<run_id>/result` in it, which does not exist
    /// yet; for [`ResultSink::Path`] the caller's path, which must not exist yet
    /// ([`StoreError::SinkPathExists`](crate::StoreError::SinkPathExists) otherwise: an
    /// earlier answer there would pass for this run's, and deleting it would destroy the
    /// caller's file).
    pub fn prepare_sink(
        &self,
        sink: &ResultSink,
        run_id: &str,
    ) -> Result<PreparedSink, crate::StoreError> {
        match sink {
            ResultSink::Path(path) => {
                // Anything there (a file, a link, a directory) is refused rather than read as
                // this run's answer or deleted.
                match fs::symlink_metadata(path) {
                    Ok(_) => {
                        return Err(crate::StoreError::SinkPathExists { path: path.clone() });
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).at("check the result-sink path", path)?,
                }
                Ok(PreparedSink {
                    path: path.clone(),
                    owned_dir: None,
                    dir_fd: None,
                })
            }
            ResultSink::Allocate => {
                if !crate::layout::valid_run_id(run_id) {
                    return Err(crate::StoreError::InvalidRunId(run_id.to_owned()));
                }
                let dir = self.runtime_dir().join(run_id);
                fs::DirBuilder::new()
                    .mode(DIR_MODE)
                    .create(&dir)
                    .at("create the result-sink directory", &dir)?;
                // The umask may have removed owner bits; set the mode explicitly.
                fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(DIR_MODE))
                    .at("set the mode of", &dir)?;
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let dir_fd = rustix::fs::open(&dir, flags, Mode::empty())
                    .map_err(io::Error::from)
                    .at("open the result-sink directory", &dir)?;
                Ok(PreparedSink {
                    path: dir.join(SINK_FILE),
                    owned_dir: Some(dir),
                    dir_fd: Some(dir_fd),
                })
            }
        }
    }
}

/// Reads the sink at `path` verbatim: `O_NOFOLLOW | O_NONBLOCK` open, `fstat` regular-file,
/// single-link and size check, at most `cap + 1` bytes read, then [`SinkOutcome::classify`]. Never
/// fails: an I/O problem is [`SinkOutcome::Error`].
pub fn read_sink(path: &Path, cap: u64) -> (SinkOutcome, Option<String>) {
    read_with(
        |flags| rustix::fs::open(path, flags, Mode::empty()),
        || rustix::fs::lstat(path).ok(),
        path,
        cap,
    )
}

/// The read of [`read_sink`], with the sink opened by `open` (given the flags) and inspected
/// without following a link by `lstat`; `path` names it in messages.
fn read_with(
    open: impl FnOnce(OFlags) -> Result<OwnedFd, Errno>,
    lstat: impl FnOnce() -> Option<rustix::fs::Stat>,
    path: &Path,
    cap: u64,
) -> (SinkOutcome, Option<String>) {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match open(flags) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return (SinkOutcome::Unwritten, None),
        // ELOOP is what O_NOFOLLOW gives for a final symlink; ENXIO is a socket (or a FIFO
        // opened for writing). Say which from the link itself.
        Err(e @ (Errno::LOOP | Errno::NXIO)) => {
            let kind = lstat().map(|st| FileType::from_raw_mode(st.st_mode));
            return (classify_unopenable(kind, path, e), None);
        }
        Err(e) => return (error(path, "open", e.into()), None),
    };
    let stat = match rustix::fs::fstat(&fd) {
        Ok(stat) => stat,
        Err(e) => return (error(path, "inspect", e.into()), None),
    };
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return (
            SinkOutcome::NotRegularFile {
                kind: file_kind(kind),
            },
            None,
        );
    }
    // O_NOFOLLOW stops a symlink; a hard link to another of the user's files would pass every
    // other check, so a file that is linked elsewhere too is refused as well.
    #[allow(clippy::useless_conversion)] // nlink_t is narrower than u64 on some platforms
    let links = u64::from(stat.st_nlink);
    if links > 1 {
        return (SinkOutcome::HardLinked { links }, None);
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > cap {
        return (SinkOutcome::Oversize { size, cap }, None);
    }
    let limit = cap.saturating_add(1);
    // Sized from fstat (at most the cap), plus one byte to see growth past the cap.
    let mut bytes = Vec::with_capacity(usize::try_from(size + 1).unwrap_or(0));
    let mut file = File::from(fd);
    if let Err(e) = (&mut file).take(limit).read_to_end(&mut bytes) {
        return (error(path, "read", e), None);
    }
    SinkOutcome::classify(bytes, cap)
}

/// The outcome for a sink `open` refused with `errno`, given what sits there (`kind`, from a
/// stat that does not follow links).
fn classify_unopenable(kind: Option<FileType>, path: &Path, errno: Errno) -> SinkOutcome {
    match kind {
        Some(FileType::Symlink) => SinkOutcome::Symlink,
        Some(FileType::Socket) => SinkOutcome::NotRegularFile {
            kind: FileKind::Socket,
        },
        Some(FileType::Fifo) => SinkOutcome::NotRegularFile {
            kind: FileKind::Fifo,
        },
        _ => error(path, "open", errno.into()),
    }
}

fn file_kind(kind: FileType) -> FileKind {
    match kind {
        FileType::Directory => FileKind::Directory,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::CharacterDevice => FileKind::CharDevice,
        FileType::BlockDevice => FileKind::BlockDevice,
        _ => FileKind::Other,
    }
}

fn error(path: &Path, op: &'static str, e: io::Error) -> SinkOutcome {
    SinkOutcome::Error {
        message: IoError::at(op, path, e).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        (tmp, store)
    }

    #[test]
    fn allocated_sinks_are_private_unique_and_removed() {
        let (_tmp, store) = store();
        let a = store.prepare_sink(&ResultSink::Allocate, "run-a").unwrap();
        let b = store.prepare_sink(&ResultSink::Allocate, "run-b").unwrap();
        assert_ne!(a.path(), b.path());
        let dir = a.path().parent().unwrap().to_owned();
        assert_eq!(dir.parent().unwrap(), store.runtime_dir());
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert!(!a.path().exists(), "the child creates the file");
        // The same run id cannot be allocated twice.
        assert!(store.prepare_sink(&ResultSink::Allocate, "run-a").is_err());
        fs::create_dir_all(a.path().join("deep/er")).unwrap();
        a.remove().unwrap();
        assert!(!dir.exists());
        let dir_b = b.path().parent().unwrap().to_owned();
        drop(b);
        assert!(!dir_b.exists(), "dropping removes too");
    }

    #[test]
    fn gc_removes_the_sink_directories_of_dead_runs_only() {
        use agentrun_core::{OutputDeclaration, PreviewLimits};
        let (_tmp, store) = store();
        let session = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let live = store
            .prepare_sink(&ResultSink::Allocate, session.run_id())
            .unwrap();
        // A crashed run's leftovers: a sink directory with no capture.
        let dead = store.runtime_dir().join("0000000000000-0000001-000000");
        fs::create_dir(&dead).unwrap();
        fs::write(dead.join("result"), "old").unwrap();
        let report = store.gc(&crate::GcOptions::default()).unwrap();
        assert_eq!(report.runtime_dirs_removed, 1);
        assert!(!dead.exists());
        assert!(
            live.path().parent().unwrap().exists(),
            "a live run keeps its sink"
        );
        drop(session);
    }

    #[test]
    fn a_caller_path_must_not_exist_and_is_left_alone_after() {
        let (tmp, store) = store();
        let path = tmp.path().join("mine");
        fs::write(&path, "stale answer of an earlier run").unwrap();
        let err = store
            .prepare_sink(&ResultSink::Path(path.clone()), "r")
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&err, crate::StoreError::SinkPathExists { path: p } if *p == path),
            "{err}"
        );
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"stale answer of an earlier run");
        fs::remove_file(&path).unwrap();
        let sink = store
            .prepare_sink(&ResultSink::Path(path.clone()), "r")
            .unwrap();
        assert!(!sink.is_allocated());
        fs::write(&path, "answer").unwrap();
        assert_eq!(sink.read(100).1.as_deref(), Some("answer"));
        sink.remove().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"answer");
    }

    #[test]
    fn swapping_the_runtime_directory_for_a_link_does_not_redirect_the_read() {
        let (tmp, store) = store();
        let sink = store.prepare_sink(&ResultSink::Allocate, "run-x").unwrap();
        let dir = sink.path().parent().unwrap().to_owned();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join(SINK_FILE), "not the child's file").unwrap();
        let moved = tmp.path().join("moved");
        fs::rename(&dir, &moved).unwrap();
        symlink(&elsewhere, &dir).unwrap();
        assert_eq!(sink.read(100), (SinkOutcome::Unwritten, None));
        fs::write(moved.join(SINK_FILE), "the answer").unwrap();
        assert_eq!(
            sink.read(100),
            (
                SinkOutcome::Read { bytes: 10 },
                Some("the answer".to_owned())
            )
        );
        sink.remove().unwrap();
        assert!(fs::symlink_metadata(&dir).is_err(), "the link is removed");
        assert!(elsewhere.join(SINK_FILE).exists(), "never followed");
    }

    #[test]
    fn read_refuses_links_and_special_files() {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tmp.path().join("secret");
        fs::write(&secret, "s3cret").unwrap();
        let link = tmp.path().join("link");
        symlink(&secret, &link).unwrap();
        assert_eq!(read_sink(&link, 100), (SinkOutcome::Symlink, None));
        let dangling = tmp.path().join("dangling");
        symlink(tmp.path().join("nowhere"), &dangling).unwrap();
        assert_eq!(read_sink(&dangling, 100), (SinkOutcome::Symlink, None));
        // A hard link passes O_NOFOLLOW and is a regular file: refused by its link count.
        let hard = tmp.path().join("hard");
        fs::hard_link(&secret, &hard).unwrap();
        assert_eq!(
            read_sink(&hard, 100),
            (SinkOutcome::HardLinked { links: 2 }, None)
        );
        assert_eq!(
            read_sink(tmp.path(), 100).0,
            SinkOutcome::NotRegularFile {
                kind: FileKind::Directory
            }
        );
        assert_eq!(
            read_sink(Path::new("/dev/null"), 100).0,
            SinkOutcome::NotRegularFile {
                kind: FileKind::CharDevice
            }
        );
        let fifo = tmp.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(
            read_sink(&fifo, 100).0,
            SinkOutcome::NotRegularFile {
                kind: FileKind::Fifo
            }
        );
        let sock = tmp.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(
            read_sink(&sock, 100).0,
            SinkOutcome::NotRegularFile {
                kind: FileKind::Socket
            }
        );
        assert_eq!(
            read_sink(&tmp.path().join("missing"), 100),
            (SinkOutcome::Unwritten, None)
        );
    }

    #[test]
    fn read_is_bounded_by_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big");
        let file = File::create(&path).unwrap();
        file.set_len(1 << 40).unwrap(); // sparse: reading it would take hours
        assert_eq!(
            read_sink(&path, 16 << 20),
            (
                SinkOutcome::Oversize {
                    size: 1 << 40,
                    cap: 16 << 20
                },
                None
            )
        );
        fs::write(&path, "12345").unwrap();
        assert_eq!(read_sink(&path, 5).1.as_deref(), Some("12345"));
        assert!(matches!(
            read_sink(&path, 4).0,
            SinkOutcome::Oversize { size: 5, cap: 4 }
        ));
    }

    #[test]
    fn removal_wins_against_a_process_swapping_links_at_the_sink_path() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (_tmp, store) = store();
        for round in 0..20 {
            let id = format!("race-{round}");
            let sink = store.prepare_sink(&ResultSink::Allocate, &id).unwrap();
            let path = sink.path().to_owned();
            let dir = path.parent().unwrap().to_owned();
            let stop = AtomicBool::new(false);
            std::thread::scope(|scope| {
                // What a grandchild left running does: swap a link and a file at the path,
                // as fast as it can, while the run finishes.
                scope.spawn(|| {
                    let tmp = dir.join("swap");
                    while !stop.load(Ordering::Relaxed) {
                        let _ = symlink("/etc/passwd", &tmp);
                        let _ = fs::rename(&tmp, &path);
                        let _ = fs::write(&tmp, b"x");
                        let _ = fs::rename(&tmp, &path);
                    }
                });
                std::thread::sleep(std::time::Duration::from_millis(2));
                let removed = sink.remove();
                stop.store(true, Ordering::Relaxed);
                removed.unwrap();
            });
            assert!(!dir.exists(), "round {round}");
            let left: Vec<_> = fs::read_dir(store.runtime_dir()).unwrap().collect();
            assert!(left.is_empty(), "round {round}: {left:?}");
        }
    }
}
