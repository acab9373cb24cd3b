//! agentrun-fs: the blocking file-system side of agentrun.
//!
//! [`agentrun_core`] decides everything (digests, indexes, previews, pages, records) without
//! touching a file; this crate does the file work: the content-addressed artifact [`Store`],
//! capture files ([`CaptureSession`]), verified reads, garbage collection ([`Store::gc`]) and
//! verification ([`Store::verify`]). Every call blocks; async drivers run them on their
//! blocking pools so no file logic is written twice.
//!
//! A store is local (a directory) or shared on object storage ([`Store::open`] with
//! `s3://BUCKET/PREFIX`, `gs://…`, `az://…` or `file://…`): then this layout is the local
//! spool where captures are written first, and the bucket holds the published objects,
//! records and leases (see [`remote`] for its layout, the publication order and the GC
//! protocol).
//!
//! # On-disk layout
//!
//! Everything under the root is owner-only: directories 0700, files 0600.
//! [`Store::open`] refuses a root or store subdirectory with group/other access or another
//! owner, with a message saying how to fix it.
//!
//! ```text
//! <root>/
//!   gc.lock                        flock: shared by publishers, exclusive for GC
//!   objects/<2 hex>/<62 hex>       artifact bytes, named by their SHA-256
//!   objects/<2 hex>/<62 hex>.idx   the artifact's line/block index (agentrun_core::index:
//!                                  80-byte header, then 16 bytes per 64 KiB block)
//!   captures/<run_id>/             one live capture:
//!     lock                           exclusive flock held for the session's life
//!     s<i>, s<i>.idx                 capture file and index temp file of stream i
//!     m, m.idx                       the manifest of named output (at finish)
//!     protect                        digests being published
//!     reserve                        room set aside for publication (the record, indexes,
//!                                    manifest), freed when publication starts
//!   records/<run_id>.json          terminal result records (JSON of ResultRecord): GC roots
//!                                  (a record's output, and the artifacts it `keeps`); at
//!                                  most MAX_RECORD_BYTES, a larger file is refused unread
//!   sessions/<session_id>/         auto-mode sessions (see [`auto_session`])
//!   runtime/<run_id>/              0700 runtime directory of a run's result sink
//!     result                         the sink file the child writes (removed after the run)
//! ```
//!
//! Run ids are `<unix-millis>-<pid>-<counter>`, zero-padded, so they are unique and sort by
//! start time.
//!
//! # Crash safety
//!
//! The invariants, and why a SIGKILL (or power loss) at any point keeps them:
//!
//! * **No object holds bytes that do not match its name.** Bytes are only ever written to
//!   files inside `captures/<run_id>/`. At finish the capture file is cut to exactly the
//!   bytes the core machine hashed, `fsync`ed, and only then renamed into `objects/` (a
//!   rename is atomic), followed by an `fsync` of the object directory. A crash before the
//!   rename leaves nothing under the name; after it, the complete file.
//! * **No object is visible without its index.** The `.idx` is renamed into place (and its
//!   directory synced) before the object. GC removes the object before its index.
//! * **No record points at a missing object.** The record is written (temp + `fsync` +
//!   rename + `fsync` dir) only after every object it references is published, while the
//!   publisher holds `gc.lock` shared, so no GC can remove an object in between.
//! * **A compaction's record names only objects that are there.** Its one record keeps
//!   objects published or found earlier in the same process: each digest is added to the
//!   `protect` file of the compaction's own live capture before it is published (or before an
//!   existing object is checked), so no GC removes it before the record is written.
//! * **GC never removes what a live run needs.** A live capture's files sit in its own
//!   directory, which GC removes only when it can take the directory's `lock` (the owning
//!   process is gone: the kernel drops an `flock` with its last descriptor). Capture
//!   directories are created and locked under the shared `gc.lock`, so GC never sees one in
//!   between. Objects younger than the grace period are kept even when unreferenced, and a
//!   dedupe hit refreshes the existing object's mtime.
//! * **No run references bytes that do not read back.** A dedupe hit checks the stored copy
//!   against the fresh capture (file types and modes, the index byte for byte, every block's
//!   CRC-32) and replaces a damaged copy by the same renames as a new object; a reader that
//!   opened the old file keeps it.
//! * Checked by killing a process with SIGKILL at every step of publication in turn (before
//!   and after each `fsync` and `rename`; `crash_tests`, with the test-only fault points of
//!   `fault`) and checking the store after each crash.
//! * **A full disk loses no run.** A capture sets aside room for its publication before it
//!   starts (`reserve`, with smaller preview budgets when the full room is missing, refused
//!   with [`StoreError::NoSpace`] only when not even the minimum is there); a failed write
//!   ends only its stream, and the bytes before it are published with a record marked
//!   incomplete, written into the reserve's own blocks (never freed first), or as the
//!   minimal record (no previews) when it does not fit them. If publication fails all the
//!   same on a full disk, nothing is taken back (GC removes what no record names later); for
//!   any other failure the objects it published for the first time are taken back (under the
//!   exclusive GC lock, unless another live capture protects them, a record written meanwhile
//!   names them, or a dedupe hit refreshed them), so none is left without a record.
//! * Leftovers of a crash (an unlocked capture directory, a record temp file, an index whose
//!   object is gone, unreferenced objects) are harmless and removed by the next GC.
//!
//! # Integrity of reads
//!
//! Every block a read returns is checked against the CRC-32 in its index entry, and every
//! index entry carries its own checksum, so a flipped byte anywhere in a returned range is an
//! error ([`ReadError::Corrupt`] / [`ReadError::CorruptIndex`]), never data. Reading a page
//! costs `O(log blocks)` index entries plus the blocks covering the page. [`Store::verify`]
//! re-hashes whole objects.

mod atomic;
pub mod auto_session;
mod aws_profile;
mod backend;
mod capture;
mod compaction;
pub mod config;
#[cfg(test)]
mod crash_tests;
mod error;
pub mod fanout;
mod fault;
#[cfg(test)]
mod full_disk_tests;
pub mod gc;
pub mod harness_sessions;
mod layout;
pub mod live;
mod lock;
// The one module with `unsafe` code: mapping capture files to hash spliced bytes in place
// (its safety argument is in its documentation).
#[allow(unsafe_code)]
mod mapped;
pub mod names;
mod outbox;
mod read;
mod record_file;
pub mod remote;
#[cfg(test)]
mod remote_tests;
mod reserve;
pub mod runs;
pub mod sink;
pub mod special;
mod store;
mod verify;

pub use auto_session::{SessionDir, SessionError};
pub use aws_profile::ProfileError;
pub use capture::{CaptureProgress, CaptureSession, CaptureWriteError};
pub use compaction::{RETAINED_DISPLAY, RetainError, Retained, RetentionSession};
pub use error::IoError;
pub use gc::{GcOptions, GcReport};
pub use live::{LiveFollower, LiveRun, LiveState, LiveStream};
pub use names::{NameError, Named};
pub use read::{MAX_MANIFEST_BYTES, ReadError};
pub use remote::{RemoteError, UrlError, is_store_url};
pub use runs::{RunEntry, RunListing, UnreadableRun, run_id_started};
pub use sink::{PreparedSink, read_sink};
pub use store::{Store, StoreError};
pub use verify::VerifyReport;
