//! A fake WhatsApp Cloud API (Graph API) on real TCP (`127.0.0.1:0`), written from Meta's
//! Cloud API reference — "Messages" (`POST /{phone-number-id}/messages`: text, interactive
//! reply buttons, image/document by media id, template, `status: read`), "Media" (`POST
//! /{phone-number-id}/media` multipart; `GET /{media-id}` naming a download URL that wants
//! the token), "Phone Numbers" (`GET /{phone-number-id}`) and "Webhooks" (deliveries
//! `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages",
//! "value":{…}}]}]}` signed `X-Hub-Signature-256: sha256=HMAC(app secret, raw body)`, and
//! the `GET` subscription check with `hub.challenge`).
//!
//! Errors are Graph's: `{"error":{"message","type","code","fbtrace_id"}}` — 401 code 190 for
//! a wrong token, 400 code 130429 while [`FakeWhatsApp::throttle`] says so (Meta's
//! "rate limit hit"). Users write with [`FakeWhatsApp::dm`], press buttons with
//! [`FakeWhatsApp::press`], react with [`FakeWhatsApp::react`] and send files with
//! [`FakeWhatsApp::send_document`], write in a group ([`FakeWhatsApp::group_message`],
//! "Groups API → Group messaging": a `group_id` on the message; sends with
//! `recipient_type: group`, which takes no interactive messages) and tap a template's
//! quick-reply button ([`FakeWhatsApp::tap_template`]); every delivery goes to the webhook
//! set with [`FakeWhatsApp::set_webhook`], signed with [`FakeWhatsApp::APP_SECRET`], its
//! messages stamped with the time they were sent.
//!
//! The 24-hour customer-service window is kept as Meta keeps it: a free-form message to a
//! chat nobody wrote in for 24 hours is accepted (a message id comes back) and then
//! reported `failed` with error 131047 ("Re-engagement message") in a status delivery;
//! only templates go then. [`FakeWhatsApp::close_window`] makes a chat's last message 25
//! hours old as far as the fake knows (the gateway does not know).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::Sha256;

/// One message the bot sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub id: String,
    pub to: String,
    /// `text`, `interactive`, `image`, `document` or `template`.
    pub kind: String,
    /// The text, the interactive body, or the caption.
    pub text: String,
    /// Reply buttons: (id, title).
    pub buttons: Vec<(String, String)>,
    /// For a file: its name (documents) and content.
    pub file: Option<(Option<String>, Vec<u8>)>,
    /// When it was sent.
    pub at: std::time::Instant,
    /// Taken, then reported failed: the chat's 24-hour window was closed (131047).
    pub failed: bool,
}

/// Meta's pair rate: one message every 6 seconds to one user, bursts of up to 45.
const PAIR_INTERVAL: std::time::Duration = std::time::Duration::from_secs(6);
const PAIR_BURST: u32 = 45;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[derive(Default)]
struct Inner {
    sent: Vec<Sent>,
    reads: Vec<String>,
    /// media id → (bytes, mime).
    media: HashMap<String, (Vec<u8>, String)>,
    next: u64,
    webhook: Option<String>,
    /// Each chat's last message from a person (Unix seconds): its 24-hour window.
    windows: HashMap<String, i64>,
    /// Meta's pair rate per recipient.
    pair: HashMap<String, crate::gcra::Gcra>,
    pair_limited: u32,
    /// Calls still to answer "rate limit hit".
    throttle: u32,
    throttled: u32,
}

type Shared = Arc<Mutex<Inner>>;

