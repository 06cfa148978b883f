//! Logs and traces of the `switchboard` process.
//!
//! - Logs go to stderr: text, or one JSON object per line with `SWITCHBOARD_LOG_FORMAT=json`
//!   (timestamp, level, target, fields, the span it happened in); the filter is
//!   `SWITCHBOARD_LOG` (or `RUST_LOG`), default [`DEFAULT_FILTER`].
//! - Traces: with `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set,
//!   the `tracing` spans — one per HTTP request (`request`: method, path, request id,
//!   session id, status) and one per run (`run`: session id, run id, backend) with what
//!   happens inside them — are exported over OTLP (HTTP/protobuf; the standard `OTEL_*`
//!   variables apply: headers, timeout, `OTEL_SERVICE_NAME`, batch delays). Spans go out in
//!   batches from a thread of their own; [`shutdown`] sends what is left at exit.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The log filter unless `SWITCHBOARD_LOG` says otherwise: `info`, without what libraries
/// say at every step (sqlx's statements; matrix-sdk's every sync, and its every 404 — a new
/// account has no key backup or secret storage — logged as errors by its HTTP client; the
/// Matrix channel logs what matters itself).
pub const DEFAULT_FILTER: &str = "info,sqlx=warn,matrix_sdk=warn,matrix_sdk_base=warn,matrix_sdk_crypto=warn,matrix_sdk_sqlite=warn,matrix_sdk::http_client=off,matrix_sdk_crypto::backups=error";

/// Always off, whatever `SWITCHBOARD_LOG` says: libraries that would log secrets at trace
/// level — async-imap logs every IMAP command it sends, `LOGIN` with the password. (Their
/// `log` records are not bridged into `tracing` today; this keeps it so if a dependency
/// ever turns the bridge on.)
pub const ALWAYS_OFF: &[&str] = &["async_imap=off", "imap_proto=off"];

/// The filter of `spec` (a `SWITCHBOARD_LOG` value), with [`ALWAYS_OFF`] on top.
fn filter(spec: &str) -> EnvFilter {
    ALWAYS_OFF
        .iter()
        .fold(EnvFilter::new(spec), |f, d| match d.parse() {
            Ok(d) => f.add_directive(d),
            Err(_) => f,
        })
}

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether traces are to be exported: an OTLP endpoint is configured.
fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|v| !v.trim().is_empty()))
}

/// Builds the OTLP exporter and its provider (kept for [`shutdown`]); what went wrong
/// otherwise, for the log once it is set up.
fn otlp_provider() -> Result<SdkTracerProvider, String> {
    // reqwest 0.13 is built without a crypto provider of its own (the workspace's is
    // ring): installed once for the process, before the exporter's client is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("OTLP exporter: {e}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "switchboard".into());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Sets up logging (and trace export, when configured) for the process.
pub fn init() {
    let filter = std::env::var("SWITCHBOARD_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| DEFAULT_FILTER.into());
    let format = std::env::var("SWITCHBOARD_LOG_FORMAT").unwrap_or_default();
    let json = format.eq_ignore_ascii_case("json");
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if json {
        fmt.json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed()
    } else {
        fmt.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed()
    };
    let (otel, otel_error) = if otlp_configured() {
        match otlp_provider() {
            Ok(provider) => {
                let tracer = provider.tracer("switchboard");
                let _ = PROVIDER.set(provider);
                (
                    Some(tracing_opentelemetry::layer().with_tracer(tracer)),
                    None,
                )
            }
            Err(e) => (None, Some(e)),
        }
    } else {
        (None, None)
    };
    let _ = tracing_subscriber::registry()
        .with(self::filter(&filter))
        .with(fmt)
        .with(otel)
        .try_init();
    if !format.is_empty() && !json && !format.eq_ignore_ascii_case("text") {
        tracing::warn!(format = %format, "SWITCHBOARD_LOG_FORMAT is json or text; logging text");
    }
    if let Some(e) = otel_error {
        tracing::warn!(error = %e, "traces are not exported");
    }
}

/// Sends the spans still waiting to be exported (at exit).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get()
        && let Err(e) = provider.shutdown()
    {
        tracing::warn!(error = %e, "exporting the last traces failed");
    }
}
