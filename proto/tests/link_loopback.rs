//! The QUIC link over real loopback sockets: mutual TLS, records both ways,
//! refusals, limits, and dead-parent detection.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use canopy_proto::link::{
    Ca, CloseCode, Dialer, Identity, InboundLink, LinkError, LinkTuning, Listener, OutboundLink,
    Uplink, UplinkConfig, UplinkTarget,
};
use rustls_pki_types::pem::PemObject;
use tokio::net::UdpSocket;

/// Generous guard so a broken link fails the test instead of hanging it.
/// Not a performance assertion.
const GUARD: Duration = Duration::from_secs(10);

async fn guard<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(GUARD, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no result within {GUARD:?}"),
    }
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

struct Pair {
    ca: Ca,
    parent: Identity,
    child: Identity,
}

fn pair() -> Pair {
    let ca = Ca::generate("test cluster CA").expect("ca");
    let parent = ca.identity("parent").expect("parent cert");
    let child = ca.identity("child").expect("child cert");
    Pair { ca, parent, child }
}

/// Binds a listener, dials it, and returns both ends of the link.
async fn link_up(
    p: &Pair,
    server_tuning: LinkTuning,
    client_tuning: LinkTuning,
) -> (Listener, InboundLink, OutboundLink) {
    let listener = Listener::bind(loopback(), &p.parent, server_tuning).expect("bind");
    let out = guard(
        "connect",
        OutboundLink::connect(
            loopback(),
            listener.local_addr(),
            "parent",
            &p.child,
            client_tuning,
        ),
    )
    .await
    .expect("connect");
    let inbound = guard("accept", listener.accept())
        .await
        .expect("listener open")
        .expect("link set up");
    (listener, inbound, out)
}

