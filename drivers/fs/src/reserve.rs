//! The room a capture sets aside before it starts so that its record can always be written,
//! even when the program's output fills the disk: how large it is, how it is taken (halving
//! down to [`MIN_RESERVE`] with the preview budgets cut to fit) and the minimal record that is
//! written when even the full record does not fit.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use agentrun_core::{PreviewLimits, ResultRecord};

use crate::atomic::{self, fsync_dir};
use crate::error::{IoContext, IoError};
use crate::layout;
use crate::store::StoreError;

/// The worst growth of text in a JSON string that a reserve is sized for: printable text,
/// tabs and newlines, quotes and backslashes each take at most two bytes. Only other control
/// bytes take more (`\u00XX`, six); a record whose previews hold many of them may not fit its
/// reserve, and then falls back to the minimal record (see [`minimal_record`]).
pub(crate) const JSON_GROWTH: u64 = 2;

/// The growth of the command's text: every byte at its worst (`\u00XX`), since the run's
/// description is part of the minimal record and must always fit. Commands are short.
pub(crate) const COMMAND_JSON_GROWTH: u64 = 6;

/// Room the publication steps before the record may need (the last index entries of every
/// stream, the manifest and its index, the `protect` file, a directory block or two): given
/// back from the reserve in [`STEP_ROOM`] pieces, only when a step finds the disk full.
pub(crate) const RESERVE_BASE: u64 = 128 << 10;

/// The piece of the reserve a publication step that found the disk full is given back before
/// it is tried again.
pub(crate) const STEP_ROOM: u64 = 32 << 10;

/// A kept artifact in the record's JSON: `"sha256:<64 hex>",` on its own indented line.
pub(crate) const KEEP_JSON_BYTES: u64 = 80;

/// Room for the record's fixed fields, its faults and its stream URIs: what the minimal
/// record needs besides the run's command.
pub(crate) const RECORD_FIXED: u64 = 32 << 10;

/// Most room set aside for previews and display: past it, a record that does not fit on a
/// full disk is written as the minimal record.
pub(crate) const MAX_PREVIEW_ROOM: u64 = 8 << 20;

/// Room for the run's command taken with every reserve (4 KiB of command text at its worst
/// growth): a command this short needs no allocation of its own once the run is set up, so a
/// disk that had just the room for the reserve does not refuse it for the last few bytes.
pub(crate) const COMMAND_ROOM: u64 = (4 << 10) * COMMAND_JSON_GROWTH;

/// The smallest reserve a capture may start with: publication's steps and the minimal record
/// with a short command.
pub(crate) const MIN_RESERVE: u64 = RESERVE_BASE + RECORD_FIXED + COMMAND_ROOM;

/// The bytes set aside before a capture starts for everything its publication writes (see
/// [`Reserve`]): [`MIN_RESERVE`] plus, at the JSON growth of text ([`JSON_GROWTH`]), the live
/// display and every stream's head and tail previews (up to [`MAX_PREVIEW_ROOM`]).
pub(crate) fn reserve_len(streams: usize, limits: &PreviewLimits, display_bytes: usize) -> u64 {
    let tail = if limits.tail_lines > 0 {
        limits.tail_budget(streams)
    } else {
        0
    };
    let previews = streams as u64 * (limits.stream_budget(streams) + tail) as u64;
    let room = (previews + display_bytes as u64) * JSON_GROWTH;
    MIN_RESERVE + room.min(MAX_PREVIEW_ROOM)
}

/// Whether an error is a full disk: `ENOSPC`, or a disk quota reached (`EDQUOT`).
pub(crate) fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(n) if n == rustix::io::Errno::NOSPC.raw_os_error()
            || n == rustix::io::Errno::DQUOT.raw_os_error()
    )
}

