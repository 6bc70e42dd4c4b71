//! A minimal HTTP/1.1 GET over a plain TCP stream: enough to scrape a
//! Prometheus exporter and to ask the gateway one query, without pulling an
//! HTTP client into the benches.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Largest answer read (a node_exporter page is ~100-300 KiB).
const MAX_BODY: u64 = 64 << 20;

/// GETs `path` from `addr`; returns the body of a 200 answer.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.take(MAX_BODY)
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the answer of {addr}{path}"))?;
    split_response(&raw)
}

/// The body of a complete `HTTP/1.x 200` response (identity or chunked).
pub fn split_response(raw: &[u8]) -> Result<Vec<u8>> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("HTTP status line {status:?}");
    }
    let body = &raw[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        dechunk(body)
    } else {
        Ok(body.to_vec())
    }
}

/// Joins the chunks of a chunked body.
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("chunk size line")?;
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = b.get(..size).context("truncated chunk")?;
        out.extend_from_slice(chunk);
        b = b.get(size + 2..).context("truncated chunk end")?;
    }
}

/// Samples in a Prometheus text exposition (non-comment, non-empty lines).
pub fn count_samples(body: &[u8]) -> usize {
    body.split(|&c| c == b'\n')
        .filter(|l| !l.is_empty() && l[0] != b'#')
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_chunked_bodies() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(split_response(plain).expect("plain"), b"hello");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(split_response(chunked).expect("chunked"), b"hello");
        assert!(split_response(b"HTTP/1.1 404 Not Found\r\n\r\n").is_err());
        assert!(
            split_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab")
                .is_err()
        );
    }

    #[test]
    fn counts_exposition_samples() {
        let body = b"# HELP a x\n# TYPE a counter\na 1\nb{c=\"d\"} 2\n\n";
        assert_eq!(count_samples(body), 2);
    }
}
