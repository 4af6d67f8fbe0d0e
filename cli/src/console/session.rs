//! Who is signed in to the console: operators (an operators file of argon2 hashes, or one operator with a
//! one-time token printed at start), sessions held in memory behind a random cookie, and each session's
//! CSRF token, which every form carries and every POST is checked against.
//!
//! The session cookie is `HttpOnly` and `SameSite=Strict`, so a page on another site can neither read it
//! nor have the browser send it; the CSRF token is the second, independent check. The sign-in form is
//! protected by a double-submitted random value (a cookie and a hidden field that must agree), so another
//! site cannot sign the browser in under its own operator either.
//!
//! A session ends at its lifetime, or earlier when the operator has done nothing for the idle time (the
//! pending list's own refresh is not the operator doing something). Time comes from an injected clock.
//! Cookies carry `Secure` when the console is served behind TLS. Only a password is a credential of the
//! operator's own: a session signed in with the one-time token does not count toward several approvers.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_airlock::Clock;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use subtle::ConstantTimeEq as _;

/// The session cookie's name.
pub(super) const SESSION_COOKIE: &str = "airlock_session";
/// The sign-in form's double-submit cookie's name.
pub(super) const LOGIN_COOKIE: &str = "airlock_login";

/// How operators prove who they are.
pub(super) enum SignIn {
    /// Named operators with argon2 password hashes (`NAME:HASH` lines).
    Operators {
        /// Each operator's PHC hash string.
        hashes: HashMap<String, String>,
        /// A hash checked when the name is unknown, so an unknown name takes as long as a wrong password.
        decoy: String,
    },
    /// One operator, with a token printed at start that signs in once.
    OneTimeToken {
        /// The operator recorded as the approver.
        operator: String,
        /// The token, until it is used.
        token: Mutex<Option<String>>,
    },
}

impl SignIn {
    /// Reads an operators file: one `NAME:HASH` per line (from `airlock console hash-password NAME`); blank
    /// lines and lines starting with `#` are skipped.
    pub(super) fn from_operators_file(path: &Path) -> Result<SignIn, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut operators = HashMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = || format!("{}:{}", path.display(), number + 1);
            let Some((name, hash)) = line.split_once(':') else {
                return Err(format!("{}: expected `NAME:HASH`", at()));
            };
            if !valid_operator_name(name) {
                return Err(format!(
                    "{}: `{name}` is not an operator name (letters, digits, `.`, `_`, `-`, `@`)",
                    at()
                ));
            }
            PasswordHash::new(hash).map_err(|e| format!("{}: the hash of `{name}` is not a PHC string: {e}", at()))?;
            if operators.insert(name.to_owned(), hash.to_owned()).is_some() {
                return Err(format!("{}: operator `{name}` is listed twice", at()));
            }
        }
        if operators.is_empty() {
            return Err(format!("{}: no operators", path.display()));
        }
        let decoy = argon2_hash(&random_hex()?)?;
        Ok(SignIn::Operators { hashes: operators, decoy })
    }

    /// One operator, signing in once with a fresh random token (returned, to be printed).
    pub(super) fn one_time(operator: &str) -> Result<(SignIn, String), String> {
        if !valid_operator_name(operator) {
            return Err(format!("`{operator}` is not an operator name (letters, digits, `.`, `_`, `-`, `@`)"));
        }
        let token = random_hex()?;
        Ok((SignIn::OneTimeToken { operator: operator.to_owned(), token: Mutex::new(Some(token.clone())) }, token))
    }

    /// Whether a sign-in proves a credential of the operator's own (a password), rather than the one-time
    /// token printed at start.
    pub(super) fn is_personal(&self) -> bool {
        matches!(self, SignIn::Operators { .. })
    }

    /// Whether this sign-in asks for a name and a password (otherwise only the token).
    pub(super) fn asks_for_name(&self) -> bool {
        matches!(self, SignIn::Operators { .. })
    }

    /// The operator these credentials prove, if they do. A one-time token works once.
    pub(super) fn check(&self, name: &str, secret: &str) -> Option<String> {
        // No operator has an empty password (`hash-password` refuses one): nothing to check.
        if secret.trim().is_empty() {
            return None;
        }
        match self {
            SignIn::Operators { hashes, decoy } => {
                let (hash, known) = match hashes.get(name) {
                    Some(hash) => (hash.as_str(), true),
                    None => (decoy.as_str(), false),
                };
                let parsed = PasswordHash::new(hash).ok()?;
                let matches = Argon2::default().verify_password(secret.as_bytes(), &parsed).is_ok();
                (known && matches).then(|| name.to_owned())
            }
            SignIn::OneTimeToken { operator, token } => {
                let mut token = token.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let matches = token.as_deref().is_some_and(|expected| same(expected, secret.trim()));
                if matches {
                    *token = None;
                    Some(operator.clone())
                } else {
                    None
                }
            }
        }
    }
}

