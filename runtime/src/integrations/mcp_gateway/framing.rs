//! The gateway's stdio framing: one JSON-RPC message per line, as rmcp's `AsyncRwTransport`, but no message is
//! ever dropped without an answer.
//!
//! rmcp drops what it cannot read: a line over its limit (16 MiB) is discarded, so the request it answered
//! waits forever (and its effect stays reserved); a line that is not JSON, or is nested deeper than
//! `serde_json` accepts (128 levels), is ignored, so the client that sent it waits forever. Here:
//!
//! - every line is read bounded ([`LineTransport::max_message_bytes`]); what is beyond the limit is not
//!   kept, only streamed through a small scanner ([`TopLevel`]) that finds the message's top-level `id` and
//!   whether it is a request or a response, wherever in the message they are (a result's `id` may come last);
//! - a **response** that cannot be read (too large, nested too deep, not a message) becomes a JSON-RPC error
//!   response to the request it answers, delivered to the gateway's side: the caller gets an error at once
//!   (and a `tools/call` leaves its effect ambiguous: the peer may have run it);
//! - a **request** that cannot be read is answered to the peer with `-32600` (invalid request), its `id` if
//!   one could be found; a line that is not JSON at all with `-32700` (parse error) and `id: null`, where the
//!   peer is a client ([`LineTransport::answering_parse_errors`]; an upstream server is not answered, so
//!   that two peers never trade errors about each other's errors);
//! - an unreadable notification is logged and dropped (nobody waits for it).

use std::marker::PhantomData;
use std::sync::Arc;

use rmcp::service::{RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::Mutex;

/// The largest message read from a peer by default: rmcp's own line limit (16 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// JSON-RPC's parse error.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request.
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's internal error: what a caller gets for a response the gateway could not read.
const INTERNAL_ERROR: i64 = -32603;

/// A line-framed JSON-RPC transport over a reader and a writer: every line is read within a size limit and
/// never buffered past it, and a line that is not a message is answered with a JSON-RPC error, not dropped.
pub struct LineTransport<Role: ServiceRole, R, W> {
    read: BufReader<R>,
    write: Arc<Mutex<Option<W>>>,
    /// The line being read, while it is within the limit.
    line: Vec<u8>,
    /// Set while the rest of an oversized line streams through `oversized`.
    oversized: Option<TopLevel>,
    max_message_bytes: usize,
    answer_parse_errors: bool,
    /// Who the peer is, for messages: "client", "upstream server".
    peer: &'static str,
    /// A response made up for the local side, delivered on the next `receive`.
    pending: Option<RxJsonRpcMessage<Role>>,
    _role: PhantomData<fn() -> Role>,
}

impl<Role: ServiceRole, R: AsyncRead + Unpin + Send, W: AsyncWrite + Unpin + Send + 'static> LineTransport<Role, R, W> {
    /// Reads from `read` and writes to `write`; `peer` names who is at the other end, in messages.
    pub fn new(read: R, write: W, peer: &'static str) -> Self {
        LineTransport {
            read: BufReader::new(read),
            write: Arc::new(Mutex::new(Some(write))),
            line: Vec::new(),
            oversized: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            answer_parse_errors: false,
            peer,
            pending: None,
            _role: PhantomData,
        }
    }

    /// The largest message read (bytes, without the newline); a larger one is answered as the
    /// [`LineTransport`] says (a JSON-RPC error, or a failed call for a result), never buffered.
    #[must_use]
    pub fn max_message_bytes(mut self, limit: usize) -> Self {
        self.max_message_bytes = limit;
        self
    }

    /// Answers a line that is not JSON with `-32700` and `id: null` (for a client peer).
    #[must_use]
    pub fn answering_parse_errors(mut self) -> Self {
        self.answer_parse_errors = true;
        self
    }

    /// Reads the next line: `Ok(Some(line))`, `Err(scanner)` for one over the limit (its scan), `Ok(None)` at
    /// the end. Cancel-safe: a partial line stays in `self.line` or `self.oversized`.
    async fn next_line(&mut self) -> std::io::Result<Option<Result<Vec<u8>, TopLevel>>> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(None);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let chunk = &available[..take];
            let body = newline.map_or(chunk, |at| &chunk[..at]);
            if let Some(scan) = self.oversized.as_mut() {
                scan.feed(body);
            } else if self.line.len() + body.len() > self.max_message_bytes {
                let mut scan = TopLevel::default();
                scan.feed(&self.line);
                scan.feed(body);
                scan.bytes = self.line.len();
                self.line = Vec::new();
                self.oversized = Some(scan);
            } else {
                self.line.extend_from_slice(body);
            }
            if let Some(scan) = self.oversized.as_mut() {
                scan.bytes += body.len();
            }
            self.read.consume(take);
            if newline.is_some() {
                if let Some(scan) = self.oversized.take() {
                    return Ok(Some(Err(scan)));
                }
                return Ok(Some(Ok(std::mem::take(&mut self.line))));
            }
        }
    }

    /// What to do with a message that could not be read, `why`, from its scan: a response becomes an error
    /// for the local side; a request is answered with `code`; a notification is dropped.
    async fn unreadable(&mut self, scan: &TopLevel, code: i64, why: String) -> bool {
        let id = scan.id();
        if scan.is_response() {
            let Some(id) = id else {
                tracing::warn!(target: "agent_airlock", peer = self.peer, %why, "an unreadable response without an id: dropped");
                return true;
            };
            tracing::warn!(target: "agent_airlock", peer = self.peer, %id, %why, "an unreadable response: the request fails");
            let why = format!("{why}; whether the request it answers was carried out is unknown");
            let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": INTERNAL_ERROR, "message": why}});
            match serde_json::from_value(error) {
                Ok(message) => self.pending = Some(message),
                Err(error) => tracing::error!(target: "agent_airlock", %error, "cannot make the error response"),
            }
            return true;
        }
        if scan.is_request() || code == PARSE_ERROR {
            tracing::warn!(target: "agent_airlock", peer = self.peer, %why, "an unreadable request: answered with an error");
            let id = if code == PARSE_ERROR { Value::Null } else { id.unwrap_or(Value::Null) };
            let answer = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": why}});
            return write_line(&self.write, &answer).await;
        }
        tracing::warn!(target: "agent_airlock", peer = self.peer, %why, "an unreadable notification: dropped");
        true
    }
}

