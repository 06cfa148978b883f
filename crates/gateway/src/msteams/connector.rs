//! The Bot Connector API calls (learn.microsoft.com → "Bot Connector API reference"):
//! `POST /v3/conversations/{id}/activities` to send, `PUT …/activities/{activityId}` to
//! update (streaming and settled prompts), with the bot's token; Adaptive Cards with
//! `Action.Submit` for approval buttons; file consent cards and the upload they unlock.

use std::time::Duration;

use serde_json::{Value, json};

use super::TeamsChannel;
use crate::channel::{Button, ChannelError, ChatRef, OutgoingFile};
use crate::platform::{self, Answer, Call, Verdict};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const FILE_TIMEOUT: Duration = Duration::from_secs(120);

/// The outbox keys of a call in conversation `id`: the bot's, and the conversation's
/// (Teams' per-thread limits, see `limits` in mod.rs).
pub(super) fn keys(id: &str) -> Vec<String> {
    vec![
        platform::BOT.to_owned(),
        format!("thread:{id}"),
        format!("threadhour:{id}"),
    ]
}

/// An Adaptive Card showing `text` with one `Action.Submit` per button (`data.sb` is
/// handed back on a press).
pub(super) fn card(text: &str, buttons: &[Button]) -> Value {
    json!({
        "contentType": "application/vnd.microsoft.card.adaptive",
        "content": {
            "type": "AdaptiveCard",
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "version": "1.4",
            "body": [{"type": "TextBlock", "text": text, "wrap": true}],
            "actions": buttons.iter().map(|b| json!({
                "type": "Action.Submit",
                "title": b.text,
                "data": {"sb": b.data},
            })).collect::<Vec<_>>(),
        },
    })
}

impl TeamsChannel {
    /// What an answer means: the JSON; a 429 waited out by `Retry-After`; the Connector's
    /// error (`{"error":{"code","message"}}`) otherwise.
    fn verdict(&self, label: &str, answer: Answer) -> Verdict<Value> {
        let status = answer.status;
        if status.is_success() {
            return Verdict::Done(answer.json().unwrap_or(Value::Null));
        }
        // 412 (a precondition failed in Teams' backend) is to be tried again, Microsoft says.
        if status.as_u16() == 429 || status.as_u16() == 412 {
            return Verdict::RateLimited(answer.retry_after());
        }
        let body = answer.json().unwrap_or(Value::Null);
        let why = match (
            body["error"]["code"].as_str(),
            body["error"]["message"].as_str(),
        ) {
            (Some(c), Some(m)) => format!("{m} ({c})"),
            (_, Some(m)) => m.to_string(),
            _ => format!("HTTP {status}"),
        };
        let e = self.client.api_error(label, status.as_u16(), &why);
        if status.is_server_error() {
            Verdict::Transient(e)
        } else {
            Verdict::Failed(e)
        }
    }

    /// The service URL of a conversation, as its activities gave it.
    pub(super) async fn service_url(&self, conversation: &str) -> Result<String, ChannelError> {
        if let Some(u) = self.services.lock().get(conversation) {
            return Ok(u.clone());
        }
        let stored = match self.ctx.get() {
            Some(ctx) => ctx.state.get(&super::service_key(conversation)).await,
            None => None,
        };
        match stored {
            Some(u) => {
                self.services
                    .lock()
                    .insert(conversation.to_string(), u.clone());
                Ok(u)
            }
            None => Err(self.other(format!(
                "no service URL known for conversation {conversation:?} (it has not written yet)"
            ))),
        }
    }

    /// One Connector call with the bot's token.
    pub(super) async fn connector(
        &self,
        method: reqwest::Method,
        chat: &ChatRef,
        activity: Option<&str>,
        body: &Value,
        edit: bool,
    ) -> Result<Option<Value>, ChannelError> {
        let conversation = chat.id.as_str();
        let service = self.service_url(conversation).await?;
        let token = self.bot_token().await?;
        // A channel thread is the channel's conversation id with `;messageid=ROOT`.
        let full = match (&chat.kind, &chat.thread) {
            (crate::channel::ChatKind::Thread, Some(root)) => {
                format!("{conversation};messageid={root}")
            }
            _ => conversation.to_string(),
        };
        let conv = form_urlencoded::byte_serialize(full.as_bytes()).collect::<String>();
        let url = match activity {
            Some(a) => format!(
                "{}/v3/conversations/{conv}/activities/{}",
                service.trim_end_matches('/'),
                form_urlencoded::byte_serialize(a.as_bytes()).collect::<String>()
            ),
            None => format!(
                "{}/v3/conversations/{conv}/activities",
                service.trim_end_matches('/')
            ),
        };
        let label = format!(
            "{method} /v3/conversations/…/activities{}",
            if activity.is_some() { "/…" } else { "" }
        );
        let mut keys = keys(&full);
        if edit {
            keys.push(platform::edit_key(conversation));
        }
        let call = Call {
            label: &label,
            keys: &keys,
            timeout: CALL_TIMEOUT,
            policy: None,
        };
        let build = |http: &reqwest::Client, _: &str| {
            http.request(method.clone(), &url)
                .bearer_auth(&token)
                .json(body)
        };
        let read = |a| self.verdict(&label, a);
        if edit {
            let key = platform::message_key(&full, activity.unwrap_or_default());
            self.client.edit(call, &key, build, read).await
        } else {
            self.client
                .call_also(call, Some(&token), build, read)
                .await
                .map(Some)
        }
    }

    /// Sends `activity` to `chat`; its id.
    pub(super) async fn post(
        &self,
        chat: &ChatRef,
        activity: Value,
    ) -> Result<String, ChannelError> {
        let answer = self
            .connector(reqwest::Method::POST, chat, None, &activity, false)
            .await?
            .unwrap_or_default();
        answer["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.other("send: the answer has no id"))
    }

    /// After a file consent was accepted: the content `PUT` to the upload URL Teams gave
    /// (OneDrive; no token), then a file info card in the chat.
    pub(super) async fn upload_consented(
        &self,
        chat: &ChatRef,
        file: &OutgoingFile,
        upload: &Value,
    ) -> Result<String, ChannelError> {
        let url = upload["uploadUrl"]
            .as_str()
            .ok_or_else(|| self.other("file consent: no upload URL"))?;
        let len = file.bytes.len();
        let r = self
            .client
            .http()
            .put(url)
            .header(
                "content-range",
                format!("bytes 0-{}/{len}", len.saturating_sub(1)),
            )
            .body(file.bytes.clone())
            .timeout(FILE_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.client.unreachable("file upload", e, Some(url)))?;
        if !r.status().is_success() {
            return Err(self.client.api_error(
                "file upload",
                r.status().as_u16(),
                "the upload was refused",
            ));
        }
        let info = json!({
            "contentType": "application/vnd.microsoft.teams.card.file.info",
            "contentUrl": upload["contentUrl"],
            "name": upload["name"],
            "content": {"uniqueId": upload["uniqueId"], "fileType": upload["fileType"]},
        });
        let mut activity = json!({"type": "message", "attachments": [info]});
        if let Some(c) = &file.caption {
            activity["text"] = json!(c);
        }
        self.post(chat, activity).await
    }
}
