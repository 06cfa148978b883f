//! Teams (docs/teams.md): users with roles, personal tokens with scopes, the audit log —
//! over HTTP against the real binary, and through the CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::path::Path;

use serde_json::{Value, json};
use switchboard_protocol::people::{Role, Scope};
use switchboard_test_support::process::ServerProcess;

use common::api::{add_user, call, cli_as, token_for};

const TOKEN: &str = common::TOKEN;

/// A server with every surface mounted, the chat channels' too (a webhook channel).
async fn serve(dir: &Path) -> ServerProcess {
    let surfaces = common::every_surface(dir);
    let env: Vec<(&str, &str)> = surfaces.iter().map(|(k, v)| (*k, v.as_str())).collect();
    common::start(&dir.join("data"), "http://127.0.0.1:9/v1", &env).await
}

/// Polls `f` (every 50 ms, up to 30 s) until it gives a value.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A value for each path parameter: ids that exist nowhere, so that no operation that is
/// let through changes anything that matters.
fn fill(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').unwrap() + i;
        let name = &rest[i + 1..end];
        out.push_str(match name {
            "id" | "file_id" | "firing_id" | "message_id" => "0190a000-0000-7000-8000-000000000000",
            "file" => "app.js",
            _ => "no-such-thing",
        });
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Every operation of the OpenAPI document × every role: a role whose scopes include the
/// operation's gets past the authorization (whatever the operation then answers about the
/// made-up ids), any other gets 403 `forbidden` naming the scope. The operations are read
/// from the document, so a route added later is in the matrix without anyone adding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_for_every_role_follows_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path()).await;
    let mut tokens = vec![(None, TOKEN.to_string())];
    for role in Role::ALL {
        let name = format!("{}-1", role.as_str());
        add_user(&server, &name, role).await;
        tokens.push((Some(role), token_for(&server, &name, role.scopes()).await));
    }
    let doc: Value = reqwest::get(format!("{}/openapi.json", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut checked = 0;
    let mut forbidden = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let security = op["security"].as_array().unwrap_or_else(|| {
                panic!("{method} {path} does not say what it needs (no `security`)")
            });
            let public = security
                .iter()
                .any(|r| r.as_object().is_some_and(|o| o.is_empty()));
            let scope: Option<Scope> = security.iter().find_map(|r| {
                r["bearer"]
                    .as_array()
                    .and_then(|s| s.first())
                    .map(|s| Scope::parse(s.as_str().unwrap()).expect("a known scope"))
            });
            if public {
                continue;
            }
            let body = matches!(method.as_str(), "post" | "put" | "patch").then(|| json!({}));
            let url = fill(path);
            for (role, token) in &tokens {
                let allowed = match (role, scope) {
                    (None, _) | (_, None) => true,
                    (Some(r), Some(s)) => r.allows(s),
                };
                let (status, answer) =
                    call(&server, token, &method.to_uppercase(), &url, body.clone()).await;
                let who = role.map(Role::as_str).unwrap_or("server token");
                if allowed {
                    assert!(
                        status != 401 && !(status == 403 && answer.get("scope").is_some()),
                        "{who}: {method} {url} needs {scope:?}, which it has, but got {status} {answer}"
                    );
                } else {
                    let s = scope.unwrap();
                    assert_eq!(
                        (status, answer["code"].as_str(), answer["scope"].as_str()),
                        (403, Some("forbidden"), Some(s.as_str())),
                        "{who}: {method} {url} needs {s}: {answer}"
                    );
                    assert!(answer["error"].as_str().unwrap().contains(s.as_str()));
                    forbidden += 1;
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 300, "{checked} checks");
    assert!(forbidden > 80, "{forbidden} refusals");
    // An operation the document does not have is the admins' alone.
    let member = &tokens[3].1;
    let (s, b) = call(&server, member, "GET", "/v1/not-documented", None).await;
    assert_eq!((s, b["scope"].as_str()), (403, Some("admin")), "{b}");
    let (s, _) = call(&server, TOKEN, "GET", "/v1/not-documented", None).await;
    assert_eq!(s, 404);
    // Health is everyone's.
    let (s, _) = call(&server, member, "GET", "/v1/health", None).await;
    assert_eq!(s, 200);
}

/// A person's token from creation to revocation, through the CLI and over HTTP: its
/// scopes hold, it never exceeds the role, a role taken away narrows it at once, revoking
/// it is final, and the audit log has every step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_lives_within_its_scopes_and_its_role_and_dies_when_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path()).await;
    let (ok, out, err) = cli_as(
        &server.url,
        TOKEN,
        &[
            "users",
            "add",
            "ann",
            "--role",
            "operator",
            "--password-stdin",
        ],
        Some("a long enough password\n"),
    );
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cli_as(
        &server.url,
        TOKEN,
        &[
            "tokens",
            "create",
            "--user",
            "ann",
            "--name",
            "laptop",
            "--scope",
            "sessions:read,relay:read",
            "--expires",
            "30d",
        ],
        None,
    );
    assert!(ok, "{out}{err}");
    let ann = out.trim().to_string();
    assert!(ann.starts_with("sb_"), "{ann}");
    assert!(err.contains("shown this once"), "{err}");

    // Within its scopes.
    let (s, me) = call(&server, &ann, "GET", "/v1/me", None).await;
    assert_eq!(s, 200);
    assert_eq!(me["user"], "ann");
    assert_eq!(me["role"], "operator");
    assert_eq!(me["credential"], "token");
    assert_eq!(me["scopes"], json!(["sessions:read", "relay:read"]));
    assert_eq!(
        call(&server, &ann, "GET", "/v1/sessions", None).await.0,
        200
    );
    let (s, b) = call(&server, &ann, "POST", "/v1/sessions", Some(json!({}))).await;
    assert_eq!(
        (s, b["code"].as_str(), b["scope"].as_str()),
        (403, Some("forbidden"), Some("sessions:write")),
        "{b}"
    );
    // Its own tokens only, never the secrets; the audit log and users are admins'.
    let (s, list) = call(&server, &ann, "GET", "/v1/tokens", None).await;
    assert_eq!(s, 200);
    let tokens = list["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 1);
    assert!(!list.to_string().contains(&ann), "no secret in a list");
    assert!(
        tokens[0]["last_used_at"].is_string(),
        "its use is recorded: {list}"
    );
    assert!(tokens[0]["expires_at"].is_string());
    assert_eq!(
        call(&server, &ann, "GET", "/v1/tokens?user=admin", None)
            .await
            .0,
        403
    );
    assert_eq!(call(&server, &ann, "GET", "/v1/users", None).await.0, 403);
    assert_eq!(call(&server, &ann, "GET", "/v1/audit", None).await.0, 403);
    // Nobody mints a token beyond what they hold …
    let (s, b) = call(
        &server,
        &ann,
        "POST",
        "/v1/tokens",
        Some(json!({"name": "x", "scopes": ["sessions:write"]})),
    )
    .await;
    assert_eq!((s, b["code"].as_str()), (403, Some("forbidden")), "{b}");
    // … or beyond the role: an operator is not an admin.
    let (s, b) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/tokens",
        Some(json!({"user": "ann", "name": "x", "scopes": ["admin"]})),
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (422, Some("unprocessable_entity")),
        "{b}"
    );
    assert!(b["error"].as_str().unwrap().contains("`admin`"), "{b}");
    // Bad requests are clear.
    let (s, b) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/users",
        Some(json!({"name": "ann", "role": "viewer"})),
    )
    .await;
    assert_eq!((s, b["code"].as_str()), (409, Some("conflict")), "{b}");
    let (s, b) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/users",
        Some(json!({"name": "Bad Name", "role": "viewer"})),
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (422, Some("unprocessable_entity")),
        "{b}"
    );
    let (s, b) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/users",
        Some(json!({"name": "bo", "role": "viewer", "password": "short"})),
    )
    .await;
    assert_eq!(s, 422, "{b}");
    let (s, b) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/tokens",
        Some(json!({"user": "nobody", "name": "x", "scopes": ["sessions:read"]})),
    )
    .await;
    assert_eq!((s, b["code"].as_str()), (404, Some("not_found")), "{b}");

    // A role taken away narrows the token at once.
    let (ok, out, err) = cli_as(
        &server.url,
        TOKEN,
        &["users", "set-role", "ann", "member"],
        None,
    );
    assert!(ok, "{out}{err}");
    let (_, me) = call(&server, &ann, "GET", "/v1/me", None).await;
    assert_eq!(
        me["scopes"],
        json!(["sessions:read"]),
        "relay:read is beyond a member"
    );
    let (s, b) = call(&server, &ann, "GET", "/v1/relay/bundles", None).await;
    assert_eq!((s, b["scope"].as_str()), (403, Some("relay:read")), "{b}");

    // Listed, then revoked by its owner: refused from then on, with a clear code.
    let (ok, out, _) = cli_as(
        &server.url,
        TOKEN,
        &["tokens", "list", "--user", "ann", "--json"],
        None,
    );
    assert!(ok);
    let listed: Value = serde_json::from_str(&out).unwrap();
    let id = listed[0]["id"].as_str().unwrap().to_string();
    let (s, _) = call(&server, &ann, "DELETE", &format!("/v1/tokens/{id}"), None).await;
    assert_eq!(s, 200);
    let (s, b) = call(&server, &ann, "GET", "/v1/sessions", None).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("token_revoked")), "{b}");
    let (s, b) = call(&server, "sb_0000", "GET", "/v1/sessions", None).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("invalid_token")), "{b}");

    // An admin links and unlinks a chat identity from the CLI.
    let (ok, out, err) = cli_as(
        &server.url,
        TOKEN,
        &["users", "link", "ann", "--platform", "slack", "--id", "U77"],
        None,
    );
    assert!(ok && out.contains("slack:U77 acts as ann"), "{out}{err}");
    let (ok, out, _) = cli_as(&server.url, TOKEN, &["users", "list"], None);
    assert!(ok && out.contains("slack:U77"), "{out}");
    let (ok, _, err) = cli_as(
        &server.url,
        TOKEN,
        &["users", "unlink", "--platform", "slack", "--id", "U77"],
        None,
    );
    assert!(ok, "{err}");
    let (ok, _, err) = cli_as(
        &server.url,
        TOKEN,
        &["users", "unlink", "--platform", "slack", "--id", "U77"],
        None,
    );
    assert!(!ok && err.contains("linked to no one"), "{err}");

    // Removing the user ends the rest of their tokens.
    let other = token_for(&server, "ann", &[Scope::SessionsRead]).await;
    assert_eq!(
        call(&server, &other, "GET", "/v1/sessions", None).await.0,
        200
    );
    let (ok, _, err) = cli_as(&server.url, TOKEN, &["users", "remove", "ann"], None);
    assert!(ok, "{err}");
    assert_eq!(
        call(&server, &other, "GET", "/v1/sessions", None).await.0,
        401
    );

    // Every step is in the audit log, oldest first, as JSON lines.
    let (ok, out, err) = cli_as(&server.url, TOKEN, &["audit", "--jsonl"], None);
    assert!(ok, "{err}");
    let entries: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let actions: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["actor"].as_str().unwrap(), e["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("admin", "user.create"),
            ("admin", "token.create"),
            ("admin", "user.role"),
            ("ann", "token.revoke"),
            ("admin", "chat.link"),
            ("admin", "chat.unlink"),
            ("admin", "token.create"),
            ("admin", "user.delete"),
        ],
        "{out}"
    );
    assert_eq!(
        entries[2]["detail"],
        json!({"from": "operator", "to": "member"})
    );
    assert!(
        !out.contains("a long enough password") && !out.contains(&ann),
        "no secret in the audit log"
    );
    // Filtered, through the API.
    let (s, b) = call(
        &server,
        TOKEN,
        "GET",
        "/v1/audit?action=token.create&limit=1",
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(b["entries"].as_array().unwrap().len(), 1);
    let next = b["next"].as_i64().unwrap();
    let (_, b) = call(
        &server,
        TOKEN,
        "GET",
        &format!("/v1/audit?action=token.create&after={next}"),
        None,
    )
    .await;
    assert_eq!(b["entries"].as_array().unwrap().len(), 1);
    assert_eq!(
        call(&server, TOKEN, "GET", "/v1/audit?from=yesterday", None)
            .await
            .0,
        400
    );
    // The audit log cannot be changed through the API.
    assert_eq!(
        call(&server, TOKEN, "DELETE", "/v1/audit", None).await.0,
        405
    );
}