fn big_record(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_mtls_link_carries_records_both_ways_in_order() {
    let p = pair();
    let (_listener, inbound, out) = link_up(&p, LinkTuning::default(), LinkTuning::default()).await;
    assert_eq!(inbound.peer(), "child", "peer named by its certificate");

    let big = big_record(1024 * 1024, 7);
    let inbound = Arc::new(inbound);

    // Parent: read 1 MiB + 1000 small data records, then answer with the same
    // shape of control records and close cleanly.
    let server = {
        let inbound = inbound.clone();
        let big = big.clone();
        tokio::spawn(async move {
            let first = inbound.recv_record().await.expect("recv").expect("record");
            assert_eq!(first, big, "1 MiB record intact");
            for i in 0u32..1000 {
                let r = inbound.recv_record().await.expect("recv").expect("record");
                assert_eq!(r, i.to_le_bytes(), "small record {i} in order");
            }
            inbound.send_control(&big).await.expect("send big control");
            for i in 0u32..1000 {
                inbound
                    .send_control(&i.to_be_bytes())
                    .await
                    .expect("send control");
            }
            inbound.close().await;
        })
    };

    out.send_record(&big).await.expect("send big");
    for i in 0u32..1000 {
        out.send_record(&i.to_le_bytes()).await.expect("send small");
    }
    let first = guard("control", out.recv_control())
        .await
        .expect("recv control")
        .expect("control record");
    assert_eq!(first, big, "1 MiB control record intact");
    for i in 0u32..1000 {
        let c = guard("control", out.recv_control())
            .await
            .expect("recv control")
            .expect("control record");
        assert_eq!(c, i.to_be_bytes(), "control record {i} in order");
    }
    // The parent's clean close reads as end of stream, then the link is closed.
    assert_eq!(guard("eos", out.recv_control()).await.expect("eos"), None);
    assert!(matches!(
        guard("closed", out.closed()).await,
        LinkError::Closed
    ));
    guard("server task", server).await.expect("server task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_clean_close_by_child_reads_as_end_of_stream_after_all_records() {
    let p = pair();
    let (_listener, inbound, out) = link_up(&p, LinkTuning::default(), LinkTuning::default()).await;
    for i in 0u8..3 {
        out.send_record(&[i; 100]).await.expect("send");
    }
    out.close().await;
    for i in 0u8..3 {
        let r = guard("recv", inbound.recv_record()).await.expect("recv");
        assert_eq!(r, Some(vec![i; 100]));
    }
    assert_eq!(
        guard("eos", inbound.recv_record()).await.expect("eos"),
        None
    );
    assert!(out.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_child_with_cert_from_another_ca_is_refused_and_counted() {
    let p = pair();
    let listener = Listener::bind(loopback(), &p.parent, LinkTuning::default()).expect("bind");

    // Trusts the cluster CA (so it accepts the parent) but its own
    // certificate comes from a rogue CA.
    let rogue_ca = Ca::generate("rogue CA").expect("rogue ca");
    let rogue_cert = rogue_ca.issue("child", &[]).expect("rogue cert");
    let rogue = Identity {
        ca_pem: p.ca.cert_pem().to_owned(),
        cert_pem: rogue_cert.cert_pem,
        key_pem: rogue_cert.key_pem,
    };
    let res = guard(
        "rogue connect",
        OutboundLink::connect(
            loopback(),
            listener.local_addr(),
            "parent",
            &rogue,
            LinkTuning::default(),
        ),
    )
    .await;
    assert!(
        matches!(res, Err(LinkError::Handshake { .. })),
        "rogue child must be refused, got {res:?}"
    );
    guard("failure counted", async {
        while listener.handshake_failures() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(listener.handshake_failures(), 1);

    // The listener keeps serving legitimate children.
    let good = guard(
        "good connect",
        OutboundLink::connect(
            loopback(),
            listener.local_addr(),
            "parent",
            &p.child,
            LinkTuning::default(),
        ),
    )
    .await
    .expect("good child connects");
    let inbound = guard("accept", listener.accept())
        .await
        .expect("open")
        .expect("link");
    good.send_record(b"hello").await.expect("send");
    assert_eq!(
        guard("recv", inbound.recv_record()).await.expect("recv"),
        Some(b"hello".to_vec())
    );
    assert_eq!(listener.handshake_failures(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_child_without_client_cert_is_refused_and_counted() {
    let p = pair();
    let listener = Listener::bind(loopback(), &p.parent, LinkTuning::default()).expect("bind");

    // A well-behaved TLS client in every way except it offers no certificate.
    let mut roots = rustls::RootCertStore::empty();
    let ca_der = rustls_pki_types::CertificateDer::from_pem_slice(p.ca.cert_pem().as_bytes())
        .expect("ca der");
    roots.add(ca_der).expect("root");
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .expect("tls13")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![canopy_proto::link::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let endpoint = quinn::Endpoint::client(loopback()).expect("endpoint");
    let connecting = endpoint
        .connect_with(
            quinn::ClientConfig::new(Arc::new(quic)),
            listener.local_addr(),
            "parent",
        )
        .expect("start connect");

    // The client may believe the handshake finished; the parent then closes.
    let refused = guard("refusal", async {
        match connecting.await {
            Err(e) => e,
            Ok(conn) => conn.closed().await,
        }
    })
    .await;
    assert!(
        !matches!(refused, quinn::ConnectionError::TimedOut),
        "refused promptly, not by timeout: {refused:?}"
    );
    guard("failure counted", async {
        while listener.handshake_failures() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_record_over_max_record_is_a_typed_error_and_closes_the_link() {
    let p = pair();
    let small = LinkTuning {
        max_record: 1024,
        ..LinkTuning::default()
    };
    let (_listener, inbound, out) = link_up(&p, small.clone(), LinkTuning::default()).await;

    out.send_record(&[1; 1024]).await.expect("at the limit");
    out.send_record(&[2; 2048])
        .await
        .expect("sender allows 16 MiB");
    assert_eq!(
        guard("recv", inbound.recv_record()).await.expect("recv"),
        Some(vec![1; 1024])
    );
    let err = guard("recv", inbound.recv_record()).await;
    assert!(
        matches!(
            err,
            Err(LinkError::RecordTooLarge {
                len: 2048,
                max: 1024
            })
        ),
        "got {err:?}"
    );
    // The child learns why.
    match guard("child sees close", out.closed()).await {
        LinkError::Lost {
            source: quinn::ConnectionError::ApplicationClosed(c),
            ..
        } => assert_eq!(c.error_code, CloseCode::RecordTooLarge.varint()),
        other => panic!("expected RecordTooLarge close, got {other:?}"),
    }

    // A sender with the small limit refuses locally, without touching the link.
    let (_listener2, _inbound2, out2) = link_up(&p, LinkTuning::default(), small).await;
    assert!(matches!(
        out2.send_record(&[0; 1025]).await,
        Err(LinkError::RecordTooLarge {
            len: 1025,
            max: 1024
        })
    ));
    out2.send_record(b"still fine").await.expect("link intact");
}

/// A UDP relay between child and parent that can start dropping everything,
/// which looks to the child exactly like a parent host that died.
struct Relay {
    addr: SocketAddr,
    dead: Arc<AtomicBool>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Relay {
    async fn start(server: SocketAddr) -> Relay {
        let front = Arc::new(UdpSocket::bind(loopback()).await.expect("front"));
        let back = Arc::new(UdpSocket::bind(loopback()).await.expect("back"));
        back.connect(server).await.expect("connect back");
        let addr = front.local_addr().expect("front addr");
        let dead = Arc::new(AtomicBool::new(false));
        let client = Arc::new(tokio::sync::Mutex::new(None::<SocketAddr>));
        let up = {
            let (front, back, dead, client) =
                (front.clone(), back.clone(), dead.clone(), client.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok((n, from)) = front.recv_from(&mut buf).await {
                    *client.lock().await = Some(from);
                    if !dead.load(Ordering::Relaxed) {
                        let _ = back.send(&buf[..n]).await;
                    }
                }
            })
        };
        let down = {
            let dead = dead.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = back.recv(&mut buf).await {
                    let to = *client.lock().await;
                    if let (false, Some(to)) = (dead.load(Ordering::Relaxed), to) {
                        let _ = front.send_to(&buf[..n], to).await;
                    }
                }
            })
        };
        Relay {
            addr,
            dead,
            tasks: [up, down],
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_silent_dead_parent_is_noticed_within_the_idle_timeout() {
    let p = pair();
    let tuning = LinkTuning::default();
    let listener = Listener::bind(loopback(), &p.parent, tuning.clone()).expect("bind");
    let relay = Relay::start(listener.local_addr()).await;
    let out = guard(
        "connect via relay",
        OutboundLink::connect(loopback(), relay.addr, "parent", &p.child, tuning.clone()),
    )
    .await
    .expect("connect");
    let inbound = guard("accept", listener.accept())
        .await
        .expect("open")
        .expect("link");
    out.send_record(b"alive").await.expect("send");
    assert_eq!(
        guard("recv", inbound.recv_record()).await.expect("recv"),
        Some(b"alive".to_vec())
    );

    // The parent host vanishes: no close, no packets, nothing.
    relay.dead.store(true, Ordering::Relaxed);
    let died = Instant::now();
    let reason = guard("dead parent noticed", out.closed()).await;
    let took = died.elapsed();
    assert!(
        matches!(
            reason,
            LinkError::Lost {
                source: quinn::ConnectionError::TimedOut,
                ..
            }
        ),
        "idle timeout, got {reason:?} after {took:?}"
    );
    assert!(out.is_closed());
    assert!(out.send_record(b"anyone?").await.is_err());
    assert!(out.recv_control().await.is_err());
    // Informational only; the bound is the configuration, not this machine's clock.
    eprintln!(
        "dead parent noticed after {took:?} (idle timeout {:?})",
        tuning.idle_timeout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_parent_shutdown_is_noticed_at_once_with_its_code() {
    let p = pair();
    let (listener, _inbound, out) = link_up(&p, LinkTuning::default(), LinkTuning::default()).await;
    listener.close();
    drop(listener);
    match guard("shutdown noticed", out.closed()).await {
        LinkError::Lost {
            source: quinn::ConnectionError::ApplicationClosed(c),
            ..
        } => assert_eq!(c.error_code, CloseCode::Shutdown.varint()),
        other => panic!("expected shutdown close, got {other:?}"),
    }
    assert!(out.send_record(b"late").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_one_dialer_serves_many_links() {
    const N: usize = 64;
    let p = pair();
    let listener =
        Arc::new(Listener::bind(loopback(), &p.parent, LinkTuning::default()).expect("bind"));
    let dialer = Dialer::new(loopback(), &p.child, LinkTuning::default()).expect("dialer");
    let server = {
        let listener = listener.clone();
        tokio::spawn(async move {
            let mut got = Vec::with_capacity(N);
            for _ in 0..N {
                let link = listener.accept().await.expect("open").expect("link");
                let r = link.recv_record().await.expect("recv").expect("record");
                link.send_control(&r).await.expect("ack");
                got.push((r, link));
            }
            got
        })
    };
    let mut links = Vec::with_capacity(N);
    for i in 0..N {
        let link = guard("connect", dialer.connect(listener.local_addr(), "parent"))
            .await
            .expect("connect");
        link.send_record(&(i as u32).to_le_bytes())
            .await
            .expect("send");
        links.push(link);
    }
    for (i, link) in links.iter().enumerate() {
        let ack = guard("ack", link.recv_control())
            .await
            .expect("recv")
            .expect("ack");
        assert_eq!(ack, (i as u32).to_le_bytes());
    }
    let got = guard("server", server).await.expect("server task");
    assert_eq!(got.len(), N);
    assert_eq!(listener.stats().accepted.load(Ordering::Relaxed), N as u64);
    assert_eq!(listener.handshake_failures(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_ephemeral_identity_talks_to_itself_over_localhost() {
    let id = Identity::ephemeral("canopy-up").expect("identity");
    let listener = Listener::bind(loopback(), &id, LinkTuning::default()).expect("bind");
    let out = guard(
        "connect",
        OutboundLink::connect(
            loopback(),
            listener.local_addr(),
            "localhost",
            &id,
            LinkTuning::default(),
        ),
    )
    .await
    .expect("connect by the localhost SAN");
    let inbound = guard("accept", listener.accept())
        .await
        .expect("open")
        .expect("link");
    assert_eq!(inbound.peer(), "canopy-up");
    out.send_record(b"x").await.expect("send");
    assert_eq!(
        guard("recv", inbound.recv_record()).await.expect("recv"),
        Some(b"x".to_vec())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_wrong_server_name_is_refused_by_the_child() {
    let p = pair();
    let listener = Listener::bind(loopback(), &p.parent, LinkTuning::default()).expect("bind");
    let res = guard(
        "connect",
        OutboundLink::connect(
            loopback(),
            listener.local_addr(),
            "someone-else",
            &p.child,
            LinkTuning::default(),
        ),
    )
    .await;
    assert!(
        matches!(res, Err(LinkError::Handshake { .. })),
        "got {res:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_certified_peer_outside_the_plan_is_refused_with_its_code_and_counted() {
    let p = pair();
    let stranger = p.ca.identity("stranger").expect("stranger cert");
    let listener = Listener::bind(loopback(), &p.parent, LinkTuning::default()).expect("bind");
    listener.allow_only(Some(["child".to_string()].into_iter().collect()));
    let addr = listener.local_addr();
    let dial = |id: Identity| async move {
        OutboundLink::connect(loopback(), addr, "parent", &id, LinkTuning::default()).await
    };
    let res = guard("stranger connect", dial(stranger.clone())).await;
    match res {
        Err(
            LinkError::Handshake {
                source: quinn::ConnectionError::ApplicationClosed(c),
                ..
            }
            | LinkError::Lost {
                source: quinn::ConnectionError::ApplicationClosed(c),
                ..
            },
        ) => {
            assert_eq!(c.error_code, CloseCode::NotInPlan.varint());
            let reason = String::from_utf8_lossy(&c.reason);
            assert!(reason.contains("stranger"), "{reason}");
        }
        other => panic!("a certified stranger must be refused as not in plan, got {other:?}"),
    }
    assert_eq!(listener.stats().not_in_plan.load(Ordering::Relaxed), 1);
    assert_eq!(listener.handshake_failures(), 0, "its certificate is valid");

    // A planned child is unaffected.
    let good = guard("child connect", dial(p.child.clone()))
        .await
        .expect("the planned child connects");
    let inbound = guard("accept", listener.accept())
        .await
        .expect("open")
        .expect("link");
    assert_eq!(inbound.peer(), "child");
    good.send_record(b"hello").await.expect("send");
    assert_eq!(
        guard("recv", inbound.recv_record()).await.expect("recv"),
        Some(b"hello".to_vec())
    );
    // Without a list, any certified peer is accepted (configs from before).
    listener.allow_only(None);
    guard("stranger connect", dial(stranger))
        .await
        .expect("accepted without a list");
    assert_eq!(listener.stats().not_in_plan.load(Ordering::Relaxed), 1);
}

/// A parent that vanishes without a word (its packets stop, its
/// connection is not closed) is left for the backup by the uplink's answer
/// timeout, not QUIC's idle timeout: here the idle timeout (30 s) and the
/// keep-alive (10 s) are longer than the test's guard, so only a record
/// that went unanswered can end the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uplink_leaves_a_silent_parent_for_its_backup_without_the_idle_timeout() {
    let p = pair();
    let tuning = LinkTuning {
        keep_alive: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(30),
        ..LinkTuning::default()
    };
    let primary = Listener::bind(loopback(), &p.parent, tuning.clone()).expect("bind primary");
    let backup = Listener::bind(loopback(), &p.parent, tuning.clone()).expect("bind backup");
    let relay = Relay::start(primary.local_addr()).await;
    let dialer = Arc::new(Dialer::new(loopback(), &p.child, tuning).expect("dialer"));
    let target = |addr| UplinkTarget {
        name: "parent".into(),
        addr,
    };
    let cfg = UplinkConfig {
        ack_timeout: Duration::ZERO,
        ..UplinkConfig::new(target(relay.addr), Some(target(backup.local_addr())))
    };
    let answer = cfg.answer_timeout;
    assert!(!answer.is_zero() && answer < GUARD);
    let up = Uplink::spawn(dialer, cfg);
    // A record every 100 ms, as a fast tick would.
    let sender = {
        let up = up.clone();
        tokio::spawn(async move {
            for i in 0u32.. {
                up.send(up.epoch(), i.to_le_bytes().to_vec());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let on_primary = guard("accept on the primary", primary.accept())
        .await
        .expect("open")
        .expect("link");
    assert!(
        guard("a record", on_primary.recv_record())
            .await
            .expect("recv")
            .is_some()
    );
    assert_eq!(up.stats().failovers.load(Ordering::Relaxed), 0);

    relay.dead.store(true, Ordering::Relaxed);
    let on_backup = guard("accept on the backup", backup.accept())
        .await
        .expect("open")
        .expect("link");
    assert!(
        guard("a record on the backup", on_backup.recv_record())
            .await
            .expect("recv")
            .is_some()
    );
    assert!(up.on_backup());
    assert_eq!(up.stats().failovers.load(Ordering::Relaxed), 1);
    sender.abort();
}
