//! The form posts that decide: approve and deny a request, resolve an ambiguous effect; each checks the
//! session and its CSRF token first.

use std::sync::Arc;

use agent_airlock::effect::Resolution;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::session::{Activity, Session};
use super::{Console, Shared, blocking, now, pages, refusal, see_other};
use crate::effects::{ensure_signable, ensure_signable_for};
use crate::requests::{Approval, approve_request, deny_request, find};

/// Why a form post was refused before anything was done.
pub(super) struct PostRefused {
    session: Option<Session>,
    message: &'static str,
}

impl IntoResponse for PostRefused {
    fn into_response(self) -> Response {
        refusal(StatusCode::FORBIDDEN, self.session.as_ref(), self.message)
    }
}

/// The session of a form post whose CSRF token matches it; anything else is refused.
pub(super) fn checked_post(console: &Console, headers: &HeaderMap, csrf: &str) -> Result<Session, PostRefused> {
    let Some(session) = console.sessions.find(headers, Activity::Operator) else {
        return Err(PostRefused { session: None, message: "not signed in: sign in and try again" });
    };
    if !session.csrf_matches(csrf) {
        return Err(PostRefused {
            session: Some(session),
            message: "the form's CSRF token is missing or wrong: nothing was done; reload the page and try again",
        });
    }
    Ok(session)
}

/// A decision form: its CSRF token, and for a denial the reason.
#[derive(Deserialize)]
pub(super) struct DecisionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

pub(super) async fn approve(
    State(console): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<DecisionForm>,
) -> Response {
    let session = match checked_post(&console, &headers, &form.csrf) {
        Ok(session) => session,
        Err(refused) => return refused.into_response(),
    };
    let (shared, operator, request_id) = (Arc::clone(&console), session.operator.clone(), id.clone());
    let personal = session.personal;
    let approved = blocking(move || {
        let signer = shared.attesting(&operator);
        approve_request(
            Arc::clone(&shared.ledger),
            &shared.key,
            &request_id,
            signer,
            &operator,
            shared.grant_ttl,
            |request, entry| match &entry.status {
                // Anyone who can read the console's output holds the one-time token: it is no one's own
                // credential, so it never counts as one of several distinct approvers.
                _ if !personal && request.approvals_required() > 1 => Err(format!(
                    "request `{request_id}` needs {} distinct approvers, and a sign-in with the console's one-time \
                     token does not count toward them: each approver signs in with their own password (start \
                     the console with `--operators FILE`); nothing was approved",
                    request.approvals_required()
                )),
                status if status.is_waiting() => Ok(()),
                other => Err(format!("request `{request_id}` is {}, not pending", other.label(now()))),
            },
        )
    })
    .await;
    match approved {
        Ok(Approval::Granted(resume)) => {
            let shown = serde_json::to_string_pretty(resume.as_value()).unwrap_or_default();
            Html(pages::decided(&session, &id, "approved", &shown)).into_response()
        }
        Ok(Approval::Waiting { approvers, required }) => {
            Html(pages::approving(&session, &id, &Approval::waiting_text(&approvers, required))).into_response()
        }
        Err(error) => refusal(StatusCode::CONFLICT, Some(&session), &error),
    }
}

pub(super) async fn deny(
    State(console): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<DecisionForm>,
) -> Response {
    let session = match checked_post(&console, &headers, &form.csrf) {
        Ok(session) => session,
        Err(refused) => return refused.into_response(),
    };
    let (shared, operator, request_id) = (Arc::clone(&console), session.operator.clone(), id.clone());
    let reason = Some(form.reason.trim().to_owned()).filter(|r| !r.is_empty());
    let denied = blocking(move || {
        let entry = find(&*shared.ledger, &request_id)?;
        if !entry.status.is_waiting() {
            return Err(format!("request `{request_id}` is {}, not pending", entry.status.label(now())));
        }
        let signer = shared.attesting(&operator);
        // A grant issued meanwhile (another approver's) is revoked by the denial: recorded in the gateway's
        // append-only audit file, if the console writes one, so the hosts writing it refuse the grant.
        let revocations = match &shared.resolutions_file {
            Some((path, config)) => {
                let log = config.clone().and_then(|config| crate::effects::open_audit_file(path, config));
                let log = log.map_err(|e| format!("{e}; nothing was denied"))?;
                ensure_signable_for(&log, shared.audit_signed, "revocation", "denied")?;
                Some(Arc::new(log))
            }
            None => None,
        };
        let ledger = Arc::clone(&shared.ledger);
        deny_request(ledger, &shared.key, &request_id, signer, &operator, reason.as_deref(), revocations)
    })
    .await;
    match denied {
        Ok(resume) => {
            let shown = serde_json::to_string_pretty(resume.as_value()).unwrap_or_default();
            Html(pages::decided(&session, &id, "denied", &shown)).into_response()
        }
        Err(error) => refusal(StatusCode::CONFLICT, Some(&session), &error),
    }
}

/// An effect's resolution.
#[derive(Deserialize)]
pub(super) struct ResolveForm {
    #[serde(default)]
    csrf: String,
    key: String,
    outcome: String,
}

pub(super) async fn resolve_effect(
    State(console): Shared,
    headers: HeaderMap,
    axum::Form(form): axum::Form<ResolveForm>,
) -> Response {
    let session = match checked_post(&console, &headers, &form.csrf) {
        Ok(session) => session,
        Err(refused) => return refused.into_response(),
    };
    let resolution = match form.outcome.as_str() {
        "committed" => Resolution::Committed,
        "failed" => Resolution::Failed,
        other => {
            let message = format!("unknown outcome `{other}`, expected one of `committed`, `failed`");
            return refusal(StatusCode::BAD_REQUEST, Some(&session), &message);
        }
    };
    let (shared, operator) = (Arc::clone(&console), session.operator.clone());
    let resolved = blocking(move || {
        let opened;
        let log = match &shared.resolutions_file {
            Some((path, config)) => {
                opened = config.clone().and_then(|config| crate::effects::open_audit_file(path, config));
                opened.as_ref()
            }
            None => shared.audit.as_ref(),
        };
        let log = log.map_err(|e| format!("{e}; nothing was resolved"))?;
        ensure_signable(log, shared.audit_signed)?;
        crate::effects::resolve_effect(&*shared.effects, log, &form.key, resolution, &operator, now())
    });
    match resolved.await {
        Ok(_) => see_other("/effects"),
        Err(error) => refusal(StatusCode::CONFLICT, Some(&session), &error),
    }
}