/// Two instances on one PostgreSQL database and one NATS server: a token revoked on one is
/// refused by the other within a second (at once: every request reads the shared store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_on_one_instance_is_refused_by_another_within_a_second() {
    let db = common::Db::create().await;
    let nats = common::nats::Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = nats.url();
    let mut instances = Vec::new();
    for name in ["a", "b"] {
        instances.push(
            common::start(
                &dir.path().join(name),
                "http://127.0.0.1:9/v1",
                &[
                    ("SWITCHBOARD_STORE_URL", db.url.as_str()),
                    ("SWITCHBOARD_BUS_URL", bus.as_str()),
                    ("SWITCHBOARD_INSTANCE_ID", name),
                ],
            )
            .await,
        );
    }
    let (a, b) = (&instances[0], &instances[1]);
    add_user(a, "cy", Role::Member).await;
    let cy = token_for(a, "cy", &[Scope::SessionsRead]).await;
    assert_eq!(call(b, &cy, "GET", "/v1/sessions", None).await.0, 200);
    let (_, me) = call(b, &cy, "GET", "/v1/me", None).await;
    let id = me["token_id"].as_str().unwrap().to_string();
    // An event stream B serves with the token, open when it is revoked.
    let stream = reqwest::Client::new()
        .get(format!("{}/v1/approvals/events", b.url))
        .bearer_auth(&cy)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut stream = stream.bytes_stream();
    use futures::StreamExt as _;
    assert!(stream.next().await.is_some(), "the snapshot comes");
    // Revoked on A, while B keeps being asked.
    let (s, _) = call(a, TOKEN, "DELETE", &format!("/v1/tokens/{id}"), None).await;
    assert_eq!(s, 200);
    let revoked = std::time::Instant::now();
    loop {
        let (s, b) = call(b, &cy, "GET", "/v1/sessions", None).await;
        if s == 401 {
            assert_eq!(b["code"], "token_revoked");
            break;
        }
        assert!(
            revoked.elapsed() < std::time::Duration::from_secs(1),
            "B still accepts the token a second after A revoked it"
        );
    }
    // The stream opened before ends too, within a recheck.
    let ended = tokio::time::timeout(
        switchboard_http::STREAM_RECHECK + std::time::Duration::from_secs(5),
        async { while let Some(Ok(_)) = stream.next().await {} },
    )
    .await;
    assert!(ended.is_ok(), "the revoked token's stream is still open");
    // And a role change on B holds on A.
    let other = token_for(b, "cy", &[Scope::SessionsRead, Scope::SessionsWrite]).await;
    let (s, _) = call(
        b,
        TOKEN,
        "PATCH",
        "/v1/users/cy",
        Some(json!({"role": "viewer"})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, body) = call(a, &other, "POST", "/v1/sessions", Some(json!({}))).await;
    assert_eq!(
        (s, body["scope"].as_str()),
        (403, Some("sessions:write")),
        "{body}"
    );
    drop(instances);
    db.drop_now().await;
}

