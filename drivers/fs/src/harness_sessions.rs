//! Where harness CLIs keep their session files on disk, for the retained records read after
//! a turn: Codex's rollout files (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`) and
//! Muse's session logs (`<data dir>/muse/sessions/YYYY/MM/DD/<id>/session.jsonl`), and the
//! Qwen Code and pi session logs (one directory per project, see [`find_session_log`]), and
//! Gemini CLI's session logs (`~/.gemini/tmp/<project>/chats/session-<date>-<id8>.jsonl`, see
//! [`find_gemini_log`]).
//!
//! The directories depend on the child's environment, not the runner's: every function takes
//! a lookup `env(name)` that answers as the child will see its variables. Searches are
//! bounded (at most 4096 entries per directory) and find the newest date first.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `$CODEX_HOME/sessions` (`CODEX_HOME` defaults to `$HOME/.codex`); `None` when neither is
/// set.
pub fn codex_sessions_dir(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let home = match env("CODEX_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env("HOME")?).join(".codex"),
    };
    Some(home.join("sessions"))
}

/// The session file of Codex thread `id` under `sessions` (see [`codex_sessions_dir`]):
/// `YYYY/MM/DD/rollout-…-<id>.jsonl`, the newest date first.
pub fn find_codex_session(sessions: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("-{id}.jsonl");
    find_three_deep(sessions, |name| {
        name.starts_with("rollout-") && name.ends_with(&suffix)
    })
}

/// Where Muse keeps session `id`'s log:
/// `<XDG_DATA_HOME or $HOME/.local/share>/muse/sessions/<yyyy>/<mm>/<dd>/<id>/session.jsonl`
/// (`None` when the session's directory is not found or neither variable is set).
pub fn find_muse_log(env: impl Fn(&str) -> Option<OsString>, id: &str) -> Option<PathBuf> {
    let data = match env("XDG_DATA_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env("HOME")?).join(".local/share"),
    };
    find_three_deep(&data.join("muse").join("sessions"), |name| name == id)
        .map(|dir| dir.join("session.jsonl"))
}

/// A harness whose session logs live in one directory per project ([`find_session_log`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionLog {
    /// Qwen Code: `$HOME/.qwen/projects/<project>/chats/<id>.jsonl`.
    Qwen,
    /// pi: `<PI_CODING_AGENT_DIR or $HOME/.pi/agent>/sessions/<project>/<time>_<id>.jsonl`.
    Pi,
}

/// Where Qwen Code or pi keeps session `id`'s log (see [`SessionLog`]). The project
/// directory is named after the working directory; every project is searched rather than the
/// name re-derived (the CLIs' spelling of a path may change). Bounded: at most 4096 entries
/// per directory.
pub fn find_session_log(
    env: impl Fn(&str) -> Option<OsString>,
    log: SessionLog,
    id: &str,
) -> Option<PathBuf> {
    let home = || env("HOME").map(PathBuf::from);
    // Qwen names the file `<id>.jsonl`, pi `<time>_<id>.jsonl`.
    let (root, sub, name, exact) = match log {
        SessionLog::Qwen => (
            home()?.join(".qwen").join("projects"),
            "chats",
            format!("{id}.jsonl"),
            true,
        ),
        SessionLog::Pi => {
            let dir = match env("PI_CODING_AGENT_DIR") {
                Some(dir) => PathBuf::from(dir),
                None => home()?.join(".pi").join("agent"),
            };
            (dir.join("sessions"), "", format!("_{id}.jsonl"), false)
        }
    };
    let wanted = |n: &str| if exact { n == name } else { n.ends_with(&name) };
    let entries = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .take(4096)
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect()
    };
    entries(&root).into_iter().find_map(|project| {
        entries(&project.join(sub))
            .into_iter()
            .find(|f| f.file_name().and_then(|n| n.to_str()).is_some_and(&wanted))
    })
}

/// The candidate logs of Gemini CLI session `id`, newest first:
/// `<GEMINI_CLI_HOME or HOME>/.gemini/tmp/<project>/chats/session-<date>-<id8>.jsonl`, where
/// `<id8>` is the id's first 8 characters. Only a log's header says which session it is (ids
/// may share their first 8 characters; a resumed session's runs are appended to the file of
/// its first run, within the same session), so the caller takes the first candidate whose
/// header names `id`. `None` when neither variable is set. Bounded: at most 4096 entries per
/// directory.
pub fn find_gemini_log(env: impl Fn(&str) -> Option<OsString>, id: &str) -> Option<Vec<PathBuf>> {
    let home = env("GEMINI_CLI_HOME").or_else(|| env("HOME"))?;
    let tmp = PathBuf::from(home).join(".gemini").join("tmp");
    let prefix: String = id.chars().take(8).collect();
    let suffix = format!("-{prefix}.jsonl");
    let mut candidates: Vec<PathBuf> = Vec::new();
    for project in std::fs::read_dir(&tmp).into_iter().flatten().take(4096) {
        let Ok(project) = project else { continue };
        let chats = project.path().join("chats");
        for entry in std::fs::read_dir(&chats).into_iter().flatten().take(4096) {
            let Ok(entry) = entry else { continue };
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("session-") && n.ends_with(&suffix))
            {
                candidates.push(entry.path());
            }
        }
    }
    // The names start with the date: the newest last, then reversed.
    candidates.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    candidates.reverse();
    Some(candidates)
}

