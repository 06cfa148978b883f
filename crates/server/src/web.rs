//! The web console: static files embedded in the binary, sign-in with the token or a
//! one-time login link (an HttpOnly, SameSite=Strict session cookie), and the guard that
//! protects browsers: `Host` and `Origin` checks, and cookie → bearer for every API route.
//!
//! The session cookie is stateless: `v1.<nonce>.<HMAC-SHA256(token, nonce)>`. It survives a
//! restart and dies with the token.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use switchboard_protocol::{ErrorBody, ErrorCode};

use crate::ApiError;

/// Name of the console's session cookie.
pub const COOKIE: &str = "switchboard_session";
/// How long a console sign-in lasts.
const COOKIE_MAX_AGE: Duration = Duration::from_secs(30 * 86_400);
/// How long the one-time login link printed by `serve` works.
pub const LOGIN_LINK_TTL: Duration = Duration::from_secs(15 * 60);

const INDEX_HTML: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const MD_JS: &str = include_str!("../web/md.js");
const SETTINGS_JS: &str = include_str!("../web/settings.js");
const TEAM_JS: &str = include_str!("../web/team.js");
const USAGE_JS: &str = include_str!("../web/usage.js");
const SEARCH_JS: &str = include_str!("../web/search.js");
const LEDGER_JS: &str = include_str!("../web/ledger.js");
const STYLE_CSS: &str = include_str!("../web/style.css");
const HL_JS: &str = include_str!("../web/hl.js");
const HL_CSS: &str = include_str!("../web/hl.css");
const ICON_SVG: &str = include_str!("../web/icon.svg");
const ICON_192: &[u8] = include_bytes!("../web/icon-192.png");
const ICON_512: &[u8] = include_bytes!("../web/icon-512.png");
const ICON_MASKABLE: &[u8] = include_bytes!("../web/icon-maskable-512.png");
const APPLE_TOUCH_ICON: &[u8] = include_bytes!("../web/apple-touch-icon.png");
const MANIFEST: &str = include_str!("../web/manifest.webmanifest");
const SW_JS: &str = include_str!("../web/sw.js");

/// The content type of the console's scripts.
const JS: &str = "text/javascript; charset=utf-8";

/// The console's files: path under `/assets/`, body, content type.
const ASSETS: [(&str, &[u8], &str); 15] = [
    ("app.js", APP_JS.as_bytes(), JS),
    ("md.js", MD_JS.as_bytes(), JS),
    ("settings.js", SETTINGS_JS.as_bytes(), JS),
    ("team.js", TEAM_JS.as_bytes(), JS),
    ("usage.js", USAGE_JS.as_bytes(), JS),
    ("search.js", SEARCH_JS.as_bytes(), JS),
    ("ledger.js", LEDGER_JS.as_bytes(), JS),
    ("hl.js", HL_JS.as_bytes(), JS),
    ("style.css", STYLE_CSS.as_bytes(), "text/css; charset=utf-8"),
    ("hl.css", HL_CSS.as_bytes(), "text/css; charset=utf-8"),
    ("icon.svg", ICON_SVG.as_bytes(), "image/svg+xml"),
    ("icon-192.png", ICON_192, "image/png"),
    ("icon-512.png", ICON_512, "image/png"),
    ("icon-maskable-512.png", ICON_MASKABLE, "image/png"),
    ("apple-touch-icon.png", APPLE_TOUCH_ICON, "image/png"),
];

/// The service worker with the name of its cache: the hash of everything it caches, so a
/// new build replaces the cached console (and only then).
static SW_BODY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use sha2::Digest as _;
    let mut hash = Sha256::new();
    for part in [INDEX_HTML.as_bytes(), MANIFEST.as_bytes()]
        .into_iter()
        .chain(ASSETS.iter().map(|(_, body, _)| *body))
    {
        hash.update(part);
        hash.update([0]);
    }
    let digest = hash.finalize();
    let version: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    SW_JS.replace("__CACHE_VERSION__", &version)
});

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// What the console needs to know.
#[derive(Clone)]
pub struct ConsoleConfig {
    pub token: String,
    /// `host:port` or `host` (any port) entries a browser may use to reach this server.
    pub allowed_hosts: Vec<String>,
    /// Configured ACP agents, offered as session backends.
    pub agents: Vec<String>,
    /// The model and permission mode a session gets unless it asks for others, as they are
    /// now (the settings change them while serving): `Engine::defaults`.
    pub defaults: Arc<dyn Fn() -> switchboard_engine::SessionDefaults + Send + Sync>,
    pub default_cwd: String,
    /// The team, for sign-in per person (none: only the server token signs in).
    pub team: Option<switchboard_engine::Team>,
    /// `[auth.oidc]`: sign-in through an identity provider.
    pub oidc: Option<Arc<crate::oidc::Oidc>>,
}

impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field("token", &"[redacted]")
            .field("allowed_hosts", &self.allowed_hosts)
            .finish_non_exhaustive()
    }
}

/// The hosts a server listening on `addr` answers to as itself: the address, and for a
/// loopback or unspecified address `localhost`, `127.0.0.1` and `[::1]`, with its port.
pub fn default_allowed_hosts(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut out = vec![addr.to_string()];
    let ip = addr.ip();
    if ip.is_loopback() || ip.is_unspecified() {
        for h in ["localhost", "127.0.0.1", "[::1]"] {
            out.push(format!("{h}:{port}"));
        }
    }
    out
}

/// The console's state: config plus the pending one-time login code.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    config: ConsoleConfig,
    /// Lower-case `host:port` entries, and `host` entries that allow any port.
    hosts: HashSet<String>,
    login: Mutex<Option<(String, Instant)>>,
    /// Failed password sign-ins per user and address.
    throttle: crate::signin::Throttle,
}

impl Console {
    pub fn new(config: ConsoleConfig) -> Self {
        let hosts = config
            .allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        Self {
            inner: Arc::new(Inner {
                config,
                hosts,
                login: Mutex::new(None),
                throttle: crate::signin::Throttle::default(),
            }),
        }
    }

    /// A new one-time login code (replacing any earlier one), valid for
    /// [`LOGIN_LINK_TTL`]. Print `…/login?code=CODE`; never log it.
    pub fn new_login_code(&self) -> String {
        let code = random_hex(24);
        *self.lock() = Some((code.clone(), Instant::now() + LOGIN_LINK_TTL));
        code
    }

    pub(crate) fn team(&self) -> Option<&switchboard_engine::Team> {
        self.inner.config.team.as_ref()
    }

    pub(crate) fn oidc(&self) -> Option<&crate::oidc::Oidc> {
        self.inner.config.oidc.as_deref()
    }

    /// `value` with a MAC under the server token (for state kept in the browser).
    pub(crate) fn sign(&self, value: &str) -> String {
        format!("{value}.{}", self.mac(&format!("signed:{value}")))
    }

    /// The value of what [`Console::sign`] signed, if the MAC holds.
    pub(crate) fn verify(&self, signed: &str) -> Option<String> {
        let (value, mac) = signed.rsplit_once('.')?;
        let want = self.mac(&format!("signed:{value}"));
        (!want.is_empty() && bool::from(want.as_bytes().ct_eq(mac.as_bytes())))
            .then(|| value.to_string())
    }

