//! What a user's RUN or SESSION argument names: a full run or session id, a unique prefix of
//! one, or `last` (the newest run). The command line and other front ends only parse and
//! print; the rules are here so that every front end resolves names the same way.

use std::fs;
use std::io;

use crate::auto_session::{SESSIONS_DIR, STATE_FILE};
use crate::error::IoError;
use crate::layout;
use crate::store::{Store, StoreError};

/// The name of the newest run.
pub const LAST: &str = "last";

/// What a name resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Named {
    /// A recorded run, by its full id.
    Run(String),
    /// An auto-mode session in the store's `sessions/`, by its full id.
    Session(String),
}

/// Why a name does not resolve to one run or session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name cannot be (the start of) an id: empty, or with characters no id has.
    #[error("{0:?} is not a run id, a prefix of one, or `last`")]
    Invalid(String),
    /// `last`, but no run was recorded.
    #[error("there is no last run: no run is recorded in this store")]
    NoRuns,
    /// No run (or session, where one is accepted) has that id or prefix.
    #[error("no {what} has the id or id prefix {name:?} (`agentrun {list}` lists them)")]
    NotFound {
        /// The name given.
        name: String,
        /// `run`, or `run or session`.
        what: &'static str,
        /// The listing command to suggest.
        list: &'static str,
    },
    /// The prefix matches several runs or sessions.
    #[error("{name:?} is ambiguous: it is a prefix of {}; give more of the id", matches_list(.runs, .sessions))]
    Ambiguous {
        /// The prefix given.
        name: String,
        /// The runs it matches, oldest first.
        runs: Vec<String>,
        /// The sessions it matches, oldest first.
        sessions: Vec<String>,
    },
    /// The store could not be listed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sessions directory could not be listed.
    #[error(transparent)]
    Io(#[from] IoError),
}

