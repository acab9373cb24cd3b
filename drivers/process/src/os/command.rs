//! The child's command: argv (never a shell), environment, working directory, its own
//! process group, the standard streams, `PATH` lookup, and how a reaped child ended.

use std::ffi::OsStr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use agentrun_core::process::{Exit, RunOptions, StdinMode};
use agentrun_core::stream::{OutputChannel, OutputDeclaration};

/// Whether `program` names an existing file: as a path when it has a `/`, else in `PATH`.
pub fn program_exists(program: &OsStr) -> bool {
    let name = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return name.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// The child's stdin, stdout and stderr for `options`. Set separately from [`command`]
/// because a runtime's command wrapper may reset the standard streams when it adopts a std
/// command (async-process does).
pub fn stdio(options: &RunOptions) -> [Stdio; 3] {
    let captured = |name: &str| {
        if captures(options, name).is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let stdin = match options.get_stdin() {
        StdinMode::Null => Stdio::null(),
        StdinMode::Bytes(_) => Stdio::piped(),
        StdinMode::Inherit => Stdio::inherit(),
        // The driver replaces this with the opened file when it is a regular one.
        _ => Stdio::piped(),
    };
    [stdin, captured("stdout"), captured("stderr")]
}

/// The std command for `options`: argv only (never a shell), environment changes, working
/// directory, its own process group, and the result-sink variable: set to `sink` when given,
/// removed otherwise; every other known sink variable
/// ([`KNOWN_SINK_VARS`](agentrun_core::sink::KNOWN_SINK_VARS)) is removed too unless the
/// caller's environment changes set it, so a value inherited from an ancestor never reaches
/// the child.
pub fn command(options: &RunOptions, sink: Option<&Path>) -> Command {
    let mut cmd = Command::new(options.get_program());
    cmd.args(options.get_args());
    if let Some(dir) = options.get_current_dir() {
        cmd.current_dir(dir);
    }
    for known in agentrun_core::sink::KNOWN_SINK_VARS {
        cmd.env_remove(known);
    }
    for (key, value) in options.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    match sink {
        Some(path) => cmd.env(options.get_sink_var(), path),
        None => cmd.env_remove(options.get_sink_var()),
    };
    // Its own group, so a timeout or cancellation can stop grandchildren too.
    cmd.process_group(0);
    cmd
}

/// The channel a child pipe (`stdout` or `stderr`) is captured into: the declared stream of
/// that name, or for single output the stdout pipe. Pipes not captured are connected to
/// `/dev/null` rather than left unread (an unread pipe would block the child).
pub fn captures(options: &RunOptions, pipe: &str) -> Option<OutputChannel> {
    match options.get_declaration() {
        OutputDeclaration::Single => (pipe == "stdout").then_some(OutputChannel::Single),
        OutputDeclaration::Named(names) => names
            .iter()
            .find(|n| n.as_str() == pipe)
            .cloned()
            .map(OutputChannel::Named),
    }
}

/// How a reaped child ended.
pub fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(cmd: &Command) -> Vec<(String, Option<String>)> {
        cmd.get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect()
    }

    #[test]
    fn every_known_sink_variable_is_removed_unless_opted_in_or_set_by_the_caller() {
        let removed = |name: &str| (name.to_owned(), None);
        let plain = env_of(&command(&RunOptions::new("true"), None));
        assert!(
            plain.contains(&removed("AGENTRUN_RESULT_SINK")),
            "{plain:?}"
        );
        assert!(
            plain.contains(&removed("AMPLIHACK_RESULT_SINK")),
            "{plain:?}"
        );

        let opted = RunOptions::new("true").sink_var("AMPLIHACK_RESULT_SINK");
        let env = env_of(&command(&opted, Some(Path::new("/sink"))));
        assert!(
            env.contains(&("AMPLIHACK_RESULT_SINK".to_owned(), Some("/sink".to_owned()))),
            "{env:?}"
        );
        assert!(env.contains(&removed("AGENTRUN_RESULT_SINK")), "{env:?}");

        // An explicit caller entry for another tool's variable is the caller's choice.
        let explicit = RunOptions::new("true").env("AMPLIHACK_RESULT_SINK", "/theirs");
        let env = env_of(&command(&explicit, None));
        assert!(
            env.contains(&(
                "AMPLIHACK_RESULT_SINK".to_owned(),
                Some("/theirs".to_owned())
            )),
            "{env:?}"
        );
    }
}
