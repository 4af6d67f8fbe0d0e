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
//! - **Proxy.** With `HTTPS_PROXY` (or `https_proxy`) set, an `https://` fetch goes through that HTTP proxy: an
//!   HTTP `CONNECT` tunnel to the issuer's host and port, then TLS to the issuer inside it, its certificate
//!   checked against the issuer's host name as without a proxy (the proxy sees only ciphertext). A user name
//!   and password in the proxy's URL are sent as `Proxy-Authorization: Basic`. Hosts `NO_PROXY` (or
//!   `no_proxy`) matches are reached directly (curl's rules: domains with their subdomains, IP addresses and
//!   CIDR ranges, `*` for every host). Only an `http://` proxy is supported; `http://` issuers are fetched
//!   directly.
//!
//! Errors name the URL and what failed, never a header or body, nor the proxy's credentials.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
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
    /// Where `https://` fetches go: directly, or through a proxy.
    proxy: HttpsProxy,
}

/// The proxy `https://` fetches go through, as `HTTPS_PROXY` and `NO_PROXY` say.
pub(super) enum HttpsProxy {
    /// No proxy: every fetch connects directly.
    Direct,
    /// Through this proxy, except the hosts its `NO_PROXY` list matches.
    Via(Box<Matcher>),
    /// A proxy was named that cannot be used: why (never its credentials). No `https://` fetch is made.
    Unusable(String),
}

impl HttpsProxy {
    /// From `HTTPS_PROXY` (else `https_proxy`) and `NO_PROXY` (else `no_proxy`).
    pub(super) fn from_env() -> Self {
        let first = |names: [&str; 2]| names.iter().find_map(|name| std::env::var(name).ok()).unwrap_or_default();
        Self::new(&first(["HTTPS_PROXY", "https_proxy"]), &first(["NO_PROXY", "no_proxy"]))
    }

    /// Through `proxy` (a URL, `http://[user:password@]host:port`; empty for none) except the hosts `no_proxy`
    /// lists (comma-separated).
    pub(super) fn new(proxy: &str, no_proxy: &str) -> Self {
        let proxy = proxy.trim();
        // `*` is every host, IP addresses included (the matcher would apply it to names only).
        if proxy.is_empty() || no_proxy.split(',').any(|entry| entry.trim() == "*") {
            return HttpsProxy::Direct;
        }
        // What the proxy URL is taken for, whatever `NO_PROXY` says (the probe host matches no list).
        let probe =
            Matcher::builder().https(proxy).build().intercept(&hyper::Uri::from_static("https://probe.invalid/"));
        match probe {
            // The URL is not repeated: it may hold a password.
            None => HttpsProxy::Unusable(
                "`HTTPS_PROXY` is not a proxy URL the gateway can use (`http://[user:password@]host:port`)".to_owned(),
            ),
            Some(via) if via.uri().scheme_str() != Some("http") => HttpsProxy::Unusable(format!(
                "`HTTPS_PROXY` names a `{}` proxy; only an `http://` proxy (HTTP CONNECT) is supported",
                via.uri().scheme_str().unwrap_or_default()
            )),
            Some(_) => HttpsProxy::Via(Box::new(Matcher::builder().https(proxy).no(no_proxy).build())),
        }
    }

    /// The proxy to reach `url` through, if any.
    fn for_url(&self, url: &url::Url) -> Result<Option<Intercept>, String> {
        match self {
            HttpsProxy::Direct => Ok(None),
            HttpsProxy::Unusable(why) => Err(why.clone()),
            HttpsProxy::Via(matcher) => {
                let uri: hyper::Uri = url.as_str().parse().map_err(|_| "the URL is not one HTTP can use".to_owned())?;
                Ok(matcher.intercept(&uri))
            }
        }
    }
}

