//! A run's message as ACP prompt content: the text, then each attached file in the richest
//! form the agent said it takes (`promptCapabilities` of `initialize`).
//!
//! - an image, when the agent takes images: an `image` block (base64);
//! - audio, when it takes audio: an `audio` block;
//! - any file, when it takes embedded context: a `resource` block — the text itself for text
//!   files, base64 for the others;
//! - otherwise (every agent takes these): a `resource_link` to the file's copy in the
//!   workspace inbox, with its name, type and size.
//!
//! Content is inlined only up to a size (images [`MAX_INLINE_IMAGE`], the rest
//! [`MAX_INLINE_OTHER`]); a larger file, or one whose copy cannot be read, goes as a link.

use std::path::Path;

use agent_client_protocol::v1::schema::*;
use base64::Engine as _;
use switchboard_protocol::FileInfo;

/// Largest image sent inline (what model APIs take per image).
const MAX_INLINE_IMAGE: u64 = 5 * 1024 * 1024;
/// Largest other file sent inline: a JSON-RPC message is held whole on both sides.
const MAX_INLINE_OTHER: u64 = 1024 * 1024;

/// What a path segment keeps as it is: RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `file://` URL of an absolute path (each segment percent-encoded).
pub(crate) fn file_url(path: &Path) -> String {
    let mut out = String::from("file://");
    for (i, seg) in path.to_string_lossy().split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.extend(percent_encoding::utf8_percent_encode(seg, SEGMENT));
    }
    out
}

fn link(file: &FileInfo, url: String) -> ContentBlock {
    ContentBlock::ResourceLink(
        ResourceLink::new(file.name.clone(), url)
            .mime_type(file.mime.clone())
            .size(i64::try_from(file.size).ok()),
    )
}

/// The prompt of a run: `text`, then its files.
pub(crate) async fn prompt_blocks(
    text: String,
    files: &[FileInfo],
    cwd: &Path,
    caps: &PromptCapabilities,
) -> Vec<ContentBlock> {
    let mut blocks = vec![ContentBlock::from(text)];
    for f in files {
        let path = cwd.join(switchboard_engine::files::inbox_path(f));
        let url = file_url(&path);
        let image = f.mime.starts_with("image/") && caps.image && f.size <= MAX_INLINE_IMAGE;
        let audio = f.mime.starts_with("audio/") && caps.audio && f.size <= MAX_INLINE_OTHER;
        let embed = caps.embedded_context && f.size <= MAX_INLINE_OTHER;
        if !(image || audio || embed) {
            blocks.push(link(f, url));
            continue;
        }
        let bytes = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "an attached file's copy could not be read; sent as a link");
                blocks.push(link(f, url));
                continue;
            }
        };
        let b64 = || base64::engine::general_purpose::STANDARD.encode(&bytes);
        blocks.push(if image {
            ContentBlock::Image(ImageContent::new(b64(), f.mime.clone()).uri(url))
        } else if audio {
            ContentBlock::Audio(AudioContent::new(b64(), f.mime.clone()))
        } else {
            let resource = match (
                f.mime.starts_with("text/"),
                String::from_utf8(bytes.clone()),
            ) {
                (true, Ok(text)) => EmbeddedResourceResource::TextResourceContents(
                    TextResourceContents::new(text, url).mime_type(f.mime.clone()),
                ),
                _ => EmbeddedResourceResource::BlobResourceContents(
                    BlobResourceContents::new(b64(), url).mime_type(f.mime.clone()),
                ),
            };
            ContentBlock::Resource(EmbeddedResource::new(resource))
        });
    }
    blocks
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(name: &str, mime: &str, size: u64) -> FileInfo {
        FileInfo {
            file_id: uuid::Uuid::nil(),
            name: name.into(),
            mime: mime.into(),
            size,
            sha256: "ab".repeat(32),
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn file_urls_are_percent_encoded_per_segment() {
        assert_eq!(
            file_url(Path::new("/w s/.switchboard/inbox/a é.png")),
            "file:///w%20s/.switchboard/inbox/a%20%C3%A9.png"
        );
    }

    #[tokio::test]
    async fn each_file_goes_in_the_richest_form_the_agent_takes() {
        let ws = tempfile::tempdir().unwrap();
        let png = file("shot.png", "image/png", 4);
        let log = file("build.log", "text/plain", 5);
        for f in [&png, &log] {
            let p = ws.path().join(switchboard_engine::files::inbox_path(f));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(
                &p,
                if f.mime == "image/png" {
                    "\u{89}PNG"
                } else {
                    "oops\n"
                },
            )
            .unwrap();
        }
        let files = [png.clone(), log.clone()];
        // text and resource links only (the baseline)
        let none = PromptCapabilities::default();
        let b = prompt_blocks("hi".into(), &files, ws.path(), &none).await;
        assert!(matches!(&b[0], ContentBlock::Text(t) if t.text == "hi"));
        assert!(
            matches!(&b[1], ContentBlock::ResourceLink(l) if l.name == "shot.png" && l.mime_type.as_deref() == Some("image/png") && l.uri.starts_with("file:///"))
        );
        assert!(matches!(&b[2], ContentBlock::ResourceLink(_)));
        // images and embedded context
        let rich = PromptCapabilities::new().image(true).embedded_context(true);
        let b = prompt_blocks("hi".into(), &files, ws.path(), &rich).await;
        assert!(matches!(&b[1], ContentBlock::Image(i) if i.mime_type == "image/png"));
        match &b[2] {
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => assert_eq!(t.text, "oops\n"),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        // too large to inline: a link
        let big = file("huge.bin", "application/zip", MAX_INLINE_OTHER + 1);
        let b = prompt_blocks("hi".into(), &[big], ws.path(), &rich).await;
        assert!(matches!(&b[1], ContentBlock::ResourceLink(_)));
    }
}