/// Whether a store error is a full disk (see [`is_no_space`]).
pub(crate) fn store_no_space(e: &StoreError) -> bool {
    match e {
        StoreError::Io(io) => is_no_space(&io.source),
        StoreError::NoSpace { .. } => true,
        _ => false,
    }
}

/// The file `captures/<run_id>/reserve`: space allocated when the capture starts that becomes
/// the record. Publication never frees it and then allocates again (anything else on the file
/// system could take the room in between): the record's JSON is written into its blocks in
/// place, the file is cut to the record's length and renamed into `records/`. Only a step
/// before the record that finds the disk full gets a piece of it back ([`STEP_ROOM`]).
#[derive(Debug)]
pub(crate) struct Reserve {
    pub(crate) path: PathBuf,
    pub(crate) len: u64,
    /// What is left of [`COMMAND_ROOM`] for [`CaptureSession::reserve_record_room`].
    pub(crate) command_room: u64,
}

impl Reserve {
    /// Allocates `len` bytes in `dir`. A file system without room is
    /// [`StoreError::NoSpace`], before anything runs.
    pub(crate) fn take(dir: &Path, len: u64) -> Result<Self, StoreError> {
        let path = dir.join("reserve");
        layout::new_private_file().open(&path).at("create", &path)?;
        let mut reserve = Self {
            path,
            len: 0,
            command_room: COMMAND_ROOM,
        };
        reserve.grow_to(len)?;
        Ok(reserve)
    }

    /// Makes the reserve at least `len` bytes.
    pub(crate) fn grow_to(&mut self, len: u64) -> Result<(), StoreError> {
        if len <= self.len {
            return Ok(());
        }
        let allocated = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|f| allocate(&f, self.len, len));
        match allocated {
            Ok(()) => {
                self.len = len;
                Ok(())
            }
            // A file-size limit (RLIMIT_FSIZE) bounds each file, not the room on the disk:
            // the record is a file of its own, under the same limit, so the reserve goes
            // without the bytes the limit refuses.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::FBIG.raw_os_error()) => Ok(()),
            Err(e) if is_no_space(&e) => {
                // What a failed allocation left allocated is given back.
                let _ = OpenOptions::new()
                    .write(true)
                    .open(&self.path)
                    .and_then(|f| f.set_len(self.len));
                Err(StoreError::NoSpace {
                    // `<root>/captures/<run_id>/reserve`: the store is what the user knows.
                    path: self
                        .path
                        .ancestors()
                        .nth(3)
                        .unwrap_or(&self.path)
                        .to_owned(),
                    needed: len,
                    source: e,
                })
            }
            Err(e) => Err(IoError::at("allocate", &self.path, e).into()),
        }
    }

    /// Gives [`STEP_ROOM`] back to the file system for a publication step that found the disk
    /// full, keeping at least [`RECORD_FIXED`] for the record. `false` if there is nothing
    /// left to give.
    pub(crate) fn give_back(&mut self) -> bool {
        if self.len <= RECORD_FIXED {
            return false;
        }
        let len = self.len.saturating_sub(STEP_ROOM).max(RECORD_FIXED);
        let cut = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|f| f.set_len(len));
        if cut.is_err() {
            return false;
        }
        self.len = len;
        true
    }

    /// Writes `json` into the reserve's blocks and makes it `records/<name>`: written in
    /// place, cut to its length, synced, renamed, the directory synced. A record longer than
    /// the reserve needs more blocks, and may find the disk full.
    pub(crate) fn become_record(
        &self,
        records: &Path,
        name: &str,
        json: &[u8],
    ) -> Result<(), IoError> {
        let file = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .at("open", &self.path)?;
        crate::fault::fail_io("writing the record").at("write", &self.path)?;
        file.write_all_at(json, 0).at("write", &self.path)?;
        file.set_len(json.len() as u64).at("truncate", &self.path)?;
        atomic::sync_file(&file, &self.path)?;
        let target = records.join(name);
        crate::fault::point("before a rename");
        fs::rename(&self.path, &target).at("rename into place", &target)?;
        crate::fault::point("after a rename");
        fsync_dir(records)
    }

    /// Frees the room (best effort: a reserve that cannot be removed goes with the capture
    /// directory).
    pub(crate) fn release(self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Allocates the bytes of `file` from `from` to `to`: `fallocate` where the file system has
/// it, else by writing zeros and syncing them (which a file system that compresses or
/// deduplicates may not store, so there the reserve is only as good as the file system makes
/// it).
pub(crate) fn allocate(file: &File, from: u64, to: u64) -> io::Result<()> {
    crate::fault::fail_io("allocating the reserve")?;
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, to) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {}
        Err(e) => return Err(e.into()),
    }
    let zeros = vec![0u8; 64 << 10];
    let mut at = from;
    while at < to {
        let n = zeros
            .len()
            .min(usize::try_from(to - at).unwrap_or(usize::MAX));
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    // Written back now: a delayed-allocation file system finds a full disk here, not later
    // when the blocks are needed.
    file.sync_data()
}

