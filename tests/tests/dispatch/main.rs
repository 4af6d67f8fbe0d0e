//! The dispatcher's gates: argument admission, policy (globs, the policy file, shared rate limits), generated calls
//! and the fuzzers' regressions, tracing events and their OpenTelemetry export.
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod argument_admission;
pub mod dispatch_fuzz;
pub mod dispatch_gates;
pub mod fuzz_regressions;
pub mod otel_export;
pub mod policy_file;
pub mod shared_rates;
pub mod text_calls;
pub mod text_prepared;
pub mod tracing_events;
