//! The gRPC side: an interceptor on the scheduler service that reads the
//! `authorization` metadata (`Bearer <token>`) and attaches the caller's
//! [`Access`] to the request. Health and reflection stay open (they carry
//! no data). Missing or unknown tokens: `UNAUTHENTICATED`; a role too low:
//! `PERMISSION_DENIED`.

use tonic::{Request, Status};

use super::{Access, Auth, AuthError};

/// The status for an access-control error.
pub fn status(e: &AuthError) -> Status {
    match e {
        AuthError::Forbidden { .. } => Status::permission_denied(e.to_string()),
        _ => Status::unauthenticated(e.to_string()),
    }
}

/// The interceptor of the scheduler service for `auth`.
pub fn interceptor(
    auth: Auth,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    move |mut req: Request<()>| {
        let access = auth
            .check(req.metadata().get("authorization").map(|v| v.as_bytes()))
            .map_err(|e| status(&e))?;
        req.extensions_mut().insert(access);
        Ok(req)
    }
}

/// The caller's access, as the interceptor attached it. Fails closed: a
/// request that did not pass the interceptor is `UNAUTHENTICATED`.
pub fn access_of<T>(req: &Request<T>) -> Result<Access, Status> {
    req.extensions()
        .get::<Access>()
        .cloned()
        .ok_or_else(|| status(&AuthError::Missing))
}
