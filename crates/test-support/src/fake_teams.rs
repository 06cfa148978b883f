//! A fake Microsoft Teams — the Bot Framework's side of a bot — on real TCP
//! (`127.0.0.1:0`), written from learn.microsoft.com: "Authentication with the Bot
//! Connector API" (the OpenID metadata at `/v1/.well-known/openidconfiguration` naming a
//! `jwks_uri` whose keys carry `endorsements`; activities posted with
//! `Authorization: Bearer <JWT>` signed RS256, `iss` `https://api.botframework.com`, `aud`
//! the bot's app id, a `serviceurl` claim; the bot's own token from the client-credentials
//! grant), "Bot Connector API reference" (`POST /v3/conversations/{id}/activities`, `PUT
//! …/activities/{activityId}`, errors `{"error":{"code","message"}}`), "Rate limiting for
//! bots" (per thread 7 operations in any second, 8 in 2 s, 60 in 30 s: `429` with
//! `Retry-After`), "Adaptive Cards"
//! (`Action.Submit` comes back as a message activity with `value` and `replyToId`) and "Send
//! and receive files" (a file consent card answered by a `fileConsent/invoke` with an
//! upload URL; `PUT` of the content; shared files as `file.download.info`).
//!
//! The signing key is a test key made for this fake (below); [`FakeTeams::push`] signs with
//! it, [`FakeTeams::push_forged`] with a token the bot must refuse.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// The test signing key (RSA 2048, made for this fake; signs nothing real).
const KEY_PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAjvwOB8rkrKWYeJTmeiQBBB66/SoCV/89fc8j1nERkc4ActiY\nCRKaMW+aruWeuomJHb+FM8Rbw8H6iAB8LhE3tXUMIlEDNmRoWSMnOuSz/wTvMlx0\nz3C0BmkWI1tqqA4aXmRvIgF/1PVG03dctBpR8/7/EU4jRw3PS+pywsQ3a0AWS8fb\n8edcfOYfyF+D+E1dqIAQrvSOsLolV6C49zDJ9oGc9rBrClfHe1aeDTNczS8xQEZ4\nA/mgEy4delF5VUU0kxTNp3KPzvJ2MCTvHpXC0PuoOorOKtFe+QTu2+TbBtNzzNdj\nTWTXL2APqyT3U/UIQfK9usP967SRu23TRQIAWwIDAQABAoIBABCue3yRQUibMUSw\nKouJc8zlQO+UXR2jG6t35Th5jJE0NX0wo9w7HV4zJRrOk0w0C5k65PF7MTGPigkf\n9VzyiUtUUowWY4ePA1WS8lq+n/lavAVmIAKrpXUyAXEykyj0LENi+ExBXIad7xtw\ny5H/mBwdXejI8vixNcQnoCf0+Ho8nTUH9YuiAHpDqZxa5WVigiRYYtr1572SUyux\nghWcEukFVULA/zAhEc3OCpQlOaK25dZTaV5M0r4YK1NyWW+C9pVloGx/MnVnmNs1\n+kWnxE75zR4HFmGwgWzVO2aaC7xRqwmsybodKkKYJUfAj7yq6csWhyqVRxcZnJqs\nGwN9H/ECgYEAxE7P1V+Exjjul0yQSsoAhQVdqhkXASUiFSp5XNRoqwb586D49YOQ\nBMOEvkh7aoIE+928dHqz67x3+e4egHBXqJGTjx/Lipg0KaHZlap3BD01HhxzU+BR\nfuzOKetTuD/OP7Rks7AHf4OYrv+lb+iVfna65L6jrk1kTNqQ3TQTKScCgYEAunZm\noSLoG5SE1FotUJvJv5CAPilcFvibll6vCN0AN/F2tdqhOrH2gMwMQMqvUMfVFHcO\nE0g+o27r7f1x0jG4pJG8gzrbwVwsgvhE3w6rb2boFb3KuWlF2QnqSiKKOjPJ1CjK\n9qHjY93JZAWAe8ss9zYlwlBq/F7gP+nhH5jL560CgYEArDK1/OWdAoRORknTCMfJ\nTOY4E02O8GIyU36+lr98UQn9l8hMmpCddJBNkNzj5bnHxWfsOACqcs8QLxzBhMkH\nG8cXOSUa1qhMmXhv9OljHUTTo2YxhBHxavUuo3baKXVO5nLHIxf2e9Rjyp5V8KSE\n/joIFz9jNTKOGRxglqlnZWECgYBmR75CE3C4eD5ocVK8Dcib4PrHnk5ad2J5GFTx\nCrEs/rG8TUH1fVsXCVaLT+Lc79CtGiVJZG6fnZ+i+0wtHYMIGr0KSwXyScpMyTyW\nEmjtgcg67NG/5MQgqrSul8W06WWDkCDNKr4dsLHgwLfar/dpX3VU4mHdL3nY9US8\n3Ua0PQKBgQCoymOK84EJEHDryfweOxudHf+BmMYNQgm0wVrPz7m5hklxHMWfWw+J\n8dNYahcHaPPzesiMqg5x5/STVGPVrE9+LOkTUq45y1lco+/OEuEH0IfB6YUoFvQs\nmivFDDK37HvNZpN9zpDT1HdOjufFJIULp77q0BEV+IpXTjkkTd01CA==\n-----END RSA PRIVATE KEY-----";
/// Its public modulus and exponent (base64url), as the JWKS gives them.
const KEY_N: &str = "jvwOB8rkrKWYeJTmeiQBBB66_SoCV_89fc8j1nERkc4ActiYCRKaMW-aruWeuomJHb-FM8Rbw8H6iAB8LhE3tXUMIlEDNmRoWSMnOuSz_wTvMlx0z3C0BmkWI1tqqA4aXmRvIgF_1PVG03dctBpR8_7_EU4jRw3PS-pywsQ3a0AWS8fb8edcfOYfyF-D-E1dqIAQrvSOsLolV6C49zDJ9oGc9rBrClfHe1aeDTNczS8xQEZ4A_mgEy4delF5VUU0kxTNp3KPzvJ2MCTvHpXC0PuoOorOKtFe-QTu2-TbBtNzzNdjTWTXL2APqyT3U_UIQfK9usP967SRu23TRQIAWw";
const KEY_E: &str = "AQAB";
const KID: &str = "fake-teams-key-1";