/// The fake server; see the module docs.
pub struct FakeWhatsApp {
    addr: SocketAddr,
    state: Shared,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Drop for FakeWhatsApp {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl FakeWhatsApp {
    pub const PHONE_NUMBER_ID: &'static str = "106540352242922";
    pub const TOKEN: &'static str = "EAAG-test-access-token";
    pub const APP_SECRET: &'static str = "test-app-secret-0123456789";
    pub const DISPLAY_NUMBER: &'static str = "+1 555-010-0199";

    pub async fn start() -> FakeWhatsApp {
        let state: Shared = Arc::default();
        let app = Router::new()
            .route("/v21.0/{id}/messages", post(messages))
            .route("/v21.0/{id}/media", post(upload))
            .route("/v21.0/{id}", get(object))
            .route("/download/{id}", get(download))
            .with_state(state.clone());
        let (listener, addr) = crate::serve::bind("fake WhatsApp").await;
        let (shutdown, stop) = tokio::sync::watch::channel(false);
        crate::serve::spawn(listener, app, stop);
        FakeWhatsApp {
            addr,
            state,
            shutdown,
        }
    }

    /// The Graph API base to configure (`api_base`).
    pub fn api_base(&self) -> String {
        format!("http://{}/v21.0", self.addr)
    }

    /// Where deliveries go: the server's `/v1/gateway/channels/whatsapp/webhook`.
    pub fn set_webhook(&self, url: &str) {
        self.state.lock().webhook = Some(url.to_string());
    }

    /// Answers the next `n` sends "rate limit hit" (code 130429).
    pub fn throttle(&self, n: u32) {
        self.state.lock().throttle = n;
    }

    /// How many sends were refused for Meta's pair rate (131056).
    pub fn pair_limited(&self) -> u32 {
        self.state.lock().pair_limited
    }

    /// How many sends were answered "rate limit hit".
    pub fn throttled(&self) -> u32 {
        self.state.lock().throttled
    }

    /// Everything the bot sent to `to`, in order.
    pub fn sent_to(&self, to: &str) -> Vec<Sent> {
        self.state
            .lock()
            .sent
            .iter()
            .filter(|s| s.to == to)
            .cloned()
            .collect()
    }

    /// `chat`'s window closes as far as the fake knows: its last message is 25 hours old.
    pub fn close_window(&self, chat: &str) {
        self.state
            .lock()
            .windows
            .insert(chat.to_string(), now() - 25 * 3600);
    }

    /// The message ids the bot marked read.
    pub fn reads(&self) -> Vec<String> {
        self.state.lock().reads.clone()
    }

    fn next_id(&self, prefix: &str) -> String {
        let mut s = self.state.lock();
        s.next += 1;
        format!("{prefix}{}", s.next)
    }

    /// The signature Meta puts on `body`.
    pub fn sign(secret: &str, body: &[u8]) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
            return String::new(); // HMAC takes keys of any length
        };
        mac.update(body);
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256={hex}")
    }

