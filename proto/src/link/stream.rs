//! The two halves of the link stream: records out, records in.

use std::net::SocketAddr;
use std::time::Duration;

use quinn::{
    Connection, ConnectionError, ReadError, ReadExactError, RecvStream, SendStream, WriteError,
};

use super::{CloseCode, LinkError, Result, STREAM_MAGIC};
use crate::codec::CodecError;
use crate::codec::record::{RecordSplitter, write_record};

/// Bytes asked of quinn per read: bounds the splitter's overshoot past `max_record`.
const READ_CHUNK: usize = 64 * 1024;

/// Maps a failed read on the link stream.
fn read_error(remote: SocketAddr, e: ReadError) -> LinkError {
    match e {
        ReadError::ConnectionLost(e) => LinkError::from_connection(remote, e),
        ReadError::Reset(_) => LinkError::Protocol {
            addr: remote,
            what: "peer reset the stream",
        },
        _ => LinkError::Closed,
    }
}

/// Maps a failed write on the link stream.
fn write_error(remote: SocketAddr, e: WriteError) -> LinkError {
    match e {
        WriteError::ConnectionLost(e) => LinkError::from_connection(remote, e),
        _ => LinkError::Closed,
    }
}

/// Reads and checks the peer's [`STREAM_MAGIC`].
pub(crate) async fn read_magic(recv: &mut RecvStream, remote: SocketAddr) -> Result<()> {
    let mut magic = [0u8; STREAM_MAGIC.len()];
    match recv.read_exact(&mut magic).await {
        Ok(()) if magic == STREAM_MAGIC => Ok(()),
        Ok(()) | Err(ReadExactError::FinishedEarly(_)) => Err(LinkError::Protocol {
            addr: remote,
            what: "stream does not start with the Canopy magic",
        }),
        Err(ReadExactError::ReadError(e)) => Err(read_error(remote, e)),
    }
}

/// Writes our [`STREAM_MAGIC`].
pub(crate) async fn write_magic(send: &mut SendStream, remote: SocketAddr) -> Result<()> {
    send.write_all(&STREAM_MAGIC)
        .await
        .map_err(|e| write_error(remote, e))
}

/// The sending half: one length-prefixed record per call.
#[derive(Debug)]
pub(crate) struct RecordWriter {
    send: SendStream,
    remote: SocketAddr,
    max_record: usize,
    buf: Vec<u8>,
}

impl RecordWriter {
    pub(crate) fn new(send: SendStream, remote: SocketAddr, max_record: usize) -> Self {
        Self {
            send,
            remote,
            max_record,
            buf: Vec::new(),
        }
    }

    /// Frames `payload` and writes it, waiting for flow-control credit.
    pub(crate) async fn send(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() > self.max_record {
            return Err(LinkError::RecordTooLarge {
                len: payload.len() as u64,
                max: self.max_record,
            });
        }
        self.buf.clear();
        write_record(&mut self.buf, payload);
        let res = self.send.write_all(&self.buf).await;
        // Do not keep a 16 MiB buffer alive for a link that sends small frames.
        if self.buf.capacity() > 64 * 1024 {
            self.buf = Vec::new();
        }
        res.map_err(|e| write_error(self.remote, e))
    }

    /// Ends our direction and waits, at most `wait`, until the peer has
    /// acknowledged every byte, so a close right after loses nothing.
    pub(crate) async fn finish(&mut self, wait: Duration) {
        if self.send.finish().is_ok() {
            let _ = tokio::time::timeout(wait, self.send.stopped()).await;
        }
    }
}

/// The receiving half: bytes in, whole records out, never more than `max_record`.
#[derive(Debug)]
pub(crate) struct RecordReader {
    recv: RecvStream,
    splitter: RecordSplitter,
    remote: SocketAddr,
    max_record: usize,
    finished: bool,
}

impl RecordReader {
    pub(crate) fn new(recv: RecvStream, remote: SocketAddr, max_record: usize) -> Self {
        Self {
            recv,
            splitter: RecordSplitter::new(max_record),
            remote,
            max_record,
            finished: false,
        }
    }

    /// The next record's payload; `Ok(None)` once the peer ended its
    /// direction or closed the link cleanly. A record over the limit or a
    /// malformed prefix closes `conn` with the matching [`CloseCode`].
    pub(crate) async fn recv(&mut self, conn: &Connection) -> Result<Option<Vec<u8>>> {
        loop {
            match self.splitter.pop() {
                Ok(Some(record)) => return Ok(Some(record)),
                Ok(None) => {}
                Err(e) => return Err(self.refuse(conn, e)),
            }
            if self.finished {
                return self.at_end();
            }
            match self.recv.read_chunk(READ_CHUNK, true).await {
                Ok(Some(chunk)) => self.splitter.push(&chunk.bytes),
                Ok(None) => {
                    self.finished = true;
                }
                Err(ReadError::ConnectionLost(ConnectionError::ApplicationClosed(c)))
                    if c.error_code == CloseCode::Normal.varint() =>
                {
                    self.finished = true;
                }
                Err(e) => return Err(read_error(self.remote, e)),
            }
        }
    }

    fn at_end(&self) -> Result<Option<Vec<u8>>> {
        if self.splitter.buffered() == 0 {
            Ok(None)
        } else {
            Err(LinkError::Protocol {
                addr: self.remote,
                what: "stream ended inside a record",
            })
        }
    }

    fn refuse(&self, conn: &Connection, e: CodecError) -> LinkError {
        let (code, err): (CloseCode, LinkError) = match e {
            CodecError::RecordTooLarge { len, max } => (
                CloseCode::RecordTooLarge,
                LinkError::RecordTooLarge { len, max },
            ),
            _ => (
                CloseCode::Protocol,
                LinkError::Protocol {
                    addr: self.remote,
                    what: "malformed record length prefix",
                },
            ),
        };
        tracing::warn!(
            remote = %self.remote,
            max_record = self.max_record,
            error = %err,
            "refusing peer: closing link"
        );
        conn.close(code.varint(), err.to_string().as_bytes());
        err
    }
}
