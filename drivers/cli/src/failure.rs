//! Failures with their exit codes, and writing to stdout without panicking on a closed pipe.
//!
//! agentrun's own failures, usage errors included, exit [`FAILED`] (125, as `timeout(1)` and
//! `env(1)` do) so they never collide with a program's own code, which `run` passes through.

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

use crate::json_out::JsonStyle;

/// agentrun itself failed: bad usage, a missing or corrupt artifact, a store error (the
/// library's exit policy, `agentrun_process::exit`, holds every code).
pub(crate) use agentrun_process::exit::FAILED;

/// The kind of [`Failure::stdout_write`]: never printed as JSON (it would go to the stdout
/// that failed).
const STDOUT_FAILED: &str = "stdout";

/// A failure of agentrun itself, reported on stderr (or as JSON under `--json`).
#[derive(Debug)]
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

    /// Prints the failure (`agentrun: error: …` on stderr, or one JSON object on stdout, in
    /// the command's JSON style, when the command was asked for JSON and stdout is still
    /// usable) and returns its exit code.
    pub(crate) fn report(&self, json: Option<JsonStyle>) -> ExitCode {
        if let Some(style) = json
            && self.kind != STDOUT_FAILED
        {
            #[derive(serde::Serialize)]
            struct Error<'a> {
                kind: &'a str,
                message: &'a str,
                exit_code: u8,
            }
            #[derive(serde::Serialize)]
            struct Report<'a> {
                error: Error<'a>,
            }
            let report = Report {
                error: Error {
                    kind: self.kind,
                    message: &self.message,
                    exit_code: self.code,
                },
            };
            let text = crate::json_out::to_text(&report, style)
                .map(String::into_bytes)
                .unwrap_or_default();
            // The JSON went nowhere (a full disk, a closed pipe): say it where it can be read.
            let mut out = io::stdout().lock();
            if text.is_empty() || out.write_all(&text).and_then(|()| out.flush()).is_err() {
                let _ = writeln!(io::stderr().lock(), "agentrun: error: {}", self.message);
            }
        } else {
            let _ = writeln!(io::stderr().lock(), "agentrun: error: {}", self.message);
        }
        ExitCode::from(self.code)
    }
}

/// Reports a command-line parsing error: help and version go to stdout (exit 0, or
/// [`FAILED`] when stdout cannot take them); a usage error is printed with clap's own wording
/// and suggestions and exits [`FAILED`]. `args` is the raw command line, `agentrun` included.
pub(crate) fn clap_error(mut e: clap::Error, args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    if e.kind() == ErrorKind::UnknownArgument {
        tip_for_unknown_option(&mut e, args);
    }
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => match e.print() {
            // A closed pipe (`agentrun --help | head`) is not an error; a full disk is.
            Err(error) if error.kind() != io::ErrorKind::BrokenPipe => {
                Failure::stdout_write(error).report(None)
            }
            _ => ExitCode::SUCCESS,
        },
        _ if let Some(style) = wants_json(args) => {
            let text = e.render().to_string();
            let message = text
                .trim()
                .strip_prefix("error: ")
                .unwrap_or(text.trim())
                .to_owned();
            Failure::usage(message).report(Some(style))
        }
        _ => {
            let _ = e.print();
            ExitCode::from(FAILED)
        }
    }
}

/// Replaces clap's generic tip for an unknown option of a command that takes a program or a
/// prompt: the option was almost certainly meant for agentrun (a misspelling), and when it
/// was not, the way to pass it on is `--`.
fn tip_for_unknown_option(e: &mut clap::Error, args: &[OsString]) {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(option)) = e.get(ContextKind::InvalidArg) else {
        return;
    };
    let Some((at, command)) = subcommand(args) else {
        return;
    };
    // Only an option of that command: one before it (`agentrun --bogus run …`) is the top
    // level's.
    if !args[at + 1..]
        .iter()
        .any(|a| a.as_encoded_bytes().starts_with(option.as_bytes()))
    {
        return;
    }
    let tip = match command {
        "run" => format!(
            "agentrun's options go before PROGRAM; a program whose name starts with `-` goes \
             after `--`: `agentrun run [OPTIONS] -- {option} …`"
        ),
        "agent" => format!(
            "options go before the prompt; a prompt that starts with `-` goes after `--`: \
             `agentrun agent NAME [OPTIONS] -- {option} …`"
        ),
        "auto" => format!(
            "options go before the objective; an objective that starts with `-` goes after \
             `--`: `agentrun auto NAME [OPTIONS] -- {option} …`"
        ),
        _ => return,
    };
    e.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![tip.into()]),
    );
}

/// The subcommand named on the raw command line, and where: the first word that is neither an
/// option nor the value of a global option (`--store DIR`, `--config FILE`).
fn subcommand(args: &[OsString]) -> Option<(usize, &str)> {
    let mut words = args.iter().enumerate().skip(1);
    while let Some((at, word)) = words.next() {
        let word = word.to_str()?;
        if word == "--store" || word == "--config" {
            words.next();
        } else if !word.starts_with('-') {
            return Some((at, word));
        }
    }
    None
}