    /// `Set-Cookie` of a person's console session.
    pub(crate) fn session_cookie(&self, headers: &HeaderMap, secret: &str) -> HeaderValue {
        self.cookie_header(headers, secret)
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Option<(String, Instant)>> {
        self.inner.login.lock()
    }

    /// Takes the login code if `given` is it and it has not expired (one use only).
    fn redeem(&self, given: &str) -> bool {
        let mut slot = self.lock();
        let ok = match slot.as_ref() {
            Some((code, until)) => {
                Instant::now() < *until && bool::from(code.as_bytes().ct_eq(given.as_bytes()))
            }
            None => false,
        };
        if ok {
            *slot = None;
        }
        ok
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        if self.inner.hosts.contains(&host) {
            return true;
        }
        // An entry without a port allows the name on any port.
        let name = match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                name
            }
            _ => host.as_str(),
        };
        self.inner.hosts.contains(name)
    }

    fn mac(&self, nonce: &str) -> String {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        match Hmac::<Sha256>::new_from_slice(self.inner.config.token.as_bytes()) {
            Ok(mut m) => {
                m.update(b"switchboard-console-session:");
                m.update(nonce.as_bytes());
                hex::encode(m.finalize().into_bytes())
            }
            Err(_) => String::new(),
        }
    }

    fn new_cookie_value(&self) -> String {
        let nonce = random_hex(16);
        format!("v1.{nonce}.{}", self.mac(&nonce))
    }

    fn cookie_valid(&self, value: &str) -> bool {
        let mut parts = value.split('.');
        let (Some("v1"), Some(nonce), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        let want = self.mac(nonce);
        !want.is_empty() && bool::from(want.as_bytes().ct_eq(mac.as_bytes()))
    }

    fn set_cookie(&self, headers: &HeaderMap) -> HeaderValue {
        self.cookie_header(headers, &self.new_cookie_value())
    }

    /// `Set-Cookie` of the session cookie with `value`.
    fn cookie_header(&self, headers: &HeaderMap, value: &str) -> HeaderValue {
        let secure = headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"));
        let v = format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            value,
            COOKIE_MAX_AGE.as_secs(),
            if secure { "; Secure" } else { "" }
        );
        HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

fn random_hex(bytes: usize) -> String {
    let buf: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    hex::encode(buf)
}

pub(crate) fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

fn host_of(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
}

/// Paths that belong to the console (and so are browser-only).
fn console_path(path: &str) -> bool {
    path == "/"
        || path == "/login"
        || path == "/manifest.webmanifest"
        || path == "/sw.js"
        || path.starts_with("/assets/")
        || path.starts_with("/v1/console/")
}

/// The guard in front of every route (apply it as the outermost layer):
///
/// 1. A request with an `Origin` must come from this server's own origin (same host and
///    port as its `Host`, and that host allowed); else 403 `origin_not_allowed`.
/// 2. Browser requests — console pages and anything carrying the session cookie — must
///    name an allowed `Host`; else 403 `host_not_allowed` (DNS rebinding).
/// 3. A valid session cookie on a request without `Authorization` signs the request in: the
///    server token's (`v1.`) becomes `Authorization: Bearer <token>`; a person's (`v2.`,
///    a console session in the store) becomes their principal, whose scopes the
///    authentication layer then checks — so every API route accepts a signed-in browser.
pub async fn guard(State(console): State<Console>, mut req: Request, next: Next) -> Response {
    let host = host_of(&req);
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let same = match (authority, host.as_deref()) {
            (Some(a), Some(h)) => a.eq_ignore_ascii_case(h) && console.host_allowed(h),
            _ => false,
        };
        if !same {
            return ApiError::new(
                ErrorCode::OriginNotAllowed,
                format!(
                    "requests from origin {origin:?} are not accepted: only this server's own pages may call it"
                ),
            )
            .into_response();
        }
    }
    let has_auth = req.headers().contains_key(header::AUTHORIZATION);
    let cookie = cookie_value(req.headers(), COOKIE).map(str::to_string);
    if console_path(req.uri().path()) || (cookie.is_some() && !has_auth) {
        let ok = host.as_deref().is_some_and(|h| console.host_allowed(h));
        if !ok {
            return ApiError::new(
                ErrorCode::HostNotAllowed,
                format!(
                    "Host {:?} is not this server's; to reach it under that name add it to [server] allowed_hosts (SWITCHBOARD_ALLOWED_HOSTS)",
                    host.unwrap_or_default()
                ),
            )
            .into_response();
        }
    }
    if !has_auth && let Some(c) = cookie {
        if c.starts_with(crate::signin::PERSON_COOKIE) {
            if let Some(team) = &console.inner.config.team
                && let Some(p) = crate::signin::person(team, &c).await
            {
                req.extensions_mut().insert(p);
            }
        } else if console.cookie_valid(&c)
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", console.inner.config.token))
        {
            req.headers_mut().insert(header::AUTHORIZATION, v);
        }
    }
    next.run(req).await
}

/// The OpenAPI document of the console's routes.
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        index,
        asset,
        manifest,
        service_worker,
        login_link,
        login,
        logout,
        me,
        sign_in_options,
        crate::oidc::start,
        crate::oidc::callback
    ),
    components(schemas(LoginBody, Me, SignInOptions, ErrorBody))
)]
pub struct ConsoleDoc;

