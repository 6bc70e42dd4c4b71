//! The gateway's HTTP and gRPC APIs over TLS, as a client meets them: a
//! real gateway on loopback with a `localhost` certificate from a test CA
//! (rcgen through canopy-proto's [`Ca`]), an https client and a gRPC client
//! that trust only that CA.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use canopy_proto::link::Ca;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::tls::{ApiTls, HANDSHAKE_TIMEOUT};
use crate::auth::Auth;
use crate::server::{GatewayOptions, start};

/// A client config trusting only `ca_pem`, offering `alpn` (none when
/// empty: hyper-rustls sets its own).
fn client_config(ca_pem: &str, alpn: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA cert");
    }
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    if !alpn.is_empty() {
        c.alpn_protocols = vec![alpn.to_vec()];
    }
    c
}

struct Running {
    http: SocketAddr,
    grpc: SocketAddr,
    ca_pem: String,
    tls: ApiTls,
    _stop: watch::Sender<bool>,
}

async fn gateway() -> Running {
    let ca = Ca::generate("api test CA").expect("CA");
    let host = ca.issue("localhost", &[]).expect("certificate");
    let tls =
        ApiTls::from_pem(host.cert_pem.as_bytes(), host.key_pem.as_bytes(), None).expect("TLS");
    let (stop, rx) = watch::channel(false);
    let gw = start(
        GatewayOptions {
            http: "127.0.0.1:0".parse().expect("addr"),
            listener: None,
            retention_ms: 3_600_000,
            tick: Duration::from_secs(1),
            grpc: Some("127.0.0.1:0".parse().expect("addr")),
            wal: None,
            remote_write: Vec::new(),
            auth: Auth::open(),
            thresholds: Default::default(),
            api_tls: Some(tls.clone()),
        },
        rx,
    )
    .await
    .expect("gateway");
    Running {
        http: gw.http_addr,
        grpc: gw.grpc_addr.expect("gRPC"),
        ca_pem: ca.cert_pem().to_string(),
        tls,
        _stop: stop,
    }
}

/// GET `path` over https; (status, body).
async fn https_get(g: &Running, path: &str) -> (u16, String) {
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_config(&g.ca_pem, b""))
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(conn);
    let uri = format!("https://localhost:{}{path}", g.http.port());
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        client.get(uri.parse().expect("uri")),
    )
    .await
    .expect("in time")
    .expect("https response");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_http_api_answers_over_tls_and_refuses_plain_http() {
    let g = gateway().await;
    let (status, body) = https_get(&g, "/api/v1/query?query=1%2B1").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["status"], "success", "{body}");
    assert_eq!(v["data"]["result"][1], "2", "{body}");
    // The dashboard is served on the same listener.
    let (status, page) = https_get(&g, "/").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<html") || page.contains("<!doctype"),
        "{page}"
    );

    // A plain-HTTP client gets no HTTP answer: its bytes are not a TLS
    // hello, the handshake fails and is counted.
    let before = g.tls.failed_handshakes.load(Ordering::Relaxed);
    let mut tcp = TcpStream::connect(g.http).await.expect("connect");
    tcp.write_all(b"GET /api/v1/query?query=1 HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut buf)).await;
    assert!(
        !buf.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
    let t0 = tokio::time::Instant::now();
    while g.tls.failed_handshakes.load(Ordering::Relaxed) == before {
        assert!(t0.elapsed() < Duration::from_secs(5), "failure not counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn silent_clients_do_not_block_the_listener() {
    let g = gateway().await;
    // Connections that never send a hello: each holds a handshake slot
    // for at most HANDSHAKE_TIMEOUT, never the accept loop.
    let mut idle = Vec::new();
    for _ in 0..32 {
        idle.push(TcpStream::connect(g.http).await.expect("connect"));
    }
    let t0 = tokio::time::Instant::now();
    let (status, _) = https_get(&g, "/api/v1/status/buildinfo").await;
    assert_eq!(status, 200);
    assert!(
        t0.elapsed() < HANDSHAKE_TIMEOUT,
        "served only after the idle ones timed out"
    );
    drop(idle);
}

#[tokio::test]
async fn the_grpc_api_answers_over_tls() {
    let g = gateway().await;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(&g.ca_pem, b"h2")));
    let addr = g.grpc;
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let tls = tls.clone();
            async move {
                let tcp = TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").expect("name");
                let s = tls.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(s))
            }
        }))
        .await
        .expect("gRPC over TLS");
    let r = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check");
    assert_eq!(r.into_inner().status, ServingStatus::Serving as i32);

    // Without TLS the same port answers nothing.
    let plain = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2));
    let reached = match plain.connect().await {
        Ok(ch) => HealthClient::new(ch)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .is_ok(),
        Err(_) => false,
    };
    assert!(!reached, "plain gRPC reached a TLS listener");
}

#[tokio::test]
async fn a_reloaded_certificate_serves_new_connections() {
    let mut g = gateway().await;
    let (status, _) = https_get(&g, "/api/v1/status/buildinfo").await;
    assert_eq!(status, 200);
    // A renewed certificate from another CA, written to files and loaded.
    let ca2 = Ca::generate("renewed CA").expect("CA");
    let host2 = ca2.issue("localhost", &[]).expect("certificate");
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = (dir.path().join("api.pem"), dir.path().join("api.key"));
    std::fs::write(&cert, &host2.cert_pem).expect("write");
    std::fs::write(&key, &host2.key_pem).expect("write");
    // A bad pair first: refused, the old certificate stays.
    assert!(g.tls.reload_pem_files(&cert, &cert, None).is_err());
    let (status, _) = https_get(&g, "/api/v1/status/buildinfo").await;
    assert_eq!(status, 200);
    g.tls.reload_pem_files(&cert, &key, None).expect("reload");
    let old_ca = std::mem::replace(&mut g.ca_pem, ca2.cert_pem().to_string());
    let (status, _) = https_get(&g, "/api/v1/status/buildinfo").await;
    assert_eq!(status, 200, "the renewed certificate is served");
    // A client trusting only the old CA is refused now.
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_config(&old_ca, b""))
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(conn);
    let uri = format!(
        "https://localhost:{}/api/v1/status/buildinfo",
        g.http.port()
    );
    assert!(client.get(uri.parse().expect("uri")).await.is_err());
}

#[test]
fn bad_certificates_are_clear_errors() {
    let e = ApiTls::from_pem(b"", b"", None).expect_err("empty");
    assert!(e.to_string().contains("no certificate"), "{e}");
    let ca = Ca::generate("x").expect("CA");
    let host = ca.issue("localhost", &[]).expect("certificate");
    let e = ApiTls::from_pem(host.cert_pem.as_bytes(), b"not a key", None).expect_err("key");
    assert!(e.to_string().contains("private key"), "{e}");
    let other = ca.issue("other", &[]).expect("certificate");
    let e = ApiTls::from_pem(host.cert_pem.as_bytes(), other.key_pem.as_bytes(), None)
        .expect_err("mismatched key");
    assert!(e.to_string().contains("API TLS"), "{e}");
}
