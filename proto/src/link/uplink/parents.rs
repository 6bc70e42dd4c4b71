//! The parent side of one uplink connection: one link, or, on a failover to
//! a group of backups (every gateway, when the planned backup is "the
//! gateway" and there are several), one link to each member at once.
//!
//! A group behaves as one parent: each record goes to every member, and a
//! record counts as acknowledged once *every* member acknowledged it (the
//! lowest of their cumulative counts), so the outbox keeps what any member
//! still lacks, and replays it to the whole group if a member's link dies
//! (what a member already has is dropped by its merger's dedup). A failed
//! over child thus stands in for its subtree top, which sends to every
//! gateway, and no gateway misses what it sent while on the backup.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::Poll;

use super::super::{Control, LinkError, OutboundLink, Result};

/// The links of one connection, to one parent or to every member of a group.
#[derive(Debug)]
pub(super) struct Parents {
    links: Vec<OutboundLink>,
    /// Per link, the highest cumulative ack it sent; and the lowest of them
    /// already reported. Only used for a group.
    acks: Mutex<(Vec<u64>, u64)>,
}

impl Parents {
    /// The members that answered (at least one).
    pub(super) fn new(links: Vec<OutboundLink>) -> Option<Self> {
        if links.is_empty() {
            return None;
        }
        let n = links.len();
        Some(Self {
            links,
            acks: Mutex::new((vec![0; n], 0)),
        })
    }

    /// Members in this connection.
    pub(super) fn len(&self) -> usize {
        self.links.len()
    }

    /// Sends one record to every member, in turn. Not cancel-safe (see
    /// [`OutboundLink::send_record`]).
    pub(super) async fn send_record(&self, payload: &[u8]) -> Result<()> {
        for l in &self.links {
            l.send_record(payload).await?;
        }
        Ok(())
    }

    /// The next control record, as from one parent: for a group, an ack of
    /// what every member acknowledged, sent when that count grows.
    /// `Ok(None)` once a member closed its control direction. Cancel-safe.
    pub(super) async fn recv_control(&self) -> Result<Option<Vec<u8>>> {
        if let [one] = self.links.as_slice() {
            return one.recv_control().await;
        }
        loop {
            let mut reads: Vec<_> = self
                .links
                .iter()
                .map(|l| Box::pin(l.recv_control()))
                .collect();
            let (i, r) = first_ready(&mut reads).await;
            drop(reads);
            let msg = match r? {
                Some(m) => m,
                None => return Ok(None),
            };
            let Some(Control::Ack(n)) = Control::decode(&msg) else {
                return Ok(Some(msg));
            };
            let mut g = self
                .acks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (per_link, reported) = &mut *g;
            if let Some(a) = per_link.get_mut(i) {
                *a = (*a).max(n);
            }
            let low = per_link.iter().copied().min().unwrap_or(0);
            if low > *reported {
                *reported = low;
                return Ok(Some(Control::Ack(low).encode()));
            }
        }
    }

    /// Per member, the datagrams received from it so far.
    pub(super) fn received(&self) -> Vec<u64> {
        self.links
            .iter()
            .map(OutboundLink::datagrams_received)
            .collect()
    }

    /// Resolves when any member's link ends, with its reason.
    pub(super) async fn closed(&self) -> LinkError {
        let mut ends: Vec<_> = self.links.iter().map(|l| Box::pin(l.closed())).collect();
        first_ready(&mut ends).await.1
    }

    /// Closes every member cleanly (see [`OutboundLink::close`]).
    pub(super) async fn close(&self) {
        for l in &self.links {
            l.close().await;
        }
    }
}

/// The first of `futs` to complete: its index and output.
async fn first_ready<F: Future + Unpin>(futs: &mut [F]) -> (usize, F::Output) {
    std::future::poll_fn(|cx| {
        for (i, f) in futs.iter_mut().enumerate() {
            if let Poll::Ready(v) = Pin::new(f).poll(cx) {
                return Poll::Ready((i, v));
            }
        }
        Poll::Pending
    })
    .await
}
