//! Access control: tokens with roles, checked on every HTTP and gRPC path.
//!
//! Roles: `admin` (everything), `scheduler` (every read path and gRPC, all
//! users), `user` (bound to one user name). A user's scope is enforced at
//! the storage boundary: every query path reads through a [`ScopedQuerier`]
//! that only ever yields series whose `user` label is theirs, built per
//! request from the caller's [`Access`], so no PromQL trick and no new
//! endpoint can reach another user's series.
//!
//! Credentials: `Authorization: Bearer <token>`, or Basic auth with the
//! token as the password (Grafana's data source); gRPC `authorization`
//! metadata. The tokens file holds SHA-256 hashes only ([`tokens`]).

pub mod grpc;
pub mod http;
mod scoped;
pub mod tokens;

use std::path::Path;
use std::sync::{Arc, RwLock};

use base64::Engine as _;

pub use scoped::ScopedQuerier;
pub use tokens::{TokenEntry, TokenSet};

use crate::store::Querier;

/// Errors of access control.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A line of the tokens file is malformed.
    #[error("tokens file line {line}: {reason}")]
    TokenFile {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The tokens file could not be read.
    #[error("reading the tokens file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// An unknown role name.
    #[error("unknown role {0:?} (admin, scheduler or user)")]
    UnknownRole(String),
    /// The system random generator failed.
    #[error("the system random number generator failed")]
    Random,
    /// Tokens cannot be reloaded into a gateway started without them.
    #[error("the gateway runs without tokens (open); restart it with --tokens to require them")]
    Open,
    /// The request carries no credentials.
    #[error("missing credentials: send `Authorization: Bearer <token>`")]
    Missing,
    /// The credentials are malformed or not a known token.
    #[error("invalid token")]
    Invalid,
    /// The token is valid but its role may not do this.
    #[error("the {role} role may not {what}")]
    Forbidden {
        /// The caller's role.
        role: &'static str,
        /// What was refused.
        what: &'static str,
    },
}

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Only series of one user.
    User,
    /// Every read path and the gRPC API, all users.
    Scheduler,
    /// Everything, including writes and the gateway's own metrics.
    Admin,
}

impl Role {
    /// The name used in the tokens file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Scheduler => "scheduler",
            Role::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = AuthError;
    fn from_str(s: &str) -> Result<Self, AuthError> {
        match s {
            "user" => Ok(Role::User),
            "scheduler" => Ok(Role::Scheduler),
            "admin" => Ok(Role::Admin),
            _ => Err(AuthError::UnknownRole(s.to_string())),
        }
    }
}

/// Who is asking, once authenticated: a role, and for `user` the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Everything (also every caller of an open gateway).
    Admin,
    /// Every read path, all users.
    Scheduler,
    /// Only series whose `user` label equals this name.
    User(String),
}

impl Access {
    /// The role.
    pub fn role(&self) -> Role {
        match self {
            Access::Admin => Role::Admin,
            Access::Scheduler => Role::Scheduler,
            Access::User(_) => Role::User,
        }
    }

    /// The user this access is bound to, if any.
    pub fn user(&self) -> Option<&str> {
        match self {
            Access::User(u) => Some(u),
            _ => None,
        }
    }

    /// The store as this caller may see it: `base` itself, or a
    /// [`ScopedQuerier`] on it for a user.
    pub fn querier(&self, base: &Arc<dyn Querier + Send + Sync>) -> Arc<dyn Querier + Send + Sync> {
        match self {
            Access::User(u) => Arc::new(ScopedQuerier::new(Arc::clone(base), u)),
            _ => Arc::clone(base),
        }
    }

    /// Ok when this access has at least `min`; else a `Forbidden` naming `what`.
    pub fn require(&self, min: Role, what: &'static str) -> Result<(), AuthError> {
        if self.role() >= min {
            Ok(())
        } else {
            Err(AuthError::Forbidden {
                role: self.role().as_str(),
                what,
            })
        }
    }
}

/// The gateway's authenticator: open (no tokens: every caller is admin) or
/// a set of tokens, which [`Auth::reload_file`] replaces in place (clones
/// share it), so a revoked token stops working without a restart.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    tokens: Option<Arc<RwLock<Arc<TokenSet>>>>,
}

impl Auth {
    /// No access control: every caller gets [`Access::Admin`].
    pub fn open() -> Self {
        Auth { tokens: None }
    }

    /// Only holders of one of `tokens`.
    pub fn with_tokens(tokens: TokenSet) -> Self {
        Auth {
            tokens: Some(Arc::new(RwLock::new(Arc::new(tokens)))),
        }
    }

    /// Loads a tokens file.
    pub fn from_file(path: &Path) -> Result<Self, AuthError> {
        Ok(Self::with_tokens(read_file(path)?))
    }

    /// Replaces the tokens with those of `path` for every clone of this
    /// authenticator; returns how many there are. On any error the tokens
    /// in use stay. An open authenticator stays open (access control is
    /// chosen at start).
    pub fn reload_file(&self, path: &Path) -> Result<usize, AuthError> {
        let Some(cell) = &self.tokens else {
            return Err(AuthError::Open);
        };
        let set = read_file(path)?;
        let n = set.len();
        match cell.write() {
            Ok(mut g) => *g = Arc::new(set),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(set),
        }
        Ok(n)
    }

    /// The tokens in use.
    fn current(&self) -> Option<Arc<TokenSet>> {
        self.tokens.as_ref().map(|cell| match cell.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        })
    }

    /// True when no token is needed.
    pub fn is_open(&self) -> bool {
        self.tokens.is_none()
    }

    /// What the `Authorization` value (HTTP header or gRPC metadata)
    /// grants: `Bearer <token>` or `Basic base64(<any>:<token>)`.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<Access, AuthError> {
        let Some(tokens) = self.current() else {
            return Ok(Access::Admin);
        };
        let raw = authorization.ok_or(AuthError::Missing)?;
        let secret = credential(raw).ok_or(AuthError::Invalid)?;
        tokens.lookup(&secret).ok_or(AuthError::Invalid)
    }
}

/// Parses the tokens file at `path`.
fn read_file(path: &Path) -> Result<TokenSet, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(TokenSet::new(tokens::parse(&text)?))
}

/// The token inside an `Authorization` value, if it is well formed.
fn credential(raw: &[u8]) -> Option<String> {
    if raw.len() > 2 * tokens::MAX_TOKEN_LEN {
        return None;
    }
    let s = std::str::from_utf8(raw).ok()?.trim();
    let (scheme, rest) = s.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_string());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let dec = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let dec = String::from_utf8(dec).ok()?;
        let (_, password) = dec.split_once(':')?;
        return Some(password.to_string());
    }
    None
}

#[cfg(test)]
mod tests;
