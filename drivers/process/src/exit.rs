//! The one exit policy of every front end: why a program could not start and the code a shell
//! gives that, a run's shell-style code, and an agent turn's code.
//!
//! The command line exits with these codes, auto mode records them per turn, and the MCP
//! server names them in its error results; none of them decides on its own.

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use agentrun_core::harness::Harness;
use agentrun_core::process::{Exit, ProcessResult, RunOutcome};

use crate::agent::AgentRun;
use crate::os;

/// A run stopped by its timeout or idle timeout (as `timeout(1)` exits).
pub const TIMED_OUT: u8 = 124;
/// agentrun itself failed, or the program's status is unknown, or its output is incomplete.
pub const FAILED: u8 = 125;
/// The program exists but cannot be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// There is no such program.
pub const NOT_FOUND: u8 = 127;
/// A run stopped by a request (128 + SIGINT, as a shell gives an interrupted command).
pub const INTERRUPTED: u8 = 130;

/// Why a program could not be started, classified as a shell does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpawnFailure {
    /// No file has that name: not in `PATH`, no such path, or a name too long to name any
    /// file (`ENAMETOOLONG`), whether looked up in `PATH` or given as a path.
    NotFound,
    /// The file exists, but the interpreter its `#!` line names was not found.
    InterpreterNotFound,
    /// The path names a directory.
    IsDirectory,
    /// The file exists but cannot be executed (no execute permission, not a program).
    CannotExecute,
}

impl SpawnFailure {
    /// Classifies the error starting `program` failed with.
    pub fn classify(program: &OsStr, source: &io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::InvalidFilename => Self::NotFound,
            io::ErrorKind::NotFound if os::program_exists(program) => Self::InterpreterNotFound,
            io::ErrorKind::NotFound => Self::NotFound,
            io::ErrorKind::PermissionDenied
                if program.as_encoded_bytes().contains(&b'/') && Path::new(program).is_dir() =>
            {
                Self::IsDirectory
            }
            _ => Self::CannotExecute,
        }
    }

    /// The code a shell exits with: 127 when there is no such program (a missing interpreter
    /// included, as `sh` reports it), 126 when there is one that cannot be executed.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::NotFound | Self::InterpreterNotFound => NOT_FOUND,
            Self::IsDirectory | Self::CannotExecute => CANNOT_EXECUTE,
        }
    }

    /// What the failure means, for a message after the system's error.
    pub fn explanation(self, source: &io::Error) -> &'static str {
        match self {
            Self::NotFound if source.kind() == io::ErrorKind::NotFound => {
                "no such program; a name without '/' is looked up in PATH, never run by a shell"
            }
            Self::NotFound => "no file can have a name this long: there is no such program",
            Self::InterpreterNotFound => {
                "the program exists: its interpreter, named on its #! line, was not found"
            }
            Self::IsDirectory => "it is a directory, not a program",
            Self::CannotExecute if source.kind() == io::ErrorKind::PermissionDenied => {
                "is the file executable? chmod +x"
            }
            Self::CannotExecute => "it cannot be executed",
        }
    }
}

impl SpawnFailure {
    /// Why a harness CLI could not be started, after its name: what to do about it.
    pub fn harness_reason(self, harness: Harness, source: &io::Error) -> String {
        match self {
            Self::NotFound if source.kind() == io::ErrorKind::NotFound => {
                format!("was not found on PATH; install the {harness} CLI or put it on PATH")
            }
            Self::NotFound => format!("names no file ({source}): no such program"),
            Self::InterpreterNotFound => {
                format!("exists but its interpreter (its #! line) was not found ({source})")
            }
            Self::IsDirectory => "is a directory, not a program".to_owned(),
            Self::CannotExecute => format!("cannot be executed ({source}); is it executable?"),
        }
    }
}

/// A run's exit code, as a shell would give it: the program's own code, 128 + n when it died
/// of signal n, [`TIMED_OUT`] when agentrun stopped it at a timeout, [`INTERRUPTED`] when it was
/// stopped on request, [`FAILED`] when its status is unknown, or when it succeeded but its
/// output was not all retained (a capture fault must not pass for success).
pub fn run_exit_code(result: &ProcessResult) -> u8 {
    let code = match (result.outcome, result.exit) {
        (RunOutcome::TimedOut | RunOutcome::IdleTimedOut, _) => TIMED_OUT,
        (RunOutcome::Cancelled, _) => INTERRUPTED,
        (RunOutcome::Completed, Some(exit)) => exit.shell_code().clamp(0, 255) as u8,
        // No status, or an outcome this version does not know: not a success.
        _ => FAILED,
    };
    if code == 0 && !result.record.faults.is_empty() {
        FAILED
    } else {
        code
    }
}

