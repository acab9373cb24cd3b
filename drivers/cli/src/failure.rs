//! Failures with their exit codes, and writing to stdout without panicking on a closed pipe.
//!
//! agentrun's own failures, usage errors included, exit [`FAILED`] (125, as `timeout(1)` and
//! `env(1)` do) so they never collide with a program's own code, which `run` passes through.

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

/// agentrun itself failed: bad usage, a missing or corrupt artifact, a store error.
pub(crate) const FAILED: u8 = 125;
/// The program was stopped by `--timeout` or `--idle-timeout`.
pub(crate) const TIMED_OUT: u8 = 124;
/// The program was found but cannot be executed.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The program was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The kind of [`Failure::stdout_write`]: never printed as JSON (it would go to the stdout
/// that failed).
const STDOUT_FAILED: &str = "stdout";

/// A failure of agentrun itself, reported on stderr (or as JSON under `--json`).
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl Failure {
    /// The command line asks for something impossible (a bad value, a malformed URI).
    pub(crate) fn usage(message: impl ToString) -> Self {
        Self {
            code: FAILED,
            kind: "usage",
            message: message.to_string(),
        }
    }

    /// Something failed while doing what was asked (a missing artifact, a store error).
    pub(crate) fn runtime(message: impl ToString) -> Self {
        Self {
            code: FAILED,
            kind: "runtime",
            message: message.to_string(),
        }
    }

    /// Writing to stdout failed (not a closed pipe: a full disk, an I/O error). Reported on
    /// stderr even under `--json`: stdout is the stream that failed.
    pub(crate) fn stdout_write(error: io::Error) -> Self {
        Self {
            code: FAILED,
            kind: STDOUT_FAILED,
            message: format!("cannot write to stdout: {error}"),
        }
    }

    /// Prints the failure (`agentrun: error: …` on stderr, or one JSON object on stdout when
    /// the command was asked for JSON and stdout is still usable) and returns its exit code.
    pub(crate) fn report(&self, json: bool) -> ExitCode {
        if json && self.kind != STDOUT_FAILED {
            let object = serde_json::json!({
                "error": {
                    "kind": self.kind,
                    "message": self.message,
                    "exit_code": self.code,
                }
            });
            let _ = writeln!(io::stdout().lock(), "{object}");
        } else {
            let _ = writeln!(io::stderr().lock(), "agentrun: error: {}", self.message);
        }
        ExitCode::from(self.code)
    }
}

/// Reports a command-line parsing error: help and version go to stdout (exit 0); a usage
/// error is printed with clap's own wording and suggestions and exits [`FAILED`].
pub(crate) fn clap_error(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // A closed pipe (`agentrun --help | head`) is not an error.
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ if json => {
            let text = e.render().to_string();
            let message = text
                .trim()
                .strip_prefix("error: ")
                .unwrap_or(text.trim())
                .to_owned();
            Failure::usage(message).report(true)
        }
        _ => {
            let _ = e.print();
            ExitCode::from(FAILED)
        }
    }
}

/// Whether the raw arguments ask for JSON: a `--json` before the first `--` (after it, the
/// words belong to a program or a prompt). Used only when parsing failed, to report the
/// parse error in the form the caller reads.
pub(crate) fn wants_json(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Writes to stdout; a closed pipe (`agentrun read … | head`) ends output quietly.
pub(crate) fn write_or_quiet(out: &mut impl Write, bytes: &[u8]) -> Result<(), Failure> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure::stdout_write(e)),
        _ => Ok(()),
    }
}

/// `1 line`, `2 lines`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_detected_before_the_program_only() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(wants_json(args(&["agentrun", "agent", "--json", "claude"])));
        assert!(!wants_json(args(&[
            "agentrun", "run", "--", "jq", "--json"
        ])));
        assert!(!wants_json(args(&["agentrun", "run", "ls"])));
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "line", "lines"), "1 line");
        assert_eq!(plural(0, "line", "lines"), "0 lines");
        assert_eq!(plural(2, "byte", "bytes"), "2 bytes");
    }
}
