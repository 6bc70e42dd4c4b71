//! remote_write out over https with credentials, against a TLS server the
//! test starts on loopback (a CA and a `localhost` certificate made by
//! rcgen through canopy-proto's [`Ca`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use canopy_proto::link::Ca;
use canopy_proto::model::Labels;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::endpoint::{EndpointConfig, WriteAuth};
use super::sender::{SenderConfig, spawn};
use super::tracker::TapEvent;
use super::wire::{self, WireLimits};

/// What the server saw: (Authorization header, decoded sample count) per request.
type Seen = Arc<Mutex<Vec<(String, usize)>>>;

/// Reads one HTTP/1.1 request (head and Content-Length body), bounded.
async fn read_request<S: AsyncReadExt + Unpin>(s: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 << 10 {
            return None;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let len: usize = header("content-length")?.parse().ok()?;
    let mut body = buf[head_end..].to_vec();
    while body.len() < len.min(16 << 20) {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((header("authorization").unwrap_or_default(), body))
}

/// A TLS remote_write receiver on 127.0.0.1; its port.
async fn tls_server(ca: &Ca, seen: Seen) -> u16 {
    let host = ca.issue("localhost", &[]).expect("server certificate");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(host.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("cert PEM");
    let key = PrivateKeyDer::from_pem_slice(host.key_pem.as_bytes()).expect("key PEM");
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&seen));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                while let Some((auth, body)) = read_request(&mut tls).await {
                    let n = wire::decode(&body, &WireLimits::default())
                        .map(|r| r.timeseries.iter().map(|t| t.samples.len()).sum())
                        .unwrap_or(0);
                    seen.lock().expect("lock").push((auth, n));
                    let ok = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n";
                    if tls.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn sender(url: String, auth: Option<WriteAuth>, ca_pem: Option<String>) -> SenderConfig {
    SenderConfig {
        endpoints: vec![EndpointConfig { url, auth, ca_pem }],
        poll_interval: Duration::from_millis(10),
        ..SenderConfig::default()
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting for {what}");
}

#[tokio::test]
async fn https_endpoints_get_samples_with_bearer_and_basic_credentials() {
    let ca = Ca::generate("test CA").expect("CA");
    let seen: Seen = Arc::default();
    let port = tls_server(&ca, Arc::clone(&seen)).await;
    let url = format!("https://localhost:{port}/api/v1/write");
    let (_tx, rx) = watch::channel(false);
    let bearer = spawn(
        sender(
            url.clone(),
            Some(WriteAuth::Bearer("s3cret\n".into())),
            Some(ca.cert_pem().to_string()),
        ),
        rx.clone(),
    )
    .expect("bearer sender");
    let basic = spawn(
        sender(
            url.clone(),
            Some(WriteAuth::Basic {
                username: "canopy".into(),
                password: "pw".into(),
            }),
            Some(ca.cert_pem().to_string()),
        ),
        rx.clone(),
    )
    .expect("basic sender");
    // Default roots do not trust the test CA: nothing may arrive from it.
    let untrusted = spawn(
        sender(url, Some(WriteAuth::Bearer("never".into())), None),
        rx,
    )
    .expect("untrusted sender");
    let l = Labels::from_pairs([("__name__", "m"), ("job", "t")]);
    for rw in [&bearer, &basic, &untrusted] {
        for ts in 1..=5 {
            rw.tap().send(TapEvent::Explicit {
                labels: l.clone(),
                ts_ms: ts,
                value: ts as f64,
            });
        }
    }
    until("both trusted senders delivered", || {
        bearer.stats().endpoints[0].1.samples_sent == 5
            && basic.stats().endpoints[0].1.samples_sent == 5
    })
    .await;
    until("the untrusted sender retried", || {
        untrusted.stats().endpoints[0].1.retries >= 1
    })
    .await;
    let seen = seen.lock().expect("lock").clone();
    let auths: Vec<&str> = seen.iter().map(|(a, _)| a.as_str()).collect();
    assert!(auths.contains(&"Bearer s3cret"), "{auths:?}");
    assert!(
        auths.contains(&"Basic Y2Fub3B5OnB3"),
        "base64(canopy:pw): {auths:?}"
    );
    assert!(
        !auths.contains(&"Bearer never"),
        "no request past a failed handshake"
    );
    assert_eq!(seen.iter().map(|(_, n)| n).sum::<usize>(), 10);
    assert_eq!(untrusted.stats().endpoints[0].1.samples_sent, 0);
    // The credentials never show in Debug output (logs).
    let dbg = format!(
        "{:?}",
        sender(
            "https://x/".into(),
            Some(WriteAuth::Bearer("s3cret".into())),
            None
        )
        .endpoints
    );
    assert!(!dbg.contains("s3cret") && dbg.contains("bearer"), "{dbg}");
}
