//! Console sign-in through an OpenID Connect provider (`[auth.oidc]`, docs/teams.md): the
//! authorization code flow with PKCE, on the `openidconnect` crate (discovery, the token
//! exchange, the ID token's signature, issuer, audience, expiry and nonce).
//!
//! `GET /v1/console/oidc/start` sends the browser to the provider with a fresh state, nonce
//! and PKCE verifier, kept in a short-lived cookie signed with the server token (so any
//! instance can finish the flow); `GET /v1/console/oidc/callback` checks the state against
//! it, exchanges the code, verifies the ID token, maps its claims to a user and a role, and
//! opens a console session for that person. The role comes from a claim (`role_claim`):
//! its value, or values (a `groups` list), mapped through `roles` — the highest role any of
//! them maps to wins — or read as a role name when there is no map; `default_role` when
//! nothing maps, else the sign-in is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse as _,
};
use serde::Deserialize;
use switchboard_protocol::people::Role;
use tokio::sync::OnceCell;

use crate::web::Console;

/// The cookie that carries a sign-in under way.
const FLOW_COOKIE: &str = "switchboard_oidc";
/// How long a sign-in at the provider may take.
const FLOW_TTL: Duration = Duration::from_secs(600);

/// `[auth.oidc]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL (its discovery document is `ISSUER/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// The client's secret (or `SWITCHBOARD_OIDC_CLIENT_SECRET`); none for a public client.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// This server's callback as registered at the provider; default: the address the
    /// browser used, `…/v1/console/oidc/callback`.
    #[serde(default)]
    pub redirect_url: Option<String>,
    /// Scopes asked for besides `openid` (default `profile`, `email`).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The claim that names the user (default `preferred_username`, then `email`, then `sub`).
    #[serde(default)]
    pub username_claim: Option<String>,
    /// The claim that carries the role or the groups (default `groups`).
    #[serde(default)]
    pub role_claim: Option<String>,
    /// A value of the role claim (a group) → a role. Empty: the value is the role's name.
    #[serde(default)]
    pub roles: BTreeMap<String, Role>,
    /// The role when nothing maps; absent: such a person may not sign in.
    #[serde(default)]
    pub default_role: Option<Role>,
    /// The sign-in button's words (default `Sign in with SSO`).
    #[serde(default)]
    pub button: Option<String>,
}

fn default_scopes() -> Vec<String> {
    vec!["profile".into(), "email".into()]
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("role_claim", &self.role_claim)
            .finish_non_exhaustive()
    }
}

/// The provider: its configuration and (once discovered) its metadata.
pub struct Oidc {
    config: OidcConfig,
    http: reqwest::Client,
    metadata: OnceCell<CoreProviderMetadata>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("config", &self.config)
            .finish()
    }
}

impl Oidc {
    pub fn new(config: OidcConfig) -> Result<Self, String> {
        IssuerUrl::new(config.issuer.clone()).map_err(|e| format!("issuer: {e}"))?;
        let http = reqwest::Client::builder()
            // Following redirects would open the token exchange to SSRF.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            config,
            http,
            metadata: OnceCell::new(),
        })
    }

    pub fn button(&self) -> String {
        self.config
            .button
            .clone()
            .unwrap_or_else(|| "Sign in with SSO".into())
    }

    /// The provider's metadata, discovered once (retried on the next sign-in if it failed).
    async fn metadata(&self) -> Result<&CoreProviderMetadata, String> {
        self.metadata
            .get_or_try_init(|| async {
                let issuer =
                    IssuerUrl::new(self.config.issuer.clone()).map_err(|e| e.to_string())?;
                CoreProviderMetadata::discover_async(issuer, &self.http)
                    .await
                    .map_err(|e| format!("discovering {}: {e}", self.config.issuer))
            })
            .await
    }

    fn redirect_url(&self, headers: &HeaderMap) -> Result<RedirectUrl, String> {
        let url = match &self.config.redirect_url {
            Some(u) => u.clone(),
            None => {
                let host = headers
                    .get(header::HOST)
                    .and_then(|v| v.to_str().ok())
                    .ok_or("no Host header")?;
                let https = headers
                    .get("x-forwarded-proto")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.eq_ignore_ascii_case("https"));
                format!(
                    "{}://{host}/v1/console/oidc/callback",
                    if https { "https" } else { "http" }
                )
            }
        };
        RedirectUrl::new(url).map_err(|e| e.to_string())
    }

    /// The user's name and role from the ID token's claims.
    fn person(&self, claims: &serde_json::Value) -> Result<(String, Role), String> {
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let name = match &self.config.username_claim {
            Some(c) => text(c),
            None => text("preferred_username")
                .or_else(|| text("email"))
                .or_else(|| text("sub")),
        }
        .ok_or("the ID token has no user name claim")?;
        let claim = self.config.role_claim.as_deref().unwrap_or("groups");
        let values: Vec<String> = match claims.get(claim) {
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        let mapped = values.iter().filter_map(|v| {
            if self.config.roles.is_empty() {
                Role::parse(v)
            } else {
                self.config.roles.get(v).copied()
            }
        });
        // Role::ALL runs from the most to the least: the first one any value maps to.
        let role = Role::ALL
            .into_iter()
            .find(|r| mapped.clone().any(|m| m == *r))
            .or(self.config.default_role)
            .ok_or_else(|| {
                format!("{name} has no role here: nothing in the claim `{claim}` maps to one")
            })?;
        Ok((name, role))
    }
}