/// The record cut down to what must always be kept, when the full record does not fit the
/// room left: status, faults, exit and run, every URI and kept artifact, but no preview
/// text and no display. Each preview then covers no bytes (and says the stream goes on), so
/// the record stays true: the output is read through its URI.
pub(crate) fn minimal_record(record: &ResultRecord) -> ResultRecord {
    let mut minimal = record.clone();
    minimal.display.clear();
    let streams = match &mut minimal.output {
        agentrun_core::record::RecordOutput::Single { stream } => std::slice::from_mut(stream),
        agentrun_core::record::RecordOutput::Named { streams, .. } => streams.as_mut_slice(),
    };
    for stream in streams {
        stream.preview.truncated = stream.bytes > 0;
        stream.preview.text.clear();
        stream.preview.raw_bytes = 0;
        stream.preview.newlines = 0;
        stream.tail = None;
    }
    minimal
}

/// Sets aside the reserve of a capture of `streams` streams under `limits`: all of it
/// ([`reserve_len`]) when the file system has the room, else the most it has, halving down to
/// [`MIN_RESERVE`], with the preview and display budgets cut to fit what was had (returned with
/// the live display bound): a small run is never refused because the room for large previews
/// is missing. [`StoreError::NoSpace`] only when not even [`MIN_RESERVE`] is free.
pub(crate) fn take_reserve(
    dir: &Path,
    streams: usize,
    limits: PreviewLimits,
) -> Result<(Reserve, Option<(PreviewLimits, usize)>), StoreError> {
    let display = agentrun_core::capture::DEFAULT_DISPLAY_BYTES;
    let full = reserve_len(streams, &limits, display);
    let mut reserve = Reserve::take(dir, 0)?;
    let mut len = full;
    loop {
        match reserve.grow_to(len) {
            Ok(()) => break,
            Err(StoreError::NoSpace { .. }) if len > MIN_RESERVE => {
                len = (len / 2).max(MIN_RESERVE);
            }
            Err(e) => {
                reserve.release();
                return Err(e);
            }
        }
    }
    if len >= full {
        return Ok((reserve, None));
    }
    // The text the room left holds: a quarter for the display, the rest for the previews,
    // each stream's head and (when on) its tail, which is a quarter of the head.
    let text = (len - MIN_RESERVE) / JSON_GROWTH;
    let display = usize::try_from(text / 4).unwrap_or(usize::MAX).min(display);
    let previews = text - display as u64;
    let per_stream = if limits.tail_lines > 0 {
        previews * 4 / 5
    } else {
        previews
    } / streams.max(1) as u64;
    let mut shrunk = limits;
    shrunk.max_bytes = usize::try_from(per_stream)
        .unwrap_or(usize::MAX)
        .clamp(1, limits.max_bytes);
    Ok((reserve, Some((shrunk, display))))
}
