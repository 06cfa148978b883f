//! Mail in and out, without a connection: what a received mail says (its sender, thread,
//! text and files) and whether it is taken, and the reply mail built from the agent's text.

use lettre::message::header::{ContentTransferEncoding, ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment as MailAttachment, Body, Mailbox, MultiPart};
use mail_parser::{Message, MessageParser, MimeHeaders};
use serde::{Deserialize, Serialize};

use super::EmailConfig;

/// A received mail, read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Received {
    /// The sender's address, lowercased.
    pub from: String,
    /// The sender's display name (else the address).
    pub name: String,
    /// Its `Message-ID`, without angle brackets (one is made up when it has none).
    pub message_id: String,
    /// The message it answers (`In-Reply-To`), without angle brackets.
    pub in_reply_to: Option<String>,
    /// `References`, oldest first, without angle brackets.
    pub references: Vec<String>,
    pub subject: String,
    /// The new text: the body with the quoted mail it answers and the signature cut off.
    pub text: String,
    /// Attachments: (index among the mail's attachments, name, MIME type, size).
    pub files: Vec<(usize, String, String, u64)>,
}

/// Why a received mail is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Not a mail (no sender).
    Unreadable,
    /// From the bot itself, a mailer daemon or an auto-responder: answering it could loop.
    Automatic,
    /// The sender is not allowed.
    NotAllowed,
    /// The trusted server found its authentication failing (`dkim=fail` …).
    Unauthenticated(String),
}

impl Refusal {
    /// The label of the refusals metric.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Unreadable => "unreadable",
            Refusal::Automatic => "automatic",
            Refusal::NotAllowed => "not_allowed",
            Refusal::Unauthenticated(_) => "unauthenticated",
        }
    }
}

/// Reads a mail and decides whether it is taken: from an allowed sender, not automatic,
/// and not failing authentication at the trusted server.
pub(super) fn read(cfg: &EmailConfig, raw: &[u8], fallback_id: &str) -> Result<Received, Refusal> {
    let msg = MessageParser::default()
        .parse(raw)
        .ok_or(Refusal::Unreadable)?;
    let sender = msg
        .from()
        .and_then(|a| a.first())
        .ok_or(Refusal::Unreadable)?;
    let from = sender
        .address()
        .map(|a| a.trim().to_ascii_lowercase())
        .filter(|a| a.contains('@'))
        .ok_or(Refusal::Unreadable)?;
    if automatic(cfg, &msg, &from) {
        return Err(Refusal::Automatic);
    }
    if !sender_allowed(&cfg.allowed_senders, &from) {
        return Err(Refusal::NotAllowed);
    }
    if let Some(server) = cfg.trusted_authserv_id.as_deref() {
        let results: Vec<&str> = msg
            .headers_raw()
            .filter(|(name, _)| name.eq_ignore_ascii_case("Authentication-Results"))
            .map(|(_, v)| v)
            .collect();
        let domain = from.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
        authenticated(server, &results, domain, cfg.require_authentication)
            .map_err(Refusal::Unauthenticated)?;
    }
    let name = sender
        .name()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(&from)
        .to_string();
    let ids = |v: &mail_parser::HeaderValue<'_>| -> Vec<String> {
        match v {
            mail_parser::HeaderValue::Text(t) => vec![bare_id(t)],
            mail_parser::HeaderValue::TextList(l) => l.iter().map(|t| bare_id(t)).collect(),
            _ => Vec::new(),
        }
    };
    let files = msg
        .attachments()
        .enumerate()
        .map(|(i, part)| {
            let mime = part
                .content_type()
                .map(|c| match c.subtype() {
                    Some(sub) => format!("{}/{sub}", c.ctype()),
                    None => c.ctype().to_string(),
                })
                .unwrap_or_else(|| "application/octet-stream".into())
                .to_ascii_lowercase();
            let name = part
                .attachment_name()
                .map(str::to_string)
                .unwrap_or_else(|| format!("attachment-{}", i + 1));
            (i, name, mime, part.len() as u64)
        })
        .collect();
    Ok(Received {
        message_id: msg
            .message_id()
            .map(bare_id)
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| fallback_id.to_string()),
        in_reply_to: ids(msg.in_reply_to()).into_iter().last(),
        references: ids(msg.references()),
        subject: msg.subject().unwrap_or_default().trim().to_string(),
        text: new_text(&msg.body_text(0).unwrap_or_default()),
        files,
        from,
        name,
    })
}

/// The content of the `index`th attachment of a mail.
pub(super) fn attachment(raw: &[u8], index: usize) -> Option<Vec<u8>> {
    let msg = MessageParser::default().parse(raw)?;
    msg.attachments()
        .nth(index)
        .map(|part| part.contents().to_vec())
}

/// A message id without its angle brackets and surrounding space.
pub(super) fn bare_id(id: &str) -> String {
    id.trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim()
        .to_string()
}