/// `runs a, b and sessions c` (at most 10 named, then how many more).
fn matches_list(runs: &[String], sessions: &[String]) -> String {
    const SHOWN: usize = 10;
    let part = |what: &str, ids: &[String]| {
        let mut s = format!(
            "{what} {}",
            ids.iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        if ids.len() > SHOWN {
            s.push_str(&format!(" (and {} more)", ids.len() - SHOWN));
        }
        s
    };
    let mut parts = Vec::new();
    if !runs.is_empty() {
        parts.push(part("runs", runs));
    }
    if !sessions.is_empty() {
        parts.push(part("sessions", sessions));
    }
    parts.join(" and ")
}

impl Store {
    /// The full id of the run `name` names: `last` (the newest run), a full run id, or a
    /// prefix of exactly one run id.
    pub fn resolve_run(&self, name: &str) -> Result<String, NameError> {
        if name == LAST {
            return self.records()?.pop().ok_or(NameError::NoRuns);
        }
        check(name)?;
        let runs = matching(self.records()?, name);
        one(name, runs, Vec::new(), "run", "runs").map(|n| match n {
            Named::Run(id) | Named::Session(id) => id,
        })
    }

    /// What `name` names among runs and auto-mode sessions: `last` is the newest run; a full
    /// id is looked up in both; a prefix must match exactly one run or session.
    pub fn resolve_run_or_session(&self, name: &str) -> Result<Named, NameError> {
        if name == LAST {
            return self.resolve_run(name).map(Named::Run);
        }
        check(name)?;
        let runs = matching(self.records()?, name);
        let sessions = matching(self.session_ids()?, name);
        one(
            name,
            runs,
            sessions,
            "run or session",
            "runs` or `agentrun sessions",
        )
    }

    /// The ids of the auto-mode sessions in the store's `sessions/` (directories holding a
    /// session state), oldest first (session ids sort by start time). Empty when there is no
    /// `sessions/`.
    pub fn session_ids(&self) -> Result<Vec<String>, IoError> {
        let dir = self.root().join(SESSIONS_DIR);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(IoError::at("list", &dir, e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| IoError::at("list", &dir, e))?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if layout::valid_run_id(&id) && layout::exists(&entry.path().join(STATE_FILE))? {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }
}

pub(crate) fn check(name: &str) -> Result<(), NameError> {
    if layout::valid_run_id(name) {
        Ok(())
    } else {
        Err(NameError::Invalid(name.to_owned()))
    }
}

/// The ids equal to `name` when one is, else those starting with it.
pub(crate) fn matching(ids: Vec<String>, name: &str) -> Vec<String> {
    if ids.iter().any(|id| id == name) {
        return vec![name.to_owned()];
    }
    ids.into_iter().filter(|id| id.starts_with(name)).collect()
}

pub(crate) fn one(
    name: &str,
    mut runs: Vec<String>,
    mut sessions: Vec<String>,
    what: &'static str,
    list: &'static str,
) -> Result<Named, NameError> {
    // A full id wins over the ids it is a prefix of (`…-000001` of `…-0000012`).
    let exact_run = runs.iter().any(|id| id == name);
    let exact_session = sessions.iter().any(|id| id == name);
    if exact_run != exact_session {
        return Ok(if exact_run {
            Named::Run(name.to_owned())
        } else {
            Named::Session(name.to_owned())
        });
    }
    match (runs.len(), sessions.len()) {
        (0, 0) => Err(NameError::NotFound {
            name: name.to_owned(),
            what,
            list,
        }),
        (1, 0) => Ok(Named::Run(runs.remove(0))),
        (0, 1) => Ok(Named::Session(sessions.remove(0))),
        _ => Err(NameError::Ambiguous {
            name: name.to_owned(),
            runs,
            sessions,
        }),
    }
}

#[cfg(test)]
mod tests {
    use agentrun_core::{
        CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits,
    };

    use super::*;

    fn capture(store: &Store) -> String {
        let mut session = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        session
            .write_channel(&OutputChannel::Single, b"x\n")
            .unwrap();
        session
            .finish(CaptureCompletion::Streamed {
                display: None,
                status: CaptureStatus::Succeeded,
            })
            .unwrap()
            .run_id
    }

    fn session(store: &Store, id: &str) {
        let dir = store.root().join(SESSIONS_DIR).join(id);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(STATE_FILE), b"{}").unwrap();
    }

    #[test]
    fn last_full_ids_and_unique_prefixes_name_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        assert!(matches!(store.resolve_run(LAST), Err(NameError::NoRuns)));
        let a = capture(&store);
        let b = capture(&store);
        assert_eq!(store.resolve_run(LAST).unwrap(), b);
        assert_eq!(store.resolve_run(&a).unwrap(), a);
        // Ids of one process differ in their last digits only.
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert_eq!(store.resolve_run(&b[..=common]).unwrap(), b);
        match store.resolve_run(&a[..common]) {
            Err(NameError::Ambiguous { runs, .. }) => assert_eq!(runs, [a.clone(), b.clone()]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.resolve_run("9"),
            Err(NameError::NotFound { .. })
        ));
        for bad in ["", "../x", "a/b", ".hidden"] {
            assert!(
                matches!(store.resolve_run(bad), Err(NameError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_name_is_looked_up_among_runs_and_sessions() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        let run = capture(&store);
        session(&store, "5000-1-000001");
        session(&store, "5000-1-000002");
        // Not a session: no state file.
        fs::create_dir_all(store.root().join(SESSIONS_DIR).join("5000-1-000003")).unwrap();
        assert_eq!(
            store.session_ids().unwrap(),
            ["5000-1-000001", "5000-1-000002"]
        );
        assert_eq!(
            store.resolve_run_or_session(&run).unwrap(),
            Named::Run(run.clone())
        );
        assert_eq!(
            store.resolve_run_or_session(LAST).unwrap(),
            Named::Run(run.clone())
        );
        assert_eq!(
            store.resolve_run_or_session("5000-1-000002").unwrap(),
            Named::Session("5000-1-000002".into())
        );
        match store.resolve_run_or_session("5000-1") {
            Err(e @ NameError::Ambiguous { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("sessions 5000-1-000001, 5000-1-000002"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.resolve_run_or_session("5000-1-000003"),
            Err(NameError::NotFound { .. })
        ));
        // A session is not a run: `read RUN/STREAM` does not take one.
        assert!(matches!(
            store.resolve_run("5000-1-000001"),
            Err(NameError::NotFound { .. })
        ));
    }
}
