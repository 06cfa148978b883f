//! Usage and budgets: `/v1/usage`, `/v1/usage/calls`, `/v1/budgets`.

use switchboard_protocol::usage::{
    BudgetSpec, BudgetStatus, BudgetsResponse, UsageCallsResponse, UsageQuery, UsageReportResponse,
};

use crate::team::seg;
use crate::{Client, ClientError};

impl Client {
    /// `GET /v1/usage`.
    pub async fn usage(&self, q: &UsageQuery) -> Result<UsageReportResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/usage").query(q))
            .await
    }

    /// `GET /v1/usage/calls`.
    pub async fn usage_calls(&self, q: &UsageQuery) -> Result<UsageCallsResponse, ClientError> {
        self.json(
            self.request(reqwest::Method::GET, "/v1/usage/calls")
                .query(q),
        )
        .await
    }

    /// `GET /v1/providers/current/models`: the models the built-in agent's provider lists.
    pub async fn current_models(
        &self,
    ) -> Result<switchboard_protocol::settings::ModelsResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/providers/current/models"))
            .await
    }

    /// `GET /v1/budgets`.
    pub async fn budgets(&self) -> Result<BudgetsResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/budgets"))
            .await
    }

    /// `PUT /v1/budgets/{name}`.
    pub async fn put_budget(&self, spec: &BudgetSpec) -> Result<BudgetStatus, ClientError> {
        let path = format!("/v1/budgets/{}", seg(&spec.name));
        self.json(self.request(reqwest::Method::PUT, &path).json(spec))
            .await
    }

    /// `DELETE /v1/budgets/{name}`.
    pub async fn delete_budget(&self, name: &str) -> Result<(), ClientError> {
        let path = format!("/v1/budgets/{}", seg(name));
        self.send(self.request(reqwest::Method::DELETE, &path))
            .await
            .map(drop)
    }
}
