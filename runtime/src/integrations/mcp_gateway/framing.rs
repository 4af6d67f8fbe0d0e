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
//!
//! The message the gateway reads on every call — a client's `tools/call` request, the upstream's answer to
//! one — is read directly as what it is ([`LineRole`]), not through rmcp's untagged unions, which try each
//! kind of request or result in turn (a `tools/call` result is the sixteenth of `ServerResult`'s) and format
//! an error for every miss: about 43 k instructions for a short result, 8 k read directly; 35 k and 9 k for
//! the request. Anything else, and anything the direct reading refuses, is read as before.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolResult, ClientRequest, JsonRpcMessage, JsonRpcRequest, JsonRpcResponse, JsonRpcVersion2_0,
    RequestId, ServerResult,
};
use rmcp::service::{RoleClient, RoleServer, RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
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
    /// The ids of the `tools/call` requests sent and not yet answered (the last [`CALLS_KEPT`]), whose
    /// answers are read directly ([`LineRole`]).
    calls: VecDeque<RequestId>,
    _role: PhantomData<fn() -> Role>,
}

/// How many unanswered `tools/call` ids a transport keeps: the answer to an older one (a call cancelled and
/// never answered, or more than this many in flight) is read through rmcp's unions, as everything else is.
const CALLS_KEPT: usize = 256;

mod sealed {
    pub trait Sealed {}
    impl Sealed for rmcp::service::RoleClient {}
    impl Sealed for rmcp::service::RoleServer {}
}

/// The two sides a [`LineTransport`] serves, rmcp's client (towards an upstream server) and server (towards a
/// client), and the one message each reads directly: a client reads the answer to a `tools/call` it sent as
/// a `CallToolResult`, a server reads a `tools/call` request as one. Sealed.
pub trait LineRole: ServiceRole + sealed::Sealed {
    /// Notes what `item` says the peer will answer (the id of a `tools/call` sent).
    #[doc(hidden)]
    fn sent(item: &TxJsonRpcMessage<Self>, calls: &mut VecDeque<RequestId>);
    /// `text` read as the one message this side reads directly, or `None` for rmcp's general reading: only a
    /// message that reading would give just the same (its shape: `result` without `method` or `error`, or
    /// `method` and `id` without `result` or `error`; a result holding no member a tool's result has not), and
    /// for a result only the answer to a call in `calls`.
    #[doc(hidden)]
    fn read_directly(text: &[u8], calls: &mut VecDeque<RequestId>) -> Option<RxJsonRpcMessage<Self>>;
    /// Forgets the call `message` answers, once read the general way.
    #[doc(hidden)]
    fn answered(message: &RxJsonRpcMessage<Self>, calls: &mut VecDeque<RequestId>);
}

/// Whether a member is there at all, whatever its value (`"error": null` too: rmcp's reading counts keys).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(deserializer).map(|_| true)
}

/// A response whose result is a tool's, with the members whose presence makes it something else.
#[derive(Deserialize)]
struct CallAnswer {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    result: CallToolResult,
    #[serde(default, deserialize_with = "present")]
    method: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// An answer's result holding only the members of a tool's result: rmcp reads a result by trying each kind in
/// turn, so one that also holds, say, `tools` is a `tools/list` result to it; such a result is left to it.
#[derive(Deserialize)]
struct AnswerMembers {
    #[serde(rename = "result")]
    _result: ToolResultMembers,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResultMembers {
    #[serde(rename = "resultType", default)]
    _result_type: serde::de::IgnoredAny,
    #[serde(rename = "content", default)]
    _content: serde::de::IgnoredAny,
    #[serde(rename = "structuredContent", default)]
    _structured_content: serde::de::IgnoredAny,
    #[serde(rename = "isError", default)]
    _is_error: serde::de::IgnoredAny,
    #[serde(rename = "_meta", default)]
    _meta: serde::de::IgnoredAny,
}

/// A `tools/call` request, with the members whose presence makes it something else.
#[derive(Deserialize)]
struct CallRequest {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(flatten)]
    request: CallToolRequest,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

impl LineRole for RoleClient {
    fn sent(item: &TxJsonRpcMessage<Self>, calls: &mut VecDeque<RequestId>) {
        if let JsonRpcMessage::Request(JsonRpcRequest { id, request: ClientRequest::CallToolRequest(_), .. }) = item {
            if calls.len() == CALLS_KEPT {
                calls.pop_front();
            }
            calls.push_back(id.clone());
        }
    }

