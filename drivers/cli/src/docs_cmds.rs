//! `agentrun completions SHELL` and `agentrun man`: generated from the same clap definitions
//! that parse the command line, so they never drift from it.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use clap_complete::Shell;

use crate::failure::{Failure, write_or_quiet};

/// Arguments of `agentrun completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

/// Prints the completion script of `shell`.
pub(crate) fn completions(
    mut cmd: clap::Command,
    args: CompletionsArgs,
) -> Result<ExitCode, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "agentrun", &mut script);
    write_or_quiet(&mut io::stdout().lock(), &script)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the man page: `agentrun(1)` followed by a section per subcommand.
pub(crate) fn man(cmd: clap::Command) -> Result<ExitCode, Failure> {
    let mut page = Vec::new();
    let render = |cmd: clap::Command, page: &mut Vec<u8>| {
        clap_mangen::Man::new(cmd)
            .render(page)
            .map_err(|e| Failure::runtime(format!("cannot render the man page: {e}")))
    };
    render(cmd.clone(), &mut page)?;
    // Each subcommand's full page, appended as its own section so one file holds them all.
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("agentrun-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).display_name(name);
        let mut sub_page = Vec::new();
        render(sub, &mut sub_page)?;
        let text = String::from_utf8_lossy(&sub_page);
        // Drop the sub-page's own title header (.TH): one page has one title.
        for line in text
            .lines()
            .filter(|l| !l.starts_with(".TH ") && !l.starts_with(".ie ") && !l.starts_with(".el "))
        {
            let _ = writeln!(page, "{line}");
        }
    }
    write_or_quiet(&mut io::stdout().lock(), &page)?;
    Ok(ExitCode::SUCCESS)
}