async fn sign_in(
    server: &ServerProcess,
    user: &str,
    password: &str,
) -> (u16, Option<String>, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/console/login", server.url))
        .json(&json!({"user": user, "password": password}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let cookie = resp
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string());
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, cookie, body)
}

async fn with_cookie(
    server: &ServerProcess,
    cookie: &str,
    method: &str,
    path: &str,
) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", server.url),
        )
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

/// A person signs in to the console with a password: the browser acts as them (their role's
/// scopes), guessing is throttled, signing out ends the session, and everywhere ends all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_with_a_password_and_out_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path()).await;
    let (s, b) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/users",
        Some(json!({"name": "dee", "role": "member", "password": "dee's long password"})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["has_password"], true);

    let (s, laptop, _) = sign_in(&server, "dee", "dee's long password").await;
    assert_eq!(s, 204);
    let laptop = laptop.unwrap();
    assert!(laptop.starts_with("switchboard_session=v2."), "{laptop}");
    let (s, me) = with_cookie(&server, &laptop, "GET", "/v1/console/me").await;
    assert_eq!(s, 200);
    assert_eq!(
        (me["user"].as_str(), me["role"].as_str()),
        (Some("dee"), Some("member"))
    );
    // The browser has the member's reach, no more.
    assert_eq!(
        with_cookie(&server, &laptop, "GET", "/v1/sessions").await.0,
        200
    );
    let (s, b) = with_cookie(&server, &laptop, "GET", "/v1/users").await;
    assert_eq!((s, b["scope"].as_str()), (403, Some("admin")), "{b}");
    let (_, me) = with_cookie(&server, &laptop, "GET", "/v1/me").await;
    assert_eq!(me["credential"], "console");

    // Wrong passwords and unknown users are one answer; guessing is stopped.
    let (s, _, b) = sign_in(&server, "dee", "not the password").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (401, Some("invalid_credentials")),
        "{b}"
    );
    let (s, _, b) = sign_in(&server, "nobody", "not the password").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (401, Some("invalid_credentials")),
        "{b}"
    );
    for _ in 0..4 {
        sign_in(&server, "dee", "still not it").await;
    }
    let (s, _, b) = sign_in(&server, "dee", "dee's long password").await;
    assert_eq!(
        (s, b["code"].as_str()),
        (429, Some("rate_limited")),
        "even the right password waits: {b}"
    );

    // A second device (another user's throttle is theirs): an admin resets dee's password
    // on the API, which ends every console session of hers.
    let (s, _) = call(
        &server,
        TOKEN,
        "PATCH",
        "/v1/users/dee",
        Some(json!({"password": "a brand new password"})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        with_cookie(&server, &laptop, "GET", "/v1/sessions").await.0,
        401
    );

    // Signing out ends the session for good (the cookie sent again is refused), and
    // `everywhere` ends the other devices' too.
    let (s, _) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/users",
        Some(json!({"name": "eve", "role": "viewer", "password": "eve's long password"})),
    )
    .await;
    assert_eq!(s, 201);
    let (_, phone, _) = sign_in(&server, "eve", "eve's long password").await;
    let (_, desk, _) = sign_in(&server, "eve", "eve's long password").await;
    let (phone, desk) = (phone.unwrap(), desk.unwrap());
    assert_eq!(
        with_cookie(&server, &phone, "POST", "/v1/console/logout")
            .await
            .0,
        204
    );
    assert_eq!(
        with_cookie(&server, &phone, "GET", "/v1/sessions").await.0,
        401
    );
    assert_eq!(
        with_cookie(&server, &desk, "GET", "/v1/sessions").await.0,
        200
    );
    let (_, tablet, _) = sign_in(&server, "eve", "eve's long password").await;
    let tablet = tablet.unwrap();
    assert_eq!(
        with_cookie(
            &server,
            &tablet,
            "POST",
            "/v1/console/logout?everywhere=true"
        )
        .await
        .0,
        204
    );
    assert_eq!(
        with_cookie(&server, &desk, "GET", "/v1/sessions").await.0,
        401
    );

    // The audit log has the sign-ins, the failures (with the address) and the sign-outs.
    let (_, b) = call(
        &server,
        TOKEN,
        "GET",
        "/v1/audit?action=signin.failed",
        None,
    )
    .await;
    let failed = b["entries"].as_array().unwrap();
    assert_eq!(failed.len(), 6, "{b}");
    assert_eq!(failed[1]["actor"], "nobody");
    assert_eq!(failed[0]["detail"]["address"], "127.0.0.1");
    let (_, b) = call(&server, TOKEN, "GET", "/v1/audit?user=eve", None).await;
    let actions: Vec<&str> = b["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["signin", "signin", "signout", "signin", "signout"],
        "{b}"
    );
    assert!(!b.to_string().contains("long password"));
}