/// A connection to the issuer: a TCP stream, or a tunnel through a proxy.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection for T {}

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
                proxy: HttpsProxy::from_env(),
            };
        }
        Self::with_roots(roots).with_proxy(HttpsProxy::from_env())
    }

    /// A client trusting exactly `roots`.
    pub(super) fn with_roots(roots: rustls::RootCertStore) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
            .map(|config| tokio_rustls::TlsConnector::from(Arc::new(config)))
            .map_err(|error| format!("no TLS client: {error}"));
        IssuerClient { tls, proxy: HttpsProxy::Direct }
    }

    /// This client, its `https://` fetches going through `proxy`.
    pub(super) fn with_proxy(self, proxy: HttpsProxy) -> Self {
        IssuerClient { proxy, ..self }
    }

    /// A client with no TLS at all (an issuer whose keys are never fetched).
    pub(super) fn without_tls() -> Self {
        IssuerClient { tls: Err("no TLS client was set up".to_owned()), proxy: HttpsProxy::Direct }
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
        let direct = || async {
            tokio::net::TcpStream::connect((address.as_str(), port))
                .await
                .map_err(|error| format!("cannot connect: {error}"))
        };
        match url.scheme() {
            "http" => request(direct().await?, url).await,
            "https" => {
                let connector = self.tls.as_ref().map_err(Clone::clone)?;
                let name = name.ok_or_else(|| format!("`{address}` is not a host name TLS can verify"))?;
                let connection: Box<dyn Connection> = match self.proxy.for_url(url)? {
                    Some(proxy) => Box::new(tunnel(&proxy, url, port).await?),
                    None => Box::new(direct().await?),
                };
                // The issuer's own name, never the proxy's: the tunnel is only a path to it.
                let tls = connector.connect(name, connection).await.map_err(|error| explain(&error))?;
                request(tls, url).await
            }
            other => Err(format!("`{other}` is not `https` or `http`")),
        }
    }
}

