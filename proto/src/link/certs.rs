//! The cluster CA and per-host certificates (rcgen, ECDSA P-256), as PEM strings.
//!
//! One CA per cluster signs one certificate per host. A host certificate
//! names the host as its subject CN and as a DNS SAN, always also carries the
//! loopback SANs (`localhost`, `127.0.0.1`, `::1`) so loopback tests and
//! `canopy up` can dial by address, and is good for both TLS roles (EKU
//! serverAuth and clientAuth): every node is a client of its parent and a
//! server for its children. Nothing here touches the disk or the network.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};

use super::{LinkError, Result};

fn cert_err(context: &'static str) -> impl FnOnce(rcgen::Error) -> LinkError {
    move |source| LinkError::Cert { context, source }
}

/// A subject alternative name to put in a host certificate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SubjectAltName {
    /// A DNS name (`node017`, `node017.cluster.example`).
    Dns(String),
    /// An IP address.
    Ip(IpAddr),
}

impl From<IpAddr> for SubjectAltName {
    fn from(ip: IpAddr) -> Self {
        SubjectAltName::Ip(ip)
    }
}

impl From<&str> for SubjectAltName {
    /// An IP if `s` parses as one, else a DNS name.
    fn from(s: &str) -> Self {
        match s.parse::<IpAddr>() {
            Ok(ip) => SubjectAltName::Ip(ip),
            Err(_) => SubjectAltName::Dns(s.to_owned()),
        }
    }
}

impl From<String> for SubjectAltName {
    /// An IP if `s` parses as one, else a DNS name.
    fn from(s: String) -> Self {
        SubjectAltName::from(s.as_str())
    }
}

impl SubjectAltName {
    fn to_rcgen(&self) -> Result<SanType> {
        Ok(match self {
            SubjectAltName::Ip(ip) => SanType::IpAddress(*ip),
            SubjectAltName::Dns(name) => SanType::DnsName(
                name.as_str()
                    .try_into()
                    .map_err(cert_err("DNS name is not ASCII"))?,
            ),
        })
    }
}

/// A certificate authority that issues host certificates.
pub struct Ca {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The issuer's Debug elides the key.
        f.debug_struct("Ca").field("issuer", &self.issuer).finish()
    }
}

impl Ca {
    /// A fresh self-signed CA named `common_name`, with an ECDSA P-256 key.
    pub fn generate(common_name: &str) -> Result<Ca> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(cert_err("generating CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(cert_err("self-signing CA"))?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA read back from its certificate and private key (PEM), as written
    /// by [`Ca::cert_pem`] and [`Ca::key_pem`].
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca> {
        let key = KeyPair::from_pem(key_pem).map_err(cert_err("reading CA key PEM"))?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(cert_err("reading CA cert PEM"))?;
        Ok(Ca {
            cert_pem: cert_pem.to_owned(),
            issuer,
        })
    }

    /// The CA certificate (PEM): what every host trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key (PKCS#8 PEM). Keep it off compute nodes.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Issues a certificate for `host` (subject CN and DNS SAN, or IP SAN if
    /// `host` is an address) with the loopback SANs and `extra_sans`, usable
    /// as TLS server and client certificate.
    pub fn issue(&self, host: &str, extra_sans: &[SubjectAltName]) -> Result<HostCert> {
        if host.is_empty() {
            return Err(LinkError::Cert {
                context: "host name is empty",
                source: rcgen::Error::InvalidNameType,
            });
        }
        let mut sans: Vec<SubjectAltName> = vec![SubjectAltName::from(host)];
        sans.extend(extra_sans.iter().cloned());
        sans.extend([
            SubjectAltName::Dns("localhost".to_owned()),
            SubjectAltName::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SubjectAltName::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ]);
        let mut unique: Vec<SubjectAltName> = Vec::with_capacity(sans.len());
        for san in sans {
            if !unique.contains(&san) {
                unique.push(san);
            }
        }

        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(cert_err("generating host key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.subject_alt_names = unique
            .iter()
            .map(SubjectAltName::to_rcgen)
            .collect::<Result<_>>()?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(cert_err("signing host certificate"))?;
        Ok(HostCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Issues a certificate for `host` and bundles it with this CA into an [`Identity`].
    pub fn identity(&self, host: &str) -> Result<Identity> {
        let HostCert { cert_pem, key_pem } = self.issue(host, &[])?;
        Ok(Identity {
            ca_pem: self.cert_pem.clone(),
            cert_pem,
            key_pem,
        })
    }
}

/// A host certificate and its private key, PEM.
#[derive(Clone)]
pub struct HostCert {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PKCS#8 PEM).
    pub key_pem: String,
}

impl fmt::Debug for HostCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// What a host needs to join links: the CA it trusts and its own certificate and key (PEM).
#[derive(Clone)]
pub struct Identity {
    /// The cluster CA certificate: peers must chain to it.
    pub ca_pem: String,
    /// This host's certificate, signed by the CA.
    pub cert_pem: String,
    /// This host's private key.
    pub key_pem: String,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

impl Identity {
    /// An identity for `host` under a fresh, throw-away CA.
    ///
    /// Clones of one ephemeral identity trust each other (the certificate
    /// is good for both roles), so a single process (`canopy up`, tests) can
    /// use it for every listener and dialer. Two separate calls make two
    /// CAs that do *not* trust each other; use [`Ca::generate`] and
    /// [`Ca::identity`] for distinct hosts under one CA.
    pub fn ephemeral(host: &str) -> Result<Identity> {
        Ca::generate("canopy ephemeral CA")?.identity(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_round_trips_through_pem_ca() {
        let ca = Ca::generate("test CA").expect("ca");
        let again = Ca::from_pem(ca.cert_pem(), &ca.key_pem()).expect("reload");
        let host = again
            .issue("node017", &["10.0.0.17".into(), "node017.example".into()])
            .expect("issue");
        assert!(host.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(host.key_pem.contains("PRIVATE KEY"));
        assert!(!format!("{host:?}").contains("PRIVATE"));
    }

    #[test]
    fn from_pem_rejects_garbage() {
        assert!(matches!(
            Ca::from_pem("nope", "nope"),
            Err(LinkError::Cert { .. })
        ));
    }

    #[test]
    fn san_from_str_detects_ips() {
        assert_eq!(
            SubjectAltName::from("127.0.0.1"),
            SubjectAltName::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            SubjectAltName::from("node1"),
            SubjectAltName::Dns("node1".into())
        );
    }

    #[test]
    fn non_ascii_host_is_an_error_not_a_panic() {
        let ca = Ca::generate("test CA").expect("ca");
        assert!(ca.issue("nœud", &[]).is_err());
        assert!(ca.issue("", &[]).is_err());
    }
}