/// An agent turn's exit code: 0 when the session succeeded ([`AgentRun::succeeded`]: it
/// completed, said so, and its output was captured whole), [`TIMED_OUT`] or [`INTERRUPTED`]
/// when it was stopped before it completed, [`TIMED_OUT`] too when agentrun's stall watchdog
/// stopped it (failure kind `stalled`), else 1 (a failed or refused turn, a harness that
/// failed).
pub fn agent_exit_code(turn: &AgentRun) -> u8 {
    match turn.stopped() {
        Some(RunOutcome::Cancelled) => INTERRUPTED,
        Some(_) => TIMED_OUT,
        None if stalled(turn) => TIMED_OUT,
        None if turn.succeeded() => 0,
        None => 1,
    }
}

/// The code of one agent turn as a session records it (auto mode passes it on as the session's
/// code when the turn is fatal): the harness's own code when it exited non-zero (128 + n for
/// signal n), 1 when it exited 0 but the session did not succeed (a failed or refused turn),
/// 0 when it did; [`TIMED_OUT`] or [`INTERRUPTED`] when it was stopped before it completed;
/// `None` when its status is unknown. The agent command itself exits with
/// [`agent_exit_code`], which folds every failure into 1.
pub fn turn_exit_code(turn: &AgentRun) -> Option<i32> {
    if turn.stopped().is_some() || stalled(turn) {
        return Some(i32::from(agent_exit_code(turn)));
    }
    match turn.process.exit.map(Exit::shell_code) {
        Some(0) if !turn.succeeded() => Some(1),
        code => code,
    }
}

/// Whether agentrun's stall watchdog stopped the turn: it counts as a timeout, whatever
/// signal ended the harness.
fn stalled(turn: &AgentRun) -> bool {
    turn.completion.as_ref().is_some_and(|c| {
        c.outcome.failure_kind == Some(agentrun_core::harness::FailureKind::Stalled)
    })
}

/// A code a session recorded (a turn's or a verification's, or one read back from a saved
/// session) as a process's exit code: 0–255 as it is, a larger one clamped to 255 as
/// [`run_exit_code`] clamps a shell code, and a negative one, which no process exits with,
/// [`FAILED`] (it must not pass for success).
pub fn session_exit_code(code: i32) -> u8 {
    if code < 0 {
        FAILED
    } else {
        u8::try_from(code).unwrap_or(u8::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_code_outside_a_byte_is_clamped_and_a_negative_one_is_a_failure() {
        assert_eq!(session_exit_code(0), 0);
        assert_eq!(session_exit_code(2), 2);
        assert_eq!(session_exit_code(255), 255);
        assert_eq!(session_exit_code(256), 255);
        assert_eq!(session_exit_code(i32::MAX), 255);
        assert_eq!(session_exit_code(-1), FAILED);
        assert_eq!(session_exit_code(i32::MIN), FAILED);
    }

    #[test]
    fn a_name_too_long_for_any_file_is_not_found_however_it_is_given() {
        let long = "a".repeat(5000);
        for program in [long.clone(), format!("/tmp/{long}"), format!("./{long}")] {
            // ENAMETOOLONG, as the spawn reports a name longer than NAME_MAX or PATH_MAX.
            let error = io::Error::from_raw_os_error(36);
            let failure = SpawnFailure::classify(program.as_ref(), &error);
            assert_eq!(failure, SpawnFailure::NotFound, "{}", &program[..8]);
            assert_eq!(failure.exit_code(), 127);
        }
        let missing = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(
            SpawnFailure::classify("no-such-program-here".as_ref(), &missing).exit_code(),
            127
        );
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(
            SpawnFailure::classify("/".as_ref(), &denied),
            SpawnFailure::IsDirectory
        );
        assert_eq!(
            SpawnFailure::classify("/etc/passwd".as_ref(), &denied).exit_code(),
            126
        );
    }
}
