//! Opening a file that must be a regular file, without ever waiting on what is not one.
//!
//! A path can hold a FIFO, a socket or a device as well as a file. A plain `open` of a FIFO
//! waits for a writer (forever, when none comes), a device may do anything on open, and a
//! check of the path before the open is raced by a swap. So the file is opened with
//! `O_NONBLOCK | O_NOCTTY` (a FIFO opens at once, a terminal never becomes the controlling
//! one), optionally `O_NOFOLLOW` (the store's files are its own, never links), and `fstat` on
//! the opened descriptor decides: anything but a regular file is refused, by its type.

use std::fs::{self, File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::OFlags;
use rustix::io::Errno;

/// Why [`open_regular`] gave no file.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The path holds something other than a regular file ("a FIFO", "a directory", …, see
    /// [`describe`]).
    NotRegular(&'static str),
    /// The open or the `fstat` failed.
    Io(io::Error),
}

/// Whether a final symbolic link is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// Followed (a user's settings file may well be a link into a dotfiles repository).
    Follow,
    /// Refused as "a symbolic link" (the store's files).
    Refuse,
}

/// Opens `path` read-only if it is a regular file; never blocks on a FIFO. Returns the file
/// and what `fstat` said about it.
pub(crate) fn open_regular(path: &Path, links: Links) -> Result<(File, fs::Metadata), OpenError> {
    let mut flags = OFlags::NONBLOCK | OFlags::NOCTTY;
    if links == Links::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        // ELOOP: a symlink (with O_NOFOLLOW); ENXIO: a socket, or a device without a driver.
        // Say which from the entry itself.
        Err(e)
            if [Errno::LOOP, Errno::NXIO]
                .map(|n| Some(n.raw_os_error()))
                .contains(&e.raw_os_error()) =>
        {
            let meta = match links {
                Links::Refuse => fs::symlink_metadata(path),
                Links::Follow => fs::metadata(path),
            };
            return Err(match meta {
                Ok(meta) if !meta.is_file() => OpenError::NotRegular(describe(meta.file_type())),
                _ => OpenError::Io(e),
            });
        }
        Err(e) => return Err(OpenError::Io(e)),
    };
    let meta = file.metadata().map_err(OpenError::Io)?;
    if !meta.is_file() {
        return Err(OpenError::NotRegular(describe(meta.file_type())));
    }
    Ok((file, meta))
}

/// Opens `path` (following links) read-only if it is a regular file, without waiting on a
/// FIFO: a file that must hold data at rest (a harness's retained record, a session log).
/// Anything else is refused as `InvalidInput`, naming its type ("it is a FIFO (named pipe),
/// not a regular file"). The descriptor keeps `O_NONBLOCK`, which regular files ignore.
pub fn open_regular_file(path: &Path) -> io::Result<(File, fs::Metadata)> {
    open_regular(path, Links::Follow).map_err(into_io)
}

/// "a directory", "a FIFO (named pipe)", … for messages.
pub(crate) fn describe(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

/// Why [`read_regular`] gave no bytes.
#[derive(Debug)]
pub(crate) enum RegularReadError {
    /// As [`OpenError::NotRegular`].
    NotRegular(&'static str),
    /// The file holds more than the limit: its size (at least the limit plus one).
    TooLarge(u64),
    /// The open or the `fstat` failed (`NotFound`: nothing is there).
    Open(io::Error),
    /// A read failed.
    Read(io::Error),
}

/// Reads the regular file at `path` whole, at most `limit` bytes: a larger one is
/// [`RegularReadError::TooLarge`] without being read past the limit. Returns what `fstat` said
/// about the file too.
pub(crate) fn read_regular(
    path: &Path,
    links: Links,
    limit: u64,
) -> Result<(Vec<u8>, fs::Metadata), RegularReadError> {
    let (file, meta) = open_regular(path, links).map_err(|e| match e {
        OpenError::NotRegular(what) => RegularReadError::NotRegular(what),
        OpenError::Io(e) => RegularReadError::Open(e),
    })?;
    if meta.len() > limit {
        return Err(RegularReadError::TooLarge(meta.len()));
    }
    // Sized from fstat (at most the limit); one byte past the limit shows a file that grew
    // since, or whose size fstat does not tell.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    io::Read::read_to_end(
        &mut io::Read::take(file, limit.saturating_add(1)),
        &mut bytes,
    )
    .map_err(RegularReadError::Read)?;
    if bytes.len() as u64 > limit {
        return Err(RegularReadError::TooLarge(bytes.len() as u64));
    }
    Ok((bytes, meta))
}

/// An [`OpenError`] as an `io::Error` (a refused type is `InvalidInput`, naming the type).
pub(crate) fn into_io(e: OpenError) -> io::Error {
    match e {
        OpenError::Io(e) => e,
        OpenError::NotRegular(what) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file"),
        ),
    }
}

