//! The Bot Framework's two kinds of token (learn.microsoft.com → "Authentication with the
//! Bot Connector API"):
//!
//! - **Inbound**: every activity Teams posts carries `Authorization: Bearer <JWT>`, signed
//!   RS256 with a key from the Bot Framework's OpenID metadata (`jwks_uri`). It is checked
//!   here: the key (by `kid`) endorsed for the activity's channel (`msteams`), the issuer
//!   `https://api.botframework.com`, the audience = the bot's app id, the lifetime (five
//!   minutes of clock skew), and the `serviceurl` claim = the activity's `serviceUrl`. The
//!   keys are cached a day, fetched again for an unknown `kid` (at most every five minutes).
//! - **Outbound**: the bot's own token (client credentials for the scope
//!   `https://api.botframework.com/.default`), cached until five minutes before it expires.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

use super::TeamsChannel;
use crate::channel::ChannelError;

/// Who signs the Bot Framework's tokens.
pub const ISSUER: &str = "https://api.botframework.com";
const KEYS_FOR: Duration = Duration::from_secs(24 * 3600);
const REFETCH_AFTER: Duration = Duration::from_secs(300);
const LEEWAY_SECS: u64 = 300;

/// The signing keys, as last fetched.
#[derive(Default)]
pub(super) struct KeyCache {
    /// kid → (key, the channels it is endorsed for).
    keys: HashMap<String, (DecodingKey, Vec<String>)>,
    fetched: Option<Instant>,
    /// The last fetch tried (whether it worked or not).
    tried: Option<Instant>,
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    serviceurl: Option<String>,
}

/// The bot's token, and until when it may be used.
pub(super) struct BotToken {
    pub(super) token: String,
    pub(super) until: Instant,
}

impl TeamsChannel {
    /// Checks an activity's `Authorization` header (see the module docs). The error says
    /// why, for the log (never the token).
    pub(super) async fn verify(
        &self,
        header: Option<&str>,
        service_url: &str,
        channel_id: &str,
    ) -> Result<(), String> {
        let token = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .ok_or("no bearer token")?;
        let head = jsonwebtoken::decode_header(token).map_err(|e| format!("not a JWT: {e}"))?;
        if head.alg != Algorithm::RS256 {
            return Err(format!("signed with {:?}, not RS256", head.alg));
        }
        let kid = head.kid.ok_or("no key id")?;
        let (key, endorsements) = self.key(&kid).await?;
        if !endorsements.iter().any(|e| e == channel_id) {
            return Err(format!("the key is not endorsed for {channel_id:?}"));
        }
        let mut v = Validation::new(Algorithm::RS256);
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[&self.cfg.app_id]);
        v.leeway = LEEWAY_SECS;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v)
            .map_err(|e| format!("token refused: {e}"))?;
        match data.claims.serviceurl {
            Some(s) if s.trim_end_matches('/') == service_url.trim_end_matches('/') => Ok(()),
            _ => Err("the token's serviceurl is not the activity's".into()),
        }
    }

    /// The key `kid`, from the cache or fetched again (at most every five minutes, failed
    /// fetches included; keys are kept when a fetch fails).
    async fn key(&self, kid: &str) -> Result<(DecodingKey, Vec<String>), String> {
        {
            let mut cache = self.keys.lock();
            let fresh = cache.fetched.is_some_and(|f| f.elapsed() < KEYS_FOR);
            let tried_lately = cache.tried.is_some_and(|f| f.elapsed() < REFETCH_AFTER);
            if let Some(k) = cache.keys.get(kid)
                && (fresh || tried_lately)
            {
                return Ok(k.clone());
            }
            if tried_lately {
                return Err(format!("unknown signing key {kid:?}"));
            }
            cache.tried = Some(Instant::now());
        }
        match self.fetch_keys().await {
            Ok(keys) => {
                let mut cache = self.keys.lock();
                cache.keys = keys;
                cache.fetched = Some(Instant::now());
            }
            Err(e) => {
                tracing::warn!(channel = %self.cfg.name, error = %e, "fetching the Bot Framework's signing keys; keeping the ones known")
            }
        }
        self.keys
            .lock()
            .keys
            .get(kid)
            .cloned()
            .ok_or_else(|| format!("unknown signing key {kid:?}"))
    }

    /// The OpenID metadata, then its `jwks_uri`.
    async fn fetch_keys(&self) -> Result<HashMap<String, (DecodingKey, Vec<String>)>, String> {
        let get = |url: String| async move {
            let r = self
                .client
                .http()
                .get(&url)
                .timeout(Duration::from_secs(15))
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "fetching the signing keys: {}",
                        crate::platform::client::describe(e)
                    )
                })?;
            if !r.status().is_success() {
                return Err(format!("fetching the signing keys: HTTP {}", r.status()));
            }
            r.json::<Value>()
                .await
                .map_err(|e| format!("the signing keys are not JSON: {e}"))
        };
        let meta = get(self.cfg.openid_url.clone()).await?;
        let jwks = meta["jwks_uri"]
            .as_str()
            .ok_or("the OpenID metadata names no jwks_uri")?;
        let local = super::is_loopback(&self.cfg.openid_url) && super::is_loopback(jwks);
        if !(jwks.starts_with("https://") || local) {
            return Err("the OpenID metadata's jwks_uri is not https".into());
        }
        let set = get(jwks.to_string()).await?;
        let mut out = HashMap::new();
        for k in set["keys"].as_array().into_iter().flatten() {
            let (Some(kid), Some(n), Some(e)) =
                (k["kid"].as_str(), k["n"].as_str(), k["e"].as_str())
            else {
                continue;
            };
            if k["kty"] != "RSA" {
                continue;
            }
            let Ok(key) = DecodingKey::from_rsa_components(n, e) else {
                continue;
            };
            let endorsements = k["endorsements"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect();
            out.insert(kid.to_string(), (key, endorsements));
        }
        tracing::debug!(channel = %self.cfg.name, keys = out.len(), "fetched the Bot Framework's signing keys");
        Ok(out)
    }

    /// The bot's token for the Connector API (client credentials), cached.
    pub(super) async fn bot_token(&self) -> Result<String, ChannelError> {
        if let Some(t) = self.token.lock().as_ref()
            && t.until > Instant::now()
        {
            return Ok(t.token.clone());
        }
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", self.cfg.app_id.as_str()),
            ("client_secret", self.cfg.app_password.as_str()),
            ("scope", "https://api.botframework.com/.default"),
        ];
        let r = self
            .client
            .http()
            .post(&self.cfg.token_url)
            .form(&form)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| self.client.unreachable("token", e, None))?;
        let status = r.status();
        let body: Value = r.json().await.unwrap_or_default();
        let Some(token) = body["access_token"]
            .as_str()
            .filter(|_| status.is_success())
        else {
            let why = body["error_description"]
                .as_str()
                .or(body["error"].as_str())
                .unwrap_or("no token in the answer");
            return Err(self.client.api_error("token", status.as_u16(), why));
        };
        let lives = body["expires_in"].as_u64().unwrap_or(3600);
        *self.token.lock() = Some(BotToken {
            token: token.to_string(),
            until: Instant::now() + Duration::from_secs(lives.saturating_sub(300).max(60)),
        });
        Ok(token.to_string())
    }
}
