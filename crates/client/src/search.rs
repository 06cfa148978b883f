//! Search: `GET /v1/search`.

use switchboard_protocol::search::{SearchParams, SearchResponse};

use crate::{Client, ClientError};

impl Client {
    /// `GET /v1/search`: a page of hits among the sessions this client's token sees.
    pub async fn search(&self, q: &SearchParams) -> Result<SearchResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/search").query(q))
            .await
    }
}
