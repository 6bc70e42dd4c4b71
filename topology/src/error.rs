//! The crate's single error type.

/// Everything that can go wrong when parsing a host list or planning a forest.
///
/// Variants name the offending input so the message is actionable on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// The host list (expression, file or slice) names no host at all.
    #[error("empty host list")]
    EmptyList,
    /// A `[` without its `]`, or a `]` without its `[`.
    #[error("unbalanced bracket in `{expr}` at byte {pos}")]
    UnbalancedBrackets {
        /// The whole expression.
        expr: String,
        /// Byte offset of the offending bracket.
        pos: usize,
    },
    /// A `[` inside a bracket group (`a[1[2]]`).
    #[error("nested bracket in `{expr}` at byte {pos}")]
    NestedBrackets {
        /// The whole expression.
        expr: String,
        /// Byte offset of the inner `[`.
        pos: usize,
    },
    /// A bracket element that is not `N` or `N-M` with decimal digits.
    #[error("bad range `{range}` in `{expr}`: {reason}")]
    BadRange {
        /// The whole expression.
        expr: String,
        /// The element inside the brackets.
        range: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A range whose low end is above its high end (`[9-3]`).
    #[error("reversed range `{range}` in `{expr}`")]
    ReversedRange {
        /// The whole expression.
        expr: String,
        /// The element inside the brackets.
        range: String,
    },
    /// The same host appears twice.
    #[error("duplicate host `{host}`")]
    DuplicateHost {
        /// The repeated host name.
        host: String,
    },
    /// The list would expand to more than `limit` hosts.
    #[error("host list too large: more than {limit} hosts")]
    TooManyHosts {
        /// The limit, [`crate::MAX_HOSTS`].
        limit: usize,
    },
    /// A host name the planner cannot use (empty, reserved, or with separators).
    #[error("invalid host name `{host}`: {reason}")]
    InvalidHostName {
        /// The offending name.
        host: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// [`crate::PlanParams`] out of range.
    #[error(
        "invalid plan parameters (subtrees={subtrees}, replicas={replicas}, arity={arity}): {reason}"
    )]
    InvalidParams {
        /// K.
        subtrees: usize,
        /// R.
        replicas: usize,
        /// A.
        arity: usize,
        /// Which rule is broken.
        reason: &'static str,
    },
    /// An error on one line of a host file (1-based line number).
    #[error("host file line {line}: {error}")]
    HostFile {
        /// 1-based line number.
        line: usize,
        /// The error on that line.
        error: Box<TopologyError>,
    },
}
