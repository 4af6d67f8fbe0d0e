//! Announcing new pending requests to a webhook (a chat bot, a pager): the console watches the ledger and
//! POSTs each new pending request once, signed, retrying with backoff while the receiver fails.
//!
//! The body is JSON: `event` (`approval.pending`), `request_id`, `seal` (`verified` or `tampered`), and for a
//! verified request `tool`, `rule`, `reason`, `thread_id`, `requested_at_ms`, `expires_at_ms`, with `url`,
//! the request's page on the console. Arguments are never sent (they stay behind the sign-in). Headers:
//! `X-Airlock-Timestamp` (seconds since the Unix epoch) and `X-Airlock-Signature: sha256=<hex>`, the
//! [`WebhookKey::webhook_signature`] of the timestamp and the body. Every process of the console announces
//! what is pending when it starts, so a receiver should treat `request_id` as the notification's identity.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use agent_airlock::keys::WebhookKey;
use serde_json::{Value, json};

use super::pages::Listed;
use super::{Console, listed_pending, now};
use crate::Failure;
use crate::output::millis;
use crate::requests::Sealed;

/// Where and how notifications go.
pub(super) struct Webhook {
    url: reqwest::Url,
    key: WebhookKey,
    transport: Transport,
    /// The console's own address, for links to a request's page.
    console: String,
    /// Attempts per notification, the first included.
    attempts: u32,
    /// The wait before the first retry; doubled for each later one.
    first_backoff: Duration,
}

/// How a notification is sent.
enum Transport {
    /// `http://`, with reqwest (built without TLS).
    Http(reqwest::Client),
    /// `https://`: one HTTP/1.1 request per connection over rustls (the `ring` provider), trusting the CA
    /// file of `--webhook-ca-file` or the system's roots.
    Https(tokio_rustls::TlsConnector),
}

/// How long one attempt may take, connection and TLS handshake included.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the ledger is read for new requests.
const POLL: Duration = Duration::from_secs(1);

impl Webhook {
    pub(super) fn new(
        url: &str,
        key: WebhookKey,
        attempts: u32,
        first_backoff: Duration,
        ca_file: Option<&Path>,
    ) -> Result<Webhook, Failure> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("the webhook URL `{url}`: {e}"))?;
        let transport = match url.scheme() {
            "http" if ca_file.is_some() => {
                return Err(format!("`--webhook-ca-file` is for an `https://` webhook, and `{url}` is not one"));
            }
            "http" => Transport::Http(
                reqwest::Client::builder()
                    .timeout(ATTEMPT_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| format!("the webhook client: {e}"))?,
            ),
            "https" => Transport::Https(tls_connector(ca_file)?),
            _ => return Err(format!("the webhook URL `{url}` is neither `http://` nor `https://`")),
        };
        if url.host().is_none() {
            return Err(format!("the webhook URL `{url}` has no host"));
        }
        Ok(Webhook { url, key, transport, console: String::new(), attempts: attempts.max(1), first_backoff })
    }

    /// Links in notifications point at `base` (`http://host:port`).
    pub(super) fn linking_to(mut self, base: String) -> Webhook {
        self.console = base;
        self
    }

    fn body(&self, item: &Listed) -> Value {
        let id = &item.entry.request.request_id;
        match &item.sealed {
            Sealed::Verified(request) => json!({
                "event": "approval.pending",
                "request_id": id,
                "seal": "verified",
                "tool": request.tool(),
                "rule": request.rule(),
                "reason": request.reason(),
                "thread_id": request.call().thread_id,
                "requested_at_ms": millis(request.requested_at()),
                "expires_at_ms": request.expires_at().map(millis),
                "url": format!("{}/requests/{id}", self.console),
            }),
            _ => json!({
                "event": "approval.pending",
                "request_id": id,
                "seal": "tampered",
                "url": format!("{}/requests/{id}", self.console),
            }),
        }
    }

    /// Posts one notification until the receiver answers 2xx or the attempts run out.
    async fn deliver(&self, request_id: &str, body: Vec<u8>) {
        let mut backoff = self.first_backoff;
        for attempt in 1..=self.attempts {
            let timestamp = now().as_secs();
            let signature = self.key.webhook_signature(timestamp, &body);
            let headers = [
                ("content-type", "application/json".to_owned()),
                ("x-airlock-timestamp", timestamp.to_string()),
                ("x-airlock-signature", format!("sha256={signature}")),
            ];
            let failure = match self.send(&headers, body.clone()).await {
                Ok(status) if (200..300).contains(&status) => return,
                Ok(status) => format!("the receiver answered {status}"),
                Err(error) => error,
            };
            eprintln!(
                "airlock console: webhook notification of request `{request_id}` failed (attempt {attempt} of {}): \
                 {failure}",
                self.attempts
            );
            if attempt < self.attempts {
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
            }
        }
    }
}

