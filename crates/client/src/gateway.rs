//! The gateway's routes: its status, and the notifications and approvals other surfaces
//! post through it.

use switchboard_protocol::gateway::{
    GatewayAskRequest, GatewayAskResponse, GatewayExpireRequest, GatewayExpireResponse,
    GatewaySendRequest, GatewaySendResponse, GatewayStatus,
};

use crate::{Client, ClientError};

impl Client {
    /// `GET /v1/gateway/status` (404 when the server runs no gateway).
    pub async fn gateway_status(&self) -> Result<GatewayStatus, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/gateway/status"))
            .await
    }

    /// `POST /v1/gateway/send`: a notification to a chat.
    pub async fn gateway_send(
        &self,
        req: &GatewaySendRequest,
    ) -> Result<GatewaySendResponse, ClientError> {
        self.json(
            self.request(reqwest::Method::POST, "/v1/gateway/send")
                .json(req),
        )
        .await
    }

    /// [`Self::gateway_send`] with an `Idempotency-Key`: a retry with the same key answers
    /// the first send's message instead of posting it again.
    pub async fn gateway_send_once(
        &self,
        req: &GatewaySendRequest,
        idempotency_key: &str,
    ) -> Result<GatewaySendResponse, ClientError> {
        self.json(
            self.request(reqwest::Method::POST, "/v1/gateway/send")
                .header("Idempotency-Key", idempotency_key)
                .json(req),
        )
        .await
    }

    /// `POST /v1/gateway/approvals`: a chat asked to decide a run's waiting calls.
    pub async fn gateway_ask(
        &self,
        req: &GatewayAskRequest,
    ) -> Result<GatewayAskResponse, ClientError> {
        self.json(
            self.request(reqwest::Method::POST, "/v1/gateway/approvals")
                .json(req),
        )
        .await
    }

    /// `POST /v1/gateway/approvals/{id}/expire`: nobody answered; the calls are rejected.
    pub async fn gateway_expire(
        &self,
        prompt_id: &str,
        reason: &str,
    ) -> Result<GatewayExpireResponse, ClientError> {
        self.json(
            self.request(
                reqwest::Method::POST,
                &format!("/v1/gateway/approvals/{prompt_id}/expire"),
            )
            .json(&GatewayExpireRequest {
                reason: reason.to_string(),
            }),
        )
        .await
    }
}
