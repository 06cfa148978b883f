//! The API and the CLI as the tests drive them: a raw request with any token, people and
//! their tokens, `switchboard ARGS` against a running server.

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use switchboard_protocol::people::{Role, Scope};
use switchboard_test_support::process::ServerProcess;

use super::{TOKEN, bin};

/// `METHOD path` with `token` and an optional JSON body: the status and the JSON answer
/// (`null` for anything else — an event stream is not read: its headers are the answer).
pub async fn call(
    server: &ServerProcess,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", server.url),
        )
        .bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let is_json = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body = if is_json {
        resp.json().await.unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    (status, body)
}

/// `GET path` with the server token, which must answer 200: its JSON.
pub async fn get(server: &ServerProcess, path: &str) -> Value {
    let (s, b) = call(server, TOKEN, "GET", path, None).await;
    assert_eq!(s, 200, "GET {path}: {b}");
    b
}

/// Adds the person `name` with `role` (with the server token).
pub async fn add_user(server: &ServerProcess, name: &str, role: Role) {
    let (s, b) = call(
        server,
        TOKEN,
        "POST",
        "/v1/users",
        Some(json!({"name": name, "role": role})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
}

/// A new personal token of `user` with `scopes`.
pub async fn token_for(server: &ServerProcess, user: &str, scopes: &[Scope]) -> String {
    let (s, b) = call(
        server,
        TOKEN,
        "POST",
        "/v1/tokens",
        Some(json!({"user": user, "name": "test", "scopes": scopes})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    b["token"].as_str().unwrap().to_string()
}

/// A new person with `role` and an API client on a token of theirs with `scopes`.
pub async fn person(
    server: &ServerProcess,
    name: &str,
    role: Role,
    scopes: &[Scope],
) -> (switchboard_client::Client, String) {
    add_user(server, name, role).await;
    let token = token_for(server, name, scopes).await;
    let c = switchboard_client::Client::new(server.url.clone(), Some(token.clone())).unwrap();
    (c, token)
}

/// `switchboard ARGS` against the server at `url` with `token`, not yet started (no
/// configuration file, stdin closed).
pub fn cli_command(url: &str, token: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("SWITCHBOARD_URL", url)
        .env("SWITCHBOARD_TOKEN", token)
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .stdin(Stdio::null());
    cmd
}

/// `switchboard ARGS` with `token`, `stdin` written to it: (success, stdout, stderr).
pub fn cli_as(
    url: &str,
    token: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use std::io::Write as _;
    let mut cmd = cli_command(url, token, args);
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `switchboard ARGS` with the server token: (success, stdout, stderr).
pub fn cli(url: &str, args: &[&str]) -> (bool, String, String) {
    cli_as(url, TOKEN, args, None)
}