/// Whether a sender is allowed: its address, or its domain (`example.org` or `@example.org`).
pub(super) fn sender_allowed(allowed: &[String], from: &str) -> bool {
    let domain = from.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
    allowed.iter().any(|a| {
        let a = a.trim().to_ascii_lowercase();
        match a.strip_prefix('@') {
            Some(d) => d == domain,
            None if a.contains('@') => a == from,
            None => a == domain,
        }
    })
}

/// Mail that must not be answered (RFC 3834): from the bot itself, from a mailer daemon
/// (bounces, delivery reports), from a mailing list, or marked automatic or bulk.
fn automatic(cfg: &EmailConfig, msg: &Message<'_>, from: &str) -> bool {
    let local = from.split('@').next().unwrap_or_default();
    let header = |name: &str| {
        msg.headers_raw()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_ascii_lowercase())
    };
    let report = msg.content_type().is_some_and(|c| {
        c.ctype().eq_ignore_ascii_case("multipart")
            && c.subtype()
                .is_some_and(|s| s.eq_ignore_ascii_case("report"))
    });
    from == cfg.address.to_ascii_lowercase()
        || matches!(local, "mailer-daemon" | "postmaster")
        || report
        || header("Auto-Submitted").is_some_and(|v| v != "no")
        || header("Precedence")
            .is_some_and(|v| matches!(v.as_str(), "bulk" | "list" | "junk" | "auto_reply"))
        || [
            "List-Id",
            "List-Post",
            "X-Autoreply",
            "X-Autorespond",
            "X-Auto-Response-Suppress",
        ]
        .iter()
        .any(|h| header(h).is_some())
        || header("Return-Path").is_some_and(|v| v == "<>")
}

/// Checks the `Authentication-Results` header (RFC 8601) that `server` added — the topmost
/// with its authserv-id (a receiving server adds its own on top; anything below may be the
/// sender's): a failing `dkim`, `spf` or `dmarc` refuses the mail. With `require_pass`, so
/// does an SPF `softfail`, and so does a mail without a pass that vouches for the `From:`
/// domain: `dmarc=pass`, or a `dkim=pass` (`header.d`) or `spf=pass` (`smtp.mailfrom`) of
/// that domain (or of a parent or child domain of it). `Err` says why.
pub(super) fn authenticated(
    server: &str,
    headers: &[&str],
    from_domain: &str,
    require_pass: bool,
) -> Result<(), String> {
    let header = headers.iter().find(|h| {
        h.split(';')
            .next()
            .and_then(|p| p.split_whitespace().next())
            .is_some_and(|id| id.eq_ignore_ascii_case(server))
    });
    let mut vouched = false;
    for part in header.into_iter().flat_map(|h| h.split(';').skip(1)) {
        let words: Vec<String> = without_comments(part)
            .split_whitespace()
            .map(str::to_ascii_lowercase)
            .collect();
        let Some((method, result)) = words.first().and_then(|w| w.split_once('=')) else {
            continue;
        };
        let method = method.split('/').next().unwrap_or_default();
        if !matches!(method, "dkim" | "spf" | "dmarc") {
            continue;
        }
        let property = |name: &str| {
            words.iter().find_map(|w| {
                w.strip_prefix(name)
                    .and_then(|v| v.strip_prefix('='))
                    .map(|v| {
                        v.rsplit('@')
                            .next()
                            .unwrap_or(v)
                            .trim_matches('"')
                            .to_string()
                    })
            })
        };
        match result {
            "fail" | "permerror" => return Err(format!("{method}={result} at {server}")),
            "softfail" if require_pass => return Err(format!("{method}={result} at {server}")),
            "pass" => {
                vouched |= match method {
                    "dmarc" => true,
                    "dkim" => property("header.d")
                        .or_else(|| property("header.i"))
                        .is_some_and(|d| aligned(&d, from_domain)),
                    _ => property("smtp.mailfrom").is_some_and(|d| aligned(&d, from_domain)),
                };
            }
            _ => {}
        }
    }
    if require_pass && !vouched {
        return Err(format!(
            "no passing dmarc, or dkim or spf of {from_domain}, from {server}"
        ));
    }
    Ok(())
}

/// A header value without its `(comments)`.
fn without_comments(s: &str) -> String {
    let mut depth = 0usize;
    s.chars()
        .filter(|&c| match c {
            '(' => {
                depth += 1;
                false
            }
            ')' => {
                depth = depth.saturating_sub(1);
                false
            }
            _ => depth == 0,
        })
        .collect()
}

/// Whether two domains are the same organisation's in DMARC's relaxed sense, roughly: equal,
/// or one a subdomain of the other.
fn aligned(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim_end_matches('.'), b.trim_end_matches('.'));
    a == b || a.ends_with(&format!(".{b}")) || b.ends_with(&format!(".{a}"))
}

