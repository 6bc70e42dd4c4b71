//! The crate's one error type.

use std::path::PathBuf;

/// What went wrong in the leaf agent, and with which input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeafError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a text file did not have the expected shape.
    #[error("{format}: line {line}: {reason}")]
    Parse {
        /// Which format was being parsed, e.g. `/proc/stat`.
        format: &'static str,
        /// 1-based line number (0 when the whole text is at fault).
        line: usize,
        /// What was wrong.
        reason: String,
    },
    /// A field that the format guarantees was not there.
    #[error("{format}: missing {field}")]
    Missing {
        /// Which format was being parsed.
        format: &'static str,
        /// The field that was not found.
        field: &'static str,
    },
    /// The scheduler could not tell about a job (timeout, failure, garbage).
    #[error("scheduler, job {job_id}: {reason}")]
    Scheduler {
        /// The job asked about.
        job_id: u64,
        /// What went wrong.
        reason: String,
    },
}

impl LeafError {
    /// Shorthand for [`LeafError::Parse`].
    pub(crate) fn parse(format: &'static str, line: usize, reason: impl Into<String>) -> Self {
        LeafError::Parse {
            format,
            line,
            reason: reason.into(),
        }
    }

    /// Shorthand for [`LeafError::Io`].
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LeafError::Io {
            path: path.into(),
            source,
        }
    }
}
