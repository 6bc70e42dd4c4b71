//! The one place where errors become HTTP statuses and Prometheus `errorType`s.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::promql::PromqlError;
use crate::store::StoreError;

/// Maps an error to its HTTP status and Prometheus `errorType`.
pub trait HttpStatus {
    /// The HTTP status code.
    fn status(&self) -> StatusCode;
    /// The Prometheus `errorType` string.
    fn error_type(&self) -> &'static str;
}

impl HttpStatus for StoreError {
    fn status(&self) -> StatusCode {
        match self {
            StoreError::SelectLimit { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
    fn error_type(&self) -> &'static str {
        match self {
            StoreError::SelectLimit { .. } => "execution",
            _ => "internal",
        }
    }
}

impl HttpStatus for PromqlError {
    fn status(&self) -> StatusCode {
        match self {
            PromqlError::Parse(_) | PromqlError::BadRequest(_) => StatusCode::BAD_REQUEST,
            PromqlError::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            PromqlError::Store(e) => e.status(),
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
    fn error_type(&self) -> &'static str {
        match self {
            PromqlError::Parse(_) | PromqlError::BadRequest(_) => "bad_data",
            PromqlError::Timeout => "timeout",
            PromqlError::Store(e) => e.error_type(),
            _ => "execution",
        }
    }
}

/// An error answered in Prometheus' JSON error shape.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// A request parameter is missing or malformed.
    #[error("{0}")]
    BadData(String),
    /// The query engine failed.
    #[error(transparent)]
    Promql(#[from] PromqlError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The evaluation task died.
    #[error("internal error: {0}")]
    Internal(String),
}

impl HttpStatus for ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::BadData(_) => StatusCode::BAD_REQUEST,
            ApiError::Promql(e) => e.status(),
            ApiError::Store(e) => e.status(),
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
    fn error_type(&self) -> &'static str {
        match self {
            ApiError::BadData(_) => "bad_data",
            ApiError::Promql(e) => e.error_type(),
            ApiError::Store(e) => e.error_type(),
            ApiError::Internal(_) => "internal",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "status": "error",
            "errorType": self.error_type(),
            "error": self.to_string(),
        });
        (self.status(), Json(body)).into_response()
    }
}
