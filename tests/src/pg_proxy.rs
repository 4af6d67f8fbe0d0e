//! A loopback TCP proxy in front of a test server's Unix socket that can cut a client's connection at
//! its `COMMIT`, so the client cannot know whether its transaction committed: the fault a network drop
//! or a server crash during `COMMIT` causes, made to happen at exactly that statement.
//!
//! The proxy reads the frontend protocol's framing (the untyped startup packets, then typed messages)
//! from the client and watches for a simple query `COMMIT` (what tokio-postgres sends to commit). Replies
//! from the server are copied through unread, until the connection is cut.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Where a connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The `COMMIT` reaches the server, which commits; its reply never reaches the client.
    AfterCommit,
    /// The connection is closed before the `COMMIT` reaches the server, which rolls back.
    BeforeCommit,
}

/// A running proxy; it stops accepting when the test process exits.
#[derive(Debug)]
pub struct CommitCutter {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    skip: usize,
    cut: Cut,
    times: usize,
}

#[derive(Debug, Default)]
struct Shared {
    /// The next cuts: how many `COMMIT`s to let through first, how to cut, and how many to cut.
    plan: Mutex<Option<Plan>>,
    /// `COMMIT`s seen so far.
    commits: AtomicUsize,
    /// Connections cut so far.
    cuts: AtomicUsize,
}

impl CommitCutter {
    /// Starts a proxy on a free loopback port, forwarding every connection to the server's `socket`.
    pub fn start(socket: &Path) -> CommitCutter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared::default());
        let (socket, accepting) = (socket.to_owned(), Arc::clone(&shared));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (socket, shared) = (socket.clone(), Arc::clone(&accepting));
                std::thread::spawn(move || relay(client, &socket, &shared));
            }
        });
        CommitCutter { addr, shared }
    }

    /// A connection string for `database` through the proxy.
    pub fn url(&self, database: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={database} sslmode=disable", self.addr.port())
    }

    /// Cuts the connections that send the `times` `COMMIT`s after the next `skip` ones (of any
    /// connection).
    pub fn arm(&self, skip: usize, cut: Cut, times: usize) {
        let plan = (times > 0).then_some(Plan { skip, cut, times });
        *self.shared.plan.lock().unwrap_or_else(PoisonError::into_inner) = plan;
    }

    /// Whether an armed cut has not happened yet.
    pub fn armed(&self) -> bool {
        self.shared.plan.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// How many `COMMIT`s clients have sent through the proxy (a cut one included).
    pub fn commits(&self) -> usize {
        self.shared.commits.load(Ordering::SeqCst)
    }

    /// How many connections were cut.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

/// The protocol codes of the untyped requests a client may send before its startup packet.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

fn relay(client: TcpStream, socket: &PathBuf, shared: &Shared) {
    let Ok(server) = UnixStream::connect(socket) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let cut = Arc::new(AtomicBool::new(false));
    let (Ok(mut from_server), Ok(mut to_client)) = (server.try_clone(), client.try_clone()) else { return };
    let replies_cut = Arc::clone(&cut);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Set before a cut `COMMIT` is forwarded: its reply is never passed on.
            if replies_cut.load(Ordering::SeqCst) || to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let (mut client, mut server) = (client, server);
    if forward(&mut client, &mut server, shared, &cut).is_err() {
        let _ = server.shutdown(Shutdown::Both);
        let _ = client.shutdown(Shutdown::Both);
    }
}

/// Copies the client's messages to the server until either side closes or the connection is cut.
fn forward(client: &mut TcpStream, server: &mut UnixStream, shared: &Shared, cut: &AtomicBool) -> std::io::Result<()> {
    loop {
        let mut len = [0u8; 4];
        client.read_exact(&mut len)?;
        let body = read_body(client, u32::from_be_bytes(len))?;
        server.write_all(&len)?;
        server.write_all(&body)?;
        let code = body.get(..4).map(|code| u32::from_be_bytes([code[0], code[1], code[2], code[3]]));
        if code != Some(SSL_REQUEST) && code != Some(GSSENC_REQUEST) {
            break;
        }
    }
    loop {
        let mut head = [0u8; 5];
        client.read_exact(&mut head)?;
        let body = read_body(client, u32::from_be_bytes([head[1], head[2], head[3], head[4]]))?;
        let is_commit = head[0] == b'Q' && body.strip_suffix(&[0]).is_some_and(|q| q.eq_ignore_ascii_case(b"commit"));
        let cutting = if is_commit { next_cut(shared) } else { None };
        if let Some(how) = cutting {
            // Before the `COMMIT` is forwarded: its reply is never passed on.
            cut.store(true, Ordering::SeqCst);
            shared.cuts.fetch_add(1, Ordering::SeqCst);
            if how == Cut::AfterCommit {
                server.write_all(&head)?;
                server.write_all(&body)?;
                // Time for the server to read the `COMMIT` and commit before the socket closes.
                std::thread::sleep(Duration::from_millis(300));
            }
            return Err(std::io::Error::other("cut at commit"));
        }
        server.write_all(&head)?;
        server.write_all(&body)?;
    }
}

/// Counts a `COMMIT` and says whether (and how) to cut its connection.
fn next_cut(shared: &Shared) -> Option<Cut> {
    shared.commits.fetch_add(1, Ordering::SeqCst);
    let mut plan = shared.plan.lock().unwrap_or_else(PoisonError::into_inner);
    let current = plan.as_mut()?;
    if current.skip > 0 {
        current.skip -= 1;
        return None;
    }
    let how = current.cut;
    current.times -= 1;
    if current.times == 0 {
        *plan = None;
    }
    Some(how)
}

/// The rest of a message whose length field (which counts itself) was `len`.
fn read_body(client: &mut TcpStream, len: u32) -> std::io::Result<Vec<u8>> {
    let len = usize::try_from(len).unwrap_or(0).saturating_sub(4);
    let mut body = vec![0u8; len];
    client.read_exact(&mut body)?;
    Ok(body)
}