/// The first entry three directory levels below `root` (`YYYY/MM/DD/<entry>`) whose name
/// satisfies `wanted`, newest date first. Bounded: at most 4096 entries per directory.
fn find_three_deep(root: &Path, wanted: impl Fn(&str) -> bool) -> Option<PathBuf> {
    fn sorted(dir: &Path) -> Vec<PathBuf> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .take(4096)
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        entries.reverse();
        entries
    }
    for year in sorted(root) {
        for month in sorted(&year) {
            for day in sorted(&month) {
                for entry in sorted(&day) {
                    if entry
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(&wanted)
                    {
                        return Some(entry);
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment lookup over these pairs only.
    fn env<'a>(pairs: &'a [(&'a str, &'a Path)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_os_str().to_owned())
        }
    }

    #[test]
    fn harness_files_are_found_three_levels_down_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = dir.path().join("sessions");
        for day in ["2026/11/29", "2026/11/30"] {
            std::fs::create_dir_all(sessions.join(day)).unwrap();
        }
        std::fs::write(sessions.join("2026/11/29/rollout-a-th-1.jsonl"), "").unwrap();
        std::fs::write(sessions.join("2026/11/30/rollout-b-th-2.jsonl"), "").unwrap();
        std::fs::write(sessions.join("2026/11/30/rollout-b-xth-1.jsonl"), "").unwrap();
        assert_eq!(
            find_codex_session(&sessions, "th-1"),
            Some(sessions.join("2026/11/29/rollout-a-th-1.jsonl"))
        );
        assert_eq!(find_codex_session(&sessions, "th-3"), None);
        assert_eq!(find_codex_session(&dir.path().join("none"), "th-1"), None);
    }

    #[test]
    fn codex_sessions_follow_codex_home_else_home() {
        let (codex, home) = (Path::new("/c"), Path::new("/h"));
        assert_eq!(
            codex_sessions_dir(env(&[("CODEX_HOME", codex), ("HOME", home)])),
            Some(PathBuf::from("/c/sessions"))
        );
        assert_eq!(
            codex_sessions_dir(env(&[("HOME", home)])),
            Some(PathBuf::from("/h/.codex/sessions"))
        );
        assert_eq!(codex_sessions_dir(env(&[])), None);
    }

    #[test]
    fn a_muse_log_is_found_in_the_data_dir_else_under_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let log_dir = home.join(".local/share/muse/sessions/2026/12/01/sess-7");
        std::fs::create_dir_all(&log_dir).unwrap();
        assert_eq!(
            find_muse_log(env(&[("HOME", &home)]), "sess-7"),
            Some(log_dir.join("session.jsonl"))
        );
        assert_eq!(find_muse_log(env(&[("HOME", &home)]), "sess-8"), None);
        // XDG_DATA_HOME wins over HOME.
        let data = dir.path().join("data");
        let other = data.join("muse/sessions/2026/12/02/sess-7");
        std::fs::create_dir_all(&other).unwrap();
        assert_eq!(
            find_muse_log(env(&[("XDG_DATA_HOME", &data), ("HOME", &home)]), "sess-7"),
            Some(other.join("session.jsonl"))
        );
        assert_eq!(find_muse_log(env(&[]), "sess-7"), None);
    }

    #[test]
    fn qwen_and_pi_logs_are_found_in_any_project_directory() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let qwen = home.join(".qwen/projects/-w-a/chats");
        std::fs::create_dir_all(&qwen).unwrap();
        std::fs::write(qwen.join("S1.jsonl"), "").unwrap();
        std::fs::write(qwen.join("xS1.jsonl"), "").unwrap();
        let pi_dir = home.join("pi-agent");
        let pi = pi_dir.join("sessions/--w-b--");
        std::fs::create_dir_all(&pi).unwrap();
        std::fs::write(pi.join("2026-12-01T00-00-00_P1.jsonl"), "").unwrap();
        let pairs = [("HOME", home), ("PI_CODING_AGENT_DIR", pi_dir.as_path())];
        assert_eq!(
            find_session_log(env(&pairs), SessionLog::Qwen, "S1"),
            Some(qwen.join("S1.jsonl"))
        );
        assert_eq!(
            find_session_log(env(&pairs), SessionLog::Pi, "P1"),
            Some(pi.join("2026-12-01T00-00-00_P1.jsonl"))
        );
        assert_eq!(find_session_log(env(&pairs), SessionLog::Pi, "P2"), None);
        assert_eq!(find_session_log(env(&[]), SessionLog::Qwen, "S1"), None);
    }

    #[test]
    fn gemini_logs_are_the_id_prefixed_chats_of_any_project_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let a = home.join(".gemini/tmp/proj-a/chats");
        let b = home.join(".gemini/tmp/proj-b/chats");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let id = "0123abcd-9999-4000-8000-000000000000";
        for (chats, name) in [
            (&a, "session-2026-11-30T10-00-0123abcd.jsonl"),
            (&b, "session-2026-12-01T09-00-0123abcd.jsonl"),
            (&a, "session-2026-12-01T11-00-ffffffff.jsonl"),
            (&a, "other-2026-12-01T12-00-0123abcd.jsonl"),
        ] {
            std::fs::write(chats.join(name), "").unwrap();
        }
        assert_eq!(
            find_gemini_log(env(&[("HOME", &home)]), id),
            Some(vec![
                b.join("session-2026-12-01T09-00-0123abcd.jsonl"),
                a.join("session-2026-11-30T10-00-0123abcd.jsonl"),
            ])
        );
        assert_eq!(
            find_gemini_log(env(&[("HOME", &home)]), "99999999"),
            Some(vec![])
        );
        // GEMINI_CLI_HOME wins over HOME.
        let other = dir.path().join("other");
        assert_eq!(
            find_gemini_log(env(&[("GEMINI_CLI_HOME", &other), ("HOME", &home)]), id),
            Some(vec![])
        );
        assert_eq!(find_gemini_log(env(&[]), id), None);
    }
}
