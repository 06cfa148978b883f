//! The scheduler's routes.

use switchboard_protocol::schedules::{
    Firing, ListFiringsResponse, ListSchedulesResponse, Schedule, ScheduleSpec,
    UpdateScheduleRequest,
};
use uuid::Uuid;

use crate::{Client, ClientError};

impl Client {
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