/// The console's routes: the page, its assets, sign-in and sign-out, `me`.
pub fn router(console: Console) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset))
        .route("/manifest.webmanifest", get(manifest))
        .route("/sw.js", get(service_worker))
        .route("/login", get(login_link))
        .route("/v1/console/login", post(login))
        .route("/v1/console/logout", post(logout))
        .route("/v1/console/me", get(me))
        .route("/v1/console/sign-in", get(sign_in_options))
        .route("/v1/console/oidc/start", get(crate::oidc::start))
        .route("/v1/console/oidc/callback", get(crate::oidc::callback))
        .with_state(console)
}

fn with_security_headers(mut resp: Response, content_type: &'static str) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The console's page.
#[utoipa::path(get, path = "/", security(()), tag = "console",
    responses((status = 200, content_type = "text/html", body = String), (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn index() -> Response {
    with_security_headers(INDEX_HTML.into_response(), "text/html; charset=utf-8")
}

/// The console's scripts, styles and icon.
#[utoipa::path(get, path = "/assets/{file}", security(()), tag = "console", params(("file" = String, Path)),
    responses((status = 200, description = "`app.js`, `md.js`, `settings.js`, `team.js`, `usage.js`, `search.js`, `ledger.js`, `hl.js`, `style.css`, `hl.css`, `icon.svg` or the PNG icons (`icon-192.png`, `icon-512.png`, `icon-maskable-512.png`, `apple-touch-icon.png`)",
               content((String = "text/javascript"), (String = "text/css"), (String = "image/svg+xml"), (Vec<u8> = "image/png"))),
              (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody), (status = 404, description = "`not_found`", body = ErrorBody)))]
async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, body, ty)) => with_security_headers(Bytes::from_static(body).into_response(), ty),
        None => ApiError::new(ErrorCode::NotFound, format!("no asset {file:?}")).into_response(),
    }
}

