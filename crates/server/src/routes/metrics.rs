//! `GET /metrics`: the process's counters, gauges and histograms in Prometheus' text
//! format, behind the token like every route but health.
//!
//! The engine, the gateway and the server record through the `metrics` facade; the
//! recorder is `metrics-exporter-prometheus`'s, installed once per process by [`install`]
//! (without its own HTTP listener: this route serves it). A process that installed none
//! (an embedding, a test of a crate) serves an empty document.

use std::sync::OnceLock;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::AppState;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Sets more gauges at each scrape, for what only the binary knows (its allocator's heap).
static EXTRA_SAMPLER: OnceLock<fn()> = OnceLock::new();

/// Registers `sample` to run at each scrape, before the document is rendered, beside the
/// process gauges (once; a later registration is ignored). The binary registers its
/// allocator's heap gauges here.
pub fn sample_also(sample: fn()) {
    let _ = EXTRA_SAMPLER.set(sample);
}

/// Installs the Prometheus recorder as the process's global one (once; later calls do
/// nothing) and describes the metrics Switchboard records.
pub fn install() {
    if HANDLE.get().is_some() {
        return;
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!("a metrics recorder was installed already; /metrics stays empty");
        return;
    }
    // Histograms keep their samples until drained: the exporter's upkeep does that, and it
    // is ours to run (the exporter's own listener, which would, is not used). Without it a
    // server nobody scrapes grows by every sample it records.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let upkeep = handle.clone();
        rt.spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                upkeep.run_upkeep();
            }
        });
    } else {
        tracing::warn!("no runtime at metrics install: histograms are drained only when scraped");
    }
    let _ = HANDLE.set(handle);
    describe();
}

/// How often histograms are drained into their summaries.
const UPKEEP: std::time::Duration = std::time::Duration::from_secs(5);

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("switchboard_runs_started_total", "Runs started, by backend");
    describe_counter!(
        "switchboard_runs_finished_total",
        "Runs ended, by outcome (completed, cancelled, failed)"
    );
    describe_histogram!(
        "switchboard_run_duration_seconds",
        metrics::Unit::Seconds,
        "How long runs took, by backend"
    );
    describe_counter!(
        "switchboard_events_appended_total",
        "Events committed to the durable log"
    );
    describe_counter!(
        "switchboard_store_errors_total",
        "Store operations that failed, by operation"
    );
    describe_gauge!(
        "switchboard_sse_subscribers",
        "Open event streams (GET /v1/sessions/{id}/events)"
    );
    describe_gauge!(
        "switchboard_approvals_waiting",
        "Tool approvals waiting for a decision"
    );
    describe_histogram!(
        "switchboard_approval_wait_seconds",
        metrics::Unit::Seconds,
        "How long approvals waited, by result (decided, timed_out, cancelled, failed)"
    );
    describe_counter!(
        "switchboard_gateway_messages_in_total",
        "Chat messages taken from allowed users, by channel"
    );
    describe_counter!(
        "switchboard_gateway_messages_received_total",
        "Inbound chat messages noted in the delivery ledger, whatever became of them, by channel"
    );
    describe_counter!(
        "switchboard_gateway_messages_ignored_total",
        "Inbound chat messages not acted on, by channel and reason (not_allowed, duplicate, edited, empty, stopped)"
    );
    describe_counter!(
        "switchboard_gateway_duplicates_suppressed_total",
        "Platform redeliveries and replayed webhooks of a message already taken, by channel"
    );
    describe_counter!(
        "switchboard_gateway_messages_answered_total",
        "Inbound chat messages answered (their run completed, or the command was answered), by channel"
    );
    describe_counter!(
        "switchboard_gateway_messages_failed_total",
        "Inbound chat messages that failed (the run failed or was stopped, the session refused them, the reply could not be posted), by channel"
    );
    describe_counter!(
        "switchboard_gateway_calls_total",
        "Platform API calls that succeeded (sends, edits, …), by channel"
    );
    describe_counter!(
        "switchboard_gateway_rate_limited_total",
        "Platform API calls answered 429 (or the platform's slow-down), by channel"
    );
    describe_gauge!(
        "switchboard_gateway_outbound_waiting",
        "Platform API calls waiting for their turn in the outbound scheduler, by channel"
    );
    describe_counter!(
        "switchboard_lease_takeovers_total",
        "Leases this instance took: run (a run of a stopped instance closed here), gateway (became the active chat instance)"
    );
    describe_gauge!(
        "switchboard_runtime_alive_tasks",
        "Tasks alive in the server's async runtime (sampled when scraped)"
    );
    describe_gauge!(
        "process_resident_memory_bytes",
        metrics::Unit::Bytes,
        "Resident memory of the server process (sampled when scraped; Linux)"
    );
    describe_gauge!(
        "process_open_fds",
        "Open file descriptors of the server process: sockets, database files (sampled when scraped; Linux)"
    );
    describe_counter!(
        "switchboard_store_unavailable_answers_total",
        "API answers 503 store_unavailable (the database failed or did not answer)"
    );
}

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics_text))
}

/// `/metrics` alone, without the token: for `[metrics] listen`, an address only a
/// Prometheus on a private network reaches. Anything else there is 404.
pub fn standalone() -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .fallback(crate::error::not_found)
}

/// The metrics in Prometheus' text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "system", security(("bearer" = ["metrics:read"])),
    responses((status = 200, description = "Prometheus text format (version 0.0.4)", body = String, content_type = "text/plain")))]
pub async fn metrics_text() -> impl IntoResponse {
    sample_process();
    let body = HANDLE.get().map(|h| h.render()).unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

/// The process's own gauges, read when scraped: resident memory and open descriptors (from
/// `/proc/self`, so on Linux only) and the tokio runtime's live tasks. A task count that
/// only grows is a leak of spawned work; RSS that grows while it stays flat is the heap.
fn sample_process() {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let tasks = rt.metrics().num_alive_tasks();
        metrics::gauge!("switchboard_runtime_alive_tasks").set(tasks as f64);
    }
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_kib(&s, "VmRSS:"));
    if let Some(kib) = rss_kib {
        metrics::gauge!("process_resident_memory_bytes").set(kib as f64 * 1024.0);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
    if let Some(extra) = EXTRA_SAMPLER.get() {
        extra();
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:   1234 kB`), or a count (`Threads:`).
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `switchboard_sse_subscribers`: up while a stream is open, down when it is dropped.
pub(crate) struct SubscriberGauge;

impl SubscriberGauge {
    pub(crate) fn up() -> Self {
        metrics::gauge!("switchboard_sse_subscribers").increment(1.0);
        Self
    }
}

impl Drop for SubscriberGauge {
    fn drop(&mut self) {
        metrics::gauge!("switchboard_sse_subscribers").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::status_kib;

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tswitchboard\nVmPeak:\t  2048 kB\nVmRSS:\t   1234 kB\nThreads:\t7\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(1234));
        assert_eq!(status_kib(status, "VmPeak:"), Some(2048));
        assert_eq!(status_kib(status, "RssAnon:"), None);
        assert_eq!(status_kib("VmRSS:\tlots kB\n", "VmRSS:"), None);
    }
}
