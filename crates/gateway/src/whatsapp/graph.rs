//! The Graph API calls of the WhatsApp channel (Cloud API reference: "Messages", "Media",
//! "Phone Numbers"): text, interactive reply buttons, templates, read receipts, media up
//! and down. Every call goes through the kit's [`PlatformClient`] (outbox, retry policy).

use std::time::Duration;

use serde_json::{Value, json};

use std::sync::Arc;

use super::Wa;
use crate::channel::{Button, ChannelError, ChatKind, ChatRef, OutgoingFile};
use crate::platform::{self, Answer, Call, Verdict};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const FILE_TIMEOUT: Duration = Duration::from_secs(120);
/// WhatsApp's limits on an interactive message: its body, a button's title and id.
const MAX_BODY: usize = 1024;
const MAX_TITLE: usize = 20;
const MAX_BUTTON_ID: usize = 256;
const MAX_BUTTONS: usize = 3;
/// Meta's error codes that mean "slow down": the app's or the number's rate, the pair rate
/// (one person written to too often).
const THROTTLED: &[i64] = &[4, 80007, 130429, 131056];

impl Wa {
    pub(super) fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// What an answer means: the JSON on success; Meta's `error` object otherwise.
    fn verdict(&self, label: &str, answer: Answer) -> Verdict<Value> {
        let body = answer.json().unwrap_or(Value::Null);
        if answer.status.is_success() {
            return Verdict::Done(body);
        }
        let code = body["error"]["code"].as_i64().unwrap_or_default();
        if answer.status.as_u16() == 429 || THROTTLED.contains(&code) {
            return Verdict::RateLimited(answer.retry_after());
        }
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no error message")
            .to_string();
        let error = self.client.api_error(
            label,
            answer.status.as_u16(),
            &format!("{message} (code {code})"),
        );
        if answer.status.is_server_error() {
            Verdict::Transient(error)
        } else {
            Verdict::Failed(error)
        }
    }

