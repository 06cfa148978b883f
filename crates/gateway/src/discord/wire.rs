//! Discord's wire types (only the fields used).

use serde::Deserialize;

// Every object-typed field is read strictly: see `platform::wire`.
use crate::platform::wire::{object, object_opt, objects};

#[derive(Debug, Deserialize)]
pub(super) struct ApiUser {
    pub(super) id: String,
    #[serde(default)]
    pub(super) username: String,
    #[serde(default)]
    pub(super) global_name: Option<String>,
    #[serde(default)]
    pub(super) bot: bool,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiReady {
    pub(super) session_id: String,
    pub(super) resume_gateway_url: String,
    #[serde(deserialize_with = "object")]
    pub(super) user: ApiUser,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiAttachment {
    #[serde(default)]
    pub(super) filename: Option<String>,
    /// The CDN URL of the content.
    #[serde(default)]
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) size: Option<u64>,
    #[serde(default)]
    pub(super) content_type: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiReferenced {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) author: Option<ApiUser>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiMessage {
    pub(super) id: String,
    pub(super) channel_id: String,
    #[serde(default)]
    pub(super) guild_id: Option<String>,
    #[serde(deserialize_with = "object")]
    pub(super) author: ApiUser,
    #[serde(default)]
    pub(super) content: String,
    #[serde(default, deserialize_with = "objects")]
    pub(super) mentions: Vec<ApiUser>,
    #[serde(default, rename = "type")]
    pub(super) kind: u64,
    #[serde(default, deserialize_with = "objects")]
    pub(super) attachments: Vec<ApiAttachment>,
    #[serde(default)]
    pub(super) webhook_id: Option<String>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) referenced_message: Option<ApiReferenced>,
    #[serde(default)]
    pub(super) channel_type: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiMember {
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) user: Option<ApiUser>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiMessageId {
    pub(super) id: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiComponentData {
    #[serde(default)]
    pub(super) custom_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiInteraction {
    pub(super) id: String,
    #[serde(rename = "type")]
    pub(super) kind: u64,
    pub(super) token: String,
    #[serde(default)]
    pub(super) application_id: Option<String>,
    #[serde(default)]
    pub(super) channel_id: Option<String>,
    #[serde(default)]
    pub(super) guild_id: Option<String>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) member: Option<ApiMember>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) user: Option<ApiUser>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) message: Option<ApiMessageId>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) data: Option<ApiComponentData>,
}
