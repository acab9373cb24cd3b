//! Progress rendering rules shared by every dialect (docs/interpretation.md, "Progress").
//!
//! * `session started` once, at the session-start event ([`SESSION_STARTED`]);
//! * tool details cut to [`MAX_DETAIL_CHARS`] characters plus `…` ([`detail`]);
//! * shell commands render as `commit`, `push` or `commit and push` when a chained part starts
//!   with `git commit` / `git push`, else `$ <first line>` ([`shell`]).

/// The progress line printed once when a session starts.
pub const SESSION_STARTED: &str = "session started";

/// Longest tool detail shown, in characters (a longer one gets `…` appended).
pub const MAX_DETAIL_CHARS: usize = 100;

/// Makes a progress line a single line: control characters (newlines, carriage returns,
/// escapes) are shown escaped. Applied by the interpretation to every line it returns.
pub fn single_line(line: String) -> String {
    if !line.chars().any(char::is_control) {
        return line;
    }
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// Cuts `text` to [`MAX_DETAIL_CHARS`] characters, appending `…` when it was longer.
pub fn detail(text: &str) -> String {
    let mut chars = text.char_indices();
    match chars.nth(MAX_DETAIL_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let mut s = text[..cut].to_owned();
            s.push('…');
            s
        }
    }
}

/// Renders a shell command: `commit`, `push`, `commit and push`, or `$ <first line>` (cut
/// like a detail).
pub fn shell(command: &str) -> String {
    let mut commit = false;
    let mut push = false;
    for part in command.split(['\n', ';', '&', '|']) {
        let part = part.trim_start();
        commit |= starts_with_words(part, "git commit");
        push |= starts_with_words(part, "git push");
    }
    match (commit, push) {
        (true, true) => "commit and push".to_owned(),
        (true, false) => "commit".to_owned(),
        (false, true) => "push".to_owned(),
        (false, false) => {
            let first = command.trim_start().lines().next().unwrap_or("");
            format!("$ {}", detail(first.trim_end()))
        }
    }
}

fn starts_with_words(part: &str, words: &str) -> bool {
    part.strip_prefix(words)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
}

/// Renders a tool line: `name detail` (detail cut), or `name` alone.
pub fn tool(name: &str, detail_text: Option<&str>) -> String {
    match detail_text.map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => format!("{name} {}", detail(d.lines().next().unwrap_or(d))),
        None => name.to_owned(),
    }
}

/// Strips a shell wrapper such as `/bin/bash -lc '…'` or `zsh -c "…"` and unquotes the
/// command (Codex reports commands wrapped that way).
pub fn strip_shell_wrapper(command: &str) -> String {
    let trimmed = command.trim();
    let mut words = trimmed.splitn(3, ' ');
    let (Some(program), Some(flag), Some(rest)) = (words.next(), words.next(), words.next()) else {
        return trimmed.to_owned();
    };
    let base = program.rsplit('/').next().unwrap_or(program);
    let is_shell = matches!(base, "bash" | "sh" | "zsh" | "dash" | "fish");
    let is_flag = flag.starts_with('-') && flag.ends_with('c');
    if !(is_shell && is_flag) {
        return trimmed.to_owned();
    }
    unquote(rest.trim())
}

/// Removes one level of POSIX shell quoting from a single word (`'…'` with `'\''`-style
/// splices, `"…"` with backslash escapes). Anything else is returned as is.
fn unquote(word: &str) -> String {
    let first = word.chars().next();
    if !matches!(first, Some('\'' | '"')) {
        return word.to_owned();
    }
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    out.push(c);
                }
            }
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.peek() {
                            Some(&n @ ('"' | '\\' | '$' | '`')) => {
                                out.push(n);
                                chars.next();
                            }
                            _ => out.push('\\'),
                        },
                        c => out.push(c),
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_cut_by_characters() {
        let s = "é".repeat(150);
        let d = detail(&s);
        assert_eq!(d.chars().count(), 101);
        assert!(d.ends_with('…'));
        assert_eq!(detail("short"), "short");
        assert_eq!(detail(&"x".repeat(100)), "x".repeat(100));
    }

    #[test]
    fn shell_rendering() {
        assert_eq!(shell("git add . && git commit -m x"), "commit");
        assert_eq!(shell("git push origin main"), "push");
        assert_eq!(shell("git commit -m x && git push"), "commit and push");
        assert_eq!(shell("ls -la\necho hi"), "$ ls -la");
        assert_eq!(shell("git commitment"), "$ git commitment");
        assert_eq!(shell("echo 'git commit'"), "$ echo 'git commit'");
    }

    #[test]
    fn single_lines() {
        assert_eq!(
            single_line("Model: a\nb\r\u{1b}".to_owned()),
            "Model: a\\nb\\r\\u{1b}"
        );
        assert_eq!(single_line("plain é".to_owned()), "plain é");
    }

    #[test]
    fn wrappers() {
        assert_eq!(
            strip_shell_wrapper("/bin/bash -lc 'git status'"),
            "git status"
        );
        assert_eq!(
            strip_shell_wrapper(r#"/bin/zsh -lc "sed -n '1,200p' calc.py""#),
            "sed -n '1,200p' calc.py"
        );
        assert_eq!(
            strip_shell_wrapper(r#"/bin/bash -lc 'rg -n "''^(a|b)" uv.lock'"#),
            r#"rg -n "^(a|b)" uv.lock"#
        );
        assert_eq!(strip_shell_wrapper("pytest -q"), "pytest -q");
    }
}
