//! QUIC link layer (quinn, mutual TLS): carries records between a child and its parent.
