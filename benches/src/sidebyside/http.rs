//! A small blocking HTTP/1.1 client with keep-alive: the same code sends
//! remote_write bodies and queries to Canopy and to Prometheus, so neither
//! side gets a faster client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Largest answer body read.
const MAX_BODY: usize = 512 << 20;
/// Longest header line accepted.
const MAX_LINE: usize = 16 << 10;

/// An answer: status code and body.
#[derive(Debug)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The body (dechunked).
    pub body: Vec<u8>,
}

/// One keep-alive connection to `addr`, reopened when the server closed it.
#[derive(Debug)]
pub struct Conn {
    addr: SocketAddr,
    timeout: Duration,
    stream: Option<BufReader<TcpStream>>,
}

impl Conn {
    /// A client of `addr`; connects on the first request.
    pub fn new(addr: SocketAddr, timeout: Duration) -> Self {
        Conn {
            addr,
            timeout,
            stream: None,
        }
    }

    /// Sends one request; retries once on a fresh connection when a reused
    /// one turns out closed.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response> {
        let reused = self.stream.is_some();
        match self.try_request(method, path, headers, body) {
            Ok(r) => Ok(r),
            Err(_) if reused => {
                self.stream = None;
                self.try_request(method, path, headers, body)
            }
            Err(e) => Err(e),
        }
    }

    /// GET `path`.
    pub fn get(&mut self, path: &str) -> Result<Response> {
        self.request("GET", path, &[], &[])
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, self.timeout)
                .with_context(|| format!("connecting to {}", self.addr))?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            s.set_nodelay(true)?;
            self.stream = Some(BufReader::with_capacity(64 << 10, s));
        }
        let r = self.stream.as_mut().context("connection")?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if method != "GET" || !body.is_empty() {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let w = r.get_mut();
        w.write_all(head.as_bytes())?;
        w.write_all(body)?;
        w.flush()?;
        let (resp, close) = read_response(r, method == "HEAD")
            .with_context(|| format!("the answer of {}{path}", self.addr))?;
        if close {
            self.stream = None;
        }
        Ok(resp)
    }
}

fn read_line<R: BufRead>(r: &mut R) -> Result<String> {
    let mut buf = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        bail!("connection closed");
    }
    if buf.last() != Some(&b'\n') {
        bail!("header line longer than {MAX_LINE} bytes or truncated");
    }
    Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
}

/// Reads one response; the flag says the server closes the connection.
pub fn read_response<R: BufRead>(r: &mut R, head_only: bool) -> Result<(Response, bool)> {
    let status_line = read_line(r)?;
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or("");
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("status line {status_line:?}"))?;
    let mut len: Option<usize> = None;
    let mut chunked = false;
    let mut close = version == "HTTP/1.0";
    loop {
        let l = read_line(r)?;
        if l.is_empty() {
            break;
        }
        let Some((k, v)) = l.split_once(':') else {
            bail!("header line {l:?}");
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
        match k.as_str() {
            "content-length" => len = Some(v.parse().context("content-length")?),
            "transfer-encoding" => chunked = v.contains("chunked"),
            "connection" => close = v.contains("close"),
            _ => {}
        }
    }
    let no_body = head_only || status == 204 || status == 304 || (100..200).contains(&status);
    let body = if no_body {
        Vec::new()
    } else if chunked {
        read_chunked(r)?
    } else if let Some(n) = len {
        if n > MAX_BODY {
            bail!("body of {n} bytes exceeds {MAX_BODY}");
        }
        let mut b = vec![0; n];
        r.read_exact(&mut b)?;
        b
    } else {
        close = true;
        let mut b = Vec::new();
        r.take(MAX_BODY as u64 + 1).read_to_end(&mut b)?;
        if b.len() > MAX_BODY {
            bail!("body exceeds {MAX_BODY} bytes");
        }
        b
    };
    Ok((Response { status, body }, close))
}

fn read_chunked<R: BufRead>(r: &mut R) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let l = read_line(r)?;
        let size_text = l.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("chunk size {size_text:?}"))?;
        if size == 0 {
            // Trailers, then the empty line.
            while !read_line(r)?.is_empty() {}
            return Ok(out);
        }
        if out.len() + size > MAX_BODY {
            bail!("chunked body exceeds {MAX_BODY} bytes");
        }
        let at = out.len();
        out.resize(at + size, 0);
        r.read_exact(&mut out[at..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
        if crlf != *b"\r\n" {
            bail!("chunk not followed by CRLF");
        }
    }
}

/// Percent-encodes a query-string value.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sized_chunked_and_empty_answers_in_sequence() {
        let raw = b"HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n\
HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n\
HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbad";
        let mut r = BufReader::new(&raw[..]);
        let (a, ca) = read_response(&mut r, false).expect("204");
        assert_eq!((a.status, a.body.len(), ca), (204, 0, false));
        let (b, _) = read_response(&mut r, false).expect("sized");
        assert_eq!((b.status, b.body.as_slice()), (200, &b"hello"[..]));
        let (c, _) = read_response(&mut r, false).expect("chunked");
        assert_eq!(c.body, b"abcde");
        let (d, cd) = read_response(&mut r, false).expect("400");
        assert_eq!((d.status, d.body.as_slice(), cd), (400, &b"bad"[..], true));
        assert!(read_response(&mut r, false).is_err(), "nothing left");
    }

    #[test]
    fn encodes_promql() {
        assert_eq!(
            urlencode("sum by (a) (rate(m[1m]))"),
            "sum%20by%20%28a%29%20%28rate%28m%5B1m%5D%29%29"
        );
    }
}
