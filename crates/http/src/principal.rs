//! Who is calling, and whether they may: one layer in front of every route.
//!
//! [`authenticate`] turns the request's bearer credential into a [`Principal`] — the server's
//! own token is the built-in admin; anything else is asked of the [`Authenticator`]
//! (personal API tokens) — and puts it in the request's extensions. It then looks the
//! operation up in the [`ScopeTable`], which is read from the OpenAPI document (each
//! operation's `bearer` security scopes), and answers 403 `forbidden`, naming the scope,
//! when the principal lacks it. The document is the one source of what each operation
//! needs: a route that is not in it is the server token's (and an admin's) alone, so a new
//! route cannot be left open by forgetting to declare it.
//!
//! A credential neither recognizes (a session's own token, a wrong token) passes through
//! without a principal: the routes' own checks ([`require_bearer`](crate::require_bearer),
//! [`authorized`]) answer 401 or accept a session token as before.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Extensions, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use subtle::ConstantTimeEq;
use switchboard_protocol::ErrorCode;
use switchboard_protocol::people::{Principal, Scope};

use crate::ApiError;

/// Resolves credentials other than the server's token.
pub trait Authenticator: Send + Sync + 'static {
    /// The principal of `token`: `Ok(None)` when it is not a kind this authenticator knows
    /// (it passes on, without a principal), an error (401) when it is one that is refused.
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Principal>, ApiError>>;

    /// The person a chat identity (`platform:user_id`, the
    /// [`ON_BEHALF_OF`](switchboard_protocol::people::ON_BEHALF_OF) header a surface holding
    /// the server token sends) acts as; `Ok(None)` if it is linked to no one.
    fn on_behalf_of<'a>(
        &'a self,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Principal>, ApiError>>;

    /// Whether what `p` authenticated with still holds (not revoked, signed out, removed):
    /// asked every [`STREAM_RECHECK`] while a stream it opened is open.
    fn still_valid<'a>(&'a self, p: &'a Principal) -> BoxFuture<'a, bool>;
}

/// How often an event stream opened by a person's credential checks that it still holds;
/// the stream ends within this long of a revocation, a sign-out or the user's removal.
pub const STREAM_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing (health, sign-in, platform webhooks that check their own signatures).
    Public,
    /// Any principal (who am I, my own tokens).
    SignedIn,
    /// This scope.
    Scope(Scope),
}

/// What each operation of the OpenAPI document needs, by method and path template.
#[derive(Debug, Default)]
pub struct ScopeTable {
    paths: matchit::Router<HashMap<Method, Access>>,
    /// Each operation once, for listing (`METHOD /path` → access), in document order.
    operations: Vec<(Method, String, Access)>,
}

/// Why the document could not be read as a scope table.
#[derive(Debug, thiserror::Error)]
pub enum ScopeTableError {
    #[error("{method} {path}: {problem}")]
    Operation {
        method: String,
        path: String,
        problem: String,
    },
    #[error("path {path}: {problem}")]
    Path { path: String, problem: String },
}

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

impl ScopeTable {
    /// Reads every operation's security from an OpenAPI document (as JSON):
    /// `security: [{}]` (or `[]`) is public, `[{"bearer": []}]` any principal,
    /// `[{"bearer": ["sessions:read"]}]` that scope. An operation without `security`, or
    /// with a scope that is not one, is an error: the document must say.
    pub fn from_openapi(doc: &serde_json::Value) -> Result<Self, ScopeTableError> {
        let mut table = ScopeTable::default();
        let Some(paths) = doc.get("paths").and_then(|p| p.as_object()) else {
            return Ok(table);
        };
        for (path, item) in paths {
            let mut methods = HashMap::new();
            for m in METHODS {
                let Some(op) = item.get(m) else { continue };
                let method =
                    Method::from_bytes(m.to_ascii_uppercase().as_bytes()).unwrap_or(Method::GET);
                let err = |problem: String| ScopeTableError::Operation {
                    method: method.to_string(),
                    path: path.clone(),
                    problem,
                };
                let access = access_of(op.get("security")).map_err(err)?;
                methods.insert(method.clone(), access);
                table.operations.push((method, path.clone(), access));
            }
            table
                .paths
                .insert(path.clone(), methods)
                .map_err(|e| ScopeTableError::Path {
                    path: path.clone(),
                    problem: e.to_string(),
                })?;
        }
        Ok(table)
    }

