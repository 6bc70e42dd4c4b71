//! quinn configurations for mutual TLS under the cluster CA, and the peer's name.
//!
//! Both sides trust only the CA of their [`Identity`], speak TLS 1.3 (QUIC
//! requires it) with ALPN [`ALPN`], and use the `ring` provider. The server
//! *requires* a client certificate chaining to the CA; the client verifies
//! the server's certificate against the CA and the name it dialed.

use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, TransportConfig, VarInt};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{ALPN, Identity, LinkError, LinkTuning, Result};

/// Which end of a link a transport configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The child, which dials and opens the one stream.
    Client,
    /// The parent, which accepts.
    Server,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_err(what: &'static str) -> impl FnOnce(rustls_pki_types::pem::Error) -> LinkError {
    move |e| LinkError::Pem {
        what,
        detail: e.to_string(),
    }
}

fn certs(pem: &str, what: &'static str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_err(what))?;
    if certs.is_empty() {
        return Err(LinkError::Pem {
            what,
            detail: "no certificate found".to_owned(),
        });
    }
    Ok(certs)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(pem_err("private key"))
}

fn roots(identity: &Identity) -> Result<Arc<RootCertStore>> {
    Ok(Arc::new(pem_roots(
        identity.ca_pem.as_bytes(),
        "CA certificate",
    )?))
}

/// Every certificate of a PEM bundle as trust anchors, for each verifier
/// Canopy builds (links, the API's client CA, https clients): a bundle with
/// no certificate, or one that does not parse or is refused, is an error
/// naming `what`.
pub fn pem_roots(pem: &[u8], what: &'static str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        let c = c.map_err(pem_err(what))?;
        roots.add(c).map_err(|e| LinkError::Pem {
            what,
            detail: e.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(LinkError::Pem {
            what,
            detail: "no certificate found".to_owned(),
        });
    }
    Ok(roots)
}

/// Ack-eliciting packets a parent may receive from a child before it must
/// acknowledge at once (it acknowledges within its max_ack_delay anyway).
const ACK_ELICITING_THRESHOLD: u32 = 16;

/// The QUIC transport knobs for one end: fast dead-peer detection, bounded
/// windows, and room for exactly the one bidirectional stream the link uses.
pub fn transport_config(tuning: &LinkTuning, role: Role) -> Result<TransportConfig> {
    tuning.validate()?;
    let idle = IdleTimeout::try_from(tuning.idle_timeout)
        .map_err(|_| LinkError::InvalidTuning("idle_timeout too large"))?;
    let mut t = TransportConfig::default();
    t.keep_alive_interval(Some(tuning.keep_alive))
        .max_idle_timeout(Some(idle))
        .stream_receive_window(VarInt::from_u32(tuning.stream_receive_window))
        .receive_window(VarInt::from_u32(tuning.receive_window))
        .send_window(tuning.send_window)
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .datagram_receive_buffer_size(None);
    // Only the client opens a stream, and only one.
    let bidi = match role {
        Role::Server => 1,
        Role::Client => 0,
    };
    t.max_concurrent_bidi_streams(VarInt::from_u32(bidi));
    if role == Role::Client {
        // A child's record of a tick spans a few packets, and its parent
        // acknowledges every second one at once by default: a packet and a
        // wake-up on the child apart from the parent's acknowledgement
        // record, which follows within a millisecond. Asked to wait for
        // more (QUIC ACK frequency extension), the parent's QUIC ACK rides
        // with that record, or goes within its max_ack_delay (25 ms).
        let mut af = quinn::AckFrequencyConfig::default();
        af.ack_eliciting_threshold(VarInt::from_u32(ACK_ELICITING_THRESHOLD));
        t.ack_frequency_config(Some(af));
    } else {
        // The parent sends one acknowledgement record per child record,
        // and the child would QUIC-ACK it after its max_ack_delay (25 ms):
        // a wake-up of its own on every child, every tick. Asked to ACK
        // every ack-eliciting packet at once, the child answers in the
        // wake-up that reads the record (which quinn lets no child delay
        // past the next tick: a requested delay is capped at the RTT or
        // 25 ms).
        let mut af = quinn::AckFrequencyConfig::default();
        af.ack_eliciting_threshold(VarInt::from_u32(0));
        t.ack_frequency_config(Some(af));
    }
    Ok(t)
}

/// The server configuration of a listener: presents `identity`'s
/// certificate, requires a client certificate signed by its CA.
pub fn server_config(identity: &Identity, tuning: &LinkTuning) -> Result<quinn::ServerConfig> {
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(identity)?, provider.clone())
        .build()
        .map_err(|e| LinkError::TlsSetup(e.to_string()))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certs(&identity.cert_pem, "host certificate")?,
            key(&identity.key_pem)?,
        )?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicServerConfig::try_from(Arc::new(tls))
        .map_err(|e| LinkError::TlsSetup(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(Arc::new(transport_config(tuning, Role::Server)?));
    Ok(config)
}

/// The client configuration of a dialer: verifies the server against
/// `identity`'s CA and presents `identity`'s certificate.
pub fn client_config(identity: &Identity, tuning: &LinkTuning) -> Result<quinn::ClientConfig> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(identity)?)
        .with_client_auth_cert(
            certs(&identity.cert_pem, "host certificate")?,
            key(&identity.key_pem)?,
        )?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(Arc::new(tls))
        .map_err(|e| LinkError::TlsSetup(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport_config(tuning, Role::Client)?));
    Ok(config)
}

