//! The error type of every library crate.

/// Errors carry the operation, the names and the shapes involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: tensor `{name}` has shape {found:?}, expected {expected:?}")]
    Shape {
        op: &'static str,
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("{op}: tensor `{name}` is missing from {source_name}")]
    MissingTensor {
        op: &'static str,
        name: String,
        source_name: String,
    },
    #[error("{op}: tensor `{name}` has dtype {found}, expected one of {expected}")]
    Dtype {
        op: &'static str,
        name: String,
        expected: String,
        found: String,
    },
    #[error("{op}: {path}: malformed file: {reason}")]
    Format {
        op: &'static str,
        path: String,
        reason: String,
    },
    #[error("{op}: invalid input: {reason}")]
    Input { op: &'static str, reason: String },
    #[error("{op}: code {code} at row {row}, codebook {codebook} is outside [0, {cardinality})")]
    CodeOutOfRange {
        op: &'static str,
        row: usize,
        codebook: usize,
        code: i64,
        cardinality: usize,
    },
    #[error("{op}: code {code} at stream {stream}, frame {frame}, codebook {codebook} is outside [0, {cardinality})")]
    CodeOutOfRangeAt {
        op: &'static str,
        stream: usize,
        frame: usize,
        codebook: usize,
        code: i64,
        cardinality: usize,
    },
    #[error("{op}: slot {slot} is outside [0, {max_slots})")]
    UnknownSlot {
        op: &'static str,
        slot: usize,
        max_slots: usize,
    },
    #[error("{op}: batch of {batch} exceeds the largest bucket {largest}")]
    BatchTooLarge {
        op: &'static str,
        batch: usize,
        largest: usize,
    },
    #[error("{op}: configuration: {reason}")]
    Config { op: &'static str, reason: String },
    #[error("{op}: model `{model}` could not be fetched: {reason}")]
    Fetch {
        op: &'static str,
        model: String,
        reason: String,
    },
    #[error("{op}: backend {backend}: {reason}")]
    Backend {
        op: &'static str,
        backend: &'static str,
        reason: String,
    },
    #[error("{op}: cannot allocate {bytes} bytes: too many streams, songs or positions for this machine's memory")]
    OutOfMemory { op: &'static str, bytes: usize },
    #[error("{op}: {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The result type of every library crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Shorthand for an [`Error::Input`].
    pub fn input(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Input {
            op,
            reason: reason.into(),
        }
    }

    /// Shorthand for an [`Error::Config`].
    pub fn config(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Config {
            op,
            reason: reason.into(),
        }
    }

    /// Shorthand for an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
