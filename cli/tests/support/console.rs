//! A running `airlock console` for the console tests, on a database file shared in multi-process mode.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use agent_airlock::ledger::{ProcessSharing, RedbOpenOptions, open_database};

use serde_json::{Value, json};

use super::SECRET;

/// The database file opened as every process sharing it must: in multi-process mode.
pub(crate) fn shared_database(db: &Path) -> Arc<redb::Database> {
    let options = RedbOpenOptions::default().sharing(ProcessSharing::MultiProcess);
    Arc::new(open_database(db, &options).unwrap())
}

/// A running `airlock console`, stopped when dropped.
pub(crate) struct Console {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    /// The one-time sign-in token, when started with `--operator`.
    pub(crate) token: Option<String>,
}

impl Console {
    /// Starts the console on a free loopback port with `args` after `console`, and waits until it serves.
    pub(crate) fn start(db: &Path, args: &[&str]) -> Console {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .arg("--db")
            .arg(db)
            .arg("--multi-process")
            .args(["console", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("AIRLOCK_APPROVAL_KEY", SECRET)
            .env_remove("AIRLOCK_OPERATOR")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut url = None;
        let mut token = None;
        while let Some(Ok(line)) = lines.next() {
            if let Some(rest) = line.strip_prefix("airlock console: http://") {
                url = Some(format!("http://{}", rest.trim_end_matches('/')));
                if !args.contains(&"--operator") {
                    break;
                }
            } else if let Some(rest) = line.strip_prefix("airlock console: sign in with this one-time token: ") {
                token = Some(rest.to_owned());
                break;
            }
        }
        let Some(url) = url else {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            panic!("the console did not start: {stderr}");
        };
        Console { child, url, token }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Rewrites a stored request's sealed value, as someone who can write the file but has no key would: its
/// reason and amount now say something harmless, and its seal no longer verifies.
pub(crate) fn tamper(database: &redb::Database, request_id: &str) {
    const REQUESTS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("airlock_approval_requests");
    let txn = database.begin_write().unwrap();
    {
        let mut table = txn.open_table(REQUESTS).unwrap();
        let mut record: Value =
            serde_json::from_slice(redb::ReadableTable::get(&table, request_id).unwrap().unwrap().value()).unwrap();
        record["interrupt"]["airlock_approval"]["reason"] = json!("harmless read");
        record["interrupt"]["airlock_approval"]["arguments"]["amount"] = json!(1);
        table.insert(request_id, serde_json::to_vec(&record).unwrap().as_slice()).unwrap();
    }
    txn.commit().unwrap();
}