    /// A delivery of `messages` from `from` (named `name`), as Meta posts it.
    pub fn delivery(from: &str, name: &str, messages: Value) -> Value {
        json!({
            "object": "whatsapp_business_account",
            "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550100199", "phone_number_id": Self::PHONE_NUMBER_ID},
                "contacts": [{"profile": {"name": name}, "wa_id": from}],
                "messages": messages,
            }}]}],
        })
    }

    /// Posts `body` to the webhook signed with `secret`; the HTTP status.
    pub async fn post_signed(&self, body: &Value, secret: &str) -> u16 {
        let Some(url) = self.state.lock().webhook.clone() else {
            panic!("fake WhatsApp: set_webhook first");
        };
        let raw = serde_json::to_vec(body).unwrap_or_default();
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("x-hub-signature-256", Self::sign(secret, &raw))
            .body(raw)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    }

    async fn deliver(&self, from: &str, name: &str, mut message: Value) -> String {
        let id = message["id"].as_str().unwrap_or_default().to_string();
        let at = message["timestamp"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(now);
        message["timestamp"] = json!(at.to_string());
        let chat = message["group_id"].as_str().unwrap_or(from).to_string();
        {
            let mut s = self.state.lock();
            let w = s.windows.entry(chat).or_default();
            *w = (*w).max(at);
        }
        let status = self
            .post_signed(
                &Self::delivery(from, name, json!([message])),
                Self::APP_SECRET,
            )
            .await;
        assert_eq!(status, 200, "the webhook refused a delivery");
        id
    }

    /// `from` writes `text`; the message's id.
    pub async fn dm(&self, from: &str, name: &str, text: &str) -> String {
        let id = self.next_id("wamid.in");
        self.deliver(
            from,
            name,
            json!({"from": from, "id": id, "type": "text", "text": {"body": text}}),
        )
        .await
    }

    /// `from` wrote `text` `ago` (a delivery Meta made late); the message's id.
    pub async fn dm_sent(
        &self,
        from: &str,
        name: &str,
        text: &str,
        ago: std::time::Duration,
    ) -> String {
        let id = self.next_id("wamid.in");
        let at = now() - ago.as_secs() as i64;
        self.deliver(from, name, json!({"from": from, "id": id, "timestamp": at.to_string(), "type": "text", "text": {"body": text}}))
            .await
    }

    /// `from` writes `text` in the group `group` (quoting message `context`, if any).
    pub async fn group_message(
        &self,
        group: &str,
        from: &str,
        name: &str,
        context: Option<&str>,
        text: &str,
    ) -> String {
        let id = self.next_id("wamid.in");
        let mut m = json!({"from": from, "group_id": group, "id": id, "type": "text", "text": {"body": text}});
        if let Some(c) = context {
            m["context"] = json!({"from": "15550100199", "id": c});
        }
        self.deliver(from, name, m).await
    }

    /// `from` taps the quick-reply button `title` of the last template sent to them.
    pub async fn tap_template(&self, from: &str, name: &str, title: &str) -> String {
        let template = self
            .sent_to(from)
            .into_iter()
            .rev()
            .find(|m| m.kind == "template")
            .map(|m| m.id)
            .unwrap_or_default();
        let id = self.next_id("wamid.in");
        self.deliver(
            from,
            name,
            json!({"from": from, "id": id, "type": "button",
            "context": {"from": "15550100199", "id": template},
            "button": {"payload": title, "text": title}}),
        )
        .await
    }

    /// `from` answers message `context` with `text`.
    pub async fn reply(&self, from: &str, name: &str, context: &str, text: &str) -> String {
        let id = self.next_id("wamid.in");
        self.deliver(
            from,
            name,
            json!({"from": from, "id": id, "type": "text",
            "context": {"from": "15550100199", "id": context}, "text": {"body": text}}),
        )
        .await
    }

    /// `from` presses the reply button `button` (its id) of message `context`.
    pub async fn press(
        &self,
        from: &str,
        name: &str,
        context: &str,
        button: &str,
        title: &str,
    ) -> String {
        let id = self.next_id("wamid.in");
        self.deliver(from, name, json!({"from": from, "id": id, "type": "interactive",
            "context": {"from": "15550100199", "id": context},
            "interactive": {"type": "button_reply", "button_reply": {"id": button, "title": title}}}))
            .await
    }

    /// `from` reacts to message `to` with `emoji`.
    pub async fn react(&self, from: &str, name: &str, to: &str, emoji: &str) -> String {
        let id = self.next_id("wamid.in");
        self.deliver(
            from,
            name,
            json!({"from": from, "id": id, "type": "reaction",
            "reaction": {"message_id": to, "emoji": emoji}}),
        )
        .await
    }

    /// `from` sends a document (stored as media the bot fetches).
    pub async fn send_document(
        &self,
        from: &str,
        name: &str,
        file: &str,
        mime: &str,
        bytes: &[u8],
        caption: &str,
    ) -> String {
        let media = self.next_id("77");
        self.state
            .lock()
            .media
            .insert(media.clone(), (bytes.to_vec(), mime.to_string()));
        let id = self.next_id("wamid.in");
        self.deliver(from, name, json!({"from": from, "id": id, "type": "document",
            "document": {"id": media, "filename": file, "mime_type": mime, "caption": caption, "sha256": "x"}}))
            .await
    }

    /// Meta's subscription check: the status and body of `GET webhook?hub.…`.
    pub async fn subscribe(&self, verify_token: &str, challenge: &str) -> (u16, String) {
        let Some(url) = self.state.lock().webhook.clone() else {
            panic!("fake WhatsApp: set_webhook first");
        };
        let r = match reqwest::Client::new()
            .get(url)
            .query(&[
                ("hub.mode", "subscribe"),
                ("hub.verify_token", verify_token),
                ("hub.challenge", challenge),
            ])
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => panic!("fake WhatsApp: the webhook did not answer: {e}"),
        };
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }
}

