//! Typed errors.
//!
//! Two levels: [`SampleError`] says why one image could not become a sample
//! (it never stops an epoch under [`OnError::Skip`](crate::pipeline::OnError::Skip));
//! [`Error`] is what the library's functions return, and wraps a sample error
//! together with the file it came from.

use std::io;
use std::path::PathBuf;

/// Result type of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the library can fail with.
///
/// `Debug` prints the same message as `Display`, so that a `main` that
/// returns `gpufeed::Result` reports an error the way a user reads it.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One sample failed; `path` names the file.
    #[error("{}: {source}", path.display())]
    Sample {
        /// The file the sample came from.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: SampleError,
    },
    /// A dataset could not be listed (missing folder, unreadable list file).
    #[error("{}: {source}", path.display())]
    Io {
        /// The folder or list file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// A dataset was listed but is not usable (empty, malformed list line).
    #[error("{}: {msg}", path.display())]
    Dataset {
        /// The folder or list file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// The builder was given settings that do not fit together.
    #[error("invalid pipeline configuration: {0}")]
    Config(String),
    /// The requested device cannot be used.
    #[error("device unavailable: {0}")]
    Device(String),
    /// A CUDA driver call failed at run time (a copy, a launch, an event);
    /// the driver's error is kept as the source.
    #[error("CUDA: {what}: {source}")]
    Cuda {
        /// What the call was for.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// An nvJPEG call failed at run time; its status is kept as the source.
    #[error("nvJPEG: {call}: {source}")]
    Nvjpeg {
        /// The nvJPEG function.
        call: &'static str,
        /// Its status.
        #[source]
        source: NvJpegStatus,
    },
    /// A pipeline thread stopped unexpectedly; the pipeline cannot continue.
    #[error("pipeline worker stopped: {0}")]
    Worker(String),
    /// No sample of an epoch could be used (every file failed): the epoch
    /// ends with this instead of an empty batch, listing each failure.
    #[error(
        "epoch {epoch}: none of {} samples could be used; the first: {}",
        skipped.len(),
        skipped.first().map_or(String::new(), |e| e.to_string())
    )]
    NoSamples {
        /// The epoch.
        epoch: u64,
        /// Every sample's error, each naming its file.
        skipped: Vec<Error>,
    },
    /// The trainer holds every device batch slot and asked for another
    /// batch: waiting would deadlock, so the epoch ends with this instead.
    #[error(
        "all {slots} device batch slots are held by the trainer: drop a Batch before asking \
         for the next one, or raise .prefetch()"
    )]
    SlotsHeld {
        /// The pipeline's slots (`prefetch + 1`).
        slots: usize,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// [`Error::Cuda`] for a failed driver call made for `what`, as a
    /// `map_err` argument.
    pub(crate) fn cuda(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error + Copy {
        move |source| Error::Cuda { what, source }
    }

    /// The per-sample error inside, if this is one.
    pub fn sample_error(&self) -> Option<&SampleError> {
        match self {
            Error::Sample { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why one image could not be turned into a sample.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SampleError {
    /// The file could not be read.
    #[error("read failed: {0}")]
    Read(#[from] io::Error),
    /// The file is larger than the reader's byte limit.
    #[error("file is {bytes} bytes, over the limit of {limit}")]
    FileTooLarge {
        /// Size of the file.
        bytes: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The bytes do not start with a JPEG SOI marker.
    #[error("not a JPEG file ({0})")]
    NotJpeg(&'static str),
    /// The data ends before the header or image is complete.
    #[error("truncated: {0}")]
    Truncated(&'static str),
    /// A well-formed JPEG that this decoder does not handle.
    #[error("unsupported JPEG: {0}")]
    Unsupported(String),
    /// Width or height is zero.
    #[error("invalid dimensions {width}x{height}")]
    BadDimensions {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
    },
    /// The image has more pixels than the configured limit.
    #[error("{width}x{height} exceeds the pixel limit of {limit}")]
    TooLarge {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// The configured limit in pixels.
        limit: u64,
    },
    /// The header or entropy-coded data is malformed.
    #[error("corrupt JPEG: {0}")]
    Corrupt(String),
    /// A decoder panicked on this input; the panic was contained.
    #[error("decoder panicked: {0}")]
    Panic(String),
}

/// Coarse classes of [`SampleError`], for counting in
/// [`Stats`](crate::pipeline::Stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// [`SampleError::Read`] and [`SampleError::FileTooLarge`].
    Read,
    /// [`SampleError::NotJpeg`].
    NotJpeg,
    /// [`SampleError::Truncated`].
    Truncated,
    /// [`SampleError::Unsupported`].
    Unsupported,
    /// [`SampleError::BadDimensions`] and [`SampleError::TooLarge`].
    Dimensions,
    /// [`SampleError::Corrupt`] and [`SampleError::Panic`].
    Corrupt,
}

impl ErrorKind {
    /// Every kind, in a fixed order (the order of [`Stats::errors`](crate::pipeline::Stats::errors)).
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Read,
        ErrorKind::NotJpeg,
        ErrorKind::Truncated,
        ErrorKind::Unsupported,
        ErrorKind::Dimensions,
        ErrorKind::Corrupt,
    ];

    /// A short lowercase name, stable for JSON output.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Read => "read",
            ErrorKind::NotJpeg => "not_jpeg",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Dimensions => "dimensions",
            ErrorKind::Corrupt => "corrupt",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl SampleError {
    /// The class this error is counted under.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SampleError::Read(_) | SampleError::FileTooLarge { .. } => ErrorKind::Read,
            SampleError::NotJpeg(_) => ErrorKind::NotJpeg,
            SampleError::Truncated(_) => ErrorKind::Truncated,
            SampleError::Unsupported(_) => ErrorKind::Unsupported,
            SampleError::BadDimensions { .. } | SampleError::TooLarge { .. } => {
                ErrorKind::Dimensions
            }
            SampleError::Corrupt(_) | SampleError::Panic(_) => ErrorKind::Corrupt,
        }
    }

    /// Attach the file name.
    pub(crate) fn at(self, path: impl Into<PathBuf>) -> Error {
        Error::Sample {
            path: path.into(),
            source: self,
        }
    }
}

/// An nvJPEG status code other than success, with its meaning (nvJPEG
/// documentation, "nvJPEG API Return Codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{name} ({code}): {meaning}")]
pub struct NvJpegStatus {
    /// The raw `nvjpegStatus_t`.
    pub code: u32,
    /// The constant's name.
    pub name: &'static str,
    /// What it means.
    pub meaning: &'static str,
}