    /// What `method path` needs; `None` when the document has no such operation.
    pub fn access(&self, method: &Method, path: &str) -> Option<Access> {
        let m = self.paths.at(path).ok()?;
        let method = if method == Method::HEAD && !m.value.contains_key(&Method::HEAD) {
            &Method::GET
        } else {
            method
        };
        m.value.get(method).copied()
    }

    /// Every operation with what it needs.
    pub fn operations(&self) -> &[(Method, String, Access)] {
        &self.operations
    }
}

fn access_of(security: Option<&serde_json::Value>) -> Result<Access, String> {
    let Some(reqs) = security.and_then(|s| s.as_array()) else {
        return Err("no `security`: say which scope it needs, or `security(())` for none".into());
    };
    if reqs.is_empty()
        || reqs
            .iter()
            .any(|r| r.as_object().is_some_and(|o| o.is_empty()))
    {
        return Ok(Access::Public);
    }
    let mut scopes = Vec::new();
    for r in reqs {
        if let Some(list) = r.get("bearer").and_then(|b| b.as_array()) {
            for s in list {
                let s = s.as_str().unwrap_or_default();
                scopes.push(Scope::parse(s).ok_or_else(|| format!("unknown scope {s:?}"))?);
            }
        }
    }
    match scopes.as_slice() {
        [] => Ok(Access::SignedIn),
        [one] => Ok(Access::Scope(*one)),
        more => Err(format!("one scope per operation, not {more:?}")),
    }
}

/// The state of [`authenticate`].
#[derive(Clone)]
pub struct Auth {
    server_token: Arc<str>,
    table: Arc<ScopeTable>,
    authenticator: Arc<dyn Authenticator>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").finish_non_exhaustive()
    }
}

impl Auth {
    pub fn new(
        server_token: impl Into<String>,
        table: Arc<ScopeTable>,
        authenticator: Arc<dyn Authenticator>,
    ) -> Self {
        Self {
            server_token: Arc::from(server_token.into()),
            table,
            authenticator,
        }
    }
}

/// The 403 of a principal without `scope`: names it in the message and in `scope`.
pub fn missing_scope(scope: Scope, method: &Method, path: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Forbidden,
        format!("{method} {path} needs the scope `{scope}`, which this credential does not have"),
    )
    .with_field("scope", serde_json::Value::String(scope.as_str().into()))
}

/// Middleware (apply it in front of every route, inside anything that turns a console
/// cookie into a credential): resolves the principal and checks the operation's scope.
pub async fn authenticate(State(auth): State<Auth>, mut req: Request, next: Next) -> Response {
    if req.extensions().get::<Principal>().is_none()
        && let Ok(token) = crate::bearer_value(req.headers())
    {
        if bool::from(token.as_bytes().ct_eq(auth.server_token.as_bytes())) {
            // A surface holding the server token (a chat channel) may act for a chat
            // identity: the person linked to it, if anyone.
            let person = match req
                .headers()
                .get(switchboard_protocol::people::ON_BEHALF_OF)
                .and_then(|v| v.to_str().ok())
            {
                Some(identity) => {
                    let identity = identity.to_owned();
                    match auth.authenticator.on_behalf_of(&identity).await {
                        Ok(p) => p,
                        Err(e) => return e.into_response(),
                    }
                }
                None => None,
            };
            req.extensions_mut()
                .insert(person.unwrap_or_else(Principal::server));
        } else {
            let token = token.to_owned();
            match auth.authenticator.authenticate(&token).await {
                Ok(Some(p)) => {
                    req.extensions_mut().insert(p);
                }
                Ok(None) => {}
                Err(e) => return e.into_response(),
            }
        }
    }
    let person = req
        .extensions()
        .get::<Principal>()
        .filter(|p| p.credential != switchboard_protocol::people::Credential::ServerToken)
        .cloned();
    if let Some(p) = req.extensions().get::<Principal>() {
        let (method, path) = (req.method(), req.uri().path());
        let needed = match auth.table.access(method, path) {
            Some(Access::Public | Access::SignedIn) => None,
            Some(Access::Scope(s)) => Some(s),
            // Not in the document: the server token's and admins' alone.
            None => Some(Scope::Admin),
        };
        if let Some(s) = needed
            && !p.has(s)
        {
            return missing_scope(s, method, path).into_response();
        }
    }
    let resp = next.run(req).await;
    match person {
        Some(p) => end_with_credential(resp, auth, p),
        None => resp,
    }
}