/// `GET /v1/console/oidc/start`: to the provider.
#[utoipa::path(get, path = "/v1/console/oidc/start", security(()), tag = "console",
    responses((status = 303, description = "To the identity provider, with the flow's cookie"),
              (status = 404, description = "`not_found`: no `[auth.oidc]`", body = switchboard_protocol::ErrorBody),
              (status = 503, description = "`unavailable`: the provider could not be reached", body = switchboard_protocol::ErrorBody)))]
pub async fn start(State(console): State<Console>, headers: HeaderMap) -> Response {
    let Some(oidc) = console.oidc() else {
        return crate::ApiError::new(switchboard_protocol::ErrorCode::NotFound, "no [auth.oidc]")
            .into_response();
    };
    let go = async {
        let metadata = oidc.metadata().await?.clone();
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(oidc.config.client_id.clone()),
            oidc.config.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(oidc.redirect_url(&headers)?);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for s in &oidc.config.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = req.url();
        let flow = format!(
            "{}.{}.{}",
            state.secret(),
            nonce.secret(),
            verifier.secret()
        );
        Ok::<_, String>((url, console.sign(&flow)))
    };
    match go.await {
        Ok((url, flow)) => {
            let cookie = format!(
                "{FLOW_COOKIE}={flow}; Path=/v1/console/oidc; HttpOnly; SameSite=Lax; Max-Age={}",
                FLOW_TTL.as_secs()
            );
            let mut resp = StatusCode::SEE_OTHER.into_response();
            if let (Ok(loc), Ok(c)) = (
                HeaderValue::from_str(url.as_str()),
                HeaderValue::from_str(&cookie),
            ) {
                resp.headers_mut().insert(header::LOCATION, loc);
                resp.headers_mut().insert(header::SET_COOKIE, c);
            }
            resp.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        Err(e) => {
            tracing::warn!(error = %e, "OIDC sign-in could not start");
            crate::ApiError::new(
                switchboard_protocol::ErrorCode::Unavailable,
                "the identity provider could not be reached; try again, or sign in with a password",
            )
            .into_response()
        }
    }
}

#[derive(Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /v1/console/oidc/callback`: back from the provider.
#[utoipa::path(get, path = "/v1/console/oidc/callback", security(()), tag = "console",
    params(("code" = Option<String>, Query), ("state" = Option<String>, Query), ("error" = Option<String>, Query)),
    responses((status = 200, description = "Signed in: the session cookie is set and the page goes on to the console"),
              (status = 303, description = "Not signed in: to `/?login=failed`"),
              (status = 403, description = "`host_not_allowed` (the `Host` is not this server's)", body = switchboard_protocol::ErrorBody)))]
pub async fn callback(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let outcome = finish(&console, &headers, q).await;
    let clear = HeaderValue::from_static(
        "switchboard_oidc=; Path=/v1/console/oidc; HttpOnly; SameSite=Lax; Max-Age=0",
    );
    match outcome {
        Ok(secret) => {
            // A page of ours that goes on to the console: the session cookie is
            // SameSite=Strict, and a redirect chain that began at the provider would not
            // carry it on its first load.
            let mut resp = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url=/\"><title>Signed in</title><p>Signed in. <a href=\"/\">Continue to Switchboard</a>.</p>",
            )
                .into_response();
            let h = resp.headers_mut();
            h.append(
                header::SET_COOKIE,
                console.session_cookie(&headers, &secret),
            );
            h.append(header::SET_COOKIE, clear);
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            h.insert(
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            );
            resp
        }
        Err(reason) => {
            tracing::warn!(%reason, "OIDC sign-in failed");
            if let Some(team) = console.team() {
                team.record(
                    "oidc",
                    "signin.failed",
                    None,
                    "oidc",
                    serde_json::json!({ "reason": reason }),
                )
                .await;
            }
            let mut resp = StatusCode::SEE_OTHER.into_response();
            let h = resp.headers_mut();
            h.insert(header::LOCATION, HeaderValue::from_static("/?login=failed"));
            h.append(header::SET_COOKIE, clear);
            resp
        }
    }
}

