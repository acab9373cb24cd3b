//! Where each attempt of a fan-out runs, and the git work around it: blocking code, called
//! on the runtime's blocking pool.
//!
//! In a git repository every attempt gets a worktree on a new branch from the base commit;
//! outside one, a private copy of the workspace. Git operations that take repository locks
//! (`worktree add`, the attempt's commit, `worktree remove`, `branch -D`) hold an exclusive
//! `flock` on a file in the repository's common git directory while they run, so attempts of
//! one fan-out, and of fan-outs started by other agentrun processes, never race on
//! `.git/config.lock`, `packed-refs.lock` or a ref lock; a lock error from a git outside
//! agentrun's control is retried a few times.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use agentrun_core::fanout::Changes;

/// The lock file agentrun takes in a repository's common git directory.
pub(crate) const LOCK_FILE: &str = "agentrun-fanout.lock";

/// Why an attempt's isolation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IsolationError {
    /// git could not be run.
    #[error("cannot run git")]
    Spawn(#[source] io::Error),
    /// A git command failed.
    #[error("`git {command}` failed: {stderr}")]
    Git {
        /// The command, without `git`.
        command: String,
        /// Its last stderr lines.
        stderr: String,
    },
    /// A file operation failed (the lock, the private copy, the harness state).
    #[error("{what} {}", .path.display())]
    Io {
        /// What was done.
        what: &'static str,
        /// To which path.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// git's output could not be read.
    #[error("unexpected output of `git {command}`: {why}")]
    Output {
        /// The command.
        command: String,
        /// What was wrong.
        why: String,
    },
}

fn io_err<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> IsolationError + 'p {
    move |source| IsolationError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// The repository a workspace belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Repo {
    /// The workspace's top level.
    pub(crate) top: PathBuf,
    /// The common git directory (where the lock file lives).
    pub(crate) common_dir: PathBuf,
    /// The commit every attempt starts from.
    pub(crate) base: String,
    /// Whether commits need a fallback identity (none is configured).
    pub(crate) needs_identity: bool,
    /// The workspace relative to the top level (attempts run at the same place in their
    /// worktree).
    pub(crate) prefix: PathBuf,
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .stdin(Stdio::null())
        // No pager, no prompt for credentials, no editor: nothing may wait for a terminal.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env("GIT_EDITOR", "true");
    c
}

fn describe(args: &[&OsStr]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

fn last_lines(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

/// What `git status --porcelain=v2 --branch -z` says: the commit checked out, and whether
/// anything is changed, staged or untracked. The headers (`# ...`) come before the entries,
/// so the commit is read before the first entry ends the reading.
fn read_status(out: &[u8]) -> Result<(String, bool), String> {
    let mut head = None;
    for field in out.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        match field.strip_prefix(b"# ") {
            Some(header) => {
                if let Some(oid) = header.strip_prefix(b"branch.oid ") {
                    head = Some(String::from_utf8_lossy(oid).into_owned());
                }
            }
            None => {
                let head = head.ok_or("an entry before the branch header")?;
                return Ok((head, true));
            }
        }
    }
    Ok((head.ok_or("no branch header")?, false))
}

/// `git status` as the attempt's change is counted: porcelain, with the commit checked out
/// and untracked files one by one. Run without optional locks, so that it never writes the
/// worktree's index (a refresh is only a speed-up for later commands, and it would contend with
/// any git of the agent's that is still around).
const STATUS: [&str; 6] = [
    "--no-optional-locks",
    "status",
    "--porcelain=v2",
    "--branch",
    "--untracked-files=all",
    "-z",
];

/// A `git status` of an attempt's worktree started as soon as its harness's group ended, so
/// that it runs while the harness's record is published instead of after it. Each start
/// replaces the one before (a retried harness run ends again), so the status taken is of the
/// worktree after the last run.
#[derive(Debug, Default)]
pub(crate) struct EarlyStatus(Mutex<Option<Child>>);

impl EarlyStatus {
    /// Starts the status of `worktree` (a failure to spawn leaves none: the count then runs
    /// it itself).
    pub(crate) fn start(&self, worktree: &Path) {
        let child = git(worktree)
            .args(STATUS)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok();
        let old = std::mem::replace(
            &mut *self.0.lock().unwrap_or_else(|p| p.into_inner()),
            child,
        );
        if let Some(old) = old {
            stop(old);
        }
    }

    /// The started status's output, if one was started and succeeded.
    fn take(&self) -> Option<Output> {
        let child = self.0.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        child.wait_with_output().ok().filter(|o| o.status.success())
    }
}

impl Drop for EarlyStatus {
    /// A status nobody took (the attempt was dropped, or ended in an error) is stopped and
    /// reaped, so that a long-lived caller (the MCP server) keeps no zombie.
    fn drop(&mut self) {
        if let Some(child) = self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            stop(child);
        }
    }
}

