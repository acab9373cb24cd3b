//! The status line `agentrun run` keeps on a terminal's stderr while the program runs: the
//! library's progress report ([`RunProgress`], counted and worded there), redrawn in place
//! each time the run driver reports, and erased before anything else is printed.
//!
//! Only on a terminal: never when stderr is a pipe or a file (logs stay clean), with
//! `NO_COLOR` set, with `--quiet`, or with `--live` (whose output is on the terminal itself).

use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::RunProgress;

/// How often the line is redrawn.
pub(crate) const REDRAW_EVERY: Duration = Duration::from_millis(250);

/// Width assumed when the terminal does not say.
const DEFAULT_WIDTH: usize = 80;

/// Whether to show the status line: stderr is a terminal and nothing asked for quiet.
pub(crate) fn wanted(quiet: bool) -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !quiet && !no_color && io::stderr().is_terminal()
}

/// The line on the terminal, shared by the run's progress reports and the end of the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatusLine {
    drawn: Arc<Mutex<bool>>,
}

impl StatusLine {
    /// Draws `progress` over the line drawn before, cut to the terminal's width so that it
    /// never wraps (a wrapped line could not be erased in place).
    pub(crate) fn draw(&self, progress: &RunProgress) {
        let width = terminal_width().saturating_sub(1).max(1);
        let line = format!("agentrun: {progress}");
        let text = fit(&line, width);
        let mut drawn = self.drawn.lock().unwrap_or_else(|p| p.into_inner());
        let mut err = io::stderr().lock();
        // Written over the old line, then the rest of it cleared: no blank flash between.
        if write!(err, "\r{text}\x1b[K")
            .and_then(|()| err.flush())
            .is_ok()
        {
            *drawn = true;
        }
    }

    /// Erases the line, if one was drawn, leaving the cursor at the start of an empty line.
    pub(crate) fn erase(&self) {
        let mut drawn = self.drawn.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::take(&mut *drawn) {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\r\x1b[K").and_then(|()| err.flush());
        }
    }
}

/// `text` cut to `width` characters (the status line is ASCII but for stream names).
fn fit(text: &str, width: usize) -> &str {
    match text.char_indices().nth(width) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// The terminal's width in columns, from stderr.
fn terminal_width() -> usize {
    match rustix::termios::tcgetwinsize(io::stderr()) {
        Ok(size) if size.ws_col > 0 => usize::from(size.ws_col),
        _ => DEFAULT_WIDTH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_cut_to_the_width_on_a_character_boundary() {
        assert_eq!(fit("agentrun: running 1s", 8), "agentrun");
        assert_eq!(fit("short", 80), "short");
        assert_eq!(fit("ééé", 2), "éé");
    }
}
