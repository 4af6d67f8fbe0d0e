//! The console's HTML, rendered on the server. Every value from the database goes through [`h`]: first
//! the approval display's escaping (control, bidirectional and invisible characters made visible, so no
//! value can display as another), then HTML escaping, so no value can become markup.

use std::fmt::Write as _;
use std::time::Duration;

use agent_airlock::approval::display::{escape, is_hidden_char};
use agent_airlock::effect::EffectRecord;
use agent_airlock::ledger::{RequestEntry, RequestStatus};

use super::session::Session;
use crate::output::when;
use crate::requests::{Sealed, call_site, decision_text, render_request};

/// `text` for an HTML text node or a quoted attribute.
pub(super) fn h(text: &str) -> String {
    html(&escape(text))
}

/// `text` already shown as the approval display shows it (its backslashes are its own, not to be doubled
/// again) for an HTML text node; a hidden character that got in anyway is still made visible.
fn h_shown(text: &str) -> String {
    let mut visible = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden_char(c) {
            let _ = write!(visible, "\\u{{{:04X}}}", u32::from(c));
        } else {
            visible.push(c);
        }
    }
    html(&visible)
}

fn html(shown: &str) -> String {
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Multi-line `text` for a `<pre>`: each line as [`h`] shows it, the line breaks kept.
pub(super) fn h_lines(text: &str) -> String {
    text.lines().map(h).collect::<Vec<_>>().join("\n")
}

/// A rendered call for a `<pre>`: the same characters as `airlock requests show` prints, HTML-escaped.
fn h_call(text: &str) -> String {
    text.lines().map(h_shown).collect::<Vec<_>>().join("\n")
}

/// `text` for a URL path segment (request ids are hex, but the page never trusts that).
fn url_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A whole page: the navigation (with the operator and a sign-out form when signed in) around `body`.
pub(super) fn page(title: &str, session: Option<&Session>, body: &str) -> String {
    let nav = match session {
        Some(session) => format!(
            r#"<nav><a href="/">Pending</a> <a href="/decisions">Decisions</a> <a href="/effects">Effects</a> <a href="/audit">Audit log</a>
<form method="post" action="/logout" class="signout">{csrf}<span id="operator">{operator}</span> <button>Sign out</button></form></nav>"#,
            csrf = csrf_field(session),
            operator = h(&session.operator),
        ),
        None => String::new(),
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · airlock console</title><link rel="stylesheet" href="/assets/console.css"></head>
<body><header><strong>airlock console</strong>{nav}</header><main><h1>{title}</h1>
{body}</main><script src="/assets/console.js"></script></body></html>
"#,
        title = h(title),
    )
}

/// The hidden field every form of a session carries.
pub(super) fn csrf_field(session: &Session) -> String {
    format!(r#"<input type="hidden" name="csrf" value="{}">"#, h(&session.csrf))
}

/// The sign-in form; `login_nonce` is also in the sign-in cookie.
pub(super) fn login(asks_for_name: bool, login_nonce: &str, error: Option<&str>) -> String {
    let error = error.map(|e| format!(r#"<p class="error" role="alert">{}</p>"#, h(e))).unwrap_or_default();
    let fields = if asks_for_name {
        r#"<label>Operator <input name="name" autocomplete="username" required></label>
<label>Password <input name="secret" type="password" autocomplete="current-password" required></label>"#
    } else {
        r#"<input type="hidden" name="name" value="">
<label>One-time token (printed when the console started) <input name="secret" type="password" autocomplete="off" required></label>"#
    };
    page(
        "Sign in",
        None,
        &format!(
            r#"{error}<form method="post" action="/login" class="login">
<input type="hidden" name="nonce" value="{nonce}">{fields}
<button>Sign in</button></form>"#,
            nonce = h(login_nonce),
        ),
    )
}

/// A pending request as listed.
pub(super) struct Listed {
    pub(super) entry: RequestEntry,
    pub(super) sealed: Sealed,
}

/// The rows of the pending table (also served alone, for the page's live refresh).
pub(super) fn pending_rows(listed: &[Listed], now: Duration) -> String {
    if listed.is_empty() {
        return r#"<tr><td colspan="7" class="empty">No request is waiting.</td></tr>"#.to_owned();
    }
    let mut rows = String::new();
    for item in listed {
        let id = &item.entry.request.request_id;
        let age = when(now, item.entry.request.requested_at);
        let link = format!(r#"<a href="/requests/{}">{}</a>"#, url_segment(id), h(short(id)));
        let _ = match &item.sealed {
            Sealed::Verified(request) => writeln!(
                rows,
                r#"<tr data-request="{rid}"><td>{link}</td><td class="tool">{tool}</td><td>{rule}</td><td>{reason}</td><td>{thread}</td><td>{age}</td><td>{expiry}</td></tr>"#,
                rid = h(id),
                tool = h(request.tool()),
                rule = h(request.rule()),
                reason = h(request.reason()),
                thread = h(&request.call().thread_id),
                expiry = request.expires_at().map_or_else(|| "never".to_owned(), |at| until(now, at)),
            ),
            Sealed::Tampered(why) => writeln!(
                rows,
                r#"<tr data-request="{rid}" class="tampered"><td>{link}</td><td colspan="6"><strong>TAMPERED</strong>: {why} (not shown, cannot be approved)</td></tr>"#,
                rid = h(id),
                why = h(why),
            ),
            Sealed::Unverified => writeln!(
                rows,
                r#"<tr data-request="{rid}"><td>{link}</td><td colspan="6">UNVERIFIED (no key)</td></tr>"#,
                rid = h(id),
            ),
        };
    }
    rows
}

/// The pending page: the table, refreshed in place by the page's script.
pub(super) fn pending(session: &Session, listed: &[Listed], now: Duration) -> String {
    page(
        "Pending requests",
        Some(session),
        &format!(
            r#"<p class="live">This list refreshes itself every two seconds.</p>
<table class="requests"><thead><tr><th>Request</th><th>Tool</th><th>Rule</th><th>Reason</th><th>Thread</th><th>Age</th><th>Expires</th></tr></thead>
<tbody id="pending-rows">{rows}</tbody></table>"#,
            rows = pending_rows(listed, now),
        ),
    )
}

/// One request: its sealed call in full if the seal verifies, with the forms to decide it while pending.
pub(super) fn request(session: &Session, item: &Listed, now: Duration) -> String {
    let entry = &item.entry;
    let id = &entry.request.request_id;
    let mut body = format!(
        r#"<dl><dt>Request</dt><dd id="request-id">{id}</dd><dt>Status</dt><dd id="status">{status}</dd>"#,
        id = h(id),
        status = h(entry.status.label(now)),
    );
    if let Some(decision) = decision_text(&entry.status) {
        // Already escaped for display; escaped again for HTML.
        let _ = write!(body, r#"<dt>Decision</dt><dd id="decision">{}</dd>"#, h(&decision));
    }
    match &item.sealed {
        Sealed::Verified(request) => {
            let _ = write!(
                body,
                r#"<dt>Seal</dt><dd id="seal" class="verified">verified (key <code>{key}</code>)</dd><dt>Call</dt><dd>{call}</dd><dt>Requested</dt><dd>{age}</dd><dt>Expires</dt><dd>{expiry}</dd><dt>Approvers</dt><dd id="approvals">{approvers}</dd></dl>"#,
                key = h(request.key_id()),
                approvers = match request.approvals_required() {
                    1 => "one".to_owned(),
                    n => format!("{n} distinct people must approve"),
                },
                call = h(&call_site(request)),
                age = when(now, request.requested_at()),
                expiry = request.expires_at().map_or_else(|| "never".to_owned(), |at| until(now, at)),
            );
            // Only a call shown exactly and whole can be approved: otherwise there is no Approve button (and
            // the approval itself refuses it too).
            let shown = match render_request(request) {
                Ok(text) => {
                    let _ = write!(body, r#"<pre id="sealed-call">{}</pre>"#, h_call(&text));
                    true
                }
                Err(error) => {
                    let _ = write!(body, r#"<p class="error" id="not-approvable">{}</p>"#, h(&error));
                    false
                }
            };
            if entry.status.is_waiting() {
                let seg = url_segment(id);
                let csrf = csrf_field(session);
                body.push_str(r#"<div class="decide">"#);
                if shown {
                    let _ = writeln!(
                        body,
                        r#"<form method="post" action="/requests/{seg}/approve">{csrf}<button class="approve">Approve</button></form>"#
                    );
                }
                let _ = write!(
                    body,
                    r#"<form method="post" action="/requests/{seg}/deny">{csrf}<label>Reason (the model is told) <input name="reason" maxlength="500"></label> <button class="deny">Deny</button></form></div>"#
                );
            }
        }
        Sealed::Tampered(why) => {
            let _ = write!(
                body,
                r#"<dt>Seal</dt><dd id="seal" class="tampered"><strong>TAMPERED</strong>: {why}</dd></dl>
<p class="error">The record was altered in storage, or sealed under another key: its tool, reason and arguments are not shown, and it cannot be approved.</p>"#,
                why = h(why),
            );
        }
        Sealed::Unverified => body.push_str(r#"<dt>Seal</dt><dd id="seal">UNVERIFIED</dd></dl>"#),
    }
    page(&format!("Request {}", short(id)), Some(session), &body)
}

/// After a decision: what was decided and the resume value the host resumes the call with.
pub(super) fn decided(session: &Session, request_id: &str, what: &str, resume: &str) -> String {
    page(
        what,
        Some(session),
        &format!(
            r#"<p id="outcome">Request <a href="/requests/{seg}">{id}</a>: {what} by {operator}.</p>
<p>The host resumes the call with this value (hosts that watch the ledger pick it up themselves):</p>
<pre id="resume">{resume}</pre><p><a href="/">Back to the pending requests</a></p>"#,
            seg = url_segment(request_id),
            id = h(request_id),
            what = h(what),
            operator = h(&session.operator),
            resume = h_lines(resume),
        ),
    )
}

/// An approval recorded for a request that needs more distinct approvers.
pub(super) fn approving(session: &Session, request_id: &str, progress: &str) -> String {
    page(
        "approval recorded",
        Some(session),
        &format!(
            r#"<p id="outcome">Request <a href="/requests/{seg}">{id}</a>: {progress}.</p>
<p>The call runs once the last approver needed approves; a single denial ends the request.</p><p><a href="/">Back to the pending requests</a></p>"#,
            seg = url_segment(request_id),
            id = h(request_id),
            progress = h(progress),
        ),
    )
}

/// A refusal (wrong CSRF token, a tampered request, a failed decision) as a page.
pub(super) fn refused(session: Option<&Session>, message: &str) -> String {
    page("Refused", session, &format!(r#"<p class="error" role="alert" id="refusal">{}</p>"#, h(message)))
}

/// Decided requests, most recent first.
pub(super) fn decisions(session: &Session, entries: &[RequestEntry], now: Duration) -> String {
    let mut rows = String::new();
    for entry in entries {
        let id = &entry.request.request_id;
        let _ = writeln!(
            rows,
            r#"<tr><td><a href="/requests/{seg}">{short}</a></td><td>{tool}</td><td>{status}</td><td>{decision}</td><td>{when}</td></tr>"#,
            seg = url_segment(id),
            short = h(short(id)),
            // The ledger's copy of the tool name; the request page shows the sealed one.
            tool = h(&entry.request.tool),
            status = h(entry.status.label(now)),
            decision = h(&decision_text(&entry.status).unwrap_or_default()),
            when = decided_at(&entry.status).map_or_else(String::new, |at| when(now, at)),
        );
    }
    if rows.is_empty() {
        rows = r#"<tr><td colspan="5" class="empty">Nothing decided yet.</td></tr>"#.to_owned();
    }
    page(
        "Recent decisions",
        Some(session),
        &format!(
            r#"<table><thead><tr><th>Request</th><th>Tool</th><th>Status</th><th>Decision</th><th>When</th></tr></thead><tbody>{rows}</tbody></table>"#
        ),
    )
}

/// When a request was decided (or its grant spent).
pub(super) fn decided_at(status: &RequestStatus) -> Option<Duration> {
    match status {
        RequestStatus::Pending | RequestStatus::Approving { .. } => None,
        RequestStatus::Granted(grant) => Some(grant.granted_at),
        RequestStatus::Spent(spent) => Some(spent.spent_at),
        RequestStatus::Denied(denial) => Some(denial.denied_at),
    }
}

/// Effects whose outcome is unknown, each with the two answers an operator can give.
pub(super) fn effects(session: &Session, records: &[EffectRecord], now: Duration) -> String {
    let mut rows = String::new();
    for record in records {
        let _ = writeln!(
            rows,
            r#"<tr><td><code>{key}</code></td><td>{attempt}</td><td>{since}</td><td><form method="post" action="/effects/resolve">{csrf}<input type="hidden" name="key" value="{key}"><button name="outcome" value="committed">It happened</button> <button name="outcome" value="failed">It did not happen</button></form></td></tr>"#,
            key = h(&record.key),
            attempt = record.attempt,
            since = when(now, record.updated_at),
            csrf = csrf_field(session),
        );
    }
    if rows.is_empty() {
        rows = r#"<tr><td colspan="4" class="empty">No effect is waiting for resolution.</td></tr>"#.to_owned();
    }
    page(
        "Ambiguous effects",
        Some(session),
        &format!(
            r#"<p>A call that may or may not have had its effect (it was cut short). Say what really happened: a committed effect makes later calls duplicates; a failed one lets a retry run.</p>
<table><thead><tr><th>Effect key</th><th>Attempt</th><th>Last change</th><th>Resolve</th></tr></thead><tbody>{rows}</tbody></table>"#
        ),
    )
}

/// The audit log's state: the verification report, or why it fails.
pub(super) fn audit(session: &Session, status: &Result<String, String>) -> String {
    let body = match status {
        Ok(report) => format!(r#"<p id="audit-status" class="verified">{}</p>"#, h(report)),
        Err(error) => format!(r#"<p id="audit-status" class="error">{}</p>"#, h(error)),
    };
    page("Audit log", Some(session), &body)
}

/// The first characters of an id, for tables.
fn short(id: &str) -> &str {
    id.char_indices().nth(12).map_or(id, |(end, _)| &id[..end])
}

/// When `at` is or was, for an expiry: RFC 3339 in UTC and how far ahead, or that it has passed and when.
fn until(now: Duration, at: Duration) -> String {
    if at <= now { format!("expired {}", when(now, at)) } else { when(now, at) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_cannot_become_markup_or_hide_characters() {
        assert_eq!(h(r#"<script>"x"&'y'</script>"#), "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;");
        // A right-to-left override is shown, not obeyed.
        assert!(!h("abc\u{202e}def").contains('\u{202e}'));
        // Line breaks survive only where a `<pre>` keeps them on purpose.
        assert!(!h("a\nb").contains('\n'));
        assert_eq!(h_lines("<a>\n\"b\""), "&lt;a&gt;\n&quot;b&quot;");
        // A rendered call keeps its own backslashes (as the CLI prints it); a stray hidden one is shown.
        assert_eq!(h_call("\"a\\\"b\"\n\u{202E}"), "&quot;a\\&quot;b&quot;\n\\u{202E}");
    }

    #[test]
    fn ids_are_percent_encoded_in_links() {
        assert_eq!(url_segment("ab/../c d"), "ab%2F..%2Fc%20d");
    }
}