/// Operator names: what a person would type, nothing that could display as something else.
fn valid_operator_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// `NAME:HASH` for an operators file: an argon2id hash of `password` with a random salt.
pub(super) fn hash_password_line(name: &str, password: &str) -> Result<String, String> {
    if !valid_operator_name(name) {
        return Err(format!("`{name}` is not an operator name (letters, digits, `.`, `_`, `-`, `@`)"));
    }
    if password.trim().is_empty() {
        return Err("the password is empty (or only white space): choose one that is not".to_owned());
    }
    Ok(format!("{name}:{}", argon2_hash(password)?))
}

/// An argon2id PHC string of `password` with a random salt.
fn argon2_hash(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| format!("no randomness: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    let hash = Argon2::default().hash_password(password.as_bytes(), &salt).map_err(|e| e.to_string())?;
    Ok(hash.to_string())
}

/// A signed-in operator's session.
#[derive(Clone)]
pub(super) struct Session {
    /// Who signed in.
    pub(super) operator: String,
    /// The token every form of this session carries.
    pub(super) csrf: String,
    /// Whether the operator proved who they are with a credential of their own (a password from the
    /// operators file), not the one-time token the console printed at start (which anyone who can read
    /// its output holds). Only such a sign-in counts toward a request that needs several approvers.
    pub(super) personal: bool,
    /// When the sign-in ends, whatever is done.
    expires: Duration,
    /// The last time the operator did something (a page, a form); the live refresh does not count.
    last_seen: Duration,
}

impl Session {
    /// Whether `submitted` is this session's CSRF token (in constant time).
    pub(super) fn csrf_matches(&self, submitted: &str) -> bool {
        same(&self.csrf, submitted)
    }
}

/// How sessions are kept.
pub(super) struct SessionRules {
    /// How long a sign-in lasts at most.
    pub(super) lifetime: Duration,
    /// How long a sign-in lasts without the operator doing anything.
    pub(super) idle: Duration,
    /// Whether cookies carry `Secure` (the console is served behind TLS).
    pub(super) secure: bool,
}

/// The live sessions, by id.
pub(super) struct Sessions {
    live: Mutex<HashMap<String, Session>>,
    rules: SessionRules,
    clock: Arc<dyn Clock>,
}

/// Whether looking a session up counts as the operator doing something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Activity {
    /// A page or a form: the idle timer starts again.
    Operator,
    /// The page's own refresh: the idle timer runs on.
    Refresh,
}

impl Sessions {
    pub(super) fn new(rules: SessionRules, clock: Arc<dyn Clock>) -> Sessions {
        Sessions { live: Mutex::new(HashMap::new()), rules, clock }
    }

    /// Starts a session for `operator`; returns its id (the cookie's value).
    pub(super) fn start(&self, operator: String, personal: bool) -> Result<String, String> {
        let id = random_hex()?;
        let now = self.clock.now();
        let session = Session {
            operator,
            csrf: random_hex()?,
            personal,
            expires: now.saturating_add(self.rules.lifetime),
            last_seen: now,
        };
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.retain(|_, s| self.is_live(s, now));
        live.insert(id.clone(), session);
        Ok(id)
    }

    fn is_live(&self, session: &Session, now: Duration) -> bool {
        now < session.expires && now < session.last_seen.saturating_add(self.rules.idle)
    }

    /// The session the request's cookie names, if it is live; a session found expired or idle too long
    /// is ended.
    pub(super) fn find(&self, headers: &HeaderMap, activity: Activity) -> Option<Session> {
        let id = cookie(headers, SESSION_COOKIE)?;
        let now = self.clock.now();
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let session = live.get_mut(&id)?;
        if !self.is_live(session, now) {
            live.remove(&id);
            return None;
        }
        if activity == Activity::Operator {
            session.last_seen = now;
        }
        Some(session.clone())
    }

    /// Ends the session the request's cookie names.
    pub(super) fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, SESSION_COOKIE) {
            self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
        }
    }

    /// The `Set-Cookie` value for a session id.
    pub(super) fn cookie_for(&self, id: &str) -> String {
        self.cookie(SESSION_COOKIE, id, "/", self.rules.lifetime)
    }

    /// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, and `Secure` behind TLS. An empty value with
    /// no age clears the cookie.
    pub(super) fn cookie(&self, name: &str, value: &str, path: &str, max_age: Duration) -> String {
        let secure = if self.rules.secure { "; Secure" } else { "" };
        format!("{name}={value}; HttpOnly; SameSite=Strict; Path={path}; Max-Age={}{secure}", max_age.as_secs())
    }
}