/// The real OpenID Connect provider (`oidc-provider`, npm) on `port`, for `redirect`.
async fn oidc_provider(port: u16, redirect: &str, accounts: Value) -> tokio::process::Child {
    use tokio::io::AsyncBufReadExt as _;
    let e2e = common::browser::e2e_dir();
    let mut child = tokio::process::Command::new("node")
        .arg(e2e.join("oidc-provider.mjs"))
        .current_dir(&e2e)
        .env("PORT", port.to_string())
        .env("CLIENT_ID", "switchboard")
        .env("CLIENT_SECRET", "oidc-client-secret-0123456789")
        .env("REDIRECT_URI", redirect)
        .env("ACCOUNTS", accounts.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
        .await
        .expect("the OIDC provider starts")
        .unwrap()
        .unwrap_or_default();
    assert!(ready.starts_with("ready "), "{ready}");
    // Kept reading: a provider writing to a closed pipe would die.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

/// Sign-in per person in the browser: through a real OpenID Connect provider (authorization
/// code with PKCE; the role from the groups claim) and with a password; a link code on the
/// Team page; a second person deciding in the console; the admin's users and audit log
/// (tests/e2e/teams.mjs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_to_the_console_through_the_identity_provider_and_with_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let (idp_port, port) = (common::free_port(), common::free_port());
    let redirect = format!("http://127.0.0.1:{port}/v1/console/oidc/callback");
    let _idp = oidc_provider(
        idp_port,
        &redirect,
        json!({"ann": {"groups": ["engineering", "sre"]}, "zed": {"groups": ["contractors"]}}),
    )
    .await;
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[[approvals.rules]]\ntool = \"run_command\"\nroles = [\"member\"]\nsecond_person = true\n\n[auth.oidc]\nissuer = \"http://127.0.0.1:{idp_port}\"\nclient_id = \"switchboard\"\nbutton = \"Sign in with Acme SSO\"\nrole_claim = \"groups\"\n\n[auth.oidc.roles]\nengineering = \"member\"\nsre = \"operator\"\n"
        ),
    )
    .unwrap();
    let llm = switchboard_test_support::mock_llm::MockLlm::start().await;
    llm.push(switchboard_test_support::mock_llm::MockReply::tool_call(
        "call_1",
        "run_command",
        json!({"command": "echo deployed"}),
    ));
    llm.push(switchboard_test_support::mock_llm::MockReply::text(&[
        "Deployed from the console.",
    ]));
    let listen = format!("127.0.0.1:{port}");
    let server = common::start(
        &dir.path().join("data"),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_CONFIG", config.to_str().unwrap()),
            ("SWITCHBOARD_LISTEN", &listen),
            (
                "SWITCHBOARD_OIDC_CLIENT_SECRET",
                "oidc-client-secret-0123456789",
            ),
        ],
    )
    .await;
    for (name, password) in [
        ("dee", "dee has a long password"),
        ("eli", "eli has a long password"),
    ] {
        let (s, _) = call(
            &server,
            TOKEN,
            "POST",
            "/v1/users",
            Some(json!({"name": name, "role": "member", "password": password})),
        )
        .await;
        assert_eq!(s, 201);
    }
    let mut script = common::browser::Script::start(
        "teams.mjs",
        &[("SB_URL", &server.url), ("SB_TOKEN", TOKEN)],
        std::time::Duration::from_secs(180),
    );
    if let Some(cmd) = script.next_command().await {
        panic!("unexpected request from the script: {cmd}");
    }
    script.finish(|| server.logs()).await;
    // The provider's person is a user now, with the highest role their groups map to; the
    // one no group maps to is not.
    let (_, users) = call(&server, TOKEN, "GET", "/v1/users", None).await;
    let names: Vec<(&str, &str)> = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["name"].as_str().unwrap(), u["role"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [("ann", "operator"), ("dee", "member"), ("eli", "member")]
    );
    let (_, audit) = call(
        &server,
        TOKEN,
        "GET",
        "/v1/audit?action=signin.failed",
        None,
    )
    .await;
    assert!(
        audit.to_string().contains("zed has no role here"),
        "{audit}"
    );
    common::browser::assert_shots(&[
        "teams-sign-in.png",
        "teams-signed-in.png",
        "teams-second-person.png",
        "teams-audit.png",
    ]);
}

