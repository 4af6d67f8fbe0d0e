//! The smallest HTTP/1.1 server the tests need to stand in for a service on loopback (an OTLP collector, a
//! model provider): one keep-alive connection's requests read in turn, each answered by a handler.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request line without its line end, e.g. `POST /v1/traces HTTP/1.1`.
    pub line: String,
    /// Its path (the request line's second word).
    pub path: String,
    /// The body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

/// What a handler answers.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status and its phrase, e.g. `200 OK`.
    pub status: &'static str,
    /// The `content-type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// `200 OK` with `body` as `content_type`.
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response { status: "200 OK", content_type, body: body.into() }
    }
}

/// Serves the requests of one connection until the client closes it (or sends something that is not
/// HTTP/1.1 with a `Content-Length`), each answered by `handle`.
pub fn serve_connection(stream: TcpStream, mut handle: impl FnMut(Request) -> Response) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        let response = handle(request);
        let head = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n\r\n",
            response.status,
            response.content_type,
            response.body.len()
        );
        let written = writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(&response.body));
        if written.and_then(|()| writer.flush()).is_err() {
            return;
        }
    }
}

/// The next request, or `None` when the connection ends (or the request is malformed).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let line = line.trim_end().to_owned();
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    Some(Request { line, path, body })
}
