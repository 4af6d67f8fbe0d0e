//! TLS to the PostgreSQL server, with rustls (the `ring` provider).
//!
//! The connection string's `sslmode` decides: `require`, `verify-full` verify the server's certificate
//! chain and that it names the host connected to; `verify-ca` verifies the chain only; `disable`,
//! `allow`, `prefer` or no `sslmode` connect without TLS (over TCP or a Unix socket), as before TLS was
//! supported. The certificates trusted are those of `sslrootcert=FILE` (PEM), else
//! [`PostgresOptions::tls_root_cert`], else the system's roots (`sslrootcert=system` asks for them
//! explicitly). `sslmode` and `sslrootcert` are taken out of the string before `tokio-postgres` parses
//! the rest (it knows neither `verify-ca`, `verify-full` nor `sslrootcert`).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use super::{PostgresOpenError, PostgresOptions};

/// What the connection string asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No TLS (`disable`, `allow`, `prefer`, or no `sslmode`).
    Plain,
    /// TLS; the chain is verified, not the host name (`verify-ca`).
    VerifyCa,
    /// TLS; the chain and the host name are verified (`require`, `verify-full`).
    VerifyFull,
}

/// A parsed connection string, and the TLS connector it asks for (none: plain TCP or Unix socket).
pub(super) struct Settings {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: Option<MakeRustls>,
}

/// Parses `url` (URL or `key=value` form), taking its TLS settings out.
pub(super) fn settings(url: &str, options: &PostgresOptions) -> Result<Settings, PostgresOpenError> {
    let split = split_tls_params(url)?;
    let mut config: tokio_postgres::Config = split.rest.parse().map_err(PostgresOpenError::Config)?;
    let mode = match split.sslmode.as_deref() {
        None | Some("disable" | "allow" | "prefer") => Mode::Plain,
        Some("require" | "verify-full") => Mode::VerifyFull,
        Some("verify-ca") => Mode::VerifyCa,
        Some(other) => {
            return Err(PostgresOpenError::Tls(format!(
                "unknown sslmode `{}` (expected disable, allow, prefer, require, verify-ca or verify-full)",
                other.escape_debug()
            )));
        }
    };
    let root_cert = split.sslrootcert.map(PathBuf::from).or_else(|| options.tls_root_cert.clone());
    if mode == Mode::Plain {
        if root_cert.is_some() {
            return Err(PostgresOpenError::Tls(
                "a CA file (sslrootcert) is given but sslmode does not ask for TLS: add sslmode=verify-full".into(),
            ));
        }
        config.ssl_mode(SslMode::Disable);
        return Ok(Settings { config, tls: None });
    }
    if config.get_hosts().iter().any(|host| !matches!(host, Host::Tcp(_))) {
        return Err(PostgresOpenError::Tls(
            "TLS (sslmode) is asked for but the host is a Unix socket: PostgreSQL speaks TLS over TCP only".into(),
        ));
    }
    config.ssl_mode(SslMode::Require);
    let roots = match root_cert {
        Some(path) if path.as_os_str() != "system" => roots_from_file(&path)?,
        _ => system_roots()?,
    };
    let tls = client_config(roots, mode)?;
    Ok(Settings { config, tls: Some(MakeRustls { connector: tokio_rustls::TlsConnector::from(Arc::new(tls)) }) })
}

/// The certificates of a PEM file.
fn roots_from_file(path: &Path) -> Result<RootCertStore, PostgresOpenError> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|err| PostgresOpenError::Tls(format!("cannot read the CA file {shown}: {err}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| PostgresOpenError::Tls(format!("cannot read the CA file {shown}: {err}")))?;
    if certs.is_empty() {
        return Err(PostgresOpenError::Tls(format!("the CA file {shown} holds no PEM certificate")));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|err| {
            PostgresOpenError::Tls(format!("the CA file {shown} holds an invalid certificate: {err}"))
        })?;
    }
    Ok(roots)
}

/// The system's root certificates.
fn system_roots() -> Result<RootCertStore, PostgresOpenError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(PostgresOpenError::Tls(
            "no system root certificates were found: give the server's CA file (sslrootcert=FILE)".into(),
        ));
    }
    Ok(roots)
}

fn client_config(roots: RootCertStore, mode: Mode) -> Result<ClientConfig, PostgresOpenError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| PostgresOpenError::Tls(format!("cannot set up TLS: {err}")))?;
    let config = match mode {
        Mode::VerifyCa => {
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| PostgresOpenError::Tls(format!("cannot set up TLS: {err}")))?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(inner))).with_no_client_auth()
        }
        Mode::VerifyFull | Mode::Plain => builder.with_root_certificates(roots).with_no_client_auth(),
    };
    Ok(config)
}

/// `verify-ca`: the certificate chain is verified, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is verified before the name: a name error means the chain was trusted.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The connection string without `sslmode` and `sslrootcert`, and their values.
#[derive(Debug, PartialEq, Eq)]
struct Split {
    rest: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

fn split_tls_params(url: &str) -> Result<Split, PostgresOpenError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_key_values(url)
    }
}

/// `postgresql://…?sslmode=…&sslrootcert=…`: the query's pairs, percent-decoded.
fn split_url(url: &str) -> Result<Split, PostgresOpenError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Split { rest: url.to_owned(), sslmode: None, sslrootcert: None });
    };
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key)?.as_str() {
            "sslmode" => sslmode = Some(percent_decode(value)?),
            "sslrootcert" => sslrootcert = Some(percent_decode(value)?),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok(Split { rest, sslmode, sslrootcert })
}