impl<Role, R, W> Transport<Role> for LineTransport<Role, R, W>
where
    Role: ServiceRole,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(&mut self, item: TxJsonRpcMessage<Role>) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move {
            let mut bytes = serde_json::to_vec(&item)?;
            bytes.push(b'\n');
            let mut write = write.lock().await;
            let write = write
                .as_mut()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotConnected, "the transport is closed"))?;
            write.write_all(&bytes).await?;
            write.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<Role>> {
        loop {
            if let Some(message) = self.pending.take() {
                return Some(message);
            }
            let line = match self.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(error) => {
                    tracing::error!(target: "agent_airlock", peer = self.peer, %error, "cannot read from the peer");
                    return None;
                }
            };
            let line = match line {
                Ok(line) => line,
                Err(scan) => {
                    let why = format!(
                        "the {}'s message is {} bytes, more than the gateway's limit of {}",
                        self.peer, scan.bytes, self.max_message_bytes
                    );
                    if !self.unreadable(&scan, INVALID_REQUEST, why).await {
                        return None;
                    }
                    continue;
                }
            };
            let text = line.strip_suffix(b"\r").unwrap_or(&line);
            let text = text.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let error = match serde_json::from_slice::<RxJsonRpcMessage<Role>>(text) {
                Ok(message) => return Some(message),
                Err(error) => error,
            };
            let mut scan = TopLevel::default();
            scan.feed(text);
            scan.bytes = text.len();
            let too_deep = error.to_string().starts_with("recursion limit exceeded");
            let is_json = !too_deep && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok();
            let answered = if too_deep {
                let why = format!("the {}'s message is nested too deeply to be read", self.peer);
                self.unreadable(&scan, INVALID_REQUEST, why).await
            } else if is_json {
                // A notification of a kind rmcp does not know is dropped, as rmcp does.
                if !scan.is_request() && !scan.is_response() {
                    tracing::debug!(target: "agent_airlock", peer = self.peer, %error, "an unknown notification: dropped");
                    continue;
                }
                let why = format!("the {}'s message is not a valid JSON-RPC message: {error}", self.peer);
                self.unreadable(&scan, INVALID_REQUEST, why).await
            } else if self.answer_parse_errors {
                let why = format!("parse error: the {}'s message is not JSON: {error}", self.peer);
                self.unreadable(&TopLevel::default(), PARSE_ERROR, why).await
            } else {
                tracing::warn!(target: "agent_airlock", peer = self.peer, %error, "a message that is not JSON: dropped");
                true
            };
            if !answered {
                return None;
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let write = self.write.lock().await.take();
        if let Some(mut write) = write {
            let _ = write.shutdown().await;
        }
        Ok(())
    }
}

/// Writes `message` to the peer, a line; false if the peer is gone.
async fn write_line<W: AsyncWrite + Unpin>(write: &Mutex<Option<W>>, message: &Value) -> bool {
    let mut bytes = message.to_string().into_bytes();
    bytes.push(b'\n');
    let mut write = write.lock().await;
    let Some(write) = write.as_mut() else { return false };
    write.write_all(&bytes).await.is_ok() && write.flush().await.is_ok()
}

