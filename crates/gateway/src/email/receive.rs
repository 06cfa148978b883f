//! The receive loop: log in, open the mailbox, hand every mail after the stored UID cursor
//! to the sink (advancing the cursor after each is stored), then wait — IDLE where the
//! server has it, a pause otherwise — and again.

use std::time::Duration;

use futures::TryStreamExt as _;
use tokio_util::sync::CancellationToken;

use super::imap::{self, Session};
use super::mail::{self, Refusal};
use super::{EmailChannel, root_key, thread_key};
use crate::channel::{
    Attachment, ChannelContext, ChannelError, ChatKind, ChatRef, Inbound, InboundMessage, Peer,
};

/// The channel-state key of the cursor: `UIDVALIDITY:UID` of the last mail handled.
pub(super) const CURSOR: &str = "cursor";

pub(super) async fn run(
    ch: &EmailChannel,
    ctx: ChannelContext,
    cancel: CancellationToken,
) -> Result<(), ChannelError> {
    let cfg = &ch.cfg;
    if cfg.trusted_authserv_id.is_none() {
        tracing::warn!(channel = %cfg.name, "no trusted_authserv_id: a mail's From: address is taken on trust (see docs/chat.md, Email)");
    }
    let mut backoff = Duration::from_secs(1);
    loop {
        ch.health.connecting("logging in");
        let outcome = tokio::select! {
            _ = cancel.cancelled() => None,
            r = session(ch, &ctx, &cancel) => Some(r),
        };
        match outcome {
            None | Some(Ok(())) => {
                ch.health.stopped();
                return Ok(());
            }
            Some(Err(Failure::Connection(e))) => {
                tracing::warn!(channel = %cfg.name, error = %e, "IMAP connection failed; retrying");
                ch.health.retrying("connecting", e);
            }
            Some(Err(Failure::NotStored(e))) => {
                // The cursor stayed where it was: the same mail is read again.
                tracing::warn!(channel = %cfg.name, error = %e, "an inbound mail could not be stored; reading it again");
                ch.health.error(crate::health::NOT_STORED);
            }
        }
        let wait = backoff;
        backoff = (backoff * 2).min(Duration::from_secs(60));
        tokio::select! {
            _ = cancel.cancelled() => {
                ch.health.stopped();
                return Ok(());
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

enum Failure {
    Connection(String),
    NotStored(String),
}

/// One connection: reads what is new, then waits for more, until an error (or cancel,
/// which drops this future).
async fn session(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    cancel: &CancellationToken,
) -> Result<(), Failure> {
    let cfg = &ch.cfg;
    let mut session = imap::login(cfg).await.map_err(Failure::Connection)?;
    let idle = session
        .capabilities()
        .await
        .map(|c| c.has_str("IDLE"))
        .unwrap_or(false);
    let mailbox = session
        .select(&cfg.mailbox)
        .await
        .map_err(|e| Failure::Connection(format!("IMAP: opening {}: {e}", cfg.mailbox)))?;
    let validity = mailbox.uid_validity.unwrap_or(0);
    let mut cursor = match stored_cursor(ctx, validity).await {
        Some(uid) => uid,
        None => first_cursor(&mut session, mailbox.uid_next).await?,
    };
    ch.health.connected(if idle {
        "waiting for mail (IDLE)"
    } else {
        "polling"
    });
    loop {
        cursor = hand_in(ch, ctx, &mut session, validity, cursor).await?;
        if cancel.is_cancelled() {
            return Ok(());
        }
        session = wait(session, idle, cfg.poll_interval).await?;
    }
}

/// The stored cursor, if it is of this UIDVALIDITY.
async fn stored_cursor(ctx: &ChannelContext, validity: u32) -> Option<u32> {
    let stored = ctx.state.get(CURSOR).await?;
    let (v, uid) = stored.split_once(':')?;
    (v.parse::<u32>().ok()? == validity).then_some(uid.parse().ok()?)
}

/// Where a first start begins: before the first unseen mail (or after the last one).
async fn first_cursor(session: &mut Session, uid_next: Option<u32>) -> Result<u32, Failure> {
    let unseen = session
        .uid_search("UNSEEN")
        .await
        .map_err(|e| Failure::Connection(format!("IMAP: searching unseen mail: {e}")))?;
    Ok(match unseen.into_iter().min() {
        Some(first) => first.saturating_sub(1),
        None => uid_next.unwrap_or(1).saturating_sub(1),
    })
}

/// Hands every mail after `cursor` to the sink, in UID order, storing the cursor after
/// each; returns the new cursor.
async fn hand_in(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    session: &mut Session,
    validity: u32,
    mut cursor: u32,
) -> Result<u32, Failure> {
    let cfg = &ch.cfg;
    let conn = |e: async_imap::error::Error| Failure::Connection(format!("IMAP: {e}"));
    // `N:*` names the last mail even when its UID is below N: filtered out below.
    let mut new: Vec<(u32, u32)> = session
        .uid_fetch(
            format!("{}:*", cursor.saturating_add(1)),
            "(UID RFC822.SIZE)",
        )
        .await
        .map_err(conn)?
        .try_collect::<Vec<_>>()
        .await
        .map_err(conn)?
        .iter()
        .filter_map(|f| Some((f.uid?, f.size.unwrap_or(0))))
        .filter(|&(uid, _)| uid > cursor)
        .collect();
    new.sort_unstable();
    for (uid, size) in new {
        if u64::from(size) > cfg.max_message_bytes {
            tracing::warn!(channel = %cfg.name, uid, size, limit = cfg.max_message_bytes, "a mail larger than max_message_bytes was not read");
            refused(ch, "too_large");
        } else if let Some(raw) = imap::fetch_mail(session, uid)
            .await
            .map_err(Failure::Connection)?
        {
            let fallback = format!("uid-{validity}-{uid}@{}", cfg.domain());
            match mail::read(cfg, &raw, &fallback) {
                Ok(received) => {
                    let m = message(ch, ctx, received, validity, uid).await;
                    ctx.sink
                        .accept(Inbound::Message(m))
                        .await
                        .map_err(Failure::NotStored)?;
                }
                Err(refusal) => {
                    match &refusal {
                        Refusal::Unauthenticated(why) => {
                            tracing::warn!(channel = %cfg.name, uid, reason = %why, "a mail failing sender authentication was refused")
                        }
                        r => {
                            tracing::info!(channel = %cfg.name, uid, reason = r.reason(), "a mail was not taken")
                        }
                    }
                    refused(ch, refusal.reason());
                }
            }
        }
        ctx.state
            .set(CURSOR, &format!("{validity}:{uid}"))
            .await
            .map_err(Failure::NotStored)?;
        cursor = uid;
        // For people who read the mailbox too; the cursor is what counts.
        if let Ok(s) = session.uid_store(uid.to_string(), "+FLAGS (\\Seen)").await {
            let _ = s.try_collect::<Vec<_>>().await;
        }
    }
    Ok(cursor)
}

fn refused(ch: &EmailChannel, reason: &'static str) {
    metrics::counter!("switchboard_gateway_email_refused_total", "channel" => ch.cfg.name.clone(), "reason" => reason)
        .increment(1);
}

/// The gateway's message of a mail, its thread noted in the channel state.
async fn message(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    r: mail::Received,
    validity: u32,
    uid: u32,
) -> InboundMessage {
    let state = &ctx.state;
    // The thread's root: the one noted for the message answered (a mail of ours, or one
    // received), else the first of `References`, else the one answered, else this mail.
    let parent = r
        .in_reply_to
        .clone()
        .or_else(|| r.references.last().cloned());
    let noted = match &parent {
        Some(p) => state.get(&root_key(p)).await,
        None => None,
    };
    let root = noted
        .or_else(|| r.references.first().cloned())
        .or_else(|| r.in_reply_to.clone())
        .unwrap_or_else(|| r.message_id.clone());
    let mut thread: mail::Thread = state
        .get(&thread_key(&root))
        .await
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let first = thread.references.is_empty();
    if first {
        thread.subject = r.subject.clone();
        if root != r.message_id {
            thread.push(&root);
        }
    }
    thread.push(&r.message_id);
    let noted = async {
        state.set(&root_key(&r.message_id), &root).await?;
        state
            .set(
                &thread_key(&root),
                &serde_json::to_string(&thread).map_err(|e| e.to_string())?,
            )
            .await
    };
    if let Err(e) = noted.await {
        tracing::warn!(channel = %ch.cfg.name, error = %e, "storing a mail thread");
    }
    // A new conversation starts with its subject, unless the mail is a command.
    let text = if first && !r.subject.is_empty() && !r.text.starts_with('/') {
        if r.text.is_empty() {
            r.subject.clone()
        } else {
            format!("{}\n\n{}", r.subject, r.text)
        }
    } else {
        r.text.clone()
    };
    let attachments = r
        .files
        .iter()
        .map(|(index, name, mime, size)| Attachment {
            kind: kind_of(mime).into(),
            name: Some(name.clone()),
            size: Some(*size),
            mime: Some(mime.clone()),
            source: Some(imap::source(validity, uid, *index)),
        })
        .collect();
    InboundMessage {
        channel: ch.cfg.name.clone(),
        peer: Peer {
            id: r.from.clone(),
            name: r.name.clone(),
            username: Some(r.from.clone()),
        },
        chat: ChatRef {
            id: r.from.clone(),
            kind: ChatKind::Thread,
            thread: Some(root),
        },
        text,
        message_id: r.message_id.clone(),
        addressed: true,
        attachments,
        reply_to: r.in_reply_to.clone(),
        meta: serde_json::json!({ "subject": r.subject, "uid": uid, "uidvalidity": validity }),
    }
}

/// The attachment kind the gateway knows a file by.
fn kind_of(mime: &str) -> &'static str {
    match mime.split('/').next().unwrap_or_default() {
        "image" => "photo",
        "audio" => "audio",
        "video" => "video",
        _ => "document",
    }
}

/// Waits for new mail: IDLE (ended by the server's news or after `poll`), else `poll`.
async fn wait(mut session: Session, idle: bool, poll: Duration) -> Result<Session, Failure> {
    let conn = |e: async_imap::error::Error| Failure::Connection(format!("IMAP IDLE: {e}"));
    if !idle {
        tokio::time::sleep(poll).await;
        session.noop().await.map_err(conn)?;
        return Ok(session);
    }
    let mut handle = session.idle();
    handle.init().await.map_err(conn)?;
    let (done, _stop) = handle.wait_with_timeout(poll);
    done.await.map_err(conn)?;
    handle.done().await.map_err(conn)
}