/// The new words of a mail: the quoted mail it answers (`> …` lines and the
/// "On … wrote:" line before them, an Outlook "Original Message" block) and the signature
/// (after a `-- ` line) are cut off.
pub(super) fn new_text(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut end = lines.len();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if *line == "-- " || t == "--" || t.starts_with("-----Original Message-----") {
            end = i;
            break;
        }
        if t.starts_with("From:") && i > 0 && lines[i - 1].trim().starts_with("____") {
            end = i - 1;
            break;
        }
    }
    let mut kept: Vec<&str> = lines[..end]
        .iter()
        .copied()
        .filter(|l| !l.trim_start().starts_with('>'))
        .collect();
    // The attribution line of the quote: "On Tue, … Ann <ann@…> wrote:" (perhaps wrapped).
    while let Some(last) = kept.last() {
        let t = last.trim();
        if t.is_empty() {
            kept.pop();
        } else if t.ends_with("wrote:") || t.ends_with("a écrit :") || t.ends_with("schrieb:") {
            kept.pop();
            if kept
                .last()
                .is_some_and(|l| l.trim_start().starts_with("On ") && !l.trim().is_empty())
            {
                kept.pop();
            }
        } else {
            break;
        }
    }
    kept.join("\n").trim().to_string()
}

/// What the channel keeps of a thread (in its state, under `thread:ROOT`) to answer in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Thread {
    pub subject: String,
    /// The thread's messages, oldest first (the root, then the latest few): a reply's
    /// `References`; the last is its `In-Reply-To`.
    pub references: Vec<String>,
}

impl Thread {
    /// Adds a message of the thread (keeping the root and the 10 latest).
    pub fn push(&mut self, id: &str) {
        if self.references.last().map(String::as_str) == Some(id) {
            return;
        }
        self.references.push(id.to_string());
        if self.references.len() > 11 {
            self.references.remove(1);
        }
    }
}

/// The subject of a reply: `Re: ` and the thread's subject (once).
pub(super) fn reply_subject(subject: &str) -> String {
    let s = subject.trim();
    if s.is_empty() {
        "Re: your message".into()
    } else if s.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("re:")) {
        s.to_string()
    } else {
        format!("Re: {s}")
    }
}

/// Markdown as the HTML part of a mail.
pub(super) fn html(markdown: &str) -> String {
    use pulldown_cmark::{Options, Parser, html};
    let mut out =
        String::from("<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>\n");
    html::push_html(
        &mut out,
        Parser::new_ext(
            markdown,
            Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH,
        )
        // Raw HTML from the agent is shown as text, not run in a mail client.
        .map(|e| match e {
            pulldown_cmark::Event::Html(h) | pulldown_cmark::Event::InlineHtml(h) => {
                pulldown_cmark::Event::Text(h)
            }
            e => e,
        }),
    );
    out.push_str("</body></html>\n");
    out
}

/// A file to attach to a reply.
pub(super) struct OutFile<'a> {
    pub name: &'a str,
    pub mime: &'a str,
    pub bytes: &'a [u8],
}

/// A reply in a thread: text and HTML parts (and a file), marked as automatic
/// (`Auto-Submitted: auto-replied`) so that other robots do not answer it.
pub(super) fn reply(
    cfg: &EmailConfig,
    to: &str,
    thread: &Thread,
    message_id: &str,
    text: &str,
    file: Option<OutFile<'_>>,
) -> Result<lettre::Message, String> {
    let from = Mailbox::new(
        Some(cfg.display_name.clone()),
        cfg.address
            .parse()
            .map_err(|e| format!("address {:?}: {e}", cfg.address))?,
    );
    let to: Mailbox = to.parse().map_err(|e| format!("recipient {to:?}: {e}"))?;
    let mut b = lettre::Message::builder()
        .from(from)
        .to(to)
        .subject(reply_subject(&thread.subject))
        .message_id(Some(format!("<{message_id}>")))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-replied".into(),
        ))
        .date_now();
    if let Some(last) = thread.references.last() {
        b = b.in_reply_to(format!("<{last}>")).references(
            thread
                .references
                .iter()
                .map(|r| format!("<{r}>"))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    let body = MultiPart::alternative_plain_html(text.to_string(), html(text));
    let msg = match file {
        None => b.multipart(body),
        Some(f) => {
            let ct = ContentType::parse(f.mime)
                .or_else(|_| ContentType::parse("application/octet-stream"))
                .map_err(|e| e.to_string())?;
            // Base64 whatever the type: a text file's bytes (its line ends) arrive unchanged.
            let content =
                Body::new_with_encoding(f.bytes.to_vec(), ContentTransferEncoding::Base64)
                    .map_err(|_| "encoding the attachment".to_string())?;
            b.multipart(
                MultiPart::mixed()
                    .multipart(body)
                    .singlepart(MailAttachment::new(f.name.to_string()).body(content, ct)),
            )
        }
    };
    msg.map_err(|e| format!("building the mail: {e}"))
}

#[cfg(test)]
#[path = "mail_tests.rs"]
mod tests;
