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
    let page = man_text(cmd)?;
    write_or_quiet(&mut io::stdout().lock(), page.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The man page's roff text.
fn man_text(cmd: clap::Command) -> Result<String, Failure> {
    let mut page = Vec::new();
    let render = |cmd: clap::Command, page: &mut Vec<u8>| {
        clap_mangen::Man::new(cmd)
            .render(page)
            .map_err(|e| Failure::runtime(format!("cannot render the man page: {e}")))
    };
    let mut main_page = Vec::new();
    render(cmd.clone(), &mut main_page)?;
    // The subcommand list names `agentrun-NAME(1)` pages, which are not installed: the
    // subcommands are sections of this one page, so the list names them as they are typed.
    let sections: Vec<&str> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(clap::Command::get_name)
        .collect();
    for line in String::from_utf8_lossy(&main_page).lines() {
        let line = match line
            .strip_prefix("agentrun\\-")
            .and_then(|rest| rest.strip_suffix("(1)"))
        {
            Some(sub) if sections.contains(&sub) => format!(
                "agentrun {sub} (see \\fBAGENTRUN {}\\fR below)",
                sub.to_uppercase()
            ),
            // `help`, which clap adds itself: no section of its own.
            Some(sub) => format!("agentrun {sub}"),
            None => line.to_owned(),
        };
        let _ = writeln!(page, "{line}");
    }
    // Each subcommand's full page, appended as a section of its own (its sections become
    // subsections) so one file holds them all.
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("agentrun-{}", sub.get_name());
        let title = format!("AGENTRUN {}", sub.get_name().to_uppercase());
        let sub = sub.clone().name(name.clone()).display_name(name);
        let mut sub_page = Vec::new();
        render(sub, &mut sub_page)?;
        let text = String::from_utf8_lossy(&sub_page);
        let _ = writeln!(page, ".SH \"{title}\"");
        // Drop the sub-page's own title header (.TH): one page has one title.
        for line in text
            .lines()
            .filter(|l| !l.starts_with(".TH ") && !l.starts_with(".ie ") && !l.starts_with(".el "))
        {
            match line.strip_prefix(".SH ") {
                Some(heading) => {
                    let _ = writeln!(page, ".SS {heading}");
                }
                None => {
                    let _ = writeln!(page, "{line}");
                }
            }
        }
    }
    Ok(String::from_utf8_lossy(&page).into_owned())
}

#[cfg(test)]
mod tests {
    /// The man page and every completion script cover exactly the commands that exist: each
    /// visible subcommand and each of its long options, and no reference to a page that is
    /// not installed.
    #[test]
    fn man_and_completions_match_the_command_tree() {
        let cmd = crate::command_tree();
        let Ok(man) = super::man_text(cmd.clone()) else {
            panic!("the man page does not render");
        };
        assert!(
            !man.contains("(1)\n"),
            "a reference to a page that does not exist"
        );
        assert_eq!(man.matches(".TH ").count(), 1);
        let scripts: Vec<(clap_complete::Shell, String)> = [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ]
        .into_iter()
        .map(|shell| {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd.clone(), "agentrun", &mut script);
            (shell, String::from_utf8(script).unwrap())
        })
        .collect();
        let mut seen = 0;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            seen += 1;
            assert!(
                man.contains(&format!(".SH \"AGENTRUN {}\"", name.to_uppercase())),
                "man: no section for {name}"
            );
            assert!(
                man.contains(&format!("agentrun {name} (see")),
                "man: {name} not listed"
            );
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                let Some(long) = arg.get_long() else { continue };
                let roff = format!("\\-\\-{}", long.replace('-', "\\-"));
                assert!(man.contains(&roff), "man: {name} --{long}");
                for (shell, script) in &scripts {
                    assert!(script.contains(long), "{shell}: {name} --{long}");
                }
            }
            for (shell, script) in &scripts {
                assert!(script.contains(name), "{shell}: no {name}");
            }
        }
        assert!(seen > 10, "{seen} subcommands");
    }
}
