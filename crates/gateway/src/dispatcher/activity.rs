//! Each chat's last activity (`GET /v1/gateway/sessions`): inbound messages note it in
//! `on_message`; outbound ones through [`Tracked`], which every channel of a gateway is
//! wrapped in, so that every post, edit and file — replies, prompts, notices, notifications
//! — counts without each caller saying so.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChatRef, Fetched,
    Inbound, InboundHttpError, OutgoingFile, Peer,
};
use crate::health::ChannelHealth;
use crate::store::GatewayStore;

/// A channel whose successful posts, edits and files note their chat's activity. Every
/// other call goes to the channel as it is. (A method added to [`Channel`] must be
/// forwarded here too, or a channel's own version of it would be skipped.)
pub(crate) struct Tracked {
    pub(crate) inner: Arc<dyn Channel>,
    pub(crate) store: GatewayStore,
}

impl Tracked {
    /// Notes the activity in the background: a slow database never holds up a message.
    fn touch(&self, chat: &ChatRef) {
        let store = self.store.clone();
        let channel = self.inner.name().to_owned();
        let chat = chat.clone();
        tokio::spawn(async move {
            if let Err(e) = store.touch_chat(&channel, &chat).await {
                tracing::debug!(%channel, error = %e, "could not note a chat's last activity");
            }
        });
    }
}

#[async_trait]
impl Channel for Tracked {
    fn info(&self) -> &crate::channel::ChannelInfo {
        self.inner.info()
    }

    fn buttons_in(&self, chat: &ChatRef) -> bool {
        self.inner.buttons_in(chat)
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.inner.run(ctx, cancel).await
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        let r = self.inner.send(chat, text, buttons).await;
        if r.is_ok() {
            self.touch(chat);
        }
        r
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let r = self.inner.edit(chat, message_id, text, buttons).await;
        if r.is_ok() {
            self.touch(chat);
        }
        r
    }

    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError> {
        self.inner.answer_press(press, text).await
    }

    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.inner.tell_presser(press, text).await
    }

    async fn tell(&self, chat: &ChatRef, peer: &Peer, text: &str) -> Result<(), ChannelError> {
        let r = self.inner.tell(chat, peer, text).await;
        if r.is_ok() {
            self.touch(chat);
        }
        r
    }

    async fn test(&self) -> Result<String, ChannelError> {
        self.inner.test().await
    }

    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        self.inner.open_link().await
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let r = self.inner.send_file(chat, file).await;
        if r.is_ok() {
            self.touch(chat);
        }
        r
    }

    async fn fetch(&self, attachment: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        self.inner.fetch(attachment, max_bytes).await
    }

    fn status(&self) -> String {
        self.inner.status()
    }

    async fn backlog(&self) -> Option<Result<crate::channel::Backlog, ChannelError>> {
        self.inner.backlog().await
    }

    fn health(&self) -> ChannelHealth {
        self.inner.health()
    }

    async fn inbound_http(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Option<Inbound>, InboundHttpError> {
        self.inner.inbound_http(headers, body).await
    }

    async fn inbound_http_all(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Vec<Inbound>, InboundHttpError> {
        self.inner.inbound_http_all(headers, body).await
    }

    fn http_subscribe(
        &self,
        query: &std::collections::HashMap<String, String>,
    ) -> Result<String, InboundHttpError> {
        self.inner.http_subscribe(query)
    }

    fn http_challenge(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> Option<String> {
        self.inner.http_challenge(headers, body)
    }

    fn http_answer(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> Option<String> {
        self.inner.http_answer(headers, body)
    }
}