/// The host name in the certificate the peer of `conn` presented: its
/// subject CN, else its first DNS SAN. `None` if it presented none or the
/// certificate has neither.
pub fn peer_host(conn: &quinn::Connection) -> Option<String> {
    let any = conn.peer_identity()?;
    let chain = any.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    host_from_cert_der(chain.first()?.as_ref())
}

/// The host name a DER certificate names: its subject CN, else its first
/// DNS SAN. Never panics, whatever the bytes.
pub fn host_from_cert_der(der: &[u8]) -> Option<String> {
    der::host_name(der)
}

/// Just enough DER to read the subject CN and the DNS SANs of an X.509
/// certificate. The certificate has already passed webpki, but this code
/// trusts nothing: every read is bounds-checked and a surprise is `None`.
mod der {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const OCTET_STRING: u8 = 0x04;
    const BOOLEAN: u8 = 0x01;
    const EXPLICIT_0: u8 = 0xa0;
    const EXPLICIT_3: u8 = 0xa3;
    const SAN_DNS: u8 = 0x82;
    /// 2.5.4.3 commonName.
    const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
    /// 2.5.29.17 subjectAltName.
    const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];

    /// Splits one TLV off `buf`: (tag, contents, rest).
    fn tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = buf.split_first()?;
        if tag & 0x1f == 0x1f {
            return None; // multi-byte tags never occur in the fields we read
        }
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let (bytes, tail) = rest.split_at(n);
            rest = tail;
            bytes
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
        };
        if rest.len() < len {
            return None;
        }
        let (contents, rest) = rest.split_at(len);
        Some((tag, contents, rest))
    }

    fn expect(buf: &[u8], want: u8) -> Option<(&[u8], &[u8])> {
        let (tag, contents, rest) = tlv(buf)?;
        (tag == want).then_some((contents, rest))
    }

    fn text(bytes: &[u8]) -> Option<String> {
        let s = std::str::from_utf8(bytes).ok()?;
        (!s.is_empty()).then(|| s.to_owned())
    }

    pub(super) fn host_name(cert: &[u8]) -> Option<String> {
        let (cert, _) = expect(cert, SEQUENCE)?;
        let (tbs, _) = expect(cert, SEQUENCE)?;
        let mut rest = tbs;
        if let Some((EXPLICIT_0, _, r)) = tlv(rest) {
            rest = r; // version
        }
        // serial, signature algorithm, issuer, validity
        for _ in 0..4 {
            rest = tlv(rest)?.2;
        }
        let (subject, mut rest) = expect(rest, SEQUENCE)?;
        if let Some(cn) = common_name(subject) {
            return Some(cn);
        }
        rest = tlv(rest)?.2; // subjectPublicKeyInfo
        while let Some((tag, contents, r)) = tlv(rest) {
            if tag == EXPLICIT_3 {
                return first_dns_san(contents);
            }
            rest = r;
        }
        None
    }

    fn common_name(mut name: &[u8]) -> Option<String> {
        while let Some((rdn, rest)) = expect(name, SET) {
            let mut atvs = rdn;
            while let Some((atv, r)) = expect(atvs, SEQUENCE) {
                if let Some((oid, value)) = expect(atv, OID)
                    && oid == OID_CN
                {
                    // UTF8String, PrintableString, IA5String, T61String: bytes as text.
                    return text(tlv(value)?.1);
                }
                atvs = r;
            }
            name = rest;
        }
        None
    }

    fn first_dns_san(extensions: &[u8]) -> Option<String> {
        let (mut exts, _) = expect(extensions, SEQUENCE)?;
        while let Some((ext, rest)) = expect(exts, SEQUENCE) {
            exts = rest;
            let Some((oid, mut body)) = expect(ext, OID) else {
                continue;
            };
            if oid != OID_SAN {
                continue;
            }
            if let Some((BOOLEAN, _, r)) = tlv(body) {
                body = r; // critical flag
            }
            let (value, _) = expect(body, OCTET_STRING)?;
            let (mut names, _) = expect(value, SEQUENCE)?;
            while let Some((tag, contents, r)) = tlv(names) {
                if tag == SAN_DNS {
                    return text(contents);
                }
                names = r;
            }
            return None;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Ca;

    fn der_of(pem: &str) -> Vec<u8> {
        certs(pem, "test").expect("pem")[0].as_ref().to_vec()
    }

    #[test]
    fn host_name_read_from_issued_cert() {
        let ca = Ca::generate("test CA").expect("ca");
        let host = ca.issue("node042", &[]).expect("issue");
        assert_eq!(
            host_from_cert_der(&der_of(&host.cert_pem)).as_deref(),
            Some("node042")
        );
    }

    #[test]
    fn host_name_falls_back_to_first_dns_san_without_cn() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "node9".into()])
            .expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(host_from_cert_der(cert.der()).as_deref(), Some("node9"));
    }

    #[test]
    fn host_name_never_panics_on_truncated_or_mangled_der() {
        let ca = Ca::generate("test CA").expect("ca");
        let der = der_of(&ca.issue("node042", &[]).expect("issue").cert_pem);
        for cut in 0..der.len() {
            let _ = host_from_cert_der(&der[..cut]);
        }
        for i in 0..der.len() {
            let mut bad = der.clone();
            bad[i] ^= 0xff;
            let _ = host_from_cert_der(&bad);
        }
        assert_eq!(
            host_from_cert_der(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
    }

    #[test]
    fn configs_build_from_an_identity() {
        let id = Identity::ephemeral("node1").expect("identity");
        server_config(&id, &LinkTuning::default()).expect("server");
        client_config(&id, &LinkTuning::default()).expect("client");
    }

    #[test]
    fn pem_roots_takes_every_certificate_and_refuses_empty_or_bad_bundles() {
        let a = Ca::generate("CA a").expect("ca");
        let b = Ca::generate("CA b").expect("ca");
        let both = format!("{}{}", a.cert_pem(), b.cert_pem());
        assert_eq!(pem_roots(both.as_bytes(), "CA").expect("roots").len(), 2);
        assert_eq!(
            pem_roots(a.cert_pem().as_bytes(), "CA")
                .expect("roots")
                .len(),
            1
        );
        for bad in [
            &b""[..],
            b"not pem",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ] {
            match pem_roots(bad, "client CA") {
                Err(LinkError::Pem { what, .. }) => assert_eq!(what, "client CA"),
                other => panic!(
                    "{:?}: expected a PEM error, got {other:?}",
                    String::from_utf8_lossy(bad)
                ),
            }
        }
    }

    #[test]
    fn bad_pem_is_a_typed_error() {
        let mut id = Identity::ephemeral("node1").expect("identity");
        id.ca_pem = "not pem".to_owned();
        assert!(matches!(
            client_config(&id, &LinkTuning::default()),
            Err(LinkError::Pem { .. })
        ));
    }
}