/// The console session's secret for the person the provider vouched for.
async fn finish(console: &Console, headers: &HeaderMap, q: Callback) -> Result<String, String> {
    let (Some(oidc), Some(team)) = (console.oidc(), console.team()) else {
        return Err("no [auth.oidc]".into());
    };
    if let Some(e) = q.error {
        return Err(format!("the provider answered {e}"));
    }
    let flow = crate::web::cookie_value(headers, FLOW_COOKIE)
        .and_then(|c| console.verify(c))
        .ok_or("no sign-in under way in this browser (or it took over 10 minutes)")?;
    let mut parts = flow.splitn(3, '.');
    let (Some(state), Some(nonce), Some(verifier)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("a malformed sign-in cookie".into());
    };
    if q.state.as_deref() != Some(state) {
        return Err("the state does not match this browser's sign-in".into());
    }
    let code = q.code.ok_or("no code")?;
    let metadata = oidc.metadata().await?.clone();
    let client = CoreClient::from_provider_metadata(
        metadata,
        ClientId::new(oidc.config.client_id.clone()),
        oidc.config.client_secret.clone().map(ClientSecret::new),
    )
    .set_redirect_uri(oidc.redirect_url(headers)?);
    let tokens = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|e| e.to_string())?
        .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_string()))
        .request_async(&oidc.http)
        .await
        .map_err(|e| format!("exchanging the code: {e}"))?;
    let id_token = tokens.id_token().ok_or("the provider sent no ID token")?;
    // Signature, issuer, audience, expiry and nonce.
    id_token
        .claims(&client.id_token_verifier(), &Nonce::new(nonce.to_string()))
        .map_err(|e| format!("the ID token: {e}"))?;
    // Its claims as sent (the verified token's payload), for the provider's own claims
    // (groups, a role) the standard set does not name.
    let raw = id_token.to_string();
    let payload = raw.split('.').nth(1).ok_or("a malformed ID token")?;
    let claims: serde_json::Value = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("unreadable ID token claims")?;
    let (name, role) = oidc.person(&claims)?;
    let name = team
        .sign_in_external(&name, role, "oidc")
        .await
        .map_err(|e| e.to_string())?;
    let secret = team
        .open_console_session(
            &name,
            crate::signin::PERSON_COOKIE,
            crate::signin::SESSION_TTL,
        )
        .await
        .map_err(|e| e.to_string())?;
    team.record(
        &name,
        "signin",
        None,
        "console",
        serde_json::json!({ "provider": "oidc", "issuer": oidc.config.issuer }),
    )
    .await;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn oidc(roles: &[(&str, Role)], default_role: Option<Role>) -> Oidc {
        Oidc::new(OidcConfig {
            issuer: "https://idp.example.com".into(),
            client_id: "sb".into(),
            client_secret: None,
            redirect_url: None,
            scopes: default_scopes(),
            username_claim: None,
            role_claim: None,
            roles: roles.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            default_role,
            button: None,
        })
        .unwrap()
    }

    #[test]
    fn the_highest_mapped_role_wins() {
        let o = oidc(&[("dev", Role::Member), ("ops", Role::Operator)], None);
        let (name, role) = o
            .person(
                &json!({"sub": "1", "preferred_username": "ann", "groups": ["dev", "ops", "x"]}),
            )
            .unwrap();
        assert_eq!((name.as_str(), role), ("ann", Role::Operator));
        // Nothing maps and there is no default: refused.
        assert!(o.person(&json!({"sub": "1", "groups": ["x"]})).is_err());
        let o = oidc(&[("dev", Role::Member)], Some(Role::Viewer));
        assert_eq!(
            o.person(&json!({"email": "b@x.org"})).unwrap(),
            ("b@x.org".into(), Role::Viewer)
        );
        // Without a map, the claim is the role's name.
        let o = oidc(&[], None);
        assert_eq!(
            o.person(&json!({"sub": "c", "groups": "admin"})).unwrap().1,
            Role::Admin
        );
    }
}
