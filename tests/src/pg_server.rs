//! A throwaway PostgreSQL server for tests, from the installed server binaries: `initdb` into a temporary
//! directory, `pg_ctl start` listening only on a Unix socket in that directory, stopped and removed when
//! dropped. As root, the server runs as the `postgres` user (PostgreSQL refuses to run as root).
//!
//! [`shared`] starts one server per test process and hands each test its own database
//! ([`PgServer::fresh_database`]). A watchdog process stops the server and removes its directory when the
//! test process exits, however it exits (statics are never dropped).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What to install when the binaries are missing.
const INSTALL_HINT: &str = "PostgreSQL server binaries (`initdb`, `pg_ctl`, `postgres`, `psql`) not found on PATH or in /usr/lib/postgresql/*/bin: install Debian's `postgresql` package (`apt-get install postgresql`)";

/// The port in the socket's name (`.s.PGSQL.<port>`) of a server that listens only on its Unix socket.
const PORT: u16 = 5432;

/// How a server makes its commits durable.
#[derive(Debug, Clone, Copy)]
enum Commits {
    /// Neither on disk nor crash-safe: the last commits are lost if the server crashes.
    Fast,
    /// A commit survives the server's crash (not the machine's).
    CrashSafe,
    /// A commit is on disk.
    Durable,
}

/// A running throwaway server. Dropping it stops the server and removes its directory.
#[derive(Debug)]
pub struct PgServer {
    dir: Option<tempfile::TempDir>,
    socket_dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    /// How commits are made durable (see [`start_crash_safe`](Self::start_crash_safe), [`start_durable`](Self::start_durable)).
    commits: Commits,
    databases: AtomicUsize,
    /// The port: in the socket's name, and on 127.0.0.1 when [`tcp`](Self::tcp) is set.
    port: u16,
    /// Listening on 127.0.0.1 too, with TLS or without.
    tcp: Option<Tcp>,
}

/// How a server listens on 127.0.0.1 ([`PgServer::start_tcp`], [`PgServer::start_tls`]).
#[derive(Debug, Clone, Copy)]
enum Tcp {
    /// Plain TCP only (`ssl=off`).
    Plain,
    /// TLS offered (`ssl=on`) with the certificate and key written to the server's directory.
    Tls,
}

/// The server of this test process, started on first use.
pub fn shared() -> &'static PgServer {
    static SERVER: OnceLock<PgServer> = OnceLock::new();
    SERVER.get_or_init(PgServer::start)
}

