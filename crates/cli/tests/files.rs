#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Files of sessions over real HTTP against the real binary: upload (multipart), list,
//! download, limits and sniffed types, attachments on messages, a restart in between, and
//! removal with the session.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use sha2::{Digest, Sha256};
use switchboard_protocol::{
    AgentEvent, AttachmentRef, CreateSessionRequest, ErrorBody, FileInfo, MessageType,
    SendMessageRequest,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use uuid::Uuid;

/// A real PNG signature and IHDR chunk start, then `n` bytes of payload.
fn png(n: usize) -> Vec<u8> {
    let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    b.extend_from_slice(&[
        0, 0, 0, 0x0d, b'I', b'H', b'D', b'R', 0, 0, 0, 1, 0, 0, 0, 1,
    ]);
    b.extend((0..n).map(|i| (i % 251) as u8));
    b
}

/// An ELF executable's header.
fn elf() -> Vec<u8> {
    let mut b = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&[2, 0, 0x3e, 0, 1, 0, 0, 0]);
    b.extend((0..4000).map(|i| (i % 7) as u8));
    b
}

fn hex_sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn blob(data_dir: &Path, sha: &str) -> PathBuf {
    data_dir.join("files/sha256").join(&sha[..2]).join(sha)
}

/// Every content file and temporary file under the files directory.
fn stored_files(data_dir: &Path) -> Vec<PathBuf> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                let path = e.path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    out.push(path);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&data_dir.join("files"), &mut out);
    out
}