fn percent_decode(text: &str) -> Result<String, PostgresOpenError> {
    let invalid = || PostgresOpenError::Tls("the connection URL's query has an invalid percent-encoding".into());
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or_else(invalid)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| invalid())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| invalid())
}

/// `key=value key='quoted value'`, as libpq reads it: the pairs for TLS are taken out, the others are
/// kept as written.
fn split_key_values(text: &str) -> Result<Split, PostgresOpenError> {
    let malformed = || PostgresOpenError::Tls("the connection string is malformed near `sslmode`/`sslrootcert`".into());
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut rest = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else { break };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            // Not `key=value`: left for tokio-postgres to report.
            rest.push_str(&text[start..]);
            break;
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => value.push(chars.next().ok_or_else(malformed)?.1),
                    Some((_, c)) => value.push(c),
                    None => {
                        if key == "sslmode" || key == "sslrootcert" {
                            return Err(malformed());
                        }
                        break;
                    }
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next().ok_or_else(malformed)?.1);
                } else {
                    value.push(c);
                }
            }
        }
        let end = chars.peek().map_or(text.len(), |&(at, _)| at);
        match key.as_str() {
            "sslmode" => sslmode = Some(value),
            "sslrootcert" => sslrootcert = Some(value),
            _ => {
                rest.push_str(&text[start..end]);
                rest.push(' ');
            }
        }
    }
    Ok(Split { rest: rest.trim_end().to_owned(), sslmode, sslrootcert })
}

/// Makes a rustls connection per server connection.
#[derive(Clone)]
pub(super) struct MakeRustls {
    connector: tokio_rustls::TlsConnector,
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not a host name TLS can verify", domain.escape_debug()),
            )
        })?;
        Ok(RustlsConnect { connector: self.connector.clone(), name })
    }
}

/// One TLS handshake, to the server named `name`.
pub(super) struct RustlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let shown = self.name.to_str().into_owned();
            match self.connector.connect(self.name, stream).await {
                Ok(stream) => Ok(RustlsStream(Box::new(stream))),
                Err(err) => Err(explain(err, &shown)),
            }
        })
    }
}

/// Says why the handshake failed in the operator's words: an untrusted certificate, or one for another
/// host.
fn explain(err: io::Error, host: &str) -> io::Error {
    let Some(tls) = err.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else { return err };
    let message = match tls {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!("the server's certificate is not valid for the host name `{}`: {tls}", host.escape_debug()),
        rustls::Error::InvalidCertificate(_) => format!("the server's certificate is not trusted: {tls}"),
        _ => return err,
    };
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A TLS connection to the server.
pub(super) struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S> tokio_postgres::tls::TlsStream for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Split {
        split_tls_params(text).expect("splits")
    }

    #[test]
    fn key_value_strings_lose_only_their_tls_pairs() {
        let got = split("host=db.example sslmode=verify-full  user=app sslrootcert='/etc/a b\\'c.pem' dbname=x");
        assert_eq!(got.rest, "host=db.example user=app dbname=x");
        assert_eq!(got.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(got.sslrootcert.as_deref(), Some("/etc/a b'c.pem"));
        let plain = split("host=/run/postgresql user=postgres password='s e\\'cret'");
        assert_eq!(plain.rest, "host=/run/postgresql user=postgres password='s e\\'cret'");
        assert_eq!((plain.sslmode, plain.sslrootcert), (None, None));
        assert!(split_tls_params("host=x sslmode='require").is_err());
    }

    #[test]
    fn urls_lose_only_their_tls_query_pairs() {
        let got =
            split("postgresql://app@db.example:5432/x?connect_timeout=3&sslmode=verify-ca&sslrootcert=%2Fetc%2Fca.pem");
        assert_eq!(got.rest, "postgresql://app@db.example:5432/x?connect_timeout=3");
        assert_eq!(got.sslmode.as_deref(), Some("verify-ca"));
        assert_eq!(got.sslrootcert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(split("postgres://h/x?sslmode=require").rest, "postgres://h/x");
        assert_eq!(split("postgres://h/x").rest, "postgres://h/x");
        assert!(split_tls_params("postgres://h/x?sslrootcert=%zz").is_err());
    }

    #[test]
    fn unknown_modes_unix_sockets_and_contradictions_are_refused() {
        let options = PostgresOptions::default();
        let refused = |url: &str| match settings(url, &options) {
            Err(PostgresOpenError::Tls(message)) => message,
            Err(other) => panic!("{url}: refused for another reason: {other}"),
            Ok(_) => panic!("{url}: accepted"),
        };
        assert!(refused("host=h sslmode=verify").contains("unknown sslmode"));
        assert!(refused("host=/run/postgresql sslmode=require").contains("Unix socket"));
        assert!(refused("host=h sslmode=disable sslrootcert=/x.pem").contains("does not ask for TLS"));
        assert!(refused("host=h sslmode=verify-full sslrootcert=/no/such/ca.pem").contains("cannot read the CA file"));
        let plain = settings("host=/run/postgresql user=p", &options).expect("plain");
        assert!(plain.tls.is_none());
        assert_eq!(plain.config.get_ssl_mode(), SslMode::Disable);
    }
}
