//! Value types the engine produces.

use crate::store::Labels;
use canopy_proto::model::METRIC_NAME;

/// One point of a range series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Timestamp in ms.
    pub t: i64,
    /// Value.
    pub v: f64,
}

/// One element of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct VectorSample {
    /// Labels of the element.
    pub labels: Labels,
    /// Timestamp in ms: the evaluation time (or, inside `timestamp()`, the
    /// sample's own time).
    pub t: i64,
    /// Value.
    pub v: f64,
    /// `__name__` is to be removed when the query finishes (delayed name
    /// removal, as Prometheus 3 does).
    pub drop_name: bool,
}

/// One series of a range vector.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeSeries {
    /// Labels.
    pub labels: Labels,
    /// Points, oldest first.
    pub points: Vec<Point>,
    /// See [`VectorSample::drop_name`].
    pub drop_name: bool,
    /// Start time of each point (ms, 0 where unknown) when the points come
    /// straight from a selector over series that carry start times; empty
    /// otherwise (expressions and subqueries do not propagate them).
    pub start_ms: Vec<i64>,
}

/// A range vector: series sorted by labels when returned from a query.
pub type Matrix = Vec<RangeSeries>;

/// The result of an expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A scalar at time `t`.
    Scalar {
        /// Evaluation time in ms.
        t: i64,
        /// Value.
        v: f64,
    },
    /// A string at time `t`.
    String {
        /// Evaluation time in ms.
        t: i64,
        /// Value.
        s: String,
    },
    /// An instant vector.
    Vector(Vec<VectorSample>),
    /// A range vector.
    Matrix(Matrix),
}

impl Value {
    /// The Prometheus type name ("scalar", "string", "vector", "matrix").
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar { .. } => "scalar",
            Value::String { .. } => "string",
            Value::Vector(_) => "vector",
            Value::Matrix(_) => "matrix",
        }
    }
}

pub use canopy_proto::model::format_value;

/// Removes `__name__` where it is flagged for removal.
pub(crate) fn finish_labels(labels: &mut Labels, drop_name: bool) {
    if drop_name {
        labels.remove(METRIC_NAME);
        labels.remove("__type__");
        labels.remove("__unit__");
    }
}