/// The value of the cookie `name` in the request, if any.
pub(super) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// 32 random bytes as hex: session ids, CSRF tokens, the one-time token.
pub(super) fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    Ok(hex::encode(bytes))
}

/// Equality in time independent of where the strings differ.
pub(super) fn same(expected: &str, submitted: &str) -> bool {
    expected.len() == submitted.len() && bool::from(expected.as_bytes().ct_eq(submitted.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_airlock::ManualClock;

    #[test]
    fn a_hashed_password_signs_in_its_operator_only() {
        let line = hash_password_line("alice", "correct horse").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("operators");
        std::fs::write(&path, format!("# operators\n{line}\n")).unwrap();
        let sign_in = SignIn::from_operators_file(&path).unwrap();
        assert_eq!(sign_in.check("alice", "correct horse").as_deref(), Some("alice"));
        assert_eq!(sign_in.check("alice", "wrong"), None);
        assert_eq!(sign_in.check("bob", "correct horse"), None);
    }

    #[test]
    fn a_one_time_token_signs_in_once() {
        let (sign_in, token) = SignIn::one_time("alice").unwrap();
        assert_eq!(sign_in.check("", "not it"), None);
        assert_eq!(sign_in.check("", &token).as_deref(), Some("alice"));
        assert_eq!(sign_in.check("", &token), None);
    }

    #[test]
    fn bad_operators_files_are_refused_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("operators");
        std::fs::write(&path, "alice $argon2id$nope\n").unwrap();
        let err = SignIn::from_operators_file(&path).err().unwrap();
        assert!(err.ends_with(":1: expected `NAME:HASH`"), "{err}");
        std::fs::write(&path, "alice:not-a-hash\n").unwrap();
        assert!(SignIn::from_operators_file(&path).err().unwrap().contains("not a PHC string"));
    }

    #[test]
    fn an_empty_or_blank_password_is_refused() {
        for blank in ["", " ", "\t  "] {
            let err = hash_password_line("alice", blank).unwrap_err();
            assert!(err.contains("the password is empty"), "{err}");
        }
        assert!(hash_password_line("alice", " x ").is_ok());
    }

    fn sessions(secure: bool) -> (Arc<ManualClock>, Sessions) {
        let clock = Arc::new(ManualClock::new(Duration::from_secs(1_796_153_379)));
        let rules = SessionRules { lifetime: Duration::from_secs(3600), idle: Duration::from_secs(600), secure };
        (Arc::clone(&clock), Sessions::new(rules, clock))
    }

    fn with_cookie(id: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, format!("{SESSION_COOKIE}={id}").parse().unwrap());
        headers
    }

    #[test]
    fn a_session_ends_after_it_is_left_idle() {
        let (clock, sessions) = sessions(false);
        let headers = with_cookie(&sessions.start("alice".to_owned(), true).unwrap());
        // Activity within the idle time keeps it; the live refresh does not count as activity.
        clock.advance(Duration::from_secs(599));
        assert!(sessions.find(&headers, Activity::Operator).is_some());
        clock.advance(Duration::from_secs(599));
        assert!(sessions.find(&headers, Activity::Refresh).is_some());
        clock.advance(Duration::from_secs(1));
        assert!(sessions.find(&headers, Activity::Refresh).is_none(), "idle for the whole idle time");
        // Ended, not just hidden: activity afterwards does not bring it back.
        clock.set(Duration::from_secs(1_796_153_379));
        assert!(sessions.find(&headers, Activity::Operator).is_none());
    }

    #[test]
    fn a_busy_session_still_ends_at_its_lifetime() {
        let (clock, sessions) = sessions(false);
        let headers = with_cookie(&sessions.start("alice".to_owned(), true).unwrap());
        // Active every 500 s, up to 3500 s of the hour's lifetime.
        for _ in 0..7 {
            clock.advance(Duration::from_secs(500));
            assert!(sessions.find(&headers, Activity::Operator).is_some());
        }
        clock.advance(Duration::from_secs(500));
        assert!(sessions.find(&headers, Activity::Operator).is_none(), "past the lifetime");
    }

    #[test]
    fn cookies_are_secure_behind_tls_only() {
        let (_, plain) = sessions(false);
        let (_, tls) = sessions(true);
        assert!(!plain.cookie_for("abc").contains("Secure"));
        assert_eq!(
            tls.cookie_for("abc"),
            "airlock_session=abc; HttpOnly; SameSite=Strict; Path=/; Max-Age=3600; Secure"
        );
        assert!(tls.cookie(LOGIN_COOKIE, "", "/login", Duration::ZERO).ends_with("; Max-Age=0; Secure"));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, "a=1; airlock_session=abc; b=2".parse().unwrap());
        assert_eq!(cookie(&headers, SESSION_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, LOGIN_COOKIE), None);
    }
}