fn graph_error(status: StatusCode, code: i64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AbCdEf"}})),
    )
        .into_response()
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", FakeWhatsApp::TOKEN))
}

async fn messages(
    State(state): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return graph_error(
            StatusCode::UNAUTHORIZED,
            190,
            "Invalid OAuth access token - Cannot parse access token",
        );
    }
    if id != FakeWhatsApp::PHONE_NUMBER_ID || body["messaging_product"] != "whatsapp" {
        return graph_error(StatusCode::BAD_REQUEST, 100, "Invalid parameter");
    }
    let mut s = state.lock();
    if body["status"] == "read" {
        s.reads
            .push(body["message_id"].as_str().unwrap_or_default().to_string());
        return axum::Json(json!({"success": true})).into_response();
    }
    if s.throttle > 0 {
        s.throttle -= 1;
        s.throttled += 1;
        return graph_error(StatusCode::BAD_REQUEST, 130429, "(#130429) Rate limit hit");
    }
    // Meta's pair rate limit ("Throughput": one message every 6 seconds to one user, in
    // bursts of up to 45): past it, 131056.
    let to = body["to"].as_str().unwrap_or_default().to_string();
    let pair = s
        .pair
        .entry(to.clone())
        .or_insert_with(|| crate::gcra::Gcra::new(PAIR_INTERVAL, PAIR_BURST));
    if pair.take().is_some() {
        s.pair_limited += 1;
        return graph_error(
            StatusCode::BAD_REQUEST,
            131056,
            "(#131056) (Business Account, Consumer Account) pair rate limit hit",
        );
    }
    let kind = body["type"].as_str().unwrap_or_default().to_string();
    let group = body["recipient_type"] == "group";
    if group && kind == "interactive" {
        return graph_error(
            StatusCode::BAD_REQUEST,
            131009,
            "(#131009) Parameter value is not valid: interactive messages are not supported in groups",
        );
    }
    let (text, buttons, file) = match kind.as_str() {
        "text" => {
            let t = body["text"]["body"].as_str().unwrap_or_default();
            if t.chars().count() > 4096 {
                return graph_error(
                    StatusCode::BAD_REQUEST,
                    100,
                    "(#100) Param text['body'] must be at most 4096 characters long.",
                );
            }
            (t.to_string(), Vec::new(), None)
        }
        "interactive" => {
            let i = &body["interactive"];
            let body_text = i["body"]["text"].as_str().unwrap_or_default();
            let buttons: Vec<(String, String)> = i["action"]["buttons"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| {
                    (
                        b["reply"]["id"].as_str().unwrap_or_default().to_string(),
                        b["reply"]["title"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            if body_text.chars().count() > 1024
                || buttons.is_empty()
                || buttons.len() > 3
                || buttons
                    .iter()
                    .any(|(id, t)| t.chars().count() > 20 || id.len() > 256)
            {
                return graph_error(
                    StatusCode::BAD_REQUEST,
                    131009,
                    "(#131009) Parameter value is not valid",
                );
            }
            (body_text.to_string(), buttons, None)
        }
        "image" | "document" => {
            let m = &body[kind.as_str()];
            let Some(media) = m["id"].as_str().and_then(|id| s.media.get(id).cloned()) else {
                return graph_error(
                    StatusCode::BAD_REQUEST,
                    131053,
                    "(#131053) Media upload error",
                );
            };
            (
                m["caption"].as_str().unwrap_or_default().to_string(),
                Vec::new(),
                Some((m["filename"].as_str().map(str::to_string), media.0)),
            )
        }
        "template" => (
            body["template"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            Vec::new(),
            None,
        ),
        _ => return graph_error(StatusCode::BAD_REQUEST, 100, "(#100) Invalid parameter"),
    };
    s.next += 1;
    let id = format!("wamid.out{}", s.next);
    // Outside the 24-hour window only a template goes: anything else is taken, then
    // reported failed (131047) in a status delivery, as Meta does.
    let closed = s.windows.get(&to).is_none_or(|at| now() - at >= 24 * 3600);
    if closed
        && kind != "template"
        && let Some(url) = s.webhook.clone()
    {
        let mut status = json!({"id": id, "status": "failed", "timestamp": now().to_string(),
            "recipient_id": to, "errors": [{"code": 131047, "title": "Re-engagement message",
            "message": "Re-engagement message", "error_data": {"details":
            "Message failed to send because more than 24 hours have passed since the customer last replied to this number."},
            "href": "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}]});
        if group {
            status["recipient_type"] = json!("group");
        }
        tokio::spawn(async move {
            let body = json!({"object": "whatsapp_business_account", "entry": [{"id": "102290129340398",
                "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550100199", "phone_number_id": FakeWhatsApp::PHONE_NUMBER_ID},
                "statuses": [status]}}]}]});
            let raw = serde_json::to_vec(&body).unwrap_or_default();
            let _ = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header(
                    "x-hub-signature-256",
                    FakeWhatsApp::sign(FakeWhatsApp::APP_SECRET, &raw),
                )
                .body(raw)
                .send()
                .await;
        });
    }
    s.sent.push(Sent {
        id: id.clone(),
        to: to.clone(),
        failed: closed && kind != "template",
        kind,
        text,
        buttons,
        file,
        at: std::time::Instant::now(),
    });
    axum::Json(json!({"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}], "messages": [{"id": id}]}))
        .into_response()
}

async fn upload(State(state): State<Shared>, headers: HeaderMap, mut form: Multipart) -> Response {
    if !authorized(&headers) {
        return graph_error(StatusCode::UNAUTHORIZED, 190, "Invalid OAuth access token");
    }
    let (mut file, mut product) = (None, None);
    while let Ok(Some(field)) = form.next_field().await {
        match field.name().unwrap_or_default() {
            "file" => {
                let mime = field
                    .content_type()
                    .unwrap_or("application/octet-stream")
                    .to_string();
                file = field.bytes().await.ok().map(|b| (b.to_vec(), mime));
            }
            "messaging_product" => product = field.text().await.ok(),
            _ => {}
        }
    }
    let (Some(file), Some("whatsapp")) = (file, product.as_deref()) else {
        return graph_error(
            StatusCode::BAD_REQUEST,
            100,
            "(#100) The parameter file is required",
        );
    };
    let mut s = state.lock();
    s.next += 1;
    let id = format!("90{}", s.next);
    s.media.insert(id.clone(), file);
    axum::Json(json!({"id": id})).into_response()
}

async fn object(
    State(state): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return graph_error(StatusCode::UNAUTHORIZED, 190, "Invalid OAuth access token");
    }
    if id == FakeWhatsApp::PHONE_NUMBER_ID {
        return axum::Json(json!({"display_phone_number": FakeWhatsApp::DISPLAY_NUMBER,
            "verified_name": "Switchboard Test", "id": id}))
        .into_response();
    }
    let s = state.lock();
    let Some((bytes, mime)) = s.media.get(&id) else {
        return graph_error(
            StatusCode::BAD_REQUEST,
            100,
            "(#100) Unsupported get request",
        );
    };
    axum::Json(json!({"messaging_product": "whatsapp", "url": format!("http://{}/download/{id}", headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1")),
        "mime_type": mime, "sha256": "x", "file_size": bytes.len(), "id": id}))
    .into_response()
}

async fn download(
    State(state): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    match state.lock().media.get(&id) {
        Some((bytes, _)) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