/// Whether the raw arguments ask for JSON, and in which style: a `--json` among the command's
/// own options, before its program, prompt or objective starts (or a `--`): from there on, the
/// words are the program's. Used only when parsing failed, to report the parse error in the
/// form the caller reads; options are told from their values by the command tree.
pub(crate) fn wants_json(args: &[OsString]) -> Option<JsonStyle> {
    let tree = crate::command_tree();
    let (at, name) = subcommand(args)?;
    let command = tree.find_subcommand(name)?;
    json_option(command, &args[at + 1..]).then(|| crate::json_out::style_of(name))
}

/// Whether `words`, the arguments after the subcommand `command`, hold its `--json`.
fn json_option(command: &clap::Command, words: &[OsString]) -> bool {
    let takes_value = |word: &str| {
        // The global options, which the unbuilt tree does not list under each command.
        if word == "--store" || word == "--config" {
            return true;
        }
        let found = if let Some(long) = word.strip_prefix("--") {
            command.get_arguments().find(|a| a.get_long() == Some(long))
        } else {
            let mut chars = word.chars().skip(1);
            let short = chars.next();
            // `-tVALUE`: the value is attached.
            if chars.next().is_some() {
                return false;
            }
            command.get_arguments().find(|a| a.get_short() == short)
        };
        found.is_some_and(|a| a.get_action().takes_values())
    };
    let mut positionals = command.get_positionals();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let Some(word) = word.to_str() else {
            // Not UTF-8: not an option of agentrun's; a positional.
            if positionals
                .next()
                .is_none_or(clap::Arg::is_trailing_var_arg_set)
            {
                return false;
            }
            continue;
        };
        if word == "--" {
            return false;
        } else if word == "--json" {
            return true;
        } else if word.starts_with('-') && word.len() > 1 {
            if !word.contains('=') && takes_value(word) {
                words.next();
            }
        } else if positionals
            .next()
            .is_none_or(clap::Arg::is_trailing_var_arg_set)
        {
            // The program, prompt or objective starts here: the rest is its own.
            return false;
        }
    }
    false
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
        let json = |a: &[&str]| wants_json(&args(a)).is_some();
        assert!(json(&["agentrun", "agent", "--json", "claude"]));
        // Each in its command's style.
        let style = |a: &[&str]| wants_json(&args(a));
        assert_eq!(
            style(&["agentrun", "agent", "--json", "claude"]),
            Some(JsonStyle::Lines)
        );
        assert_eq!(
            style(&["agentrun", "runs", "--json", "--bogus"]),
            Some(JsonStyle::Document)
        );
        assert!(json(&[
            "agentrun", "--store", "s", "agent", "claude", "--json", "--x"
        ]));
        assert!(json(&[
            "agentrun",
            "run",
            "--timeout",
            "--json",
            "--json",
            "x"
        ]));
        assert!(!json(&["agentrun", "run", "--", "jq", "--json"]));
        assert!(!json(&["agentrun", "run", "ls"]));
        // After the program or the prompt, `--json` is theirs.
        assert!(!json(&["agentrun", "run", "--bogus", "jq", "--json"]));
        assert!(!json(&[
            "agentrun",
            "run",
            "--timeout",
            "5s",
            "jq",
            "--json"
        ]));
        assert!(!json(&["agentrun", "agent", "claude", "fix", "--json"]));
        assert!(!json(&["agentrun", "--json"]));
        assert!(json(&[
            "agentrun", "run", "--store", "s", "--json", "--bogus", "x"
        ]));
        assert!(json(&["agentrun", "auto", "-h", "--json"]));
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "line", "lines"), "1 line");
        assert_eq!(plural(0, "line", "lines"), "0 lines");
        assert_eq!(plural(2, "byte", "bytes"), "2 bytes");
    }

    #[test]
    fn the_subcommand_is_found_past_the_global_options() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let a = args(&["agentrun", "agent", "claude"]);
        assert_eq!(subcommand(&a), Some((1, "agent")));
        let a = args(&["agentrun", "--store", "run", "--config=x", "auto", "x"]);
        assert_eq!(subcommand(&a), Some((4, "auto")));
        assert_eq!(subcommand(&args(&["agentrun", "--json"])), None);
    }

    #[test]
    fn an_unknown_option_of_a_command_with_a_prompt_gets_the_double_dash_tip() {
        let tip = |a: &[&str]| {
            let args: Vec<OsString> = a.iter().map(OsString::from).collect();
            let mut e = crate::command_tree()
                .try_get_matches_from(&args)
                .unwrap_err();
            tip_for_unknown_option(&mut e, &args);
            e.render().to_string()
        };
        let text = tip(&["agentrun", "agent", "claude", "--bogus", "hi"]);
        assert!(
            text.contains("a prompt that starts with `-` goes after `--`"),
            "{text}"
        );
        // An unknown option before the command is not the command's.
        let text = tip(&["agentrun", "--bogus", "agent", "claude", "hi"]);
        assert!(!text.contains("goes after `--`"), "{text}");
    }
}
