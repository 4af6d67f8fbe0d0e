//! Asking the client's human through MCP form elicitation: the approver, one waiting elicitation per tool,
//! the prompt and its schema, and the answer read as a decision.

use std::collections::HashSet;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, Either, select};
use rmcp::ServiceError;
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, MetaObject, RequestMetaObject, ServerNotification, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RoleServer};
use serde_json::Value;

pub(super) use rmcp;

use crate::approval::display::DisplayError;
use crate::approval::{ApprovalRequest, Approver, Decision};

use super::{APPROVAL_META_KEY, BOUND_APPROVAL_META_KEY};

/// What the model is told when its client cancelled the call while it waited for approval.
pub(super) const CANCELLED: &str = "the client cancelled the call before it was approved";

/// Asks the human behind one MCP client, through form elicitation on the connection of the request being
/// served, and stops waiting when that request is cancelled.
pub(super) struct ElicitationApprover {
    /// The request being served: its peer to ask, its cancellation to heed.
    pub(super) context: RequestContext<RoleServer>,
    pub(super) timeout: Duration,
    pub(super) eliciting: Arc<Mutex<HashSet<String>>>,
}

impl Approver for ElicitationApprover {
    fn review(&self, request: ApprovalRequest) -> BoxFuture<'static, Decision> {
        self.ask(request, None)
    }
}

impl ElicitationApprover {
    /// Asks about `request`; a sealed interrupt request, if any, goes along in `_meta`.
    pub(super) fn ask(&self, request: ApprovalRequest, sealed: Option<&Value>) -> BoxFuture<'static, Decision> {
        let unavailable = |reason: String| -> BoxFuture<'static, Decision> {
            Box::pin(std::future::ready(Decision::Unavailable { reason }))
        };
        let message = match approval_message(&request) {
            Ok(message) => message,
            Err(error) => return unavailable(format!("{error}, so no human was asked")),
        };
        let Some(slot) = ElicitationSlot::take(&self.eliciting, &request.tool) else {
            return unavailable(format!(
                "another approval request for `{}` is already waiting for an answer on this connection; retry \
                 once it is answered",
                request.tool
            ));
        };
        let mut meta = approval_meta(&request);
        if let Some(sealed) = sealed {
            meta.0.insert(BOUND_APPROVAL_META_KEY.to_owned(), sealed.clone());
        }
        let peer = self.context.peer.clone();
        let cancelled = self.context.ct.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let _slot = slot;
            let params = ElicitRequestParams::FormElicitationParams {
                meta: Some(meta),
                message,
                requested_schema: approval_schema(),
            };
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let handle = match peer.send_request_with_option(request, PeerRequestOptions::with_timeout(timeout)).await {
                Ok(handle) => handle,
                Err(error) => {
                    tracing::warn!(target: "agent_airlock", %error, "approval elicitation not sent");
                    return Decision::Unavailable { reason: "the approval request could not be delivered".into() };
                }
            };
            let elicitation_id = handle.id.clone();
            // Cancellation first: once the call is cancelled, no answer, however timely, lets it run.
            let answer = match select(pin!(cancelled.cancelled()), pin!(handle.await_response())).await {
                Either::Left(((), _)) => {
                    let withdraw = CancelledNotification::new(CancelledNotificationParam::new(
                        Some(elicitation_id),
                        Some(CANCELLED.to_owned()),
                    ));
                    let _ = peer.send_notification(ServerNotification::CancelledNotification(withdraw)).await;
                    return Decision::Unavailable { reason: CANCELLED.into() };
                }
                Either::Right((answer, _)) => answer,
            };
            if cancelled.is_cancelled() {
                return Decision::Unavailable { reason: CANCELLED.into() };
            }
            match answer {
                Ok(ClientResult::ElicitResult(answer)) => decision_of(answer),
                Ok(_) => Decision::Unavailable { reason: "the client did not answer the approval request".into() },
                Err(ServiceError::Timeout { .. }) => Decision::Unavailable {
                    reason: format!("no answer to the approval request within {} s", timeout.as_secs()),
                },
                Err(error) => {
                    tracing::warn!(target: "agent_airlock", %error, "approval elicitation failed");
                    Decision::Unavailable { reason: "the approval request could not be delivered".into() }
                }
            }
        })
    }
}

