//! What reading one message costs the stdio gateway (`airlock mcp`), side by side in one build: the upstream's
//! answer to a `tools/call` read by the gateway's transport (`LineTransport`) as the answer to a call it sent
//! (read directly as a `CallToolResult`) and as an answer to no call it knows (read through rmcp's untagged
//! `ServerResult`, as every answer was before); a client's `tools/call` request read directly, and the same
//! request with its method written `tools\/call` (the same JSON string, which the transport leaves to rmcp's
//! `ClientRequest`). Each read is one line through an in-memory pipe.
//!
//! `cargo bench -p agent-airlock-benches --bench gateway_framing`

use std::hint::black_box;

use agent_airlock::integrations::mcp_gateway::LineTransport;
use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonRpcRequest, RequestId,
};
use rmcp::service::{RoleClient, RoleServer};
use rmcp::transport::Transport as _;
use tokio::io::{AsyncWriteExt as _, DuplexStream, ReadHalf, WriteHalf};

/// A short tool result, as the gateway bench's `read_note` returns one.
const ANSWER: &str = r#"{"jsonrpc":"2.0","id":ID,"result":{"content":[{"type":"text","text":"hello world!"}],"structuredContent":{"result":"hello world!"},"isError":false}}"#;
const REQUEST: &str =
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"note.txt"}}}"#;

type Ends<Role> = (LineTransport<Role, ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>, WriteHalf<DuplexStream>);

fn transport<Role: rmcp::service::ServiceRole>(peer: &'static str) -> Ends<Role> {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(ours);
    let (_their_read, their_write) = tokio::io::split(theirs);
    std::mem::forget(_their_read);
    (LineTransport::new(read, write, peer), their_write)
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let mut group = c.benchmark_group("gateway_framing");
    for (name, sent) in [("answer_read_directly", true), ("answer_read_by_rmcp", false)] {
        let (mut transport, mut upstream) = transport::<RoleClient>("upstream server");
        let mut id = 0i64;
        group.bench_function(name, |b| {
            b.iter(|| {
                runtime.block_on(async {
                    id += 1;
                    if sent {
                        let call = ClientJsonRpcMessage::Request(JsonRpcRequest::new(
                            RequestId::Number(id),
                            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                                "read_note",
                            ))),
                        ));
                        drop(transport.send(call));
                    }
                    let line = format!("{}\n", ANSWER.replace("ID", &id.to_string()));
                    upstream.write_all(line.as_bytes()).await.expect("written");
                    black_box(transport.receive().await.expect("a message"))
                })
            })
        });
    }
    for (name, request) in [
        ("request_read_directly", REQUEST.to_owned()),
        ("request_read_by_rmcp", REQUEST.replace("tools/call", "tools\\/call")),
    ] {
        let (mut transport, mut client) = transport::<RoleServer>("client");
        let line = format!("{request}\n");
        runtime.block_on(async {
            client.write_all(line.as_bytes()).await.expect("written");
            let message = transport.receive().await.expect("a message");
            let is_a_call = matches!(
                message,
                rmcp::model::JsonRpcMessage::Request(JsonRpcRequest { request: ClientRequest::CallToolRequest(_), .. })
            );
            assert!(is_a_call, "{name}: {message:?}");
        });
        group.bench_function(name, |b| {
            b.iter(|| {
                runtime.block_on(async {
                    client.write_all(line.as_bytes()).await.expect("written");
                    black_box(transport.receive().await.expect("a message"))
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
