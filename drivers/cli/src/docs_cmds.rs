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

/// The man page's roff text: the main page, then a section per subcommand (and per
/// subcommand of a subcommand, `AGENTRUN MCP PROXY`), so one file holds them all.
fn man_text(cmd: clap::Command) -> Result<String, Failure> {
    let mut page = Vec::new();
    let main_page = render(cmd.clone())?;
    for line in page_lines(&main_page, &cmd, &[]) {
        let _ = writeln!(page, "{line}");
    }
    append_sections(&mut page, &cmd, &[])?;
    Ok(String::from_utf8_lossy(&page).into_owned())
}

fn render(cmd: clap::Command) -> Result<String, Failure> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .map_err(|e| Failure::runtime(format!("cannot render the man page: {e}")))?;
    Ok(String::from_utf8_lossy(&page).into_owned())
}

/// The lines of the page of `cmd` (the command `agentrun WORDS…`), its list of subcommands
/// naming them as they are typed: clap names `agentrun-WORDS-NAME(1)` pages, which are not
/// installed, since the subcommands are sections of this one page.
fn page_lines(text: &str, cmd: &clap::Command, words: &[&str]) -> Vec<String> {
    let sections: Vec<&str> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(clap::Command::get_name)
        .collect();
    let prefix: String = std::iter::once("agentrun")
        .chain(words.iter().copied())
        .map(|w| format!("{}\\-", w.replace('-', "\\-")))
        .collect();
    let typed = |sub: &str| {
        let mut all = vec!["agentrun"];
        all.extend(words);
        all.push(sub);
        all.join(" ")
    };
    text.lines()
        .map(|line| {
            match line
                .strip_prefix(prefix.as_str())
                .and_then(|rest| rest.strip_suffix("(1)"))
            {
                Some(sub) if sections.contains(&sub) => format!(
                    "{} (see \\fB{}\\fR below)",
                    typed(sub),
                    typed(sub).to_uppercase()
                ),
                // `help`, which clap adds itself: no section of its own.
                Some(sub) => typed(sub),
                None => line.to_owned(),
            }
        })
        .collect()
}

/// Appends each visible subcommand of `cmd` (the command `agentrun WORDS…`) as a section of
/// its own, its sections become subsections, then its own subcommands likewise.
fn append_sections(page: &mut Vec<u8>, cmd: &clap::Command, words: &[&str]) -> Result<(), Failure> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut words = words.to_vec();
        words.push(sub.get_name());
        let name = format!("agentrun-{}", words.join("-"));
        let title = format!("AGENTRUN {}", words.join(" ").to_uppercase());
        let text = render(sub.clone().name(name.clone()).display_name(name))?;
        let _ = writeln!(page, ".SH \"{title}\"");
        // Drop the sub-page's own title header (.TH): one page has one title.
        for line in page_lines(&text, sub, &words)
            .iter()
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
        append_sections(page, sub, &words)?;
    }
    Ok(())
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
        // Every visible subcommand, and every visible subcommand of one (`mcp proxy`).
        let mut commands: Vec<(String, &clap::Command)> = Vec::new();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            commands.push((sub.get_name().to_owned(), sub));
            for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
                let words = format!("{} {}", sub.get_name(), nested.get_name());
                commands.push((words, nested));
            }
        }
        for (words, sub) in commands {
            let name = words.rsplit(' ').next().unwrap_or(&words);
            seen += 1;
            assert!(
                man.contains(&format!(".SH \"AGENTRUN {}\"", words.to_uppercase())),
                "man: no section for {words}"
            );
            assert!(
                man.contains(&format!("agentrun {words} (see")),
                "man: {words} not listed"
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
