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

/// `canopy token --role admin --append file`: the secret it printed.
fn mint(file: &str) -> String {
    canopy(&["token", "--role", "admin", "--append", file])
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("a secret line")
        .trim()
        .to_string()
}

#[test]
fn sighup_reloads_the_tokens_file_and_the_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().to_str().expect("UTF-8 path").to_string();
    canopy(&["certs", "--hosts", "localhost", "--out", &format!("{d}/a")]);
    canopy(&["certs", "--hosts", "localhost", "--out", &format!("{d}/b")]);
    let (cert, key) = (format!("{d}/api.pem"), format!("{d}/api.key"));
    std::fs::copy(format!("{d}/a/localhost.pem"), &cert).expect("copy");
    std::fs::copy(format!("{d}/a/localhost.key"), &key).expect("copy");
    let tokens = format!("{d}/tokens");
    let old = mint(&tokens);
    let (h, g) = (free_port(), free_port());
    let mut procs = Procs::default();
    let i = procs.spawn(&[
        "gateway",
        "--http",
        &format!("127.0.0.1:{h}"),
        "--grpc",
        &format!("127.0.0.1:{g}"),
        "--tokens",
        &tokens,
        "--api-cert",
        &cert,
        "--api-key",
        &key,
    ]);
    let url = format!("https://localhost:{h}");
    let (ca_a, ca_b) = (format!("{d}/a/ca.pem"), format!("{d}/b/ca.pem"));
    let ask = |token: &str, ca: &str| {
        query(&["--gateway", &url, "--ca", ca, "--token", token, "vector(1)"])
    };
    wait_for("the gateway", Duration::from_secs(30), || {
        ask(&old, &ca_a).0.then_some(())
    });

    // A new token file (the old token revoked) and a renewed certificate
    // from another CA, then SIGHUP.
    std::fs::remove_file(&tokens).expect("rm");
    let new = mint(&tokens);
    std::fs::copy(format!("{d}/b/localhost.pem"), &cert).expect("copy");
    std::fs::copy(format!("{d}/b/localhost.key"), &key).expect("copy");
    let pid = procs.0[i].id().to_string();
    let st = Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(st.success());
    wait_for("the reload", Duration::from_secs(10), || {
        ask(&new, &ca_b).0.then_some(())
    });
    let (ok, out) = ask(&old, &ca_b);
    assert!(!ok, "the revoked token still works: {out}");
    assert!(
        out.contains("401") || out.contains("invalid token"),
        "{out}"
    );
    let (ok, _) = ask(&new, &ca_a);
    assert!(!ok, "the old CA's certificate is still served");

    // A broken tokens file: the reload is refused, the new token still works.
    std::fs::write(&tokens, "garbage\n").expect("write");
    let st = Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(st.success());
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out) = ask(&new, &ca_b);
    assert!(ok, "{out}");
}

#[test]
fn a_client_ca_requires_client_certificates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().to_str().expect("UTF-8 path").to_string();
    canopy(&[
        "certs",
        "--hosts",
        "localhost,ops",
        "--out",
        &format!("{d}/c"),
    ]);
    canopy(&["certs", "--hosts", "ops", "--out", &format!("{d}/other")]);
    let (h, g) = (free_port(), free_port());
    let mut procs = Procs::default();
    procs.spawn(&[
        "gateway",
        "--http",
        &format!("127.0.0.1:{h}"),
        "--grpc",
        &format!("127.0.0.1:{g}"),
        "--api-cert",
        &format!("{d}/c/localhost.pem"),
        "--api-key",
        &format!("{d}/c/localhost.key"),
        "--api-client-ca",
        &format!("{d}/c/ca.pem"),
    ]);
    let url = format!("https://localhost:{h}");
    let ca = format!("{d}/c/ca.pem");
    let with = |dir: &str| {
        query(&[
            "--gateway",
            &url,
            "--ca",
            &ca,
            "--client-cert",
            &format!("{d}/{dir}/ops.pem"),
            "--client-key",
            &format!("{d}/{dir}/ops.key"),
            "vector(3)",
        ])
    };
    let out = wait_for("the mTLS gateway", Duration::from_secs(30), || {
        let (ok, out) = with("c");
        ok.then_some(out)
    });
    assert!(out.contains('3'), "{out}");
    // No client certificate, or one from another CA: refused.
    let (ok, out) = query(&["--gateway", &url, "--ca", &ca, "vector(3)"]);
    assert!(!ok, "{out}");
    let (ok, out) = with("other");
    assert!(!ok, "{out}");
}
