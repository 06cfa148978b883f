//! The sync loop: `/sync` from the stored token, every new event handed to the sink, then
//! the next token stored (see the module docs of `matrix`).

use std::time::Duration;

use matrix_sdk::config::SyncSettings;
use matrix_sdk::deserialized_responses::{TimelineEvent, TimelineEventKind};
use matrix_sdk::ruma::events::room::MediaSource;
use matrix_sdk::ruma::events::room::message::{
    AudioMessageEventContent, FileMessageEventContent, ImageMessageEventContent, MessageType,
    OriginalSyncRoomMessageEvent, Relation, RoomMessageEventContent, VideoMessageEventContent,
};
use matrix_sdk::ruma::events::{
    AnySyncMessageLikeEvent, AnySyncTimelineEvent, SyncMessageLikeEvent,
};
use matrix_sdk::ruma::{OwnedRoomId, OwnedUserId, UserId};
use matrix_sdk::{Client, Room};
use tokio_util::sync::CancellationToken;

use super::MatrixChannel;
use crate::channel::{
    Attachment, ChannelContext, ChannelError, ChatKind, ChatRef, Inbound, InboundMessage, Peer,
    Reaction,
};

/// The channel-state key of the last `next_batch` whose events were all handed in.
pub(super) const SYNC_TOKEN: &str = "sync_token";

/// What a person reads when the bot could not decrypt their message.
pub(super) const UNDECRYPTABLE: &str = "🔒 I could not decrypt your message, so I did not read it. Your client may not have shared its keys with this bot's device yet: send it again (verifying the bot's device helps).";

pub(super) async fn run(
    ch: &MatrixChannel,
    ctx: ChannelContext,
    cancel: CancellationToken,
) -> Result<(), ChannelError> {
    let mut backoff = Duration::from_secs(1);
    ch.health.connecting("logging in");
    let client = loop {
        let attempt = tokio::select! {
            _ = cancel.cancelled() => {
                ch.health.stopped();
                return Ok(());
            }
            r = ch.client() => r,
        };
        match attempt {
            Ok(c) => break c.clone(),
            Err(e) => {
                tracing::warn!(channel = %ch.cfg.name, error = %e, "Matrix login failed; retrying");
                ch.health.retrying("logging in", e.to_string());
                if pause(&cancel, &mut backoff).await {
                    ch.health.stopped();
                    return Ok(());
                }
            }
        }
    };
    let Some(me) = client.user_id().map(ToOwned::to_owned) else {
        return Err(ch.error("logged in without a user id"));
    };
    loop {
        let token = ctx.state.get(SYNC_TOKEN).await;
        // The first start takes the rooms as they are: what was said before is not answered.
        let first = token.is_none();
        let mut settings = SyncSettings::default();
        if let Some(t) = token {
            settings = settings.token(t).timeout(ch.cfg.sync_timeout);
        }
        let synced = tokio::select! {
            _ = cancel.cancelled() => {
                ch.health.stopped();
                return Ok(());
            }
            r = client.sync_once(settings) => r,
        };
        let response = match synced {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(channel = %ch.cfg.name, error = %e, "Matrix sync failed; retrying");
                ch.health.retrying("syncing", e.to_string());
                if pause(&cancel, &mut backoff).await {
                    ch.health.stopped();
                    return Ok(());
                }
                continue;
            }
        };
        backoff = Duration::from_secs(1);
        ch.health.connected("syncing");
        for room_id in response.rooms.invited.keys() {
            on_invite(ch, &client, room_id).await;
        }
        if !first && let Err(e) = hand_in(ch, &ctx, &client, &me, &response.rooms.joined).await {
            // Not stored: the same events are synced again from the stored token.
            tracing::warn!(channel = %ch.cfg.name, error = %e, "an inbound Matrix event could not be stored; syncing it again");
            ch.health.error(crate::health::NOT_STORED);
            if pause(&cancel, &mut backoff).await {
                ch.health.stopped();
                return Ok(());
            }
            continue;
        }
        if let Err(e) = ctx.state.set(SYNC_TOKEN, &response.next_batch).await {
            tracing::warn!(channel = %ch.cfg.name, error = %e, "storing the Matrix sync token");
        }
    }
}

/// Waits `backoff` (doubling it, up to a minute); true when cancelled meanwhile.
async fn pause(cancel: &CancellationToken, backoff: &mut Duration) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(Duration::from_secs(60));
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(wait) => false,
    }
}

