//! `/openapi.json` documents every route `switchboard serve` answers, and the body limit is
//! enforced on the headers.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use switchboard_test_support::process::ServerProcess;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

async fn serve(dir: &Path, extra: &[(&str, &str)]) -> ServerProcess {
    let surfaces = common::every_surface(dir);
    let mut env: Vec<(&str, &str)> = surfaces.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("SWITCHBOARD_OPENAI_BASE_URL", "http://127.0.0.1:9/v1"));
    env.extend_from_slice(extra);
    ServerProcess::start(
        Path::new(env!("CARGO_BIN_EXE_switchboard")),
        &dir.join("data"),
        "openapi-test-token",
        &env,
    )
    .await
    .unwrap()
}

/// Every `.route("PATH", METHODS…)` of the crates whose routers `serve` mounts, read from
/// their sources: a route added there without a `#[utoipa::path]` fails the test below.
fn routes_in_sources() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "server/src",
        "gateway/src",
        "relay/src",
        "hub/src",
        "scheduler/src",
    ] {
        collect(&root.join(dir), &mut files);
    }
    let mut out = BTreeSet::new();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        let mut rest = src.as_str();
        while let Some(i) = rest.find(".route(") {
            rest = rest[i + ".route(".len()..].trim_start();
            let Some(r) = rest.strip_prefix('"') else {
                continue;
            };
            rest = r;
            let end = rest.find('"').unwrap();
            let path = &rest[..end];
            // The methods: up to the call's closing parenthesis.
            let mut depth = 1;
            let mut close = end;
            for (j, c) in rest[end..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            close = end + j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let call = &rest[end..close];
            for m in ["get", "post", "put", "patch", "delete"] {
                // `get(handler)`, or `get_service(service)` for a tower service.
                let direct = [" ", ",", "::"].iter().any(|p| {
                    call.contains(&format!("{p}{m}(")) || call.contains(&format!("{p}{m}_service("))
                });
                let chained =
                    call.contains(&format!(".{m}(")) || call.contains(&format!(".{m}_service("));
                if direct || chained {
                    out.insert(format!("{m} {path}"));
                }
            }
        }
    }
    out
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_lists_every_route_serve_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]).await;
    let doc: Value = reqwest::get(format!("{}/openapi.json", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            documented.insert(format!("{method} {path}"));
            // Every operation documents its error body.
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses
                    .keys()
                    .any(|s| s.starts_with('4') || s.starts_with('5')),
                "{method} {path} documents no error status"
            );
        }
    }
    // Every UUID in it (components, parameters, bodies) carries the pattern the server
    // parses, and the server started without an error (it used to log one at every start:
    // the patterns did not survive a JSON round trip).
    fn uuids(v: &Value, at: &str, found: &mut usize) {
        match v {
            Value::Object(m) => {
                if m.get("format").and_then(Value::as_str) == Some("uuid") {
                    *found += 1;
                    assert!(
                        m.get("pattern").and_then(Value::as_str).is_some(),
                        "{at}: a uuid without its pattern"
                    );
                }
                for (k, v) in m {
                    uuids(v, &format!("{at}/{k}"), found);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| uuids(v, at, found)),
            _ => {}
        }
    }
    let mut found = 0;
    uuids(&doc, "", &mut found);
    assert!(found > 20, "{found} uuids");
    assert!(!server.logs().contains("ERROR"), "{}", server.logs());
    // The document is served by a route of its own.
    let mut routes = routes_in_sources();
    routes.insert("get /openapi.json".into());
    assert_eq!(
        documented, routes,
        "documented operations vs routes in the sources"
    );

    // And the server does answer each one (no `no such route` fallback).
    let http = reqwest::Client::new();
    for op in &routes {
        let (method, path) = op.split_once(' ').unwrap();
        let url = format!(
            "{}{}",
            server.url,
            path.replace("{id}", "01a23273-d9d8-7678-ba58-722b6456076d")
                .replace(['{', '}'], "")
        );
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = http.request(m, &url).send().await.unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        assert!(
            !(status == 404 && body.contains("no such route")) && status != 405,
            "{op}: {status} {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_over_the_limit_is_refused_before_it_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[("SWITCHBOARD_MAX_BODY_BYTES", "1024")]).await;
    let addr = server.url.trim_start_matches("http://").to_string();
    for path in [
        "/v1/sessions",
        "/v1/gateway/send",
        "/v1/relay/bundles/x/send",
        "/v1/console/login",
    ] {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer openapi-test-token\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        // No body follows: the answer must come from the headers alone.
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer within 5 s"))
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.starts_with("HTTP/1.1 413"), "{path}: {text}");
        assert!(text.contains("payload_too_large"), "{path}: {text}");
    }
}

/// The typed outcomes are in the document: a run's end, a rejection's cause and a failure's
/// code, each as its enum, and the cause a reject decision may carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_types_a_runs_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]).await;
    let doc: Value = reqwest::get(format!("{}/openapi.json", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let schemas = &doc["components"]["schemas"];
    let values = |name: &str| -> Vec<String> {
        schemas[name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} is not an enum: {}", schemas[name]))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        values("StopReason"),
        ["completed", "cancelled", "max_turns", "error", "refused"]
    );
    assert_eq!(
        values("RejectionCause"),
        [
            "user",
            "timeout",
            "cancelled",
            "new_message",
            "restart",
            "policy",
            "budget"
        ]
    );
    assert!(values("RunErrorCode").contains(&"provider_unreachable".to_owned()));
    // Where they are used: the events, and the decision a client sends.
    let events = serde_json::to_string(&schemas["AgentEvent"]).unwrap();
    for used in ["StopReason", "RejectionCause", "RunErrorCode"] {
        assert!(
            events.contains(&format!("#/components/schemas/{used}")),
            "AgentEvent does not use {used}"
        );
    }
    assert!(
        serde_json::to_string(&schemas["ToolDecision"]["properties"]["cause"])
            .unwrap()
            .contains("RejectionCause")
    );
}
