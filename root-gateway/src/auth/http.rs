//! The HTTP side: one middleware ([`guard`]) in front of every route that
//! authenticates the caller and checks the path's minimum role, and the
//! [`Scoped`] extractor through which every query handler gets its store.
//!
//! Fail closed: a handler that reads through [`Scoped`] and finds no
//! [`Access`] (the guard is missing) answers 401, never unscoped data.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{Access, Auth, AuthError, Role};
use crate::api::HttpStatus;
use crate::api::http::ApiState;

/// What a path needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing: the dashboard's static files (they hold no data).
    Open,
    /// A valid token of at least this role.
    Role(Role),
}

/// The minimum each path needs. Unknown paths need a valid token, so a new
/// route is never open by accident.
pub fn need(method: &Method, path: &str) -> Need {
    match path {
        "/" | "/favicon.ico" => Need::Open,
        // Liveness and readiness probes (load balancers, Kubernetes) carry
        // no token and learn nothing but that the gateway answers.
        "/-/healthy" | "/-/ready" => Need::Open,
        p if p.starts_with("/assets/") => Need::Open,
        // The whole store's cardinality (every user's metrics and labels).
        "/metrics" | "/api/v1/status/tsdb" => Need::Role(Role::Admin),
        "/api/v1/write" if method == Method::POST => Need::Role(Role::Admin),
        _ => Need::Role(Role::User),
    }
}

impl HttpStatus for AuthError {
    fn status(&self) -> StatusCode {
        match self {
            AuthError::Missing | AuthError::Invalid => StatusCode::UNAUTHORIZED,
            AuthError::Forbidden { .. } => StatusCode::FORBIDDEN,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
    fn error_type(&self) -> &'static str {
        match self {
            AuthError::Missing | AuthError::Invalid => "unauthorized",
            AuthError::Forbidden { .. } => "forbidden",
            _ => "internal",
        }
    }
}

/// A Prometheus-shaped error: 401 `unauthorized` (with a `WWW-Authenticate`
/// challenge) for missing or unknown tokens, 403 `forbidden` for a role too low.
pub fn deny(e: &AuthError) -> Response {
    let status = e.status();
    let body = json!({"status": "error", "errorType": e.error_type(), "error": e.to_string()});
    let mut r = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"canopy\""),
        );
    }
    r
}

/// Middleware: authenticates, checks [`need`], and hands the caller's
/// [`Access`] to the handlers as a request extension.
pub async fn guard(State(auth): State<Auth>, mut req: Request, next: Next) -> Response {
    let min = match need(req.method(), req.uri().path()) {
        Need::Open => return next.run(req).await,
        Need::Role(r) => r,
    };
    let access = match auth.check(
        req.headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes),
    ) {
        Ok(a) => a,
        Err(e) => return deny(&e),
    };
    let what = match min {
        Role::Admin => "use this endpoint (admin only)",
        _ => "use this endpoint",
    };
    if let Err(e) = access.require(min, what) {
        return deny(&e);
    }
    req.extensions_mut().insert(access);
    next.run(req).await
}

/// The API state as the caller may see it: its querier scoped to the
/// caller's user for a user token. Every data handler extracts this.
pub struct Scoped(pub ApiState);

impl FromRequestParts<ApiState> for Scoped {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &ApiState) -> Result<Self, Response> {
        let access = parts
            .extensions
            .get::<Access>()
            .ok_or_else(|| deny(&AuthError::Missing))?;
        let mut st = st.clone();
        st.querier = access.querier(&st.querier);
        Ok(Scoped(st))
    }
}

/// `/api/v1/status/access`: the caller's role and, for a user token, the
/// user, so the dashboard can say whose jobs its shares are of.
pub async fn access(axum::Extension(a): axum::Extension<Access>) -> Response {
    axum::Json(json!({
        "status": "success",
        "data": { "role": a.role().as_str(), "user": a.user() },
    }))
    .into_response()
}