/// The web app manifest: the console can be added to a phone's home screen.
#[utoipa::path(get, path = "/manifest.webmanifest", security(()), tag = "console",
    responses((status = 200, content_type = "application/manifest+json", body = serde_json::Value),
              (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn manifest() -> Response {
    with_security_headers(MANIFEST.into_response(), "application/manifest+json")
}

/// The console's service worker: caches the console's own files (never an API answer), so
/// an installed console opens without the server and says it cannot reach it.
#[utoipa::path(get, path = "/sw.js", security(()), tag = "console",
    responses((status = 200, content_type = "text/javascript", body = String),
              (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn service_worker() -> Response {
    with_security_headers(
        SW_BODY.as_str().into_response(),
        "text/javascript; charset=utf-8",
    )
}

#[derive(Deserialize)]
struct LinkQuery {
    code: Option<String>,
}

/// `GET /login?code=…`: the one-time link `serve` prints. Signs the browser in once.
#[utoipa::path(get, path = "/login", security(()), tag = "console",
    params(("code" = Option<String>, Query, description = "The one-time code `serve` printed")),
    responses((status = 303, description = "To `/` with the session cookie when the code is good, else to `/?login=expired`"), (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn login_link(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<LinkQuery>,
) -> Response {
    let ok = q.code.as_deref().is_some_and(|c| console.redeem(c));
    let mut resp = Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, if ok { "/" } else { "/?login=expired" })
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::REFERRER_POLICY, "no-referrer")
        .body(axum::body::Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    if ok {
        resp.headers_mut()
            .insert(header::SET_COOKIE, console.set_cookie(&headers));
    }
    resp
}

/// `POST /v1/console/login`: the server's token, or a person's name and password.
#[derive(Deserialize, utoipa::ToSchema)]
pub struct LoginBody {
    /// The server's token (signs in as the built-in admin).
    #[serde(default)]
    token: Option<String>,
    /// A user's name, with `password`.
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// `POST /v1/console/login {"token"}` or `{"user", "password"}`: 204 with the session
/// cookie, or 401. Failed password sign-ins are limited per user and per address (429).
#[utoipa::path(post, path = "/v1/console/login", security(()), tag = "console", request_body = LoginBody,
    responses((status = 204, description = "Signed in: the session cookie is set"),
              (status = 400, description = "`invalid_json`: not JSON of this shape", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: neither `token` alone nor `user` and `password`", body = ErrorBody),
              (status = 401, description = "`invalid_token`, or `invalid_credentials` (unknown user or wrong password, not told apart)", body = ErrorBody),
              (status = 429, description = "`rate_limited`: too many failed sign-ins of this user or from this address lately; `Retry-After` says when to try again", body = ErrorBody), (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody)))]
async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    body: Bytes,
) -> Response {
    let shape = "expected {\"token\": \"…\"} or {\"user\": \"…\", \"password\": \"…\"}";
    let Ok(b) = serde_json::from_slice::<LoginBody>(&body) else {
        return ApiError::new(ErrorCode::InvalidJson, shape).into_response();
    };
    // Well-formed but neither a token nor a user and password: 422, as the document says.
    let unprocessable = || ApiError::new(ErrorCode::UnprocessableEntity, shape).into_response();
    let token = match (b.token, b.user, b.password) {
        (Some(t), None, None) => t,
        (None, Some(user), Some(password)) => {
            let Some(team) = &console.inner.config.team else {
                return ApiError::new(ErrorCode::InvalidCredentials, "this server has no users")
                    .into_response();
            };
            let address = extensions
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|p| p.0.ip());
            return match crate::signin::sign_in(
                team,
                &console.inner.throttle,
                user.trim(),
                &password,
                address,
            )
            .await
            {
                Ok(secret) => {
                    let mut resp = StatusCode::NO_CONTENT.into_response();
                    resp.headers_mut()
                        .insert(header::SET_COOKIE, console.cookie_header(&headers, &secret));
                    resp
                }
                Err(e) => e.into_response(),
            };
        }
        _ => return unprocessable(),
    };
    if !bool::from(
        token
            .trim()
            .as_bytes()
            .ct_eq(console.inner.config.token.as_bytes()),
    ) {
        // Slow down guessing; the token is long and random, so this is plenty.
        tokio::time::sleep(Duration::from_millis(300)).await;
        return ApiError::new(ErrorCode::InvalidToken, "invalid token").into_response();
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, console.set_cookie(&headers));
    resp
}

#[derive(Deserialize, Default)]
struct LogoutQuery {
    /// End every console session of the person, on every device.
    #[serde(default)]
    everywhere: bool,
}

/// Signs the browser out: clears the cookie and, for a person, ends the console session on
/// every instance (with `?everywhere=true` every one of theirs).
#[utoipa::path(post, path = "/v1/console/logout", security(()), tag = "console",
    params(("everywhere" = Option<bool>, Query, description = "End every console session of the person")),
    responses((status = 204, description = "The cookie is cleared"),
              (status = 400, description = "`invalid_query`: `everywhere` is not true or false", body = ErrorBody),
              (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    switchboard_http::Query(q): switchboard_http::Query<LogoutQuery>,
) -> Response {
    if let (Some(team), Some(c)) = (&console.inner.config.team, cookie_value(&headers, COOKIE))
        && let Err(e) = crate::signin::sign_out(team, c, q.everywhere).await
    {
        return e.into_response();
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "switchboard_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    resp
}

/// `GET /v1/console/me`.
#[derive(Serialize, utoipa::ToSchema)]
// Not `Me`: that is `GET /v1/me`'s.
#[schema(as = ConsoleMe)]
pub struct Me {
    signed_in: bool,
    /// Who is signed in (`admin` for the server token).
    user: String,
    role: switchboard_protocol::people::Role,
    /// What they may do.
    scopes: Vec<switchboard_protocol::people::Scope>,
    /// The configured ACP agents, offered as session backends.
    agents: Vec<String>,
    default_model: Option<String>,
    default_cwd: String,
    default_permission_mode: switchboard_protocol::PermissionMode,
    version: String,
}

/// `GET /v1/console/me`: who the console is (after the guard turned a cookie into a bearer
/// header) and what the new-session form offers.
#[utoipa::path(get, path = "/v1/console/me", tag = "console", security((), ("bearer" = [])),
    responses((status = 200, body = Me),
              (status = 401, description = "`unauthorized`: not signed in", body = ErrorBody), (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn me(
    State(console): State<Console>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    let principal = match extensions.get::<switchboard_protocol::people::Principal>() {
        Some(p) => p.clone(),
        None => match server_token_given(&console, &headers) {
            true => switchboard_protocol::people::Principal::server(),
            false => {
                return ApiError::new(ErrorCode::Unauthorized, "not signed in").into_response();
            }
        },
    };
    let c = &console.inner.config;
    let defaults = (c.defaults)();
    Json(Me {
        signed_in: true,
        user: principal.user,
        role: principal.role,
        scopes: principal.scopes,
        agents: c.agents.clone(),
        default_model: defaults.model,
        default_cwd: c.default_cwd.clone(),
        default_permission_mode: defaults.permission_mode,
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
    .into_response()
}

/// `GET /v1/console/sign-in`: how one may sign in here.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SignInOptions {
    /// The words of the identity provider's button, when `[auth.oidc]` is set.
    oidc: Option<String>,
}

/// How the console's sign-in page offers to sign in.
#[utoipa::path(get, path = "/v1/console/sign-in", security(()), tag = "console",
    responses((status = 200, body = SignInOptions),
              (status = 403, description = "`host_not_allowed` (the `Host` is not this server's) or `origin_not_allowed`", body = ErrorBody)))]
async fn sign_in_options(State(console): State<Console>) -> Json<SignInOptions> {
    Json(SignInOptions {
        oidc: console.oidc().map(|o| o.button()),
    })
}

/// Whether the request carries the server token (a router without the authentication
/// layer).
fn server_token_given(console: &Console, headers: &HeaderMap) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    bool::from(
        given
            .trim()
            .as_bytes()
            .ct_eq(console.inner.config.token.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console(hosts: &[&str]) -> Console {
        Console::new(ConsoleConfig {
            token: "secret-token".into(),
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            agents: vec![],
            defaults: Arc::new(|| switchboard_engine::SessionDefaults {
                model: None,
                permission_mode: switchboard_protocol::PermissionMode::WorkspaceWrite,
            }),
            default_cwd: "/".into(),
            team: None,
            oidc: None,
        })
    }

    #[test]
    fn cookies_verify_only_with_the_same_token() {
        let c = console(&[]);
        let v = c.new_cookie_value();
        assert!(c.cookie_valid(&v));
        let other = Console::new(ConsoleConfig {
            token: "another".into(),
            ..c.inner.config.clone()
        });
        assert!(!other.cookie_valid(&v));
        let mut tampered = v.clone();
        tampered.replace_range(3..4, if &v[3..4] == "a" { "b" } else { "a" });
        assert!(!c.cookie_valid(&tampered));
        for bad in ["", "v1", "v1..", "v2.x.y", "v1.zz.yy", &format!("{v}.x")] {
            assert!(!c.cookie_valid(bad), "{bad}");
        }
    }

    #[test]
    fn login_codes_work_once_and_only_the_newest() {
        let c = console(&[]);
        let first = c.new_login_code();
        let second = c.new_login_code();
        assert!(!c.redeem(&first));
        assert!(c.redeem(&second));
        assert!(!c.redeem(&second));
    }

    #[test]
    fn hosts_match_exactly_or_by_name() {
        let c = console(&[
            "127.0.0.1:7070",
            "localhost:7070",
            "switchboard.example.com",
        ]);
        assert!(c.host_allowed("127.0.0.1:7070"));
        assert!(c.host_allowed("LOCALHOST:7070"));
        assert!(!c.host_allowed("localhost:7071"));
        assert!(c.host_allowed("switchboard.example.com"));
        assert!(c.host_allowed("switchboard.example.com:443"));
        assert!(!c.host_allowed("evil.example"));
        assert!(!c.host_allowed("127.0.0.1.evil.example:7070"));
        let d = default_allowed_hosts("0.0.0.0:9000".parse().unwrap());
        assert!(d.contains(&"localhost:9000".to_string()));
        assert!(d.contains(&"[::1]:9000".to_string()));
    }

    #[test]
    fn cookie_header_parsing() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; switchboard_session=v1.x.y; b=2"),
        );
        assert_eq!(cookie_value(&h, COOKIE), Some("v1.x.y"));
        assert_eq!(cookie_value(&h, "c"), None);
    }
}