/// A multipart upload by hand (reqwest's form), answering status, headers and body.
async fn upload(
    url: &str,
    session: Uuid,
    part_name: &str,
    file_name: &str,
    content: Vec<u8>,
) -> (u16, String) {
    let part = reqwest::multipart::Part::bytes(content).file_name(file_name.to_owned());
    let form = reqwest::multipart::Form::new().part(part_name.to_owned(), part);
    let resp = reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{session}/files"))
        .bearer_auth(TOKEN)
        .multipart(form)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn error_code(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body)
        .unwrap_or_else(|e| panic!("error body {body:?}: {e}"))
        .code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_round_trips_and_goes_with_its_session() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let a = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let b = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let content = png(300_000);
    let sha = hex_sha256(&content);

    let (status, body) = upload(
        &server.url,
        a.id,
        "file",
        "../../shot é.png",
        content.clone(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let info: FileInfo = serde_json::from_str(&body).unwrap();
    assert_eq!(
        info.name, "shot é.png",
        "only the last path component is kept"
    );
    assert_eq!(info.mime, "image/png");
    assert_eq!(info.size, content.len() as u64);
    assert_eq!(info.sha256, sha);

    // stored once, by content, private to the user
    let path = blob(dir.path(), &sha);
    assert_eq!(std::fs::read(&path).unwrap(), content);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "content files are 0600");
    }

    // download: the bytes, the sniffed type, a name
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/v1/sessions/{}/files/{}",
            server.url, a.id, info.file_id
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers().clone();
    assert_eq!(h["content-type"], "image/png");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let disposition = h["content-disposition"].to_str().unwrap().to_owned();
    assert!(
        disposition.starts_with("inline;")
            && disposition.contains("filename*=UTF-8''shot%20%C3%A9%2Epng"),
        "{disposition}"
    );
    assert_eq!(resp.bytes().await.unwrap().as_ref(), content.as_slice());
    // without the token: refused
    let anon = reqwest::Client::new()
        .get(format!(
            "{}/v1/sessions/{}/files/{}",
            server.url, a.id, info.file_id
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);

    // listed in its session only
    assert_eq!(c.list_files(a.id).await.unwrap().files, vec![info.clone()]);
    assert!(c.list_files(b.id).await.unwrap().files.is_empty());
    let err = c.download_file(b.id, info.file_id).await.unwrap_err();
    assert_eq!(err.code(), Some("file_not_found"), "{err}");

    // the same content in another session: a second row, one stored copy
    let again = c
        .upload_file(b.id, "copy.png", content.clone())
        .await
        .unwrap();
    assert_eq!(again.sha256, sha);
    assert_ne!(again.file_id, info.file_id);
    assert_eq!(stored_files(dir.path()), vec![path.clone()]);

    // text: served as UTF-8 text, as an attachment (never rendered inline)
    let log = c
        .upload_file(a.id, "build.log", "error: übel\n".repeat(50).into_bytes())
        .await
        .unwrap();
    assert_eq!(log.mime, "text/plain");
    let (bytes, mime) = c.download_file(a.id, log.file_id).await.unwrap();
    assert_eq!(mime, "text/plain; charset=utf-8");
    assert!(bytes.starts_with("error: übel".as_bytes()));

    // removed with its session: the shared content stays while the other session has it
    c.delete_session(a.id).await.unwrap();
    assert!(path.exists(), "still named by the other session");
    assert!(
        !blob(dir.path(), &log.sha256).exists(),
        "the log went with its session"
    );
    let err = c.list_files(a.id).await.unwrap_err();
    assert_eq!(err.code(), Some("session_not_found"), "{err}");
    c.delete_session(b.id).await.unwrap();
    assert!(
        stored_files(dir.path()).is_empty(),
        "{:?}",
        stored_files(dir.path())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disguised_oversized_and_malformed_uploads_are_refused_and_leave_nothing() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_MAX_FILE_MB", "1")],
    )
    .await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();

    // an executable named .png: the content says what it is
    let (status, body) = upload(&server.url, s.id, "file", "cat.png", elf()).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (415, "unsupported_file_type"),
        "{body}"
    );
    assert!(
        body.contains("application/x-executable"),
        "names the sniffed type: {body}"
    );

    // one byte over the limit (1 MB)
    let (status, body) = upload(&server.url, s.id, "file", "big.png", png(1024 * 1024)).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (413, "file_too_large"),
        "{body}"
    );
    assert!(body.contains("1 MB"), "{body}");
    // exactly at the limit is fine
    let at_limit = png(1024 * 1024 - 24);
    assert_eq!(at_limit.len(), 1024 * 1024);
    let (status, body) = upload(&server.url, s.id, "file", "ok.png", at_limit).await;
    assert_eq!(status, 201, "{body}");

    // far over: refused before the body is sent, from its Content-Length alone
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/sessions/{}/files HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: 3000000000\r\n\r\n",
        s.id
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("an answer from the headers alone")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        text.starts_with("HTTP/1.1 413") && text.contains("payload_too_large"),
        "{text}"
    );

    // not multipart; multipart without a `file` part; an unknown session
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{}/files", server.url, s.id))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"file": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 415);
    assert_eq!(
        error_code(&resp.text().await.unwrap()),
        "unsupported_media_type"
    );
    let (status, body) = upload(&server.url, s.id, "other", "a.png", png(10)).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (400, "validation_failed"),
        "{body}"
    );
    let (status, body) = upload(&server.url, Uuid::now_v7(), "file", "a.png", png(10)).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (404, "session_not_found"),
        "{body}"
    );
    // a good `file` part followed by a part that cannot be read (a control character in its
    // name's header): the whole form is read before anything is kept, so it is refused
    let mut form =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"late.png\"\r\n\r\n"
            .to_vec();
    form.extend_from_slice(&png(10));
    form.extend_from_slice(
        b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"a\x06b\"\r\n\r\nx\r\n--XyZ--\r\n",
    );
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{}/files", server.url, s.id))
        .bearer_auth(TOKEN)
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(error_code(&resp.text().await.unwrap()), "validation_failed");
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/v1/sessions/{}/files/not-a-uuid",
            server.url, s.id
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);

    // nothing half-stored: only the one accepted file, no temporary leftovers
    let files = c.list_files(s.id).await.unwrap().files;
    assert_eq!(files.len(), 1);
    assert_eq!(
        stored_files(dir.path()),
        vec![blob(dir.path(), &files[0].sha256)],
        "refused uploads leave nothing behind"
    );
    // and the server goes on serving
    c.health().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_are_checked_recorded_in_the_log_and_survive_a_restart() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = [("SWITCHBOARD_MAX_MESSAGE_MB", "1")];
    let mut server = start(dir.path(), &llm.base_url(), &extra).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let shot = c.upload_file(s.id, "shot.png", png(600_000)).await.unwrap();
    let other = c
        .upload_file(s.id, "other.png", png(600_001))
        .await
        .unwrap();
    let small = c
        .upload_file(s.id, "notes.txt", b"see the screenshot".to_vec())
        .await
        .unwrap();

    // the server goes down between the upload and the message: nothing is lost
    server.kill().await;
    drop(server);
    let server = start(dir.path(), &llm.base_url(), &extra).await;
    let c = client(&server);

    let message = |files: &[&FileInfo]| {
        let mut req = SendMessageRequest::user("what is wrong here?", MessageType::Message);
        req.message.attachments = files
            .iter()
            .map(|f| AttachmentRef { file_id: f.file_id })
            .collect();
        req
    };
    // together over the per-message limit (1 MB)
    let err = c
        .send_message(s.id, &message(&[&shot, &other]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("attachments_too_large"), "{err}");
    // a file of no session, and one of another session
    let mut unknown = message(&[&shot]);
    unknown.message.attachments.push(AttachmentRef {
        file_id: Uuid::now_v7(),
    });
    let err = c.send_message(s.id, &unknown).await.unwrap_err();
    assert_eq!(err.code(), Some("unknown_file"), "{err}");
    assert_eq!(err.status(), Some(422), "{err}");
    let t = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let err = c.send_message(t.id, &message(&[&shot])).await.unwrap_err();
    assert_eq!(
        err.code(),
        Some("unknown_file"),
        "another session's file: {err}"
    );
    // eleven is one too many
    let many: Vec<&FileInfo> = std::iter::repeat_n(&small, 11).collect();
    let mut too_many = message(&[]);
    too_many.message.attachments = many
        .iter()
        .map(|f| AttachmentRef { file_id: f.file_id })
        .collect();
    let err = c.send_message(s.id, &too_many).await.unwrap_err();
    assert_eq!(err.code(), Some("validation_failed"), "{err}");
    assert!(err.to_string().contains("attachments"), "{err}");

    // a good one: each file is recorded in the log, right after the run starts
    llm.push(MockReply::Text {
        chunks: vec!["a null pointer".into()],
        delay_ms: 0,
    });
    let mut stream = c.subscribe(s.id, Some(0));
    let run_id = c
        .send_message(s.id, &message(&[&shot, &small]))
        .await
        .unwrap()
        .run_id;
    let events = until_run_ends(&mut stream, run_id).await;
    let kinds = kinds(&events);
    let started = kinds.iter().position(|k| *k == "run_started").unwrap();
    assert_eq!(
        &kinds[started + 1..started + 3],
        ["file_attached", "file_attached"],
        "{kinds:?}"
    );
    let attached: Vec<FileInfo> = events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::FileAttached { run_id: r, file } if *r == run_id => Some(file.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(attached, vec![shot.clone(), small.clone()]);
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A session in `ws`, a screenshot uploaded and sent with a message; the run's events.
async fn send_screenshot(
    c: &switchboard_client::Client,
    ws: &Path,
    shot: &[u8],
) -> (Uuid, FileInfo, Vec<switchboard_protocol::EventEnvelope>) {
    let s = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.display().to_string()),
            ..Default::default()
        })
        .await
        .unwrap();
    let file = c
        .upload_file(s.id, "failing build.png", shot.to_vec())
        .await
        .unwrap();
    let mut req = SendMessageRequest::user("why does the build fail?", MessageType::Message);
    req.message.attachments = vec![AttachmentRef {
        file_id: file.file_id,
    }];
    let mut stream = c.subscribe(s.id, Some(0));
    let run = c.send_message(s.id, &req).await.unwrap().run_id;
    let events = until_run_ends(&mut stream, run).await;
    (s.id, file, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_reaches_the_model_as_an_image_and_the_workspace_as_a_file() {
    let llm = MockLlm::start().await;
    let shot = png(20_000);
    for provider in ["openai", "anthropic"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let anthropic_url = llm.anthropic_base_url();
        let extra: Vec<(&str, &str)> = if provider == "anthropic" {
            vec![
                ("SWITCHBOARD_PROVIDER", "anthropic"),
                ("SWITCHBOARD_ANTHROPIC_BASE_URL", &anthropic_url),
                ("SWITCHBOARD_ANTHROPIC_API_KEY", "sk-ant-test"),
            ]
        } else {
            vec![]
        };
        let server = start(dir.path(), &llm.base_url(), &extra).await;
        let c = client(&server);
        let before = llm.requests().len();
        llm.push(MockReply::Text {
            chunks: vec!["the test expects 3".into()],
            delay_ms: 0,
        });
        let (_, file, events) = send_screenshot(&c, ws.path(), &shot).await;
        assert!(
            kinds(&events).contains(&"run_completed"),
            "{provider}: {:?}",
            kinds(&events)
        );
        let requests = llm.requests();
        let req = &requests[before];
        assert_eq!(
            req.images(),
            vec![("image/png".to_string(), b64(&shot))],
            "{provider}: the photo goes to the model as an image part"
        );
        // and a copy lands in the workspace, named in the text
        let inbox = format!(".switchboard/inbox/{}-failing build.png", &file.sha256[..8]);
        assert_eq!(
            std::fs::read(ws.path().join(&inbox)).unwrap(),
            shot,
            "{provider}"
        );
        let text = req.last_user_text();
        assert!(
            text.contains("why does the build fail?") && text.contains(&inbox),
            "{provider}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_refuses_images_fails_clearly_or_gets_the_text_alone() {
    let llm = MockLlm::start().await;
    let shot = png(5_000);
    let refusal = || {
        MockReply::Status {
        status: 400,
        body: r#"{"error":{"message":"This model does not support image input","type":"invalid_request_error"}}"#.into(),
    }
    };

    // without the fallback: a clear, final RunError
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    llm.push(refusal());
    let (_, _, events) = send_screenshot(&client(&server), ws.path(), &shot).await;
    let error = events
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::RunError {
                error, retryable, ..
            } => Some((error.clone(), *retryable)),
            _ => None,
        })
        .expect("a RunError");
    assert!(
        error.0.contains("did not accept the attached images")
            && error.0.contains("image_fallback"),
        "{error:?}"
    );
    assert!(!error.1, "not retryable as it is");
    drop(server);

    // with it: the same message again, without the image, and a Notice saying so
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_IMAGE_FALLBACK", "true")],
    )
    .await;
    let before = llm.requests().len();
    llm.push(refusal());
    llm.push(MockReply::Text {
        chunks: vec!["I read the file name only".into()],
        delay_ms: 0,
    });
    let (_, _, events) = send_screenshot(&client(&server), ws.path(), &shot).await;
    assert!(
        kinds(&events).contains(&"run_completed"),
        "{:?}",
        kinds(&events)
    );
    assert!(
        events.iter().any(|e| matches!(&e.event, AgentEvent::Notice { message, .. } if message.contains("text only"))),
        "a Notice tells the user"
    );
    let requests = llm.requests();
    assert_eq!(requests[before].images().len(), 1, "first with the image");
    assert!(requests[before + 1].images().is_empty(), "then without");
    assert!(
        requests[before + 1]
            .last_user_text()
            .contains(".switchboard/inbox/")
    );
}

/// The upload route has the per-file limit (default 20 MB), not the JSON body limit
/// (2 MiB): a 3 MB photo is taken; one over the file limit is `file_too_large`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_the_json_limit_and_under_the_file_limit_is_taken() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let photo = png(3 * 1024 * 1024);
    let (status, body) = upload(&server.url, s.id, "file", "phone.png", photo.clone()).await;
    assert_eq!(status, 201, "{body}");
    let info: FileInfo = serde_json::from_str(&body).unwrap();
    assert_eq!(info.size, photo.len() as u64);
    let (status, body) = upload(&server.url, s.id, "file", "huge.png", png(20 * 1024 * 1024)).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (413, "file_too_large"),
        "{body}"
    );
}