/// Joins a room the bot was invited to when the invite is allowed; declines it otherwise.
async fn on_invite(ch: &MatrixChannel, client: &Client, room_id: &OwnedRoomId) {
    let Some(room) = client.get_room(room_id) else {
        return;
    };
    let inviter = match room.invite_details().await {
        Ok(d) => d.inviter_id.to_string(),
        Err(e) => {
            tracing::warn!(channel = %ch.cfg.name, room = %room_id, error = %e, "reading a Matrix invite");
            return;
        }
    };
    let direct = room.is_direct().await.unwrap_or(false);
    let allowed = ch.cfg.allowed_users.contains(&inviter)
        || ch.cfg.allowed_rooms.iter().any(|r| r == room_id.as_str())
        || direct;
    if allowed {
        match room.join().await {
            Ok(()) => {
                tracing::info!(channel = %ch.cfg.name, room = %room_id, %inviter, direct, "joined a Matrix room on invite")
            }
            Err(e) => {
                tracing::warn!(channel = %ch.cfg.name, room = %room_id, error = %e, "joining a Matrix room")
            }
        }
    } else {
        tracing::warn!(channel = %ch.cfg.name, room = %room_id, %inviter, "declined a Matrix invite from someone not allowed (allowed_users / allowed_rooms)");
        if let Err(e) = room.leave().await {
            tracing::warn!(channel = %ch.cfg.name, room = %room_id, error = %e, "declining a Matrix invite");
        }
    }
}

/// Hands every new message and reaction of the joined rooms to the sink, in order; the
/// first one not stored is the error.
async fn hand_in(
    ch: &MatrixChannel,
    ctx: &ChannelContext,
    client: &Client,
    me: &UserId,
    joined: &std::collections::BTreeMap<OwnedRoomId, matrix_sdk::sync::JoinedRoomUpdate>,
) -> Result<(), String> {
    for (room_id, update) in joined {
        let Some(room) = client.get_room(room_id) else {
            continue;
        };
        for ev in &update.timeline.events {
            if let Some(item) = map_event(ch, &room, me, ev).await {
                ctx.sink.accept(item).await?;
            }
        }
    }
    Ok(())
}

/// A timeline event as the gateway takes it: a message or a reaction from someone else;
/// `None` for anything else. An event that cannot be decrypted is answered in its room.
async fn map_event(
    ch: &MatrixChannel,
    room: &Room,
    me: &UserId,
    ev: &TimelineEvent,
) -> Option<Inbound> {
    if let TimelineEventKind::UnableToDecrypt { event, utd_info } = &ev.kind {
        let sender: Option<OwnedUserId> = event.get_field("sender").ok().flatten();
        if sender.as_deref() != Some(me) {
            tracing::warn!(channel = %ch.cfg.name, room = %room.room_id(), event = ?ev.event_id(), reason = ?utd_info.reason, "a Matrix message could not be decrypted");
            let notice = RoomMessageEventContent::notice_plain(UNDECRYPTABLE);
            if let Err(e) = room.send(notice).await {
                tracing::warn!(channel = %ch.cfg.name, error = %e, "telling a room a message could not be decrypted");
            }
        }
        return None;
    }
    let event = ev.kind.raw().deserialize().ok()?;
    if event.sender() == me {
        return None;
    }
    match event {
        AnySyncTimelineEvent::MessageLike(AnySyncMessageLikeEvent::RoomMessage(
            SyncMessageLikeEvent::Original(m),
        )) => message(ch, room, me, m).await.map(Inbound::Message),
        AnySyncTimelineEvent::MessageLike(AnySyncMessageLikeEvent::Reaction(
            SyncMessageLikeEvent::Original(r),
        )) => {
            let chat = ChatRef {
                id: room.room_id().to_string(),
                kind: kind_of(room).await,
                thread: None,
            };
            Some(Inbound::Reaction(Reaction {
                channel: ch.cfg.name.clone(),
                reaction_id: r.event_id.to_string(),
                peer: peer(room, &r.sender).await,
                chat,
                message_id: r.content.relates_to.event_id.to_string(),
                key: r.content.relates_to.key,
            }))
        }
        _ => None,
    }
}

