//! The gateway's network shells (thin: parse, call the core, format).

mod error;
pub mod http;
mod params;

pub use error::{ApiError, HttpStatus};