/// Members see and drive their own sessions and those shared with them — in lists, reads,
/// event streams, messages and the approvals inbox — and nothing else, which is answered
/// as if it did not exist; operators and viewers see all; only an owner (or an operator)
/// shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_see_their_own_sessions_and_those_shared_with_them() {
    use switchboard_test_support::mock_llm::{MockLlm, MockReply};
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"), &llm.base_url(), &[]).await;
    let mut tokens = std::collections::HashMap::new();
    for (name, role) in [
        ("ann", Role::Member),
        ("bob", Role::Member),
        ("ops", Role::Operator),
        ("vic", Role::Viewer),
    ] {
        add_user(&server, name, role).await;
        tokens.insert(name, token_for(&server, name, role.scopes()).await);
    }
    let (ann, bob, ops, vic) = (
        &tokens["ann"],
        &tokens["bob"],
        &tokens["ops"],
        &tokens["vic"],
    );
    let (s, a) = call(
        &server,
        ann,
        "POST",
        "/v1/sessions",
        Some(json!({"title": "ann's"})),
    )
    .await;
    assert_eq!(s, 201);
    assert_eq!(a["owner"], "ann");
    let a = a["id"].as_str().unwrap().to_string();
    let (_, b) = call(
        &server,
        bob,
        "POST",
        "/v1/sessions",
        Some(json!({"title": "bob's"})),
    )
    .await;
    let b = b["id"].as_str().unwrap().to_string();
    let (_, admin_s) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/sessions",
        Some(json!({"title": "the admin's"})),
    )
    .await;
    assert!(
        admin_s.get("owner").is_none(),
        "the server token's sessions have no owner: {admin_s}"
    );
    // A tool call waits for approval in each of ann's and bob's sessions.
    for (token, id) in [(ann, &a), (bob, &b)] {
        llm.push(MockReply::tool_call(
            "call_1",
            "run_command",
            json!({"command": "true"}),
        ));
        let (s, body) = call(
            &server,
            token,
            "POST",
            &format!("/v1/sessions/{id}/messages"),
            Some(json!({"message": {"role": "user", "content": "go"}})),
        )
        .await;
        assert_eq!(s, 200, "{body}");
    }
    let titles = |list: &Value| -> Vec<String> {
        let mut t: Vec<String> = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["title"].as_str().unwrap().to_string())
            .collect();
        t.sort();
        t
    };
    let (_, list) = call(&server, ann, "GET", "/v1/sessions", None).await;
    assert_eq!(
        (titles(&list), list["total"].as_u64()),
        (vec!["ann's".to_string()], Some(1))
    );
    for t in [ops, vic, &TOKEN.to_string()] {
        let (_, list) = call(&server, t, "GET", "/v1/sessions", None).await;
        assert_eq!(titles(&list), ["ann's", "bob's", "the admin's"]);
    }
    // Bob's session does not exist for ann, whatever she asks of it.
    for (method, path, body) in [
        ("GET", format!("/v1/sessions/{b}"), None),
        ("GET", format!("/v1/sessions/{b}/events"), None),
        ("GET", format!("/v1/sessions/{b}/messages"), None),
        ("GET", format!("/v1/sessions/{b}/transcript.md"), None),
        ("GET", format!("/v1/sessions/{b}/tools/pending"), None),
        ("GET", format!("/v1/sessions/{b}/files"), None),
        (
            "POST",
            format!("/v1/sessions/{b}/messages"),
            Some(json!({"message": {"role": "user", "content": "hi"}})),
        ),
        (
            "POST",
            format!("/v1/sessions/{b}/tools/decisions"),
            Some(json!({"decisions": []})),
        ),
        (
            "PATCH",
            format!("/v1/sessions/{b}"),
            Some(json!({"title": "mine now"})),
        ),
        ("DELETE", format!("/v1/sessions/{b}"), None),
    ] {
        let (s, body) = call(&server, ann, method, &path, body).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (404, Some("session_not_found")),
            "{method} {path}: {body}"
        );
    }
    // Her inbox holds her approval only; an operator's both.
    let inbox = |v: &Value| -> Vec<String> {
        let mut t: Vec<String> = v["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["session_title"].as_str().unwrap().to_string())
            .collect();
        t.sort();
        t
    };
    eventually("two approvals waiting", || async {
        let (_, v) = call(&server, ops, "GET", "/v1/approvals", None).await;
        (inbox(&v).len() == 2).then_some(())
    })
    .await;
    let (_, v) = call(&server, ann, "GET", "/v1/approvals", None).await;
    assert_eq!(inbox(&v), ["ann's"]);
    // Only bob (or an operator) shares his session; shared, ann sees and drives it.
    let (s, body) = call(
        &server,
        ann,
        "PATCH",
        &format!("/v1/sessions/{a}"),
        Some(json!({"shared_with": ["nobody"]})),
    )
    .await;
    assert_eq!(
        (s, body["code"].as_str()),
        (422, Some("unprocessable_entity")),
        "{body}"
    );
    let (s, _) = call(
        &server,
        bob,
        "PATCH",
        &format!("/v1/sessions/{b}"),
        Some(json!({"shared_with": ["ann"]})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, detail) = call(&server, ann, "GET", &format!("/v1/sessions/{b}"), None).await;
    assert_eq!(s, 200);
    assert_eq!(detail["shared_with"], json!(["ann"]));
    assert_eq!(detail["session"]["owner"], "bob");
    let (s, body) = call(
        &server,
        ann,
        "PATCH",
        &format!("/v1/sessions/{b}"),
        Some(json!({"shared_with": []})),
    )
    .await;
    assert_eq!(
        (s, body["code"].as_str()),
        (403, Some("forbidden")),
        "only the owner shares: {body}"
    );
    let (_, v) = call(&server, ann, "GET", "/v1/approvals", None).await;
    assert_eq!(inbox(&v), ["ann's", "bob's"]);
    let run = v["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["session_id"] == b.as_str())
        .unwrap()["run_id"]
        .clone();
    let (s, body) = call(
        &server,
        ann,
        "POST",
        &format!("/v1/sessions/{b}/tools/decisions"),
        Some(json!({"run_id": run, "decisions": {"call_1": {"action": "reject"}}})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (_, list) = call(&server, ann, "GET", "/v1/sessions", None).await;
    assert_eq!(titles(&list), ["ann's", "bob's"]);
    // Shared with everyone: every member sees it; unshared by an operator: gone again.
    let (s, _) = call(
        &server,
        ops,
        "PATCH",
        &format!("/v1/sessions/{a}"),
        Some(json!({"shared_with": ["*"]})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        call(&server, bob, "GET", &format!("/v1/sessions/{a}"), None)
            .await
            .0,
        200
    );
    let (s, _) = call(
        &server,
        ops,
        "PATCH",
        &format!("/v1/sessions/{b}"),
        Some(json!({"shared_with": []})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        call(&server, ann, "GET", &format!("/v1/sessions/{b}"), None)
            .await
            .0,
        404
    );
    // The viewer reads all and changes nothing.
    assert_eq!(
        call(&server, vic, "GET", &format!("/v1/sessions/{b}"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        call(
            &server,
            vic,
            "PATCH",
            &format!("/v1/sessions/{b}"),
            Some(json!({"title": "x"}))
        )
        .await
        .0,
        403
    );
    // The shares are audited.
    let (_, audit) = call(
        &server,
        TOKEN,
        "GET",
        "/v1/audit?action=session.share",
        None,
    )
    .await;
    let who: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["actor"].as_str().unwrap())
        .collect();
    assert_eq!(who, ["bob", "ops", "ops"], "{audit}");
}

/// `[[approvals.rules]]` with `second_person`: the person whose message caused a call may
/// not allow it, another approver may; each is shown only what they may decide, and the
/// decision is signed and audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_person_rule_refuses_the_requester_and_accepts_another_approver() {
    use switchboard_test_support::mock_llm::{MockLlm, MockReply};
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        "[[approvals.rules]]\ntool = \"run_*\"\nroles = [\"member\", \"operator\"]\nsecond_person = true\n",
    )
    .unwrap();
    let server = common::start(
        &dir.path().join("data"),
        &llm.base_url(),
        &[("SWITCHBOARD_CONFIG", config.to_str().unwrap())],
    )
    .await;
    let mut tokens = std::collections::HashMap::new();
    for (name, role) in [
        ("ann", Role::Member),
        ("bob", Role::Member),
        ("adm", Role::Admin),
    ] {
        add_user(&server, name, role).await;
        tokens.insert(name, token_for(&server, name, role.scopes()).await);
    }
    let (ann, bob, adm) = (&tokens["ann"], &tokens["bob"], &tokens["adm"]);
    let (_, s) = call(
        &server,
        ann,
        "POST",
        "/v1/sessions",
        Some(json!({"title": "deploy", "cwd": dir.path()})),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_string();
    let (st, _) = call(
        &server,
        ann,
        "PATCH",
        &format!("/v1/sessions/{id}"),
        Some(json!({"shared_with": ["bob"]})),
    )
    .await;
    assert_eq!(st, 200);
    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        json!({"command": "echo deployed"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let (st, sent) = call(
        &server,
        ann,
        "POST",
        &format!("/v1/sessions/{id}/messages"),
        Some(json!({"message": {"role": "user", "content": "deploy it"}})),
    )
    .await;
    assert_eq!(st, 200, "{sent}");
    let run = sent["run_id"].clone();
    // Bob's inbox has it (asked by ann); ann's does not: she may not decide it.
    let waiting = eventually("the call waiting", || async {
        let (_, v) = call(&server, bob, "GET", "/v1/approvals", None).await;
        v["approvals"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(waiting["requested_by"], "ann");
    let (_, mine) = call(&server, ann, "GET", "/v1/approvals", None).await;
    assert_eq!(mine["approvals"], json!([]), "{mine}");
    // The admin is not among the rule's roles.
    let decide = json!({"run_id": run, "decisions": {"call_1": {"action": "accept"}}});
    let (st, body) = call(
        &server,
        adm,
        "POST",
        &format!("/v1/sessions/{id}/tools/decisions"),
        Some(decide.clone()),
    )
    .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("members, operators only"),
        "{body}"
    );
    // Ann asked for it: refused, and the call still waits.
    let (st, body) = call(
        &server,
        ann,
        "POST",
        &format!("/v1/sessions/{id}/tools/decisions"),
        Some(decide.clone()),
    )
    .await;
    assert_eq!(
        (st, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap().contains("second person"),
        "{body}"
    );
    let (_, pending) = call(
        &server,
        bob,
        "GET",
        &format!("/v1/sessions/{id}/tools/pending"),
        None,
    )
    .await;
    assert_eq!(pending["tool_calls"].as_array().unwrap().len(), 1);
    // Bob allows it: the command runs, signed with his name.
    let (st, body) = call(
        &server,
        bob,
        "POST",
        &format!("/v1/sessions/{id}/tools/decisions"),
        Some(decide),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    eventually("the command's output", || async {
        let (_, t) = call(
            &server,
            ann,
            "GET",
            &format!("/v1/sessions/{id}/messages"),
            None,
        )
        .await;
        t.to_string().contains("deployed").then_some(())
    })
    .await;
    let mut stream = common::client(&server).subscribe(id.parse().unwrap(), Some(0));
    let seen = common::until_run_ends(&mut stream, run.as_str().unwrap().parse().unwrap()).await;
    let events = serde_json::to_string(&seen).unwrap();
    assert!(events.contains("\"decided_by\":\"bob\""), "{events}");
    let (_, audit) = call(
        &server,
        TOKEN,
        "GET",
        "/v1/audit?action=approval.decide",
        None,
    )
    .await;
    let e = &audit["entries"][0];
    assert_eq!(
        (e["actor"].as_str(), e["target"].as_str()),
        (Some("bob"), Some(id.as_str())),
        "{audit}"
    );
    assert_eq!(e["detail"]["decisions"]["call_1"], "accept");
}

/// Waits (up to 30 s) for a bot message in `chat` that satisfies `f`.
async fn bot_says(
    tg: &switchboard_test_support::fake_telegram::FakeTelegram,
    chat: i64,
    what: &str,
    f: impl Fn(&switchboard_test_support::fake_telegram::BotMessage) -> bool,
) -> switchboard_test_support::fake_telegram::BotMessage {
    let start = std::time::Instant::now();
    loop {
        if let Some(m) = tg.bot_messages(chat).into_iter().find(|m| f(m)) {
            return m;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no {what} in chat {chat}: {:?}",
            tg.bot_messages(chat)
                .iter()
                .map(|m| &m.text)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// People link their chat accounts with `/link CODE`; from then on what they write runs as
/// them, and their presses decide as them — so a `second_person` rule refuses the one who
/// asked (privately, the prompt waiting on) and accepts the other, in a Telegram group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_chat_linked_people_act_as_themselves_and_a_second_person_decides() {
    use switchboard_test_support::fake_telegram::FakeTelegram;
    use switchboard_test_support::mock_llm::{MockLlm, MockReply};
    let (tg, llm) = (FakeTelegram::start().await, MockLlm::start().await);
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        "[[approvals.rules]]\ntool = \"run_command\"\nroles = [\"member\"]\nsecond_person = true\n",
    )
    .unwrap();
    let base = tg.base_url();
    let server = common::start(
        &dir.path().join("data"),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_CONFIG", config.to_str().unwrap()),
            ("SWITCHBOARD_DEFAULT_CWD", ws.path().to_str().unwrap()),
            ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", &base),
            ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "1,2,4,-100"),
            ("SWITCHBOARD_TELEGRAM_APPROVERS", "user:ann,user:bob"),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
        ],
    )
    .await;
    let mut tokens = std::collections::HashMap::new();
    for name in ["ann", "bob"] {
        add_user(&server, name, Role::Member).await;
        tokens.insert(name, token_for(&server, name, Role::Member.scopes()).await);
    }
    // Each gets a code and sends it to the bot in a DM.
    for (user, tg_id, first) in [("ann", 1, "alice"), ("bob", 2, "bob")] {
        let (s, code) = call(&server, &tokens[user], "POST", "/v1/me/link-code", None).await;
        assert_eq!(s, 200, "{code}");
        let code = code["code"].as_str().unwrap().to_string();
        tg.dm(tg_id, first, &format!("/link {code}"));
        bot_says(&tg, tg_id, "the link's answer", |m| {
            m.text.contains(&format!("you act as {user} (member)"))
        })
        .await;
        // A code works once.
        tg.dm(tg_id, first, &format!("/link {code}"));
        bot_says(&tg, tg_id, "a used code refused", |m| {
            m.text.contains("unknown, used or expired")
        })
        .await;
    }
    let (_, ann_user) = call(&server, TOKEN, "GET", "/v1/users/ann", None).await;
    assert_eq!(
        ann_user["links"],
        json!([{"platform": "telegram", "user_id": "1"}])
    );

    // Alice (ann) asks in the group; the command waits for approval.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo chat-deployed"}),
    ));
    llm.push(MockReply::text(&["Deployed."]));
    tg.group_message(
        -100,
        1,
        "alice",
        "@switchboard_test_bot deploy",
        None,
        false,
    );
    let prompt = bot_says(&tg, -100, "the approval prompt", |m| !m.buttons.is_empty()).await;
    let allow = prompt
        .buttons
        .iter()
        .find(|(_, data)| data.ends_with(":y"))
        .unwrap()
        .1
        .clone();
    // Her own press is refused, privately; the prompt still waits.
    let press = tg.press(-100, prompt.message_id, 1, "alice", &allow);
    tg.wait_until(std::time::Duration::from_secs(30), "alice is told", |t| {
        t.calls("answerCallbackQuery").iter().any(|c| {
            c["callback_query_id"] == press.as_str()
                && c["text"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("second person")
        })
    })
    .await;
    let (_, sessions) = call(&server, TOKEN, "GET", "/v1/sessions", None).await;
    let sid = sessions["sessions"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(sessions["sessions"][0]["owner"], "ann", "{sessions}");
    let (_, pending) = call(
        &server,
        TOKEN,
        "GET",
        &format!("/v1/sessions/{sid}/tools/pending"),
        None,
    )
    .await;
    assert_eq!(
        pending["tool_calls"].as_array().unwrap().len(),
        1,
        "{pending}"
    );
    // Approvers are named as people (`user:NAME`): someone linked to no one is not one.
    let press = tg.press(-100, prompt.message_id, 3, "carol", &allow);
    tg.wait_until(std::time::Duration::from_secs(30), "carol is told", |t| {
        t.calls("answerCallbackQuery").iter().any(|c| {
            c["callback_query_id"] == press.as_str()
                && c["text"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("an approver")
        })
    })
    .await;
    // Bob's press allows it.
    tg.press(-100, prompt.message_id, 2, "bob", &allow);
    bot_says(&tg, -100, "the reply", |m| m.text.contains("Deployed.")).await;
    bot_says(&tg, -100, "the prompt's note", |m| {
        m.message_id == prompt.message_id && m.text.contains("Allowed by bob")
    })
    .await;
    // The chat's session is ann's, who started it; the decision is bob's, from the chat.
    let (_, mine) = call(&server, &tokens["ann"], "GET", "/v1/sessions", None).await;
    assert_eq!(mine["total"], 1, "{mine}");
    let (_, audit) = call(
        &server,
        TOKEN,
        "GET",
        "/v1/audit?action=approval.decide",
        None,
    )
    .await;
    let e = &audit["entries"][0];
    assert_eq!(
        (e["actor"].as_str(), e["via"].as_str()),
        (Some("bob"), Some("chat")),
        "{audit}"
    );
    let (_, links) = call(&server, TOKEN, "GET", "/v1/audit?action=chat.link", None).await;
    assert_eq!(links["entries"].as_array().unwrap().len(), 2);
    // A viewer's chat account writes: refused in words, for good (not retried forever),
    // and the chat goes on.
    add_user(&server, "vic", Role::Viewer).await;
    let (s, _) = call(
        &server,
        TOKEN,
        "POST",
        "/v1/links",
        Some(json!({"platform": "telegram", "user_id": "4", "user": "vic"})),
    )
    .await;
    assert_eq!(s, 200);
    tg.dm(4, "vic", "run something");
    bot_says(&tg, 4, "the refusal", |m| {
        m.text.contains("could not be given to the agent") && m.text.contains("sessions:write")
    })
    .await;
}
