//! Where harness CLIs keep their session files on disk, for the retained records read after
//! a turn: Codex's rollout files (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`) and
//! Muse's session logs (`<data dir>/muse/sessions/YYYY/MM/DD/<id>/session.jsonl`).
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
}
