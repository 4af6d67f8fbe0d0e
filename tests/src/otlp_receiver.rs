//! An OTLP/HTTP receiver on loopback, for the tests of the OpenTelemetry export: it accepts `POST /v1/traces`
//! and `POST /v1/metrics` (protobuf), answers `200`, and keeps every body, raw and decoded with the protocol's
//! own generated types (`opentelemetry-proto`), so a test can read the spans and counters that arrived and
//! search the raw bytes for what must never be sent.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::{AnyValue as AnyValueMessage, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as NumberValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use crate::loopback_http::Response;

/// Everything received so far.
#[derive(Default)]
struct Received {
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
    /// Every request's body, one after the other.
    raw: Vec<u8>,
    /// A request that was not an OTLP export this receiver understands.
    errors: Vec<String>,
}

/// The receiver: a listener on `127.0.0.1`, a thread per connection.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
}

/// One span as received: its name and its attributes, each value as text (`true`, `42`, `a,b` for an array).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Its attributes.
    pub attributes: BTreeMap<String, String>,
    /// Its status code (`0` unset, `1` ok, `2` error).
    pub status_code: i32,
    /// The `service.name` of its resource.
    pub service_name: Option<String>,
}

impl ReceivedSpan {
    /// The attribute `key`, if present.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

impl OtlpReceiver {
    /// Listens on a free port of `127.0.0.1`.
    pub fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let received = Arc::new(Mutex::new(Received::default()));
        let shared = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        OtlpReceiver { addr, received }
    }

    /// The base URL to give an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`'s form).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every span received, in order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let received = self.lock();
        let mut spans = Vec::new();
        for request in &received.traces {
            for resource_spans in &request.resource_spans {
                let service_name = resource_spans.resource.as_ref().and_then(|resource| {
                    resource.attributes.iter().find(|kv| kv.key == "service.name").map(|kv| text(kv.value.as_ref()))
                });
                for scope in &resource_spans.scope_spans {
                    spans.extend(scope.spans.iter().map(|span| received_span(span, service_name.clone())));
                }
            }
        }
        spans
    }

    /// The total of the counter `name` over the data points whose attributes include every pair of
    /// `attributes`, as of the last export that carried any (the SDK sends cumulative sums); `None` if none
    /// arrived.
    pub fn counter(&self, name: &str, attributes: &[(&str, &str)]) -> Option<i64> {
        let received = self.lock();
        let mut last = None;
        for request in &received.metrics {
            let mut total = None;
            for resource in &request.resource_metrics {
                for scope in &resource.scope_metrics {
                    for metric in scope.metrics.iter().filter(|metric| metric.name == name) {
                        let Some(Data::Sum(sum)) = &metric.data else { continue };
                        for point in &sum.data_points {
                            let pairs = attributes_of(&point.attributes);
                            if !attributes.iter().all(|(k, v)| pairs.get(*k).map(String::as_str) == Some(*v)) {
                                continue;
                            }
                            let value = match point.value {
                                Some(NumberValue::AsInt(value)) => value,
                                Some(NumberValue::AsDouble(value)) => value as i64,
                                None => continue,
                            };
                            total = Some(total.unwrap_or(0) + value);
                        }
                    }
                }
            }
            if total.is_some() {
                last = total;
            }
        }
        last
    }

    /// Every byte of every request body received.
    pub fn raw(&self) -> Vec<u8> {
        self.lock().raw.clone()
    }

    /// Requests that were not OTLP exports (a wrong path, a body that does not decode).
    pub fn errors(&self) -> Vec<String> {
        self.lock().errors.clone()
    }

    /// How many export requests of each signal arrived: (traces, metrics).
    pub fn requests(&self) -> (usize, usize) {
        let received = self.lock();
        (received.traces.len(), received.metrics.len())
    }

    /// Waits until `done` holds or `within` passes; whether it held.
    pub fn wait_until(&self, within: Duration, done: impl Fn(&OtlpReceiver) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `true` if `haystack` contains `needle`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|window| window == needle)
}

/// Serves the OTLP/HTTP requests of one connection (keep-alive) until it closes.
fn serve(stream: TcpStream, received: &Mutex<Received>) {
    crate::loopback_http::serve_connection(stream, |request| {
        let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
        received.raw.extend_from_slice(&request.body);
        let path = request.path.as_str();
        match path {
            "/v1/traces" => match ExportTraceServiceRequest::decode(request.body.as_slice()) {
                Ok(decoded) => received.traces.push(decoded),
                Err(err) => received.errors.push(format!("{path}: {err}")),
            },
            "/v1/metrics" => match ExportMetricsServiceRequest::decode(request.body.as_slice()) {
                Ok(decoded) => received.metrics.push(decoded),
                Err(err) => received.errors.push(format!("{path}: {err}")),
            },
            _ => received.errors.push(format!("unexpected request: {}", request.line)),
        }
        Response::ok("application/x-protobuf", Vec::new())
    });
}

fn received_span(span: &Span, service_name: Option<String>) -> ReceivedSpan {
    ReceivedSpan {
        name: span.name.clone(),
        attributes: attributes_of(&span.attributes),
        status_code: span.status.as_ref().map_or(0, |status| status.code),
        service_name,
    }
}

fn attributes_of(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

fn text(value: Option<&AnyValueMessage>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(AnyValue::StringValue(text)) => text.clone(),
        Some(AnyValue::BoolValue(value)) => value.to_string(),
        Some(AnyValue::IntValue(value)) => value.to_string(),
        Some(AnyValue::DoubleValue(value)) => value.to_string(),
        Some(AnyValue::ArrayValue(array)) => {
            array.values.iter().map(|value| text(Some(value))).collect::<Vec<_>>().join(",")
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