async fn message(
    ch: &MatrixChannel,
    room: &Room,
    me: &UserId,
    m: OriginalSyncRoomMessageEvent,
) -> Option<InboundMessage> {
    let (mut thread, mut reply_to) = (None, None);
    match &m.content.relates_to {
        // An edit of an earlier message is not a new one.
        Some(Relation::Replacement(_)) => return None,
        Some(Relation::Thread(t)) => {
            thread = Some(t.event_id.to_string());
            if !t.is_falling_back {
                reply_to = t.in_reply_to.as_ref().map(|r| r.event_id.to_string());
            }
        }
        Some(Relation::Reply(r)) => reply_to = Some(r.in_reply_to.event_id.to_string()),
        _ => {}
    }
    let (body, attachments) = match &m.content.msgtype {
        MessageType::Text(t) => (t.body.clone(), Vec::new()),
        MessageType::Emote(e) => (e.body.clone(), Vec::new()),
        // Notices are what bots send: never answered (no loops between bots).
        MessageType::Notice(_) => return None,
        MessageType::Image(i) => file("photo", i),
        MessageType::File(f) => file("document", f),
        MessageType::Audio(a) => file("voice", a),
        MessageType::Video(v) => file("video", v),
        _ => return None,
    };
    let body = if reply_to.is_some() {
        matrix_sdk::ruma::events::room::message::sanitize::remove_plain_reply_fallback(&body)
            .to_owned()
    } else {
        body
    };
    let kind = if thread.is_some() {
        ChatKind::Thread
    } else {
        kind_of(room).await
    };
    let mentioned = m
        .content
        .mentions
        .as_ref()
        .is_some_and(|x| x.user_ids.iter().any(|u| u == me))
        || body.contains(me.as_str());
    let addressed = kind == ChatKind::Direct || mentioned;
    if kind != ChatKind::Direct && ch.cfg.require_mention && !addressed {
        return None;
    }
    let text = body.replace(me.as_str(), "").trim().to_owned();
    if text.is_empty() && attachments.is_empty() {
        return None;
    }
    Some(InboundMessage {
        channel: ch.cfg.name.clone(),
        peer: peer(room, &m.sender).await,
        chat: ChatRef {
            id: room.room_id().to_string(),
            kind,
            thread,
        },
        text,
        message_id: m.event_id.to_string(),
        addressed,
        attachments,
        reply_to,
        edited: false,
        meta: serde_json::json!({ "event_id": m.event_id, "room_id": room.room_id() }),
    })
}

/// What the file messages (image, file, audio, video) share, each with its own info type.
trait Media {
    /// Its name, caption, size, MIME type and media source.
    fn parts(
        &self,
    ) -> (
        &str,
        Option<&str>,
        Option<u64>,
        Option<String>,
        &MediaSource,
    );
}

macro_rules! media {
    ($($content:ty),*) => {$(
        impl Media for $content {
            fn parts(&self) -> (&str, Option<&str>, Option<u64>, Option<String>, &MediaSource) {
                let info = self.info.as_ref();
                (
                    self.filename(),
                    self.caption(),
                    info.and_then(|f| f.size).map(u64::from),
                    info.and_then(|f| f.mimetype.clone()),
                    &self.source,
                )
            }
        }
    )*};
}

media!(
    ImageMessageEventContent,
    FileMessageEventContent,
    AudioMessageEventContent,
    VideoMessageEventContent
);

/// A file message: its caption as the text, the file as the attachment (its media source,
/// encrypted or not, as JSON: what [`super::MatrixChannel`]'s `fetch` reads).
fn file(kind: &str, content: &impl Media) -> (String, Vec<Attachment>) {
    let (name, caption, size, mime, source) = content.parts();
    let attachment = Attachment {
        kind: kind.into(),
        name: Some(name.to_owned()),
        size,
        mime,
        source: serde_json::to_string(source).ok(),
    };
    (caption.unwrap_or_default().to_owned(), vec![attachment])
}

/// A room of two (or one marked direct) is a DM; others are groups.
async fn kind_of(room: &Room) -> ChatKind {
    // The count comes with a sync's room summary; until one has come, the members stored.
    let joined = match room.joined_members_count() {
        0 => room
            .members_no_sync(matrix_sdk::RoomMemberships::JOIN)
            .await
            .map_or(0, |m| m.len() as u64),
        n => n,
    };
    if room.is_direct().await.unwrap_or(false) || joined <= 2 {
        ChatKind::Direct
    } else {
        ChatKind::Group
    }
}

/// The sender as the room shows them: their display name there, else their user id.
async fn peer(room: &Room, sender: &UserId) -> Peer {
    let name = match room.get_member_no_sync(sender).await {
        Ok(Some(m)) => m.display_name().map(str::to_owned),
        _ => None,
    };
    Peer {
        id: sender.to_string(),
        name: name.unwrap_or_else(|| sender.localpart().to_owned()),
        username: Some(sender.to_string()),
    }
}
