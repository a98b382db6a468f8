//! weft's telemetry: OpenTelemetry traces and metrics that follow the GenAI semantic
//! conventions, derived from a session's events (`derive` and `metrics`, pure) and sent over
//! OTLP HTTP/protobuf (`export`).
#![warn(missing_docs, unreachable_pub)]

pub mod derive;

pub use derive::{Attr, Deriver, Kind, Options, Span, provider_of, span_id, trace_id};
pub mod export;
pub mod metrics;

pub use export::{Counts, Exporter, Meters};
pub use metrics::{Instrument, Point, Recorder};