/// An event stream opened by a person ends when their credential stops holding: a
/// revocation reaches the streams already open too, not only the next request.
fn end_with_credential(resp: Response, auth: Auth, p: Principal) -> Response {
    use futures::StreamExt as _;
    let stream = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !stream {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let ended = async move {
        loop {
            tokio::time::sleep(STREAM_RECHECK).await;
            if !auth.authenticator.still_valid(&p).await {
                tracing::info!(user = %p.user, "an event stream ends: its credential no longer holds");
                return;
            }
        }
    };
    Response::from_parts(
        parts,
        axum::body::Body::from_stream(body.into_data_stream().take_until(ended)),
    )
}

/// `Ok` when the request has a principal (put there by [`authenticate`], which checked its
/// scope) or carries the bearer `token`; else 401 as [`check_bearer`](crate::check_bearer).
pub fn authorized(
    extensions: &Extensions,
    headers: &HeaderMap,
    token: &str,
) -> Result<(), ApiError> {
    if extensions.get::<Principal>().is_some() {
        return Ok(());
    }
    crate::check_bearer(headers, token)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_reads_each_operation_s_scope() {
        let doc = json!({"paths": {
            "/v1/health": {"get": {"security": [{}]}},
            "/v1/me": {"get": {"security": [{"bearer": []}]}},
            "/v1/sessions": {
                "get": {"security": [{"bearer": ["sessions:read"]}]},
                "post": {"security": [{"bearer": ["sessions:write"]}]}
            },
            "/v1/sessions/{id}/events": {"get": {"security": [{}, {"bearer": ["sessions:read"]}]}}
        }});
        let t = ScopeTable::from_openapi(&doc).unwrap();
        assert_eq!(t.access(&Method::GET, "/v1/health"), Some(Access::Public));
        assert_eq!(t.access(&Method::GET, "/v1/me"), Some(Access::SignedIn));
        assert_eq!(
            t.access(&Method::POST, "/v1/sessions"),
            Some(Access::Scope(Scope::SessionsWrite))
        );
        assert_eq!(
            t.access(&Method::HEAD, "/v1/sessions"),
            Some(Access::Scope(Scope::SessionsRead))
        );
        assert_eq!(t.access(&Method::DELETE, "/v1/sessions"), None);
        assert_eq!(t.access(&Method::GET, "/v1/nothing"), None);
        assert_eq!(
            t.access(&Method::GET, "/v1/sessions/abc/events"),
            Some(Access::Public)
        );
        assert_eq!(t.operations().len(), 5);
    }

    #[test]
    fn an_operation_that_does_not_say_is_refused() {
        for bad in [
            json!({"paths": {"/x": {"get": {}}}}),
            json!({"paths": {"/x": {"get": {"security": [{"bearer": ["nope"]}]}}}}),
            json!({"paths": {"/x": {"get": {"security": [{"bearer": ["admin", "sessions:read"]}]}}}}),
        ] {
            assert!(ScopeTable::from_openapi(&bad).is_err(), "{bad}");
        }
    }
}