    fn read_directly(text: &[u8], calls: &mut VecDeque<RequestId>) -> Option<RxJsonRpcMessage<Self>> {
        if calls.is_empty() {
            return None;
        }
        let answer: CallAnswer = serde_json::from_slice(text).ok()?;
        if answer.method || answer.error {
            return None;
        }
        let at = calls.iter().position(|id| *id == answer.id)?;
        serde_json::from_slice::<AnswerMembers>(text).ok()?;
        calls.remove(at);
        Some(JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: answer.jsonrpc,
            id: answer.id,
            result: ServerResult::CallToolResult(answer.result),
        }))
    }

    fn answered(message: &RxJsonRpcMessage<Self>, calls: &mut VecDeque<RequestId>) {
        let id = match message {
            JsonRpcMessage::Response(response) => &response.id,
            JsonRpcMessage::Error(error) => match &error.id {
                Some(id) => id,
                None => return,
            },
            _ => return,
        };
        if let Some(at) = calls.iter().position(|call| call == id) {
            calls.remove(at);
        }
    }
}

impl LineRole for RoleServer {
    fn sent(_item: &TxJsonRpcMessage<Self>, _calls: &mut VecDeque<RequestId>) {}

    fn read_directly(text: &[u8], _calls: &mut VecDeque<RequestId>) -> Option<RxJsonRpcMessage<Self>> {
        // Most lines a client sends are calls; the others are not read twice.
        memchr::memmem::find(text, b"\"tools/call\"")?;
        let call: CallRequest = serde_json::from_slice(text).ok()?;
        if call.result || call.error {
            return None;
        }
        Some(JsonRpcMessage::Request(JsonRpcRequest {
            jsonrpc: call.jsonrpc,
            id: call.id,
            request: ClientRequest::CallToolRequest(call.request),
        }))
    }

