//! The gateway's notification route and the scheduler's routes.

use switchboard_protocol::gateway::{
    GatewayAskRequest, GatewayAskResponse, GatewayExpireRequest, GatewayExpireResponse,
    GatewaySendRequest, GatewaySendResponse, GatewayStatus,
};
use switchboard_protocol::schedules::{
    Firing, ListFiringsResponse, ListSchedulesResponse, Schedule, ScheduleSpec,
    UpdateScheduleRequest,
};
use uuid::Uuid;

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

    /// `GET /v1/schedules`.
    pub async fn list_schedules(&self) -> Result<ListSchedulesResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/schedules"))
            .await
    }

    /// `POST /v1/schedules`.
    pub async fn create_schedule(&self, spec: &ScheduleSpec) -> Result<Schedule, ClientError> {
        self.json(
            self.request(reqwest::Method::POST, "/v1/schedules")
                .json(spec),
        )
        .await
    }

    /// `GET /v1/schedules/{id}`.
    pub async fn get_schedule(&self, id: Uuid) -> Result<Schedule, ClientError> {
        self.json(self.request(reqwest::Method::GET, &format!("/v1/schedules/{id}")))
            .await
    }

    /// `PATCH /v1/schedules/{id}`.
    pub async fn update_schedule(
        &self,
        id: Uuid,
        req: &UpdateScheduleRequest,
    ) -> Result<Schedule, ClientError> {
        self.json(
            self.request(reqwest::Method::PATCH, &format!("/v1/schedules/{id}"))
                .json(req),
        )
        .await
    }

    /// `DELETE /v1/schedules/{id}`.
    pub async fn delete_schedule(&self, id: Uuid) -> Result<(), ClientError> {
        self.send(self.request(reqwest::Method::DELETE, &format!("/v1/schedules/{id}")))
            .await
            .map(|_| ())
    }

    /// `POST /v1/schedules/{id}/run`: a firing now.
    pub async fn run_schedule(&self, id: Uuid) -> Result<Firing, ClientError> {
        self.json(self.request(reqwest::Method::POST, &format!("/v1/schedules/{id}/run")))
            .await
    }

    /// `GET /v1/schedules/{id}/firings`, newest first.
    pub async fn list_firings(&self, id: Uuid) -> Result<ListFiringsResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, &format!("/v1/schedules/{id}/firings")))
            .await
    }

    /// `POST /v1/schedules/{id}/firings/{firing}/deliver`: tries the failed deliveries again.
    pub async fn redeliver_firing(&self, id: Uuid, firing: Uuid) -> Result<Firing, ClientError> {
        self.json(self.request(
            reqwest::Method::POST,
            &format!("/v1/schedules/{id}/firings/{firing}/deliver"),
        ))
        .await
    }
}