impl Webhook {
    /// Sends one notification; the receiver's status code.
    async fn send(&self, headers: &[(&str, String)], body: Vec<u8>) -> Result<u16, String> {
        match &self.transport {
            Transport::Http(client) => {
                let mut request = client.post(self.url.clone()).body(body);
                for (name, value) in headers {
                    request = request.header(*name, value);
                }
                let response = request.send().await.map_err(|e| e.to_string())?;
                Ok(response.status().as_u16())
            }
            Transport::Https(connector) => {
                match tokio::time::timeout(ATTEMPT_TIMEOUT, self.send_https(connector, headers, body)).await {
                    Ok(sent) => sent,
                    Err(_) => Err(format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs())),
                }
            }
        }
    }

    async fn send_https(
        &self,
        connector: &tokio_rustls::TlsConnector,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<u16, String> {
        let port = self.url.port_or_known_default().unwrap_or(443);
        let (address, name) = match self.url.host() {
            Some(url::Host::Domain(domain)) => (
                domain.to_owned(),
                ServerName::try_from(domain.to_owned())
                    .map_err(|_| format!("`{domain}` is not a host name TLS can verify"))?,
            ),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), ServerName::IpAddress(std::net::IpAddr::V4(ip).into())),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), ServerName::IpAddress(std::net::IpAddr::V6(ip).into())),
            None => return Err("the webhook URL has no host".to_owned()),
        };
        let shown = name.to_str().into_owned();
        let tcp = tokio::net::TcpStream::connect((address.as_str(), port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let tls = connector.connect(name, tcp).await.map_err(|e| explain(&e, &shown))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let authority = match self.url.port() {
            Some(port) => format!("{}:{port}", self.url.host_str().unwrap_or_default()),
            None => self.url.host_str().unwrap_or_default().to_owned(),
        };
        let path = match self.url.query() {
            Some(query) => format!("{}?{query}", self.url.path()),
            None => self.url.path().to_owned(),
        };
        let mut request = hyper::Request::post(path).header("host", authority);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        Ok(response.status().as_u16())
    }
}

/// The TLS client of an `https://` webhook: the certificates of `ca_file` (PEM), else the system's roots.
fn tls_connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, Failure> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("the webhook's CA file {shown}: {e}"))?;
            if certs.is_empty() {
                return Err(format!("the webhook's CA file {shown} holds no PEM certificate"));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| format!("the webhook's CA file {shown}: {e}"))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(
                    "no system root certificates were found: give the webhook's CA with `--webhook-ca-file`".to_owned()
                );
            }
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the webhook's TLS client: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Why a handshake failed, in the operator's words.
fn explain(err: &std::io::Error, host: &str) -> String {
    match err.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(
            tls @ rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            ),
        ) => format!("the receiver's certificate is not valid for the host name `{host}`: {tls}"),
        Some(tls @ rustls::Error::InvalidCertificate(_)) => format!("the receiver's certificate is not trusted: {tls}"),
        _ => format!("the TLS handshake failed: {err}"),
    }
}

/// Announces each request that becomes pending, once, for as long as the console runs.
pub(super) async fn announce(console: Arc<Console>, webhook: Arc<Webhook>) {
    let mut announced: HashSet<String> = HashSet::new();
    loop {
        match listed_pending(&console).await {
            Ok(listed) => {
                let pending: HashSet<&str> = listed.iter().map(|item| item.entry.request.request_id.as_str()).collect();
                // Decided requests leave the set, so it does not grow without bound.
                announced.retain(|id| pending.contains(id.as_str()));
                for item in &listed {
                    let id = item.entry.request.request_id.clone();
                    if announced.insert(id.clone()) {
                        let body = webhook.body(item).to_string().into_bytes();
                        let webhook = Arc::clone(&webhook);
                        tokio::spawn(async move { webhook.deliver(&id, body).await });
                    }
                }
            }
            Err(error) => eprintln!("airlock console: reading the pending requests for the webhook failed: {error}"),
        }
        tokio::time::sleep(POLL).await;
    }
}