    /// `POST /{phone-number-id}/messages` with `payload` to the chat (a person, or a group
    /// by its id); the sent message's id.
    async fn message(&self, chat: &ChatRef, payload: Value) -> Result<String, ChannelError> {
        let keys = [platform::BOT.to_owned(), format!("person:{}", chat.id)];
        let mut body = json!({
            "messaging_product": "whatsapp",
            "recipient_type": if chat.kind == ChatKind::Direct { "individual" } else { "group" },
            "to": chat.id,
        });
        if let (Some(b), Some(p)) = (body.as_object_mut(), payload.as_object()) {
            b.extend(p.clone());
        }
        let answer = self
            .client
            .call(
                Call {
                    label: "messages",
                    keys: &keys,
                    timeout: CALL_TIMEOUT,
                    policy: None,
                },
                |http, base| {
                    http.post(format!("{base}/{}/messages", self.cfg.phone_number_id))
                        .bearer_auth(&self.cfg.access_token)
                        .json(&body)
                },
                |a| self.verdict("messages", a),
            )
            .await?;
        answer["messages"][0]["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.other("messages: the answer names no message id"))
    }

    pub(super) async fn send_text(
        &self,
        chat: &ChatRef,
        text: &str,
    ) -> Result<String, ChannelError> {
        self.message(
            chat,
            json!({"type": "text", "text": {"preview_url": false, "body": text}}),
        )
        .await
    }

    /// A text quoting the message `to` (WhatsApp's reply `context`).
    pub(super) async fn send_reply(
        &self,
        chat: &ChatRef,
        text: &str,
        to: &str,
    ) -> Result<String, ChannelError> {
        self.message(
            chat,
            json!({"type": "text", "context": {"message_id": to},
                   "text": {"preview_url": false, "body": text}}),
        )
        .await
    }

    /// A message with reply buttons (at most three). A text longer than an interactive
    /// body goes first on its own, and the buttons under the end of it.
    pub(super) async fn send_buttons(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        let body = if text.chars().count() > MAX_BODY {
            self.send_text(chat, text).await?;
            "⬆️".to_string()
        } else {
            text.to_string()
        };
        let buttons: Vec<Value> = buttons
            .iter()
            .take(MAX_BUTTONS)
            .map(|b| {
                json!({"type": "reply", "reply": {
                    "id": b.data.chars().take(MAX_BUTTON_ID).collect::<String>(),
                    "title": b.text.chars().take(MAX_TITLE).collect::<String>(),
                }})
            })
            .collect();
        self.message(
            chat,
            json!({"type": "interactive", "interactive": {
                "type": "button",
                "body": {"text": body},
                "action": {"buttons": buttons},
            }}),
        )
        .await
    }

    pub(super) async fn send_template(
        &self,
        chat: &ChatRef,
        name: &str,
        language: &str,
    ) -> Result<String, ChannelError> {
        self.message(
            chat,
            json!({"type": "template", "template": {"name": name, "language": {"code": language}}}),
        )
        .await
    }

    /// `POST /{phone-number-id}/media` (multipart): the uploaded file's media id.
    pub(super) async fn upload(&self, file: &OutgoingFile) -> Result<String, ChannelError> {
        let keys = [platform::BOT.to_owned()];
        let answer = self
            .client
            .call(
                Call {
                    label: "media",
                    keys: &keys,
                    timeout: FILE_TIMEOUT,
                    policy: None,
                },
                |http, base| {
                    let part = reqwest::multipart::Part::stream(file.bytes.clone())
                        .file_name(file.name.clone());
                    let part = part.mime_str(&file.mime).unwrap_or_else(|_| {
                        reqwest::multipart::Part::stream(file.bytes.clone())
                            .file_name(file.name.clone())
                    });
                    let form = reqwest::multipart::Form::new()
                        .text("messaging_product", "whatsapp")
                        .text("type", file.mime.clone())
                        .part("file", part);
                    http.post(format!("{base}/{}/media", self.cfg.phone_number_id))
                        .bearer_auth(&self.cfg.access_token)
                        .multipart(form)
                },
                |a| self.verdict("media", a),
            )
            .await?;
        answer["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.other("media: the answer names no media id"))
    }

    /// A message of an uploaded file: an image for a photo, else a document (with its
    /// name), the caption under it.
    pub(super) async fn send_media(
        &self,
        chat: &ChatRef,
        file: &OutgoingFile,
        media: &str,
    ) -> Result<String, ChannelError> {
        let caption = file.caption.clone().unwrap_or_default();
        // WhatsApp's image messages take JPEG and PNG only; anything else goes as a document.
        let payload = if matches!(file.mime.as_str(), "image/jpeg" | "image/png") {
            json!({"type": "image", "image": {"id": media, "caption": caption}})
        } else {
            json!({"type": "document", "document": {"id": media, "filename": file.name, "caption": caption}})
        };
        self.message(chat, payload).await
    }

    /// A received file: `GET /{media-id}` names its URL (and size), which is then fetched
    /// with the token — only on the API's host or Meta's (`fbsbx.com`, `whatsapp.net`).
    pub(super) async fn download(
        &self,
        media: &str,
        max_bytes: u64,
    ) -> Result<bytes::Bytes, String> {
        if media.is_empty() || !media.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err("this attachment cannot be fetched".into());
        }
        let keys = [platform::BOT.to_owned()];
        let info = self
            .client
            .call(
                Call {
                    label: "media info",
                    keys: &keys,
                    timeout: CALL_TIMEOUT,
                    policy: None,
                },
                |http, base| {
                    http.get(format!("{base}/{media}"))
                        .bearer_auth(&self.cfg.access_token)
                },
                |a| self.verdict("media info", a),
            )
            .await
            .map_err(|e| e.to_string())?;
        if info["file_size"].as_u64().is_some_and(|n| n > max_bytes) {
            return Err(platform::client::too_large(max_bytes));
        }
        let url = info["url"]
            .as_str()
            .ok_or("the media has no URL (expired?)")?;
        let url = platform::file_url_allowed(
            url,
            self.client.base(),
            &["fbsbx.com", "whatsapp.net", "facebook.com"],
        )?;
        self.client
            .download(
                "media",
                |http| http.get(url.clone()).bearer_auth(&self.cfg.access_token),
                max_bytes,
            )
            .await
    }

    /// `GET /{phone-number-id}`: the business's verified name (if any) and its number.
    pub(super) async fn number(&self) -> Result<(Option<String>, String), ChannelError> {
        let keys = [platform::BOT.to_owned()];
        let v = self
            .client
            .call(
                Call {
                    label: "phone number",
                    keys: &keys,
                    timeout: CALL_TIMEOUT,
                    policy: None,
                },
                |http, base| {
                    http.get(format!(
                        "{base}/{}?fields=display_phone_number,verified_name",
                        self.cfg.phone_number_id
                    ))
                    .bearer_auth(&self.cfg.access_token)
                },
                |a| self.verdict("phone number", a),
            )
            .await?;
        let number = v["display_phone_number"].as_str().unwrap_or_default();
        if number.is_empty() {
            return Err(self.other("phone number: the answer has no display_phone_number"));
        }
        Ok((
            v["verified_name"].as_str().map(str::to_string),
            number.to_string(),
        ))
    }
}

/// Marks a received message read, in the background, through the outbox (the number's
/// rate) and tried once: a lost receipt only leaves grey ticks.
pub(super) fn mark_read(wa: Arc<Wa>, message_id: String) {
    tokio::spawn(async move {
        let keys = [platform::BOT.to_owned()];
        let once = wa.client.policy().once();
        let body =
            json!({"messaging_product": "whatsapp", "status": "read", "message_id": message_id});
        let sent = wa
            .client
            .call(
                Call {
                    label: "mark read",
                    keys: &keys,
                    timeout: CALL_TIMEOUT,
                    policy: Some(once),
                },
                |http, base| {
                    http.post(format!("{base}/{}/messages", wa.cfg.phone_number_id))
                        .bearer_auth(&wa.cfg.access_token)
                        .json(&body)
                },
                |a| wa.verdict("mark read", a),
            )
            .await;
        if let Err(e) = sent {
            tracing::debug!(channel = %wa.cfg.name, error = %e, "marking a WhatsApp message read");
        }
    });
}