/// The directory holding `initdb`, `pg_ctl` and `psql`.
fn find_bin() -> Option<PathBuf> {
    let has_all = |dir: &Path| ["initdb", "pg_ctl", "postgres", "psql"].iter().all(|bin| dir.join(bin).is_file());
    let on_path =
        std::env::var_os("PATH").map(|path| std::env::split_paths(&path).collect::<Vec<_>>()).unwrap_or_default();
    // A PATH entry may hold symlinks to the server binaries but not `psql`: prefer the real directory.
    if let Some(dir) = on_path.iter().find(|dir| dir.join("initdb").is_file()) {
        if let Ok(real) = std::fs::canonicalize(dir.join("initdb"))
            && let Some(parent) = real.parent().filter(|parent| has_all(parent))
        {
            return Some(parent.to_owned());
        }
        if has_all(dir) {
            return Some(dir.clone());
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| has_all(bin))
        .collect();
    versions.sort_by_key(|bin| {
        bin.parent()
            .and_then(Path::file_name)
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find(|line| line.starts_with("Uid:")).map(|line| line.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

impl PgServer {
    /// Starts a new server in a new temporary directory. Panics with what to install if the binaries are
    /// missing, and with the server's log if it does not start.
    pub fn start() -> PgServer {
        PgServer::start_with(Commits::Fast)
    }

    /// Like [`start`](Self::start), for tests that kill the server: a commit answers only once its WAL
    /// is written (`synchronous_commit=on`), so a committed transaction survives the server's crash. The
    /// other servers trade that away for speed (`synchronous_commit=off` loses the last commits when the
    /// server crashes). Both skip `fsync`: the machine itself never crashes in a test.
    pub fn start_crash_safe() -> PgServer {
        PgServer::start_with(Commits::CrashSafe)
    }

    /// Like [`start`](Self::start), with a deployment's settings: a commit answers once its WAL is on
    /// disk (`fsync=on`, `synchronous_commit=on`, `full_page_writes=on`). For benchmarks.
    pub fn start_durable() -> PgServer {
        PgServer::start_with(Commits::Durable)
    }

    /// Like [`start`](Self::start), also listening on 127.0.0.1 (plain TCP, `ssl=off`) on a free port
    /// ([`tcp_url`](Self::tcp_url)).
    pub fn start_tcp() -> PgServer {
        PgServer::start_listening(Commits::Fast, Some((Tcp::Plain, None)))
    }

    /// Like [`start_tcp`](Self::start_tcp), with TLS offered (`ssl=on`): the server presents
    /// `cert_pem` (its chain, PEM) and holds `key_pem` (its private key, PEM).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> PgServer {
        PgServer::start_listening(Commits::Fast, Some((Tcp::Tls, Some((cert_pem, key_pem)))))
    }

    fn start_with(commits: Commits) -> PgServer {
        PgServer::start_listening(commits, None)
    }

    fn start_listening(commits: Commits, tcp: Option<(Tcp, Option<(&str, &str)>)>) -> PgServer {
        let bin = find_bin().unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        let dir = tempfile::Builder::new().prefix("airlock-pg-").tempdir().expect("a temporary directory");
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(dir.path()), "chown the server directory");
        }
        let data = dir.path().join("data");
        let server = PgServer {
            socket_dir: dir.path().to_owned(),
            dir: Some(dir),
            bin,
            as_postgres,
            commits,
            databases: AtomicUsize::new(0),
            port: if tcp.is_some() { free_port() } else { PORT },
            tcp: tcp.map(|(tcp, _)| tcp),
        };
        if let Some((_, Some((cert_pem, key_pem)))) = tcp {
            for (name, pem) in [("server.crt", cert_pem), ("server.key", key_pem)] {
                let path = server.socket_dir.join(name);
                std::fs::write(&path, pem).expect("write the server's certificate");
                run(Command::new("chmod").arg("600").arg(&path), "chmod the server's key");
                if as_postgres {
                    run(Command::new("chown").arg("postgres:postgres").arg(&path), "chown the server's key");
                }
            }
        }
        run(
            server.command("initdb").arg("-D").arg(&data).args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ]),
            "initdb",
        );
        server.start_again();
        server.watch_parent();
        server
    }

    /// Starts the server (again, after [`kill`](Self::kill)) on the same data directory and socket, and
    /// waits until it accepts connections. Panics with the server's log if it does not start.
    pub fn start_again(&self) {
        let listen = match self.tcp {
            None => "-c listen_addresses=''".to_owned(),
            Some(Tcp::Plain) => "-c listen_addresses=127.0.0.1 -c ssl=off".to_owned(),
            Some(Tcp::Tls) => format!(
                "-c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key",
                dir = self.socket_dir.display()
            ),
        };
        let options = format!(
            "-k {} -p {} {listen} {} -c max_connections=200",
            self.socket_dir.display(),
            self.port,
            match self.commits {
                Commits::Fast => "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
                Commits::CrashSafe => "-c fsync=off -c synchronous_commit=on -c full_page_writes=off",
                Commits::Durable => "-c fsync=on -c synchronous_commit=on -c full_page_writes=on",
            },
        );
        let log = self.socket_dir.join("server.log");
        let started = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.socket_dir.join("data"))
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .stdout(Stdio::null())
            .status()
            .expect("run pg_ctl");
        if !started.success() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("the test PostgreSQL server did not start:\n{log}");
        }
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`: no checkpoint, every
    /// connection dropped), and waits until it is gone.
    pub fn kill(&self) {
        run(
            self.command("pg_ctl").arg("-D").arg(self.socket_dir.join("data")).args(["-m", "immediate", "-w", "stop"]),
            "pg_ctl stop",
        );
    }

    /// The server's Unix socket (`.s.PGSQL.<port>` in its directory).
    pub fn socket_path(&self) -> PathBuf {
        self.socket_dir.join(format!(".s.PGSQL.{}", self.port))
    }

    /// A command running `bin` of the server's installation, as the `postgres` user when we are root.
    fn command(&self, bin: &str) -> Command {
        let path = self.bin.join(bin);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    /// Stops the server and removes its directory once this process is gone, even if it is killed.
    fn watch_parent(&self) {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            stop = if self.as_postgres {
                format!("runuser -u postgres -- '{}'", self.bin.join("pg_ctl").display())
            } else {
                format!("'{}'", self.bin.join("pg_ctl").display())
            },
            data = self.socket_dir.join("data").display(),
            dir = self.socket_dir.display(),
        );
        // The watchdog outlives this process on purpose; its handle is not kept.
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    /// A connection string for `database` (over the Unix socket, as `postgres`).
    pub fn url(&self, database: &str) -> String {
        format!("host={} port={} user=postgres dbname={database}", self.socket_dir.display(), self.port)
    }

    /// A connection string for `database` over TCP to 127.0.0.1, naming the server `host` (what TLS
    /// verifies: `127.0.0.1`, or a name resolving to it such as `localhost`), without TLS settings. Panics
    /// unless the server was started by [`start_tcp`](Self::start_tcp) or [`start_tls`](Self::start_tls).
    pub fn tcp_url(&self, database: &str, host: &str) -> String {
        assert!(self.tcp.is_some(), "this server listens only on its Unix socket");
        format!("host={host} hostaddr=127.0.0.1 port={} user=postgres dbname={database}", self.port)
    }

    /// Creates a new empty database and returns its connection string.
    pub fn fresh_database(&self) -> String {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{n}");
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Starts `psql` running `sql` in `database` in the background (to hold a lock while a test runs).
    pub fn psql_in_background(&self, database: &str, sql: &str) -> std::process::Child {
        self.psql_command(database, sql).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("run psql")
    }

    /// `psql` over the server's socket running `sql` in `database`, stopping at the first error.
    fn psql_command(&self, database: &str, sql: &str) -> Command {
        let mut psql = self.command("psql");
        psql.arg("-h").arg(&self.socket_dir).args(["-p", &self.port.to_string(), "-U", "postgres", "-d", database]);
        psql.args(["-v", "ON_ERROR_STOP=1", "-tAc", sql]);
        psql
    }

    /// Runs `sql` in `database` with `psql`, stopping at the first error; returns what it printed.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let output = self.psql_command(database, sql).output().expect("run psql");
        assert!(output.status.success(), "psql `{sql}` failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.socket_dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        drop(self.dir.take());
    }
}

/// A port nothing listens on now (the kernel's pick; a race with other processes is unlikely).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|err| panic!("cannot run {what}: {err}"));
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A connection string of [`PgServer::url`]'s (or [`PgServer::fresh_database`]'s) in the form a deployment
/// passes `airlock --db`: a URL, the socket directory percent-encoded as the host.
pub fn as_url(connection: &str) -> String {
    let field = |name: &str| {
        connection
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("the connection string names `{name}`"))
            .to_owned()
    };
    format!(
        "postgresql://{}@{}:{}/{}",
        field("user"),
        field("host").replace('/', "%2F"),
        field("port"),
        field("dbname")
    )
}
