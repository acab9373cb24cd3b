//! Human durations for command-line options: `500ms`, `30s`, `5m`, `1h`, `2d`, or plain seconds
//! (the same forms as the config file, parsed by `agentrun_fs::config::parse_duration`).

use std::time::Duration;

/// Parses a duration; the error says which forms are accepted.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    agentrun_fs::config::parse_duration(s)
}
