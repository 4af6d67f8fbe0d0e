//! The `tracing` layer: one OpenTelemetry span per dispatcher `tool_call` span, and the counters, built when
//! the call's span closes from what [`CallDecision`] kept.

use std::time::SystemTime;

use opentelemetry::metrics::{Counter, Meter};
use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, Status, Tracer};
use opentelemetry::{Context, KeyValue};
use tracing::span;
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;

use super::decision::{CallDecision, CallOutcome};

/// The dispatcher's span for one tool call (`dispatch/mod.rs`), and the target of its events.
const CALL_SPAN: &str = "tool_call";
/// The MCP gateway's span for one resource read or prompt get (`integrations/mcp_gateway/surfaces.rs`).
const SURFACE_SPAN: &str = "surface_call";
const TARGET: &str = "agent_airlock";

/// A `tracing` layer that exports each decision of a [`Dispatcher`](crate::Dispatcher) as an OpenTelemetry
/// span and counts refusals, approvals and effects.
///
/// It reads the dispatcher's own `tracing` data (target `agent_airlock`): the `tool_call` span and the events
/// inside it that carry an `outcome`. From them it keeps a fixed list of fields (the tool's name, the call's
/// id, the outcome, the refusal's kind, the rule, whether a human approved, what happened to the effect), so
/// argument values, results, refusal texts and secrets are never exported: nothing reads them.
///
/// Each span is named `execute_tool {tool}` (kind internal) and carries the GenAI semantic conventions'
/// `gen_ai.operation.name` (`execute_tool`), `gen_ai.tool.name` and `gen_ai.tool.call.id`, and ours:
/// `airlock.outcome` (`executed`, `failed`, `panicked`, `refused`, `escalated`, `cancelled`),
/// `airlock.refusal.kind` (a [`RefusalKind`](crate::RefusalKind)'s serde name, e.g. `rate_limited`),
/// `airlock.rule`, `airlock.approved`, `airlock.effect` (`executed`, `replayed`, `failed`, `ambiguous`) and,
/// in observe mode, `airlock.would_refuse.kinds`. A refused, failed or panicked call has an error status
/// and `error.type`.
///
/// The MCP gateway's resource reads and prompt gets are exported the same way, each a span named
/// `{mcp.method.name} {target}` (`resources/read note`, `prompts/get summarise`) with `mcp.method.name`,
/// `jsonrpc.request.id`, the prompt's `gen_ai.prompt.name` or the resource URI's scheme only
/// (`airlock.resource.scheme`: the rest of a URI is the request's argument), and the same `airlock.*`
/// attributes.
///
/// The counters (unit `{call}`): `airlock.tool_calls` by `airlock.outcome`, `airlock.refusals` by
/// `airlock.refusal.kind` (with `airlock.enforced = false` for what observe mode would have refused),
/// `airlock.approvals`, and `airlock.effects` by `airlock.effect`; each also by `gen_ai.tool.name`.
/// `airlock.mcp_requests` counts the reads and gets by `airlock.outcome` and `mcp.method.name`, and their
/// refusals are in `airlock.refusals` by `mcp.method.name`.
///
/// [`OtlpExport`](super::OtlpExport) builds one exporting over OTLP; give [`DecisionLayer::new`] a tracer and
/// a meter of your own to export elsewhere. Install it with a filter that lets the target `agent_airlock`
/// through at level `INFO` ([`DecisionLayer::filter`]).
pub struct DecisionLayer<T> {
    tracer: T,
    counters: Counters,
}

struct Counters {
    tool_calls: Counter<u64>,
    mcp_requests: Counter<u64>,
    refusals: Counter<u64>,
    approvals: Counter<u64>,
    effects: Counter<u64>,
}

impl<T: Tracer> DecisionLayer<T> {
    /// A layer that starts its spans with `tracer` and counts with instruments made by `meter`.
    pub fn new(tracer: T, meter: &Meter) -> Self {
        let counter = |name: &'static str, description: &'static str| {
            meter.u64_counter(name).with_description(description).with_unit("{call}").build()
        };
        Self {
            tracer,
            counters: Counters {
                tool_calls: counter("airlock.tool_calls", "Tool calls decided, by outcome"),
                mcp_requests: counter("airlock.mcp_requests", "Resource reads and prompt gets decided, by outcome"),
                refusals: counter("airlock.refusals", "Tool calls refused, by the kind of refusal"),
                approvals: counter("airlock.approvals", "Tool calls a human approved"),
                effects: counter("airlock.effects", "Tool calls with an effect, by what happened to it"),
            },
        }
    }

    /// The filter the layer needs: the target `agent_airlock` at level `INFO` and above, nothing else (so a
    /// subscriber's other layers, a log at `warn` for instance, keep their own filters).
    pub fn filter() -> tracing_subscriber::filter::Targets {
        tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::INFO)
    }

    fn export(&self, decision: &CallDecision) {
        let outcome = decision.outcome();
        let tool = decision.subject();
        let builder = SpanBuilder::from_name(decision.span_name())
            .with_kind(SpanKind::Internal)
            .with_start_time(decision.start)
            .with_attributes(decision.attributes());
        // A root span: the dispatcher's caller may run under no OpenTelemetry context at all.
        let mut span = builder.start_with_context(&self.tracer, &Context::new());
        if matches!(outcome, CallOutcome::Refused | CallOutcome::Failed | CallOutcome::Panicked) {
            span.set_status(Status::error(outcome.as_str()));
        }
        span.end_with_timestamp(SystemTime::now());

        let calls = if decision.surface.is_some() { &self.counters.mcp_requests } else { &self.counters.tool_calls };
        calls.add(1, &[KeyValue::new("airlock.outcome", outcome.as_str()), tool.clone()]);
        if let Some(kind) = decision.refusal_kind {
            let attributes =
                [KeyValue::new("airlock.refusal.kind", kind), KeyValue::new("airlock.enforced", true), tool.clone()];
            self.counters.refusals.add(1, &attributes);
        }
        for kind in &decision.would_refuse {
            let attributes =
                [KeyValue::new("airlock.refusal.kind", *kind), KeyValue::new("airlock.enforced", false), tool.clone()];
            self.counters.refusals.add(1, &attributes);
        }
        if decision.approved {
            self.counters.approvals.add(1, std::slice::from_ref(&tool));
        }
        if let Some(effect) = decision.effect() {
            self.counters.effects.add(1, &[KeyValue::new("airlock.effect", effect.as_str()), tool]);
        }
    }
}

impl<S, T> tracing_subscriber::Layer<S> for DecisionLayer<T>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    T: Tracer + 'static,
    Self: 'static,
{
    fn on_new_span(&self, attributes: &span::Attributes<'_>, id: &span::Id, ctx: LayerContext<'_, S>) {
        let metadata = attributes.metadata();
        if !matches!(metadata.name(), CALL_SPAN | SURFACE_SPAN) || metadata.target() != TARGET {
            return;
        }
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(CallDecision::opened(attributes));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let Some(scope) = ctx.event_scope(event) else { return };
        for span in scope {
            let mut extensions = span.extensions_mut();
            if let Some(decision) = extensions.get_mut::<CallDecision>() {
                decision.record(event);
                return;
            }
        }
    }

    fn on_close(&self, id: span::Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let decision = span.extensions_mut().remove::<CallDecision>();
        if let Some(decision) = decision {
            self.export(&decision);
        }
    }
}