/// One tool's approval elicitation waiting on a connection; the tool is free again when this drops.
pub(super) struct ElicitationSlot {
    eliciting: Arc<Mutex<HashSet<String>>>,
    tool: String,
}

impl ElicitationSlot {
    /// The slot for `tool`, unless an elicitation for it is already waiting.
    pub(super) fn take(eliciting: &Arc<Mutex<HashSet<String>>>, tool: &str) -> Option<Self> {
        let fresh = eliciting.lock().unwrap_or_else(PoisonError::into_inner).insert(tool.to_owned());
        fresh.then(|| ElicitationSlot { eliciting: Arc::clone(eliciting), tool: tool.to_owned() })
    }
}

impl Drop for ElicitationSlot {
    fn drop(&mut self) {
        self.eliciting.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.tool);
    }
}

/// The human's answer. Only an accepted form with `approve` ticked approves; anything else is a no.
pub(super) fn decision_of(answer: ElicitResult) -> Decision {
    match answer.action {
        ElicitationAction::Accept => {
            let content = answer.content.unwrap_or(Value::Null);
            if content.get("approve") == Some(&Value::Bool(true)) {
                Decision::Approve
            } else {
                let note = content
                    .get("note")
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|note| !note.is_empty())
                    .map(str::to_owned);
                Decision::Deny { reason: note.or_else(|| Some("approval was not given".into())) }
            }
        }
        ElicitationAction::Decline => Decision::Deny { reason: None },
        // Cancel, and any action a later protocol adds: not a yes.
        _ => Decision::Deny { reason: Some("the approval request was dismissed".into()) },
    }
}

/// The prompt: the call in full (see [`crate::approval::display`]), or an error if it cannot be shown whole.
pub(super) fn approval_message(request: &ApprovalRequest) -> Result<String, DisplayError> {
    Ok(format!("Allow this call to run once, exactly as shown?\n{}", request.render()?))
}

pub(super) fn approval_meta(request: &ApprovalRequest) -> RequestMetaObject {
    let mut meta = MetaObject::new();
    if let Ok(value) = serde_json::to_value(request) {
        meta.insert(APPROVAL_META_KEY.to_owned(), value);
    }
    RequestMetaObject(meta)
}

pub(super) fn approval_schema() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool_property("approve", |b| {
            b.title("Approve").description("Run this one call with exactly these arguments")
        })
        .string_property("note", |s| {
            s.title("Note").description("Optional: why, shown to the agent if you do not approve")
        })
        .build_unchecked()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let mut result = ElicitResult::new(action);
        result.content = content;
        result
    }

    #[test]
    fn only_a_ticked_approve_approves() {
        assert_eq!(decision_of(answer(ElicitationAction::Accept, Some(json!({"approve": true})))), Decision::Approve);
        for content in [
            None,
            Some(json!({})),
            Some(json!({"approve": "true"})),
            Some(json!({"approve": 1})),
            Some(json!({"approve": false, "note": "  "})),
        ] {
            assert_eq!(
                decision_of(answer(ElicitationAction::Accept, content)),
                Decision::Deny { reason: Some("approval was not given".into()) }
            );
        }
        assert_eq!(
            decision_of(answer(ElicitationAction::Accept, Some(json!({"approve": false, "note": "not that file"})))),
            Decision::Deny { reason: Some("not that file".into()) }
        );
        assert_eq!(decision_of(answer(ElicitationAction::Decline, None)), Decision::Deny { reason: None });
        assert!(matches!(
            decision_of(answer(ElicitationAction::Cancel, Some(json!({"approve": true})))),
            Decision::Deny { .. }
        ));
    }
}
