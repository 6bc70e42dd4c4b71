//! The gateway's network shells (thin: parse, call the core, format).

mod error;
pub(crate) mod federate;
pub mod grpc;
pub mod http;
mod number;
mod params;
pub mod selfmetrics;
pub mod tls;
#[cfg(test)]
mod tls_tests;

pub use error::{ApiError, HttpStatus};
