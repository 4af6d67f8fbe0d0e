//! A running `airlock console` for the console tests, on a database file shared in multi-process mode.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use agent_airlock::store::{ProcessSharing, RedbOpenOptions, open_database};

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use reqwest::header::HeaderMap;
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

    /// Stops the console and returns what it wrote on stderr.
    pub(crate) fn stop_and_read_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        stderr
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

/// A browser without a screen: keeps cookies, follows no redirects (the tests look at them).
pub(crate) struct Visitor {
    /// The HTTP client (no redirects followed).
    pub(crate) client: Client,
    base: String,
    /// The cookies the console set, by name.
    pub(crate) cookies: HashMap<String, String>,
}

impl Visitor {
    pub(crate) fn new(console: &Console) -> Visitor {
        let client = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Visitor { client, base: console.url.clone(), cookies: HashMap::new() }
    }

    fn cookie_header(&self) -> String {
        self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }

    fn keep_cookies(&mut self, response: &Response) {
        for value in response.headers().get_all(reqwest::header::SET_COOKIE) {
            let pair = value.to_str().unwrap().split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    pub(crate) fn get(&mut self, path: &str) -> (StatusCode, String) {
        let response =
            self.client.get(format!("{}{path}", self.base)).header("cookie", self.cookie_header()).send().unwrap();
        self.keep_cookies(&response);
        let status = response.status();
        (status, response.text().unwrap())
    }

    pub(crate) fn post(&mut self, path: &str, form: &[(&str, &str)]) -> (StatusCode, String, Option<String>) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .form(form)
            .send()
            .unwrap();
        self.keep_cookies(&response);
        let status = response.status();
        let location = response.headers().get("location").map(|l| l.to_str().unwrap().to_owned());
        (status, response.text().unwrap(), location)
    }

    /// Signs in through the form; returns the status of the form's answer.
    pub(crate) fn sign_in(&mut self, name: &str, secret: &str) -> StatusCode {
        self.sign_in_answer(name, secret).0
    }

    /// Signs in through the form; returns the form's answer: its status, headers and page.
    pub(crate) fn sign_in_answer(&mut self, name: &str, secret: &str) -> (StatusCode, HeaderMap, String) {
        self.sign_in_with(name, secret, &HeaderMap::new())
    }

    /// Signs in through the form, posted with `extra` headers; returns the form's answer.
    pub(crate) fn sign_in_with(
        &mut self,
        name: &str,
        secret: &str,
        extra: &HeaderMap,
    ) -> (StatusCode, HeaderMap, String) {
        let (status, page) = self.get("/login");
        assert_eq!(status, StatusCode::OK);
        let nonce = hidden(&page, "nonce");
        let response = self
            .client
            .post(format!("{}/login", self.base))
            .header("cookie", self.cookie_header())
            .headers(extra.clone())
            .form(&[("name", name), ("secret", secret), ("nonce", &nonce)])
            .send()
            .unwrap();
        self.keep_cookies(&response);
        let (status, headers) = (response.status(), response.headers().clone());
        if status == StatusCode::SEE_OTHER {
            assert_eq!(headers.get("location").and_then(|l| l.to_str().ok()), Some("/"));
        }
        (status, headers, response.text().unwrap())
    }
}

/// The value of the first hidden field `name` in a page.
pub(crate) fn hidden(page: &str, name: &str) -> String {
    let marker = format!(r#"name="{name}" value=""#);
    let start = page.find(&marker).unwrap_or_else(|| panic!("no field `{name}` in {page}")) + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

/// The text of the element with `id`, HTML entities decoded.
pub(crate) fn element_text(page: &str, id: &str) -> String {
    let marker = format!(r#"id="{id}">"#);
    let start = page.find(&marker).unwrap_or_else(|| panic!("no `{id}` in {page}")) + marker.len();
    let end = start + page[start..].find("</").unwrap();
    page[start..end]
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