/// One activity the bot sent, as it stands now.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamsActivity {
    pub id: String,
    pub conversation: String,
    pub text: String,
    /// The text of an Adaptive Card's first block, and its `Action.Submit` (title, data.sb).
    pub card_text: Option<String>,
    pub actions: Vec<(String, String)>,
    pub attachments: Vec<Value>,
    pub edits: usize,
}

/// Someone in Teams.
#[derive(Debug, Clone)]
pub struct TeamsUser {
    /// `29:…`
    pub id: String,
    /// The Entra object id.
    pub aad: String,
    pub name: String,
}

impl TeamsUser {
    pub fn new(n: u32, name: &str) -> Self {
        Self {
            id: format!("29:1user{n}"),
            aad: format!("00000000-0000-4000-8000-{n:012}"),
            name: name.into(),
        }
    }
}

#[derive(Default)]
struct Inner {
    activities: Vec<TeamsActivity>,
    uploads: HashMap<String, Vec<u8>>,
    files: HashMap<String, Vec<u8>>,
    next: u64,
    webhook: Option<String>,
    throttle: u32,
    limited: u32,
    /// Per conversation: when each call was taken (Teams' per-thread windows).
    calls: HashMap<String, Vec<Instant>>,
}

/// The fake; see the module docs.
pub struct FakeTeams {
    addr: SocketAddr,
    state: Arc<Mutex<Inner>>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Drop for FakeTeams {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

fn connector_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

fn bearer_ok(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", FakeTeams::BOT_TOKEN))
}

impl FakeTeams {
    pub const APP_ID: &'static str = "6f1c1a70-0000-4000-8000-00000000b07a";
    pub const APP_PASSWORD: &'static str = "fake-teams-client-secret~0123";
    pub const BOT_TOKEN: &'static str = "eyFakeBotConnectorToken";

    pub async fn start() -> FakeTeams {
        let state: Arc<Mutex<Inner>> = Arc::default();
        let (listener, addr) = crate::serve::bind("fake Teams").await;
        let app = Router::new()
            .route(
                "/v1/.well-known/openidconfiguration",
                get(move || async move {
                    axum::Json(json!({"issuer": "https://api.botframework.com",
                        "authorization_endpoint": "https://invalid.botframework.com",
                        "jwks_uri": format!("http://{addr}/v1/.well-known/keys"),
                        "id_token_signing_alg_values_supported": ["RS256"],
                        "token_endpoint_auth_methods_supported": ["private_key_jwt"]}))
                }),
            )
            .route(
                "/v1/.well-known/keys",
                get(|| async {
                    axum::Json(json!({"keys": [{"kty": "RSA", "use": "sig", "kid": KID,
                        "n": KEY_N, "e": KEY_E, "endorsements": ["msteams"]}]}))
                }),
            )
            .route("/botframework.com/oauth2/v2.0/token", post(token))
            .route("/v3/conversations/{conv}/activities", post(send))
            .route("/v3/conversations/{conv}/activities/{id}", put(update))
            .route("/upload/{id}", put(upload))
            .route("/files/{id}", get(file))
            .with_state(state.clone());
        let (shutdown, stop) = tokio::sync::watch::channel(false);
        crate::serve::spawn(listener, app, stop);
        FakeTeams {
            addr,
            state,
            shutdown,
        }
    }

    pub fn openid_url(&self) -> String {
        format!("http://{}/v1/.well-known/openidconfiguration", self.addr)
    }

    pub fn token_url(&self) -> String {
        format!("http://{}/botframework.com/oauth2/v2.0/token", self.addr)
    }

    /// The Connector's base, as activities name it (`serviceUrl`).
    pub fn service_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Where activities go: the server's `/v1/gateway/channels/teams/webhook`.
    pub fn set_webhook(&self, url: &str) {
        self.state.lock().webhook = Some(url.to_string());
    }

    fn next_id(&self) -> String {
        let mut s = self.state.lock();
        s.next += 1;
        format!("17000000{:05}", s.next)
    }

    /// A token as the Bot Framework signs it, for `aud`.
    fn token(&self, aud: &str, serviceurl: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(KID.into());
        let claims = json!({"iss": "https://api.botframework.com", "aud": aud,
            "exp": now + 300, "nbf": now - 10, "serviceurl": serviceurl, "appid": Self::APP_ID});
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(KEY_PEM.as_bytes())
            .unwrap_or_else(|e| panic!("fake Teams: the test key: {e}"));
        jsonwebtoken::encode(&header, &claims, &key)
            .unwrap_or_else(|e| panic!("fake Teams: signing: {e}"))
    }

    async fn post_activity(&self, activity: &Value, token: &str) -> u16 {
        let url = self
            .state
            .lock()
            .webhook
            .clone()
            .unwrap_or_else(|| panic!("fake Teams: no webhook set"));
        match reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .json(activity)
            .send()
            .await
        {
            Ok(r) => r.status().as_u16(),
            Err(e) => panic!("fake Teams: the bot did not answer: {e}"),
        }
    }

    /// Posts `activity` (its `serviceUrl`, `channelId`, `recipient` filled in) signed as
    /// the Bot Framework signs; the HTTP status the bot answered.
    pub async fn push(&self, mut activity: Value) -> u16 {
        activity["serviceUrl"] = json!(self.service_url());
        activity["channelId"] = json!("msteams");
        activity["recipient"] =
            json!({"id": format!("28:{}", Self::APP_ID), "name": "Switchboard"});
        let token = self.token(Self::APP_ID, &self.service_url());
        self.post_activity(&activity, &token).await
    }

    /// Posts `activity` signed as [`FakeTeams::push`] does, but from another Bot Framework
    /// channel (`webchat`, `directline`: there the client names its sender).
    pub async fn push_from_channel(&self, mut activity: Value, channel_id: &str) -> u16 {
        activity["serviceUrl"] = json!(self.service_url());
        activity["channelId"] = json!(channel_id);
        let token = self.token(Self::APP_ID, &self.service_url());
        self.post_activity(&activity, &token).await
    }

    /// Posts `activity` with a token the bot must refuse: signed by the right key for
    /// another bot (`aud`), or for another service URL.
    pub async fn push_forged(&self, mut activity: Value, other_app: bool) -> u16 {
        activity["serviceUrl"] = json!(self.service_url());
        activity["channelId"] = json!("msteams");
        let token = if other_app {
            self.token("some-other-bot", &self.service_url())
        } else {
            self.token(Self::APP_ID, "https://evil.example.com/")
        };
        self.post_activity(&activity, &token).await
    }

    fn message(
        &self,
        from: &TeamsUser,
        conv: &str,
        conv_type: &str,
        text: &str,
    ) -> (Value, String) {
        let id = self.next_id();
        let mut a = json!({"type": "message", "id": id, "timestamp": "2026-12-06T10:00:00Z",
            "from": {"id": from.id, "name": from.name, "aadObjectId": from.aad},
            "conversation": {"id": conv, "conversationType": conv_type, "tenantId": "tenant-1"},
            "channelData": {"tenant": {"id": "tenant-1"}},
            "text": text, "textFormat": "plain"});
        if conv_type != "personal" {
            a["text"] = json!(format!("<at>Switchboard</at> {text}"));
            a["entities"] = json!([{"type": "mention", "text": "<at>Switchboard</at>",
                "mentioned": {"id": format!("28:{}", Self::APP_ID), "name": "Switchboard"}}]);
        }
        (a, id)
    }

    /// A message in a personal chat; (status, its id).
    pub async fn personal(&self, from: &TeamsUser, conv: &str, text: &str) -> (u16, String) {
        let (a, id) = self.message(from, conv, "personal", text);
        (self.push(a).await, id)
    }

    /// A message mentioning the bot in a group chat or a channel (`conv_type` `groupChat` /
    /// `channel`; a channel's `conv` names its thread: `19:…;messageid=ROOT`).
    pub async fn mention(
        &self,
        from: &TeamsUser,
        conv: &str,
        conv_type: &str,
        text: &str,
    ) -> (u16, String) {
        let (a, id) = self.message(from, conv, conv_type, text);
        (self.push(a).await, id)
    }

    /// A personal-chat message with a shared file (`file.download.info`).
    pub async fn personal_file(
        &self,
        from: &TeamsUser,
        conv: &str,
        name: &str,
        bytes: &[u8],
        text: &str,
    ) -> u16 {
        let fid = self.next_id();
        self.state.lock().files.insert(fid.clone(), bytes.to_vec());
        let (mut a, _) = self.message(from, conv, "personal", text);
        a["attachments"] = json!([{"contentType": "application/vnd.microsoft.teams.file.download.info",
            "contentUrl": format!("http://{}/files/{fid}", self.addr), "name": name,
            "content": {"downloadUrl": format!("http://{}/files/{fid}", self.addr), "uniqueId": fid, "fileType": "txt"}}]);
        self.push(a).await
    }

    /// A press of an `Action.Submit` on card `card` (its `data.sb` is `data`).
    pub async fn submit(
        &self,
        from: &TeamsUser,
        conv: &str,
        conv_type: &str,
        card: &str,
        data: &str,
    ) -> u16 {
        let (mut a, _) = self.message(from, conv, conv_type, "");
        a["text"] = json!("");
        a["entities"] = json!([]);
        a["replyToId"] = json!(card);
        a["value"] = json!({"sb": data});
        self.push(a).await
    }

    /// The answer to a file consent card: `accept` gives an upload URL.
    pub async fn consent(
        &self,
        from: &TeamsUser,
        conv: &str,
        card: &TeamsActivity,
        accept: bool,
    ) -> (u16, String) {
        let upload = self.next_id();
        let att = &card.attachments[0];
        let (mut a, _) = self.message(from, conv, "personal", "");
        a["type"] = json!("invoke");
        a["name"] = json!("fileConsent/invoke");
        a["value"] = json!({"type": "fileUpload", "action": if accept { "accept" } else { "decline" },
            "context": att["content"]["acceptContext"],
            "uploadInfo": {"contentUrl": format!("https://contoso-my.sharepoint.com/personal/{upload}"),
                "name": att["name"], "uploadUrl": format!("http://{}/upload/{upload}", self.addr),
                "uniqueId": upload, "fileType": "txt"}});
        (self.push(a).await, upload)
    }

    /// What was uploaded under `id`.
    pub fn uploaded(&self, id: &str) -> Option<Vec<u8>> {
        self.state.lock().uploads.get(id).cloned()
    }

    /// The bot's activities in `conv`, oldest first.
    pub fn activities(&self, conv: &str) -> Vec<TeamsActivity> {
        self.state
            .lock()
            .activities
            .iter()
            .filter(|a| a.conversation == conv)
            .cloned()
            .collect()
    }

    /// Answers the next `n` sends 429.
    pub fn throttle(&self, n: u32) {
        self.state.lock().throttle = n;
    }

    /// How many calls were answered 429.
    pub fn limited(&self) -> u32 {
        self.state.lock().limited
    }
}

async fn token(State(_): State<Arc<Mutex<Inner>>>, body: String) -> Response {
    let form: HashMap<String, String> = form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    let ok = form.get("grant_type").map(String::as_str) == Some("client_credentials")
        && form.get("client_id").map(String::as_str) == Some(FakeTeams::APP_ID)
        && form.get("client_secret").map(String::as_str) == Some(FakeTeams::APP_PASSWORD)
        && form.get("scope").map(String::as_str) == Some("https://api.botframework.com/.default");
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client",
            "error_description": "AADSTS7000215: Invalid client secret provided."})),
        )
            .into_response();
    }
    axum::Json(
        json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
        "access_token": FakeTeams::BOT_TOKEN}),
    )
    .into_response()
}