/// An HTTP `CONNECT` tunnel through `proxy` to `url`'s host and `port`, with the proxy's credentials, if any,
/// as `Proxy-Authorization`. Errors name the proxy by its host and port only.
async fn tunnel(proxy: &Intercept, url: &url::Url, port: u16) -> Result<TokioIo<hyper::upgrade::Upgraded>, String> {
    let proxy_host = proxy.uri().host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let proxy_port = proxy.uri().port_u16().unwrap_or(80);
    let named = format!("the proxy `{}`", proxy.uri().authority().map(|a| a.as_str()).unwrap_or_default());
    let tcp = tokio::net::TcpStream::connect((proxy_host, proxy_port))
        .await
        .map_err(|error| format!("cannot connect to {named}: {error}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|error| format!("{named}: {error}"))?;
    // Driven until the tunnel is open, when it hands the connection over.
    tokio::spawn(connection.with_upgrades());
    let target = match url.host() {
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{}:{port}", url.host_str().unwrap_or_default()),
    };
    let mut connect = hyper::Request::connect(target.as_str())
        .header(hyper::header::HOST, target.as_str())
        .body(Empty::<Bytes>::new())
        .map_err(|error| format!("no CONNECT request to {target}: {error}"))?;
    if let Some(credentials) = proxy.basic_auth() {
        connect.headers_mut().insert(hyper::header::PROXY_AUTHORIZATION, credentials.clone());
    }
    let answer = sender.send_request(connect).await.map_err(|error| format!("{named}: {error}"))?;
    match answer.status() {
        status if status.is_success() => {}
        hyper::StatusCode::PROXY_AUTHENTICATION_REQUIRED => {
            return Err(format!(
                "{named} refused the tunnel to {target}: 407 (its credentials, in `HTTPS_PROXY`, are missing or wrong)"
            ));
        }
        status => return Err(format!("{named} refused the tunnel to {target}: {status}")),
    }
    let upgraded = hyper::upgrade::on(answer).await.map_err(|error| format!("{named}: the tunnel failed: {error}"))?;
    Ok(TokioIo::new(upgraded))
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
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    // Test certificates (testdata/, written by scripts/issuer_test_certificates.sh): a CA, another CA, and
    // server certificates the first one signed for `127.0.0.1` and for `issuer.test`.
    const CA: &str = include_str!("testdata/ca.pem");
    const OTHER_CA: &str = include_str!("testdata/other_ca.pem");
    const SERVERS: [(&str, &str, &str); 2] = [
        ("127.0.0.1", include_str!("testdata/server_127.0.0.1.pem"), include_str!("testdata/server_127.0.0.1.key.pem")),
        (
            "issuer.test",
            include_str!("testdata/server_issuer.test.pem"),
            include_str!("testdata/server_issuer.test.key.pem"),
        ),
    ];

    fn certificate(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate")
    }

    /// The roots holding one CA's certificate.
    fn roots(cert: &CertificateDer<'static>) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.clone()).expect("a root");
        roots
    }

    /// An HTTPS server on loopback with a certificate for `127.0.0.1` signed by the test CA, answering every
    /// `GET` with `body` (or a 404 for `/missing`); its address, and the CA's certificate.
    async fn https_server(body: &'static str) -> (String, CertificateDer<'static>) {
        https_server_for(body, "127.0.0.1").await
    }

    /// [`https_server`] with a certificate for `name` (one of [`SERVERS`]).
    async fn https_server_for(body: &'static str, name: &str) -> (String, CertificateDer<'static>) {
        let (_, cert, key) = SERVERS.iter().find(|(server, _, _)| *server == name).expect("a test certificate");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![certificate(cert)], PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("a key"))
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
        (format!("https://{address}"), certificate(CA))
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
        let other = certificate(OTHER_CA);
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

    /// What a loopback CONNECT proxy saw: the head of every request it was sent.
    type Heads = Arc<std::sync::Mutex<Vec<String>>>;

    /// An HTTP proxy on loopback: it answers `CONNECT` with `answer` (a status line) and, for a 2xx, tunnels
    /// to the target, except that `issuer.test` is taken to be `issuer_test` (so a URL naming it can only be
    /// reached through the proxy). Its address, and the heads it was sent.
    async fn connect_proxy(answer: &'static str, issuer_test: Option<String>) -> (String, Heads) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("an address").to_string();
        let heads = Heads::default();
        let seen = Arc::clone(&heads);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (seen, issuer_test) = (Arc::clone(&seen), issuer_test.clone());
                tokio::spawn(async move {
                    // The head, a byte at a time so nothing after it is read.
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                        let mut byte = [0u8];
                        if client.read_exact(&mut byte).await.is_err() {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    seen.lock().expect("not poisoned").push(head.clone());
                    let _ = client.write_all(format!("{answer}\r\ncontent-length: 0\r\n\r\n").as_bytes()).await;
                    if !answer.starts_with("HTTP/1.1 2") {
                        return;
                    }
                    let target = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    let target = match (target.strip_prefix("issuer.test:"), &issuer_test) {
                        (Some(_), Some(real)) => real.clone(),
                        _ => target,
                    };
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        (address, heads)
    }

    fn heads(heads: &Heads) -> Vec<String> {
        heads.lock().expect("not poisoned").clone()
    }

    #[tokio::test]
    async fn an_https_fetch_goes_through_the_proxys_tunnel_and_checks_the_issuers_own_name() {
        let (server, ca_cert) = https_server_for(r#"{"keys": []}"#, "issuer.test").await;
        let server_address = server.trim_start_matches("https://").to_owned();
        let port = server_address.rsplit(':').next().expect("a port").to_owned();
        let (proxy, seen) = connect_proxy("HTTP/1.1 200 Connection established", Some(server_address)).await;
        let client = IssuerClient::with_roots(roots(&ca_cert))
            .with_proxy(HttpsProxy::new(&format!("http://airlock:s3cr%40t@{proxy}"), ""));
        // `issuer.test` resolves nowhere but in the proxy: only the tunnel reaches it, and TLS inside it checks
        // the certificate against `issuer.test` (not the proxy's 127.0.0.1, which the certificate does not name).
        let url = format!("https://issuer.test:{port}/jwks");
        assert_eq!(client.get_json(&url).await, Ok(serde_json::json!({"keys": []})));
        let tunnels = heads(&seen);
        assert_eq!(tunnels.len(), 1, "{tunnels:?}");
        let head = tunnels[0].to_ascii_lowercase();
        assert!(head.starts_with(&format!("connect issuer.test:{port} http/1.1\r\n")), "{head}");
        assert!(head.contains(&format!("host: issuer.test:{port}\r\n")), "{head}");
        // `airlock:s3cr@t`, percent-decoded from the URL, in Basic.
        assert!(tunnels[0].contains("proxy-authorization: Basic YWlybG9jazpzM2NyQHQ=\r\n"), "{tunnels:?}");
        // Through the proxy to a name the certificate does not hold: refused by TLS, as without a proxy.
        let misnamed = format!("https://127.0.0.1:{port}/jwks");
        let refused = client.get_json(&misnamed).await.expect_err("the certificate names issuer.test");
        assert!(refused.contains("not valid for its host name"), "{refused}");
        assert_eq!(heads(&seen).len(), 2);
        // Plain `http://` is never sent to the `https://` proxy.
        let plain = client.get_json("http://127.0.0.1:9/jwks").await.expect_err("nothing listens");
        assert!(plain.contains("cannot connect:"), "{plain}");
        assert_eq!(heads(&seen).len(), 2);
    }

    #[tokio::test]
    async fn the_hosts_no_proxy_names_are_fetched_directly() {
        let (server, ca_cert) = https_server(r#"{"keys": []}"#).await;
        let (proxy, seen) = connect_proxy("HTTP/1.1 200 Connection established", None).await;
        let url = format!("{server}/jwks");
        for no_proxy in ["127.0.0.1", "localhost, 127.0.0.0/8", "*"] {
            let client = IssuerClient::with_roots(roots(&ca_cert))
                .with_proxy(HttpsProxy::new(&format!("http://{proxy}"), no_proxy));
            assert_eq!(client.get_json(&url).await, Ok(serde_json::json!({"keys": []})), "{no_proxy}");
        }
        assert!(heads(&seen).is_empty(), "{:?}", heads(&seen));
        // A list that does not name the host: tunnelled.
        let client = IssuerClient::with_roots(roots(&ca_cert))
            .with_proxy(HttpsProxy::new(&format!("http://{proxy}"), "localhost,.example.com,10.0.0.0/8"));
        assert_eq!(client.get_json(&url).await, Ok(serde_json::json!({"keys": []})));
        assert_eq!(heads(&seen).len(), 1);
    }

    #[tokio::test]
    async fn a_proxy_that_refuses_or_cannot_be_used_is_a_clear_error_without_its_credentials() {
        let (server, ca_cert) = https_server(r#"{"keys": []}"#).await;
        let url = format!("{server}/jwks");
        let target = server.trim_start_matches("https://");
        for (answer, expected) in [
            ("HTTP/1.1 403 Forbidden", format!("refused the tunnel to {target}: 403 Forbidden")),
            (
                "HTTP/1.1 407 Proxy Authentication Required",
                format!("refused the tunnel to {target}: 407 (its credentials"),
            ),
        ] {
            let (proxy, seen) = connect_proxy(answer, None).await;
            let client = IssuerClient::with_roots(roots(&ca_cert))
                .with_proxy(HttpsProxy::new(&format!("http://airlock:hunter2@{proxy}"), ""));
            let refused = client.get_json(&url).await.expect_err("refused");
            assert!(refused.starts_with(&format!("`{url}`: the proxy `{proxy}` ")), "{refused}");
            assert!(refused.contains(&expected), "{refused}");
            assert!(!refused.contains("hunter2") && !refused.contains("airlock:"), "{refused}");
            assert_eq!(heads(&seen).len(), 1);
        }
        // Nothing listens where the proxy should be.
        let client = IssuerClient::with_roots(roots(&ca_cert))
            .with_proxy(HttpsProxy::new("http://airlock:hunter2@127.0.0.1:9", ""));
        let refused = client.get_json(&url).await.expect_err("no proxy listens");
        assert!(refused.contains("cannot connect to the proxy `127.0.0.1:9`"), "{refused}");
        assert!(!refused.contains("hunter2"), "{refused}");
        // A proxy URL that is no HTTP proxy's: no fetch is made, the URL is not repeated.
        for (proxy, expected) in [
            ("socks5://airlock:hunter2@127.0.0.1:1080", "only an `http://` proxy (HTTP CONNECT) is supported"),
            ("ftp://airlock:hunter2@127.0.0.1:21", "not a proxy URL the gateway can use"),
        ] {
            let client = IssuerClient::with_roots(roots(&ca_cert)).with_proxy(HttpsProxy::new(proxy, ""));
            let refused = client.get_json(&url).await.expect_err("unusable");
            assert!(refused.contains(expected), "{refused}");
            assert!(!refused.contains("hunter2"), "{refused}");
        }
        // An empty `HTTPS_PROXY` is no proxy.
        let client = IssuerClient::with_roots(roots(&ca_cert)).with_proxy(HttpsProxy::new("  ", "127.0.0.1"));
        assert_eq!(client.get_json(&url).await, Ok(serde_json::json!({"keys": []})));
    }
}
