//! Search: `GET /v1/search`.

use switchboard_protocol::search::{SearchParams, SearchResponse};

use crate::{Client, ClientError};

impl Client {
    /// `GET /v1/search`: a page of hits among the sessions this client's token sees.
    pub async fn search(&self, q: &SearchParams) -> Result<SearchResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/search").query(q))
            .await
    }

    /// `GET /v1/sessions/{id}/search`: the search the session's agent makes (what the
    /// session's owner sees), with the session's own token.
    pub async fn session_search(
        &self,
        session: uuid::Uuid,
        q: &SearchParams,
    ) -> Result<SearchResponse, ClientError> {
        let path = format!("/v1/sessions/{session}/search");
        self.json(self.request(reqwest::Method::GET, &path).query(q))
            .await
    }
}