/// A streaming scan of a JSON object's top level, in constant memory, at any depth: its `id` (when a number
/// or a string of modest length) and whether it has `method`, `result` or `error` members. Fed a message in
/// pieces, including one too large or too deep to parse.
#[derive(Debug, Default)]
pub(crate) struct TopLevel {
    /// Bytes fed, for messages.
    bytes: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, whether the next string is a member's name.
    expect_key: bool,
    /// The member name being read (at most [`KEY_CAP`] bytes kept).
    key: Option<Vec<u8>>,
    /// The last member name read.
    last_key: Vec<u8>,
    /// The raw `id` value being read.
    id_raw: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
    method: bool,
    result: bool,
    error: bool,
}

/// The longest member name kept (`method`, `result`, …; longer ones are not ours to look for).
const KEY_CAP: usize = 16;
/// The longest `id` kept.
const ID_CAP: usize = 256;

impl TopLevel {
    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.step(byte);
        }
    }

    fn step(&mut self, byte: u8) {
        if self.in_string {
            let closing = !self.escaped && byte == b'"';
            self.escaped = !self.escaped && byte == b'\\';
            if closing {
                self.in_string = false;
                if let Some(key) = self.key.take() {
                    self.last_key = key;
                }
            }
            if let Some(key) = self.key.as_mut()
                && key.len() <= KEY_CAP
            {
                key.push(byte);
            }
            self.push_id(byte);
            if closing && self.id_raw.is_some() {
                self.id = self.id_raw.take();
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.key = Some(Vec::new());
                } else if self.value_of_id() {
                    self.id_raw = Some(vec![b'"']);
                }
            }
            b'{' | b'[' => {
                self.end_scalar_id();
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = byte == b'{';
                }
            }
            b'}' | b']' => {
                self.end_scalar_id();
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                match self.last_key.as_slice() {
                    b"method" => self.method = true,
                    b"result" => self.result = true,
                    b"error" => self.error = true,
                    _ => {}
                }
            }
            b',' if self.depth == 1 => {
                self.end_scalar_id();
                self.expect_key = true;
                self.last_key.clear();
            }
            b' ' | b'\t' | b'\r' | b'\n' => self.end_scalar_id(),
            _ => {
                if self.id_raw.is_none() && self.value_of_id() {
                    self.id_raw = Some(Vec::new());
                }
                self.push_id(byte);
            }
        }
    }

    /// Whether a value starting now is the top-level `id`'s.
    fn value_of_id(&self) -> bool {
        self.depth == 1 && !self.expect_key && self.last_key == b"id" && self.id.is_none()
    }

    fn push_id(&mut self, byte: u8) {
        if let Some(raw) = self.id_raw.as_mut() {
            if raw.len() < ID_CAP {
                raw.push(byte);
            } else {
                self.id_raw = None;
                self.last_key.clear();
            }
        }
    }

    fn end_scalar_id(&mut self) {
        if let Some(raw) = self.id_raw.take() {
            self.id = Some(raw);
        }
    }

    /// The top-level `id`, if it is a number or a string.
    fn id(&self) -> Option<Value> {
        let value: Value = serde_json::from_slice(self.id.as_deref()?).ok()?;
        (value.is_number() || value.is_string()).then_some(value)
    }

    fn is_response(&self) -> bool {
        !self.method && (self.result || self.error)
    }

    fn is_request(&self) -> bool {
        self.method && self.id().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> TopLevel {
        let mut scan = TopLevel::default();
        // In pieces, as a long line arrives.
        for piece in text.as_bytes().chunks(3) {
            scan.feed(piece);
        }
        scan
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is() {
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        for (text, id, response, request) in [
            (r#"{"jsonrpc":"2.0","id":7,"result":{"id":9}}"#.to_owned(), Some(json!(7)), true, false),
            (r#"{"result":{"id":9,"s":"\"id\":3"},"id":"a\"b"}"#.to_owned(), Some(json!("a\"b")), true, false),
            (
                format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{deep},"id": 12 }}"#),
                Some(json!(12)),
                false,
                true,
            ),
            (r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"id":1}}"#.to_owned(), None, false, false),
            (r#"{"id":{"no":1},"error":{}}"#.to_owned(), None, true, false),
            (r#"{this is not json"#.to_owned(), None, false, false),
        ] {
            let scan = scan(&text);
            assert_eq!(scan.id(), id, "{text:.80}");
            assert_eq!(scan.is_response(), response, "{text:.80}");
            assert_eq!(scan.is_request(), request, "{text:.80}");
        }
    }
}
