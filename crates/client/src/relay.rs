//! `/v1/relay/*` methods. Relay errors keep their `details` (e.g. which capability and
//! targets an `authorization_forbidden` names), so they come back as [`RelayClientError`].

use std::time::Duration;

use serde::de::DeserializeOwned;
use switchboard_protocol::relay::{
    AuditResponse, BundlesResponse, Delivery, HostingResponse, ListResponse, LookResponse,
    RelayErrorBody, SendRequest, SendResponse, TargetResult,
};

use crate::{Client, ClientError};

/// A relay call that failed: the relay's own error, or no usable answer at all.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RelayClientError {
    #[error("{} ({})", .body.message, .body.code)]
    Relay { status: u16, body: RelayErrorBody },
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl RelayClientError {
    /// The stable code (`transport_error` when the server never answered).
    pub fn code(&self) -> &str {
        match self {
            Self::Relay { body, .. } => &body.code,
            Self::Client(e) => e.code().unwrap_or("transport_error"),
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::Relay { body, .. } => body.message.clone(),
            Self::Client(e) => e.to_string(),
        }
    }

    pub fn details(&self) -> serde_json::Value {
        match self {
            Self::Relay { body, .. } => body.details.clone(),
            Self::Client(_) => serde_json::json!({}),
        }
    }
}

/// How long a sync send may wait for its deliveries (the relay bounds each wait itself).
const SYNC_SEND_TIMEOUT: Duration = Duration::from_secs(3600);

fn seg(s: &str) -> String {
    // Bundle and member names are `[A-Za-z][A-Za-z0-9_-]*`; anything else is escaped so a
    // bad name reaches the server as a 404, not as another path.
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Client {
    async fn relay_json<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, RelayClientError> {
        let resp = req
            .send()
            .await
            .map_err(|e| ClientError::from_reqwest(&e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ClientError::from_reqwest(&e))?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes)
                .map_err(|e| ClientError::Decode(format!("relay answer: {e}")).into());
        }
        match serde_json::from_slice::<RelayErrorBody>(&bytes) {
            Ok(body) => Err(RelayClientError::Relay { status, body }),
            Err(_) => {
                let text: String = String::from_utf8_lossy(&bytes).chars().take(500).collect();
                Err(ClientError::Api {
                    status,
                    code: format!("http_{status}"),
                    message: text,
                    request_id: String::new(),
                }
                .into())
            }
        }
    }

    /// `GET /v1/relay/bundles`.
    pub async fn relay_bundles(&self) -> Result<BundlesResponse, RelayClientError> {
        self.relay_json(self.request(reqwest::Method::GET, "/v1/relay/bundles"))
            .await
    }

    /// `POST /v1/relay/bundles/{bundle}/up`.
    pub async fn relay_up(&self, bundle: &str) -> Result<HostingResponse, RelayClientError> {
        let path = format!("/v1/relay/bundles/{}/up", seg(bundle));
        self.relay_json(
            self.request(reqwest::Method::POST, &path)
                .timeout(Duration::from_secs(300)),
        )
        .await
    }

    /// `POST /v1/relay/bundles/{bundle}/down`.
    pub async fn relay_down(&self, bundle: &str) -> Result<HostingResponse, RelayClientError> {
        let path = format!("/v1/relay/bundles/{}/down", seg(bundle));
        self.relay_json(
            self.request(reqwest::Method::POST, &path)
                .timeout(Duration::from_secs(300)),
        )
        .await
    }

    /// `GET /v1/relay/bundles/{bundle}?as=MEMBER`.
    pub async fn relay_list(
        &self,
        bundle: &str,
        as_member: Option<&str>,
    ) -> Result<ListResponse, RelayClientError> {
        let path = format!("/v1/relay/bundles/{}", seg(bundle));
        let mut req = self.request(reqwest::Method::GET, &path);
        if let Some(m) = as_member {
            req = req.query(&[("as", m)]);
        }
        self.relay_json(req).await
    }

    /// `POST /v1/relay/bundles/{bundle}/send`.
    pub async fn relay_send(
        &self,
        bundle: &str,
        body: &SendRequest,
    ) -> Result<SendResponse, RelayClientError> {
        let path = format!("/v1/relay/bundles/{}/send", seg(bundle));
        let mut req = self.request(reqwest::Method::POST, &path).json(body);
        req = req.timeout(if body.delivery == Delivery::Sync {
            SYNC_SEND_TIMEOUT
        } else {
            // Readiness is checked target by target before the answer.
            Duration::from_secs(120)
        });
        self.relay_json(req).await
    }

    /// `GET /v1/relay/bundles/{bundle}/look?requester=&target=&lines=`.
    pub async fn relay_look(
        &self,
        bundle: &str,
        requester: &str,
        target: &str,
        lines: Option<u32>,
    ) -> Result<LookResponse, RelayClientError> {
        let path = format!("/v1/relay/bundles/{}/look", seg(bundle));
        let mut q = vec![
            ("requester", requester.to_string()),
            ("target", target.to_string()),
        ];
        if let Some(l) = lines {
            q.push(("lines", l.to_string()));
        }
        self.relay_json(self.request(reqwest::Method::GET, &path).query(&q))
            .await
    }

    /// `GET /v1/relay/bundles/{bundle}/audit?limit=&event=`.
    pub async fn relay_audit(
        &self,
        bundle: &str,
        limit: Option<usize>,
        event: Option<&str>,
    ) -> Result<AuditResponse, RelayClientError> {
        let path = format!("/v1/relay/bundles/{}/audit", seg(bundle));
        let mut q = Vec::new();
        if let Some(l) = limit {
            q.push(("limit", l.to_string()));
        }
        if let Some(e) = event {
            q.push(("event", e.to_string()));
        }
        self.relay_json(self.request(reqwest::Method::GET, &path).query(&q))
            .await
    }

    /// `GET /v1/relay/bundles/{bundle}/messages/{id}`.
    pub async fn relay_message(
        &self,
        bundle: &str,
        message_id: &str,
    ) -> Result<TargetResult, RelayClientError> {
        let path = format!(
            "/v1/relay/bundles/{}/messages/{}",
            seg(bundle),
            seg(message_id)
        );
        self.relay_json(self.request(reqwest::Method::GET, &path))
            .await
    }
}