/// Stops a status no longer wanted and reaps it.
fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `git -C dir ARGS`, returning its output when it exits 0; a failure caused by a lock
/// another git holds is retried (up to five times, 200 ms apart).
fn run_git(dir: &Path, args: &[&OsStr]) -> Result<Output, IsolationError> {
    let mut tries = 0;
    loop {
        let output = git(dir)
            .args(args)
            .output()
            .map_err(IsolationError::Spawn)?;
        if output.status.success() {
            return Ok(output);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let locked = stderr.contains(".lock': File exists") || stderr.contains("Unable to create");
        if locked && tries < 5 {
            tries += 1;
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        return Err(IsolationError::Git {
            command: describe(args),
            stderr: last_lines(&output.stderr),
        });
    }
}

fn stdout_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_owned()
}

/// The exclusive lock on a repository, held while a git operation that takes its locks runs.
pub(crate) struct RepoLock(#[allow(dead_code)] File);

impl Repo {
    /// The repository `workspace` is in, `None` outside one (or without git).
    pub(crate) fn discover(workspace: &Path) -> Result<Option<Repo>, IsolationError> {
        let probe = git(workspace)
            .args([
                "rev-parse",
                "--show-toplevel",
                "--git-common-dir",
                "--show-prefix",
            ])
            .stderr(Stdio::null())
            .output();
        let output = match probe {
            Ok(o) if o.status.success() => o,
            // No git, or not a repository: the workspace is copied instead.
            _ => return Ok(None),
        };
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut lines = text.lines();
        let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
            return Err(IsolationError::Output {
                command: "rev-parse --show-toplevel --git-common-dir".to_owned(),
                why: format!("{text:?}"),
            });
        };
        let prefix = PathBuf::from(lines.next().unwrap_or(""));
        let top = PathBuf::from(top);
        let common = Path::new(common);
        let common_dir = if common.is_absolute() {
            common.to_owned()
        } else {
            workspace.join(common)
        };
        // A repository without a commit has no HEAD to branch from: that is an error, not a
        // reason to copy (the user asked for a repository's isolation).
        let base = stdout_line(&run_git(
            &top,
            &["rev-parse", "--verify", "HEAD^{commit}"].map(OsStr::new),
        )?);
        let needs_identity = git(&top)
            .args(["config", "user.email"])
            .output()
            .map(|o| !o.status.success() || o.stdout.trim_ascii().is_empty())
            .unwrap_or(true);
        Ok(Some(Repo {
            top,
            common_dir,
            base,
            needs_identity,
            prefix,
        }))
    }

    /// Takes the repository's lock (blocking until it is free).
    pub(crate) fn lock(&self) -> Result<RepoLock, IsolationError> {
        let path = self.common_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("cannot open the repository lock", &path))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_err("cannot lock", &path)(e.into()))?;
        Ok(RepoLock(file))
    }

    /// Creates `path` as a worktree on the new branch `branch` at the base commit.
    pub(crate) fn add_worktree(&self, path: &Path, branch: &str) -> Result<(), IsolationError> {
        let _lock = self.lock()?;
        run_git(
            &self.top,
            &[
                OsStr::new("worktree"),
                OsStr::new("add"),
                OsStr::new("--quiet"),
                OsStr::new("-b"),
                OsStr::new(branch),
                path.as_os_str(),
                OsStr::new(&self.base),
            ],
        )?;
        Ok(())
    }

    /// Commits everything the attempt left in its worktree (untracked files too, ignored ones
    /// not) on its branch, without hooks or signing, so the branch holds the change ready to
    /// merge; then counts the change against the base.
    ///
    /// `early` is the status started when the harness ended, if any (one that failed is run
    /// again here, where a lock held by another git is waited out).
    pub(crate) fn commit_and_count(
        &self,
        worktree: &Path,
        message: &str,
        early: Option<&EarlyStatus>,
    ) -> Result<Changes, IsolationError> {
        // One `git status` first: an attempt that changed nothing and committed nothing (a
        // failed or stopped one, often) is then counted without the three commands below.
        let status = match early.and_then(EarlyStatus::take) {
            Some(output) => output,
            None => run_git(worktree, &STATUS.map(OsStr::new))?,
        };
        let (head, dirty) = read_status(&status.stdout).map_err(|why| IsolationError::Output {
            command: "status --porcelain=v2".to_owned(),
            why,
        })?;
        if !dirty && head == self.base {
            return Ok(Changes::default());
        }
        if dirty {
            let _lock = self.lock()?;
            run_git(worktree, &["add", "-A"].map(OsStr::new))?;
            let staged = git(worktree)
                .args(["diff", "--cached", "--quiet"])
                .status()
                .map_err(IsolationError::Spawn)?;
            if !staged.success() {
                let mut args: Vec<&OsStr> = Vec::new();
                if self.needs_identity {
                    args.extend(
                        [
                            "-c",
                            "user.name=agentrun",
                            "-c",
                            "user.email=agentrun@localhost",
                        ]
                        .map(OsStr::new),
                    );
                }
                args.extend(
                    [
                        "-c",
                        "commit.gpgsign=false",
                        "commit",
                        "--quiet",
                        "--no-verify",
                        "-m",
                        message,
                    ]
                    .map(OsStr::new),
                );
                run_git(worktree, &args)?;
            }
        }
        let numstat = run_git(
            worktree,
            &["diff", "--numstat", &self.base, "HEAD"].map(OsStr::new),
        )?;
        Changes::from_numstat(&String::from_utf8_lossy(&numstat.stdout)).map_err(|why| {
            IsolationError::Output {
                command: "diff --numstat".to_owned(),
                why,
            }
        })
    }

    /// Removes a worktree and its branch.
    pub(crate) fn remove(&self, path: &Path, branch: &str) -> Result<(), IsolationError> {
        let _lock = self.lock()?;
        let removed = run_git(
            &self.top,
            &[
                OsStr::new("worktree"),
                OsStr::new("remove"),
                OsStr::new("--force"),
                OsStr::new("--force"),
                path.as_os_str(),
            ],
        );
        if removed.is_err() {
            // A worktree git no longer knows (its directory was deleted by hand): drop what
            // is left of it and prune its bookkeeping.
            if path.exists() {
                fs::remove_dir_all(path).map_err(io_err("cannot remove", path))?;
            }
            run_git(&self.top, &["worktree", "prune"].map(OsStr::new))?;
        }
        run_git(
            &self.top,
            &["branch", "-D", "--quiet", branch].map(OsStr::new),
        )?;
        Ok(())
    }
}

