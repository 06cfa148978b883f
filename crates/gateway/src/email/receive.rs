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
            r = session(ch, &ctx, &cancel, &mut backoff) => Some(r),
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
/// which drops this future). `backoff` is reset once the mailbox is open.
async fn session(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    cancel: &CancellationToken,
    backoff: &mut Duration,
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
    *backoff = Duration::from_secs(1);
    let validity = mailbox.uid_validity.unwrap_or(0);
    let mut cursor = match stored_cursor(ctx, validity).await {
        Some(uid) => uid,
        None => first_start(ch, ctx, &mut session, validity, mailbox.uid_next).await?,
    };
    ch.health.connected(if idle {
        "waiting for mail (IDLE)"
    } else {
        "polling"
    });
    loop {
        // Until a pass finds nothing new, and no news came with the answers meanwhile
        // (`* N EXISTS` in the answer to a FETCH or STORE is not repeated in IDLE).
        loop {
            let new = new_mail(&mut session, cursor).await?;
            if new.is_empty() && !news(&mut session) {
                break;
            }
            cursor = hand_over(ch, ctx, &mut session, validity, &new, true)
                .await?
                .unwrap_or(cursor);
        }
        if cancel.is_cancelled() {
            return Ok(());
        }
        session = wait(session, idle, cfg.poll_interval).await?;
    }
}

/// Whether the server said something changed (new mail) in an answer since last asked.
fn news(session: &mut Session) -> bool {
    let mut news = false;
    while let Ok(r) = session.unsolicited_responses.try_recv() {
        news |= matches!(
            r,
            async_imap::types::UnsolicitedResponse::Exists(_)
                | async_imap::types::UnsolicitedResponse::Recent(_)
        );
    }
    news
}

/// The stored cursor, if it is of this UIDVALIDITY.
async fn stored_cursor(ctx: &ChannelContext, validity: u32) -> Option<u32> {
    let stored = ctx.state.get(CURSOR).await?;
    let (v, uid) = stored.split_once(':')?;
    (v.parse::<u32>().ok()? == validity).then_some(uid.parse().ok()?)
}

/// A first start (or a new UIDVALIDITY): the unseen mail is handed in (each marked `\Seen`
/// as it is stored, so a crash meanwhile starts over with the rest), mail already seen is
/// not; then the cursor is stored at the end of the mailbox as it was when opened.
async fn first_start(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    session: &mut Session,
    validity: u32,
    uid_next: Option<u32>,
) -> Result<u32, Failure> {
    let conn = |e: async_imap::error::Error| Failure::Connection(format!("IMAP: {e}"));
    let mut unseen: Vec<u32> = session
        .uid_search("UNSEEN")
        .await
        .map_err(conn)?
        .into_iter()
        .collect();
    unseen.sort_unstable();
    let end = uid_next
        .unwrap_or_else(|| unseen.last().map_or(1, |u| u + 1))
        .saturating_sub(1);
    if !unseen.is_empty() {
        let list = unseen
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let sized = sizes(session, &list, 0).await?;
        hand_over(ch, ctx, session, validity, &sized, false).await?;
    }
    let end = end.max(unseen.last().copied().unwrap_or(0));
    ctx.state
        .set(CURSOR, &format!("{validity}:{end}"))
        .await
        .map_err(Failure::NotStored)?;
    Ok(end)
}

/// The mail after `cursor`, in UID order, with sizes.
async fn new_mail(session: &mut Session, cursor: u32) -> Result<Vec<(u32, u32)>, Failure> {
    // `N:*` names the last mail even when its UID is below N: filtered out in `sizes`.
    sizes(session, &format!("{}:*", cursor.saturating_add(1)), cursor).await
}

/// UIDs and sizes of the mail in `set` with a UID above `above`, in UID order.
async fn sizes(session: &mut Session, set: &str, above: u32) -> Result<Vec<(u32, u32)>, Failure> {
    let conn = |e: async_imap::error::Error| Failure::Connection(format!("IMAP: {e}"));
    let mut out: Vec<(u32, u32)> = session
        .uid_fetch(set, "(UID RFC822.SIZE)")
        .await
        .map_err(conn)?
        .try_collect::<Vec<_>>()
        .await
        .map_err(conn)?
        .iter()
        .filter_map(|f| Some((f.uid?, f.size.unwrap_or(0))))
        .filter(|&(uid, _)| uid > above)
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Hands each mail of `mail` (UID, size) to the sink in order, marking it `\Seen` after it
/// is stored, and with `advance` storing the cursor after each; returns the last UID.
async fn hand_over(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    session: &mut Session,
    validity: u32,
    mail: &[(u32, u32)],
    advance: bool,
) -> Result<Option<u32>, Failure> {
    let cfg = &ch.cfg;
    let mut last = None;
    for &(uid, size) in mail {
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
                    let (m, notes) = message(ch, ctx, received, validity, uid).await;
                    ctx.sink
                        .accept(Inbound::Message(m))
                        .await
                        .map_err(Failure::NotStored)?;
                    for (key, value) in notes {
                        if let Err(e) = ctx.state.set(&key, &value).await {
                            tracing::warn!(channel = %cfg.name, error = %e, "storing a mail thread");
                        }
                    }
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
        if advance {
            ctx.state
                .set(CURSOR, &format!("{validity}:{uid}"))
                .await
                .map_err(Failure::NotStored)?;
        }
        last = Some(uid);
        // For people who read the mailbox too, and for a first start's crash window.
        if let Ok(s) = session.uid_store(uid.to_string(), "+FLAGS (\\Seen)").await {
            let _ = s.try_collect::<Vec<_>>().await;
        }
    }
    Ok(last)
}

fn refused(ch: &EmailChannel, reason: &'static str) {
    metrics::counter!("switchboard_gateway_email_refused_total", "channel" => ch.cfg.name.clone(), "reason" => reason)
        .increment(1);
}

/// The gateway's message of a mail, and what to note of its thread in the channel state
/// (key, value) once it is stored.
async fn message(
    ch: &EmailChannel,
    ctx: &ChannelContext,
    r: mail::Received,
    validity: u32,
    uid: u32,
) -> (InboundMessage, Vec<(String, String)>) {
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
    // Noted once the message is stored (a mail read again is read as the first time).
    let notes = vec![
        (root_key(&r.message_id), root.clone()),
        (
            thread_key(&root),
            serde_json::to_string(&thread).unwrap_or_default(),
        ),
    ];
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
    let m = InboundMessage {
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
        edited: false,
        meta: serde_json::json!({ "subject": r.subject, "uid": uid, "uidvalidity": validity }),
    };
    (m, notes)
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
