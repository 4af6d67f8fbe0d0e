//! The server a gateway offers downstream: tools, resources and prompts, each through the guard.
//!
//! `tools/*` go to the [`GuardedMcpServer`]. `resources/read` and `prompts/get` go through the
//! [`SurfaceGuard`] (policy, rate limits, the upstream, masking, audit); what the policy refuses is never
//! forwarded. `resources/list` and `prompts/list` are the upstream's lists without what the policy denies;
//! `resources/templates/list` is passed whole (a template names many URIs: each is screened when it is
//! read). An entry of any of the three whose listing has tool-poisoning findings the policy does not accept
//! (`allow_findings` of its `[resources."<uri>"]` or `[prompts.<name>]` table) is left out, as a tool is.
//! Every listed entry's text (names, titles, descriptions, `_meta`; not the URI or prompt name a
//! client asks for it by) is masked as a read or get of it would be, and a listing the upstream fails is
//! answered with its error masked and cut short, as a read's or get's is. The gateway declares resources and prompts only when the upstream does; it does not relay
//! resource subscriptions or list-change notifications for them.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, PromptsCapability, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ResourcesCapability, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleClient, RoleServer};
use rmcp::{ErrorData, ServerHandler};

use super::surfaces::SurfaceGuard;
use crate::integrations::mcp::{GuardedMcpServer, request_id_text};

/// A gateway's downstream server: the guarded tools, and the upstream's resources and prompts.
pub struct GatewayServer {
    guarded: GuardedMcpServer,
    upstream: Peer<RoleClient>,
    /// What the upstream declared: resources and prompts are offered only if it serves them.
    upstream_capabilities: ServerCapabilities,
    surfaces: Arc<SurfaceGuard>,
    /// How many tool calls are being served: when the upstream goes away, the gateway lets them answer
    /// (each fails fast, its effect settled) before it ends the session.
    calls: Arc<tokio::sync::watch::Sender<usize>>,
}

/// One tool call being served; dropped, it is no longer counted.
struct Serving(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.send_modify(|calls| *calls = calls.saturating_sub(1));
    }
}

impl std::fmt::Debug for GatewayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayServer").field("guarded", &self.guarded).finish_non_exhaustive()
    }
}

impl GatewayServer {
    /// Serves `guarded`'s tools, and `upstream`'s resources and prompts through `surfaces`.
    pub fn new(guarded: GuardedMcpServer, upstream: Peer<RoleClient>, surfaces: Arc<SurfaceGuard>) -> Self {
        let upstream_capabilities = upstream.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
        let calls = Arc::new(tokio::sync::watch::Sender::new(0));
        GatewayServer { guarded, upstream, upstream_capabilities, surfaces, calls }
    }

    /// Completes once no tool call is being served (at once if none is).
    pub(crate) fn calls_finished(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut calls = self.calls.subscribe();
        async move {
            // The sender lives as long as the server: an error means it is gone, and so are its calls.
            let _ = calls.wait_for(|calls| *calls == 0).await;
        }
    }
}

impl ServerHandler for GatewayServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = self.guarded.get_info();
        if self.upstream_capabilities.resources.is_some() {
            // Subscriptions and list changes are not relayed: not declared.
            config.capabilities.resources = Some(ResourcesCapability::default());
        }
        if self.upstream_capabilities.prompts.is_some() {
            config.capabilities.prompts = Some(PromptsCapability::default());
        }
        config
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.guarded.on_initialized(context).await;
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.guarded.supported_protocol_versions()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        self.guarded.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        self.calls.send_modify(|calls| *calls += 1);
        let _serving = Serving(Arc::clone(&self.calls));
        self.guarded.call_tool(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut listed = self
            .upstream
            .list_resources(request)
            .await
            .map_err(|e| self.surfaces.listing_error("resources/list", e))?;
        listed.resources.retain(|resource| self.surfaces.lists_resource(&resource.uri));
        self.surfaces.screen_listed_resources(&mut listed);
        self.surfaces.mask_listed_resources(&mut listed);
        Ok(listed)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        // A template names many URIs: each is screened when it is read.
        let mut listed = self
            .upstream
            .list_resource_templates(request)
            .await
            .map_err(|e| self.surfaces.listing_error("resources/templates/list", e))?;
        self.surfaces.screen_listed_templates(&mut listed);
        self.surfaces.mask_listed_templates(&mut listed);
        Ok(listed)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let id = request_id_text(&context.id);
        self.surfaces.read_resource(&id, request, |request| self.upstream.read_resource_once(request)).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut listed =
            self.upstream.list_prompts(request).await.map_err(|e| self.surfaces.listing_error("prompts/list", e))?;
        listed.prompts.retain(|prompt| self.surfaces.lists_prompt(&prompt.name));
        self.surfaces.screen_listed_prompts(&mut listed);
        self.surfaces.mask_listed_prompts(&mut listed);
        Ok(listed)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let id = request_id_text(&context.id);
        self.surfaces.get_prompt(&id, request, |request| self.upstream.get_prompt_once(request)).await
    }
}
