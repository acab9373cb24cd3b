//! Capture sessions: the file side of [`agentrun_core::Capture`].
//!
//! A [`CaptureSession`] owns `captures/<run_id>/`:
//!
//! * `lock`: held with an exclusive `flock` for the session's life; GC treats a directory
//!   whose lock it can take as left by a dead process and removes it;
//! * `s<i>` and `s<i>.idx`: the capture file and index temp file of declared stream `i`;
//! * `m` and `m.idx`: the manifest of named output, written at finish;
//! * `protect`: the digests being published, roots for any GC that runs while the lock is
//!   held;
//! * `reserve`: room allocated when the capture starts that becomes the record, so that a
//!   disk the output (or anything else) fills still has room for it (see `Reserve`).
//!
//! Every chunk is appended to its capture file **before** the core machine accepts it, so the
//! machine's digest, counts and index describe exactly the bytes on disk (a failed write is
//! cut back to the bytes written before it). The caller's thread writes; the machine's work on
//! a large chunk (SHA-256, line index, preview) runs on a hasher thread per stream, up to
//! [`PIPELINE_DEPTH`](pipeline::PIPELINE_DEPTH) pieces behind the writes. Reading the pipe and
//! writing the file on one core and hashing on another overlap instead of adding up: hashing
//! every byte is the largest cost of retaining output. Memory stays bounded: per stream at most
//! [`PIPELINE_COPIES`](pipeline::PIPELINE_COPIES) bytes of copies wait for the hasher; index
//! entries go to the index file as soon as a block completes. A write-back thread per stream
//! starts the kernel's write-back of the bytes already hashed, so that waiting for a slow disk
//! never holds up the writes (see `pipeline::Writeback`).
//!
//! A pipe can also be drained straight into a stream ([`CaptureSession::write_from_pipe`]):
//! the kernel moves its bytes into the capture file (`splice`), and the hasher reads them
//! where they lie, through a mapping of the file (see `mapped`), so they are copied once
//! instead of three times.
//!
//! The parts, one concept each: `session` (the directory, the stream files and the writes),
//! `pipeline` (the hasher threads and what they share with the writer), `publish` (sealing,
//! publication and the record).

mod pipeline;
mod publish;
mod session;
#[cfg(test)]
mod tests;

pub use session::{CaptureProgress, CaptureSession, CaptureWriteError};
