//! TLS on the gateway's APIs against real processes: `canopy gateway
//! --api-cert --api-key` with a certificate from `canopy certs`, queried by
//! `canopy query` over https with the cluster CA; without the CA, or over
//! plain http, the query fails with a clear error.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{BIN, Procs, canopy, free_port, wait_for};

/// `canopy query` with `args`; (success, stdout + stderr).
fn query(args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN)
        .arg("query")
        .args(args)
        .env_remove("CANOPY_CA")
        .env_remove("CANOPY_TOKEN")
        .output()
        .expect("run canopy query");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_apis_serve_https_with_the_cluster_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let certs = dir.path().join("certs");
    let c = certs.to_str().expect("UTF-8 path");
    canopy(&["certs", "--hosts", "localhost", "--out", c]);
    let (h, g) = (free_port(), free_port());
    let (http, grpc) = (format!("127.0.0.1:{h}"), format!("127.0.0.1:{g}"));
    let (cert, key, ca) = (
        format!("{c}/localhost.pem"),
        format!("{c}/localhost.key"),
        format!("{c}/ca.pem"),
    );
    let mut procs = Procs::default();
    procs.spawn(&[
        "gateway",
        "--http",
        &http,
        "--grpc",
        &grpc,
        "--api-cert",
        &cert,
        "--api-key",
        &key,
    ]);
    let url = format!("https://localhost:{h}");
    let out = wait_for("the https API", Duration::from_secs(30), || {
        let (ok, out) = query(&["--gateway", &url, "--ca", &ca, "vector(7)"]);
        ok.then_some(out)
    });
    assert!(out.contains('7'), "{out}");

    // Not trusting the cluster CA: the certificate is refused.
    let (ok, out) = query(&["--gateway", &url, "vector(7)"]);
    assert!(!ok, "{out}");
    assert!(out.to_lowercase().contains("certificate"), "{out}");
    // Plain http to the TLS port gets no HTTP answer.
    let (ok, out) = query(&["--gateway", &format!("http://localhost:{h}"), "vector(7)"]);
    assert!(!ok, "{out}");

    // A key that is not the certificate's: the gateway does not start.
    let other = format!("{c}/gateway.key");
    let out = Command::new(BIN)
        .args(["gateway", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--api-cert", &cert, "--api-key", &other])
        .output()
        .expect("run canopy gateway");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("API TLS"), "{err}");
}
