//! [`ScopedQuerier`]: the store as one user may see it.

use std::sync::Arc;

use crate::store::{Labels, Matcher, Querier, Series, StoreError};

/// The label a user token is bound by.
pub const USER_LABEL: &str = "user";

/// Wraps a [`Querier`] so that it only ever yields series whose `user`
/// label equals one name. The matcher `user="<name>"` is added to every
/// selection (matchers are ANDed, so a caller's own matchers can only
/// narrow it), and every returned series is checked again. A series
/// without a `user` label (node data, `up`) is never returned.
pub struct ScopedQuerier {
    inner: Arc<dyn Querier + Send + Sync>,
    user: String,
}

impl ScopedQuerier {
    /// `inner` as `user` sees it. An empty name sees nothing.
    pub fn new(inner: Arc<dyn Querier + Send + Sync>, user: &str) -> Self {
        ScopedQuerier {
            inner,
            user: user.to_string(),
        }
    }

    fn scoped(&self, matchers: &[Matcher]) -> Vec<Matcher> {
        let mut m = Vec::with_capacity(matchers.len() + 1);
        m.push(Matcher::equal(USER_LABEL, &self.user));
        m.extend_from_slice(matchers);
        m
    }

    fn mine(&self, l: &Labels) -> bool {
        !self.user.is_empty() && l.get(USER_LABEL) == Some(self.user.as_str())
    }
}

impl Querier for ScopedQuerier {
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Series>, StoreError> {
        if self.user.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = self
            .inner
            .select(&self.scoped(matchers), mint, maxt, limit)?;
        out.retain(|s| self.mine(&s.labels));
        Ok(out)
    }

    fn series(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        limit: usize,
    ) -> Result<Vec<Labels>, StoreError> {
        if self.user.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = self
            .inner
            .series(&self.scoped(matchers), mint, maxt, limit)?;
        out.retain(|l| self.mine(l));
        Ok(out)
    }
}