/// Copies the directory `from` to the new directory `to`: files with their permissions,
/// symbolic links as links (never followed), subdirectories; anything else (sockets, FIFOs,
/// devices) is left out.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), IsolationError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(to)
        .map_err(io_err("cannot create", to))?;
    for entry in fs::read_dir(from).map_err(io_err("cannot read", from))? {
        let entry = entry.map_err(io_err("cannot read", from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(io_err("cannot inspect", &src))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            let target = fs::read_link(&src).map_err(io_err("cannot read", &src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io_err("cannot create", &dst))?;
        } else if kind.is_file() {
            fs::copy(&src, &dst).map_err(io_err("cannot copy", &src))?;
        }
    }
    Ok(())
}

/// Counts what a private copy changed against the workspace (`git diff --no-index`; `None`
/// without git).
pub(crate) fn count_copy(workspace: &Path, copy: &Path) -> Option<Changes> {
    let output = Command::new("git")
        .args(["diff", "--no-index", "--numstat", "--"])
        .arg(workspace)
        .arg(copy)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    // 0: no difference, 1: differences; anything else is a failure.
    if !matches!(output.status.code(), Some(0 | 1)) {
        return None;
    }
    Changes::from_numstat(&String::from_utf8_lossy(&output.stdout)).ok()
}

/// The files of a Codex home an attempt's private home is seeded with: its configuration and
/// login, never its sessions, history, logs or databases (the state that collides).
fn codex_seed(name: &str) -> bool {
    !(name == "history.jsonl"
        || name.ends_with(".sqlite")
        || name.contains(".sqlite-")
        || name.ends_with(".lock")
        || name.ends_with(".log"))
}

/// Creates `home` as a private Codex home seeded from `from` (the user's `CODEX_HOME`, or
/// `~/.codex`) when it exists: its top-level regular files but its state.
pub(crate) fn seed_codex_home(from: Option<&Path>, home: &Path) -> Result<(), IsolationError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(home)
        .map_err(io_err("cannot create", home))?;
    let Some(from) = from else {
        return Ok(());
    };
    let entries = match fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("cannot read", from)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err("cannot read", from))?;
        let name = entry.file_name();
        let kind = entry.file_type().map_err(io_err("cannot inspect", from))?;
        if kind.is_file() && codex_seed(&name.to_string_lossy()) {
            let src = entry.path();
            fs::copy(&src, home.join(&name)).map_err(io_err("cannot copy", &src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) {
        let ok = Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "{script}");
    }

    /// A repository of one commit (`a.txt`) under `dir`, and agentrun's view of it.
    fn repo_with_base(dir: &Path) -> (PathBuf, Repo) {
        let repo = dir.join("repo");
        fs::create_dir(&repo).unwrap();
        sh(
            &repo,
            "git init -q && echo a > a.txt && git add a.txt && git commit -qm base",
        );
        let r = Repo::discover(&repo).unwrap().expect("a repository");
        (repo, r)
    }

    #[test]
    fn a_worktree_gets_the_attempts_commit_and_is_removed_with_its_branch() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, r) = repo_with_base(tmp.path());
        assert_eq!(r.base.len(), 40, "{}", r.base);
        let wt = tmp.path().join("wt");
        r.add_worktree(&wt, "agentrun/t/0").unwrap();
        fs::write(wt.join("a.txt"), "a\nb\n").unwrap();
        fs::write(wt.join("new.txt"), "x\n").unwrap();
        let changes = r.commit_and_count(&wt, "attempt 0", None).unwrap();
        assert_eq!(
            (changes.files, changes.insertions, changes.deletions),
            (2, 2, 0)
        );
        // The workspace itself is untouched.
        assert_eq!(fs::read_to_string(repo.join("a.txt")).unwrap(), "a\n");
        assert!(!repo.join("new.txt").exists());
        r.remove(&wt, "agentrun/t/0").unwrap();
        assert!(!wt.exists());
        let branches = git(&repo).args(["branch", "--list"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&branches.stdout).contains("agentrun/t/0"));
    }

    #[test]
    fn an_untouched_worktree_counts_nothing_and_an_agents_own_commit_counts() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, r) = repo_with_base(tmp.path());
        let head =
            |wt: &Path| stdout_line(&run_git(wt, &["rev-parse", "HEAD"].map(OsStr::new)).unwrap());
        let wt = tmp.path().join("wt");
        r.add_worktree(&wt, "agentrun/t/0").unwrap();
        assert_eq!(
            r.commit_and_count(&wt, "m", None).unwrap(),
            Changes::default()
        );
        assert_eq!(head(&wt), r.base, "nothing was committed");
        // The agent committed on its own and left the tree clean: its commit is counted.
        sh(&wt, "echo b >> a.txt && git commit -qam mine");
        let changes = r.commit_and_count(&wt, "m", None).unwrap();
        assert_eq!((changes.files, changes.insertions), (1, 1));
        // An untracked file in a new directory is found and committed too.
        fs::create_dir(wt.join("d")).unwrap();
        fs::write(wt.join("d/n.txt"), "n\n").unwrap();
        let changes = r.commit_and_count(&wt, "m", None).unwrap();
        assert_eq!((changes.files, changes.insertions), (2, 2));
        let clean = run_git(&wt, &["status", "--porcelain"].map(OsStr::new)).unwrap();
        assert!(clean.stdout.is_empty(), "{:?}", clean.stdout);
    }

    #[test]
    fn an_early_status_is_the_count_of_the_worktree_as_of_its_last_start() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, r) = repo_with_base(tmp.path());
        let wt = tmp.path().join("wt");
        r.add_worktree(&wt, "agentrun/t/0").unwrap();
        let early = EarlyStatus::default();
        // Started on the untouched tree (a first run), then again after the change (its
        // retry): the second start is the one counted.
        early.start(&wt);
        early.start(&wt);
        assert_eq!(
            r.commit_and_count(&wt, "m", Some(&early)).unwrap(),
            Changes::default()
        );
        // Started before a change (a run that a retry follows), then after it: the later
        // status is the one counted.
        early.start(&wt);
        fs::write(wt.join("new.txt"), "x\n").unwrap();
        early.start(&wt);
        let changes = r.commit_and_count(&wt, "m", Some(&early)).unwrap();
        assert_eq!((changes.files, changes.insertions), (1, 1));
        // Nothing started: the count runs the status itself.
        fs::write(wt.join("a.txt"), "a\nb\n").unwrap();
        let changes = r.commit_and_count(&wt, "m", Some(&early)).unwrap();
        assert_eq!((changes.files, changes.insertions), (2, 2));
    }

    #[test]
    fn status_output_gives_the_commit_and_whether_anything_changed() {
        let oid = "# branch.oid 0123abcd\0# branch.head main\0";
        assert_eq!(read_status(oid.as_bytes()), Ok(("0123abcd".into(), false)));
        let dirty = format!("{oid}? new.txt\0");
        assert_eq!(read_status(dirty.as_bytes()), Ok(("0123abcd".into(), true)));
        assert!(read_status(b"? new.txt\0").is_err());
        assert!(read_status(b"").is_err());
    }

    #[test]
    fn outside_a_repository_there_is_no_repo_and_the_copy_is_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join("sub")).unwrap();
        fs::write(ws.join("sub/f.txt"), "1\n").unwrap();
        std::os::unix::fs::symlink("sub/f.txt", ws.join("link")).unwrap();
        assert!(Repo::discover(&ws).unwrap().is_none());
        let copy = tmp.path().join("copy");
        copy_tree(&ws, &copy).unwrap();
        assert!(
            fs::symlink_metadata(copy.join("link"))
                .unwrap()
                .is_symlink()
        );
        fs::write(copy.join("sub/f.txt"), "1\n2\n").unwrap();
        let changes = count_copy(&ws, &copy).unwrap();
        assert_eq!((changes.files, changes.insertions), (1, 1));
    }

    #[test]
    fn a_private_codex_home_gets_the_config_but_not_the_state() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user");
        fs::create_dir_all(user.join("sessions")).unwrap();
        for f in [
            "config.toml",
            "auth.json",
            "history.jsonl",
            "state_5.sqlite",
        ] {
            fs::write(user.join(f), f).unwrap();
        }
        let home = tmp.path().join("home");
        seed_codex_home(Some(&user), &home).unwrap();
        let mut names: Vec<String> = fs::read_dir(&home)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["auth.json", "config.toml"]);
        seed_codex_home(Some(&tmp.path().join("missing")), &tmp.path().join("h2")).unwrap();
    }
}
