//! Reading a capture file's fresh bytes where they lie, in the page cache.
//!
//! When a pipe's bytes are spliced into a capture file they never pass through user space;
//! the hasher then reads them through a read-only shared mapping instead of copying them out
//! again. This module holds the only `unsafe` code of the store: mapping, reading and
//! unmapping a window of a file.
//!
//! The one rule that makes reading safe: a byte is read only once the file is known to hold
//! it, and the file is never cut below a byte being read. Reading a mapped page that lies
//! wholly past the end of the file raises `SIGBUS`. Capture files satisfy the rule: they live
//! in the session's private directory, they only grow while the session lives (a failed write
//! is cut back to the bytes written before it, which the hasher may still read, never below),
//! and they are cut to the accepted length only after the hasher thread has stopped. Another
//! process of the same user that truncates a live capture file can crash the capturing
//! process; it could as well kill it. A page that cannot be read back also raises `SIGBUS`:
//! mappings are used only on local file systems ([`maps_safely`]), and the capture never
//! drops a page from the cache before the hasher has read it.

use std::ffi::c_void;
use std::fs::File;
use std::io;

use rustix::mm::{MapFlags, ProtFlags};

/// Whether `file` lies on a local file system whose pages can be mapped without the risk that
/// reading one fails for reasons other than a damaged disk: ext4, XFS, Btrfs, F2FS, tmpfs. On
/// a network or FUSE file system a page the kernel cannot read back raises `SIGBUS` in the
/// reader, where a `read` would return an error; there the hasher copies instead.
pub(crate) fn maps_safely(file: &File) -> bool {
    const EXT4: i128 = 0xEF53;
    const XFS: i128 = 0x5846_5342;
    const BTRFS: i128 = 0x9123_683E;
    const F2FS: i128 = 0xF2F5_2010;
    const TMPFS: i128 = 0x0102_1994;
    rustix::fs::fstatfs(file)
        .is_ok_and(|fs| matches!(i128::from(fs.f_type), EXT4 | XFS | BTRFS | F2FS | TMPFS))
}

/// Bytes mapped at once. A window's pages count in the process's resident memory while it is
/// mapped, so it stays small; the cost of a new mapping every 4 MiB is negligible.
pub(crate) const WINDOW: u64 = 4 << 20;

/// A read-only shared mapping of `[base, base + WINDOW)` of a file, `base` a multiple of
/// [`WINDOW`] (hence of the page size).
#[derive(Debug)]
pub(crate) struct FileWindow {
    ptr: *mut c_void,
    base: u64,
}

impl FileWindow {
    /// Maps the window of `file` that holds offset `at`. The file may be shorter than the
    /// window; only its pages below the end of the file may be read.
    pub(crate) fn map(file: &File, at: u64) -> io::Result<Self> {
        let base = at - at % WINDOW;
        // SAFETY: a fresh mapping chosen by the kernel (null hint), so no existing memory is
        // replaced; it is read only through `bytes`, whose caller promises the file holds the
        // bytes read, and unmapped once in `drop`.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                WINDOW as usize,
                ProtFlags::READ,
                MapFlags::SHARED,
                file,
                base,
            )
        }?;
        Ok(Self { ptr, base })
    }

    /// Whether `at` lies in this window.
    pub(crate) fn holds(&self, at: u64) -> bool {
        (self.base..self.base + WINDOW).contains(&at)
    }

    /// The bytes of `[at, at + len)` clipped to this window: the part of the range the window
    /// holds, from `at` (which [`holds`](Self::holds) must accept).
    ///
    /// # Safety
    ///
    /// The file must hold every byte of the range (its length is at least `at + len`) and
    /// must not be cut below `at + len` while the returned slice lives.
    pub(crate) unsafe fn bytes(&self, at: u64, len: usize) -> &[u8] {
        assert!(self.holds(at), "offset {at} is outside the mapped window");
        let start = (at - self.base) as usize;
        let len = len.min(WINDOW as usize - start);
        // SAFETY: `start + len <= WINDOW`, within the mapping; the caller guarantees the
        // file holds these bytes, so their pages are backed and reading them cannot fault;
        // the mapping is read-only and outlives the borrow of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>().add(start), len) }
    }
}

impl Drop for FileWindow {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the start of a mapping of `WINDOW` bytes made in `map`, unmapped
        // only here, and no slice borrowed from it outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr, WINDOW as usize) };
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_window_reads_what_the_file_holds_and_clips_at_its_end() {
        let mut file = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..WINDOW + 100).map(|i| (i % 251) as u8).collect();
        file.write_all(&bytes).unwrap();
        let first = FileWindow::map(&file, 10).unwrap();
        assert!(first.holds(0) && first.holds(WINDOW - 1) && !first.holds(WINDOW));
        // SAFETY: the file holds all of `bytes` and is not cut.
        let (start, clipped) = unsafe { (first.bytes(10, 5), first.bytes(WINDOW - 3, 50)) };
        assert_eq!(start, &bytes[10..15]);
        assert_eq!(clipped, &bytes[(WINDOW - 3) as usize..WINDOW as usize]);
        let second = FileWindow::map(&file, WINDOW + 7).unwrap();
        // SAFETY: as above; the file ends 100 bytes into this window.
        let tail = unsafe { second.bytes(WINDOW + 7, 93) };
        assert_eq!(tail, &bytes[(WINDOW + 7) as usize..]);
    }
}
