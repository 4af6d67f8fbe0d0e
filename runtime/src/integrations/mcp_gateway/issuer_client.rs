//! The client that fetches an OAuth issuer's discovery document and JWKS: one HTTP/1.1 `GET` per connection,
//! over TLS (rustls with the `ring` provider) for `https://`, or in the clear for `http://`.
//!
//! - **Trust.** An `https://` URL is trusted if its certificate chains to the system's root certificates as
//!   `rustls-native-certs` finds them, which honours `SSL_CERT_FILE` and `SSL_CERT_DIR` (a deployment, or a
//!   test, names its own CA that way). The certificate must be valid for the URL's host name or IP address.
//! - **`http://`** is fetched in the clear, as the issuer URL allows it (a loopback issuer in development);
//!   a JWKS an `https://` issuer names must be `https://` too (see `OAuthResourceServer::refetch`).
//! - **Bounds.** No redirect is followed, an answer larger than [`MAX_DOCUMENT`] is refused, and a fetch,
//!   connection and handshake included, takes at most [`FETCH_TIMEOUT`].
//!
//! Errors name the URL and what failed, never a header or body.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

/// The largest discovery document or JWKS read.
pub(super) const MAX_DOCUMENT: usize = 1 << 20;

/// How long one fetch may take, connection and TLS handshake included.
pub(super) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches JSON documents over `http://` and `https://`.
pub(super) struct IssuerClient {
    /// The TLS client, or why there is none (no root certificate was found); only an `https://` fetch
    /// needs it, so an `http://` issuer works on a host without roots.
    tls: Result<tokio_rustls::TlsConnector, String>,
}

impl IssuerClient {
    /// A client trusting the system's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` when set).
    pub(super) fn with_system_roots() -> Self {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(found.certs);
        if roots.is_empty() {
            return IssuerClient {
                tls: Err("no root certificate was found to verify the issuer's certificate: install the \
                          system's CA certificates or name a CA file with `SSL_CERT_FILE`"
                    .to_owned()),
            };
        }
        Self::with_roots(roots)
    }

    /// A client trusting exactly `roots`.
    pub(super) fn with_roots(roots: rustls::RootCertStore) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
            .map(|config| tokio_rustls::TlsConnector::from(Arc::new(config)))
            .map_err(|error| format!("no TLS client: {error}"));
        IssuerClient { tls }
    }

    /// A client with no TLS at all (an issuer whose keys are never fetched).
    pub(super) fn without_tls() -> Self {
        IssuerClient { tls: Err("no TLS client was set up".to_owned()) }
    }

    /// The JSON document at `url`, or why it could not be had (naming `url`).
    pub(super) async fn get_json(&self, url: &str) -> Result<Value, String> {
        let parsed = url::Url::parse(url).map_err(|error| format!("`{url}` is not a URL: {error}"))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            // Not repeated: the URL holds a credential.
            return Err("a URL with a user name or password is not fetched".to_owned());
        }
        let body = match tokio::time::timeout(FETCH_TIMEOUT, self.get(&parsed)).await {
            Ok(fetched) => fetched.map_err(|why| format!("`{url}`: {why}"))?,
            Err(_) => return Err(format!("`{url}`: no answer within {} s", FETCH_TIMEOUT.as_secs())),
        };
        serde_json::from_slice(&body).map_err(|error| format!("`{url}` is not JSON: {error}"))
    }

    async fn get(&self, url: &url::Url) -> Result<Bytes, String> {
        let port = url.port_or_known_default().ok_or("the URL names no port")?;
        let (address, name) = match url.host() {
            Some(url::Host::Domain(domain)) => (domain.to_owned(), ServerName::try_from(domain.to_owned()).ok()),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), Some(ServerName::IpAddress(std::net::IpAddr::V4(ip).into()))),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), Some(ServerName::IpAddress(std::net::IpAddr::V6(ip).into()))),
            None => return Err("the URL has no host".to_owned()),
        };
        let tcp = tokio::net::TcpStream::connect((address.as_str(), port))
            .await
            .map_err(|error| format!("cannot connect: {error}"))?;
        match url.scheme() {
            "http" => request(tcp, url).await,
            "https" => {
                let connector = self.tls.as_ref().map_err(Clone::clone)?;
                let name = name.ok_or_else(|| format!("`{address}` is not a host name TLS can verify"))?;
                let tls = connector.connect(name, tcp).await.map_err(|error| explain(&error))?;
                request(tls, url).await
            }
            other => Err(format!("`{other}` is not `https` or `http`")),
        }
    }
}

/// One `GET` of `url` over `io`; the body of a 2xx answer.
async fn request<S>(io: S, url: &url::Url) -> Result<Bytes, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|error| error.to_string())?;
    // The connection is driven beside the request; it ends when the request is answered or abandoned.
    let connection = tokio::spawn(connection);
    let authority = match url.port() {
        Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_owned(),
    };
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let request = hyper::Request::get(path)
        .header("host", authority)
        .header("accept", "application/json")
        .header("user-agent", concat!("agent-airlock/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<Bytes>::new())
        .map_err(|error| error.to_string())?;
    let answered = async {
        let response = sender.send_request(request).await.map_err(|error| error.to_string())?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("answered {status}"));
        }
        match Limited::new(response.into_body(), MAX_DOCUMENT).collect().await {
            Ok(body) => Ok(body.to_bytes()),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                Err(format!("answered more than {MAX_DOCUMENT} bytes"))
            }
            Err(error) => Err(error.to_string()),
        }
    }
    .await;
    connection.abort();
    answered
}

