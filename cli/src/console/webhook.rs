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
use std::sync::Arc;
use std::time::Duration;

use agent_airlock::keys::WebhookKey;
use serde_json::{Value, json};

use super::pages::Listed;
use super::{Console, listed_pending, now};
use crate::{Failure, Sealed};

/// Where and how notifications go.
pub(super) struct Webhook {
    url: reqwest::Url,
    key: WebhookKey,
    client: reqwest::Client,
    /// The console's own address, for links to a request's page.
    console: String,
    /// Attempts per notification, the first included.
    attempts: u32,
    /// The wait before the first retry; doubled for each later one.
    first_backoff: Duration,
}

/// How often the ledger is read for new requests.
const POLL: Duration = Duration::from_secs(1);

impl Webhook {
    pub(super) fn new(url: &str, key: WebhookKey, attempts: u32, first_backoff: Duration) -> Result<Webhook, Failure> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("the webhook URL `{url}`: {e}"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "the webhook URL `{url}` is not `http://`: the console has no TLS client; point it at a relay on \
                 this host or network"
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("the webhook client: {e}"))?;
        Ok(Webhook { url, key, client, console: String::new(), attempts: attempts.max(1), first_backoff })
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
                "requested_at_ms": crate::millis(request.requested_at()),
                "expires_at_ms": request.expires_at().map(crate::millis),
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
            let sent = self
                .client
                .post(self.url.clone())
                .header("content-type", "application/json")
                .header("x-airlock-timestamp", timestamp.to_string())
                .header("x-airlock-signature", format!("sha256={signature}"))
                .body(body.clone())
                .send()
                .await;
            let failure = match sent {
                Ok(response) if response.status().is_success() => return,
                Ok(response) => format!("the receiver answered {}", response.status()),
                Err(error) => error.to_string(),
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
