//! Failures with their exit codes, and writing to stdout without panicking on a closed pipe.

use std::io::{self, Write};

/// A failure with its exit code: 2 for usage errors, 1 for everything else.
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn usage(message: impl ToString) -> Self {
        Self {
            code: 2,
            message: message.to_string(),
        }
    }
    pub(crate) fn runtime(message: impl ToString) -> Self {
        Self {
            code: 1,
            message: message.to_string(),
        }
    }
}

/// Writes to stdout; a closed pipe (`agentrun read … | head`) ends output quietly.
pub(crate) fn write_or_quiet(out: &mut impl Write, bytes: &[u8]) -> Result<(), Failure> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure::runtime(e)),
        _ => Ok(()),
    }
}