    fn answered(_message: &RxJsonRpcMessage<Self>, _calls: &mut VecDeque<RequestId>) {}
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
            calls: VecDeque::new(),
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
    Role: LineRole,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(&mut self, item: TxJsonRpcMessage<Role>) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        Role::sent(&item, &mut self.calls);
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
            if let Some(message) = Role::read_directly(text, &mut self.calls) {
                return Some(message);
            }
            let error = match serde_json::from_slice::<RxJsonRpcMessage<Role>>(text) {
                Ok(message) => {
                    Role::answered(&message, &mut self.calls);
                    return Some(message);
                }
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
    use proptest::prelude::*;

    use super::*;

    fn scan(text: &str) -> TopLevel {
        let mut scan = TopLevel::default();
        // In pieces, as a long line arrives.
        for piece in text.as_bytes().chunks(3) {
            scan.feed(piece);
        }
        scan
    }

    /// rmcp's own reading of `text` as a message for `Role`, as JSON (its unions have no `PartialEq`).
    fn read_by_rmcp<Role: ServiceRole>(text: &str) -> Option<Value> {
        let message = serde_json::from_str::<RxJsonRpcMessage<Role>>(text).ok()?;
        Some(serde_json::to_value(message).expect("a message serializes"))
    }

    fn read_directly<Role: LineRole>(text: &str, calls: &mut VecDeque<RequestId>) -> Option<Value> {
        let message = Role::read_directly(text.as_bytes(), calls)?;
        Some(serde_json::to_value(message).expect("a message serializes"))
    }

    fn calls(ids: &[RequestId]) -> VecDeque<RequestId> {
        ids.iter().cloned().collect()
    }

    #[test]
    fn a_tool_calls_answer_is_read_directly_as_rmcp_reads_it() {
        let text_result = r#"{"content":[{"type":"text","text":"hello"}],"isError":false}"#;
        for result in [
            text_result,
            r#"{"content":[{"type":"text","text":"x"}],"structuredContent":{"a":[1,2,{"b":null}]}}"#,
            r#"{"structuredContent":null}"#,
            r#"{"isError":true,"content":[]}"#,
            r#"{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}],"_meta":{"k":"v"}}"#,
            r#"{"resultType":"complete","content":[{"type":"text","text":"done"}]}"#,
            r#"{"content":[{"type":"text","text":"a\u0000\"b"}],"_meta":{"unknown":{"deep":[1]}}}"#,
        ] {
            for id in [json!(7), json!("call-7"), json!(9_007_199_254_740_991_i64)] {
                let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
                let id: RequestId = serde_json::from_value(id).expect("an id");
                let mut pending = calls(&[RequestId::Number(1), id.clone()]);
                let direct = read_directly::<RoleClient>(&text, &mut pending);
                assert_eq!(direct, read_by_rmcp::<RoleClient>(&text), "{text}");
                assert!(direct.is_some(), "{text}");
                assert_eq!(pending, calls(&[RequestId::Number(1)]), "the answered call is forgotten: {text}");
            }
        }
    }

    #[test]
    fn what_is_not_a_pending_calls_answer_is_left_to_rmcp() {
        let answer = |id: &str, tail: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[]}}{tail}}}"#);
        let seven = calls(&[RequestId::Number(7)]);
        for (text, pending) in [
            (answer("7", ""), VecDeque::new()),                                   // no call sent
            (answer("8", ""), seven.clone()),                                     // the answer to another request
            (answer(r#""7""#, ""), seven.clone()),                                // "7" is not 7
            (answer("7", r#","error":{"code":1,"message":"m"}"#), seven.clone()), // rmcp refuses result + error
            (answer("7", r#","error":null"#), seven.clone()),
            (answer("7", r#","method":"x""#), seven.clone()),
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","inputRequests":{}}}"#.into(),
                seven.clone(),
            ),
            (r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#.into(), seven.clone()),
            (r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"nextCursor":"c"}}"#.into(), seven.clone()),
            // A tool's result to us, a `tools/list` result to rmcp (its union tries that first): left to rmcp.
            (r#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":{"x":1},"tools":[]}}"#.into(), seven.clone()),
            (r#"{"jsonrpc":"1.0","id":7,"result":{"content":[]}}"#.into(), seven.clone()),
            (r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"no"}}"#.into(), seven.clone()),
            (r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}"#.into(), seven.clone()), // cut short
        ] {
            let mut left = pending.clone();
            assert_eq!(read_directly::<RoleClient>(&text, &mut left), None, "{text}");
            assert_eq!(left, pending, "{text}");
        }
    }

    #[test]
    fn a_tools_call_request_is_read_directly_as_rmcp_reads_it_and_nothing_else_is() {
        let mut none = VecDeque::new();
        for params in [
            r#"{"name":"read_note","arguments":{"name":"note.txt"}}"#,
            r#"{"name":"t"}"#,
            r#"{"name":"t","arguments":{"a":[1,{"b":"tools/call"}]},"_meta":{"progressToken":3}}"#,
            r#"{"arguments":{},"name":"t","task":{"ttl":1000}}"#,
        ] {
            for id in ["3", r#""req-3""#] {
                let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
                let direct = read_directly::<RoleServer>(&text, &mut none);
                assert_eq!(direct, read_by_rmcp::<RoleServer>(&text), "{text}");
                assert!(direct.is_some(), "{text}");
            }
        }
        for text in [
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#, // a notification
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"tools/call"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#, // no name
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        ] {
            assert_eq!(read_directly::<RoleServer>(text, &mut none), None, "{text}");
        }
    }

    /// Result objects from members that make one kind of result or another, in any order.
    fn result_objects() -> impl Strategy<Value = String> {
        let member = prop_oneof![
            15 => Just(r#""content":[{"type":"text","text":"t"}]"#),
            2 => Just(r#""content":[]"#),
            1 => Just(r#""content":{"a":1}"#),
            1 => Just(r#""content":null"#),
            3 => Just(r#""structuredContent":{"x":1}"#),
            1 => Just(r#""structuredContent":null"#),
            3 => Just(r#""isError":true"#),
            1 => Just(r#""isError":"yes""#),
            2 => Just(r#""_meta":{"m":1}"#),
            2 => Just(r#""resultType":"complete""#),
            1 => Just(r#""resultType":"input_required""#),
            1 => Just(r#""resultType":"task""#),
            1 => Just(r#""tools":[]"#),
            1 => Just(r#""contents":[]"#),
            1 => Just(r#""messages":[]"#),
            1 => Just(r#""prompts":[]"#),
            1 => Just(r#""action":"accept""#),
            1 => Just(r#""completion":{"values":[]}"#),
            1 => Just(r#""task":{"taskId":"t","status":"working"}"#),
            1 => Just(r#""protocolVersion":"2025-06-18""#),
            1 => Just(r#""capabilities":{}"#),
            1 => Just(r#""serverInfo":{"name":"s","version":"1"}"#),
            1 => Just(r#""nextCursor":"c""#),
            1 => Just(r#""inputRequests":{}"#),
        ];
        proptest::collection::vec(member, 0..5).prop_map(|members| format!("{{{}}}", members.join(",")))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_048, ..ProptestConfig::default() })]

        /// Whatever the answer to a pending call holds, the direct reading gives what rmcp's gives, or leaves it to
        /// rmcp; and it reads every answer rmcp reads as a tool's result but one holding another member.
        #[test]
        fn the_direct_reading_of_an_answer_agrees_with_rmcps(result in result_objects(), tail in prop_oneof![
            Just(""), Just(r#","error":{"code":1,"message":"m"}"#), Just(r#","method":"m""#), Just(r#","extra":1"#)
        ]) {
            let text = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{result}{tail}}}"#);
            let by_rmcp = read_by_rmcp::<RoleClient>(&text);
            let mut pending = calls(&[RequestId::Number(7)]);
            match read_directly::<RoleClient>(&text, &mut pending) {
                Some(direct) => prop_assert_eq!(Some(direct), by_rmcp, "{}", text),
                None => {
                    let is_a_tool_result = serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&text)
                        .is_ok_and(|m| matches!(m, JsonRpcMessage::Response(JsonRpcResponse { result: ServerResult::CallToolResult(_), .. })));
                    let members: Value = serde_json::from_str(&result).expect("an object");
                    let known = ["resultType", "content", "structuredContent", "isError", "_meta"];
                    let another_member = members.as_object().is_some_and(|m| m.keys().any(|k| !known.contains(&k.as_str())));
                    prop_assert!(
                        !is_a_tool_result || another_member,
                        "rmcp reads a tool's result the direct reading refused: {}", text
                    );
                }
            }
        }
    }

    /// `tools/call` requests from members of its params and messages, in any order.
    fn requests() -> impl Strategy<Value = String> {
        let name = prop_oneof![8 => Just(Some(r#""name":"t""#)), 1 => Just(Some(r#""name":7"#)), 1 => Just(None)];
        let param = prop_oneof![
            Just(r#""arguments":{"a":1}"#),
            Just(r#""arguments":[1]"#),
            Just(r#""arguments":null"#),
            Just(r#""_meta":{"progressToken":1}"#),
            Just(r#""_meta":null"#),
            Just(r#""task":{"ttl":5}"#),
            Just(r#""task":7"#),
            Just(r#""cursor":"c""#),
            Just(r#""other":{"x":[]}"#),
        ];
        let params = (name, proptest::collection::vec(param, 0..3))
            .prop_map(|(name, mut params)| {
                params.extend(name);
                params
            })
            .prop_shuffle()
            .prop_map(|params| Some(format!(r#""params":{{{}}}"#, params.join(","))));
        // Each member mostly as a call has it, sometimes wrong or missing, sometimes one a call has not.
        let jsonrpc = prop_oneof![8 => Just(Some(r#""jsonrpc":"2.0""#.to_owned())), 1 => Just(Some(r#""jsonrpc":"1.0""#.to_owned())), 1 => Just(None)];
        let id = prop_oneof![
            4 => Just(Some(r#""id":4"#.to_owned())),
            4 => Just(Some(r#""id":"four""#.to_owned())),
            1 => Just(Some(r#""id":null"#.to_owned())),
            1 => Just(None)
        ];
        let method = prop_oneof![8 => Just(Some(r#""method":"tools/call""#.to_owned())), 1 => Just(Some(r#""method":"tools/list""#.to_owned())), 1 => Just(None)];
        let params = prop_oneof![9 => params, 1 => Just(None)];
        let extra = prop_oneof![
            7 => Just(None),
            1 => Just(Some(r#""result":{}"#.to_owned())),
            1 => Just(Some(r#""error":null"#.to_owned())),
            1 => Just(Some(r#""extra":"tools/call""#.to_owned()))
        ];
        (jsonrpc, id, method, params, extra)
            .prop_map(|(a, b, c, d, e)| [a, b, c, d, e].into_iter().flatten().collect::<Vec<String>>())
            .prop_shuffle()
            .prop_map(|members| format!("{{{}}}", members.join(",")))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_048, ..ProptestConfig::default() })]

        /// Whatever a client's line holds, the direct reading gives what rmcp's gives, or leaves it to rmcp; and it
        /// reads every `tools/call` rmcp reads.
        #[test]
        fn the_direct_reading_of_a_request_agrees_with_rmcps(text in requests()) {
            let by_rmcp = read_by_rmcp::<RoleServer>(&text);
            match read_directly::<RoleServer>(&text, &mut VecDeque::new()) {
                Some(direct) => prop_assert_eq!(Some(direct), by_rmcp, "{}", text),
                None => {
                    let is_a_call = serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(&text).is_ok_and(|m| {
                        matches!(m, JsonRpcMessage::Request(JsonRpcRequest { request: ClientRequest::CallToolRequest(_), .. }))
                    });
                    prop_assert!(!is_a_call, "rmcp reads a call the direct reading refused: {}", text);
                }
            }
        }
    }

    /// The generators above make both kinds of text often: what the direct reading reads and what it leaves.
    #[test]
    fn the_generated_texts_are_read_directly_and_left_to_rmcp_alike() {
        use proptest::strategy::ValueTree as _;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut answers, mut calls_read) = (0, 0);
        for _ in 0..1_000 {
            let result = result_objects().new_tree(&mut runner).expect("a value").current();
            let text = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{result}}}"#);
            answers += usize::from(read_directly::<RoleClient>(&text, &mut calls(&[RequestId::Number(7)])).is_some());
            let text = requests().new_tree(&mut runner).expect("a value").current();
            calls_read += usize::from(read_directly::<RoleServer>(&text, &mut VecDeque::new()).is_some());
        }
        assert!((150..=850).contains(&answers), "{answers} of 1,000 answers read directly");
        assert!((150..=850).contains(&calls_read), "{calls_read} of 1,000 requests read directly");
    }

    #[tokio::test]
    async fn a_transport_reads_the_answer_to_the_call_it_sent_directly() {
        use rmcp::model::{CallToolRequestParams, ClientJsonRpcMessage, ClientRequest as Request};
        let (ours, theirs) = tokio::io::duplex(4096);
        let (read, write) = tokio::io::split(ours);
        let mut transport = LineTransport::<RoleClient, _, _>::new(read, write, "upstream server");
        let (their_read, mut their_write) = tokio::io::split(theirs);
        let call = ClientJsonRpcMessage::Request(JsonRpcRequest::new(
            RequestId::Number(41),
            Request::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("read_note"))),
        ));
        transport.send(call).await.expect("sent");
        assert_eq!(transport.calls, calls(&[RequestId::Number(41)]));
        let mut sent = String::new();
        BufReader::new(their_read).read_line(&mut sent).await.expect("read");
        assert!(sent.contains(r#""method":"tools/call""#), "{sent}");
        let answer = r#"{"jsonrpc":"2.0","id":41,"result":{"content":[{"type":"text","text":"note"}]}}"#;
        their_write.write_all(format!("{answer}\n").as_bytes()).await.expect("written");
        let message = transport.receive().await.expect("a message");
        assert_eq!(Some(serde_json::to_value(&message).expect("json")), read_by_rmcp::<RoleClient>(answer));
        assert!(transport.calls.is_empty());
        // An error answer is read by rmcp's reading, and its call forgotten too.
        transport.calls.push_back(RequestId::Number(42));
        their_write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"error\":{\"code\":-1,\"message\":\"m\"}}\n")
            .await
            .expect("written");
        assert!(matches!(transport.receive().await, Some(JsonRpcMessage::Error(_))));
        assert!(transport.calls.is_empty());
        // Only the last CALLS_KEPT calls are kept.
        for id in 0..CALLS_KEPT as i64 + 3 {
            let call = ClientJsonRpcMessage::Request(JsonRpcRequest::new(
                RequestId::Number(id),
                Request::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t"))),
            ));
            drop(transport.send(call));
        }
        assert_eq!(transport.calls.len(), CALLS_KEPT);
        assert_eq!(transport.calls.front(), Some(&RequestId::Number(3)));
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