/// Why a TLS handshake failed, in the operator's words.
fn explain(error: &std::io::Error) -> String {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(
            tls @ rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            ),
        ) => format!("the server's certificate is not valid for its host name: {tls}"),
        Some(tls @ rustls::Error::InvalidCertificate(_)) => format!(
            "the server's certificate is not trusted (the trusted roots are the system's, or `SSL_CERT_FILE`): {tls}"
        ),
        _ => format!("the TLS handshake failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    fn ca(name: &str) -> (CertificateParams, KeyPair) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        (params, KeyPair::generate().expect("a CA key"))
    }

    /// The roots holding one CA's certificate.
    fn roots(cert: &rcgen::Certificate) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).expect("a root");
        roots
    }

    /// An HTTPS server on loopback with a certificate for `127.0.0.1` signed by a CA of its own, answering
    /// every `GET` with `body` (or a 404 for `/missing`); its address, and the CA's certificate.
    async fn https_server(body: &'static str) -> (String, rcgen::Certificate) {
        let (ca_params, ca_key) = ca("issuer test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("the server's key");
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("server params")
            .signed_by(&key, &issuer)
            .expect("the server's certificate");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(cert.pem().as_bytes()).expect("a certificate")],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("a key"),
            )
            .expect("a server configuration");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut stream) = acceptor.accept(tcp).await else { return };
                    let mut request = vec![0; 4096];
                    let read = stream.read(&mut request).await.unwrap_or(0);
                    let missing = request[..read].starts_with(b"GET /missing ");
                    let response = if missing {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
                    } else {
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                             connection: close\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (format!("https://{address}"), ca_cert)
    }

    #[tokio::test]
    async fn an_https_document_is_fetched_when_its_certificate_chains_to_a_trusted_root() {
        let (server, ca_cert) = https_server(r#"{"keys": []}"#).await;
        let client = IssuerClient::with_roots(roots(&ca_cert));
        let url = format!("{server}/jwks");
        assert_eq!(client.get_json(&url).await, Ok(serde_json::json!({"keys": []})));
        let missing = client.get_json(&format!("{server}/missing")).await.expect_err("a 404 is refused");
        assert!(missing.contains(&format!("`{server}/missing`")) && missing.contains("404"), "{missing}");
    }

    #[tokio::test]
    async fn an_untrusted_or_misnamed_certificate_is_refused_naming_the_url() {
        let (server, _) = https_server(r#"{"keys": []}"#).await;
        let (other_params, other_key) = ca("another CA");
        let other = other_params.self_signed(&other_key).expect("another CA certificate");
        let url = format!("{server}/jwks");
        let untrusted = IssuerClient::with_roots(roots(&other)).get_json(&url).await.expect_err("not trusted");
        assert!(untrusted.starts_with(&format!("`{url}`: ")), "{untrusted}");
        assert!(untrusted.contains("certificate is not trusted") && untrusted.contains("SSL_CERT_FILE"), "{untrusted}");
        // The certificate names 127.0.0.1, not `localhost`.
        let (server, ca_cert) = https_server(r#"{"keys": []}"#).await;
        let port = server.rsplit(':').next().expect("a port");
        let misnamed = format!("https://localhost:{port}/jwks");
        let refused = IssuerClient::with_roots(roots(&ca_cert)).get_json(&misnamed).await.expect_err("misnamed");
        assert!(refused.contains("not valid for its host name"), "{refused}");
        // A client without TLS fetches no `https://` URL; a credential in a URL is neither used nor repeated.
        let without = IssuerClient::without_tls().get_json(&url).await.expect_err("no TLS");
        assert!(without.contains(&url), "{without}");
        let secret = IssuerClient::without_tls().get_json("https://user:hunter2@127.0.0.1:9/jwks").await;
        assert!(secret.is_err_and(|why| !why.contains("hunter2")));
    }

    #[tokio::test]
    async fn plain_http_is_fetched_and_an_oversized_answer_is_refused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = vec![0; 4096];
                let read = stream.read(&mut request).await.unwrap_or(0);
                let body = if request[..read].starts_with(b"GET /big ") {
                    format!("\"{}\"", "x".repeat(MAX_DOCUMENT + 1))
                } else {
                    "{\"ok\": true}".to_owned()
                };
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
            }
        });
        let client = IssuerClient::without_tls();
        assert_eq!(client.get_json(&format!("http://{address}/small")).await, Ok(serde_json::json!({"ok": true})));
        let big = client.get_json(&format!("http://{address}/big")).await.expect_err("too large");
        assert!(big.contains("more than"), "{big}");
        let closed = client.get_json("http://127.0.0.1:9/jwks").await.expect_err("nothing listens");
        assert!(closed.contains("`http://127.0.0.1:9/jwks`: cannot connect"), "{closed}");
    }
}
