//! The durable directory of an auto-mode session: its state, its log and its mailbox of
//! appended instructions. Blocking file code only; the decisions are
//! `agentrun_core::auto_mode::AutoMode`'s.
//!
//! ```text
//! <session dir>/                 0700
//!   state.json                   AutoModeState, atomically replaced after every transition
//!   auto_mode.log                one line per event, appended
//!   append/                      pending instructions: any regular file not starting with `.`
//!   appended/                    instructions already embedded in a prompt
//! ```
//!
//! By default sessions live in the store, `<store>/sessions/<session id>/`. Instructions are
//! dropped by [`SessionDir::drop_instruction`] as a hidden temporary file renamed into place,
//! so a reader never sees half an instruction.

use std::collections::BinaryHeap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use agentrun_core::auto_mode::sanitize::MAX_INPUT_BYTES;
use agentrun_core::auto_mode::{AppendedFile, AutoModeState};

use crate::atomic::{fsync_dir, write_atomic};
use crate::error::{IoContext, IoError};
use crate::layout::{self, TEMP_SUFFIX};
use crate::store::{Store, StoreError};

/// The state file.
pub const STATE_FILE: &str = "state.json";
/// The log file.
pub const LOG_FILE: &str = "auto_mode.log";
/// The directory of pending instructions.
pub const APPEND_DIR: &str = "append";
/// The directory of embedded instructions.
pub const APPENDED_DIR: &str = "appended";
/// The largest `state.json` read back (the state keeps bounded histories, so it stays far
/// below this).
pub const MAX_STATE_BYTES: u64 = 16 << 20;
/// The most pending instructions one collection returns, whatever `max_files` asks for: it
/// bounds the names held while `append/` is scanned.
const MAX_APPEND_FILES: usize = 4096;

/// Why a session directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The directory is not private, not a directory, or someone else's.
    #[error(transparent)]
    NotPrivate(#[from] StoreError),
    /// The directory already holds a session.
    #[error(
        "{} already holds an auto-mode session: continue it with `agentrun auto --continue {}` or choose another --session-dir",
        .path.display(), .path.display()
    )]
    Exists {
        /// The session directory.
        path: PathBuf,
    },
    /// No session there.
    #[error("no auto-mode session at {}: it has no {STATE_FILE}", .path.display())]
    NotFound {
        /// The directory looked at.
        path: PathBuf,
    },
    /// `state.json` cannot be used.
    #[error("the session state {} is unusable: {reason}", .path.display())]
    BadState {
        /// The state file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An instruction is too large to drop.
    #[error("the instruction is {size} bytes; at most {max} are accepted")]
    InstructionTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
}

/// The store's directory of sessions.
pub const SESSIONS_DIR: &str = "sessions";

/// An auto-mode session directory.
#[derive(Debug, Clone)]
pub struct SessionDir {
    path: PathBuf,
}

/// A fresh session id, `<unix-millis>-<pid>-<counter>` like run ids: unique, sortable, and
/// safe as a directory name.
#[must_use]
pub fn new_session_id() -> String {
    layout::new_run_id()
}

impl SessionDir {
    /// The default directory of session `id` in `store`: `<store>/sessions/<id>`, with
    /// `sessions/` created owner-only. `None` when `id` is not a valid session id.
    pub fn default_path(store: &Store, id: &str) -> Result<Option<PathBuf>, SessionError> {
        if !layout::valid_run_id(id) {
            return Ok(None);
        }
        let sessions = store.root().join(SESSIONS_DIR);
        layout::create_private_dir(&sessions)?;
        Ok(Some(sessions.join(id)))
    }

    /// The directory a user's `SESSION` argument names: a path when it contains `/` or names
    /// an existing directory, else the session id in `store`.
    pub fn resolve(store: &Store, session: &str) -> Result<PathBuf, SessionError> {
        let as_path = Path::new(session);
        if session.contains('/') || layout::exists(as_path)? {
            return Ok(as_path.to_owned());
        }
        match SessionDir::default_path(store, session)? {
            Some(path) => Ok(path),
            None => Err(SessionError::NotFound {
                path: as_path.to_owned(),
            }),
        }
    }

