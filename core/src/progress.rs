//! What a run has captured so far, as its driver reports it while the run goes on, and the
//! one-line wording people read it in (`agentrun run`'s status line on a terminal).
//!
//! The driver counts (bytes and lines accepted by the capture, the time since the spawn on
//! its own clock); this module only holds and words the counts.

use std::fmt;
use std::time::Duration;

/// One stream of a run in progress: what its capture accepted so far.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamProgress {
    /// The stream's name (`stdout`, `stderr`; `output` for a run with one stream).
    pub name: String,
    /// Lines so far (a last line without its newline counts).
    pub lines: u64,
    /// Bytes so far.
    pub bytes: u64,
}

impl StreamProgress {
    /// Stream `name` with `lines` lines in `bytes` bytes so far.
    pub fn new(name: impl Into<String>, lines: u64, bytes: u64) -> Self {
        Self {
            name: name.into(),
            lines,
            bytes,
        }
    }
}

/// A run in progress: how long it has been running and what each stream holds so far, in
/// declaration order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunProgress {
    /// Time since the program was started.
    pub elapsed: Duration,
    /// Each captured stream, in declaration order.
    pub streams: Vec<StreamProgress>,
}

impl RunProgress {
    /// A run `elapsed` into its course with `streams` so far.
    pub fn new(elapsed: Duration, streams: Vec<StreamProgress>) -> Self {
        Self { elapsed, streams }
    }

    /// Bytes of every stream together.
    pub fn total_bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.bytes).sum()
    }
}

/// `running 12s: stdout 3 lines, 1.2 KiB; stderr 0 lines, 0 B`: one short line.
impl fmt::Display for RunProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "running {}", format_elapsed(self.elapsed))?;
        for (i, s) in self.streams.iter().enumerate() {
            let sep = if i == 0 { ":" } else { ";" };
            let lines = if s.lines == 1 { "line" } else { "lines" };
            write!(
                f,
                "{sep} {} {} {lines}, {}",
                s.name,
                s.lines,
                format_bytes(s.bytes)
            )?;
        }
        Ok(())
    }
}

/// `12s`, `3m05s`, `2h07m`: a duration to the second (or minute), as people read it.
pub fn format_elapsed(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// `812 B`, `4.2 KiB`, `3.0 MiB`: a size in binary units, one decimal.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_one_short_line() {
        let p = RunProgress::new(
            Duration::from_millis(65_400),
            vec![
                StreamProgress::new("stdout", 1, 4300),
                StreamProgress::new("stderr", 0, 0),
            ],
        );
        assert_eq!(
            p.to_string(),
            "running 1m05s: stdout 1 line, 4.2 KiB; stderr 0 lines, 0 B"
        );
        assert_eq!(p.total_bytes(), 4300);
        let none = RunProgress::new(Duration::ZERO, Vec::new());
        assert_eq!(none.to_string(), "running 0s");
    }

    #[test]
    fn sizes_and_durations_read_naturally() {
        assert_eq!(format_bytes(812), "812 B");
        assert_eq!(format_bytes(1024), "1.0 KiB");
        assert_eq!(format_bytes(3 << 20), "3.0 MiB");
        assert_eq!(format_bytes(u64::MAX), "16384.0 PiB");
        assert_eq!(format_elapsed(Duration::from_secs(59)), "59s");
        assert_eq!(format_elapsed(Duration::from_secs(7620)), "2h07m");
    }
}
