//! [`ServedDispatcher`]: the dispatcher a server serves, swappable while it serves.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rmcp::service::{Peer, RoleServer};

pub(super) use rmcp;

use crate::dispatch::Dispatcher;

use super::wire::mcp_tool;

/// The dispatcher a [`GuardedMcpServer`](super::GuardedMcpServer) serves and the tools it lists, shared by
/// the servers of every connection made from it
/// ([`GuardedMcpServer::for_new_connection`](super::GuardedMcpServer::for_new_connection)) and replaceable
/// while they serve: a gateway whose upstream changed its tools builds a new dispatcher and
/// [`replace`](Self::replace)s the old.
///
/// A call is served to its end by the dispatcher it arrived at; later calls and lists see the new one.
#[derive(Clone)]
pub struct ServedDispatcher {
    inner: Arc<ServedInner>,
}

pub(super) struct ServedInner {
    current: RwLock<Arc<Served>>,
    /// The clients connected through servers of this value, told when the tools change.
    peers: Mutex<Vec<Peer<RoleServer>>>,
}

/// One generation of what is served.
pub(super) struct Served {
    pub(super) dispatcher: Arc<Dispatcher>,
    pub(super) tools: Arc<[rmcp::model::Tool]>,
}

impl ServedDispatcher {
    /// Serves `dispatcher`, listing the tools it offers ([`Dispatcher::offered_tools`]).
    pub fn new(dispatcher: Arc<Dispatcher>) -> Self {
        let tools = offered_mcp_tools(&dispatcher);
        Self::with_tools(dispatcher, tools)
    }

    /// Serves `dispatcher`, listing `tools`: definitions its host made for MCP (an upstream's own, for
    /// instance), each of which the dispatcher must offer under the same name. A listed tool the dispatcher
    /// does not offer is dropped from the list rather than listed and refused.
    pub fn with_tools(dispatcher: Arc<Dispatcher>, tools: Vec<rmcp::model::Tool>) -> Self {
        let served = Served::new(dispatcher, tools);
        ServedDispatcher {
            inner: Arc::new(ServedInner { current: RwLock::new(Arc::new(served)), peers: Mutex::default() }),
        }
    }

    /// Serves `dispatcher` listing `tools` (as in [`with_tools`](Self::with_tools)) from now on, and sends
    /// `notifications/tools/list_changed` to every client connected through this value.
    pub async fn replace(&self, dispatcher: Arc<Dispatcher>, tools: Vec<rmcp::model::Tool>) {
        let served = Arc::new(Served::new(dispatcher, tools));
        *self.inner.current.write().unwrap_or_else(PoisonError::into_inner) = served;
        let peers = self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for peer in peers.iter().filter(|peer| !peer.is_transport_closed()) {
            if let Err(error) = peer.notify_tool_list_changed().await {
                tracing::debug!(target: "agent_airlock", %error, "a client was not told the tools changed");
            }
        }
        self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner).retain(|peer| !peer.is_transport_closed());
    }

    /// The dispatcher served now.
    pub fn dispatcher(&self) -> Arc<Dispatcher> {
        Arc::clone(&self.current().dispatcher)
    }

    /// The names of the tools listed now, in list order.
    pub fn tool_names(&self) -> Vec<String> {
        self.current().tools.iter().map(|tool| tool.name.to_string()).collect()
    }

    pub(super) fn current(&self) -> Arc<Served> {
        Arc::clone(&self.inner.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub(super) fn connected(&self, peer: Peer<RoleServer>) {
        let mut peers = self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.retain(|peer| !peer.is_transport_closed());
        peers.push(peer);
    }
}

impl Served {
    pub(super) fn new(dispatcher: Arc<Dispatcher>, tools: Vec<rmcp::model::Tool>) -> Self {
        let offered: HashSet<String> =
            dispatcher.offered_tools().into_iter().map(|definition| definition.name).collect();
        let tools = tools.into_iter().filter(|tool| offered.contains(tool.name.as_ref())).collect();
        Served { dispatcher, tools }
    }
}

impl std::fmt::Debug for ServedDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedDispatcher").field("tools", &self.tool_names()).finish_non_exhaustive()
    }
}

pub(super) fn offered_mcp_tools(dispatcher: &Dispatcher) -> Vec<rmcp::model::Tool> {
    dispatcher.offered_tools().iter().map(mcp_tool).collect()
}
