//! OpenAI-compatible model servers on this machine, found by asking the usual ports.
//!
//! A first run without any model configured uses what is already here: Ollama, LM Studio, a
//! llama.cpp server or vLLM each serve the OpenAI wire format on a port of their own, and
//! list their models at `GET /v1/models`. Asking is one loopback connection per port, all at
//! once, each given [`PROBE_TIMEOUT`]; a closed port answers at once.

use std::time::Duration;

use crate::{OpenAiConfig, OpenAiProvider};

/// The servers looked for, in the order they are preferred.
pub const KNOWN_SERVERS: &[(&str, u16)] = &[
    ("Ollama", 11434),
    ("LM Studio", 1234),
    ("llama.cpp server", 8080),
    ("vLLM", 8000),
];

/// How long one port may take to list its models.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// A model server found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalServer {
    /// What usually listens on its port (`Ollama` …), or `port N` for one asked for by
    /// number.
    pub name: String,
    /// `http://127.0.0.1:PORT/v1`, as the OpenAI provider takes it.
    pub base_url: String,
    /// The models it lists, in its order; never empty.
    pub models: Vec<String>,
}

/// The first of `ports` (each with a name) where an OpenAI-compatible server lists at least
/// one model, in the order given; `None` when none does.
pub async fn find(ports: &[(String, u16)]) -> Option<LocalServer> {
    find_all(ports).await.into_iter().next()
}

/// Every one of `ports` where an OpenAI-compatible server lists at least one model, in the
/// order given (all asked at once).
pub async fn find_all(ports: &[(String, u16)]) -> Vec<LocalServer> {
    let asks = ports.iter().map(|(name, port)| async move {
        let base_url = format!("http://127.0.0.1:{port}/v1");
        let provider = OpenAiProvider::new(OpenAiConfig {
            base_url: base_url.clone(),
            api_key: None,
            max_retries: 0,
            ..OpenAiConfig::default()
        })
        .ok()?;
        let models = tokio::time::timeout(PROBE_TIMEOUT, provider.models())
            .await
            .ok()?
            .ok()?;
        (!models.is_empty()).then(|| LocalServer {
            name: name.clone(),
            base_url,
            models,
        })
    });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The model a chat should default to among `models` (in the server's order): the first that
/// is not obviously for something else — embeddings, speech, images, moderation — else the
/// first.
pub fn chat_model(models: &[String]) -> Option<String> {
    const NOT_CHAT: &[&str] = &[
        "embed",
        "whisper",
        "tts",
        "dall-e",
        "moderation",
        "rerank",
        "transcribe",
        "image",
    ];
    models
        .iter()
        .find(|m| {
            let m = m.to_ascii_lowercase();
            !NOT_CHAT.iter().any(|n| m.contains(n))
        })
        .or_else(|| models.first())
        .cloned()
}

/// The ports to ask: [`KNOWN_SERVERS`], or `spec` — `off` (none) or a comma-separated list
/// of ports — when given (`SWITCHBOARD_LOCAL_MODEL_PORTS`).
pub fn ports(spec: Option<&str>) -> Result<Vec<(String, u16)>, String> {
    let Some(spec) = spec.map(str::trim) else {
        return Ok(KNOWN_SERVERS
            .iter()
            .map(|(n, p)| ((*n).to_string(), *p))
            .collect());
    };
    if spec.eq_ignore_ascii_case("off") || spec.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    spec.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("{p:?} is not a port (a list like 11434,1234, or off)"))?;
            let name = KNOWN_SERVERS
                .iter()
                .find(|(_, known)| *known == port)
                .map_or_else(|| format!("port {port}"), |(n, _)| (*n).to_string());
            Ok((name, port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_ports_asked() {
        assert_eq!(ports(None).unwrap().len(), KNOWN_SERVERS.len());
        assert_eq!(ports(Some("off")).unwrap(), Vec::new());
        assert_eq!(
            ports(Some("1234, 9999")).unwrap(),
            vec![
                ("LM Studio".to_string(), 1234),
                ("port 9999".to_string(), 9999)
            ]
        );
        assert!(ports(Some("ollama")).unwrap_err().contains("not a port"));
    }

    #[test]
    fn the_default_model_is_one_to_chat_with() {
        let listed = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            chat_model(&listed(&["nomic-embed-text", "whisper-1", "llama3.2"])).as_deref(),
            Some("llama3.2")
        );
        assert_eq!(
            chat_model(&listed(&["text-embedding-3"])).as_deref(),
            Some("text-embedding-3")
        );
        assert_eq!(chat_model(&[]), None);
    }

    #[tokio::test]
    async fn a_closed_port_is_not_a_server() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        assert_eq!(find(&[("x".into(), port)]).await, None);
    }
}