    /// Creates a new session directory at `path` (owner-only, with `append/` and
    /// `appended/`). An existing empty directory is used if it is private; one holding a
    /// session is refused.
    pub fn create(path: impl Into<PathBuf>) -> Result<SessionDir, SessionError> {
        let path = path.into();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).at("create directory", parent)?;
        }
        layout::create_private_dir(&path)?;
        layout::check_private_dir(&path)?;
        let dir = SessionDir { path };
        if layout::exists(&dir.state_path())? {
            return Err(SessionError::Exists { path: dir.path });
        }
        for sub in [APPEND_DIR, APPENDED_DIR] {
            layout::create_private_dir(&dir.path.join(sub))?;
        }
        fsync_dir(&dir.path)?;
        Ok(dir)
    }

    /// Opens an existing session directory (it must be private and hold `state.json`).
    /// Missing `append/` or `appended/` directories are recreated.
    pub fn open(path: impl Into<PathBuf>) -> Result<SessionDir, SessionError> {
        let path = path.into();
        if !layout::exists(&path)? {
            return Err(SessionError::NotFound { path });
        }
        layout::check_private_dir(&path)?;
        let dir = SessionDir { path };
        if !layout::exists(&dir.state_path())? {
            return Err(SessionError::NotFound { path: dir.path });
        }
        for sub in [APPEND_DIR, APPENDED_DIR] {
            layout::create_private_dir(&dir.path.join(sub))?;
        }
        Ok(dir)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `state.json`.
    #[must_use]
    pub fn state_path(&self) -> PathBuf {
        self.path.join(STATE_FILE)
    }

    /// `auto_mode.log`.
    #[must_use]
    pub fn log_path(&self) -> PathBuf {
        self.path.join(LOG_FILE)
    }

    /// Atomically replaces `state.json` (temp file, fsync, rename, fsync directory): a crash
    /// leaves the previous state or the new one, never a mix.
    pub fn write_state(&self, state: &AutoModeState) -> Result<(), SessionError> {
        let mut json = serde_json::to_vec_pretty(state).map_err(|e| SessionError::BadState {
            path: self.state_path(),
            reason: e.to_string(),
        })?;
        json.push(b'\n');
        write_atomic(&self.path, STATE_FILE, &json)?;
        Ok(())
    }

    /// Reads `state.json` (at most [`MAX_STATE_BYTES`]).
    pub fn read_state(&self) -> Result<AutoModeState, SessionError> {
        let path = self.state_path();
        let bytes = match read_regular_capped(&path, MAX_STATE_BYTES)? {
            Some(bytes) => bytes,
            None => {
                return Err(SessionError::BadState {
                    path,
                    reason: "not a regular file".to_owned(),
                });
            }
        };
        if bytes.len() as u64 > MAX_STATE_BYTES {
            return Err(SessionError::BadState {
                path,
                reason: format!("larger than {MAX_STATE_BYTES} bytes"),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| SessionError::BadState {
            path,
            reason: e.to_string(),
        })
    }

    /// Appends one line to `auto_mode.log`.
    pub fn append_log(&self, line: &str) -> Result<(), SessionError> {
        let path = self.log_path();
        let mut f = layout::append_private_file(&path)?;
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        f.write_all(&bytes).at("append to", &path)?;
        Ok(())
    }

    /// Reads up to `max_files` (at most 4096) pending instructions of `append/`: the first in
    /// name order (the oldest, for the names [`drop_instruction`](Self::drop_instruction)
    /// gives) among the regular files whose names do not start with `.` (temporary files of a
    /// writer), each read up to the sanitizer's input bound and decoded lossily. Symlinks,
    /// FIFOs and other entries are skipped (and stay where they are). The whole directory is
    /// scanned, holding only the `max_files` smallest names seen so far, so however many files
    /// wait, the oldest come first.
    pub fn pending_instructions(
        &self,
        max_files: usize,
    ) -> Result<Vec<AppendedFile>, SessionError> {
        let dir = self.path.join(APPEND_DIR);
        let keep = max_files.min(MAX_APPEND_FILES);
        // A max-heap of the `keep` smallest names: a smaller name evicts the largest.
        let mut smallest: BinaryHeap<String> = BinaryHeap::with_capacity(keep + 1);
        for entry in fs::read_dir(&dir).at("list", &dir)? {
            let entry = entry.at("list", &dir)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            // The entry's own type (a symlink is not followed): only regular files count, so
            // a directory full of special files cannot push instructions out.
            let regular = entry.file_type().is_ok_and(|t| t.is_file());
            if name.starts_with('.') || !regular {
                continue;
            }
            if smallest.len() < keep {
                smallest.push(name);
            } else if smallest.peek().is_some_and(|largest| name < *largest) {
                smallest.pop();
                smallest.push(name);
            }
        }
        let names = smallest.into_sorted_vec();
        let mut files = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let Some(bytes) = read_regular_capped(&path, MAX_INPUT_BYTES as u64)? else {
                continue;
            };
            files.push(AppendedFile {
                name,
                text: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        Ok(files)
    }

    /// Moves embedded instructions from `append/` to `appended/`. A name already taken in
    /// `appended/` gets a numeric suffix rather than replacing the earlier file.
    pub fn archive_instructions(&self, names: &[String]) -> Result<(), SessionError> {
        let from_dir = self.path.join(APPEND_DIR);
        let to_dir = self.path.join(APPENDED_DIR);
        for name in names {
            let from = from_dir.join(name);
            let mut to = to_dir.join(name);
            let mut n = 1;
            while layout::exists(&to)? {
                to = to_dir.join(format!("{name}.{n}"));
                n += 1;
            }
            match fs::rename(&from, &to) {
                Ok(()) => {}
                // Archived already (a continued session re-collected it): nothing to move.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(IoError::at("archive", &from, e).into()),
            }
        }
        fsync_dir(&to_dir)?;
        fsync_dir(&from_dir)?;
        Ok(())
    }

    /// Drops an instruction into `append/` for the next Execute turn, written under a hidden
    /// temporary name and renamed into place. Returns the file name.
    pub fn drop_instruction(&self, text: &[u8]) -> Result<String, SessionError> {
        if text.len() > MAX_INPUT_BYTES {
            return Err(SessionError::InstructionTooLarge {
                size: text.len(),
                max: MAX_INPUT_BYTES,
            });
        }
        let dir = self.path.join(APPEND_DIR);
        layout::create_private_dir(&dir)?;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{millis:013}-{:07}-{n:04}.md", std::process::id());
        let tmp = dir.join(format!(".{name}{TEMP_SUFFIX}"));
        let mut f = layout::new_private_file().open(&tmp).at("create", &tmp)?;
        f.write_all(text).at("write", &tmp)?;
        f.sync_all().at("sync", &tmp)?;
        let target = dir.join(&name);
        fs::rename(&tmp, &target).at("rename into place", &target)?;
        fsync_dir(&dir)?;
        Ok(name)
    }
}

/// Reads at most `cap + 1` bytes of a regular file without following a final symlink and
/// without blocking on a FIFO. `None` for anything but a regular file.
fn read_regular_capped(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, IoError> {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        // ELOOP: a symlink; ENXIO: a socket.
        Err(e)
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
                || e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(IoError::at("open", path, e)),
    };
    let kind = file.metadata().at("inspect", path)?.file_type();
    if !kind.is_file() || kind.is_fifo() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    File::take(file, cap + 1)
        .read_to_end(&mut bytes)
        .at("read", path)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn create_refuses_a_directory_that_holds_a_session() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s");
        let dir = SessionDir::create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::write(dir.state_path(), "{}").unwrap();
        assert!(matches!(
            SessionDir::create(&path),
            Err(SessionError::Exists { .. })
        ));
    }

    #[test]
    fn open_needs_a_state_file_and_a_private_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s");
        SessionDir::create(&path).unwrap();
        assert!(matches!(
            SessionDir::open(&path),
            Err(SessionError::NotFound { .. })
        ));
        fs::write(path.join(STATE_FILE), "{}").unwrap();
        SessionDir::open(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        let err = SessionDir::open(&path).unwrap_err();
        assert!(matches!(err, SessionError::NotPrivate(_)), "{err}");
    }

    #[test]
    fn pending_instructions_skip_hidden_and_special_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionDir::create(tmp.path().join("s")).unwrap();
        let append = dir.path().join(APPEND_DIR);
        fs::write(append.join("b.md"), "second").unwrap();
        fs::write(append.join("a.md"), "first").unwrap();
        fs::write(append.join(".c.md.tmp"), "half").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", append.join("d.md")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            append.join("e.fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let files = dir.pending_instructions(10).unwrap();
        let names: Vec<_> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a.md", "b.md"]);
        assert_eq!(files[0].text, "first");
        assert_eq!(dir.pending_instructions(1).unwrap().len(), 1);
    }

    #[test]
    fn pending_instructions_are_the_oldest_however_many_files_wait() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionDir::create(tmp.path().join("s")).unwrap();
        let append = dir.path().join(APPEND_DIR);
        // More files than one collection may hold, created oldest first (tmpfs lists the
        // newest first; other file systems in hash order): the oldest must still come first.
        let count = 2 * MAX_APPEND_FILES + 100;
        for i in 0..count {
            fs::write(append.join(format!("{i:06}.md")), "x").unwrap();
        }
        // Special entries sorting first do not take their places.
        fs::create_dir(append.join("000000-dir")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", append.join("000000-link")).unwrap();
        let names = |n| -> Vec<String> {
            let files = dir.pending_instructions(n).unwrap();
            files.into_iter().map(|f| f.name).collect()
        };
        let expected: Vec<String> = (0..10).map(|i| format!("{i:06}.md")).collect();
        assert_eq!(names(10), expected);
        let all = names(usize::MAX);
        assert_eq!(all.len(), MAX_APPEND_FILES, "bounded whatever is asked");
        assert_eq!(all.first().map(String::as_str), Some("000000.md"));
        assert!(all.is_sorted());
    }

    #[test]
    fn archive_moves_and_never_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionDir::create(tmp.path().join("s")).unwrap();
        let first = dir.drop_instruction(b"one").unwrap();
        fs::write(dir.path().join(APPEND_DIR).join("x"), "new").unwrap();
        fs::write(dir.path().join(APPENDED_DIR).join("x"), "old").unwrap();
        dir.archive_instructions(&[first.clone(), "x".to_owned(), "gone".to_owned()])
            .unwrap();
        let appended = dir.path().join(APPENDED_DIR);
        assert_eq!(fs::read_to_string(appended.join(&first)).unwrap(), "one");
        assert_eq!(fs::read_to_string(appended.join("x")).unwrap(), "old");
        assert_eq!(fs::read_to_string(appended.join("x.1")).unwrap(), "new");
        assert!(dir.pending_instructions(10).unwrap().is_empty());
    }

    #[test]
    fn state_round_trips_and_a_damaged_state_is_an_error() {
        use agentrun_core::auto_mode::{AutoMode, Settings};
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionDir::create(tmp.path().join("s")).unwrap();
        let settings = Settings {
            objective: "o".into(),
            harness: "claude".into(),
            model: None,
            effort: None,
            harness_args: vec!["--permission-mode".into(), "acceptEdits".into()],
            verify: Some("true".into()),
            workspace: None,
            max_turns: 5,
            result_sink_var: "AGENTRUN_RESULT_SINK".into(),
            harness_resumes: true,
            max_retries: 0,
            retry_backoff_ms: 30_000,
        };
        let machine = AutoMode::new("id-1", settings, UNIX_EPOCH).unwrap();
        dir.write_state(machine.state()).unwrap();
        dir.write_state(machine.state()).unwrap();
        assert_eq!(&dir.read_state().unwrap(), machine.state());
        let mode = fs::metadata(dir.state_path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            !dir.path()
                .join(format!("{STATE_FILE}{TEMP_SUFFIX}"))
                .exists()
        );
        fs::write(dir.state_path(), "{\"format\": 1").unwrap();
        let err = dir.read_state().unwrap_err();
        assert!(matches!(err, SessionError::BadState { .. }), "{err}");
        dir.append_log("one").unwrap();
        dir.append_log("two").unwrap();
        assert_eq!(fs::read_to_string(dir.log_path()).unwrap(), "one\ntwo\n");
    }

    #[test]
    fn oversize_instructions_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SessionDir::create(tmp.path().join("s")).unwrap();
        let err = dir
            .drop_instruction(&vec![b'a'; MAX_INPUT_BYTES + 1])
            .unwrap_err();
        assert!(matches!(err, SessionError::InstructionTooLarge { .. }));
    }
}
