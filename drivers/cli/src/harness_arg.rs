//! The harness name every subcommand that takes one parses (`agent`, `auto`, `compact`,
//! `interpret`), so they accept the same names and refuse the others with the same message.

use agentrun_core::harness::Harness;

/// clap's value parser for a harness name: the registry's error (which lists the names) on
/// an unknown one.
pub(crate) fn parse_harness(s: &str) -> Result<Harness, String> {
    Harness::from_name(s).map_err(|e| e.to_string())
}
