//! Speech to text for voice notes: the OpenAI-compatible `POST {base_url}/audio/transcriptions`
//! (multipart: `file`, `model`; answer `{"text": …}`), which OpenAI, Groq, whisper.cpp's
//! server and faster-whisper servers all speak.
//!
//! Not a chat platform, so not a [`crate::platform::PlatformClient`]: one request with a
//! timeout and one retry after a connection error or a 5xx; the key is sent only to the
//! configured URL and never appears in an error.

use std::time::Duration;

use crate::config::Secret;

/// Where voice notes are transcribed.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechConfig {
    /// E.g. `https://api.openai.com/v1` (the path `/audio/transcriptions` is added).
    pub base_url: String,
    /// E.g. `whisper-1`.
    pub model: String,
    pub api_key: Option<Secret>,
}

/// How long one transcription may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The transcript of `audio` (named `name`), or a reason a user may read.
pub async fn transcribe(
    http: &reqwest::Client,
    cfg: &SpeechConfig,
    name: &str,
    audio: bytes::Bytes,
) -> Result<String, String> {
    let url = format!(
        "{}/audio/transcriptions",
        cfg.base_url.trim_end_matches('/')
    );
    let mut last = String::new();
    for attempt in 0..2 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let part = reqwest::multipart::Part::stream(audio.clone()).file_name(name.to_owned());
        let form = reqwest::multipart::Form::new()
            .text("model", cfg.model.clone())
            .text("response_format", "json")
            .part("file", part);
        let mut req = http.post(&url).multipart(form).timeout(TIMEOUT);
        if let Some(key) = &cfg.api_key {
            req = req.bearer_auth(&key.0);
        }
        match req.send().await {
            Err(e) => {
                last = format!(
                    "the speech service is unreachable: {}",
                    crate::platform::client::describe(e)
                )
            }
            Ok(resp) if resp.status().is_server_error() => {
                last = format!(
                    "the speech service answered HTTP {}",
                    resp.status().as_u16()
                );
            }
            Ok(resp) if !resp.status().is_success() => {
                return Err(format!(
                    "the speech service answered HTTP {}",
                    resp.status().as_u16()
                ));
            }
            Ok(resp) => {
                let body: serde_json::Value = resp
                    .json()
                    .await
                    .map_err(|_| "the speech service's answer is not JSON".to_string())?;
                return body
                    .get("text")
                    .and_then(serde_json::Value::as_str)
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| "the speech service found no speech".to_string());
            }
        }
    }
    Err(last)
}

/// Whether an attachment is speech to transcribe: a voice note, audio, a video note.
pub fn is_speech(a: &crate::channel::Attachment) -> bool {
    matches!(a.kind.as_str(), "voice" | "audio" | "video_note")
        || a.mime.as_deref().is_some_and(|m| m.starts_with("audio/"))
}