/// Teams' per-thread limits ("Rate limiting for bots": 7 operations in any second, 8 in any
/// 2 s, 60 in any 30 s) and [`FakeTeams::throttle`]; `Some` is the 429 to answer.
fn limit(s: &mut Inner, conv: &str) -> Option<Response> {
    let now = Instant::now();
    let calls = s.calls.entry(conv.to_string()).or_default();
    calls.retain(|t| now.duration_since(*t) < Duration::from_secs(30));
    let within = |w: u64| {
        calls
            .iter()
            .filter(|t| now.duration_since(**t) < Duration::from_secs(w))
            .count()
    };
    let over = within(1) >= 7 || within(2) >= 8 || within(30) >= 60;
    if s.throttle > 0 || over {
        s.throttle = s.throttle.saturating_sub(1);
        s.limited += 1;
        let mut r = connector_error(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "Too many requests",
        );
        r.headers_mut()
            .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        return Some(r);
    }
    calls.push(now);
    None
}

fn read(conv: &str, id: &str, body: &Value) -> TeamsActivity {
    let attachments = body["attachments"].as_array().cloned().unwrap_or_default();
    let card = attachments
        .iter()
        .find(|a| a["contentType"] == "application/vnd.microsoft.card.adaptive");
    TeamsActivity {
        id: id.to_string(),
        conversation: conv.to_string(),
        text: body["text"].as_str().unwrap_or_default().to_string(),
        card_text: card.and_then(|c| c["content"]["body"][0]["text"].as_str().map(str::to_string)),
        actions: card
            .and_then(|c| c["content"]["actions"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|a| {
                (
                    a["title"].as_str().unwrap_or_default().to_string(),
                    a["data"]["sb"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        attachments,
        edits: 0,
    }
}

async fn send(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(conv): Path<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if !bearer_ok(&headers) {
        return connector_error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Authorization has been denied for this request.",
        );
    }
    let mut s = state.lock();
    if let Some(r) = limit(&mut s, &conv) {
        return r;
    }
    if body["type"] != "message"
        || (body["text"].as_str().unwrap_or_default().is_empty()
            && body["attachments"].as_array().is_none_or(Vec::is_empty))
    {
        return connector_error(
            StatusCode::BAD_REQUEST,
            "BadArgument",
            "Activity text or attachments are required",
        );
    }
    s.next += 1;
    let id = format!("18000000{:05}", s.next);
    let a = read(&conv, &id, &body);
    s.activities.push(a);
    (StatusCode::CREATED, axum::Json(json!({"id": id}))).into_response()
}

async fn update(
    State(state): State<Arc<Mutex<Inner>>>,
    Path((conv, id)): Path<(String, String)>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if !bearer_ok(&headers) {
        return connector_error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Authorization has been denied for this request.",
        );
    }
    let mut s = state.lock();
    if let Some(r) = limit(&mut s, &conv) {
        return r;
    }
    let Some(existing) = s
        .activities
        .iter_mut()
        .find(|a| a.id == id && a.conversation == conv)
    else {
        return connector_error(
            StatusCode::NOT_FOUND,
            "ActivityNotFoundInConversation",
            "The activity was not found",
        );
    };
    let edits = existing.edits + 1;
    *existing = read(&conv, &id, &body);
    existing.edits = edits;
    axum::Json(json!({"id": id})).into_response()
}

async fn upload(
    State(state): State<Arc<Mutex<Inner>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let range_ok = headers
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|r| r == format!("bytes 0-{}/{}", body.len().saturating_sub(1), body.len()));
    if !range_ok {
        return StatusCode::BAD_REQUEST.into_response();
    }
    state.lock().uploads.insert(id.clone(), body.to_vec());
    (
        StatusCode::CREATED,
        axum::Json(json!({"id": id, "name": "file", "size": body.len()})),
    )
        .into_response()
}

async fn file(State(state): State<Arc<Mutex<Inner>>>, Path(id): Path<String>) -> Response {
    match state.lock().files.get(&id) {
        Some(b) => b.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
