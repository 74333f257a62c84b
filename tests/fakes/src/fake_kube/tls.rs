//! HTTPS for the fake ([`super::FakeKube::start_tls`]): a fresh CA and a server certificate for
//! `127.0.0.1` and `localhost` made at start, the CA in the kubeconfig's
//! `certificate-authority-data`.
//!
//! Why: client-go (so `kubectl`) sends a kubeconfig's bearer token only over TLS; against a
//! plain `http://` server it sends no `Authorization` at all and meets 401 (kubernetes/kubectl
//! issue 744). The Python client and kube-rs send it either way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A handshake that has not finished by then is dropped (it must not hold a slot forever).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The server's TLS setup and the CA (PEM) clients trust.
pub struct Tls {
    pub acceptor: TlsAcceptor,
    pub ca_pem: String,
}

fn tls_error(err: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("fake-kube TLS: {err}"))
}

/// Makes a CA and a server certificate signed by it.
pub fn make() -> std::io::Result<Tls> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().map_err(tls_error)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls_error)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "fake-kube-ca");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = ca_params.self_signed(&ca_key).map_err(tls_error)?;
    let key = KeyPair::generate().map_err(tls_error)?;
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).map_err(tls_error)?;
    params.distinguished_name.push(DnType::CommonName, "fake-kube");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(tls_error)?;
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(tls_error)?;
    // HTTP/1.1 only: the websocket upgrades of exec need it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls { acceptor: TlsAcceptor::from(Arc::new(config)), ca_pem: ca.pem() })
}

/// A listener whose connections come out of the TLS handshake, made concurrently (one slow client
/// does not hold up the others).
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` from now on (call inside the runtime).
    pub fn new(listener: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (sender, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                        let _ = sender.send((stream, peer)).await;
                    }
                });
            }
        });
        Ok(Self { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task is gone only when the runtime stops.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
