//! The tokens file: one SHA-256 hash per line with a role (and, for the
//! `user` role, the user name), never the secrets themselves. Pure parsing,
//! hashing and constant-time lookup; minting draws from the system CSPRNG.
//!
//! ```text
//! # canopy tokens: sha256:<64 hex> <role> [<user>]
//! sha256:9f86d0…0a08 admin
//! sha256:2c26b4…7ae3 scheduler
//! sha256:fcde2b…4b87 user alice
//! ```

use std::fmt;

use super::{Access, AuthError, Role};

/// Prefix of a minted secret (so a leaked one is easy to grep for).
pub const SECRET_PREFIX: &str = "canopy_";
/// Most tokens a file may hold.
pub const MAX_TOKENS: usize = 100_000;
/// Longest token accepted from a request, bytes (before hashing).
pub const MAX_TOKEN_LEN: usize = 4096;

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// SHA-256 of `secret`.
pub fn hash(secret: &str) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Digest> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Equality of two digests in time independent of where they differ.
pub fn ct_eq(a: &Digest, b: &Digest) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// One line of the tokens file.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenEntry {
    /// SHA-256 of the secret.
    pub digest: Digest,
    /// What the bearer may do.
    pub access: Access,
}

impl fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The digest is not secret, but there is no need to spread it in logs.
        f.debug_struct("TokenEntry")
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl TokenEntry {
    /// The file line for this entry.
    pub fn line(&self) -> String {
        match &self.access {
            Access::User(u) => format!("sha256:{} user {u}", hex(&self.digest)),
            a => format!("sha256:{} {}", hex(&self.digest), a.role().as_str()),
        }
    }
}

/// A user name a token may be bound to: the value of a `user` label, not
/// empty, printable, without spaces (the file is whitespace-separated) and
/// without `#` (it starts a comment: `a#b` would bind the token to `a`).
pub fn valid_user(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= 256
        && u.chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '#')
}

/// Parses a tokens file. Blank lines and `#` comments are skipped; any
/// other malformed line is an error naming it (a typo must not silently
/// drop a token, nor widen one).
pub fn parse(text: &str) -> Result<Vec<TokenEntry>, AuthError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| AuthError::TokenFile {
            line: line_no,
            reason: why.to_string(),
        };
        let mut w = line.split_whitespace();
        let digest = w
            .next()
            .and_then(|h| h.strip_prefix("sha256:"))
            .ok_or_else(|| bad("expected `sha256:<64 hex digits> <role> [<user>]`"))?;
        let digest = unhex(&digest.to_ascii_lowercase())
            .ok_or_else(|| bad("the hash is not 64 hex digits"))?;
        let role: Role = w
            .next()
            .ok_or_else(|| bad("missing role (admin, scheduler or user)"))?
            .parse()
            .map_err(|e: AuthError| bad(&e.to_string()))?;
        let user = w.next();
        if w.next().is_some() {
            return Err(bad("too many fields"));
        }
        let access = match (role, user) {
            (Role::User, Some(u)) if valid_user(u) => Access::User(u.to_string()),
            (Role::User, _) => return Err(bad("a user token needs the user name")),
            (_, Some(_)) => return Err(bad("only user tokens name a user")),
            (Role::Admin, None) => Access::Admin,
            (Role::Scheduler, None) => Access::Scheduler,
        };
        if out.iter().any(|e: &TokenEntry| ct_eq(&e.digest, &digest)) {
            return Err(bad("the same token appears twice"));
        }
        if out.len() >= MAX_TOKENS {
            return Err(bad("too many tokens"));
        }
        out.push(TokenEntry { digest, access });
    }
    Ok(out)
}

/// A new random secret (256 bits) and its entry for `access`.
pub fn mint(access: Access) -> Result<(String, TokenEntry), AuthError> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| AuthError::Random)?;
    let secret = format!("{SECRET_PREFIX}{}", hex(&b));
    let entry = TokenEntry {
        digest: hash(&secret),
        access,
    };
    Ok((secret, entry))
}

/// The set of valid tokens, looked up by hash in constant time per entry.
#[derive(Clone, Debug, Default)]
pub struct TokenSet {
    entries: Vec<TokenEntry>,
}

impl TokenSet {
    /// A set of the given entries.
    pub fn new(entries: Vec<TokenEntry>) -> Self {
        TokenSet { entries }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No tokens.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What `secret` grants, if it is one of the tokens. Every entry is
    /// compared (no early exit), each in constant time.
    pub fn lookup(&self, secret: &str) -> Option<Access> {
        if secret.is_empty() || secret.len() > MAX_TOKEN_LEN {
            return None;
        }
        let d = hash(secret);
        let mut found = None;
        for e in &self.entries {
            if ct_eq(&e.digest, &d) && found.is_none() {
                found = Some(e.access.clone());
            }
        }
        found
    }
}
