//! OpenTelemetry export of every decision (feature `otel`): each tool call a span, and counters of refusals
//! by kind, approvals and effects, sent over OTLP (HTTP/protobuf) to a collector.
//!
//! A [`DecisionLayer`] is a `tracing` layer over what the dispatcher already emits (the `tool_call` span and
//! the events in it); [`OtlpExport`] sets up the OpenTelemetry SDK's batching exporters and makes the layer.
//! Nothing is sent from the call itself: a finished span is queued (dropped if the queue is full) and sent by
//! the SDK's background threads, so a collector that is down or slow never fails or slows a tool call. Call
//! [`OtlpExport::shutdown`] before the process exits to send what is queued.
//!
//! What is exported is a fixed list of fields (see [`DecisionLayer`]): never argument values, results,
//! refusal texts or secrets.
//!
//! ```no_run
//! use agent_airlock::otel::OtlpExport;
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! let export = OtlpExport::http("http://127.0.0.1:4318").service_name("payments-agent").build()?;
//! let subscriber = tracing_subscriber::registry().with(export.layer());
//! tracing::subscriber::set_global_default(subscriber)?;
//! // … dispatch tool calls …
//! export.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod decision;
mod layer;

use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer as _;
use tracing_subscriber::registry::LookupSpan;

pub use self::layer::DecisionLayer;

/// The instrumentation scope of the spans and counters.
const SCOPE: &str = "agent-airlock";

/// How long one export may take before it is abandoned (OTLP's default is 10 s).
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an OTLP export could not be set up or shut down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The endpoint is not an `http://` URL.
    #[error("OTLP endpoint `{endpoint}`: {reason}")]
    Endpoint {
        /// The endpoint given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The OpenTelemetry SDK could not build an exporter.
    #[error("OTLP exporter: {0}")]
    Build(String),
    /// Spans or counters still queued could not be sent at shutdown.
    #[error("OTLP export at shutdown: {0}")]
    Shutdown(String),
}

/// The OpenTelemetry SDK set up to export decisions over OTLP/HTTP (protobuf): a batching span processor and a
/// periodic metric reader, each with its own background thread.
///
/// Make the `tracing` layer with [`layer`](Self::layer); call [`shutdown`](Self::shutdown) at the end to send
/// what is queued (spans every 5 s by default, counters every 60 s; the SDK's `OTEL_BSP_SCHEDULE_DELAY` and
/// `OTEL_METRIC_EXPORT_INTERVAL` change that, and so does [`OtlpExportBuilder::interval`]).
#[derive(Debug)]
pub struct OtlpExport {
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
}

/// Settings of an [`OtlpExport`], from [`OtlpExport::http`].
#[derive(Debug, Clone)]
#[must_use]
pub struct OtlpExportBuilder {
    endpoint: String,
    service_name: String,
    timeout: Duration,
    interval: Option<Duration>,
}

impl OtlpExport {
    /// An export to the collector at `endpoint`, a base URL like `http://127.0.0.1:4318` (what
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` holds): spans go to `{endpoint}/v1/traces`, counters to
    /// `{endpoint}/v1/metrics`. Plain HTTP only (no TLS client is built in): run a collector beside the host.
    pub fn http(endpoint: impl Into<String>) -> OtlpExportBuilder {
        OtlpExportBuilder {
            endpoint: endpoint.into(),
            service_name: SCOPE.to_owned(),
            timeout: DEFAULT_EXPORT_TIMEOUT,
            interval: None,
        }
    }

    /// The [`DecisionLayer`] exporting through this setup, with the filter it needs, for a subscriber built on
    /// `tracing_subscriber`'s registry.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        self.decision_layer().with_filter(DecisionLayer::<SdkTracer>::filter())
    }

    /// The [`DecisionLayer`] without a filter, for a subscriber that filters per layer its own way.
    pub fn decision_layer(&self) -> DecisionLayer<SdkTracer> {
        DecisionLayer::new(self.traces.tracer(SCOPE), &self.metrics.meter(SCOPE))
    }

    /// Sends what is queued, then stops the background threads. Each send is bounded by the export timeout,
    /// so an unreachable collector delays this by that much at most per signal.
    pub fn shutdown(self) -> Result<(), OtelError> {
        let traces = self.traces.shutdown();
        let metrics = self.metrics.shutdown();
        match (traces, metrics) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(err), _) => Err(OtelError::Shutdown(format!("spans: {err}"))),
            (_, Err(err)) => Err(OtelError::Shutdown(format!("counters: {err}"))),
        }
    }
}

impl OtlpExportBuilder {
    /// The `service.name` of the resource the spans and counters belong to (default `agent-airlock`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// How long one export may take before it is abandoned ([`DEFAULT_EXPORT_TIMEOUT`] by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How often queued spans and counters are sent (by default the SDK's: 5 s for spans, 60 s for counters).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Builds the exporters and starts their background threads.
    pub fn build(self) -> Result<OtlpExport, OtelError> {
        let base = self.base_url()?;
        let resource = Resource::builder().with_service_name(self.service_name).build();

        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(self.timeout)
            .build()
            .map_err(|err| OtelError::Build(err.to_string()))?;
        let mut processor = BatchSpanProcessor::builder(spans);
        if let Some(interval) = self.interval {
            let config = opentelemetry_sdk::trace::BatchConfigBuilder::default().with_scheduled_delay(interval).build();
            processor = processor.with_batch_config(config);
        }
        let traces =
            SdkTracerProvider::builder().with_span_processor(processor.build()).with_resource(resource.clone()).build();

        let counters = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_timeout(self.timeout)
            .build()
            .map_err(|err| OtelError::Build(err.to_string()))?;
        let mut reader = PeriodicReader::builder(counters);
        if let Some(interval) = self.interval {
            reader = reader.with_interval(interval);
        }
        let metrics = SdkMeterProvider::builder().with_reader(reader.build()).with_resource(resource).build();

        Ok(OtlpExport { traces, metrics })
    }

    /// The endpoint without a trailing `/`, checked to be an `http://` URL with a host.
    fn base_url(&self) -> Result<String, OtelError> {
        let invalid = |reason: &str| OtelError::Endpoint { endpoint: self.endpoint.clone(), reason: reason.to_owned() };
        let url = url::Url::parse(&self.endpoint).map_err(|err| invalid(&err.to_string()))?;
        match url.scheme() {
            "http" => {}
            "https" => {
                return Err(invalid(
                    "`https` is not supported (no TLS client is built in); send to a collector on this host or \
                     network over `http`",
                ));
            }
            other => return Err(invalid(&format!("unknown scheme `{other}`, expected `http`"))),
        }
        if url.host().is_none() {
            return Err(invalid("no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("a query or fragment has no place in a base URL"));
        }
        Ok(self.endpoint.trim_end_matches('/').to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_plain_http_base_urls() {
        for bad in ["https://collector:4318", "ftp://collector", "collector:4318", "http://c:4318/?a=b", ""] {
            assert!(OtlpExport::http(bad).base_url().is_err(), "{bad}");
        }
        let base = OtlpExport::http("http://127.0.0.1:4318/").base_url().unwrap();
        assert_eq!(base, "http://127.0.0.1:4318");
        let base = OtlpExport::http("http://collector:4318/otlp").base_url().unwrap();
        assert_eq!(base, "http://collector:4318/otlp");
    }
}