/// A file a user names as input (`--stdin FILE`, a transcript), opened by [`open_input`]
/// without waiting: read-only, `O_NONBLOCK` still set.
#[derive(Debug)]
#[non_exhaustive]
pub enum InputFile {
    /// A regular file.
    Regular(File),
    /// A FIFO, a pipe (`/dev/stdin`, `<(cmd)`) or a character device that is not a terminal:
    /// its bytes come when a writer sends them. A FIFO opened this way reads as at its end
    /// until a writer has opened it, so wait for it to be readable (`poll`, which reports
    /// the end only after a writer came and went) before taking an empty read as the end.
    Stream(File),
}

impl InputFile {
    /// What `fstat` says about the opened file.
    pub fn metadata(&self) -> io::Result<fs::Metadata> {
        match self {
            InputFile::Regular(file) | InputFile::Stream(file) => file.metadata(),
        }
    }

    /// The file, to be read blocking: a stream is waited on until a writer sent something
    /// or came and went (this blocks the calling thread, which must not be one that handles
    /// signals or timeouts), then switched to blocking reads.
    pub fn into_blocking(self) -> io::Result<File> {
        match self {
            InputFile::Regular(file) => Ok(file),
            InputFile::Stream(file) => {
                use rustix::event::{PollFd, PollFlags, poll};
                loop {
                    let mut fds = [PollFd::new(&file, PollFlags::IN)];
                    match poll(&mut fds, None) {
                        Ok(_) => break,
                        Err(Errno::INTR) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                let flags = rustix::fs::fcntl_getfl(&file)?;
                rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
                Ok(file)
            }
        }
    }
}

/// Why [`open_input`] refused a path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// Something that cannot be read as a stream of bytes: a directory, a socket, a block
    /// device.
    #[error("it is {0}, which cannot be read as input; give a regular file or a pipe")]
    Type(&'static str),
    /// A terminal, which a program running in its own process group cannot read.
    #[error("it is a terminal; give a regular file or a pipe")]
    Terminal,
    /// The open or the `fstat` failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Opens an input file a user named, following links (`/dev/stdin` is one): with
/// `O_NONBLOCK | O_NOCTTY`, so a FIFO without a writer opens at once and a terminal never
/// becomes the controlling one, and judged by `fstat` on the opened descriptor. A regular
/// file, a FIFO or pipe and a character device that is not a terminal (`/dev/null`) are
/// accepted; anything else is refused by its type.
pub fn open_input(path: &Path) -> Result<InputFile, InputError> {
    let flags = OFlags::NONBLOCK | OFlags::NOCTTY;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        // ENXIO: a socket (also behind /dev/stdin); say so from what is there.
        Err(e) if e.raw_os_error() == Some(Errno::NXIO.raw_os_error()) => {
            return Err(match fs::metadata(path) {
                Ok(meta) if !meta.is_file() => InputError::Type(describe(meta.file_type())),
                _ => InputError::Io(e),
            });
        }
        Err(e) => return Err(InputError::Io(e)),
    };
    let t = file.metadata()?.file_type();
    if t.is_file() {
        Ok(InputFile::Regular(file))
    } else if t.is_fifo() {
        Ok(InputFile::Stream(file))
    } else if t.is_char_device() {
        if std::io::IsTerminal::is_terminal(&file) {
            Err(InputError::Terminal)
        } else {
            Ok(InputFile::Stream(file))
        }
    } else {
        Err(InputError::Type(describe(t)))
    }
}

/// "a directory", "a FIFO (named pipe)", "a socket", "a character device", … for messages.
pub fn describe_file_type(t: FileType) -> &'static str {
    describe(t)
}
